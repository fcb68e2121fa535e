//! Data-parallel SAM in Burn's `Learner` (`SamTraining::data_parallel`), generic over the
//! backend and the two devices its replicas run on. `data_parallel_suite!` instantiates it;
//! `tests/mpi_ranks.rs` runs its helpers across MPI ranks.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::lr_scheduler::linear::{LinearLrScheduler, LinearLrSchedulerConfig};
use burn::lr_scheduler::LrScheduler;
use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, Optimizer, Sgd, SgdConfig};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Device, FloatDType, Tensor};
use burn::train::checkpoint::KeepLastNCheckpoints;
use burn::train::{Learner, LearningComponentsMarker, SupervisedTraining};
use burn_sam::record::SamRecord;
use burn_sam::LossScaling;
use burn_sam::{cast_params, LossScalerConfig, Sam, SamConfig, SamSchedule, SamVariant};
use burn_sam_accum::train::{Ascent, SamTraining};
use burn_sam_accum::WindowOptimizer;
use burn_sam_suite::{
    blobs, checkpoint_sam_record, ClassBatch, ClassBatcher, Classifier, Example, MlpConfig, Quiet,
    Rng,
};

/// Instantiates the data-parallel tests for backend `$backend` with replicas on `$devices`
/// (an expression giving two devices).
#[macro_export]
macro_rules! data_parallel_suite {
    ($name:ident, $backend:ty, $devices:expr) => {
        mod $name {
            use super::data_parallel as dp;
            type B = $backend;
            fn devices() -> [burn::tensor::Device<B>; 2] {
                $devices
            }

            #[test]
            fn one_replica_is_sam_training_bit_for_bit() {
                dp::one_replica_is_sam_training::<B>(devices());
            }

            #[test]
            fn the_same_batch_on_both_replicas_is_single_device_sam() {
                dp::same_batch_on_both_replicas::<B>(devices());
            }

            #[test]
            fn synced_ascent_is_sam_on_the_union_batch() {
                dp::synced_is_sam_on_the_union::<B>(devices());
            }

            #[test]
            fn a_replicated_window_is_the_single_device_window() {
                dp::replicated_window_is_the_single_device_window::<B>(devices());
            }

            #[test]
            fn synced_ascent_runs_every_variant_as_on_the_union_batch() {
                dp::synced_runs_every_variant::<B>(devices());
            }

            #[test]
            fn local_ascent_is_its_definition_and_differs_from_synced() {
                dp::local_is_its_definition::<B>(devices());
            }

            #[test]
            fn rho_zero_is_plain_data_parallelism_is_the_large_batch() {
                dp::rho_zero_is_the_large_batch::<B>(devices());
            }

            #[test]
            fn f16_replicas_scale_their_losses_and_an_overflow_skips_everywhere() {
                dp::f16_overflow_on_one_replica::<B>(devices());
            }

            #[test]
            fn resuming_equals_the_uninterrupted_run() {
                dp::resume_equals_uninterrupted::<B>(devices());
            }

            #[test]
            fn local_ascent_with_a_variant_is_refused() {
                dp::local_variant_refused::<B>(devices());
            }
        }
    };
}

pub type Model<B> = Classifier<B>;
pub type SgdOptim<B> = OptimizerAdaptor<Sgd<<B as AutodiffBackend>::InnerBackend>, Model<B>, B>;
pub type Components<B, LR, O> = LearningComponentsMarker<B, LR, Model<B>, O>;

pub const FEATURES: usize = 6;
pub const CLASSES: usize = 3;

pub fn model<B: AutodiffBackend>(device: &Device<B>) -> Model<B> {
    let model = Classifier {
        mlp: MlpConfig::new(vec![FEATURES, 16, CLASSES]).init(device),
    };
    // Fixed weights, not the backend's shared generator (which tests running beside this one
    // draw from too): on 1 draw in about 300, LookSAM's `||g|| / ||g_v||` scaled the replicas'
    // other order of additions to 2e-3 of the weights. Mapping every parameter also
    // initialises the lazy ones before the model is cloned into several runs.
    model.map(&mut FixedWeights(Rng::new(5)))
}

/// Every float parameter drawn uniformly from `[-0.4, 0.4)` by the suite's seeded generator.
struct FixedWeights(Rng);

impl<B: AutodiffBackend> ModuleMapper<B> for FixedWeights {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let shape = tensor.shape();
        let values: Vec<f32> = (0..shape.num_elements())
            .map(|_| (self.0.uniform() * 0.8 - 0.4) as f32)
            .collect();
        let fixed = Tensor::<B, 1>::from_floats(values.as_slice(), &tensor.device())
            .reshape(shape)
            .set_require_grad(tensor.is_require_grad());
        Param::from_mapped_value(id, fixed, mapper)
    }
}

pub fn sgd<B: AutodiffBackend>(momentum: bool) -> SgdOptim<B> {
    let momentum = momentum.then(|| MomentumConfig::new().with_momentum(0.9));
    SgdConfig::new().with_momentum(momentum).init()
}

pub fn sam<B: AutodiffBackend>(rho: f64) -> Sam<SgdOptim<B>> {
    SamConfig::new().with_rho(rho).init(sgd(true))
}

pub fn loader<B: Backend>(
    examples: Vec<Example>,
    batch: usize,
) -> Arc<dyn DataLoader<B, ClassBatch<B>>> {
    DataLoaderBuilder::new(ClassBatcher)
        .batch_size(batch)
        .build(InMemDataset::new(examples))
}

pub fn scheduler() -> LinearLrScheduler {
    LinearLrSchedulerConfig::new(0.1, 0.01, 20).init().unwrap()
}

fn artifacts(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "burn-sam-data-parallel-{}-{name}",
        std::process::id()
    ));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One training run: `epochs` of `learner` under `strategy`, checkpointed every epoch into
/// `dir`, resumed from `resume` when given.
pub fn run<B, LR, O>(
    dir: &Path,
    train: Arc<dyn DataLoader<B, ClassBatch<B>>>,
    epochs: usize,
    learner: Learner<Components<B, LR, O>>,
    strategy: SamTraining<Components<B, LR, O>>,
    resume: Option<usize>,
) -> Model<B::InnerBackend>
where
    B: AutodiffBackend,
    LR: LrScheduler + 'static,
    O: WindowOptimizer<Model<B>, B> + 'static,
{
    let valid = loader::<B::InnerBackend>(blobs(12, 99, FEATURES, CLASSES), 12);
    let mut training = SupervisedTraining::new(dir, train, valid)
        .with_file_checkpointer(NamedMpkFileRecorder::<FullPrecisionSettings>::new())
        .with_checkpointing_strategy(KeepLastNCheckpoints::new(100))
        .renderer(Quiet)
        .with_application_logger(None)
        .num_epochs(epochs)
        .with_training_strategy(strategy.into_strategy());
    if let Some(epoch) = resume {
        training = training.checkpoint(epoch);
    }
    training.launch(learner).model
}

pub fn sam_record<B: AutodiffBackend, O: Optimizer<Model<B>, B>>(
    dir: &Path,
    epoch: usize,
) -> SamRecord {
    checkpoint_sam_record::<B, Model<B>, O>(dir, epoch)
}

/// Every float of the model, in f64.
pub fn weights<B: Backend, M: Module<B>>(model: &M) -> Vec<f64> {
    struct Collect(Vec<f64>);
    impl<B: Backend> ModuleVisitor<B> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            // Read as stored and converted on the host: not every backend computes in f64.
            self.0.extend(param.val().into_data().iter::<f64>());
        }
    }
    let mut collect = Collect(Vec::new());
    model.visit(&mut collect);
    collect.0
}

/// `max |a - b| / max |b|`.
fn relative_difference(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let worst = a
        .iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    worst / scale
}

/// 31 examples: replica 0 gets the first 15, replica 1 the last 16 (Burn's contiguous split).
pub fn examples() -> Vec<Example> {
    blobs(31, 7, FEATURES, CLASSES)
}

/// The single-device order whose batches of 16 are the union of the replicas' batches of 8:
/// [r0 0..8, r1 15..23], [r0 8..15, r1 23..31] (16 and 15 items: uneven weights).
fn union_order(examples: &[Example]) -> Vec<Example> {
    [0..8, 15..23, 8..15, 23..31]
        .into_iter()
        .flat_map(|range| examples[range].to_vec())
        .collect()
}

pub fn data_parallel<LR, O, B>(
    devices: &[Device<B>],
    optim: &O,
    ascent: Ascent,
) -> SamTraining<Components<B, LR, O>>
where
    B: AutodiffBackend,
    LR: LrScheduler + 'static,
    O: WindowOptimizer<Model<B>, B> + 'static,
{
    SamTraining::data_parallel(devices.to_vec(), optim, ascent)
        .unwrap()
        .with_items(ClassBatch::len)
}

pub fn one_replica_is_sam_training<B: AutodiffBackend>(devices: [Device<B>; 2]) {
    let model = model::<B>(&devices[0]);
    let data = || {
        DataLoaderBuilder::new(ClassBatcher)
            .batch_size(8)
            .shuffle(3)
            .build(InMemDataset::new(examples()))
    };
    let optim = sam::<B>(0.05);
    let single = SamTraining::new(devices[0].clone(), &optim);
    let expected = run(
        &artifacts("n1-single"),
        data(),
        2,
        Learner::new(model.clone(), optim, scheduler()),
        single,
        None,
    );
    for ascent in [Ascent::Synced, Ascent::Local] {
        let optim = sam::<B>(0.05);
        let strategy =
            SamTraining::data_parallel(vec![devices[0].clone()], &optim, ascent).unwrap();
        let traffic = strategy.traffic();
        let actual = run(
            &artifacts("n1-parallel"),
            data(),
            2,
            Learner::new(model.clone(), optim, scheduler()),
            strategy,
            None,
        );
        assert_eq!(weights(&actual), weights(&expected), "{ascent:?}");
        assert_eq!(
            (traffic.bytes(), traffic.steps()),
            (0, 8),
            "one replica moves nothing"
        );
    }
}

pub fn same_batch_on_both_replicas<B: AutodiffBackend>(devices: [Device<B>; 2]) {
    let model = model::<B>(&devices[0]);
    let half = blobs(16, 5, FEATURES, CLASSES);
    let expected = {
        let optim = sam::<B>(0.05);
        let single = SamTraining::new(devices[0].clone(), &optim);
        run(
            &artifacts("same-single"),
            loader(half.clone(), 8),
            2,
            Learner::new(model.clone(), optim, scheduler()),
            single,
            None,
        )
    };
    // Both halves of the split hold the same examples: each step both replicas see one batch.
    let twice: Vec<Example> = half.iter().chain(&half).cloned().collect();
    for ascent in [Ascent::Synced, Ascent::Local] {
        let optim = sam::<B>(0.05);
        let strategy = data_parallel(&devices, &optim, ascent);
        let actual = run(
            &artifacts("same-parallel"),
            loader(twice.clone(), 8),
            2,
            Learner::new(model.clone(), optim, scheduler()),
            strategy,
            None,
        );
        let difference = relative_difference(&weights(&actual), &weights(&expected));
        assert!(difference <= 1e-6, "{ascent:?}: {difference:e}");
    }
}

pub fn synced_is_sam_on_the_union<B: AutodiffBackend>(devices: [Device<B>; 2]) {
    let model = model::<B>(&devices[0]);
    let optim = sam::<B>(0.05);
    let single = SamTraining::new(devices[0].clone(), &optim).with_items(ClassBatch::len);
    let expected = run(
        &artifacts("union-single"),
        loader(union_order(&examples()), 16),
        3,
        Learner::new(model.clone(), optim, scheduler()),
        single,
        None,
    );

    let optim = sam::<B>(0.05);
    let strategy = data_parallel(&devices, &optim, Ascent::Synced);
    let traffic = strategy.traffic();
    let actual = run(
        &artifacts("union-synced"),
        loader(examples(), 8),
        3,
        Learner::new(model.clone(), optim, scheduler()),
        strategy,
        None,
    );
    let difference = relative_difference(&weights(&actual), &weights(&expected));
    assert!(difference <= 1e-5, "{difference:e}");
    // Per step: the model, then the perturbed model, out to replica 1, and two gradients back
    // (all f32 here): 4 times the parameters' bytes.
    let parameter_bytes = (weights::<B, _>(&model).len() * 4) as f64;
    assert_eq!(traffic.steps(), 6);
    assert_eq!(traffic.bytes_per_step(), 4.0 * parameter_bytes);

    // Weighting by items matters: equal weights give another model.
    let optim = sam::<B>(0.05);
    let equal = SamTraining::data_parallel(devices.to_vec(), &optim, Ascent::Synced).unwrap();
    let unweighted = run(
        &artifacts("union-equal"),
        loader(examples(), 8),
        3,
        Learner::new(model, optim, scheduler()),
        equal,
        None,
    );
    assert!(relative_difference(&weights(&unweighted), &weights(&expected)) > 1e-5);
}

/// Each micro-batch's loss is weighted before its backward pass on every replica, as on one
/// device: with one micro-batch per replica the replicated window is the single-device window
/// of the same micro-batches bitwise (the two gradients are added in the same order). With two
/// per replica each replica first sums its own, `(a + b) + (c + d)` where one device adds
/// `((a + b) + c) + d`: apart in the last bits of f32.
pub fn replicated_window_is_the_single_device_window<B: AutodiffBackend>(devices: [Device<B>; 2]) {
    let model = model::<B>(&devices[0]);
    // 32 examples in batches of 8: each replica's half is two batches.
    let examples = blobs(32, 7, FEATURES, CLASSES);
    let single = |order: Vec<Example>, window: usize, name: &str| {
        let optim = sam::<B>(0.05);
        let strategy = SamTraining::new(devices[0].clone(), &optim)
            .with_accumulation(window)
            .unwrap()
            .with_items(ClassBatch::len);
        let learner = Learner::new(model.clone(), optim, scheduler());
        weights(&run(
            &artifacts(name),
            loader(order, 8),
            3,
            learner,
            strategy,
            None,
        ))
    };
    let replicated = |window: usize, name: &str| {
        let optim = sam::<B>(0.05);
        let strategy = data_parallel(&devices, &optim, Ascent::Synced)
            .with_accumulation(window)
            .unwrap();
        let learner = Learner::new(model.clone(), optim, scheduler());
        let loader = loader(examples.clone(), 8);
        weights(&run(&artifacts(name), loader, 3, learner, strategy, None))
    };
    let interleaved: Vec<Example> = [0..8, 16..24, 8..16, 24..32]
        .into_iter()
        .flat_map(|range| examples[range].to_vec())
        .collect();
    let one_each = replicated(1, "window-replicated-1");
    assert_eq!(
        one_each,
        single(interleaved.clone(), 2, "window-single-2"),
        "one micro-batch per replica"
    );
    // Clipping sees the combined gradient's one norm, as on one device.
    let clipped = || {
        SamConfig::new()
            .with_rho(0.05)
            .with_max_grad_norm(Some(0.1))
            .init(sgd(true))
    };
    let optim = clipped();
    let strategy = data_parallel(&devices, &optim, Ascent::Synced);
    let learner = Learner::new(model.clone(), optim, scheduler());
    let dir = artifacts("window-replicated-clipped");
    let data = loader(examples.clone(), 8);
    let replicated_clipped = weights(&run(&dir, data, 3, learner, strategy, None));
    let optim = clipped();
    let strategy = SamTraining::new(devices[0].clone(), &optim)
        .with_accumulation(2)
        .unwrap()
        .with_items(ClassBatch::len);
    let learner = Learner::new(model.clone(), optim, scheduler());
    let dir = artifacts("window-single-clipped");
    let single_clipped = weights(&run(
        &dir,
        loader(interleaved, 8),
        3,
        learner,
        strategy,
        None,
    ));
    assert_eq!(replicated_clipped, single_clipped, "clipped");
    assert_ne!(replicated_clipped, one_each, "clipping clipped");
    let two = replicated(2, "window-replicated-2");
    let difference = relative_difference(&two, &single(examples.clone(), 4, "window-single-4"));
    println!("two micro-batches per replica against one device's window of 4: {difference:e}");
    assert!(difference <= 1e-6, "{difference:e}");
}

pub fn synced_runs_every_variant<B: AutodiffBackend>(devices: [Device<B>; 2]) {
    let model = model::<B>(&devices[0]);
    // LookSAM every second step: full and one-pass steps both cross the replicas. Momentum-SAM
    // sends every replica the same look-ahead. Schedules decide alike on every replica: from
    // the step count, or (AE-SAM) from the combined first gradient.
    let sam = SamConfig::new().with_rho(0.05);
    let adaptive = SamSchedule::Adaptive {
        decay: 0.5,
        threshold_start: 0.5,
        threshold_end: 0.5,
        steps: 10,
    };
    let configs = [
        sam.clone().with_variant(SamVariant::gsam()),
        sam.clone()
            .with_variant(SamVariant::LookSam { k: 2, alpha: 0.7 }),
        sam.clone().with_variant(SamVariant::friendly_sam()),
        sam.clone().with_variant(SamVariant::momentum_sam()),
        sam.clone()
            .with_schedule(Some(SamSchedule::Random { p: 0.5, seed: 2 })),
        sam.clone().with_schedule(Some(adaptive)),
    ];
    for config in configs {
        let what = format!("{} {:?}", config.variant.name(), config.schedule);
        let optim = || config.init(sgd::<B>(true));
        let sam = optim();
        let single = SamTraining::new(devices[0].clone(), &sam).with_items(ClassBatch::len);
        let expected = run(
            &artifacts("variant-single"),
            loader(union_order(&examples()), 16),
            3,
            Learner::new(model.clone(), sam, scheduler()),
            single,
            None,
        );
        let sam = optim();
        let strategy = data_parallel(&devices, &sam, Ascent::Synced);
        let actual = run(
            &artifacts("variant-synced"),
            loader(examples(), 8),
            3,
            Learner::new(model.clone(), sam, scheduler()),
            strategy,
            None,
        );
        // The halves' gradients are summed in another order than the union batch's, in f32;
        // LookSAM's `||g|| / ||g_v||` scales that rounding up (seen: 1.1e-5 after 6 steps).
        let difference = relative_difference(&weights(&actual), &weights(&expected));
        assert!(difference <= 1e-4, "{what}: {difference:e}");
    }
}

/// Moves every parameter with a gradient by `scale * g`.
struct Shift<'a> {
    grads: &'a GradientsParams,
    scale: f64,
}

impl<B: AutodiffBackend> ModuleMapper<B> for Shift<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let moved = match self.grads.get::<B::InnerBackend, D>(id) {
            Some(grad) => {
                let value = tensor.inner() + grad.mul_scalar(self.scale);
                Tensor::from_inner(value).require_grad()
            }
            None => tensor,
        };
        Param::from_mapped_value(id, moved, mapper)
    }
}

fn loss_grads<B: AutodiffBackend>(
    model: &Model<B>,
    batch: &[Example],
    device: &Device<B>,
) -> GradientsParams {
    use burn::data::dataloader::batcher::Batcher;
    let batch: ClassBatch<B> = ClassBatcher.batch(batch.to_vec(), device);
    GradientsParams::from_grads(model.loss(&batch).backward(), model)
}

fn norm<B: AutodiffBackend>(model: &Model<B>, grads: &GradientsParams) -> f64 {
    struct Squares<'a>(&'a GradientsParams, f64);
    impl<B: AutodiffBackend> ModuleVisitor<B> for Squares<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(grad) = self.0.get::<B::InnerBackend, D>(param.id) {
                let values = grad.into_data();
                self.1 += values.iter::<f64>().map(|x| x * x).sum::<f64>();
            }
        }
    }
    let mut squares = Squares(grads, 0.0);
    model.visit(&mut squares);
    squares.1.sqrt()
}

pub fn local_is_its_definition<B: AutodiffBackend>(devices: [Device<B>; 2]) {
    // A large radius: the replicas' perturbations differ clearly from the global one.
    let (rho, lr) = (0.5, 0.1);
    let model = model::<B>(&devices[0]);
    let data = examples();
    let before = weights(&model.valid());
    // One step: replica 0 holds 15 examples, replica 1 holds 16, in one batch each.
    let optim = SamConfig::new().with_rho(rho).init(sgd::<B>(false));
    let strategy = data_parallel(&devices, &optim, Ascent::Local);
    let traffic = strategy.traffic();
    let local = run(
        &artifacts("local"),
        loader(data.clone(), 16),
        1,
        Learner::new(model.clone(), optim, lr),
        strategy,
        None,
    );

    assert_eq!(
        weights(&model.valid()),
        before,
        "training left its initial model alone"
    );
    // By hand: each replica's gradient at w + rho g_r / ||g_r||, weighted by its items.
    let eps = SamConfig::new().eps;
    let mut sum = Vec::new();
    for (shard, weight) in [(&data[..15], 15.0 / 31.0), (&data[15..], 16.0 / 31.0)] {
        let grads = loss_grads(&model, shard, &devices[0]);
        let scale = rho / (norm(&model, &grads) + eps);
        let perturbed = model.clone().map(&mut Shift {
            grads: &grads,
            scale,
        });
        let grads = loss_grads(&perturbed, shard, &devices[0]);
        sum.push((grads, weight));
    }
    let mut stepped = model.clone();
    for (grads, weight) in &sum {
        stepped = stepped.map(&mut Shift {
            grads,
            scale: -lr * weight,
        });
    }
    let difference = relative_difference(&weights(&local), &weights(&stepped.valid()));
    assert!(difference <= 1e-5, "{difference:e}");
    // One broadcast and one gradient per step, as plain data parallelism.
    let parameter_bytes = (weights::<B, _>(&model).len() * 4) as f64;
    assert_eq!(traffic.bytes_per_step(), 2.0 * parameter_bytes);

    let optim = SamConfig::new().with_rho(rho).init(sgd::<B>(false));
    let strategy = data_parallel(&devices, &optim, Ascent::Synced);
    let synced = run(
        &artifacts("local-synced"),
        loader(data, 16),
        1,
        Learner::new(model, optim, lr),
        strategy,
        None,
    );
    let apart = relative_difference(&weights(&synced), &weights(&local));
    assert!(apart > 1e-4, "{apart:e}");
}

pub fn rho_zero_is_the_large_batch<B: AutodiffBackend>(devices: [Device<B>; 2]) {
    let model = model::<B>(&devices[0]);
    let optim = sgd::<B>(true);
    let single = SamTraining::new(devices[0].clone(), &optim).with_items(ClassBatch::len);
    let expected = run(
        &artifacts("zero-single"),
        loader(union_order(&examples()), 16),
        2,
        Learner::new(model.clone(), optim, scheduler()),
        single,
        None,
    );

    let optim = sgd::<B>(true);
    let strategy = data_parallel(&devices, &optim, Ascent::Synced);
    let plain = run(
        &artifacts("zero-plain"),
        loader(examples(), 8),
        2,
        Learner::new(model.clone(), optim, scheduler()),
        strategy,
        None,
    );
    let difference = relative_difference(&weights(&plain), &weights(&expected));
    assert!(difference <= 1e-5, "plain data parallelism: {difference:e}");
    for ascent in [Ascent::Synced, Ascent::Local] {
        let optim = sam::<B>(0.0);
        let strategy = data_parallel(&devices, &optim, ascent);
        let actual = run(
            &artifacts("zero-sam"),
            loader(examples(), 8),
            2,
            Learner::new(model.clone(), optim, scheduler()),
            strategy,
            None,
        );
        let difference = relative_difference(&weights(&actual), &weights(&expected));
        assert!(difference <= 1e-5, "{ascent:?}: {difference:e}");
    }
}

pub fn f16_overflow_on_one_replica<B: AutodiffBackend>(devices: [Device<B>; 2]) {
    let model = cast_params(model::<B>(&devices[0]), FloatDType::F16);
    let scaled = || {
        SamConfig::new()
            .with_rho(0.05)
            .with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(1024.0)))
            .init(sgd::<B>(true))
    };
    // A healthy run: every replica's TrainStep scales its loss in its own thread (the
    // strategy refuses a pass whose loss was not scaled), the model learns.
    for ascent in [Ascent::Synced, Ascent::Local] {
        let optim = scaled();
        let handle = optim.loss_scale_handle();
        let strategy = data_parallel(&devices, &optim, ascent);
        let trained = run(
            &artifacts("f16"),
            loader(examples(), 8),
            2,
            Learner::new(model.clone(), optim, 0.1),
            strategy,
            None,
        );
        assert_eq!(handle.overflows(), 0, "{ascent:?}");
        assert!(relative_difference(&weights(&trained), &weights(&model.valid())) > 1e-3);
    }
    // One example of replica 1 has an infinite feature (how an f16 overflow reaches the
    // gradients; an out-of-range f32 cast to f16 is inf on some devices and 65504 on others):
    // the step is skipped on both replicas, weights and state bitwise as they were, the scale
    // halved once.
    let mut poisoned = examples();
    poisoned[20].features[0] = f32::INFINITY;
    for ascent in [Ascent::Synced, Ascent::Local] {
        let optim = scaled();
        let handle = optim.loss_scale_handle();
        let strategy = data_parallel(&devices, &optim, ascent);
        let dir = artifacts("f16-overflow");
        // One step: each replica's shard in one batch.
        let after = run(
            &dir,
            loader(poisoned.clone(), 16),
            1,
            Learner::new(model.clone(), optim, 0.1),
            strategy,
            None,
        );
        assert_eq!(weights(&after), weights(&model.valid()), "{ascent:?}");
        assert_eq!((handle.get(), handle.overflows()), (512.0, 1), "{ascent:?}");
        let record = sam_record::<B, SgdOptim<B>>(&dir, 1);
        assert_eq!(
            (record.stats.steps, record.stats.updates_skipped),
            (1, 1),
            "{ascent:?}"
        );
    }
}

pub fn resume_equals_uninterrupted<B: AutodiffBackend>(devices: [Device<B>; 2]) {
    let model = model::<B>(&devices[0]);
    let data = || {
        DataLoaderBuilder::new(ClassBatcher)
            .batch_size(4)
            .shuffle(11)
            .build(InMemDataset::new(examples()))
    };
    // f16 replicas too: Burn loads the checkpoint's f16 parameters as f32, and `SamTraining`
    // puts them back before the replicas copy the model.
    let f16 = burn_sam::cast_params(model.clone(), burn::tensor::FloatDType::F16);
    for (ascent, model) in [
        (Ascent::Synced, &model),
        (Ascent::Local, &model),
        (Ascent::Synced, &f16),
    ] {
        let fresh = || {
            let optim = sam::<B>(0.05);
            let strategy = data_parallel(&devices, &optim, ascent)
                .with_accumulation(2)
                .unwrap();
            (Learner::new(model.clone(), optim, scheduler()), strategy)
        };
        let whole = artifacts("whole");
        let (learner, strategy) = fresh();
        let uninterrupted = run(&whole, data(), 3, learner, strategy, None);
        let parts = artifacts("parts");
        let (learner, strategy) = fresh();
        run(&parts, data(), 1, learner, strategy, None);
        let (learner, strategy) = fresh();
        let resumed = run(&parts, data(), 3, learner, strategy, Some(1));
        assert_eq!(weights(&resumed), weights(&uninterrupted), "{ascent:?}");
        let dtype = model.mlp.layers[0].weight.val().dtype();
        assert_eq!(resumed.mlp.layers[0].weight.val().dtype(), dtype);
        let (expected, actual) = (
            sam_record::<B, SgdOptim<B>>(&whole, 3),
            sam_record::<B, SgdOptim<B>>(&parts, 3),
        );
        assert_eq!(actual.stats, expected.stats);
        // Replica 1 holds 16 examples, 4 batches of 4: 2 windows of 2 per epoch.
        assert_eq!(actual.stats.steps, 3 * 2, "{ascent:?}");
    }
}

pub fn local_variant_refused<B: AutodiffBackend>(devices: [Device<B>; 2]) {
    let optim = SamConfig::new()
        .with_variant(SamVariant::gsam())
        .init(sgd::<B>(false));
    let error = SamTraining::<Components<B, f64, Sam<SgdOptim<B>>>>::data_parallel(
        devices.to_vec(),
        &optim,
        Ascent::Local,
    )
    .err()
    .expect("refused");
    assert!(
        error.to_string().contains("GSAM cannot take local ascents"),
        "{error}"
    );
    let adaptive = SamConfig::new()
        .with_schedule(Some(SamSchedule::adaptive(100)))
        .init(sgd::<B>(false));
    let error = SamTraining::<Components<B, f64, Sam<SgdOptim<B>>>>::data_parallel(
        devices.to_vec(),
        &adaptive,
        Ascent::Local,
    )
    .err()
    .expect("refused");
    assert!(
        error
            .to_string()
            .contains("an adaptive SamSchedule cannot take local ascents"),
        "{error}"
    );
    assert!(
        SamTraining::<Components<B, f64, Sam<SgdOptim<B>>>>::data_parallel(
            devices.to_vec(),
            &optim,
            Ascent::Synced
        )
        .is_ok()
    );
    let error = SamTraining::<Components<B, f64, Sam<SgdOptim<B>>>>::data_parallel(
        Vec::new(),
        &optim,
        Ascent::Synced,
    )
    .err()
    .expect("refused");
    assert!(error.to_string().contains("`devices` = 0"), "{error}");
}
