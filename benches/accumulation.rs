//! Gradient accumulation: k = 4 micro-batches of b rows against one batch of 4b, on Flex, for
//! plain SGD and for exact SAM. Time per optimizer step (criterion) and peak heap memory of one
//! step (a counting allocator). `cargo xtask bench` runs this and prints the ratios.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use burn_sam::SamConfig;
use burn_sam_accum::{AccumulationConfig, MicroBatch};
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

/// Heap bytes above the live ones at the start that `f` needed at its peak.
fn peak_bytes(f: impl FnOnce()) -> usize {
    let start = LIVE.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed) - start
}

type B = Autodiff<Flex>;
type Batch = (Tensor<B, 2>, Tensor<B, 2>);

const MICRO_BATCH: usize = 256;
const K: usize = 4;

fn loss(model: &Mlp<B>, (x, y): &Batch) -> Tensor<B, 1> {
    (model.forward(x.clone()) - y.clone()).powi_scalar(2).mean()
}

fn batch(rows: usize) -> Batch {
    let device = Default::default();
    let normal = Distribution::Normal(0.0, 1.0);
    (
        Tensor::random([rows, 784], normal, &device),
        Tensor::random([rows, 10], normal, &device),
    )
}

/// One optimizer step: on the large batch, or accumulated over its micro-batches.
trait Step {
    fn step(&mut self, model: Mlp<B>) -> Mlp<B>;
}

struct Large<O> {
    optimizer: O,
    batch: Batch,
    sam: bool,
}

impl<O: Optimizer<Mlp<B>, B>> Step for Large<O> {
    fn step(&mut self, mut model: Mlp<B>) -> Mlp<B> {
        // SAM's two passes through `Optimizer::step`, the base optimizer's one.
        for _ in 0..if self.sam { 2 } else { 1 } {
            let grads = GradientsParams::from_grads(loss(&model, &self.batch).backward(), &model);
            model = self.optimizer.step(1e-3, model, grads);
        }
        model
    }
}

struct Accumulated<O> {
    accumulation: burn_sam_accum::Accumulation<O>,
    window: Vec<MicroBatch<Batch>>,
}

impl<O: burn_sam_accum::WindowOptimizer<Mlp<B>, B>> Step for Accumulated<O> {
    fn step(&mut self, model: Mlp<B>) -> Mlp<B> {
        let step = self.accumulation.step(1e-3, model, &self.window, loss);
        step.unwrap().module
    }
}

fn accumulation(c: &mut Criterion) {
    let device = Default::default();
    B::seed(&device, 0);
    let model: Mlp<B> = MlpConfig::new(vec![784, 1024, 512, 10]).init(&device);
    let model = Mlp::<B>::from_inner(model.valid()); // initialise the lazy parameters once
    let large = batch(K * MICRO_BATCH);
    let window: Vec<_> = (0..K)
        .map(|i| {
            let rows = |t: &Tensor<B, 2>| t.clone().narrow(0, i * MICRO_BATCH, MICRO_BATCH);
            MicroBatch::with_items((rows(&large.0), rows(&large.1)), MICRO_BATCH)
        })
        .collect();
    let sgd = || SgdConfig::new().init();
    let sam = || SamConfig::new().init(sgd());
    let accumulate = AccumulationConfig::new(K);
    let mut runs: Vec<(&str, Box<dyn Step>)> = vec![
        (
            "sgd_large_batch",
            Box::new(Large {
                optimizer: sgd(),
                batch: large.clone(),
                sam: false,
            }),
        ),
        (
            "sgd_accum4",
            Box::new(Accumulated {
                accumulation: accumulate.init(sgd()),
                window: window.clone(),
            }),
        ),
        (
            "sam_large_batch",
            Box::new(Large {
                optimizer: sam(),
                batch: large.clone(),
                sam: true,
            }),
        ),
        (
            "sam_accum4",
            Box::new(Accumulated {
                accumulation: accumulate.init(sam()),
                window,
            }),
        ),
    ];

    let mut group = c.benchmark_group(format!("accumulation_b{MICRO_BATCH}_k{K}"));
    group.sample_size(10);
    let mut memory = serde_json::Map::new();
    for (name, run) in &mut runs {
        let mut current = Some(run.step(model.clone())); // warm up
        let peak = peak_bytes(|| current = Some(run.step(current.take().unwrap())));
        memory.insert(name.to_string(), peak.into());
        group.bench_function(*name, |b| {
            b.iter(|| {
                current = Some(run.step(current.take().unwrap()));
                B::sync(&device).unwrap();
            })
        });
    }
    group.finish();

    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = std::path::Path::new(&target).join("criterion/accumulation_peak_bytes.json");
    let json = serde_json::to_string_pretty(&memory).unwrap();
    std::fs::write(&path, &json).unwrap();
    println!("peak heap bytes per step ({}):\n{json}", path.display());
}

criterion_group!(benches, accumulation);
criterion_main!(benches);
