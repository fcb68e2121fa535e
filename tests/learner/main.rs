//! `SamTraining` inside Burn's `Learner` on Flex (f32), a module per job: `training`
//! (training improves the model, rho = 0 is Burn's default strategy, the LR scheduler advances
//! once per optimizer step, every variant and schedule equals its `step_with`), `resume`
//! (resuming equals the uninterrupted run, f32 and f16; what a checkpoint refuses),
//! `accumulation` (windows equal the large batch; conflicting settings refused),
//! `loss_scaling` (f16 with loss scaling; an unscaled `TrainStep` refused), `misuse` (Burn's
//! own strategy, another optimizer's link) and `window` (a window equals the direct path's,
//! bitwise). This file holds what they share: the data, the model and the runs.

mod accumulation;
mod loss_scaling;
mod metrics;
mod misuse;
mod resume;
mod training;
mod window;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use burn::backend::{Autodiff, Flex};
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::lr_scheduler::linear::LinearLrScheduler;
use burn::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::lr_scheduler::LrScheduler;
use burn::module::{AutodiffModule, Module};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{Adam, AdamW, AdamWConfig, Sgd};
use burn::optim::{
    AdamConfig, GradientsParams, LearningRate, MultiGradientsParams, Optimizer, SgdConfig,
};
use burn::record::{CompactRecorder, FileRecorder, FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, FloatDType, Tensor};
use burn::train::checkpoint::KeepLastNCheckpoints;
use burn::train::metric::{AccuracyMetric, LossMetric};
use burn::train::{
    ClassificationOutput, InferenceStep, Learner, LearningComponentsMarker, SupervisedTraining,
    TrainOutput, TrainStep,
};
use burn_sam::record::SamRecord;
use burn_sam::{
    cast_params, LossScalerConfig, MixedPrecisionConfig, Sam, SamConfig, SamSchedule, SamVariant,
    StepOutcome,
};
use burn_sam_accum::train::{Ascent, SamTraining};
use burn_sam_accum::WindowOptimizer;
use burn_sam_suite::{
    checkpoint_sam_record, checkpoint_sam_record_with, ClassBatch, ClassBatcher, Classifier,
    Example, MlpConfig, Quiet,
};

type B = Autodiff<Flex>;
type Model = Classifier<B>;

const FEATURES: usize = 6;
const CLASSES: usize = 3;

/// Three overlapping Gaussian-ish blobs, deterministic.
fn blobs(count: usize, seed: u64) -> Vec<Example> {
    burn_sam_suite::blobs(count, seed, FEATURES, CLASSES)
}

fn model() -> Model {
    let device = Default::default();
    let model = Classifier {
        mlp: MlpConfig::new(vec![FEATURES, 16, CLASSES]).init(&device),
    };
    // Lazy parameters: initialise them before the model is cloned into several runs.
    model.valid();
    model
}

fn train_loader(batch: usize, shuffle: Option<u64>) -> Arc<dyn DataLoader<B, ClassBatch<B>>> {
    let builder = DataLoaderBuilder::new(ClassBatcher).batch_size(batch);
    let builder = match shuffle {
        Some(seed) => builder.shuffle(seed),
        None => builder,
    };
    builder.build(InMemDataset::new(blobs(120, 7)))
}

fn valid_loader() -> Arc<dyn DataLoader<Flex, ClassBatch<Flex>>> {
    DataLoaderBuilder::new(ClassBatcher)
        .batch_size(60)
        .build(InMemDataset::new(blobs(60, 99)))
}

/// Accuracy on the validation blobs.
/// Accuracy and mean cross-entropy on the validation blobs (one batch of 60).
fn evaluate(model: &Classifier<Flex>) -> (f64, f64) {
    let batch = valid_loader().iter().next().expect("one batch");
    let output = model.forward_classification(batch);
    let predicted = output.output.argmax(1).squeeze::<1>();
    let right = predicted.equal(output.targets).int().sum().into_scalar() as f64;
    (right / 60.0, f64::from(output.loss.into_scalar()))
}

fn weights<M: Module<Flex>>(model: &M) -> Vec<f32> {
    let mut values = Vec::new();
    for tensor in model_tensors(model) {
        values.extend(tensor.into_data().iter::<f32>());
    }
    values
}

fn model_tensors<M: Module<Flex>>(model: &M) -> Vec<Tensor<Flex, 1>> {
    struct Collect(Vec<Tensor<Flex, 1>>);
    impl burn::module::ModuleVisitor<Flex> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<Flex, D>>) {
            self.0.push(param.val().flatten(0, D - 1));
        }
    }
    let mut collect = Collect(Vec::new());
    model.visit(&mut collect);
    collect.0
}

fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// A fresh, empty directory for one training's artifacts.
fn artifacts(name: &str) -> PathBuf {
    let dir = artifacts_path(name);
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Where training `name` writes its artifacts.
fn artifacts_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("burn-sam-learner-{}-{name}", std::process::id()))
}

type Components<LR, O, M = Model> = LearningComponentsMarker<B, LR, M, O>;

/// A model the `Learner` trains here: classification batches in, classification outputs out.
trait LearnerModel:
    TrainStep<Input = ClassBatch<B>, Output = ClassificationOutput<B>>
    + AutodiffModule<B, InnerModule = Self::Inference>
    + std::fmt::Display
    + 'static
{
    /// The model without autodiff, which validates.
    type Inference: InferenceStep<Input = ClassBatch<Flex>, Output = ClassificationOutput<Flex>>
        + Module<Flex>;
}

impl<M> LearnerModel for M
where
    M: TrainStep<Input = ClassBatch<B>, Output = ClassificationOutput<B>>
        + AutodiffModule<B>
        + std::fmt::Display
        + 'static,
    M::InnerModule: InferenceStep<Input = ClassBatch<Flex>, Output = ClassificationOutput<Flex>>,
{
    type Inference = M::InnerModule;
}

/// Trains `learner` for `epochs` with Burn's file checkpointer (every epoch kept, at full
/// precision) and returns the model; `strategy` replaces Burn's default one, `resume`
/// continues from a checkpoint.
fn run<LR, O, M>(
    dir: &Path,
    loader: Arc<dyn DataLoader<B, ClassBatch<B>>>,
    epochs: usize,
    learner: Learner<Components<LR, O, M>>,
    strategy: Option<SamTraining<Components<LR, O, M>>>,
    resume: Option<usize>,
) -> M::InnerModule
where
    LR: LrScheduler + 'static,
    M: LearnerModel,
    O: WindowOptimizer<M, B> + 'static,
{
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    run_recorded(recorder, dir, loader, epochs, learner, strategy, resume)
}

/// [`run`] with the checkpoints written by `recorder`.
fn run_recorded<LR, O, M, FR>(
    recorder: FR,
    dir: &Path,
    loader: Arc<dyn DataLoader<B, ClassBatch<B>>>,
    epochs: usize,
    learner: Learner<Components<LR, O, M>>,
    strategy: Option<SamTraining<Components<LR, O, M>>>,
    resume: Option<usize>,
) -> M::InnerModule
where
    LR: LrScheduler + 'static,
    M: LearnerModel,
    O: WindowOptimizer<M, B> + 'static,
    FR: FileRecorder<B> + FileRecorder<Flex> + 'static,
{
    let mut training = SupervisedTraining::new(dir, loader, valid_loader())
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .with_file_checkpointer(recorder)
        .with_checkpointing_strategy(KeepLastNCheckpoints::new(100))
        .renderer(Quiet)
        .with_application_logger(None)
        .num_epochs(epochs);
    if let Some(strategy) = strategy {
        training = training.with_training_strategy(strategy.into_strategy());
    }
    if let Some(epoch) = resume {
        training = training.checkpoint(epoch);
    }
    training.launch(learner).model
}

/// Two epochs of `optim` over SGD with `SamTraining`'s defaults (batches of 16, shuffled with
/// seed 3, LR 0.05), in a fresh directory `name`.
fn sam_two_epochs(name: &str, model: Model, optim: Sam<SgdOptim>) -> Classifier<Flex> {
    let strategy = SamTraining::new(Default::default(), &optim);
    let learner = Learner::new(model, optim, 0.05);
    let dir = artifacts(name);
    run(
        &dir,
        train_loader(16, Some(3)),
        2,
        learner,
        Some(strategy),
        None,
    )
}

type SgdOptim = OptimizerAdaptor<Sgd<Flex>, Model, B>;

fn sgd() -> SgdOptim {
    SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
        .init()
}

type AdamOptim = OptimizerAdaptor<Adam, Model, B>;
type ScaledSam = Sam<AdamOptim>;

fn scaled_sam() -> ScaledSam {
    // A short growth interval: the loss scale changes during the run, so its state matters.
    let scaling = LossScalerConfig::new()
        .with_init_scale(256.0)
        .with_growth_interval(3);
    SamConfig::new()
        .with_rho(0.05)
        .with_loss_scaling(Some(scaling))
        .init(AdamConfig::new().init())
}

fn scheduler() -> LinearLrScheduler {
    LinearLrSchedulerConfig::new(0.02, 0.002, 40)
        .init()
        .unwrap()
}

/// The log records of `burn_sam_accum` in this test binary, from the first call on.
fn strategy_log() -> &'static Mutex<Vec<String>> {
    struct Capture(Mutex<Vec<String>>);
    impl log::Log for Capture {
        fn enabled(&self, metadata: &log::Metadata) -> bool {
            metadata.target().starts_with("burn_sam_accum")
        }
        fn log(&self, record: &log::Record) {
            if self.enabled(record.metadata()) {
                self.0.lock().unwrap().push(record.args().to_string());
            }
        }
        fn flush(&self) {}
    }
    static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));
    if log::set_logger(&CAPTURE).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    &CAPTURE.0
}

/// SAM's own part of the optimizer checkpoint of `epoch`, for a `Sam<O>` optimizer.
fn sam_record<O: Optimizer<Model, B>>(dir: &Path, epoch: usize) -> SamRecord {
    checkpoint_sam_record::<B, Model, O>(dir, epoch)
}

/// The message of the panic that stops a run of `train` (given a fresh artifact directory
/// `name`, Burn's file checkpointer on, 2 epochs) at its first step: no epoch ends, so nothing
/// is validated or saved.
fn first_step_panic(name: &str, train: impl FnOnce(&Path)) -> String {
    let dir = artifacts(name);
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| train(&dir)))
        .expect_err("the run must stop");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    let saved = std::fs::read_dir(dir.join("checkpoint")).map_or(0, Iterator::count);
    assert_eq!(saved, 0, "{name}: a checkpoint was written");
    for log in ["valid", "train/epoch-2"] {
        assert!(!dir.join(log).exists(), "{name}: {log} was written");
    }
    message
}
