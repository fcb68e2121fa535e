//! Misuse gives a clear error, never silently wrong training, and never loses the module.

use std::panic::{catch_unwind, AssertUnwindSafe};

use burn::optim::momentum::MomentumConfig;
use burn::optim::{Optimizer, SgdConfig};
use burn::tensor::backend::AutodiffBackend;
use burn_sam::strategy::{Handover, Linkable, Phases, StepLink};
use burn_sam::LossScaling;
use burn_sam::{
    LossScalerConfig, MixedPrecisionConfig, SamConfig, SamError, SamVariant, StepError,
};
use burn_sam_suite::{Mlp, MlpConfig};

use super::util::{batch_grads, poison, problem, tensors};

/// The error is `expected`, and the module came back bitwise equal to `intact`.
fn refused<B: AutodiffBackend>(
    failed: StepError<Mlp<B>>,
    expected: SamError,
    intact: &Mlp<B>,
) -> String {
    assert_eq!(failed.error, expected);
    assert_eq!(
        tensors(&failed.module),
        tensors(intact),
        "{expected}: module not handed back intact"
    );
    failed.to_string()
}

pub fn errors_name_the_mistake<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let batch = &problem.batches[0];
    let model = problem.model;
    let other = MlpConfig::new(vec![5, 16, 3]).init::<B>(&Default::default());
    let mut sam = SamConfig::new().init(SgdConfig::new().init());

    let grads = batch_grads(&model, batch);
    let failed = sam.descend(0.1, model.clone(), grads).unwrap_err();
    let message = refused(failed, SamError::DescentWithoutAscent, &model);
    assert!(message.contains("without an ascent"));

    let failed = sam
        .ascend(0.1, model.clone(), batch_grads(&other, batch))
        .unwrap_err();
    let foreign = SamError::ForeignGradients {
        gradients: 4,
        matched: 0,
    };
    refused(failed, foreign.clone(), &model);
    assert!(
        sam.pending_ascent::<B>().is_none(),
        "a rejected ascent leaves nothing pending"
    );

    let perturbed = sam
        .ascend(0.1, model.clone(), batch_grads(&model, batch))
        .unwrap();
    let failed = sam
        .ascend(0.1, perturbed.clone(), batch_grads(&perturbed, batch))
        .unwrap_err();
    refused(failed, SamError::AscentPending, &perturbed);

    let failed = sam
        .descend(0.1, other.clone(), batch_grads(&other, batch))
        .unwrap_err();
    let message = refused(failed, SamError::ForeignModule, &other);
    assert!(message.contains("module returned by the ascent"));

    // The pending ascent survived the foreign module and completes normally.
    let (stepped, _) = sam
        .descend(0.1, perturbed.clone(), batch_grads(&perturbed, batch))
        .unwrap();
    assert_ne!(tensors(&stepped), tensors(&model));
    assert_eq!(sam.stats().steps, 1);

    // Foreign gradients in the descent end the step unfinished, with the weights of before
    // the ascent.
    let perturbed = sam
        .ascend(0.1, stepped.clone(), batch_grads(&stepped, batch))
        .unwrap();
    let failed = sam
        .descend(0.1, perturbed.clone(), batch_grads(&other, batch))
        .unwrap_err();
    refused(failed, foreign, &stepped);
    assert!(sam.pending_ascent::<B>().is_none());
    assert_eq!(sam.stats().steps, 1);
}

pub fn optimizer_step_panics_clearly<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let batch = &problem.batches[0];
    let model = problem.model;
    let other = MlpConfig::new(vec![5, 16, 3]).init::<B>(&Default::default());
    let mut sam = SamConfig::new()
        .init(SgdConfig::new().init())
        .step_per_pass();

    let perturbed = sam.step(0.1, model.clone(), batch_grads(&model, batch));
    drop(perturbed);
    let panic = catch_unwind(AssertUnwindSafe(|| {
        sam.step(0.1, other.clone(), batch_grads(&other, batch))
    }))
    .expect_err("a foreign module in the descent must not train");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("module returned by the ascent"),
        "{message}"
    );
}

/// The message of the panic `step` raises.
fn panic_message(step: impl FnOnce()) -> String {
    let panic = catch_unwind(AssertUnwindSafe(step)).expect_err("the step must be refused");
    panic.downcast_ref::<String>().cloned().unwrap_or_default()
}

/// `Optimizer::step` without a strategy's hand-over, as Burn's default `Learner` strategy makes
/// it once per batch, is refused at the first call with the fix, before anything changes;
/// Momentum-SAM's message speaks of its look-ahead. `step_per_pass` opts in.
pub fn unlinked_optimizer_step_is_refused<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let batch = &problem.batches[0];
    let model = problem.model;
    let sgd = || {
        SgdConfig::new()
            .with_momentum(Some(MomentumConfig::new().with_dampening(0.0)))
            .init()
    };

    let mut sam = SamConfig::new().init(sgd());
    let message = panic_message(|| drop(sam.step(0.1, model.clone(), batch_grads(&model, batch))));
    assert_eq!(
        message,
        SamError::UnlinkedStep {
            variant: "SAM",
            look_ahead: false
        }
        .to_string()
    );
    for fix in [
        "Burn's default `Learner` strategy",
        "SamTraining::strategy",
        "step_per_pass()",
    ] {
        assert!(message.contains(fix), "{fix:?} not in {message}");
    }
    assert!(sam.pending_ascent::<B>().is_none() && sam.stats().steps == 0);

    let mut msam = SamConfig::new()
        .with_rho(1.0)
        .with_variant(SamVariant::momentum_sam())
        .init(sgd());
    let message = panic_message(|| drop(msam.step(0.1, model.clone(), batch_grads(&model, batch))));
    for words in [
        "Momentum-SAM",
        "look-ahead `w~",
        "SamTraining::strategy",
        "GradientsParams::new()",
    ] {
        assert!(message.contains(words), "{words:?} not in {message}");
    }
    assert_eq!(msam.stats().steps, 0);

    // Opted in, the same calls train: two per batch for SAM; for Momentum-SAM one without
    // gradients (to `w~`) and one with the gradient there. Gradients for its ascent are
    // refused, the module handed back.
    let mut sam = sam.step_per_pass();
    let perturbed = sam.step(0.1, model.clone(), batch_grads(&model, batch));
    let stepped = sam.step(0.1, perturbed.clone(), batch_grads(&perturbed, batch));
    assert_eq!(sam.stats().steps, 1);
    assert_ne!(tensors(&stepped), tensors(&model));
    let mut msam = msam.step_per_pass();
    assert!(msam.is_step_per_pass());
    let refused = msam.ascend(0.1, model.clone(), batch_grads(&model, batch));
    let refused = refused.expect_err("gradients before the look-ahead");
    assert_eq!(refused.error, SamError::LookAheadGradients);
    assert_eq!(tensors(&refused.module), tensors(&model));
    let ahead = msam.step(0.1, model.clone(), burn::optim::GradientsParams::new());
    let stepped = msam.step(0.1, ahead.clone(), batch_grads(&ahead, batch));
    assert_eq!(msam.stats().steps, 1);
    assert_ne!(tensors(&stepped), tensors(&model));
}

/// A strategy linked to one optimizer that steps another (built from the same config) is
/// refused by the one stepped, before it changes anything, with a message naming the link,
/// also under loss scaling (not "no loss was scaled"); the link's own check refuses a
/// hand-over nobody took. A clone shares the link.
pub fn a_step_linked_to_another_optimizer_is_refused<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let batch = &problem.batches[0];
    let model = problem.model;
    let gradient = Handover::Gradient { loss_scale: None };
    let config = SamConfig::new().with_rho(0.1);
    let expected = SamError::LinkedToAnotherOptimizer.to_string();
    assert!(expected.contains("the `Learner` stepped another optimizer"));

    let mut stepped = config.init(SgdConfig::new().init());
    let linked = config.init(SgdConfig::new().init::<B, Mlp<B>>());
    let link = linked.step_link();
    link.hand_over(gradient);
    let message =
        panic_message(|| drop(stepped.step(0.1, model.clone(), batch_grads(&model, batch))));
    assert_eq!(message, expected);
    assert!(stepped.pending_ascent::<B>().is_none());
    assert_eq!(link.check_taken(), Err(SamError::LinkedToAnotherOptimizer));

    let scaling = LossScalerConfig::new().with_init_scale(64.0);
    let scaled = config.clone().with_loss_scaling(Some(scaling.clone()));
    let linked = scaled.init(SgdConfig::new().init::<B, Mlp<B>>());
    let link = linked.step_link();
    let mut stepped = scaled.init(SgdConfig::new().init());
    let mut loss_scaled = MixedPrecisionConfig::new(scaling).init(SgdConfig::new().init());
    let scaled_gradient = Handover::Gradient {
        loss_scale: Some(64.0),
    };
    link.hand_over(scaled_gradient);
    let message =
        panic_message(|| drop(stepped.step(0.1, model.clone(), batch_grads(&model, batch))));
    assert_eq!(message, expected);
    assert!(link.check_taken().is_err());
    link.hand_over(scaled_gradient);
    let message =
        panic_message(|| drop(loss_scaled.step(0.1, model.clone(), batch_grads(&model, batch))));
    assert_eq!(message, expected);
    assert!(link.check_taken().is_err());

    // The optimizer the link came from, or a clone of it, takes the hand-over.
    let mut optim = config.init(SgdConfig::new().init());
    let link = optim.step_link();
    let mut clone = optim.clone();
    link.hand_over(gradient);
    let perturbed = clone.step(0.1, model.clone(), batch_grads(&model, batch));
    assert_eq!(link.check_taken(), Ok(()));
    link.hand_over(gradient);
    drop(optim.step(0.1, perturbed.clone(), batch_grads(&perturbed, batch)));
    assert_eq!(link.check_taken(), Ok(()));

    // A link to a Burn optimizer (which reads no hand-over) has nothing to check, and leaves
    // nothing in flight: a direct call afterwards is an unlinked one.
    let plain = StepLink::plain();
    plain.hand_over(gradient);
    assert_eq!(plain.check_taken(), Ok(()));
    let mut sam = config.init(SgdConfig::new().init());
    let message = panic_message(|| drop(sam.step(0.1, model.clone(), batch_grads(&model, batch))));
    assert!(message.contains("not a SAM training strategy"), "{message}");
}

/// With loss scaling on, gradients of a loss nobody scaled are refused (they would be divided
/// by the scale): by `Sam`'s phases and `MixedPrecision::try_step` with the module back, by
/// `Optimizer::step` with a panic naming the fix. Scaled through the optimizer, they pass.
pub fn unscaled_loss_is_refused<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let batch = &problem.batches[0];
    let model = problem.model;
    let scaling = LossScalerConfig::new().with_init_scale(1024.0);
    let mut sam = SamConfig::new()
        .with_loss_scaling(Some(scaling.clone()))
        .init(SgdConfig::new().init());

    let failed = sam
        .ascend(0.1, model.clone(), batch_grads(&model, batch))
        .unwrap_err();
    let message = refused(failed, SamError::UnscaledLoss, &model);
    assert!(message.contains("scale_loss") && message.contains("SamTraining"));
    assert!(sam.pending_ascent::<B>().is_none());

    let scaled = |sam: &burn_sam::Sam<_>, model: &Mlp<B>| {
        let (x, y) = batch;
        let loss = (model.forward(x.clone()) - y.clone()).powi_scalar(2).mean();
        let grads = sam.scale_loss(loss).backward();
        burn::optim::GradientsParams::from_grads(grads, model)
    };
    let perturbed = sam
        .ascend(0.1, model.clone(), scaled(&sam, &model))
        .unwrap();
    let failed = sam
        .descend(0.1, perturbed.clone(), batch_grads(&perturbed, batch))
        .unwrap_err();
    refused(failed, SamError::UnscaledLoss, &model);
    let perturbed = sam
        .ascend(0.1, model.clone(), scaled(&sam, &model))
        .unwrap();
    let grads = scaled(&sam, &perturbed);
    sam.descend(0.1, perturbed, grads).unwrap();

    // A loss scaled in a step that ended without using it does not vouch for the next one.
    let perturbed = sam
        .ascend(0.1, model.clone(), scaled(&sam, &model))
        .unwrap();
    drop(scaled(&sam, &perturbed));
    let restored = sam.restore(perturbed).unwrap();
    let failed = sam
        .ascend(0.1, restored.clone(), batch_grads(&restored, batch))
        .unwrap_err();
    refused(failed, SamError::UnscaledLoss, &restored);

    let mut optim = MixedPrecisionConfig::new(scaling).init(SgdConfig::new().init());
    let failed = optim
        .try_step(0.1, model.clone(), batch_grads(&model, batch))
        .unwrap_err();
    refused(failed, SamError::UnscaledLoss, &model);
    let panic = catch_unwind(AssertUnwindSafe(|| {
        optim.step(0.1, model.clone(), batch_grads(&model, batch))
    }))
    .expect_err("unscaled gradients must not train");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("no loss was scaled"), "{message}");
}

/// The loss scale's hard stop (`max_overflows_at_min`) in a step whose ascent overflowed, in
/// the descent and in a loss-scaled step, and `step_with` over a pending ascent: errors with
/// the module intact.
pub fn hard_stop_and_step_with_hand_the_module_back<B: AutodiffBackend>() {
    let problem = problem::<B>(1);
    let batch = &problem.batches[0];
    let model = problem.model;
    let stop = LossScalerConfig::new()
        .with_init_scale(1.0)
        .with_min_scale(Some(1.0))
        .with_max_overflows_at_min(Some(1));
    let scaled = |handle: &burn_sam::LossScaleHandle, model: &Mlp<B>, overflow: bool| {
        let (x, y) = batch;
        let loss = (model.forward(x.clone()) - y.clone()).powi_scalar(2).mean();
        let mut grads =
            burn::optim::GradientsParams::from_grads(handle.scale_loss(loss).backward(), model);
        if overflow {
            poison(model, &mut grads, f64::INFINITY);
        }
        grads
    };
    let stopped = |message: String| assert!(message.contains("max_overflows_at_min"), "{message}");

    let mut sam = SamConfig::new()
        .with_loss_scaling(Some(stop.clone()))
        .init(SgdConfig::new().init::<B, Mlp<B>>());
    let handle = sam.loss_scale_handle();
    // An overflowing ascent waits for nothing: the weights stay at `w`, and the step's one
    // read (in the descent) finds the overflow.
    let perturbed = sam
        .ascend(0.1, model.clone(), scaled(&handle, &model, true))
        .unwrap();
    assert_eq!(tensors(&perturbed), tensors(&model));
    let failed = sam
        .descend(0.1, perturbed, scaled(&handle, &model, true))
        .unwrap_err();
    assert_eq!(tensors(&failed.module), tensors(&model));
    stopped(failed.to_string());
    assert!(sam.pending_ascent::<B>().is_none());

    let mut sam = SamConfig::new()
        .with_loss_scaling(Some(stop.clone()))
        .init(SgdConfig::new().init::<B, Mlp<B>>());
    let handle = sam.loss_scale_handle();
    let perturbed = sam
        .ascend(0.1, model.clone(), scaled(&handle, &model, false))
        .unwrap();
    let grads = scaled(&handle, &perturbed, true);
    let failed = sam.descend(0.1, perturbed, grads).unwrap_err();
    assert_eq!(tensors(&failed.module), tensors(&model));
    stopped(failed.to_string());

    let mut optim = MixedPrecisionConfig::new(stop).init(SgdConfig::new().init::<B, Mlp<B>>());
    let grads = scaled(&optim.loss_scale_handle(), &model, true);
    let failed = optim.try_step(0.1, model.clone(), grads).unwrap_err();
    assert_eq!(tensors(&failed.module), tensors(&model));
    stopped(failed.to_string());

    let mut sam = SamConfig::new().init(SgdConfig::new().init());
    let perturbed = sam
        .ascend(0.1, model.clone(), batch_grads(&model, batch))
        .unwrap();
    let (x, y) = batch;
    let failed = sam
        .step_with(0.1, perturbed.clone(), |m: &Mlp<B>| {
            (m.forward(x.clone()) - y.clone()).powi_scalar(2).mean()
        })
        .unwrap_err();
    refused(failed, SamError::AscentPending, &perturbed);
}
