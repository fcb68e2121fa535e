//! SAM's cost against its limits, on every backend compiled in (Flex and NdArray by default,
//! Vulkan and LibTorch with their features), for five models: an MLP of about 100k
//! parameters, one of about 2M, a small CNN, and two with as many parameter tensors as users'
//! models (a narrow ResNet-18 with BatchNorm, 62; a pre-norm transformer encoder, 68). Per backend and model: a base step (SGD), a
//! SAM and an ASAM step, a step of each SAM variant (GSAM, LookSAM with k = 10, Friendly-SAM;
//! their defaults), an f16 SAM step with and without loss scaling (where the backend has
//! f16), and gradient accumulation (k = 4 micro-batches against one batch of 4b, with the peak
//! heap memory of one step). Momentum-SAM (mu 0.9) against its own base, SGD with momentum
//! 0.9, with one element-wise pass over every parameter to count a step's passes by time, the
//! parameter-sized buffers each step allocates, and peak heap with and without the optimizer
//! state. Also the host waits (device reads and syncs) burn-sam makes per SAM step. Criterion groups are named
//! `<backend>-<model>`. `cargo xtask bench` runs this and prints the ratios.
//!
//! `SAM_COST_MODELS` and `SAM_COST_STEPS` (comma-separated names) time a subset, paired
//! among themselves: `SAM_COST_MODELS=mlp_2m SAM_COST_STEPS=momentum_step,msam_step cargo
//! bench --bench sam_cost --no-default-features --features flex` gives `msam_over_base` alone.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::backend::Autodiff;
use burn::optim::momentum::MomentumConfig;
use burn::optim::SgdConfig;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, FloatDType, Tensor};
use burn_sam::{LossScalerConfig, SamConfig, SamSchedule, SamVariant};
use burn_sam_accum::MicroBatch;
use burn_sam_suite::bench::{
    accumulated_step, base_step, batch, copy_as, largest_param, paired_medians, param_pass_step,
    sam_step, two_passes_step, window_passes_step, CnnConfig, EncoderConfig, Net, ResNetConfig,
    Timed, MLP_100K, MLP_2M,
};
use burn_sam_suite::{Mlp, MlpConfig};
use criterion::{criterion_group, criterion_main, Criterion};

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Allocations of exactly `TRACKED_SIZE` bytes (the largest parameter's, in f32) so far.
static TRACKED_SIZE: AtomicUsize = AtomicUsize::new(0);
static TRACKED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to `System`, only counting sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
            if layout.size() == TRACKED_SIZE.load(Ordering::Relaxed) {
                TRACKED.fetch_add(1, Ordering::Relaxed);
            }
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// How many buffers the size of the largest parameter `f` allocates: the passes over that
/// parameter that wrote a new buffer (its gradient's included; in-place operations not).
fn param_sized_allocations(f: impl FnOnce()) -> usize {
    let start = TRACKED.load(Ordering::Relaxed);
    f();
    TRACKED.load(Ordering::Relaxed) - start
}

/// Heap bytes above `baseline` live at the peak of `f`.
fn peak_bytes_over(baseline: usize, f: impl FnOnce()) -> usize {
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed) - baseline
}

const BATCH: usize = 128;
const K: usize = 4;

/// Times each step of `model` in criterion group `name`; writes the peak memory of the
/// accumulation steps and the host waits per SAM step to `<target>/criterion/<name>.json`.
fn bench_model<B: AutodiffBackend, M: Net<B>>(c: &mut Criterion, name: &str, model: M) {
    let f16 = B::supports_dtype(&Default::default(), DType::F16);
    // Initialise the lazy parameters once, so that every clone starts from the same weights.
    let model = copy_as(&model, FloatDType::F32);
    let half = if f16 {
        FloatDType::F16
    } else {
        FloatDType::F32
    };
    let model_f16 = copy_as(&model, half);
    let (f32_batch, f16_batch) = (batch::<B>(BATCH, FloatDType::F32), batch::<B>(BATCH, half));
    let large = batch::<B>(K * BATCH, FloatDType::F32);
    let window: Vec<_> = (0..K)
        .map(|i| {
            let rows = |t: &Tensor<B, 2>| t.clone().narrow(0, i * BATCH, BATCH);
            MicroBatch::with_items((rows(&large.0), rows(&large.1)), BATCH)
        })
        .collect();
    // Large enough for the gradients, small enough for f16 (no overflow, no skipped steps).
    let scaled =
        SamConfig::new().with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(256.0)));
    let asam = SamConfig::new().with_rho(0.5).with_adaptive(true);
    let variant = |variant| SamConfig::new().with_variant(variant);
    let sgd = SgdConfig::new;
    // SGD with the momentum Momentum-SAM keeps (mu 0.9, no dampening): its base optimizer.
    let momentum_sgd = || sgd().with_momentum(Some(MomentumConfig::new().with_dampening(0.0)));

    let never = |schedule| SamConfig::new().with_schedule(Some(schedule));
    let never_firing = SamSchedule::Adaptive {
        decay: 0.9,
        threshold_start: 1e6,
        threshold_end: 1e6,
        steps: 1,
    };
    let timed = |name, start, step| Timed { name, start, step };
    let mut steps: Vec<Timed<M>> = vec![
        timed("base_step", &model, base_step(sgd(), &f32_batch)),
        timed("two_passes_step", &model, two_passes_step(&f32_batch)),
        timed(
            "sam_step",
            &model,
            sam_step(SamConfig::new(), sgd(), &f32_batch),
        ),
        timed("asam_step", &model, sam_step(asam, sgd(), &f32_batch)),
        timed(
            "gsam_step",
            &model,
            sam_step(variant(SamVariant::gsam()), sgd(), &f32_batch),
        ),
        // Criterion's mean over its iterations is LookSAM's cost per step: one full step in 10.
        timed(
            "looksam_step",
            &model,
            sam_step(variant(SamVariant::look_sam()), sgd(), &f32_batch),
        ),
        timed(
            "friendly_sam_step",
            &model,
            sam_step(variant(SamVariant::friendly_sam()), sgd(), &f32_batch),
        ),
        timed(
            "unscaled_f16_sam_step",
            &model_f16,
            sam_step(SamConfig::new(), sgd(), &f16_batch),
        ),
        timed(
            "scaled_f16_sam_step",
            &model_f16,
            sam_step(scaled, sgd(), &f16_batch),
        ),
        timed(
            "momentum_step",
            &model,
            base_step(momentum_sgd(), &f32_batch),
        ),
        timed(
            "msam_step",
            &model,
            sam_step(
                variant(SamVariant::momentum_sam()),
                momentum_sgd(),
                &f32_batch,
            ),
        ),
        // A schedule's base step inside SAM, against the base optimizer's own step: every
        // step a base step (a late phase that never comes; AE-SAM never firing).
        timed(
            "base_in_sam_step",
            &model,
            sam_step(
                never(SamSchedule::From { step: usize::MAX }),
                sgd(),
                &f32_batch,
            ),
        ),
        timed(
            "adaptive_base_in_sam_step",
            &model,
            sam_step(never(never_firing), sgd(), &f32_batch),
        ),
        timed("param_pass", &model, param_pass_step()),
        timed("large_batch_step", &model, base_step(sgd(), &large)),
        timed("window_passes_step", &model, window_passes_step(&window, 1)),
        timed(
            "accum4_step",
            &model,
            accumulated_step(sgd().init(), &window),
        ),
    ];
    if !f16 {
        // No f16 on this backend (NdArray): the f16 steps are not timed.
        steps.retain(|timed| !timed.name.contains("f16"));
    }
    steps.retain(|timed| chosen("SAM_COST_STEPS", timed.name));

    let mut group = c.benchmark_group(name);
    group.sample_size(10);
    group.warm_up_time(std::time::Duration::from_secs(1));
    group.measurement_time(std::time::Duration::from_secs(4));
    let mut facts = serde_json::Map::new();
    facts.insert("params".into(), model.num_params().into());
    TRACKED_SIZE.store(4 * largest_param(&model), Ordering::Relaxed);
    let mut states = Vec::with_capacity(steps.len());
    for Timed {
        name: function,
        start,
        step,
    } in &mut steps
    {
        // Before the step's first call: its optimizer state and its copy of the model are not
        // allocated yet.
        let before_state = LIVE.load(Ordering::Relaxed);
        let mut current = Some(step((*start).clone())); // warm up
        if function.contains("sam_step") {
            // Reads and syncs: every wait of the host for the device.
            let waits = burn_sam::diagnostics::host_waits();
            for _ in 0..5 {
                current = Some(step(current.take().unwrap()));
            }
            let per_step = (burn_sam::diagnostics::host_waits() - waits) as f64 / 5.0;
            facts.insert(format!("{function}_host_waits"), per_step.into());
        }
        let before_step = LIVE.load(Ordering::Relaxed);
        let peak = peak_bytes_over(before_step, || {
            current = Some(step(current.take().unwrap()))
        });
        facts.insert(format!("{function}_peak_bytes"), peak.into());
        // The same peak with what the step keeps between calls: its model and optimizer state.
        let with_state = peak + before_step - before_state;
        facts.insert(
            format!("{function}_peak_with_state_bytes"),
            with_state.into(),
        );
        let allocations = param_sized_allocations(|| current = Some(step(current.take().unwrap())));
        facts.insert(format!("{function}_param_allocations"), allocations.into());
        group.bench_function(*function, |b| {
            b.iter(|| {
                current = Some(step(current.take().unwrap()));
                B::sync(&Default::default()).unwrap();
            })
        });
        states.push(current);
    }
    group.finish();
    if criterion_filter_is_empty() {
        let paired = paired_medians::<B, M>(&mut steps, &mut states, ROUNDS);
        let paired: serde_json::Map<_, _> = paired
            .into_iter()
            .map(|(function, ms)| (function.to_string(), ms.into()))
            .collect();
        facts.insert("paired_ms".into(), paired.into());
    }

    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let folder = std::path::Path::new(&target).join("criterion");
    std::fs::create_dir_all(&folder).expect("criterion output folder");
    let json = serde_json::to_string_pretty(&facts).unwrap();
    std::fs::write(folder.join(format!("{name}.json")), json).expect("benchmark facts");
}

/// Whether the bench runs every function (no name filter on the command line): the paired
/// timings need them all.
fn criterion_filter_is_empty() -> bool {
    std::env::args().skip(1).all(|arg| arg.starts_with("--"))
}

/// Rounds of paired timings (one step of every function per round), for the ratios.
const ROUNDS: usize = 15;

/// The five models on backend `B`, in groups `<backend>-<model>`.
fn bench_backend<B: AutodiffBackend>(c: &mut Criterion, backend: &str) {
    let device = Default::default();
    B::seed(&device, 0);
    let mlp = |sizes: &[usize]| -> Mlp<B> { MlpConfig::new(sizes.to_vec()).init(&device) };
    let name = |model: &str| format!("{backend}-{model}");
    if chosen("SAM_COST_MODELS", "mlp_100k") {
        bench_model(c, &name("mlp_100k"), mlp(&MLP_100K));
    }
    if chosen("SAM_COST_MODELS", "mlp_2m") {
        bench_model(c, &name("mlp_2m"), mlp(&MLP_2M));
    }
    if chosen("SAM_COST_MODELS", "cnn") {
        bench_model(c, &name("cnn"), CnnConfig::new().init::<B>(&device));
    }
    if chosen("SAM_COST_MODELS", "resnet18") {
        bench_model(c, &name("resnet18"), ResNetConfig::new().init::<B>(&device));
    }
    if chosen("SAM_COST_MODELS", "encoder") {
        bench_model(c, &name("encoder"), EncoderConfig::new().init::<B>(&device));
    }
}

/// Whether `name` is in the comma-separated list of environment variable `list` (every name
/// when it is not set).
fn chosen(list: &str, name: &str) -> bool {
    std::env::var(list).map_or(true, |names| names.split(',').any(|chosen| chosen == name))
}

fn sam_cost(c: &mut Criterion) {
    #[cfg(feature = "flex")]
    bench_backend::<Autodiff<burn::backend::Flex>>(c, "flex");
    #[cfg(feature = "ndarray")]
    bench_backend::<Autodiff<burn::backend::NdArray>>(c, "ndarray");
    #[cfg(feature = "tch")]
    bench_backend::<Autodiff<burn::backend::LibTorch>>(c, "libtorch");
    #[cfg(feature = "vulkan")]
    bench_backend::<Autodiff<burn::backend::Vulkan>>(c, "vulkan");
}

criterion_group!(benches, sam_cost);
criterion_main!(benches);
