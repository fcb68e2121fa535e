//! On a fused GPU backend (Vulkan with Burn's `fusion` and `autotune`; Mesa lavapipe on a
//! CPU, which runs the same CubeCL code as CUDA up to the compiler), once a training step's
//! kernels have compiled and tuned, 20 more steps compile nothing and tune nothing: no value
//! (learning rate, loss scale, step count) is baked into a kernel and no shape changes from
//! step to step. Each new kernel costs a compilation (about 0.2 s with NVRTC on an H200) and
//! each new matmul shape an autotune run (seconds), on every step that makes one. Each of
//! these steps also waits for the device once, for one read (the step's gradient norms), and
//! ends by launching what it queued without waiting (burn-sam's `fusion` and `wgpu`
//! features): the same kernels every step, with no sync.
//!
//! CubeCL reads its configuration once per process, so the scenarios share one test.
#![cfg(all(feature = "vulkan", feature = "fusion"))]

use std::path::Path;

use burn::backend::{Autodiff, Vulkan};
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::AutodiffModule;
use burn::optim::momentum::MomentumConfig;
use burn::optim::SgdConfig;
use burn::tensor::backend::Backend;
use burn::train::metric::LossMetric;
use burn::train::{Learner, SupervisedTraining};
use burn_sam::{cast_params, LossScalerConfig, SamConfig, SamVariant};
use burn_sam_accum::train::{SamMetric, SamTraining};
use burn_sam_accum::{AccumulationConfig, Ascent, MicroBatch};
use burn_sam_suite::kernels::{KernelCache, KernelCounts};
use burn_sam_suite::{blobs, ClassBatch, ClassBatcher, Classifier, MlpConfig, Quiet};
use std::sync::Arc;

type B = Autodiff<Vulkan>;
type Model = Classifier<B>;

const FEATURES: usize = 8;
const CLASSES: usize = 4;
/// Steps measured after the warm-up.
const STEPS: usize = 20;
/// Steps that compile and tune what a step needs (the first SAM step differs from the
/// others: the optimizer's state does not exist yet).
const WARM_UP: usize = 3;

fn model() -> Model {
    let model = Classifier {
        mlp: MlpConfig::new(vec![FEATURES, 32, CLASSES]).init(&Default::default()),
    };
    // Lazy parameters: initialise them once.
    model.valid();
    model
}

fn batch(rows: usize, seed: u64) -> ClassBatch<B> {
    use burn::data::dataloader::batcher::Batcher;
    ClassBatcher.batch(blobs(rows, seed, FEATURES, CLASSES), &Default::default())
}

fn sgd() -> SgdConfig {
    SgdConfig::new().with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
}

/// What the kernel log holds once the device has run everything queued (the log is written
/// by CubeCL's logging thread, just after the compilation is asked for).
fn settled(log: &Path) -> KernelCounts {
    B::sync(&Default::default()).expect("device sync");
    std::thread::sleep(std::time::Duration::from_millis(300));
    KernelCounts::read(log)
}

/// burn-sam's device reads, syncs and queue launches while `f` runs.
fn waits(f: impl FnOnce()) -> (u64, u64, u64) {
    use burn_sam::diagnostics::{device_reads, device_syncs, queue_launches};
    let (reads, syncs, launches) = (device_reads(), device_syncs(), queue_launches());
    f();
    (
        device_reads() - reads,
        device_syncs() - syncs,
        queue_launches() - launches,
    )
}

/// Runs `step` `WARM_UP` times, then `STEPS` times, and checks the second run compiled and
/// tuned nothing; returns what the log held after the warm-up.
fn assert_steady(what: &str, log: &Path, mut step: impl FnMut()) -> KernelCounts {
    for _ in 0..WARM_UP {
        step();
    }
    let warm = settled(log);
    for _ in 0..STEPS {
        step();
    }
    let new = settled(log) - warm;
    assert_eq!(
        new,
        KernelCounts::default(),
        "{what}: {STEPS} steps after the warm-up compiled or tuned something (see {})",
        log.display()
    );
    warm
}

#[test]
fn steps_after_warm_up_compile_and_tune_nothing() {
    let dir = std::env::temp_dir().join(format!("burn-sam-kernels-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = KernelCache {
        log: dir.join("kernels.log"),
        dir: dir.clone(),
    };
    cache.install();
    let log = cache.log.as_path();

    let data = batch(32, 1);
    let (mut model, mut sam) = (
        Some(model()),
        SamConfig::new().with_rho(0.1).init(sgd().init()),
    );
    let warm = assert_steady("SAM, f32", log, || {
        let step = sam
            .step_with(0.05, model.take().unwrap(), |m: &Model| m.loss(&data))
            .expect("a step");
        model = Some(step.module);
    });
    // The log sees what the warm-up compiled and tuned: the counts above are not vacuous.
    assert!(warm.compiled > 0, "no compilation logged: {warm:?}");
    assert!(
        warm.tuned > 0 || !cfg!(feature = "autotune"),
        "no autotune run logged: {warm:?}"
    );

    // f16 weights, loss scaling, f32 master weights; the loss scale changes between steps.
    let scaling = LossScalerConfig::new().with_growth_interval(5);
    let mut sam = SamConfig::new()
        .with_rho(0.1)
        .with_loss_scaling(Some(scaling))
        .init(sgd().init());
    let mut model = Some(cast_params(self::model(), burn::tensor::FloatDType::F16));
    assert_steady("SAM, f16 with loss scaling", log, || {
        let step = sam
            .step_with(0.05, model.take().unwrap(), |m: &Model| m.loss(&data))
            .expect("a step");
        model = Some(step.module);
    });

    // Two micro-batches of 16 as one batch of 32.
    let micro_batches = [
        MicroBatch::with_items(batch(16, 2), 16),
        MicroBatch::with_items(batch(16, 3), 16),
    ];
    // Exact accumulation and m-sharpness (each micro-batch perturbed by its own gradient):
    // one read and one queue launch per step either way.
    for (what, ascent) in [
        ("SAM, accumulated", Ascent::Synced),
        ("SAM, m-sharpness", Ascent::Local),
    ] {
        let mut accumulation = AccumulationConfig::new(2)
            .with_ascent(ascent)
            .init(SamConfig::new().with_rho(0.1).init(sgd().init()));
        let mut model = Some(self::model());
        let n = waits(|| {
            assert_steady(what, log, || {
                let step = accumulation
                    .step(
                        0.05,
                        model.take().unwrap(),
                        &micro_batches,
                        |m: &Model, b| m.loss(b),
                    )
                    .expect("a step");
                model = Some(step.module);
            });
        });
        let steps = (WARM_UP + STEPS) as u64;
        assert_eq!(
            n,
            (steps, 0, steps),
            "{what}: one read and one queue launch per step, no sync"
        );
    }

    // Burn's Learner with SamTraining: a second training of 20 steps (one epoch) after a
    // first one compiles and tunes nothing. On one device, and data-parallel over two handles
    // of it with each replica perturbed by its own gradient: the replicas' ascents wait for
    // nothing either (the fault of one that overflows reaches the descent on the device).
    // With SAM's metrics registered, the outputs go to them after the step, not before: the
    // same kernels and the same one read per step.
    for (what, ascent, metrics) in [
        ("one device", None, false),
        ("one device, SAM's metrics", None, true),
        ("local ascents", Some(Ascent::Local), false),
        ("local ascents, SAM's metrics", Some(Ascent::Local), true),
    ] {
        let learner_model = self::model();
        let mut trainings = 0;
        let n = waits(|| {
            assert_steady_trainings(what, log, || {
                trainings += 1;
                let optim = SamConfig::new().with_rho(0.1).init(sgd().init());
                let metrics = match metrics {
                    true => sam_metrics(&optim),
                    false => Vec::new(),
                };
                let strategy = match ascent {
                    None => SamTraining::new(Default::default(), &optim),
                    Some(ascent) => {
                        use burn::backend::wgpu::WgpuDevice;
                        // Two devices, each with its own fusion stream, as on two GPUs.
                        let devices = vec![WgpuDevice::DefaultDevice, WgpuDevice::Cpu];
                        SamTraining::data_parallel(devices, &optim, ascent).expect("SAM")
                    }
                };
                let learner = Learner::new(learner_model.clone(), optim, 0.05);
                train(
                    &dir.join(format!("learner-{what}-{trainings}")),
                    learner,
                    strategy,
                    metrics,
                );
            })
        });
        // Each step takes a batch per replica.
        let (replicas, steps) = match ascent {
            None => (1, 2 * STEPS as u64),
            Some(_) => (2, STEPS as u64),
        };
        // lavapipe's two devices exchange tensors through the host
        // (`transfers_through_host`): per step each of the model's 4 parameter tensors is
        // read once on its way out to the second replica and its gradient once on the way
        // back, beside the step's one read of its norms; with SAM's metrics, the second
        // replica's losses come back too, in one read. (On one device, or devices that copy
        // between them, they cost no read.)
        let losses_back = u64::from(metrics) * (replicas - 1);
        let reads = steps * (1 + 2 * 4 * (replicas - 1) + losses_back);
        assert_eq!(
            n,
            (reads, 0, steps),
            "SamTraining, {what}: the reads of a step (its norms, host transfers) and one \
             queue launch per step, no sync"
        );
    }

    // One device, windows of 1 and 4: SAM, Momentum-SAM and loss-scaled f16 SAM under
    // SamTraining each wait for the device once per optimizer step, syncs counted.
    let scaling = LossScalerConfig::new().with_init_scale(1024.0);
    for (what, config, dtype) in [
        ("SAM", SamConfig::new().with_rho(0.1), None),
        (
            "Momentum-SAM",
            SamConfig::new()
                .with_rho(1.0)
                .with_variant(SamVariant::momentum_sam()),
            None,
        ),
        (
            "loss-scaled f16 SAM",
            SamConfig::new()
                .with_rho(0.1)
                .with_loss_scaling(Some(scaling)),
            Some(burn::tensor::FloatDType::F16),
        ),
    ] {
        for window in [1, 4] {
            let optim = config.init(sgd().init());
            let strategy = SamTraining::new(Default::default(), &optim)
                .with_accumulation(window)
                .expect("a window");
            let model = match dtype {
                Some(dtype) => cast_params(self::model(), dtype),
                None => self::model(),
            };
            let artifacts = dir.join(format!("waits-{what}-{window}"));
            let learner = Learner::new(model, optim, 0.05);
            let n = waits(|| train(&artifacts, learner, strategy, Vec::new()));
            let steps = STEPS.div_ceil(window) as u64;
            assert_eq!(
                n,
                (steps, 0, steps),
                "SamTraining, {what}, window {window}: one host wait (a read) and one queue \
                 launch per optimizer step"
            );
        }
    }

    // The end of each step's queue can be turned off, for measuring what it costs.
    burn_sam::diagnostics::set_closing_sync(false);
    let (mut model, mut sam) = (
        Some(self::model()),
        SamConfig::new().with_rho(0.1).init(sgd().init()),
    );
    let n = waits(|| {
        let step = sam.step_with(0.05, model.take().unwrap(), |m: &Model| m.loss(&data));
        drop(step.expect("a step"));
    });
    burn_sam::diagnostics::set_closing_sync(true);
    assert_eq!(n, (1, 0, 0), "SAM without the end of its queue");
    let _ = std::fs::remove_dir_all(&dir);
}

type Components = burn::train::LearningComponentsMarker<
    B,
    f64,
    Model,
    burn_sam::Sam<burn::optim::adaptor::OptimizerAdaptor<burn::optim::Sgd<Vulkan>, Model, B>>,
>;

/// Every one of SAM's metrics, read from `optim`'s steps.
fn sam_metrics(optim: &impl burn_sam::strategy::Linkable) -> Vec<SamMetric> {
    vec![
        SamMetric::sharpness(optim),
        SamMetric::grad_norm(optim),
        SamMetric::loss_scale(optim),
        SamMetric::overflowed_steps(optim),
        SamMetric::sam_steps(optim),
    ]
}

/// One epoch of `learner` under `strategy`, its artifacts in `dir`, with `metrics` beside
/// Burn's loss.
fn train(
    dir: &Path,
    learner: Learner<Components>,
    strategy: SamTraining<Components>,
    metrics: Vec<SamMetric>,
) {
    let mut training = SupervisedTraining::new(dir, train_loader(), valid_loader());
    for metric in metrics {
        training = training.metric_train_numeric(metric);
    }
    training
        .metrics((LossMetric::new(),))
        .renderer(Quiet)
        .with_application_logger(None)
        .with_training_strategy(strategy.into_strategy())
        .num_epochs(1)
        .launch(learner);
}

/// One Learner training as warm-up, then a second one that must compile and tune nothing.
fn assert_steady_trainings(what: &str, log: &Path, mut train: impl FnMut()) {
    train();
    let warm = settled(log);
    train();
    let new = settled(log) - warm;
    assert_eq!(
        new,
        KernelCounts::default(),
        "SamTraining, {what}: a second training of {STEPS} steps compiled or tuned something (see {})",
        log.display()
    );
}

fn train_loader() -> Arc<dyn DataLoader<B, ClassBatch<B>>> {
    DataLoaderBuilder::new(ClassBatcher)
        .batch_size(16)
        .build(InMemDataset::new(blobs(16 * STEPS, 7, FEATURES, CLASSES)))
}

fn valid_loader() -> Arc<dyn DataLoader<Vulkan, ClassBatch<Vulkan>>> {
    DataLoaderBuilder::new(ClassBatcher)
        .batch_size(32)
        .build(InMemDataset::new(blobs(32, 99, FEATURES, CLASSES)))
}

/// The `cubecl.toml` the guide's GPU chapter shows keeps compiled kernels and autotune results
/// under `target/`.
#[test]
fn guide_cubecl_toml_keeps_both_caches() {
    use cubecl_runtime::config::cache::CacheConfig;
    use cubecl_runtime::config::{CubeClRuntimeConfig, RuntimeConfig};

    let chapter = include_str!("../guide/src/gpu-check.md");
    let start = chapter
        .find("```toml\n[compilation]")
        .expect("the GPU chapter shows a cubecl.toml")
        + "```toml\n".len();
    let end = start + chapter[start..].find("```").expect("the block ends");
    let path = std::env::temp_dir().join(format!("burn-sam-cubecl-{}.toml", std::process::id()));
    std::fs::write(&path, &chapter[start..end]).expect("a temporary file");
    // Panics on a file CubeCL cannot read.
    let config = CubeClRuntimeConfig::from_file_path(&path).expect("readable");
    let _ = std::fs::remove_file(&path);
    assert!(matches!(
        config.compilation.cache,
        Some(CacheConfig::Target)
    ));
    assert!(matches!(config.autotune.cache, CacheConfig::Target));
}
