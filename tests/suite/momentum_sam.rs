//! Momentum-SAM against the method written out in float64 (`reference/momentum_sam_reference.py`
//! wrote `tests/fixtures/momentum_sam_reference.json`): SGD (also with a `mu` other than SGD's
//! momentum, and over plain SGD) and AdamW flavours, `w` (what every step hands back) and the
//! next look-ahead `w~` after every step; and what it promises beyond a trajectory: one pass
//! per step, overflows that change nothing, records that resume exactly.

use std::collections::HashMap;

use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamWConfig, GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use burn_sam::strategy::Phases;
use burn_sam::LossScaling;
use burn_sam::{LossScalerConfig, Sam, SamConfig, SamVariant, StepOutcome};
use burn_sam_suite::{load_record, record_bytes, Mlp};
use serde::Deserialize;

use super::fixture::{fixture_case, FixtureMlp};
use super::util::{
    assert_close, batch_grads, mse, narrow_scalars, poison, problem, tensors, tolerance,
};

#[derive(Deserialize)]
struct Step {
    weights: Vec<Vec<f64>>,
    perturbed: Vec<Vec<f64>>,
}

#[derive(Deserialize)]
struct Case {
    #[serde(flatten)]
    mlp: FixtureMlp,
    flavour: String,
    rho: f64,
    lr: f64,
    options: HashMap<String, f64>,
    trajectory: Vec<Step>,
}

impl Case {}

/// The case's optimizer: Momentum-SAM over SGD with momentum `mu` (no dampening) or AdamW
/// (`mu = beta_1`), with the case's weight decay.
macro_rules! with_optimizer {
    ($case:expr, $B:ty, |$sam:ident| $body:expr) => {{
        let case = $case;
        let decay = case.options["weight_decay"];
        match case.flavour.as_str() {
            "sgd" => {
                // Momentum-SAM's `mu` may differ from SGD's momentum (0: plain SGD).
                let (mu, base) = (case.options["mu"], case.options["momentum"]);
                let momentum = MomentumConfig::new()
                    .with_momentum(base)
                    .with_dampening(0.0);
                let base = SgdConfig::new()
                    .with_momentum((base != 0.0).then_some(momentum))
                    .with_weight_decay((decay != 0.0).then(|| WeightDecayConfig::new(decay as f32)))
                    .init::<$B, Mlp<$B>>();
                let $sam = config(case.rho, mu).init(base);
                $body
            }
            _ => {
                let mu = case.options["beta_1"];
                let base = AdamWConfig::new()
                    .with_beta_1(mu as f32)
                    .with_beta_2(case.options["beta_2"] as f32)
                    .with_epsilon(case.options["eps"] as f32)
                    .with_weight_decay(decay as f32)
                    .init::<$B, Mlp<$B>>();
                let $sam = config(case.rho, mu).init(base);
                $body
            }
        }
    }};
}

fn config(rho: f64, mu: f64) -> SamConfig {
    SamConfig::new()
        .with_rho(rho)
        .with_variant(SamVariant::MomentumSam { mu })
}

/// The f64 backends to 1e-12, the others to their usual tolerance.
fn momentum_tolerance<B: AutodiffBackend>() -> f64 {
    let tolerance = tolerance::<B>();
    if tolerance <= 1e-10 {
        1e-12
    } else {
        tolerance
    }
}

/// Momentum-SAM's look-ahead from `model` (at `w`): the module its next pass is taken at,
/// from its ascent without gradients, ended without a step.
fn look_ahead<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(
    sam: &mut Sam<O>,
    lr: f64,
    model: Mlp<B>,
) -> Mlp<B> {
    let ahead = sam.ascend(lr, model, GradientsParams::new()).unwrap();
    let looked = ahead.clone();
    sam.restore(ahead).unwrap();
    looked
}

fn follow<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(name: &str, case: &Case, mut sam: Sam<O>) {
    let tolerance = momentum_tolerance::<B>();
    let mut model = case.mlp.model::<B>();
    let mut calls = 0;
    for (step, expected) in case.trajectory.iter().enumerate() {
        let (x, y) = case.mlp.batch::<B>(step);
        let loss = |model: &Mlp<B>| {
            calls += 1;
            mse(model.forward(x.clone()), y.clone())
        };
        let step_result = sam.step_with(case.lr, model, loss).unwrap();
        assert_eq!(step_result.report.outcome, StepOutcome::SinglePass);
        model = step_result.module;
        // The step hands back `w`, the authors' trajectory.
        let what = format!("{name} step {}", step + 1);
        assert_close(
            &tensors(&model),
            &expected.weights,
            tolerance,
            &format!("{what}: w"),
        );
        let ahead = look_ahead(&mut sam, case.lr, model.clone());
        assert_close(
            &tensors(&ahead),
            &expected.perturbed,
            tolerance,
            &format!("{what}: w~"),
        );
    }
    assert_eq!(calls, case.trajectory.len(), "{name}: one pass per step");
}

pub fn run<B: AutodiffBackend>(name: &str) {
    let case: Case = fixture_case(
        include_str!("../fixtures/momentum_sam_reference.json"),
        name,
    );
    with_optimizer!(&case, B, |sam| follow::<B, _>(name, &case, sam));
    // Through `Optimizer::step`, as generic code steps any optimizer: a call without
    // gradients moves to `w~`, a call with the gradient there steps `w`.
    with_optimizer!(&case, B, |sam| {
        let mut sam = sam.step_per_pass();
        let tolerance = momentum_tolerance::<B>();
        let mut model = case.mlp.model::<B>();
        let mut ahead_of = tensors(&model);
        for (step, expected) in case.trajectory.iter().enumerate() {
            let what = format!("{name} step {} (Optimizer::step)", step + 1);
            model = sam.step(case.lr, model, GradientsParams::new());
            assert_close(
                &tensors(&model),
                &ahead_of,
                tolerance,
                &format!("{what}: w~"),
            );
            let grads = batch_grads(&model, &case.mlp.batch::<B>(step));
            model = sam.step(case.lr, model, grads);
            assert_close(
                &tensors(&model),
                &expected.weights,
                tolerance,
                &format!("{what}: w"),
            );
            ahead_of = expected.perturbed.clone();
        }
    });
}

/// One Momentum-SAM step through its phases, with the gradient at `w~` of the loss scaled
/// by `sam`, made infinite when `fault`.
fn phased_step<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(
    sam: &mut Sam<O>,
    model: Mlp<B>,
    (x, y): &(Tensor<B, 2>, Tensor<B, 2>),
    fault: bool,
) -> (Mlp<B>, StepOutcome) {
    let ahead = sam.ascend(0.1, model, GradientsParams::new()).unwrap();
    let loss = sam.scale_loss(mse(ahead.forward(x.clone()), y.clone()));
    let mut grads = GradientsParams::from_grads(loss.backward(), &ahead);
    if fault {
        poison(&ahead, &mut grads, f64::INFINITY);
    }
    let (model, report) = sam.descend(0.1, ahead, grads).unwrap();
    (model, report.outcome)
}

/// An overflow (an infinite gradient under loss scaling) changes nothing: the model handed back
/// is the one given (`w`), the momentum and the next look-ahead are as before, and the run
/// goes on as if the batch had not been seen; the scale halves once.
pub fn overflow_changes_nothing<B: AutodiffBackend>() {
    let problem = problem::<B>(4);
    let scaling = LossScalerConfig::new().with_init_scale(1024.0);
    let sgd = || {
        let momentum = MomentumConfig::new().with_dampening(0.0);
        SgdConfig::new()
            .with_momentum(Some(momentum))
            .init::<B, Mlp<B>>()
    };
    let sam = |scaling: LossScalerConfig| {
        config(0.5, 0.9)
            .with_loss_scaling(Some(scaling))
            .init(sgd())
    };
    let (mut with_fault, mut clean) = (sam(scaling.clone()), sam(scaling));
    let (mut a, mut b) = (problem.model.clone(), problem.model);
    for (step, batch) in problem.batches.iter().enumerate() {
        if step == 2 {
            let before = tensors(&a);
            let (after, outcome) = phased_step(&mut with_fault, a, batch, true);
            assert_eq!(outcome, StepOutcome::UpdateSkipped);
            assert_eq!(tensors(&after), before, "the model handed back");
            assert_eq!(with_fault.loss_scale(), 512.0);
            a = after;
        }
        a = phased_step(&mut with_fault, a, batch, false).0;
        b = phased_step(&mut clean, b, batch, false).0;
        assert_eq!(tensors(&a), tensors(&b), "step {step}: w");
        let (ahead_a, ahead_b) = (
            look_ahead(&mut with_fault, 0.1, a.clone()),
            look_ahead(&mut clean, 0.1, b.clone()),
        );
        assert_eq!(tensors(&ahead_a), tensors(&ahead_b), "step {step}: w~");
    }
    assert_eq!(with_fault.stats().updates_skipped, 1);
}

/// Saving the model (at `w`) and the record, then loading both, continues the run bitwise:
/// nothing to call after the load.
pub fn record_resumes_exactly<B: AutodiffBackend>() {
    let problem = problem::<B>(8);
    let sgd = || {
        let momentum = MomentumConfig::new().with_dampening(0.0);
        SgdConfig::new()
            .with_momentum(Some(momentum))
            .init::<B, Mlp<B>>()
    };
    let config =
        config(0.5, 0.9).with_rho_schedule(Some(burn_sam::RhoSchedule::new(0.0, 0.2, 0.1)));
    let lr = |step: usize| 0.2 - 0.02 * step as f64;
    let step = |sam: &mut Sam<_>, model: Mlp<B>, step: usize, batch| {
        let ahead = sam.step(lr(step), model, GradientsParams::new());
        let grads = batch_grads(&ahead, batch);
        sam.step(lr(step), ahead, grads)
    };
    let mut uninterrupted = config.init(sgd()).step_per_pass();
    let mut model = problem.model.clone();
    for (index, batch) in problem.batches.iter().enumerate() {
        model = step(&mut uninterrupted, model, index, batch);
    }

    let mut first = config.init(sgd()).step_per_pass();
    let mut resumed = problem.model;
    for (index, batch) in problem.batches.iter().enumerate().take(4) {
        resumed = step(&mut first, resumed, index, batch);
    }
    let record = load_record::<B, _>(record_bytes::<B, _>(Optimizer::<Mlp<B>, B>::to_record(
        &first,
    )));
    let mut second = config.init(sgd()).step_per_pass().load_record(record);
    for (index, batch) in problem.batches.iter().enumerate().skip(4) {
        resumed = step(&mut second, resumed, index, batch);
    }
    // A backend whose records hold f32 scalars for f64 tensors (Flex) resumes to their precision.
    if narrow_scalars::<B>() {
        assert_close(&tensors(&resumed), &tensors(&model), 1e-8, "w");
    } else {
        assert_eq!(tensors(&resumed), tensors(&model), "w");
    }
}
