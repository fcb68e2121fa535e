//! Kernel launches and host waits per step on a fused GPU backend (Vulkan with Burn's
//! `fusion`; Mesa lavapipe on a CPU runs the same CubeCL code as CUDA up to the compiler), on
//! a model with few parameter tensors and on one with many: what SAM and its family add over
//! their floors (two passes; Momentum-SAM: the base step), and how that grows with the number
//! of tensors. The counts are held here so that they cannot grow back unnoticed.
//!
//! CubeCL reads its configuration once per process: one test in its own binary.
#![cfg(all(feature = "vulkan", feature = "fusion"))]

use std::path::Path;

use burn::backend::{Autodiff, Vulkan};
use burn::optim::momentum::MomentumConfig;
use burn::optim::SgdConfig;
use burn::tensor::backend::Backend;
use burn::tensor::FloatDType;
use burn_sam::{LossScalerConfig, SamConfig, SamVariant};
use burn_sam_accum::MicroBatch;
use burn_sam_suite::bench::{
    accumulated_step, base_step, batch, copy_as, sam_step, two_passes_step, window_passes_step,
    Batch, Step,
};
use burn_sam_suite::kernels::{KernelCache, KernelCounts};
use burn_sam_suite::{Mlp, MlpConfig};

type B = Autodiff<Vulkan>;
type Model = Mlp<B>;

/// Steps that compile and tune what a step needs.
const WARM_UP: usize = 2;
/// Steps counted (even: LookSAM with k = 2 alternates full and one-pass steps).
const STEPS: usize = 2;
const ROWS: usize = 8;

/// Each measured step, the floor it is compared with, what it may add over that floor in
/// launches per step (on the 4-tensor model, and per parameter tensor added, from 4 to 62),
/// and its host waits per step. Measured (Burn 0.21, lavapipe, `fusion` and `autotune`;
/// docs/performance.md, "Launches and host waits per step"): 23 and 0.41 (SAM), 28 and 0.49
/// (ASAM), 39.5 and 5.73 (LookSAM), 19 and 0.64 (Momentum-SAM), 26 and 0.85 (f16), 35 and
/// 0.65 (accumulated, over two passes of its window), 2 waits each (the step's one read, the
/// closing sync). Each global norm adds the squares of equally long tensors element-wise, one
/// kernel for all of them, and concatenates the rest (here, the 4 tensors of the small model
/// and 3 of the large one); the perturbation's operands are shared by the tensors of one rank,
/// so that it too is one kernel per shape; per-parameter state is kept in its shape, and
/// LookSAM's per-parameter norms are computed stage by stage over all parameters.
/// The bounds add 2 launches and 0.1 per tensor: autotune chooses among reductions that
/// launch one or two kernels, by timing, so a loaded machine may choose another for one norm.
/// A change that adds a launch per tensor, or a wait, fails here.
const BOUNDS: [(&str, &str, f64, f64, f64); 6] = [
    ("SAM", "two passes", 25.0, 0.51, 2.0),
    ("ASAM", "two passes", 30.0, 0.59, 2.0),
    ("LookSAM k=2", "two passes", 41.5, 5.83, 2.0),
    ("Momentum-SAM", "momentum base", 21.0, 0.74, 2.0),
    ("f16 loss-scaled SAM", "f16 two passes", 28.0, 0.95, 2.0),
    (
        "accumulated SAM",
        "window of 2, two passes",
        37.0,
        0.75,
        2.0,
    ),
];

/// Launches and host waits per step.
#[derive(Clone, Copy, Debug, PartialEq)]
struct PerStep {
    launches: f64,
    waits: f64,
}

/// What the log holds once the device has run everything queued (the log is written by
/// CubeCL's logging thread, after the launch).
fn settled(log: &Path) -> KernelCounts {
    B::sync(&Default::default()).expect("device sync");
    std::thread::sleep(std::time::Duration::from_millis(300));
    KernelCounts::read(log)
}

fn per_step(log: &Path, start: &Model, mut step: Step<'_, Model>) -> PerStep {
    let mut model = start.clone();
    for _ in 0..WARM_UP {
        model = step(model);
    }
    let (before, waits) = (settled(log), burn_sam::diagnostics::host_waits());
    for _ in 0..STEPS {
        model = step(model);
    }
    let waits = burn_sam::diagnostics::host_waits() - waits;
    let after = settled(log);
    drop(model);
    PerStep {
        launches: (after.launched - before.launched) as f64 / STEPS as f64,
        waits: waits as f64 / STEPS as f64,
    }
}

/// Each step's launches and waits on `model`, by name.
fn measure(log: &Path, model: &Model) -> Vec<(&'static str, PerStep)> {
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
            per_step(
                log,
                model,
                sam_step(SamConfig::new().with_adaptive(true), sgd(), &f32_batch),
            ),
        ),
        (
            "LookSAM k=2",
            per_step(log, model, sam_step(variant(look_sam), sgd(), &f32_batch)),
        ),
        (
            "Momentum-SAM",
            per_step(
                log,
                model,
                sam_step(variant(SamVariant::momentum_sam()), momentum(), &f32_batch),
            ),
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
        (
            "accumulated SAM",
            per_step(
                log,
                model,
                accumulated_step(SamConfig::new().init(sgd().init()), &window),
            ),
        ),
    ]
}

#[test]
fn sam_adds_launches_and_waits_within_bounds() {
    let dir = std::env::temp_dir().join(format!("burn-sam-launches-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = KernelCache {
        log: dir.join("kernels.log"),
        dir: dir.clone(),
    };
    cache.install_counting_launches();
    let device = Default::default();
    // 4 and 62 parameter tensors (ResNet-18 has 62).
    let few: Model = MlpConfig::new(vec![784, 32, 10]).init(&device);
    let mut sizes = vec![784];
    sizes.extend([32; 30]);
    sizes.push(10);
    let many: Model = MlpConfig::new(sizes).init(&device);
    let few = copy_as(&few, FloatDType::F32);
    let many = copy_as(&many, FloatDType::F32);
    let counts = [
        (4, measure(&cache.log, &few)),
        (62, measure(&cache.log, &many)),
    ];
    let _ = std::fs::remove_dir_all(&dir);
    let get = |rows: &[(&str, PerStep)], name: &str| {
        rows.iter()
            .find(|(row, _)| *row == name)
            .map(|(_, step)| *step)
            .expect("measured")
    };
    let [(few_tensors, few), (many_tensors, many)] = &counts;
    println!("launches | step | floor | {few_tensors} tensors | over floor | {many_tensors} tensors | over floor | per tensor added | host waits");
    for (name, floor, extra_at_few, per_tensor, waits) in BOUNDS {
        let (step_few, step_many) = (get(few, name), get(many, name));
        let over_few = step_few.launches - get(few, floor).launches;
        let over_many = step_many.launches - get(many, floor).launches;
        let growth = (over_many - over_few) / (many_tensors - few_tensors) as f64;
        println!(
            "launches | {name} | {floor} | {} | {over_few} | {} | {over_many} | {growth:.2} | {}",
            step_few.launches, step_many.launches, step_many.waits
        );
        assert!(
            over_few <= extra_at_few,
            "{name}: {over_few} launches over {floor} on {few_tensors} tensors"
        );
        assert!(
            growth <= per_tensor,
            "{name}: {growth:.2} more launches per tensor over {floor}"
        );
        // One read (the step's gradient norms) and the sync that ends the step.
        assert_eq!(
            (step_few.waits, step_many.waits),
            (waits, waits),
            "{name}: host waits"
        );
    }
}
