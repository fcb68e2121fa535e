//! An ordinary Burn `Learner` program on the UCI digits (metrics, renderer, validation,
//! checkpoints, a scheduler), trained with Burn's default strategy (`--method sgd`) or with SAM
//! through `burn_sam_accum::train::SamTraining` (`--method sam`), optionally with gradient
//! accumulation (`--window`), f16 loss scaling (`--dtype f16`) and data parallelism over
//! several devices (`--devices N --ascent synced|local`; on the CPU the device repeated, with
//! `--features cuda` N GPUs), and across the processes of an MPI job (`--features mpi`,
//! launched by `mpirun -np N`: each rank holds --devices replicas; rank 0 reports).
//!
//! `cargo run --release --example learner-digits -- --method sam --window 2`
//! `cargo run --release --example learner-digits -- --devices 2 --ascent local`
//! `cargo build --release --example learner-digits --features mpi &&
//!  mpirun -np 2 target/release/examples/learner-digits --ascent synced`

use std::path::PathBuf;
use std::sync::Arc;

use burn::backend::Autodiff;
use burn::data::dataloader::DataLoader;
use burn::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
use burn::lr_scheduler::LrScheduler;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{Optimizer, SgdConfig};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ElementConversion;
use burn::tensor::FloatDType;
use burn::train::metric::{AccuracyMetric, LossMetric};
use burn::train::{Learner, LearningComponentsMarker, SupervisedTraining, TrainingStrategy};
use burn_sam::{cast_params, LossScalerConfig, SamConfig};
use burn_sam_accum::train::{Ascent, SamMetric, SamTraining, Traffic};
use burn_sam_suite::{ClassBatch, Classifier, MlpConfig};
use clap::{Parser, ValueEnum};

use burn_sam_suite::digits::{digits_loader, Digits, CLASSES, FEATURES};
use burn_sam_suite::Rng;

#[cfg(not(feature = "cuda"))]
type B = Autodiff<burn::backend::Flex>;
#[cfg(feature = "cuda")]
type B = Autodiff<burn::backend::Cuda>;

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Method {
    /// SGD with momentum and Burn's default training strategy.
    Sgd,
    /// SAM over the same SGD, with `SamTraining`.
    Sam,
}

/// Where data-parallel SAM ascends ([`Ascent`]).
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum AscentArg {
    /// One perturbation from the gradient of the global batch.
    Synced,
    /// Each replica perturbed by its own gradient.
    Local,
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Dtype {
    F32,
    F16,
}

/// The example's flags.
#[derive(Parser, Debug, Clone)]
#[command(about = "Burn's Learner on the UCI digits, with or without SAM")]
pub struct Args {
    #[arg(long, value_enum, default_value = "sam")]
    method: Method,
    /// SAM's neighbourhood radius.
    #[arg(long, default_value_t = 0.3)]
    rho: f64,
    /// Batches per optimizer step (SAM only).
    #[arg(long, default_value_t = 1)]
    window: usize,
    /// Parameter type; f16 trains with dynamic loss scaling and f32 master weights (SAM only).
    #[arg(long, value_enum, default_value = "f32")]
    dtype: Dtype,
    /// Replicas of the model, data-parallel (SGD too: plain data parallelism, gradients
    /// averaged over the global batch). Each takes batches of --batch-size.
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// Where SAM's ascent happens with --devices > 1.
    #[arg(long, value_enum, default_value = "synced")]
    ascent: AscentArg,
    #[arg(long, default_value_t = 40)]
    epochs: usize,
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Peak learning rate of the cosine schedule.
    #[arg(long, default_value_t = 0.05)]
    lr: f64,
    /// Fraction of training labels replaced by another class (0 <= noise < 0.9).
    #[arg(long, default_value_t = 0.5)]
    noise: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Where Burn writes metrics logs and checkpoints (rank 0 alone, under MPI).
    #[arg(long, default_value = "target/learner-digits")]
    artifacts: PathBuf,
    /// Continue from the last checkpoint in --artifacts, if there is one (under MPI every rank
    /// reads rank 0's: the folder must be shared).
    #[arg(long)]
    resume: bool,
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/digits.csv.gz"))]
    data: PathBuf,
    /// This process's MPI rank (set by the program, not a flag).
    #[arg(skip)]
    rank: usize,
}

/// This process's place in the job: rank 0 of 1 without the `mpi` feature or `mpirun`.
struct Job {
    #[cfg(feature = "mpi")]
    ranks: burn_sam_accum::train::Ranks,
}

impl Job {
    fn start() -> Result<Self, String> {
        Ok(Self {
            #[cfg(feature = "mpi")]
            ranks: burn_sam_accum::train::Ranks::init().map_err(|error| error.to_string())?,
        })
    }

    fn rank(&self) -> usize {
        #[cfg(feature = "mpi")]
        return self.ranks.rank();
        #[cfg(not(feature = "mpi"))]
        0
    }

    fn size(&self) -> usize {
        #[cfg(feature = "mpi")]
        return self.ranks.size();
        #[cfg(not(feature = "mpi"))]
        1
    }

    /// `strategy` across the job's ranks.
    fn span<LC: burn::train::LearningComponentsTypes + 'static>(
        &self,
        strategy: SamTraining<LC>,
    ) -> SamTraining<LC>
    where
        LC::Optimizer: burn_sam_accum::WindowOptimizer<LC::TrainingModel, LC::Backend>,
        <LC::TrainingModel as burn::train::TrainStep>::Input: Clone,
    {
        #[cfg(feature = "mpi")]
        return strategy.across_ranks(&self.ranks);
        #[cfg(not(feature = "mpi"))]
        strategy
    }
}

/// `count` replicas: the one CPU device repeated, or the first `count` GPUs.
fn devices(count: usize) -> Vec<burn::tensor::Device<B>> {
    #[cfg(not(feature = "cuda"))]
    let devices = vec![Default::default(); count];
    #[cfg(feature = "cuda")]
    let devices = (0..count)
        .map(burn::backend::cuda::CudaDevice::new)
        .collect();
    devices
}

/// The data-parallel strategy over `--devices` replicas on each rank of the job.
fn data_parallel<O>(
    args: &Args,
    job: &Job,
    optim: &O,
) -> Result<SamTraining<LearningComponentsMarker<B, Scheduler, Model, O>>, String>
where
    O: burn_sam_accum::WindowOptimizer<Model, B> + 'static,
{
    let ascent = match args.ascent {
        AscentArg::Synced => Ascent::Synced,
        AscentArg::Local => Ascent::Local,
    };
    let strategy = SamTraining::data_parallel(devices(args.devices), optim, ascent)
        .map_err(|error| error.to_string())?
        .with_accumulation(args.window)
        .map_err(|error| error.to_string())?;
    Ok(job.span(strategy.with_items(ClassBatch::len)))
}

type Scheduler = burn::lr_scheduler::cosine::CosineAnnealingLrScheduler;
type Model = Classifier<B>;
type Inner = <B as AutodiffBackend>::InnerBackend;
type Loader<Bk> = Arc<dyn DataLoader<Bk, ClassBatch<Bk>>>;

/// The ordinary Burn part: metrics (SAM's `metrics` beside Burn's), checkpoints, the default
/// renderer; `strategy` replaces Burn's default training loop.
fn launch<LR, O>(
    args: &Args,
    train: Loader<B>,
    valid: Loader<Inner>,
    learner: Learner<LearningComponentsMarker<B, LR, Model, O>>,
    strategy: Option<TrainingStrategy<LearningComponentsMarker<B, LR, Model, O>>>,
    metrics: Vec<SamMetric>,
) -> Classifier<Inner>
where
    LR: LrScheduler + 'static,
    O: Optimizer<Model, B> + 'static,
{
    let mut training = SupervisedTraining::new(&args.artifacts, train, valid);
    for metric in metrics {
        training = training.metric_train_numeric(metric);
    }
    let training = training
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        // Full precision: `--resume` continues exactly (`CompactRecorder` stores the model's and
        // the base optimizer's float tensors in f16).
        .with_file_checkpointer(NamedMpkFileRecorder::<FullPrecisionSettings>::new())
        .num_epochs(args.epochs)
        .summary();
    // Under MPI the other ranks write nothing: rank 0 logs, reports and checkpoints.
    let training = match args.rank {
        0 => training,
        _ => training.with_application_logger(None),
    };
    let resume = args.resume.then(|| last_checkpoint(&args.artifacts));
    let training = match resume.flatten() {
        Some(epoch) => {
            eprintln!("resuming after epoch {epoch}");
            training.checkpoint(epoch)
        }
        None => training,
    };
    let training = match strategy {
        Some(strategy) => training.with_training_strategy(strategy),
        None => training,
    };
    training.launch(learner).model
}

/// The epoch of the last checkpoint Burn's file checkpointer wrote into `artifacts`.
fn last_checkpoint(artifacts: &std::path::Path) -> Option<usize> {
    std::fs::read_dir(artifacts.join("checkpoint"))
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            name.strip_prefix("model-")?.split('.').next()?.parse().ok()
        })
        .max()
}

fn check(args: &Args) -> Result<(), String> {
    let refuse = |flag: &str, value: String, allowed: &str| {
        Err(format!("--{flag} = {value}: allowed {allowed}"))
    };
    if !(0.0..0.9).contains(&args.noise) {
        return refuse("noise", args.noise.to_string(), "0 <= noise < 0.9");
    }
    if !(args.rho >= 0.0 && args.rho.is_finite()) {
        return refuse("rho", args.rho.to_string(), "a finite rho >= 0");
    }
    if args.epochs == 0 || args.batch_size == 0 || args.devices == 0 {
        return refuse("epochs/--batch-size/--devices", "0".into(), "integers >= 1");
    }
    if !(args.lr > 0.0 && args.lr.is_finite()) {
        return refuse("lr", args.lr.to_string(), "a finite lr > 0");
    }
    if args.method == Method::Sgd && (args.window != 1 || args.dtype == Dtype::F16) {
        return Err(
            "--window and --dtype f16 need --method sam (Burn's default strategy \
                    sums accumulated gradients and has no loss scaling)"
                .into(),
        );
    }
    if args.ascent == AscentArg::Local && args.method == Method::Sgd {
        return Err("--ascent local needs --method sam".into());
    }
    Ok(())
}

fn main() {
    if let Err(message) = run(&Args::parse()) {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

/// Trains with Burn's `Learner` and returns the clean test accuracy.
pub fn run(args: &Args) -> Result<f64, String> {
    check(args)?;
    let job = Job::start()?;
    // Every replica of the job, over every rank.
    let replicas = args.devices * job.size();
    let args = &Args {
        rank: job.rank(),
        ..args.clone()
    };
    let digits = Digits::load(&args.data)?;
    let (mut train, test) = digits.split(597);
    let changed = train.corrupt(args.noise, &mut Rng::new(args.seed.wrapping_mul(7919)));
    eprintln!(
        "{} training images ({:.1}% relabelled), {} clean test images",
        train.len(),
        100.0 * changed,
        test.len()
    );

    let device = Default::default();
    B::seed(&device, args.seed);
    let model = Classifier {
        mlp: MlpConfig::new(vec![FEATURES, 256, 256, CLASSES]).init(&device),
    };
    let model = match args.dtype {
        Dtype::F32 => model,
        Dtype::F16 => cast_params(model, FloatDType::F16),
    };
    let train: Loader<B> = digits_loader(train, args.batch_size, args.seed);
    let valid: Loader<Inner> = digits_loader(test.clone(), args.batch_size, args.seed);
    // Burn's split gives each replica floor(items / N) examples and the last one the rest.
    let last_replica = train.num_items() - (replicas - 1) * (train.num_items() / replicas);
    let steps = args.epochs * last_replica.div_ceil(args.batch_size).div_ceil(args.window);
    let scheduler = CosineAnnealingLrSchedulerConfig::new(args.lr, steps)
        .init()
        .expect("valid schedule");
    let sgd = SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
        .init();

    let mut traffic = None::<Traffic>;
    let start = std::time::Instant::now();
    let model = match args.method {
        Method::Sgd if replicas == 1 => launch(
            args,
            train,
            valid,
            Learner::new(model, sgd, scheduler),
            None,
            Vec::new(),
        ),
        Method::Sgd => {
            let strategy = data_parallel(args, &job, &sgd)?;
            traffic = Some(strategy.traffic());
            let learner = Learner::new(model, sgd, scheduler);
            let strategy = Some(strategy.into_strategy());
            launch(args, train, valid, learner, strategy, Vec::new())
        }
        Method::Sam => {
            // What SAM adds: wrap the optimizer and hand the strategy to the training.
            let scaling = (args.dtype == Dtype::F16).then(LossScalerConfig::new);
            let optim = SamConfig::new()
                .with_rho(args.rho)
                .with_loss_scaling(scaling)
                .init(sgd);
            let strategy = match replicas {
                1 => SamTraining::new(device, &optim)
                    .with_accumulation(args.window)
                    .map_err(|error| error.to_string())?
                    .with_items(ClassBatch::len),
                _ => data_parallel(args, &job, &optim)?,
            };
            traffic = Some(strategy.traffic());
            // SAM's own numbers beside Burn's, one line each.
            let metrics = vec![
                SamMetric::sharpness(&optim),
                SamMetric::grad_norm(&optim),
                SamMetric::loss_scale(&optim),
                SamMetric::overflowed_steps(&optim),
            ];
            let learner = Learner::new(model, optim, scheduler);
            let strategy = Some(strategy.into_strategy());
            launch(args, train, valid, learner, strategy, metrics)
        }
    };
    let seconds = start.elapsed().as_secs_f64();
    if job.rank() != 0 {
        return Ok(f64::NAN);
    }
    let indices: Vec<usize> = (0..test.len()).collect();
    // The model comes back on the training device, the default one.
    let (inputs, targets) = test.batch(&indices, FloatDType::F32, &Default::default());
    let output = model.forward_classification(ClassBatch { inputs, targets });
    let right = output.output.argmax(1).squeeze::<1>().equal(output.targets);
    let accuracy = right.int().sum().into_scalar().elem::<f64>() / test.len() as f64;
    let ranks = match job.size() {
        1 => String::new(),
        n => format!(" over {n} ranks"),
    };
    let description = match (replicas, args.method) {
        (1, _) => String::new(),
        (n, Method::Sgd) => format!(", {n} replicas{ranks}"),
        (n, Method::Sam) => format!(", {n} replicas{ranks}, {:?} ascent", args.ascent),
    };
    println!(
        "{:?} ({:?}, window {}{description}): clean test accuracy {:.1}% after {} epochs",
        args.method,
        args.dtype,
        args.window,
        100.0 * accuracy,
        args.epochs
    );
    if let Some(traffic) = traffic.filter(|_| replicas > 1) {
        println!(
            "sent by rank 0 (between devices and to the other ranks): {:.0} bytes per optimizer \
             step ({} steps, {:.1} ms per step with validation)",
            traffic.bytes_per_step(),
            traffic.steps(),
            1e3 * seconds / traffic.steps().max(1) as f64
        );
    }
    Ok(accuracy)
}
