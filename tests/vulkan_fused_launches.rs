//! Kernel launches and host waits per step on a fused GPU backend (Vulkan with Burn's
//! `fusion`; Mesa lavapipe on a CPU runs the same CubeCL code as CUDA up to the compiler), on
//! a model with few parameter tensors and on one with many: what SAM and its family add over
//! their floors (two passes; Momentum-SAM: the base step), and how that grows with the number
//! of tensors. The counts are held here so that they cannot grow back unnoticed.
//!
//! CubeCL reads its configuration once per process: one test in its own binary.
#![cfg(all(feature = "vulkan", feature = "fusion"))]

use burn::backend::{Autodiff, Vulkan};
use burn_sam_suite::kernels::KernelCache;
use burn_sam_suite::launches::{growth, TENSORS};

type B = Autodiff<Vulkan>;

/// Each measured step of `launches::COMPARED` (whose floors are two passes, Momentum-SAM's the
/// base step), what it may add over its floor in launches per step (on the 4-tensor model, and per parameter tensor added, from 4 to 62),
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
const BOUNDS: [(&str, f64, f64, f64); 6] = [
    ("SAM", 25.0, 0.51, 2.0),
    ("ASAM", 30.0, 0.59, 2.0),
    ("LookSAM k=2", 41.5, 5.83, 2.0),
    ("Momentum-SAM", 21.0, 0.74, 2.0),
    ("f16 loss-scaled SAM", 28.0, 0.95, 2.0),
    ("accumulated SAM", 37.0, 0.75, 2.0),
];

#[test]
fn sam_adds_launches_and_waits_within_bounds() {
    let dir = std::env::temp_dir().join(format!("burn-sam-launches-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = KernelCache {
        log: dir.join("kernels.log"),
        dir: dir.clone(),
    };
    cache.install_counting_launches();
    let rows = growth::<B>(&cache.log);
    let _ = std::fs::remove_dir_all(&dir);
    let (few_tensors, many_tensors) = TENSORS;
    println!("launches | step | floor | {few_tensors} tensors | over floor | {many_tensors} tensors | over floor | per tensor added | host waits");
    for (row, (name, extra_at_few, per_tensor, waits)) in rows.iter().zip(BOUNDS) {
        assert_eq!(
            row.name, name,
            "bounds in the order of `launches::COMPARED`"
        );
        println!(
            "launches | {name} | {} | {} | {} | {} | {} | {:.2} | {}",
            row.floor,
            row.few.launches,
            row.over_few,
            row.many.launches,
            row.over_many,
            row.per_tensor,
            row.many.waits
        );
        assert!(
            row.over_few <= extra_at_few,
            "{name}: {} launches over {} on {few_tensors} tensors",
            row.over_few,
            row.floor
        );
        assert!(
            row.per_tensor <= per_tensor,
            "{name}: {:.2} more launches per tensor over {}",
            row.per_tensor,
            row.floor
        );
        // One read (the step's gradient norms) and the sync that ends the step.
        assert_eq!(
            (row.few.waits, row.many.waits),
            (waits, waits),
            "{name}: host waits"
        );
    }
}
