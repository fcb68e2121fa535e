//! SAM's cost against its limits, on Flex, for three models: an MLP of about 100k parameters,
//! one of about 2M, and a small CNN. Per model: a base step (SGD), a SAM and an ASAM step, an
//! f16 SAM step with and without loss scaling, and gradient accumulation (k = 4 micro-batches
//! against one batch of 4b, with the peak heap memory of one step). Also the device reads
//! burn-sam makes per SAM step. `cargo xtask bench` runs this and prints the ratios.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::backend::{Autodiff, Flex};
use burn::module::{AutodiffModule, Module};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AvgPool2d, AvgPool2dConfig};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, FloatDType, Tensor};
use burn_sam::{LossScalerConfig, SamConfig};
use burn_sam_accum::{AccumulationConfig, MicroBatch, WindowOptimizer};
use burn_sam_suite::{Mlp, MlpConfig};
use criterion::{criterion_group, criterion_main, Criterion};

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to `System`, only counting sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
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

/// Heap bytes above those live at the start that `f` needed at its peak.
fn peak_bytes(f: impl FnOnce()) -> usize {
    let start = LIVE.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed) - start
}

type B = Autodiff<Flex>;
type Batch = (Tensor<B, 2>, Tensor<B, 2>);

const BATCH: usize = 128;
const K: usize = 4;

/// A small CNN on 28x28 images (flattened): conv 1->8 3x3, relu, conv 8->16 3x3, relu,
/// average pool 2, linear to 10 (40k parameters, most of the time in the convolutions).
#[derive(Module, Debug)]
struct Cnn<B: Backend> {
    conv1: Conv2d<B>,
    conv2: Conv2d<B>,
    pool: AvgPool2d,
    linear: Linear<B>,
}

impl<B: Backend> Cnn<B> {
    fn new(device: &B::Device) -> Self {
        Cnn {
            conv1: Conv2dConfig::new([1, 8], [3, 3]).init(device),
            conv2: Conv2dConfig::new([8, 16], [3, 3]).init(device),
            pool: AvgPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            linear: LinearConfig::new(16 * 12 * 12, 10).init(device),
        }
    }
}

/// A benchmarked model: flattened 784-pixel inputs to 10 outputs.
trait Net: AutodiffModule<B> + Clone {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2>;
}

impl Net for Mlp<B> {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        Mlp::forward(self, x)
    }
}

impl Net for Cnn<B> {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let [batch, _] = x.dims();
        let x = relu(self.conv1.forward(x.reshape([batch, 1, 28, 28])));
        let x = self.pool.forward(relu(self.conv2.forward(x)));
        self.linear.forward(x.flatten(1, 3))
    }
}

fn loss<M: Net>(model: &M, (x, y): &Batch) -> Tensor<B, 1> {
    let output = model.forward(x.clone()).cast(FloatDType::F32);
    (output - y.clone().cast(FloatDType::F32))
        .powi_scalar(2)
        .mean()
}

fn batch(rows: usize, dtype: FloatDType) -> Batch {
    let device = Default::default();
    let normal = Distribution::Normal(0.0, 1.0);
    let x = Tensor::<B, 2>::random([rows, 784], normal, &device);
    let y = Tensor::<B, 2>::random([rows, 10], normal, &device);
    (x.cast(dtype), y.cast(dtype))
}

/// One optimizer step of `M` from its current state.
type Step<'a, M> = Box<dyn FnMut(M) -> M + 'a>;

fn base_step<'a, M: Net + 'a>(batch: &'a Batch) -> Step<'a, M> {
    let mut sgd = SgdConfig::new().init();
    Box::new(move |model: M| {
        let grads = GradientsParams::from_grads(loss(&model, batch).backward(), &model);
        sgd.step(1e-3, model, grads)
    })
}

/// SAM's floor: two forward/backward passes (the first gradient is dropped) and one base step.
fn two_passes_step<'a, M: Net + 'a>(batch: &'a Batch) -> Step<'a, M> {
    let mut sgd = SgdConfig::new().init();
    Box::new(move |model: M| {
        drop(GradientsParams::from_grads(
            loss(&model, batch).backward(),
            &model,
        ));
        let grads = GradientsParams::from_grads(loss(&model, batch).backward(), &model);
        sgd.step(1e-3, model, grads)
    })
}

fn sam_step<'a, M: Net + 'a>(config: SamConfig, batch: &'a Batch) -> Step<'a, M> {
    let mut sam = config.init(SgdConfig::new().init());
    Box::new(move |model: M| {
        let step = sam.step_with(1e-3, model, |m: &M| loss(m, batch));
        step.expect("SAM step").module
    })
}

/// Accumulation's floor: the window's forward/backward passes (gradients dropped but the
/// last) and one base step, without weighting or summing.
fn window_passes_step<'a, M: Net + 'a>(window: &'a [MicroBatch<Batch>]) -> Step<'a, M> {
    let mut sgd = SgdConfig::new().init();
    Box::new(move |model: M| {
        let (last, rest) = window.split_last().expect("a window");
        for micro in rest {
            drop(GradientsParams::from_grads(
                loss(&model, &micro.data).backward(),
                &model,
            ));
        }
        let grads = GradientsParams::from_grads(loss(&model, &last.data).backward(), &model);
        sgd.step(1e-3, model, grads)
    })
}

fn accumulated_step<'a, M: Net + 'a, O: WindowOptimizer<M, B> + 'a>(
    optimizer: O,
    window: &'a [MicroBatch<Batch>],
) -> Step<'a, M> {
    let mut accumulation = AccumulationConfig::new(window.len()).init(optimizer);
    Box::new(move |model: M| {
        let step = accumulation.step(1e-3, model, window, loss::<M>);
        step.expect("accumulated step").module
    })
}

/// Times each step of `model` in criterion group `name`; writes the peak memory of the
/// accumulation steps and the device reads per SAM step to `<target>/criterion/<name>.json`.
fn bench_model<M: Net>(c: &mut Criterion, name: &str, model: M) {
    // Initialise the lazy parameters once, so that every clone starts from the same weights.
    let model = M::from_inner(model.valid());
    let model_f16 = burn_sam::cast_params(model.clone(), FloatDType::F16);
    let (f32_batch, f16_batch) = (batch(BATCH, FloatDType::F32), batch(BATCH, FloatDType::F16));
    let large = batch(K * BATCH, FloatDType::F32);
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
    let sgd = || SgdConfig::new().init();

    let mut steps: Vec<(&str, &M, Step<M>)> = vec![
        ("base_step", &model, base_step(&f32_batch)),
        ("two_passes_step", &model, two_passes_step(&f32_batch)),
        ("sam_step", &model, sam_step(SamConfig::new(), &f32_batch)),
        ("asam_step", &model, sam_step(asam, &f32_batch)),
        (
            "unscaled_f16_sam_step",
            &model_f16,
            sam_step(SamConfig::new(), &f16_batch),
        ),
        (
            "scaled_f16_sam_step",
            &model_f16,
            sam_step(scaled, &f16_batch),
        ),
        ("large_batch_step", &model, base_step(&large)),
        ("window_passes_step", &model, window_passes_step(&window)),
        ("accum4_step", &model, accumulated_step(sgd(), &window)),
    ];

    let mut group = c.benchmark_group(name);
    group.sample_size(10);
    group.warm_up_time(std::time::Duration::from_secs(1));
    group.measurement_time(std::time::Duration::from_secs(4));
    let mut facts = serde_json::Map::new();
    facts.insert("params".into(), model.num_params().into());
    let mut states = Vec::with_capacity(steps.len());
    for (function, start, step) in &mut steps {
        let mut current = Some(step((*start).clone())); // warm up
        if function.contains("sam_step") {
            let reads = burn_sam::device_reads();
            for _ in 0..5 {
                current = Some(step(current.take().unwrap()));
            }
            let per_step = (burn_sam::device_reads() - reads) as f64 / 5.0;
            facts.insert(format!("{function}_device_reads"), per_step.into());
        }
        let peak = peak_bytes(|| current = Some(step(current.take().unwrap())));
        facts.insert(format!("{function}_peak_bytes"), peak.into());
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
        facts.insert(
            "paired_ms".into(),
            paired_medians(&mut steps, &mut states).into(),
        );
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

/// Rounds of paired timings: one step of every function per round, in a rotating order.
const ROUNDS: usize = 15;

/// The median time of one step of each function, in ms, from interleaved rounds: ratios of
/// these compare steps that ran under the same machine load, where criterion's blocks of one
/// function at a time let load drift between the numerator and the denominator.
fn paired_medians<M: Net>(
    steps: &mut [(&str, &M, Step<M>)],
    states: &mut [Option<M>],
) -> serde_json::Map<String, serde_json::Value> {
    let mut times = vec![Vec::with_capacity(ROUNDS); steps.len()];
    for round in 0..ROUNDS {
        for offset in 0..steps.len() {
            let index = (round + offset) % steps.len();
            let (_, _, step) = &mut steps[index];
            let start = std::time::Instant::now();
            states[index] = Some(step(states[index].take().unwrap()));
            B::sync(&Default::default()).unwrap();
            times[index].push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    steps
        .iter()
        .zip(&mut times)
        .map(|((function, _, _), times)| {
            times.sort_by(f64::total_cmp);
            (function.to_string(), times[ROUNDS / 2].into())
        })
        .collect()
}

fn sam_cost(c: &mut Criterion) {
    let device = Default::default();
    B::seed(&device, 0);
    let mlp = |sizes: &[usize]| -> Mlp<B> { MlpConfig::new(sizes.to_vec()).init(&device) };
    bench_model(c, "mlp_100k", mlp(&[784, 128, 10]));
    bench_model(c, "mlp_2m", mlp(&[784, 2048, 256, 10]));
    bench_model(c, "cnn", Cnn::<B>::new(&device));
}

criterion_group!(benches, sam_cost);
criterion_main!(benches);
