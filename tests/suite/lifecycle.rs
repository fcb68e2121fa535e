//! One perturbation lifecycle for every variant: between steps the module is `w`, and an
//! error or a skipped step hands back exactly the module the step was given (`StepError`'s
//! rule), before the ascent and after it, in f32 and under loss scaling.

use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use burn_sam::strategy::Passes;
use burn_sam::{LossScalerConfig, LossScaling, Sam, SamConfig, SamError, SamVariant, StepOutcome};
use burn_sam_suite::Mlp;

use super::util::{grads, mse, poison, problem, tensors};

type Batch<B> = (Tensor<B, 2>, Tensor<B, 2>);

/// The gradient of `model`'s loss on `batch`, scaled by `sam`.
fn scaled<B: AutodiffBackend, O>(
    sam: &Sam<O>,
    model: &Mlp<B>,
    (x, y): &Batch<B>,
) -> GradientsParams {
    grads(
        model,
        sam.scale_loss(mse(model.forward(x.clone()), y.clone())),
    )
}

/// The step's ascent, if it has one, from `model`: the module its last pass is taken at.
fn ascend<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(
    sam: &mut Sam<O>,
    model: Mlp<B>,
    batch: &Batch<B>,
) -> Mlp<B> {
    match sam.passes() {
        Passes::Two => {
            let grads = scaled(sam, &model, batch);
            sam.ascend(0.1, model, grads).unwrap()
        }
        Passes::LookAhead => sam.ascend(0.1, model, GradientsParams::new()).unwrap(),
        Passes::One => model,
    }
}

/// Every variant (LookSAM with `k` 2, so that both its kinds of steps come), f32 and
/// loss-scaled: each step first fails in every way it can, then is skipped by an overflow,
/// then is taken; each time the module that comes back is the one given, nothing stays
/// pending, and the run goes on.
pub fn every_variant_hands_back_what_it_was_given<B: AutodiffBackend>() {
    let problem = problem::<B>(4);
    let foreign = super::util::problem::<B>(1).model;
    let variants = SamVariant::all().map(|variant| match variant {
        SamVariant::LookSam { alpha, .. } => SamVariant::LookSam { k: 2, alpha },
        variant => variant,
    });
    for scaling in [None, Some(LossScalerConfig::new().with_init_scale(256.0))] {
        for variant in variants.clone() {
            let what = format!("{} (loss scaling {})", variant.name(), scaling.is_some());
            let sgd =
                SgdConfig::new().with_momentum(Some(MomentumConfig::new().with_dampening(0.0)));
            let mut sam = SamConfig::new()
                .with_rho(0.5)
                .with_variant(variant.clone())
                .with_loss_scaling(scaling.clone())
                .init(sgd.init::<B, Mlp<B>>());
            let mut model = problem.model.clone();
            for (step, batch) in problem.batches.iter().enumerate() {
                let w = tensors(&model);
                let what = format!("{what}, step {step}");
                // Before the ascent: gradients of another module, or (Momentum-SAM) any.
                if sam.passes() != Passes::One {
                    let wrong = match sam.passes() {
                        Passes::LookAhead => scaled(&sam, &model, batch),
                        _ => scaled(&sam, &foreign, batch),
                    };
                    let failed = sam.ascend(0.1, model, wrong).unwrap_err();
                    assert_eq!(tensors(&failed.module), w, "{what}: a refused ascent");
                    assert!(sam.needs_ascent(), "{what}: nothing pending");
                    model = failed.module;
                }
                // After it: gradients of another module, then of an unscaled loss.
                let moved = ascend(&mut sam, model, batch);
                let failed = sam.descend(0.1, moved, scaled(&sam, &foreign, batch));
                let failed = failed.unwrap_err();
                assert_eq!(tensors(&failed.module), w, "{what}: a refused descent");
                model = failed.module;
                if scaling.is_some() {
                    let moved = ascend(&mut sam, model, batch);
                    let unscaled =
                        grads(&moved, mse(moved.forward(batch.0.clone()), batch.1.clone()));
                    let failed = sam.descend(0.1, moved, unscaled).unwrap_err();
                    assert_eq!(failed.error, SamError::UnscaledLoss, "{what}");
                    assert_eq!(tensors(&failed.module), w, "{what}: an unscaled descent");
                    model = failed.module;
                }
                // A skipped step: its descent gradient is not finite.
                let moved = ascend(&mut sam, model, batch);
                let mut faulty = scaled(&sam, &moved, batch);
                poison(&moved, &mut faulty, f64::NAN);
                let (skipped, report) = sam.descend(0.1, moved, faulty).unwrap();
                assert_eq!(report.outcome, StepOutcome::UpdateSkipped, "{what}");
                assert_eq!(tensors(&skipped), w, "{what}: a skipped step");
                // The step itself, and what it hands back is what the next one starts from.
                let moved = ascend(&mut sam, skipped, batch);
                let descent = scaled(&sam, &moved, batch);
                let (stepped, report) = sam.descend(0.1, moved, descent).unwrap();
                assert!(report.outcome.applied(), "{what}: {report:?}");
                assert_ne!(tensors(&stepped), w, "{what}: the step moved nothing");
                assert!(sam.needs_ascent() || sam.passes() == Passes::One, "{what}");
                model = stepped;
            }
        }
    }
}

/// `step_with` hands back `w` for every variant: the module the split phases hand back, bitwise.
pub fn step_with_hands_back_the_phases_w<B: AutodiffBackend>() {
    let problem = problem::<B>(3);
    for variant in SamVariant::all() {
        let sam = || {
            SamConfig::new()
                .with_rho(0.5)
                .with_variant(variant.clone())
                .init(SgdConfig::new().init::<B, Mlp<B>>())
        };
        let (mut whole, mut phased) = (sam(), sam());
        let (mut a, mut b) = (problem.model.clone(), problem.model.clone());
        for batch in &problem.batches {
            let loss = |model: &Mlp<B>| mse(model.forward(batch.0.clone()), batch.1.clone());
            a = whole.step_with(0.1, a, loss).unwrap().module;
            let moved = ascend(&mut phased, b, batch);
            let descent = scaled(&phased, &moved, batch);
            b = phased.descend(0.1, moved, descent).unwrap().0;
            assert_eq!(tensors(&a), tensors(&b), "{}", variant.name());
        }
    }
}
