//! `SamTraining` inside Burn's `Learner` on Flex (f32): training improves the model, rho = 0
//! is Burn's default strategy, resuming equals the uninterrupted run, the LR scheduler advances
//! once per optimizer step, accumulation equals the large batch, and a window equals the
//! direct path's bitwise (`learner/window.rs`).

#[path = "learner/window.rs"]
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
    cast_params, LossScaledConfig, LossScalerConfig, Sam, SamConfig, SamSchedule, SamVariant,
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

#[test]
fn two_epochs_of_sam_improve_accuracy() {
    let model = model();
    let before = evaluate(&model.valid());
    let trained = sam_two_epochs(
        "improve",
        model,
        SamConfig::new().with_rho(0.05).init(sgd()),
    );
    let after = evaluate(&trained);
    println!("(accuracy, loss) before {before:?}, after two epochs {after:?}");
    // The initialisation is random: its accuracy varies, its loss is near ln 3.
    assert!(
        after.0 >= 0.9 && after.1 < before.1 / 2.0,
        "{before:?} -> {after:?}"
    );
}

#[test]
fn rho_zero_is_burns_default_strategy() {
    let model = model();
    let burn_dir = artifacts("default");
    let burn = run(
        &burn_dir,
        train_loader(16, Some(3)),
        2,
        Learner::new(model.clone(), sgd(), 0.05),
        None,
        None,
    );
    let optim = SamConfig::new().with_rho(0.0).init(sgd());
    let ours = sam_two_epochs("rho-zero", model.clone(), optim);
    let dir = artifacts_path("rho-zero");
    let difference = max_difference(&weights(&burn), &weights(&ours));
    assert_eq!(difference, 0.0, "rho = 0 against Burn's default strategy");
    // The metric logs too: one entry per batch (from the first pass) and per validation batch.
    for log in [
        "train/epoch-1/Loss.log",
        "train/epoch-2/Accuracy.log",
        "valid/epoch-2/Loss.log",
    ] {
        let read = |dir: &Path| std::fs::read_to_string(dir.join(log)).unwrap();
        assert_eq!(read(&dir), read(&burn_dir), "{log}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("train/epoch-2/Loss.log"))
            .unwrap()
            .lines()
            .count(),
        8
    );
    // And SAM with rho > 0 does differ: the comparison can fail.
    let sam = sam_two_epochs(
        "rho-positive",
        model,
        SamConfig::new().with_rho(0.05).init(sgd()),
    );
    assert!(max_difference(&weights(&burn), &weights(&sam)) > 1e-3);
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

/// SAM's own part of the optimizer checkpoint of `epoch`, for a `Sam<O>` optimizer.
fn sam_record<O: Optimizer<Model, B>>(dir: &Path, epoch: usize) -> SamRecord {
    checkpoint_sam_record::<B, Model, O>(dir, epoch)
}

#[test]
fn resuming_from_a_checkpoint_equals_the_uninterrupted_run() {
    let model = model();
    let fresh = || {
        let optim = scaled_sam();
        let strategy = SamTraining::new(Default::default(), &optim)
            .with_accumulation(2)
            .unwrap();
        (Learner::new(model.clone(), optim, scheduler()), strategy)
    };

    let whole = artifacts("whole");
    let (learner, strategy) = fresh();
    let uninterrupted = run(
        &whole,
        train_loader(16, Some(5)),
        4,
        learner,
        Some(strategy),
        None,
    );

    let parts = artifacts("parts");
    let (learner, strategy) = fresh();
    run(
        &parts,
        train_loader(16, Some(5)),
        2,
        learner,
        Some(strategy),
        None,
    );
    let (learner, strategy) = fresh();
    let resumed = run(
        &parts,
        train_loader(16, Some(5)),
        4,
        learner,
        Some(strategy),
        Some(2),
    );

    assert_eq!(
        max_difference(&weights(&uninterrupted), &weights(&resumed)),
        0.0
    );
    let (expected, actual) = (
        sam_record::<AdamOptim>(&whole, 4),
        sam_record::<AdamOptim>(&parts, 4),
    );
    assert_eq!(actual.stats, expected.stats);
    assert_eq!(
        actual.stats.steps, 16,
        "4 epochs of ceil(8 batches / 2) steps"
    );
    let (expected, actual) = (
        expected.mixed_precision.loss_scaler.unwrap(),
        actual.mixed_precision.loss_scaler.unwrap(),
    );
    assert!(expected.scale > 256.0, "the scale grew: {}", expected.scale);
    assert_eq!(actual, expected);
}

/// Burn's `CompactRecorder` (README's before 2026-12-06) stores the model's and the base
/// optimizer's float tensors in f16; SAM's own state (f32 master weights, the loss scaler,
/// Momentum-SAM's momentum) is plain numbers, which every recorder stores as they are. So that
/// state is the same in a compact checkpoint as in a full-precision one, while a run resumed
/// from a compact checkpoint of an f32 model does not continue exactly: README's snippets use
/// a full-precision recorder.
#[test]
fn sam_state_survives_a_half_precision_recorder_and_resume_needs_full_precision() {
    // f16 weights with f32 masters, the loss scaler and Momentum-SAM's momentum: all of SAM's
    // own state.
    let f16 = cast_params(model(), FloatDType::F16);
    let optim = || {
        SamConfig::new()
            .with_rho(1.0)
            .with_variant(SamVariant::momentum_sam())
            .with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(1024.0)))
            .init(sgd())
    };
    let checkpointed = |name: &str, compact: bool| {
        let dir = artifacts(name);
        let optim = optim();
        let strategy = SamTraining::new(Default::default(), &optim);
        let learner = Learner::new(f16.clone(), optim, 0.05);
        let loader = train_loader(16, Some(3));
        match compact {
            true => {
                run_recorded(
                    CompactRecorder::new(),
                    &dir,
                    loader,
                    2,
                    learner,
                    Some(strategy),
                    None,
                );
                checkpoint_sam_record_with::<B, Model, SgdOptim, _>(CompactRecorder::new(), &dir, 1)
            }
            false => {
                run(&dir, loader, 2, learner, Some(strategy), None);
                sam_record::<SgdOptim>(&dir, 1)
            }
        }
    };
    let (full, compact) = (checkpointed("full", false), checkpointed("compact", true));
    // By parameter id: records list them in no fixed order.
    fn by_id<T>(entries: impl Iterator<Item = (String, T)>) -> Vec<(String, T)> {
        let mut entries: Vec<_> = entries.collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }
    let masters = |record: &SamRecord| {
        let masters = record.mixed_precision.master_weights.iter();
        by_id(masters.map(|m| (m.id.clone(), m.values.clone())))
    };
    let momentum = |record: &SamRecord| {
        let tensors = record.variant.tensors.iter();
        by_id(tensors.map(|t| (t.id.clone(), t.values.clone())))
    };
    assert_eq!(masters(&compact).len(), 4, "f32 masters of the f16 weights");
    assert_eq!(masters(&compact), masters(&full));
    assert!(!momentum(&full).is_empty());
    assert_eq!(momentum(&compact), momentum(&full));
    assert_eq!(
        compact.mixed_precision.loss_scaler,
        full.mixed_precision.loss_scaler
    );
    assert_eq!(
        (compact.stats, compact.variant.rho),
        (full.stats, full.variant.rho)
    );

    // An f32 model resumed from a compact checkpoint: its weights and SGD's momentum were
    // stored in f16. `SamTraining` says so at resume; a full-precision resume does not.
    let log = strategy_log();
    let warnings = || {
        let warning = "burn-sam: SamTraining: resuming from the checkpoint of epoch 2: the \
                       resumed model is not the model saved beside the optimizer's record";
        let log = log.lock().unwrap();
        log.iter().filter(|line| line.starts_with(warning)).count()
    };
    let initial = model();
    let fresh = || {
        let optim = SamConfig::new().with_rho(0.05).init(sgd());
        let strategy = SamTraining::new(Default::default(), &optim);
        (Learner::new(initial.clone(), optim, 0.05), strategy)
    };
    let whole = artifacts("compact-whole");
    let (learner, strategy) = fresh();
    let loader = || train_loader(16, Some(5));
    let uninterrupted = run(&whole, loader(), 3, learner, Some(strategy), None);
    let parts = artifacts("compact-parts");
    let (learner, strategy) = fresh();
    run_recorded(
        CompactRecorder::new(),
        &parts,
        loader(),
        2,
        learner,
        Some(strategy),
        None,
    );
    let (learner, strategy) = fresh();
    let resumed = run_recorded(
        CompactRecorder::new(),
        &parts,
        loader(),
        3,
        learner,
        Some(strategy),
        Some(2),
    );
    assert_eq!(warnings(), 1, "the compact resume is noticed");
    let apart = max_difference(&weights(&uninterrupted), &weights(&resumed));
    println!("resumed from a compact checkpoint: {apart:e} from the uninterrupted run");
    assert!(
        apart > 0.0,
        "a compact checkpoint resumed exactly: README says otherwise"
    );
    // The same at full precision continues exactly.
    let parts = artifacts("full-parts");
    let (learner, strategy) = fresh();
    run(&parts, loader(), 2, learner, Some(strategy), None);
    let (learner, strategy) = fresh();
    let resumed = run(&parts, loader(), 3, learner, Some(strategy), Some(2));
    assert_eq!(weights(&resumed), weights(&uninterrupted));
    assert_eq!(warnings(), 1, "a full-precision resume is the saved model");
}

type AdamWOptim = OptimizerAdaptor<AdamW, Model, B>;

/// README's f16 run (`cast_params`, loss scaling, `scale_loss` in the `TrainStep`) over AdamW,
/// checkpointed at full precision and resumed from epoch 1: Burn loads the f16 parameters as
/// f32, `SamTraining` puts them back, and the run equals the uninterrupted one bitwise, in f16.
#[test]
fn an_f16_run_resumed_from_its_checkpoint_equals_the_uninterrupted_run() {
    let f16 = cast_params(model(), FloatDType::F16);
    let fresh = || {
        let scaling = LossScalerConfig::new()
            .with_init_scale(256.0)
            .with_growth_interval(3);
        let adamw = AdamWConfig::new().with_weight_decay(0.05).init();
        let optim = SamConfig::new()
            .with_rho(0.05)
            .with_loss_scaling(Some(scaling))
            .init::<AdamWOptim>(adamw);
        let strategy = SamTraining::new(Default::default(), &optim)
            .with_accumulation(3)
            .unwrap();
        (Learner::new(f16.clone(), optim, scheduler()), strategy)
    };
    let loader = || train_loader(16, Some(5));
    let (learner, strategy) = fresh();
    let whole = artifacts("f16-whole");
    let uninterrupted = run(&whole, loader(), 3, learner, Some(strategy), None);
    let parts = artifacts("f16-parts");
    let (learner, strategy) = fresh();
    run(&parts, loader(), 1, learner, Some(strategy), None);
    let (learner, strategy) = fresh();
    let resumed = run(&parts, loader(), 3, learner, Some(strategy), Some(1));
    for model in [&uninterrupted, &resumed] {
        assert_eq!(model.mlp.layers[0].weight.val().dtype(), DType::F16);
    }
    assert_eq!(weights(&resumed), weights(&uninterrupted));
    let (expected, actual) = (
        checkpoint_sam_record::<B, Model, AdamWOptim>(&whole, 3),
        checkpoint_sam_record::<B, Model, AdamWOptim>(&parts, 3),
    );
    assert_eq!(actual.stats, expected.stats);
    let (expected, actual) = (expected.mixed_precision, actual.mixed_precision);
    assert_eq!(actual.loss_scaler, expected.loss_scaler);
    // The same f16 parameters, the same fingerprint of the same weights.
    assert_eq!(actual.model, expected.model);
    assert_eq!(actual.model.unwrap().narrow.len(), 4);
}

/// A SAM run with the builder's `grads_accumulation(builder)` and, when given,
/// `SamTraining::with_accumulation(ours)`.
fn launch_with_windows(name: &str, builder: usize, ours: Option<usize>) {
    let optim = SamConfig::new().init(sgd());
    let mut strategy = SamTraining::new(Default::default(), &optim);
    if let Some(window) = ours {
        strategy = strategy.with_accumulation(window).unwrap();
    }
    SupervisedTraining::new(artifacts(name), train_loader(16, None), valid_loader())
        .renderer(Quiet)
        .with_application_logger(None)
        .grads_accumulation(builder)
        .with_training_strategy(strategy.into_strategy())
        .launch(Learner::new(model(), optim, 0.05));
}

#[test]
#[should_panic(
    expected = "two accumulation windows: `SupervisedTraining::grads_accumulation(3)` \
                           and `SamTraining::with_accumulation(1)`"
)]
fn two_accumulation_windows_are_refused() {
    launch_with_windows("two-windows", 3, Some(1));
}

#[test]
#[should_panic(expected = "invalid AccumulationConfig: `window` = 0")]
fn grads_accumulation_zero_is_refused_beside_with_accumulation() {
    launch_with_windows("zero-beside", 0, Some(1));
}

/// SGD that records the learning rate of each of its steps.
#[derive(Clone)]
struct RecordLr {
    inner: SgdOptim,
    seen: Arc<Mutex<Vec<LearningRate>>>,
}

impl Optimizer<Model, B> for RecordLr {
    type Record = <SgdOptim as Optimizer<Model, B>>::Record;

    fn step(&mut self, lr: LearningRate, module: Model, grads: GradientsParams) -> Model {
        self.seen.lock().unwrap().push(lr);
        self.inner.step(lr, module, grads)
    }

    fn step_multi(
        &mut self,
        lr: LearningRate,
        module: Model,
        grads: MultiGradientsParams,
    ) -> Model {
        self.seen.lock().unwrap().push(lr);
        self.inner.step_multi(lr, module, grads)
    }

    fn to_record(&self) -> Self::Record {
        self.inner.to_record()
    }

    fn load_record(mut self, record: Self::Record) -> Self {
        self.inner = self.inner.load_record(record);
        self
    }
}

#[test]
fn the_scheduler_advances_once_per_optimizer_step() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let base = RecordLr {
        inner: sgd(),
        seen: seen.clone(),
    };
    let optim = SamConfig::new().with_rho(0.05).init(base);
    // 120 examples in batches of 16: 7 full batches and one of 8; windows of 3.
    let strategy = SamTraining::new(Default::default(), &optim)
        .with_accumulation(3)
        .unwrap()
        .with_items(ClassBatch::len);
    let dir = artifacts("lr");
    run(
        &dir,
        train_loader(16, None),
        2,
        Learner::new(model(), optim, scheduler()),
        Some(strategy),
        None,
    );

    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        2 * 3,
        "ceil(8 / 3) optimizer steps per epoch, 2 epochs"
    );
    let mut reference = scheduler();
    let expected: Vec<LearningRate> = (0..seen.len()).map(|_| reference.step()).collect();
    assert_eq!(seen, expected);
}

#[test]
fn accumulated_windows_equal_the_large_batch() {
    // Batches of 8 in windows of 2 against batches of 16: 120 examples give 7 windows of two
    // and a last, partial window of one batch of 8, like the large batches' last one.
    let model = model();
    let trained = |batch: usize, window: usize, name: &str| {
        let optim = SamConfig::new().with_rho(0.05).init(sgd());
        let strategy = SamTraining::new(Default::default(), &optim)
            .with_accumulation(window)
            .unwrap()
            .with_items(ClassBatch::len);
        let learner = Learner::new(model.clone(), optim, 0.05);
        weights(&run(
            &artifacts(name),
            train_loader(batch, None),
            2,
            learner,
            Some(strategy),
            None,
        ))
    };
    let large = trained(16, 1, "large");
    let accumulated = trained(8, 2, "accumulated");
    let difference = max_difference(&large, &accumulated);
    assert!(
        difference < 1e-5,
        "accumulated against large batch: {difference}"
    );
    // Without accumulation the small batches train differently: the comparison can fail.
    let small = trained(8, 1, "small");
    assert!(max_difference(&large, &small) > 1e-3);
}

#[test]
fn uneven_batches_are_weighted_by_their_items() {
    // One window per epoch: seven batches of 16 and one of 8 against one batch of 120.
    let model = model();
    let trained = |batch: usize, window: usize, items: bool| {
        let optim = SamConfig::new().with_rho(0.05).init(sgd());
        let strategy = SamTraining::new(Default::default(), &optim)
            .with_accumulation(window)
            .unwrap();
        let strategy = if items {
            strategy.with_items(ClassBatch::len)
        } else {
            strategy
        };
        let learner = Learner::new(model.clone(), optim, 0.05);
        let dir = artifacts(&format!("uneven-{batch}-{items}"));
        weights(&run(
            &dir,
            train_loader(batch, None),
            3,
            learner,
            Some(strategy),
            None,
        ))
    };
    let whole = trained(120, 1, false);
    let difference = max_difference(&whole, &trained(16, 8, true));
    assert!(
        difference < 1e-5,
        "weighted by items against one batch: {difference}"
    );
    // Equal weights over-weight the short batch.
    assert!(max_difference(&whole, &trained(16, 8, false)) > 1e-4);
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

#[test]
fn an_f16_model_trains_with_loss_scaling() {
    let log = strategy_log();
    let model = cast_params(model(), FloatDType::F16);
    let before = evaluate(&model.valid());
    let optim = SamConfig::new()
        .with_rho(0.05)
        .with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(1024.0)))
        .init(sgd());
    let trained = sam_two_epochs("f16", model, optim);
    let dir = artifacts_path("f16");
    let after = evaluate(&trained);
    println!("f16: (accuracy, loss) before {before:?}, after two epochs {after:?}");
    assert_eq!(trained.mlp.layers[0].weight.val().dtype(), DType::F16);
    assert!(
        after.0 >= 0.9 && after.1 < before.1 / 2.0,
        "{before:?} -> {after:?}"
    );
    let record = sam_record::<SgdOptim>(&dir, 2);
    let scaler = record
        .mixed_precision
        .loss_scaler
        .expect("the scaler is checkpointed");
    assert_eq!(record.stats.steps, 16, "2 epochs of 8 batches");
    assert_eq!(scaler.overflows, u64::from(scaler.scale < 1024.0));
    assert_eq!(
        record.mixed_precision.master_weights.len(),
        4,
        "f32 masters of the f16 weights"
    );
    // The loss scale and the overflowed steps are reported once per epoch, after a first line
    // that says SAM is on.
    let log = log.lock().unwrap();
    let start = "burn-sam: SamTraining: SAM (Sam), rho 0.05, 2 passes per step; \
                 loss scaling on (scale 1024); 1 batch per step; 1 device";
    assert!(log.iter().any(|l| l == start), "{log:?}");
    for epoch in [1, 2] {
        let line = format!("epoch {epoch}: loss scale ");
        assert!(log.iter().any(|l| l.starts_with(&line)), "{log:?}");
    }
}

/// The classifier with a `TrainStep` that back-propagates its loss as it is.
#[derive(Module, Debug)]
struct Unscaled<B: Backend> {
    classifier: Classifier<B>,
}

impl<B: AutodiffBackend> TrainStep for Unscaled<B> {
    type Input = ClassBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: ClassBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let item = self.classifier.forward_classification(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl<B: Backend> InferenceStep for Unscaled<B> {
    type Input = ClassBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: ClassBatch<B>) -> ClassificationOutput<B> {
        self.classifier.forward_classification(batch)
    }
}

#[test]
#[should_panic(expected = "the TrainStep did not call burn_sam_accum::train::scale_loss")]
fn loss_scaling_without_scale_loss_in_the_train_step_is_refused() {
    let model = Unscaled {
        classifier: model(),
    };
    let optim = SamConfig::new()
        .with_loss_scaling(Some(LossScalerConfig::new()))
        .init(SgdConfig::new().init());
    let strategy = SamTraining::strategy(Default::default(), &optim);
    SupervisedTraining::new(
        artifacts("unscaled"),
        train_loader(16, None),
        valid_loader(),
    )
    .renderer(Quiet)
    .with_application_logger(None)
    .with_training_strategy(strategy)
    .launch(Learner::new(model, optim, 0.05));
}

/// Burn's own strategy cannot scale the loss: a loss-scaled `Sam` or `LossScaled` there stops
/// at the first step, naming `SamTraining`.
#[test]
fn loss_scaling_in_burns_default_strategy_stops_with_the_fix() {
    let scaling = LossScalerConfig::new();
    let sam = SamConfig::new()
        .with_loss_scaling(Some(scaling.clone()))
        .init(sgd());
    let message = first_step_panic("default-scaled-sam", |dir| {
        let learner = Learner::new(model(), sam, 0.05);
        run(dir, train_loader(16, None), 2, learner, None, None);
    });
    assert!(message.contains("not a SAM training strategy"), "{message}");
    let scaled = LossScaledConfig::new(scaling).init(sgd());
    let message = first_step_panic("default-loss-scaled", |dir| {
        let learner = Learner::new(model(), scaled, 0.05);
        run(dir, train_loader(16, None), 2, learner, None, None);
    });
    assert!(
        message.contains("no loss was scaled since the last step")
            && message.contains("burn_sam_accum::train::SamTraining"),
        "{message}"
    );
}

#[test]
#[should_panic(expected = "invalid AccumulationConfig: `window` = 0")]
fn grads_accumulation_zero_is_refused_like_with_accumulation_zero() {
    launch_with_windows("accumulation-zero", 0, None);
}

#[test]
fn a_plain_optimizer_accumulates_to_burns_large_batch() {
    // No SAM: one pass per step. Batches of 8 in windows of 2 against Burn's default strategy on
    // batches of 16.
    let model = model();
    let large = run(
        &artifacts("plain-large"),
        train_loader(16, None),
        2,
        Learner::new(model.clone(), sgd(), 0.05),
        None,
        None,
    );
    let optim = sgd();
    let strategy = SamTraining::new(Default::default(), &optim)
        .with_accumulation(2)
        .unwrap()
        .with_items(ClassBatch::len);
    let accumulated = run(
        &artifacts("plain-accumulated"),
        train_loader(8, None),
        2,
        Learner::new(model, optim, 0.05),
        Some(strategy),
        None,
    );
    let difference = max_difference(&weights(&large), &weights(&accumulated));
    assert!(difference < 1e-5, "plain SGD, accumulated: {difference}");
}

#[test]
fn every_variant_and_schedule_in_the_learner_equals_its_step_with() {
    // One epoch, unshuffled: `SamTraining` must run the passes each step takes (one on
    // LookSAM's cheap steps and a schedule's base steps; a second pass there would start the
    // next step), so the Learner's weights equal `step_with`'s over the same batches.
    let adaptive = SamSchedule::Adaptive {
        decay: 0.5,
        threshold_start: 0.5,
        threshold_end: 0.5,
        steps: 8,
    };
    let sam = SamConfig::new().with_rho(0.1);
    for (name, config) in [
        (
            "GSAM",
            sam.clone().with_variant(SamVariant::Gsam { alpha: 0.3 }),
        ),
        (
            "LookSAM",
            sam.clone()
                .with_variant(SamVariant::LookSam { k: 3, alpha: 0.7 }),
        ),
        (
            "Friendly-SAM",
            sam.clone().with_variant(SamVariant::friendly_sam()),
        ),
        (
            "Every-2",
            sam.clone().with_schedule(Some(SamSchedule::Every { k: 2 })),
        ),
        (
            "Random",
            sam.clone()
                .with_schedule(Some(SamSchedule::Random { p: 0.5, seed: 1 })),
        ),
        (
            "Adaptive",
            sam.clone().with_schedule(Some(adaptive.clone())),
        ),
    ] {
        let model = model();
        let mut by_hand = config.init(sgd());
        let mut expected = model.clone();
        let mut outcomes = Vec::new();
        for batch in train_loader(16, None).iter() {
            let step = by_hand
                .step_with(0.05, expected, |m: &Model| m.loss(&batch))
                .unwrap();
            outcomes.push(step.report.outcome);
            expected = step.module;
        }
        if config.schedule.is_some() {
            assert!(
                outcomes.contains(&StepOutcome::BaseStep),
                "{name}: {outcomes:?}"
            );
            assert!(
                outcomes.contains(&StepOutcome::Applied),
                "{name}: {outcomes:?}"
            );
        }

        let optim = config.init(sgd());
        let strategy = SamTraining::new(Default::default(), &optim);
        let learner = Learner::new(model, optim, 0.05);
        let trained = run(
            &artifacts(&format!("variant-{name}")),
            train_loader(16, None),
            1,
            learner,
            Some(strategy),
            None,
        );
        let difference = max_difference(&weights(&trained), &weights(&expected.valid()));
        assert!(difference < 1e-6, "{name}: {difference}");
    }
}

#[test]
fn data_parallel_logs_its_traffic_once_per_epoch() {
    let log = strategy_log();
    let optim = SamConfig::new().with_rho(0.05).init(sgd());
    let devices = vec![Default::default(); 2];
    let strategy = SamTraining::data_parallel(devices, &optim, Ascent::Synced).unwrap();
    let traffic = strategy.traffic();
    let learner = Learner::new(model(), optim, 0.05);
    let dir = artifacts("traffic");
    run(
        &dir,
        train_loader(16, Some(3)),
        1,
        learner,
        Some(strategy),
        None,
    );
    assert!(traffic.steps() > 0 && traffic.bytes() > 0);
    let expected = format!(
        "epoch 1: {:.0} bytes sent between devices and ranks per step ({} steps)",
        traffic.bytes_per_step(),
        traffic.steps()
    );
    let log = log.lock().unwrap();
    assert!(log.contains(&expected), "{expected:?} not in {log:?}");
}

/// Momentum-SAM under `SamTraining`: one pass per step at the look-ahead `w~`, while the
/// Learner's model (validated, saved, returned) is `w` between steps; equal to stepping `Sam`
/// directly through `Optimizer::step`, whose model is `w` between steps too.
#[test]
fn momentum_sam_trains_at_its_look_ahead_and_keeps_w() {
    let config = SamConfig::new()
        .with_rho(1.0)
        .with_variant(SamVariant::MomentumSam { mu: 0.9 });
    let model = model();
    let optim = config.init(sgd());
    let strategy = SamTraining::new(Default::default(), &optim);
    let trained = run(
        &artifacts("momentum-sam"),
        train_loader(16, None),
        1,
        Learner::new(model.clone(), optim, 0.05),
        Some(strategy),
        None,
    );

    let mut direct = config.init(sgd()).step_per_pass();
    let mut w = model;
    let mut steps = 0;
    let mut farthest_look_ahead = 0.0f32;
    for batch in train_loader(16, None).iter() {
        let ahead = direct.step(0.05, w.clone(), GradientsParams::new());
        farthest_look_ahead = farthest_look_ahead.max(max_difference(
            &weights(&w.valid()),
            &weights(&ahead.valid()),
        ));
        let TrainOutput { grads, .. } = TrainStep::step(&ahead, batch);
        w = direct.step(0.05, ahead, grads);
        steps += 1;
    }
    assert_eq!((steps, direct.stats().steps), (8, 8), "one pass per step");
    assert_eq!(
        weights(&trained),
        weights(&w.valid()),
        "the Learner's model is w"
    );
    assert!(farthest_look_ahead > 1e-4, "the passes ran away from w");
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

/// Burn's default strategy steps the optimizer once per batch: `Sam` there (f32 SAM, which
/// would ascend and descend on different batches, and Momentum-SAM, whose Learner would take
/// its pass at `w`) stops at its first step with the fix for that variant.
#[test]
fn sam_in_burns_default_strategy_stops_at_its_first_step() {
    let msam = SamVariant::momentum_sam();
    let cases = [
        (
            SamConfig::new().with_rho(0.05),
            [
                "`Sam` (SAM) was stepped through `Optimizer::step`",
                "ascent and descent would be taken on different batches",
                "SamTraining::strategy(device, &optim)",
            ],
        ),
        (
            SamConfig::new().with_rho(1.0).with_variant(msam),
            [
                "`Sam` (Momentum-SAM)",
                "one pass belongs at its look-ahead",
                "SamTraining::strategy(device, &optim)",
            ],
        ),
    ];
    for (config, words) in cases {
        let sam = config.init(sgd());
        let name = format!("default-{}", config.variant.name());
        let message = first_step_panic(&name, |dir| {
            let learner = Learner::new(model(), sam, 0.05);
            run(dir, train_loader(16, Some(3)), 2, learner, None, None);
        });
        for words in words {
            assert!(message.contains(words), "{words:?} not in {message}");
        }
    }
}

/// A `SamTraining` built from a second optimizer of the same configuration, not the one the
/// `Learner` steps, stops at the first step with one message: f32 SAM, loss-scaled f16 SAM
/// (whose `TrainStep` did scale its loss) and Momentum-SAM. (A strategy built from an optimizer
/// of another type than the `Learner`'s does not compile.)
#[test]
fn a_strategy_built_from_another_optimizer_stops_at_its_first_step() {
    let expected = "the `Learner` stepped another optimizer";
    let scaling = Some(LossScalerConfig::new().with_init_scale(1024.0));
    let configs = [
        ("sam", SamConfig::new().with_rho(0.05), false),
        (
            "f16-sam",
            SamConfig::new().with_rho(0.05).with_loss_scaling(scaling),
            true,
        ),
        (
            "msam",
            SamConfig::new()
                .with_rho(1.0)
                .with_variant(SamVariant::momentum_sam()),
            false,
        ),
    ];
    for (name, config, f16) in configs {
        let optim = config.init(sgd());
        let other = config.init(sgd());
        let model = match f16 {
            true => cast_params(model(), FloatDType::F16),
            false => model(),
        };
        let message = first_step_panic(&format!("other-{name}"), |dir| {
            let strategy = SamTraining::new(Default::default(), &other);
            let learner = Learner::new(model, optim, 0.05);
            run(
                dir,
                train_loader(16, Some(3)),
                2,
                learner,
                Some(strategy),
                None,
            );
        });
        assert!(message.contains(expected), "{name}: {message}");
        assert!(!message.contains("no loss was scaled"), "{name}: {message}");
    }
}

/// A Learner checkpoint resumed with another SAM variant and other loss scaling stops before
/// any step, naming the checkpoint's epoch, what it holds, what the optimizer is and both
/// mismatches, each with its fix.
#[test]
fn a_checkpoint_resumed_with_another_variant_stops_naming_its_epoch_and_every_mismatch() {
    let model = model();
    let dir = artifacts_path("resume-other-variant");
    let config = SamConfig::new().with_rho(0.05);
    let friendly = config.clone().with_variant(SamVariant::friendly_sam());
    sam_two_epochs("resume-other-variant", model.clone(), friendly.init(sgd()));
    assert_eq!(
        sam_record::<SgdOptim>(&dir, 2)
            .label
            .and_then(|label| label.epoch),
        Some(2),
        "SamTraining labels its checkpoints with their epoch"
    );

    // Two mismatches: both are named, each with its fix, in one refusal.
    let look = config
        .with_variant(SamVariant::look_sam())
        .with_loss_scaling(Some(LossScalerConfig::new()))
        .init(sgd());
    let strategy = SamTraining::new(Default::default(), &look);
    let learner = Learner::new(model, look, 0.05);
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(
            &dir,
            train_loader(16, Some(3)),
            3,
            learner,
            Some(strategy),
            Some(2),
        )
    }))
    .expect_err("another variant must not resume");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    for words in [
        "(the Learner checkpoint of epoch 2)",
        "Friendly-SAM state",
        "the optimizer is LookSAM",
        "2 mismatches: (1) resume with `loss_scaling` as when it was saved (no loss scaling)",
        "(2) LookSAM's state cannot continue Friendly-SAM's",
    ] {
        assert!(message.contains(words), "{words:?} not in {message}");
    }
    assert!(!dir.join("train/epoch-3").exists(), "no step was taken");
}
