//! Loss scaling in the `Learner`: an f16 model trains with it, and a `TrainStep` that does not
//! scale its loss, or Burn's own strategy, stops with the fix.

use super::*;

#[test]
fn an_f16_model_trains_with_loss_scaling() {
    let log = strategy_log();
    let model = cast_params(model(), FloatDType::F16);
    let before = evaluate(&model.valid());
    let optim = SamConfig::new()
        .with_rho(0.05)
        .with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(1024.0)))
        .init(sgd());
    let trained = sam_two_epochs("f16", model, optim);
    let dir = artifacts_path("f16");
    let after = evaluate(&trained);
    println!("f16: (accuracy, loss) before {before:?}, after two epochs {after:?}");
    assert_eq!(trained.mlp.layers[0].weight.val().dtype(), DType::F16);
    assert!(
        after.0 >= 0.9 && after.1 < before.1 / 2.0,
        "{before:?} -> {after:?}"
    );
    let record = sam_record::<SgdOptim>(&dir, 2);
    let scaler = record
        .mixed_precision
        .loss_scaler
        .expect("the scaler is checkpointed");
    assert_eq!(record.stats.steps, 16, "2 epochs of 8 batches");
    assert_eq!(scaler.overflows, u64::from(scaler.scale < 1024.0));
    assert_eq!(
        record.mixed_precision.master_weights.len(),
        4,
        "f32 masters of the f16 weights"
    );
    // The loss scale and the overflowed steps are reported once per epoch, after a first line
    // that says SAM is on.
    let log = log.lock().unwrap();
    let start = "burn-sam: SamTraining: SAM (Sam), rho 0.05, 2 passes per step; \
                 loss scaling on (scale 1024); 1 batch per step; 1 device";
    assert!(log.iter().any(|l| l == start), "{log:?}");
    for epoch in [1, 2] {
        let line = format!("epoch {epoch}: loss scale ");
        assert!(log.iter().any(|l| l.starts_with(&line)), "{log:?}");
    }
}

/// The classifier with a `TrainStep` that back-propagates its loss as it is.
#[derive(Module, Debug)]
struct Unscaled<B: Backend> {
    classifier: Classifier<B>,
}

impl<B: AutodiffBackend> TrainStep for Unscaled<B> {
    type Input = ClassBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: ClassBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let item = self.classifier.forward_classification(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl<B: Backend> InferenceStep for Unscaled<B> {
    type Input = ClassBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: ClassBatch<B>) -> ClassificationOutput<B> {
        self.classifier.forward_classification(batch)
    }
}

#[test]
#[should_panic(expected = "the TrainStep did not call burn_sam_accum::train::scale_loss")]
fn loss_scaling_without_scale_loss_in_the_train_step_is_refused() {
    let model = Unscaled {
        classifier: model(),
    };
    let optim = SamConfig::new()
        .with_loss_scaling(Some(LossScalerConfig::new()))
        .init(SgdConfig::new().init());
    let strategy = SamTraining::strategy(Default::default(), &optim);
    SupervisedTraining::new(
        artifacts("unscaled"),
        train_loader(16, None),
        valid_loader(),
    )
    .renderer(Quiet)
    .with_application_logger(None)
    .with_training_strategy(strategy)
    .launch(Learner::new(model, optim, 0.05));
}

/// Burn's own strategy cannot scale the loss: a loss-scaled `Sam` or `MixedPrecision` there stops
/// at the first step, naming `SamTraining`.
#[test]
fn loss_scaling_in_burns_default_strategy_stops_with_the_fix() {
    let scaling = LossScalerConfig::new();
    let sam = SamConfig::new()
        .with_loss_scaling(Some(scaling.clone()))
        .init(sgd());
    let message = first_step_panic("default-scaled-sam", |dir| {
        let learner = Learner::new(model(), sam, 0.05);
        run(dir, train_loader(16, None), 2, learner, None, None);
    });
    assert!(message.contains("not a SAM training strategy"), "{message}");
    let scaled = MixedPrecisionConfig::new(scaling).init(sgd());
    let message = first_step_panic("default-loss-scaled", |dir| {
        let learner = Learner::new(model(), scaled, 0.05);
        run(dir, train_loader(16, None), 2, learner, None, None);
    });
    assert!(
        message.contains("no loss was scaled since the last step")
            && message.contains("burn_sam_accum::train::SamTraining"),
        "{message}"
    );
}
