//! Resuming from the `Learner`'s checkpoints: f32 and f16 runs continue exactly with a
//! full-precision recorder, a half-precision one is noticed, and a checkpoint of another
//! variant stops naming its epoch and every mismatch.

use super::*;

#[test]
fn resuming_from_a_checkpoint_equals_the_uninterrupted_run() {
    let model = model();
    let fresh = || {
        let optim = scaled_sam();
        let strategy = SamTraining::new(Default::default(), &optim)
            .with_accumulation(2)
            .unwrap();
        (Learner::new(model.clone(), optim, scheduler()), strategy)
    };

    let whole = artifacts("whole");
    let (learner, strategy) = fresh();
    let uninterrupted = run(
        &whole,
        train_loader(16, Some(5)),
        4,
        learner,
        Some(strategy),
        None,
    );

    let parts = artifacts("parts");
    let (learner, strategy) = fresh();
    run(
        &parts,
        train_loader(16, Some(5)),
        2,
        learner,
        Some(strategy),
        None,
    );
    let (learner, strategy) = fresh();
    let resumed = run(
        &parts,
        train_loader(16, Some(5)),
        4,
        learner,
        Some(strategy),
        Some(2),
    );

    assert_eq!(
        max_difference(&weights(&uninterrupted), &weights(&resumed)),
        0.0
    );
    let (expected, actual) = (
        sam_record::<AdamOptim>(&whole, 4),
        sam_record::<AdamOptim>(&parts, 4),
    );
    assert_eq!(actual.stats, expected.stats);
    assert_eq!(
        actual.stats.steps, 16,
        "4 epochs of ceil(8 batches / 2) steps"
    );
    let (expected, actual) = (
        expected.mixed_precision.loss_scaler.unwrap(),
        actual.mixed_precision.loss_scaler.unwrap(),
    );
    assert!(expected.scale > 256.0, "the scale grew: {}", expected.scale);
    assert_eq!(actual, expected);
}

/// Burn's `CompactRecorder` (README's before 2026-12-06) stores the model's and the base
/// optimizer's float tensors in f16; SAM's own state (f32 master weights, the loss scaler,
/// Momentum-SAM's momentum) is plain numbers, which every recorder stores as they are. So that
/// state is the same in a compact checkpoint as in a full-precision one, while a run resumed
/// from a compact checkpoint of an f32 model does not continue exactly: README's snippets use
/// a full-precision recorder.
#[test]
fn sam_state_survives_a_half_precision_recorder_and_resume_needs_full_precision() {
    // f16 weights with f32 masters, the loss scaler and Momentum-SAM's momentum: all of SAM's
    // own state.
    let f16 = cast_params(model(), FloatDType::F16);
    let optim = || {
        SamConfig::new()
            .with_rho(1.0)
            .with_variant(SamVariant::momentum_sam())
            .with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(1024.0)))
            .init(sgd())
    };
    let checkpointed = |name: &str, compact: bool| {
        let dir = artifacts(name);
        let optim = optim();
        let strategy = SamTraining::new(Default::default(), &optim);
        let learner = Learner::new(f16.clone(), optim, 0.05);
        let loader = train_loader(16, Some(3));
        match compact {
            true => {
                run_recorded(
                    CompactRecorder::new(),
                    &dir,
                    loader,
                    2,
                    learner,
                    Some(strategy),
                    None,
                );
                checkpoint_sam_record_with::<B, Model, SgdOptim, _>(CompactRecorder::new(), &dir, 1)
            }
            false => {
                run(&dir, loader, 2, learner, Some(strategy), None);
                sam_record::<SgdOptim>(&dir, 1)
            }
        }
    };
    let (full, compact) = (checkpointed("full", false), checkpointed("compact", true));
    // By parameter id: records list them in no fixed order.
    fn by_id<T>(entries: impl Iterator<Item = (String, T)>) -> Vec<(String, T)> {
        let mut entries: Vec<_> = entries.collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }
    let masters = |record: &SamRecord| {
        let masters = record.mixed_precision.master_weights.iter();
        by_id(masters.map(|m| (m.id.clone(), m.values.clone())))
    };
    let momentum = |record: &SamRecord| {
        let tensors = record.variant.tensors.iter();
        by_id(tensors.map(|t| (t.id.clone(), t.values.clone())))
    };
    assert_eq!(masters(&compact).len(), 4, "f32 masters of the f16 weights");
    assert_eq!(masters(&compact), masters(&full));
    assert!(!momentum(&full).is_empty());
    assert_eq!(momentum(&compact), momentum(&full));
    assert_eq!(
        compact.mixed_precision.loss_scaler,
        full.mixed_precision.loss_scaler
    );
    assert_eq!(
        (compact.stats, compact.variant.rho),
        (full.stats, full.variant.rho)
    );

    // An f32 model resumed from a compact checkpoint: its weights and SGD's momentum were
    // stored in f16. `SamTraining` says so at resume; a full-precision resume does not.
    let log = strategy_log();
    let warnings = || {
        let warning = "burn-sam: SamTraining: resuming from the checkpoint of epoch 2: the \
                       resumed model is not the model saved beside the optimizer's record";
        let log = log.lock().unwrap();
        log.iter().filter(|line| line.starts_with(warning)).count()
    };
    let initial = model();
    let fresh = || {
        let optim = SamConfig::new().with_rho(0.05).init(sgd());
        let strategy = SamTraining::new(Default::default(), &optim);
        (Learner::new(initial.clone(), optim, 0.05), strategy)
    };
    let whole = artifacts("compact-whole");
    let (learner, strategy) = fresh();
    let loader = || train_loader(16, Some(5));
    let uninterrupted = run(&whole, loader(), 3, learner, Some(strategy), None);
    let parts = artifacts("compact-parts");
    let (learner, strategy) = fresh();
    run_recorded(
        CompactRecorder::new(),
        &parts,
        loader(),
        2,
        learner,
        Some(strategy),
        None,
    );
    let (learner, strategy) = fresh();
    let resumed = run_recorded(
        CompactRecorder::new(),
        &parts,
        loader(),
        3,
        learner,
        Some(strategy),
        Some(2),
    );
    assert_eq!(warnings(), 1, "the compact resume is noticed");
    let apart = max_difference(&weights(&uninterrupted), &weights(&resumed));
    println!("resumed from a compact checkpoint: {apart:e} from the uninterrupted run");
    assert!(
        apart > 0.0,
        "a compact checkpoint resumed exactly: README says otherwise"
    );
    // The same at full precision continues exactly.
    let parts = artifacts("full-parts");
    let (learner, strategy) = fresh();
    run(&parts, loader(), 2, learner, Some(strategy), None);
    let (learner, strategy) = fresh();
    let resumed = run(&parts, loader(), 3, learner, Some(strategy), Some(2));
    assert_eq!(weights(&resumed), weights(&uninterrupted));
    assert_eq!(warnings(), 1, "a full-precision resume is the saved model");
}

type AdamWOptim = OptimizerAdaptor<AdamW, Model, B>;

/// README's f16 run (`cast_params`, loss scaling, `scale_loss` in the `TrainStep`) over AdamW,
/// checkpointed at full precision and resumed from epoch 1: Burn loads the f16 parameters as
/// f32, `SamTraining` puts them back, and the run equals the uninterrupted one bitwise, in f16.
#[test]
fn an_f16_run_resumed_from_its_checkpoint_equals_the_uninterrupted_run() {
    let f16 = cast_params(model(), FloatDType::F16);
    let fresh = || {
        let scaling = LossScalerConfig::new()
            .with_init_scale(256.0)
            .with_growth_interval(3);
        let adamw = AdamWConfig::new().with_weight_decay(0.05).init();
        let optim = SamConfig::new()
            .with_rho(0.05)
            .with_loss_scaling(Some(scaling))
            .init::<AdamWOptim>(adamw);
        let strategy = SamTraining::new(Default::default(), &optim)
            .with_accumulation(3)
            .unwrap();
        (Learner::new(f16.clone(), optim, scheduler()), strategy)
    };
    let loader = || train_loader(16, Some(5));
    let (learner, strategy) = fresh();
    let whole = artifacts("f16-whole");
    let uninterrupted = run(&whole, loader(), 3, learner, Some(strategy), None);
    let parts = artifacts("f16-parts");
    let (learner, strategy) = fresh();
    run(&parts, loader(), 1, learner, Some(strategy), None);
    let (learner, strategy) = fresh();
    let resumed = run(&parts, loader(), 3, learner, Some(strategy), Some(1));
    for model in [&uninterrupted, &resumed] {
        assert_eq!(model.mlp.layers[0].weight.val().dtype(), DType::F16);
    }
    assert_eq!(weights(&resumed), weights(&uninterrupted));
    let (expected, actual) = (
        checkpoint_sam_record::<B, Model, AdamWOptim>(&whole, 3),
        checkpoint_sam_record::<B, Model, AdamWOptim>(&parts, 3),
    );
    assert_eq!(actual.stats, expected.stats);
    let (expected, actual) = (expected.mixed_precision, actual.mixed_precision);
    assert_eq!(actual.loss_scaler, expected.loss_scaler);
    // The same f16 parameters, the same fingerprint of the same weights.
    assert_eq!(actual.model, expected.model);
    assert_eq!(actual.model.unwrap().narrow.len(), 4);
}

/// A Learner checkpoint resumed with another SAM variant and other loss scaling stops before
/// any step, naming the checkpoint's epoch, what it holds, what the optimizer is and both
/// mismatches, each with its fix.
#[test]
fn a_checkpoint_resumed_with_another_variant_stops_naming_its_epoch_and_every_mismatch() {
    let model = model();
    let dir = artifacts_path("resume-other-variant");
    let config = SamConfig::new().with_rho(0.05);
    let friendly = config.clone().with_variant(SamVariant::friendly_sam());
    sam_two_epochs("resume-other-variant", model.clone(), friendly.init(sgd()));
    assert_eq!(
        sam_record::<SgdOptim>(&dir, 2)
            .label
            .and_then(|label| label.epoch),
        Some(2),
        "SamTraining labels its checkpoints with their epoch"
    );

    // Two mismatches: both are named, each with its fix, in one refusal.
    let look = config
        .with_variant(SamVariant::look_sam())
        .with_loss_scaling(Some(LossScalerConfig::new()))
        .init(sgd());
    let strategy = SamTraining::new(Default::default(), &look);
    let learner = Learner::new(model, look, 0.05);
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(
            &dir,
            train_loader(16, Some(3)),
            3,
            learner,
            Some(strategy),
            Some(2),
        )
    }))
    .expect_err("another variant must not resume");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    for words in [
        "(the Learner checkpoint of epoch 2)",
        "Friendly-SAM state",
        "the optimizer is LookSAM",
        "2 mismatches: (1) resume with `loss_scaling` as when it was saved (no loss scaling)",
        "(2) LookSAM's state cannot continue Friendly-SAM's",
    ] {
        assert!(message.contains(words), "{words:?} not in {message}");
    }
    assert!(!dir.join("train/epoch-3").exists(), "no step was taken");
}
