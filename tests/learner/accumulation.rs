//! Accumulation in the `Learner`: windows equal the large batch, uneven batches are weighted
//! by their items, and conflicting or zero window settings are refused.

use super::*;

/// A SAM run with the builder's `grads_accumulation(builder)` and, when given,
/// `SamTraining::with_accumulation(ours)`.
fn launch_with_windows(name: &str, builder: usize, ours: Option<usize>) {
    let optim = SamConfig::new().init(sgd());
    let mut strategy = SamTraining::new(Default::default(), &optim);
    if let Some(window) = ours {
        strategy = strategy.with_accumulation(window).unwrap();
    }
    SupervisedTraining::new(artifacts(name), train_loader(16, None), valid_loader())
        .renderer(Quiet)
        .with_application_logger(None)
        .grads_accumulation(builder)
        .with_training_strategy(strategy.into_strategy())
        .launch(Learner::new(model(), optim, 0.05));
}

#[test]
#[should_panic(
    expected = "two accumulation windows: `SupervisedTraining::grads_accumulation(3)` \
                           and `SamTraining::with_accumulation(1)`"
)]
fn two_accumulation_windows_are_refused() {
    launch_with_windows("two-windows", 3, Some(1));
}

#[test]
#[should_panic(expected = "invalid AccumulationConfig: `window` = 0")]
fn grads_accumulation_zero_is_refused_beside_with_accumulation() {
    launch_with_windows("zero-beside", 0, Some(1));
}

#[test]
fn accumulated_windows_equal_the_large_batch() {
    // Batches of 8 in windows of 2 against batches of 16: 120 examples give 7 windows of two
    // and a last, partial window of one batch of 8, like the large batches' last one.
    let model = model();
    let trained = |batch: usize, window: usize, name: &str| {
        let optim = SamConfig::new().with_rho(0.05).init(sgd());
        let strategy = SamTraining::new(Default::default(), &optim)
            .with_accumulation(window)
            .unwrap()
            .with_items(ClassBatch::len);
        let learner = Learner::new(model.clone(), optim, 0.05);
        weights(&run(
            &artifacts(name),
            train_loader(batch, None),
            2,
            learner,
            Some(strategy),
            None,
        ))
    };
    let large = trained(16, 1, "large");
    let accumulated = trained(8, 2, "accumulated");
    let difference = max_difference(&large, &accumulated);
    assert!(
        difference < 1e-5,
        "accumulated against large batch: {difference}"
    );
    // Without accumulation the small batches train differently: the comparison can fail.
    let small = trained(8, 1, "small");
    assert!(max_difference(&large, &small) > 1e-3);
}

#[test]
fn uneven_batches_are_weighted_by_their_items() {
    // One window per epoch: seven batches of 16 and one of 8 against one batch of 120.
    let model = model();
    let trained = |batch: usize, window: usize, items: bool| {
        let optim = SamConfig::new().with_rho(0.05).init(sgd());
        let strategy = SamTraining::new(Default::default(), &optim)
            .with_accumulation(window)
            .unwrap();
        let strategy = if items {
            strategy.with_items(ClassBatch::len)
        } else {
            strategy
        };
        let learner = Learner::new(model.clone(), optim, 0.05);
        let dir = artifacts(&format!("uneven-{batch}-{items}"));
        weights(&run(
            &dir,
            train_loader(batch, None),
            3,
            learner,
            Some(strategy),
            None,
        ))
    };
    let whole = trained(120, 1, false);
    let difference = max_difference(&whole, &trained(16, 8, true));
    assert!(
        difference < 1e-5,
        "weighted by items against one batch: {difference}"
    );
    // Equal weights over-weight the short batch.
    assert!(max_difference(&whole, &trained(16, 8, false)) > 1e-4);
}

#[test]
#[should_panic(expected = "invalid AccumulationConfig: `window` = 0")]
fn grads_accumulation_zero_is_refused_like_with_accumulation_zero() {
    launch_with_windows("accumulation-zero", 0, None);
}

#[test]
fn a_plain_optimizer_accumulates_to_burns_large_batch() {
    // No SAM: one pass per step. Batches of 8 in windows of 2 against Burn's default strategy on
    // batches of 16.
    let model = model();
    let large = run(
        &artifacts("plain-large"),
        train_loader(16, None),
        2,
        Learner::new(model.clone(), sgd(), 0.05),
        None,
        None,
    );
    let optim = sgd();
    let strategy = SamTraining::new(Default::default(), &optim)
        .with_accumulation(2)
        .unwrap()
        .with_items(ClassBatch::len);
    let accumulated = run(
        &artifacts("plain-accumulated"),
        train_loader(8, None),
        2,
        Learner::new(model, optim, 0.05),
        Some(strategy),
        None,
    );
    let difference = max_difference(&weights(&large), &weights(&accumulated));
    assert!(difference < 1e-5, "plain SGD, accumulated: {difference}");
}
