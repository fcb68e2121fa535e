//! Training through `SamTraining`: it improves the model, rho = 0 is Burn's default strategy,
//! the LR scheduler advances once per optimizer step, every variant and schedule equals its
//! `step_with`, Momentum-SAM trains at its look-ahead, data-parallel logs its traffic.

use super::*;

#[test]
fn two_epochs_of_sam_improve_accuracy() {
    let model = model();
    let before = evaluate(&model.valid());
    let trained = sam_two_epochs(
        "improve",
        model,
        SamConfig::new().with_rho(0.05).init(sgd()),
    );
    let after = evaluate(&trained);
    println!("(accuracy, loss) before {before:?}, after two epochs {after:?}");
    // The initialisation is random: its accuracy varies, its loss is near ln 3.
    assert!(
        after.0 >= 0.9 && after.1 < before.1 / 2.0,
        "{before:?} -> {after:?}"
    );
}

#[test]
fn rho_zero_is_burns_default_strategy() {
    let model = model();
    let burn_dir = artifacts("default");
    let burn = run(
        &burn_dir,
        train_loader(16, Some(3)),
        2,
        Learner::new(model.clone(), sgd(), 0.05),
        None,
        None,
    );
    let optim = SamConfig::new().with_rho(0.0).init(sgd());
    let ours = sam_two_epochs("rho-zero", model.clone(), optim);
    let dir = artifacts_path("rho-zero");
    let difference = max_difference(&weights(&burn), &weights(&ours));
    assert_eq!(difference, 0.0, "rho = 0 against Burn's default strategy");
    // The metric logs too: one entry per batch (from the first pass) and per validation batch.
    for log in [
        "train/epoch-1/Loss.log",
        "train/epoch-2/Accuracy.log",
        "valid/epoch-2/Loss.log",
    ] {
        let read = |dir: &Path| std::fs::read_to_string(dir.join(log)).unwrap();
        assert_eq!(read(&dir), read(&burn_dir), "{log}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("train/epoch-2/Loss.log"))
            .unwrap()
            .lines()
            .count(),
        8
    );
    // And SAM with rho > 0 does differ: the comparison can fail.
    let sam = sam_two_epochs(
        "rho-positive",
        model,
        SamConfig::new().with_rho(0.05).init(sgd()),
    );
    assert!(max_difference(&weights(&burn), &weights(&sam)) > 1e-3);
}

/// SGD that records the learning rate of each of its steps.
#[derive(Clone)]
struct RecordLr {
    inner: SgdOptim,
    seen: Arc<Mutex<Vec<LearningRate>>>,
}

impl Optimizer<Model, B> for RecordLr {
    type Record = <SgdOptim as Optimizer<Model, B>>::Record;

    fn step(&mut self, lr: LearningRate, module: Model, grads: GradientsParams) -> Model {
        self.seen.lock().unwrap().push(lr);
        self.inner.step(lr, module, grads)
    }

    fn step_multi(
        &mut self,
        lr: LearningRate,
        module: Model,
        grads: MultiGradientsParams,
    ) -> Model {
        self.seen.lock().unwrap().push(lr);
        self.inner.step_multi(lr, module, grads)
    }

    fn to_record(&self) -> Self::Record {
        self.inner.to_record()
    }

    fn load_record(mut self, record: Self::Record) -> Self {
        self.inner = self.inner.load_record(record);
        self
    }
}

#[test]
fn the_scheduler_advances_once_per_optimizer_step() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let base = RecordLr {
        inner: sgd(),
        seen: seen.clone(),
    };
    let optim = SamConfig::new().with_rho(0.05).init(base);
    // 120 examples in batches of 16: 7 full batches and one of 8; windows of 3.
    let strategy = SamTraining::new(Default::default(), &optim)
        .with_accumulation(3)
        .unwrap()
        .with_items(ClassBatch::len);
    let dir = artifacts("lr");
    run(
        &dir,
        train_loader(16, None),
        2,
        Learner::new(model(), optim, scheduler()),
        Some(strategy),
        None,
    );

    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        2 * 3,
        "ceil(8 / 3) optimizer steps per epoch, 2 epochs"
    );
    let mut reference = scheduler();
    let expected: Vec<LearningRate> = (0..seen.len()).map(|_| reference.step()).collect();
    assert_eq!(seen, expected);
}

#[test]
fn every_variant_and_schedule_in_the_learner_equals_its_step_with() {
    // One epoch, unshuffled: `SamTraining` must run the passes each step takes (one on
    // LookSAM's cheap steps and a schedule's base steps; a second pass there would start the
    // next step), so the Learner's weights equal `step_with`'s over the same batches.
    let adaptive = SamSchedule::Adaptive {
        decay: 0.5,
        threshold_start: 0.5,
        threshold_end: 0.5,
        steps: 8,
    };
    let sam = SamConfig::new().with_rho(0.1);
    for (name, config) in [
        (
            "GSAM",
            sam.clone().with_variant(SamVariant::Gsam { alpha: 0.3 }),
        ),
        (
            "LookSAM",
            sam.clone()
                .with_variant(SamVariant::LookSam { k: 3, alpha: 0.7 }),
        ),
        (
            "Friendly-SAM",
            sam.clone().with_variant(SamVariant::friendly_sam()),
        ),
        (
            "Every-2",
            sam.clone().with_schedule(Some(SamSchedule::Every { k: 2 })),
        ),
        (
            "Random",
            sam.clone()
                .with_schedule(Some(SamSchedule::Random { p: 0.5, seed: 1 })),
        ),
        (
            "Adaptive",
            sam.clone().with_schedule(Some(adaptive.clone())),
        ),
    ] {
        let model = model();
        let mut by_hand = config.init(sgd());
        let mut expected = model.clone();
        let mut outcomes = Vec::new();
        for batch in train_loader(16, None).iter() {
            let step = by_hand
                .step_with(0.05, expected, |m: &Model| m.loss(&batch))
                .unwrap();
            outcomes.push(step.report.outcome);
            expected = step.module;
        }
        if config.schedule.is_some() {
            assert!(
                outcomes.contains(&StepOutcome::BaseStep),
                "{name}: {outcomes:?}"
            );
            assert!(
                outcomes.contains(&StepOutcome::Applied),
                "{name}: {outcomes:?}"
            );
        }

        let optim = config.init(sgd());
        let strategy = SamTraining::new(Default::default(), &optim);
        let learner = Learner::new(model, optim, 0.05);
        let trained = run(
            &artifacts(&format!("variant-{name}")),
            train_loader(16, None),
            1,
            learner,
            Some(strategy),
            None,
        );
        let difference = max_difference(&weights(&trained), &weights(&expected.valid()));
        assert!(difference < 1e-6, "{name}: {difference}");
    }
}

#[test]
fn data_parallel_logs_its_traffic_once_per_epoch() {
    let log = strategy_log();
    let optim = SamConfig::new().with_rho(0.05).init(sgd());
    let devices = vec![Default::default(); 2];
    let strategy = SamTraining::data_parallel(devices, &optim, Ascent::Synced).unwrap();
    let traffic = strategy.traffic();
    let learner = Learner::new(model(), optim, 0.05);
    let dir = artifacts("traffic");
    run(
        &dir,
        train_loader(16, Some(3)),
        1,
        learner,
        Some(strategy),
        None,
    );
    assert!(traffic.steps() > 0 && traffic.bytes() > 0);
    let expected = format!(
        "epoch 1: {:.0} bytes sent between devices and ranks per step ({} steps)",
        traffic.bytes_per_step(),
        traffic.steps()
    );
    let log = log.lock().unwrap();
    assert!(log.contains(&expected), "{expected:?} not in {log:?}");
}

/// Momentum-SAM under `SamTraining`: one pass per step at the look-ahead `w~`, while the
/// Learner's model (validated, saved, returned) is `w` between steps; equal to stepping `Sam`
/// directly through `Optimizer::step`, whose model is `w` between steps too.
#[test]
fn momentum_sam_trains_at_its_look_ahead_and_keeps_w() {
    let config = SamConfig::new()
        .with_rho(1.0)
        .with_variant(SamVariant::MomentumSam { mu: 0.9 });
    let model = model();
    let optim = config.init(sgd());
    let strategy = SamTraining::new(Default::default(), &optim);
    let trained = run(
        &artifacts("momentum-sam"),
        train_loader(16, None),
        1,
        Learner::new(model.clone(), optim, 0.05),
        Some(strategy),
        None,
    );

    let mut direct = config.init(sgd()).step_per_pass();
    let mut w = model;
    let mut steps = 0;
    let mut farthest_look_ahead = 0.0f32;
    for batch in train_loader(16, None).iter() {
        let ahead = direct.step(0.05, w.clone(), GradientsParams::new());
        farthest_look_ahead = farthest_look_ahead.max(max_difference(
            &weights(&w.valid()),
            &weights(&ahead.valid()),
        ));
        let TrainOutput { grads, .. } = TrainStep::step(&ahead, batch);
        w = direct.step(0.05, ahead, grads);
        steps += 1;
    }
    assert_eq!((steps, direct.stats().steps), (8, 8), "one pass per step");
    assert_eq!(
        weights(&trained),
        weights(&w.valid()),
        "the Learner's model is w"
    );
    assert!(farthest_look_ahead > 1e-4, "the passes ran away from w");
}
