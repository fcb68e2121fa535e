//! The Learner's window is the direct window: `SamTraining` with accumulation computes what
//! `Accumulation` computes over the same micro-batches, bitwise, because both weight each
//! micro-batch's loss before its backward pass (the `TrainStep` through `scale_loss`). Windows
//! of 3 (weights 1/3, which round differently from 1/4) and 4, weighted by item counts, with
//! the partial last window of an epoch, in f32 and loss-scaled f16, for SAM (clipped or not),
//! Momentum-SAM and `MixedPrecision`, on the MLP and on a model with BatchNorm; and an overflowing loss scale backs
//! off on the same steps on both paths. (With dropout both paths draw their masks from the
//! backend's one generator, which other tests in the process draw from too: not compared.)

use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn_sam::{LossScaleHandle, MixedPrecision};
use burn_sam_accum::{AccumulationConfig, MicroBatch};

use super::*;

/// What a path ends with: the weights `w` (for Momentum-SAM, not its look-ahead; BatchNorm's
/// running statistics among them) and the loss scale with its overflow count.
#[derive(Debug, PartialEq)]
struct End {
    weights: Vec<f32>,
    loss_scale: (f32, u64),
}

fn scale_of(handle: &LossScaleHandle) -> (f32, u64) {
    (handle.get(), handle.overflows())
}

/// A model both paths train: the direct path's loss is the `TrainStep`'s.
trait Classify: AutodiffModule<B> {
    fn mean_loss(&self, batch: &ClassBatch<B>) -> Tensor<B, 1>;
}

impl Classify for Model {
    fn mean_loss(&self, batch: &ClassBatch<B>) -> Tensor<B, 1> {
        self.loss(batch)
    }
}

/// `epochs` of `optim` from `model()` under `SamTraining` with windows of `window` (weighted by
/// items with `items`) on the unshuffled batches of 16, and the same windows through
/// `Accumulation`. 120 examples are 8 micro-batches, 7 of 16 and one of 8: windows of 3 are
/// 3, 3 and a partial 2 (16 and 8 rows, item weights 2/3 and 1/3).
fn both_paths<M, O>(
    name: &str,
    model: impl Fn() -> M,
    optim: impl Fn() -> O,
    (window, items): (usize, bool),
    epochs: usize,
) -> (End, End)
where
    M: Classify + LearnerModel,
    O: WindowOptimizer<M, B> + 'static,
{
    let learner_optim = optim();
    let handle = learner_optim.loss_scale_handle();
    let strategy = SamTraining::new(Default::default(), &learner_optim)
        .with_accumulation(window)
        .unwrap();
    let strategy = match items {
        true => strategy.with_items(ClassBatch::len),
        false => strategy,
    };
    let learner = Learner::new(model(), learner_optim, 0.05);
    let trained = run(
        &artifacts(name),
        train_loader(16, None),
        epochs,
        learner,
        Some(strategy),
        None,
    );
    let learner = End {
        weights: weights(&trained),
        loss_scale: scale_of(&handle),
    };

    let mut accumulation = AccumulationConfig::new(window).init(optim());
    let mut module = model();
    for _ in 0..epochs {
        let loader = train_loader(16, None);
        let batches: Vec<_> = loader
            .iter()
            .map(|batch| match items {
                true => {
                    let rows = batch.len();
                    MicroBatch::with_items(batch, rows)
                }
                false => MicroBatch::new(batch),
            })
            .collect();
        for window in accumulation.windows(batches) {
            let step = accumulation
                .step(0.05, module, &window, |m: &M, batch| m.mean_loss(batch))
                .unwrap();
            module = step.module;
        }
    }
    let direct = End {
        weights: weights(&module.valid()),
        loss_scale: scale_of(&accumulation.optimizer().loss_scale_handle()),
    };
    (learner, direct)
}

type Sgd<M> = OptimizerAdaptor<burn::optim::Sgd<Flex>, M, B>;

fn sgd_for<M: AutodiffModule<B>>() -> Sgd<M> {
    SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
        .init()
}

fn scaling(init: f64) -> Option<LossScalerConfig> {
    Some(LossScalerConfig::new().with_init_scale(init))
}

fn sam<M: AutodiffModule<B>>(scaling: Option<LossScalerConfig>) -> Sam<Sgd<M>> {
    SamConfig::new()
        .with_rho(0.05)
        .with_loss_scaling(scaling)
        .init(sgd_for())
}

/// SAM with the descent gradient clipped to a norm below the blobs' (about 0.5 to 1).
fn clipped<M: AutodiffModule<B>>(scaling: Option<LossScalerConfig>) -> Sam<Sgd<M>> {
    SamConfig::new()
        .with_rho(0.05)
        .with_loss_scaling(scaling)
        .with_max_grad_norm(Some(0.1))
        .init(sgd_for())
}

fn momentum_sam<M: AutodiffModule<B>>(scaling: Option<LossScalerConfig>) -> Sam<Sgd<M>> {
    SamConfig::new()
        .with_rho(1.0)
        .with_variant(SamVariant::MomentumSam { mu: 0.9 })
        .with_loss_scaling(scaling)
        .init(sgd_for())
}

fn loss_scaled<M: AutodiffModule<B>>(init: f64) -> MixedPrecision<Sgd<M>> {
    MixedPrecisionConfig::new(LossScalerConfig::new().with_init_scale(init)).init(sgd_for())
}

/// Windows of 3 and 4, with equal and with item weights.
const WINDOWS: [(usize, bool); 4] = [(3, false), (3, true), (4, false), (4, true)];

/// Every case on one MLP in one float type: SAM, Momentum-SAM and `MixedPrecision`, every window of
/// [`WINDOWS`]. `scaled` puts loss scaling on SAM's two variants too.
fn every_case(dtype: &str, model: Model, scaled: bool) {
    let scaling = || scaling(1024.0).filter(|_| scaled);
    for setup in WINDOWS {
        let case = |what: &str| format!("{what}-{dtype}-{setup:?}");
        let copy = || model.clone();
        let (learner, direct) = both_paths(&case("sam"), copy, || sam(scaling()), setup, 1);
        assert_eq!(learner, direct, "{}", case("SAM"));
        // Clipped once per window, the combined descent gradient's norm.
        let (clipped, direct) = both_paths(&case("clip"), copy, || clipped(scaling()), setup, 1);
        assert_eq!(clipped, direct, "{}", case("SAM, clipped"));
        assert_ne!(
            clipped.weights,
            learner.weights,
            "{}",
            case("clipping clipped")
        );
        let (learner, direct) =
            both_paths(&case("msam"), copy, || momentum_sam(scaling()), setup, 1);
        assert_eq!(learner, direct, "{}", case("Momentum-SAM"));
        let (learner, direct) = both_paths(&case("scaled"), copy, || loss_scaled(1024.0), setup, 1);
        assert_eq!(learner, direct, "{}", case("MixedPrecision"));
        // Training moved the weights: the paths agree on something.
        assert_ne!(
            learner.weights,
            weights(&model.valid()),
            "{}",
            case("moved")
        );
    }
}

#[test]
fn windows_equal_the_direct_path_in_f32() {
    every_case("f32", model(), false);
}

#[test]
fn windows_equal_the_direct_path_in_loss_scaled_f16() {
    every_case("f16", cast_params(model(), FloatDType::F16), true);
}

#[test]
fn an_overflowing_loss_scale_backs_off_on_the_same_steps() {
    // 2^20 overflows the f16 gradients of the first windows (and would at a third of that
    // scale were the micro-batches weighted after backward): both paths skip the same windows
    // and end at the same scale and weights.
    const INIT: f64 = 1_048_576.0;
    let model = cast_params(model(), FloatDType::F16);
    let copy = || model.clone();
    let runs = [
        (
            "SAM",
            both_paths("overflow-sam", copy, || sam(scaling(INIT)), (3, true), 2),
        ),
        (
            "MixedPrecision",
            both_paths("overflow-scaled", copy, || loss_scaled(INIT), (3, true), 2),
        ),
    ];
    for (what, (learner, direct)) in runs {
        assert_eq!(learner, direct, "{what}");
        let (scale, overflows) = learner.loss_scale;
        assert!(
            overflows > 0 && f64::from(scale) < INIT,
            "{what}: {scale} after {overflows}"
        );
        assert_ne!(
            learner.weights,
            weights(&model.valid()),
            "{what}: no step applied"
        );
    }
}

/// The blobs' classifier with BatchNorm after its hidden layer: running statistics, state that
/// each training forward pass updates, beside the weights.
#[derive(Module, Debug)]
struct NormClassifier<B: Backend> {
    input: Linear<B>,
    norm: BatchNorm<B>,
    output: Linear<B>,
}

impl<B: Backend> NormClassifier<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            input: LinearConfig::new(FEATURES, 16).init(device),
            norm: BatchNormConfig::new(16).init(device),
            output: LinearConfig::new(16, CLASSES).init(device),
        }
    }

    /// Logits in f32 and the mean cross-entropy, as `Classifier` computes them.
    fn forward_classification(&self, batch: ClassBatch<B>) -> ClassificationOutput<B> {
        let dtype = self.input.weight.val().dtype();
        let hidden = self.input.forward(batch.inputs.cast(dtype));
        let hidden = self.norm.forward(hidden).tanh();
        let logits = self.output.forward(hidden).cast(FloatDType::F32);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), batch.targets.clone());
        ClassificationOutput::new(loss, logits, batch.targets)
    }
}

impl Classify for NormClassifier<B> {
    fn mean_loss(&self, batch: &ClassBatch<B>) -> Tensor<B, 1> {
        self.forward_classification(batch.clone()).loss
    }
}

burn_sam_suite::classification_steps!(NormClassifier);

#[test]
fn windows_with_batch_norm_equal_the_direct_path() {
    let device = Default::default();
    let initial = NormClassifier::<B>::new(&device);
    initial.valid();
    // Clones share BatchNorm's running statistics: each path gets a model of its own.
    let copy = || NormClassifier::new(&device).load_record(initial.clone().into_record());
    for dtype in [FloatDType::F32, FloatDType::F16] {
        let model = || cast_params(copy(), dtype);
        let scaled = dtype == FloatDType::F16;
        for setup in [(3, false), (3, true)] {
            let case = format!("batch-norm-{dtype:?}-{setup:?}");
            let scaling = scaling(1024.0).filter(|_| scaled);
            let (learner, direct) = both_paths(&case, model, || sam(scaling.clone()), setup, 1);
            assert_eq!(learner, direct, "SAM, {case}");
            assert_ne!(learner.weights, weights(&model().valid()), "{case}: moved");
        }
    }
}
