//! Kernel launches and host waits per step on a GPU backend, counted from CubeCL's launch log
//! ([`KernelCache::install_counting_launches`](crate::kernels::KernelCache::install_counting_launches)):
//! what SAM and its family add over their floors (two passes; Momentum-SAM: the base step), on
//! an MLP with 4 parameter tensors and one with 62 (ResNet-18 has 62), and so how that grows
//! with the number of tensors. `tests/vulkan_fused_launches.rs` holds the counts on lavapipe;
//! the GPU check's `launches` stage measures them on CUDA.

use std::path::Path;

use burn::optim::momentum::MomentumConfig;
use burn::optim::SgdConfig;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::FloatDType;
use burn_sam::{LossScalerConfig, SamConfig, SamVariant};
use burn_sam_accum::MicroBatch;

use crate::bench::{
    accumulated_step, base_step, batch, copy_as, sam_step, two_passes_step, window_passes_step,
    Batch, Step,
};
use crate::kernels::KernelCounts;
use crate::{Mlp, MlpConfig};

/// Steps that compile and tune what a step needs.
const WARM_UP: usize = 2;
/// Steps counted (even: LookSAM with k = 2 alternates full and one-pass steps).
const STEPS: usize = 2;
const ROWS: usize = 8;

/// Each measured step and the floor it is compared with.
pub const COMPARED: [(&str, &str); 7] = [
    ("SAM", "two passes"),
    ("ASAM", "two passes"),
    ("GSAM", "two passes"),
    ("LookSAM k=2", "two passes"),
    ("Momentum-SAM", "momentum base"),
    ("f16 loss-scaled SAM", "f16 two passes"),
    ("accumulated SAM", "window of 2, two passes"),
];

/// Launches and host waits per step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerStep {
    pub launches: f64,
    pub waits: f64,
}

/// What one step of [`COMPARED`] adds over its floor.
#[derive(Clone, Debug, PartialEq)]
pub struct Growth {
    pub name: &'static str,
    pub floor: &'static str,
    /// The step on the small and on the large model.
    pub few: PerStep,
    pub many: PerStep,
    /// Launches over the floor on the small and on the large model.
    pub over_few: f64,
    pub over_many: f64,
    /// Launches over the floor per parameter tensor added.
    pub per_tensor: f64,
}

/// Parameter tensors of the two models.
pub const TENSORS: (usize, usize) = (4, 62);

/// Every step of [`COMPARED`] on both models. CubeCL must be counting launches into `log`.
pub fn growth<B: AutodiffBackend>(log: &Path) -> Vec<Growth> {
    let device = Default::default();
    let few: Mlp<B> = MlpConfig::new(vec![784, 32, 10]).init(&device);
    let mut sizes = vec![784];
    sizes.extend([32; 30]);
    sizes.push(10);
    let many: Mlp<B> = MlpConfig::new(sizes).init(&device);
    let few = measure(log, &copy_as(&few, FloatDType::F32));
    let many = measure(log, &copy_as(&many, FloatDType::F32));
    let get = |rows: &[(&str, PerStep)], name: &str| {
        let row = rows.iter().find(|(row, _)| *row == name);
        row.map(|(_, step)| *step).expect("measured")
    };
    let added = (TENSORS.1 - TENSORS.0) as f64;
    COMPARED
        .iter()
        .map(|&(name, floor)| {
            let (step_few, step_many) = (get(&few, name), get(&many, name));
            let over_few = step_few.launches - get(&few, floor).launches;
            let over_many = step_many.launches - get(&many, floor).launches;
            Growth {
                name,
                floor,
                few: step_few,
                many: step_many,
                over_few,
                over_many,
                per_tensor: (over_many - over_few) / added,
            }
        })
        .collect()
}

/// What the log holds once the device has run everything queued (the log is written by
/// CubeCL's logging thread, after the launch).
fn settled<B: AutodiffBackend>(log: &Path) -> KernelCounts {
    B::sync(&Default::default()).expect("device sync");
    std::thread::sleep(std::time::Duration::from_millis(300));
    KernelCounts::read(log)
}

fn per_step<B: AutodiffBackend>(log: &Path, start: &Mlp<B>, mut step: Step<'_, Mlp<B>>) -> PerStep {
    let mut model = start.clone();
    for _ in 0..WARM_UP {
        model = step(model);
    }
    let (before, waits) = (settled::<B>(log), burn_sam::diagnostics::host_waits());
    for _ in 0..STEPS {
        model = step(model);
    }
    let waits = burn_sam::diagnostics::host_waits() - waits;
    let after = settled::<B>(log);
    drop(model);
    PerStep {
        launches: (after.launched - before.launched) as f64 / STEPS as f64,
        waits: waits as f64 / STEPS as f64,
    }
}

/// Each step's launches and waits on `model`, by name.
fn measure<B: AutodiffBackend>(log: &Path, model: &Mlp<B>) -> Vec<(&'static str, PerStep)> {
    let f32_batch: Batch<B> = batch(ROWS, FloatDType::F32);
    let f16_batch: Batch<B> = batch(ROWS, FloatDType::F16);
    let f16_model = copy_as(model, FloatDType::F16);
    let window: Vec<_> = (0..2)
        .map(|_| MicroBatch::with_items(batch::<B>(ROWS, FloatDType::F32), ROWS))
        .collect();
    let sgd = SgdConfig::new;
    let momentum = || sgd().with_momentum(Some(MomentumConfig::new().with_dampening(0.0)));
    let variant = |variant| SamConfig::new().with_variant(variant);
    let scaled =
        SamConfig::new().with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(256.0)));
    let look_sam = SamVariant::LookSam { k: 2, alpha: 0.7 };
    let asam = SamConfig::new().with_adaptive(true);
    let gsam = variant(SamVariant::gsam());
    let msam = variant(SamVariant::momentum_sam());
    let accumulated = accumulated_step(SamConfig::new().init(sgd().init()), &window);
    vec![
        (
            "momentum base",
            per_step(log, model, base_step(momentum(), &f32_batch)),
        ),
        (
            "two passes",
            per_step(log, model, two_passes_step(&f32_batch)),
        ),
        (
            "SAM",
            per_step(log, model, sam_step(SamConfig::new(), sgd(), &f32_batch)),
        ),
        (
            "ASAM",
            per_step(log, model, sam_step(asam, sgd(), &f32_batch)),
        ),
        (
            "GSAM",
            per_step(log, model, sam_step(gsam, sgd(), &f32_batch)),
        ),
        (
            "LookSAM k=2",
            per_step(log, model, sam_step(variant(look_sam), sgd(), &f32_batch)),
        ),
        (
            "Momentum-SAM",
            per_step(log, model, sam_step(msam, momentum(), &f32_batch)),
        ),
        (
            "f16 two passes",
            per_step(log, &f16_model, two_passes_step(&f16_batch)),
        ),
        (
            "f16 loss-scaled SAM",
            per_step(log, &f16_model, sam_step(scaled, sgd(), &f16_batch)),
        ),
        (
            "window of 2, two passes",
            per_step(log, model, window_passes_step(&window, 2)),
        ),
        ("accumulated SAM", per_step(log, model, accumulated)),
    ]
}
