//! Global-norm gradient clipping (`max_grad_norm`) against PyTorch's `clip_grad_norm_` on the
//! gradient the base optimizer steps with (`reference/clip_reference.py` wrote
//! `tests/fixtures/clip_reference.json`): SAM's descent gradient, with a loss scale (PyTorch's
//! `GradScaler.unscale_` first), over a window of two micro-batches (the combined gradient,
//! clipped once), and `MixedPrecision` without SAM. Half of the reference's steps are clipped.

use std::collections::HashMap;

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use burn_sam::LossScaling;
use burn_sam::{LossScalerConfig, MixedPrecisionConfig, SamConfig};
use burn_sam_accum::{AccumulationConfig, MicroBatch};
use serde::Deserialize;

use super::fixture::{fixture_case, FixtureMlp};
use super::parity::torch_sgd;
use super::util::{assert_close, grads, mse, tensors, tolerance};

#[derive(Deserialize)]
struct Case {
    #[serde(flatten)]
    mlp: FixtureMlp,
    name: String,
    lr: f64,
    momentum: f64,
    rho: f64,
    sam: bool,
    max_norm: f64,
    scale: Option<f64>,
    micro_batches: usize,
    /// `clip_grad_norm_`'s total norm of each step, before clipping.
    norms: Vec<f64>,
    trajectory: Vec<Vec<Vec<f64>>>,
}

/// The step's unclipped norm against the reference's, relative.
fn assert_norm<B: AutodiffBackend>(actual: f64, expected: f64, what: &str) {
    let deviation = (actual - expected).abs() / expected;
    assert!(
        deviation <= tolerance::<B>() * 10.0,
        "{what}: norm {actual} against {expected}"
    );
}

pub fn run<B: AutodiffBackend>(name: &str) {
    let case: Case = fixture_case(include_str!("../fixtures/clip_reference.json"), name);
    let options = HashMap::from([("momentum".to_string(), case.momentum)]);
    // The reference's scale neither grows nor overflows within the run.
    let scaling = case.scale.map(|scale| {
        LossScalerConfig::new()
            .with_init_scale(scale)
            .with_growth_interval(1_000_000)
    });
    let mut model = case.mlp.model::<B>();
    let batch = |row| case.mlp.batch::<B>(row);
    let tolerance = tolerance::<B>();
    if !case.sam {
        let mut optim = MixedPrecisionConfig::new(scaling.expect("a loss scale"))
            .with_max_grad_norm(Some(case.max_norm))
            .init(torch_sgd::<B>(&options));
        for (step, expected) in case.trajectory.iter().enumerate() {
            let (x, y) = batch(step);
            let loss = optim.scale_loss(mse(model.forward(x), y));
            let grads = grads(&model, loss);
            let (stepped, report) = optim.try_step(case.lr, model, grads).expect("a step");
            model = stepped;
            let what = format!("{} step {}", case.name, step + 1);
            assert_norm::<B>(report.grad_norm, case.norms[step], &what);
            assert_close(&tensors(&model), expected, tolerance, &what);
        }
        return;
    }
    let sam = SamConfig::new()
        .with_rho(case.rho)
        .with_loss_scaling(scaling)
        .with_max_grad_norm(Some(case.max_norm))
        .init(torch_sgd::<B>(&options));
    let mut accumulation = AccumulationConfig::new(case.micro_batches).init(sam);
    let loss = |m: &_, (x, y): &(Tensor<B, 2>, Tensor<B, 2>)| {
        mse(burn_sam_suite::Mlp::forward(m, x.clone()), y.clone())
    };
    for (step, expected) in case.trajectory.iter().enumerate() {
        let window: Vec<_> = (0..case.micro_batches)
            .map(|m| MicroBatch::new(batch(step * case.micro_batches + m)))
            .collect();
        let taken = accumulation
            .step(case.lr, model, &window, loss)
            .expect("a step");
        model = taken.module;
        let what = format!("{} step {}", case.name, step + 1);
        assert!(taken.report.applied, "{what}: skipped");
        assert_norm::<B>(taken.report.grad_norm, case.norms[step], &what);
        assert_close(&tensors(&model), expected, tolerance, &what);
    }
}
