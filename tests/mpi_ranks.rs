//! Data-parallel SAM across MPI ranks (feature `mpi`). Every rank runs this program under
//! `mpirun -np N`; `cargo xtask ci` (and `cargo xtask test-mpi`) runs each scenario:
//!
//! - `ranks` (N = 2, 3 or 4): each rank's replicas against one process holding every replica
//!   of the job, bitwise: Synced and Local on uneven shards, every SAM-family member; with
//!   N = 3 the ranks hold 1, 2 and 1 replicas (from 3 ranks on, a wrong order of additions
//!   shows: two terms add the same either way). Rank 1 starts from other weights: rank 0's are
//!   sent to it. The bytes each rank sends per gradient exchange, against a ring all-reduce's
//!   2 (N - 1) / N of a gradient. The weights of every pass; rho 0 against plain data
//!   parallelism; f16 with loss scaling and an overflow on rank 1 (from N = 3 on, a rank has
//!   no data in that step).
//! - `mismatch` (N = 2): rank 1 accumulates 2 batches per step, rank 0 one: must fail on
//!   every rank with the difference named.
//! - `die DIR` (N = 2): checkpoints into DIR, and rank 1 aborts in the middle of epoch 2: the
//!   job must end with rank 1 named.
//! - `resume DIR` (N = 2): resumes from DIR's epoch-1 checkpoint; must end with the weights of
//!   the uninterrupted run.
//!
//! The harness is this `main` (MPI is initialised and finalised once per process).

#[allow(dead_code)]
mod data_parallel;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use burn::backend::{Autodiff, Flex};
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::lr_scheduler::LrScheduler;
use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::momentum::MomentumConfig;
use burn::optim::{Optimizer, SgdConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Device, FloatDType, Tensor};
use burn::train::{
    ClassificationOutput, InferenceStep, Learner, SupervisedTraining, TrainOutput, TrainStep,
};
use burn_sam::LossScaling;
use burn_sam::{cast_params, LossScalerConfig, SamConfig, SamSchedule, SamVariant};
use burn_sam_accum::train::{Ascent, Ranks, SamMetric, SamTraining};
use burn_sam_accum::{AccumError, WindowOptimizer};
use burn_sam_suite::{ClassBatch, ClassBatcher, Example, Quiet};
use data_parallel as dp;

type B = Autodiff<Flex>;
type Model = dp::Model<B>;

fn main() {
    let ranks = Ranks::init().expect("MPI initialised");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = || PathBuf::from(args.get(1).expect("a checkpoint folder after the scenario"));
    match args.first().map(String::as_str) {
        Some("ranks") => ranks_equal_one_process(&ranks),
        Some("mismatch") => mismatch(&ranks),
        Some("die") => die(&ranks, &dir()),
        Some("resume") => resume(&ranks, &dir()),
        other => panic!("scenario {other:?}: give ranks, mismatch, die DIR or resume DIR"),
    }
    println!(
        "rank {} of {}: {} passed",
        ranks.rank(),
        ranks.size(),
        args[0]
    );
}

fn device() -> Device<B> {
    Default::default()
}

/// The same initial model on every rank and in every run.
fn model() -> Model {
    B::seed(&device(), 17);
    dp::model::<B>(&device())
}

/// Rank 0's model; another one elsewhere (the strategy must send rank 0's).
fn model_on(ranks: &Ranks) -> Model {
    struct Double;
    impl ModuleMapper<B> for Double {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let (id, tensor, mapper) = param.consume();
            let doubled = Tensor::from_inner(tensor.inner().mul_scalar(2.0)).require_grad();
            Param::from_mapped_value(id, doubled, mapper)
        }
    }
    match ranks.rank() {
        0 => model(),
        _ => model().map(&mut Double),
    }
}

/// A folder of this process's own.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("burn-sam-mpi-{}-{name}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// 31 examples in batches of 8, shuffled: with 2 replicas, 15 and 16 examples (uneven).
fn data() -> Arc<dyn DataLoader<B, ClassBatch<B>>> {
    DataLoaderBuilder::new(ClassBatcher)
        .batch_size(8)
        .shuffle(3)
        .build(InMemDataset::new(dp::examples()))
}

/// This rank's devices: 1 replica, 2 on rank 1 of 3.
fn rank_devices(ranks: &Ranks) -> Vec<Device<B>> {
    match (ranks.size(), ranks.rank()) {
        (3, 1) => vec![device(), device()],
        _ => vec![device()],
    }
}

/// The replicas of the whole job, in one process.
fn job_devices(ranks: &Ranks) -> Vec<Device<B>> {
    vec![device(); if ranks.size() == 3 { 4 } else { ranks.size() }]
}

/// 3 epochs of training with `optim` on `devices`, `window` batches per replica and step,
/// across the ranks or not.
fn train<O>(
    ranks: Option<&Ranks>,
    start: Model,
    devices: Vec<Device<B>>,
    optim: O,
    (ascent, window): (Ascent, usize),
) -> Vec<f64>
where
    O: WindowOptimizer<Model, B> + Optimizer<Model, B> + 'static,
{
    let strategy = SamTraining::data_parallel(devices, &optim, ascent)
        .unwrap()
        .with_accumulation(window)
        .unwrap()
        .with_items(ClassBatch::len);
    let strategy = match ranks {
        Some(ranks) => strategy.across_ranks(ranks),
        None => strategy,
    };
    let name = format!("run-{}", ranks.is_some());
    let learner = Learner::new(start, optim, dp::scheduler());
    let trained = dp::run(&scratch(&name), data(), 3, learner, strategy, None);
    dp::weights(&trained)
}

fn ranks_equal_one_process(ranks: &Ranks) {
    let sam = SamConfig::new().with_rho(0.05);
    // Windows of 3 batches: every replica's window is short (2 batches per epoch with 2 ranks).
    let mut cases = vec![
        (sam.clone(), (Ascent::Synced, 1)),
        (sam.clone(), (Ascent::Local, 1)),
        (sam.clone(), (Ascent::Synced, 3)),
    ];
    // LookSAM every second step: full and one-pass steps both cross the ranks.
    for variant in [
        SamVariant::gsam(),
        SamVariant::LookSam { k: 2, alpha: 0.7 },
        SamVariant::friendly_sam(),
        SamVariant::momentum_sam(),
    ] {
        cases.push((sam.clone().with_variant(variant), (Ascent::Synced, 1)));
    }
    // Schedules: every rank decides alike, from the step count or the combined gradient.
    let adaptive = SamSchedule::Adaptive {
        decay: 0.5,
        threshold_start: 0.5,
        threshold_end: 0.5,
        steps: 10,
    };
    let random = SamSchedule::Random { p: 0.5, seed: 2 };
    cases.push((sam.clone().with_schedule(Some(random)), (Ascent::Local, 1)));
    cases.push((
        sam.clone().with_schedule(Some(adaptive)),
        (Ascent::Synced, 1),
    ));
    for (config, setup) in cases {
        let name = format!("{} {:?}", config.variant.name(), config.schedule);
        let optim = config.init(dp::sgd::<B>(true));
        let expected = train(None, model(), job_devices(ranks), optim, setup);
        let optim = config.init(dp::sgd::<B>(true));
        let actual = train(
            Some(ranks),
            model_on(ranks),
            rank_devices(ranks),
            optim,
            setup,
        );
        let ascent = setup;
        assert!(
            actual != dp::weights(&model()),
            "{name} {ascent:?}: trained"
        );
        assert!(
            actual == expected,
            "{name} {ascent:?}: not bitwise one process's"
        );
    }
    bytes_per_exchange(ranks);
    for ascent in [Ascent::Synced, Ascent::Local] {
        let one_process = watched(None, job_devices(ranks), ascent);
        let this_rank = watched(Some(ranks), rank_devices(ranks), ascent);
        // 12 batches an epoch over the job's replicas, 3 epochs, 2 passes a step (under Local,
        // a second pass per replica of this rank).
        let steps = 3 * 12 / job_devices(ranks).len();
        let passes = this_rank.len();
        match ascent {
            Ascent::Synced => assert_eq!(passes, 2 * steps, "Synced: {steps} steps of 2 passes"),
            Ascent::Local => assert!(
                passes >= 2 * steps,
                "Local: {passes} passes in {steps} steps"
            ),
        }
        // Synced: both replicas run every pass at the same weights, in the same order. Local:
        // each replica's second pass is at its own perturbation, and one process's replicas
        // note theirs in whichever order their threads run.
        let same = match ascent {
            Ascent::Synced => this_rank == one_process,
            Ascent::Local => this_rank.iter().all(|pass| one_process.contains(pass)),
        };
        assert!(
            same,
            "{ascent:?}: the weights of some pass differ from one process's"
        );
    }
    // rho 0: plain data parallelism across the ranks.
    let plain = train(
        Some(ranks),
        model(),
        rank_devices(ranks),
        dp::sgd::<B>(true),
        (Ascent::Synced, 1),
    );
    for ascent in [Ascent::Synced, Ascent::Local] {
        let optim = dp::sam::<B>(0.0);
        let zero = train(
            Some(ranks),
            model(),
            rank_devices(ranks),
            optim,
            (ascent, 1),
        );
        assert!(
            zero == plain,
            "rho 0, {ascent:?}: not plain data parallelism"
        );
    }
    f16_overflow_on_one_rank(ranks);
    metrics_on_rank_zero(ranks);
}

/// SAM's metrics across ranks: rank 0 logs a line per output of its replicas with the
/// combined step's report (every step SAM's, each with its sharpness); the other ranks log
/// nothing and do not wait for their metrics.
fn metrics_on_rank_zero(ranks: &Ranks) {
    let optim = dp::sam::<B>(0.05);
    let (sharpness, sam_steps) = (SamMetric::sharpness(&optim), SamMetric::sam_steps(&optim));
    let strategy = SamTraining::data_parallel(rank_devices(ranks), &optim, Ascent::Synced)
        .unwrap()
        .with_items(ClassBatch::len)
        .across_ranks(ranks);
    let dir = scratch("metrics");
    SupervisedTraining::new(&dir, data(), dp::loader::<Flex>(dp::examples(), 8))
        .metric_train_numeric(sharpness)
        .metric_train_numeric(sam_steps)
        .renderer(Quiet)
        .with_application_logger(None)
        .num_epochs(1)
        .with_training_strategy(strategy.into_strategy())
        .launch(Learner::new(model_on(ranks), optim, dp::scheduler()));
    let lines = |metric: &str| -> Vec<String> {
        let log = dir.join(format!("train/epoch-1/{metric}.log"));
        let log = std::fs::read_to_string(log).unwrap_or_default();
        log.lines().map(str::to_string).collect()
    };
    let (steps, sharpness) = (lines("SAM_Steps"), lines("SAM_Sharpness"));
    match ranks.rank() {
        0 => {
            assert!(!steps.is_empty() && steps.iter().all(|line| line == "100,1"));
            assert_eq!(sharpness.len(), steps.len(), "a line per output");
            for line in sharpness {
                let (value, count) = line.split_once(',').expect("value,count");
                let value: f64 = value.parse().expect("a number");
                assert!(value > 0.0 && count == "1", "rank 0's sharpness {line}");
            }
        }
        _ => assert!(
            steps.is_empty() && sharpness.is_empty(),
            "rank {}",
            ranks.rank()
        ),
    }
}

/// One epoch of SAM (`Synced`: 2 gradient exchanges per step), one replica per rank, every
/// rank with data at every step. Per exchange a rank sends its replica's pieces of the other
/// ranks' shards and its summed shard to every other rank: with P the f32 gradient's bytes,
/// (1 - 1/N) P + (N - 1) P / N, about 2 (N - 1) / N P; never more than the (N - 1) P of an
/// all-gather of the gradients. Each message has a header of at most 9 bytes and 10 per piece.
fn bytes_per_exchange(ranks: &Ranks) {
    struct Tensors(usize);
    impl ModuleVisitor<B> for Tensors {
        fn visit_float<const D: usize>(&mut self, _: &Param<Tensor<B, D>>) {
            self.0 += 1;
        }
    }
    let (n, rank) = (ranks.size(), ranks.rank());
    let mut tensors = Tensors(0);
    model().visit(&mut tensors);
    // 12 batches of 2: every rank has 12 / N steps, with data at each.
    let examples: Vec<_> = dp::examples().into_iter().take(24).collect();
    let optim = dp::sam::<B>(0.05);
    let strategy = SamTraining::data_parallel(vec![device()], &optim, Ascent::Synced)
        .unwrap()
        .with_items(ClassBatch::len)
        .across_ranks(ranks);
    let traffic = strategy.traffic();
    let learner = Learner::new(model(), optim, 0.1);
    let waits = burn_sam::diagnostics::host_waits();
    dp::run(
        &scratch("bytes"),
        dp::loader(examples, 2),
        1,
        learner,
        strategy,
        None,
    );
    let waits = (burn_sam::diagnostics::host_waits() - waits) as usize;
    let steps = 12 / n;
    assert_eq!(traffic.exchanges() as usize, 2 * steps);
    host_waits_per_step(ranks, waits, steps);

    let elements = model().num_params();
    let owned = elements * (rank + 1) / n - elements * rank / n;
    let payload = 4 * (elements - owned) + 4 * (n - 1) * owned;
    // Pieces: the other ranks' shards cut the T tensors in at most T + N - 1; this rank's shard
    // goes to N - 1 ranks in at most T.
    let (t, messages) = (tensors.0, 2 * (n - 1));
    let header = 9 * messages + 10 * (t + n - 1) + 10 * (n - 1) * t;
    let sent = traffic.rank_bytes() as usize / traffic.exchanges() as usize;
    let all_gather = 4 * (n - 1) * elements;
    println!(
        "rank {rank} of {n}: {sent} bytes per exchange, {payload} of them gradients; a ring \
         all-reduce {:.0}, an all-gather of the gradients {all_gather}",
        2.0 * (n - 1) as f64 / n as f64 * (4 * elements) as f64
    );
    assert!(
        (payload..=payload + header).contains(&sent),
        "rank {rank} of {n}: {sent} bytes per exchange, {payload} of gradients and at most \
         {header} of headers expected"
    );
    assert!(
        sent <= all_gather + header,
        "{n} ranks: more than an all-gather"
    );
}

/// The host waits of `steps` SAM steps (`Synced`, one replica per rank) on Flex, where a read
/// waits for nothing: a read per pass (its gradient norm), and per gradient exchange a read of
/// each of the replica's T gradient tensors on its way to the host and one per piece of this
/// rank's summed shard on its way to the others; before the first step rank 0 reads its T
/// weights for the broadcast, and at the one epoch's checkpoint its T weights again, for the
/// fingerprint the checkpoint is labelled with. No sync: each rank's one replica runs on the
/// calling thread.
fn host_waits_per_step(ranks: &Ranks, waits: usize, steps: usize) {
    struct Sizes(Vec<usize>);
    impl ModuleVisitor<B> for Sizes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(param.shape().num_elements());
        }
    }
    let (n, rank) = (ranks.size(), ranks.rank());
    let mut sizes = Sizes(Vec::new());
    model().visit(&mut sizes);
    let (t, elements) = (sizes.0.len(), sizes.0.iter().sum::<usize>());
    let (first, last) = (elements * rank / n, elements * (rank + 1) / n);
    let mut start = 0;
    let mut pieces = 0;
    for size in sizes.0 {
        pieces += usize::from(start.max(first) < (start + size).min(last));
        start += size;
    }
    let (broadcast, checkpoint) = if rank == 0 { (t, t) } else { (0, 0) };
    let expected = steps * (2 + 2 * (t + pieces)) + broadcast + checkpoint;
    println!(
        "rank {rank} of {n}: {waits} host waits in {steps} steps, {:.1} per step ({t} tensors, \
         {pieces} pieces in this rank's shard)",
        waits as f64 / steps as f64
    );
    assert_eq!(waits, expected, "rank {rank} of {n}: host waits");
}

mod watched {
    use burn::module::Module;
    use burn::tensor::backend::Backend;
    use burn_sam_suite::Classifier;

    /// A classifier that notes the weights each pass runs at (every step's `w`, then `w + e`).
    #[derive(Module, Debug)]
    pub struct Watched<B: Backend> {
        pub classifier: Classifier<B>,
    }
}
use watched::Watched;

/// A fingerprint of the weights of each pass, in order.
static PASSES: Mutex<Vec<u64>> = Mutex::new(Vec::new());

impl TrainStep for Watched<B> {
    type Input = ClassBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: ClassBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let weights = dp::weights(&self.classifier);
        let fingerprint = weights
            .iter()
            .map(|w| w.to_bits())
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, bits| {
                (hash ^ bits).wrapping_mul(0x0100_0000_01b3)
            });
        PASSES.lock().unwrap().push(fingerprint);
        TrainStep::step(&self.classifier, batch)
    }
}

impl InferenceStep for Watched<Flex> {
    type Input = ClassBatch<Flex>;
    type Output = ClassificationOutput<Flex>;

    fn step(&self, batch: ClassBatch<Flex>) -> ClassificationOutput<Flex> {
        InferenceStep::step(&self.classifier, batch)
    }
}

/// The weights every pass of 3 epochs of SAM ran at, on `devices` (across the ranks or not),
/// each pass once (the replicas of one process run a pass at the same weights).
fn watched(ranks: Option<&Ranks>, devices: Vec<Device<B>>, ascent: Ascent) -> Vec<u64> {
    let sgd = SgdConfig::new().with_momentum(Some(MomentumConfig::new().with_momentum(0.9)));
    let optim = SamConfig::new().with_rho(0.05).init(sgd.init());
    let strategy = SamTraining::data_parallel(devices, &optim, ascent)
        .unwrap()
        .with_items(ClassBatch::len);
    let strategy = match ranks {
        Some(ranks) => strategy.across_ranks(ranks),
        None => strategy,
    };
    let valid = dp::loader::<Flex>(dp::examples(), 8);
    PASSES.lock().unwrap().clear();
    let model = Watched {
        classifier: model(),
    };
    // 12 batches of 2: every replica of the job has data at every step, so every rank runs
    // every pass.
    let examples: Vec<_> = dp::examples().into_iter().take(24).collect();
    let data = DataLoaderBuilder::new(ClassBatcher)
        .batch_size(2)
        .shuffle(3)
        .build(InMemDataset::new(examples));
    SupervisedTraining::new(scratch("watched"), data, valid)
        .renderer(Quiet)
        .with_application_logger(None)
        .num_epochs(3)
        .with_training_strategy(strategy.into_strategy())
        .launch(Learner::new(model, optim, dp::scheduler()));
    let mut passes = std::mem::take(&mut *PASSES.lock().unwrap());
    passes.dedup();
    passes
}

/// f16 with loss scaling: an infinite feature in rank 1's shard skips the step on every rank
/// (weights bitwise unchanged) and halves the scale once.
fn f16_overflow_on_one_rank(ranks: &Ranks) {
    let start = cast_params(model(), FloatDType::F16);
    let mut poisoned = dp::examples();
    poisoned[20].features[0] = f32::INFINITY;
    for ascent in [Ascent::Synced, Ascent::Local] {
        let optim = SamConfig::new()
            .with_rho(0.05)
            .with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(1024.0)))
            .init(dp::sgd::<B>(true));
        let handle = optim.loss_scale_handle();
        let strategy = SamTraining::data_parallel(rank_devices(ranks), &optim, ascent)
            .unwrap()
            .with_items(ClassBatch::len)
            .across_ranks(ranks);
        // One step: each rank's shard in one batch.
        let after = dp::run(
            &scratch("f16"),
            dp::loader(poisoned.clone(), 16),
            1,
            Learner::new(start.clone(), optim, 0.1),
            strategy,
            None,
        );
        assert!(
            dp::weights(&after) == dp::weights(&start.valid()),
            "f16 {ascent:?}: the overflowing step moved the weights"
        );
        assert_eq!((handle.get(), handle.overflows()), (512.0, 1), "{ascent:?}");
    }
}

fn mismatch(ranks: &Ranks) {
    let optim = dp::sam::<B>(0.05);
    let strategy = SamTraining::data_parallel(rank_devices(ranks), &optim, Ascent::Synced)
        .unwrap()
        .with_accumulation(ranks.rank() + 1)
        .unwrap()
        .across_ranks(ranks);
    let learner = Learner::new(model(), optim, dp::scheduler());
    dp::run(&scratch("mismatch"), data(), 1, learner, strategy, None);
    panic!("ranks with different windows were not refused");
}

/// A batcher that aborts the process (a crash, no unwinding) at its `after`-th batch.
struct Dying {
    after: usize,
    batches: AtomicUsize,
}

impl Batcher<B, Example, ClassBatch<B>> for Dying {
    fn batch(&self, items: Vec<Example>, device: &Device<B>) -> ClassBatch<B> {
        if self.batches.fetch_add(1, Ordering::Relaxed) + 1 == self.after {
            eprintln!("rank 1 dies here, in epoch 2");
            std::process::abort();
        }
        ClassBatcher.batch(items, device)
    }
}

/// 3 epochs, checkpointed into `dir` by rank 0; the full run's data on every rank.
fn checkpointed(ranks: &Ranks, dir: &Path, batcher: Dying, resume: Option<usize>) -> Vec<f64> {
    let data = DataLoaderBuilder::new(batcher)
        .batch_size(4)
        .shuffle(5)
        .build(InMemDataset::new(dp::examples()));
    let (strategy, optim) = shown_strategy(ranks, vec![device()], dp::sam::<B>(0.05)).unwrap();
    let learner = Learner::new(model_on(ranks), optim, dp::scheduler());
    dp::weights(&dp::run(dir, data, 3, learner, strategy, resume))
}

/// The guide's lines (`snippet: mpi`).
#[allow(clippy::type_complexity)]
fn shown_strategy<LR, O>(
    job: &Ranks,
    devices: Vec<Device<B>>,
    optim: O,
) -> Result<(SamTraining<dp::Components<B, LR, O>>, O), AccumError>
where
    LR: LrScheduler + 'static,
    O: WindowOptimizer<Model, B> + 'static,
{
    let ranks = job.clone();
    // snippet: mpi
    let strategy = SamTraining::data_parallel(devices, &optim, Ascent::Synced)?
        .across_ranks(&ranks) // ranks: `Ranks::init()?`, once per process, kept until the end
        .with_items(|batch: &ClassBatch<B>| batch.targets.dims()[0]);
    // snippet-end
    Ok((strategy, optim))
}

/// Rank 1 has 4 batches per epoch (16 examples): its 6th batch is in epoch 2.
fn die(ranks: &Ranks, dir: &Path) {
    let after = if ranks.rank() == 1 { 6 } else { 0 };
    let batcher = Dying {
        after,
        batches: AtomicUsize::new(0),
    };
    checkpointed(ranks, dir, batcher, None);
    panic!("rank 1 was to die in epoch 2");
}

fn resume(ranks: &Ranks, dir: &Path) {
    let never = || Dying {
        after: 0,
        batches: AtomicUsize::new(0),
    };
    let resumed = checkpointed(ranks, dir, never(), Some(1));
    let uninterrupted = checkpointed(ranks, &scratch("uninterrupted"), never(), None);
    assert!(resumed == uninterrupted, "the resumed run ended elsewhere");
}
