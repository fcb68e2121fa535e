//! One training run: a model (the MLP or the CNN) on the noisy training labels, tested on
//! clean labels each epoch.

use std::time::Instant;

use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, FloatDType, Int, Tensor};
use burn_sam::{SamConfig, StepOutcome};
use burn_sam_accum::{AccumulationConfig, MicroBatch, WindowOptimizer};
use burn_sam_suite::bench::{Cnn, CnnConfig};
use burn_sam_suite::{Mlp, MlpConfig};

use burn_sam_suite::digits::{Digits, CLASSES, FEATURES};
use burn_sam_suite::Rng;

pub struct Setup<'a> {
    pub train: &'a Digits,
    pub test: &'a Digits,
    pub hidden: Vec<usize>,
    pub epochs: usize,
    pub batch_size: usize,
    pub lr: f64,
    pub dtype: FloatDType,
    pub seed: u64,
    /// The radius the sharpness probe perturbs by at the end of each epoch.
    pub probe_rho: f64,
}

/// Test accuracy after each epoch, training accuracy on the (noisy) labels at the end, and
/// the mean training time per epoch.
pub struct Run {
    pub test_accuracy: Vec<f64>,
    pub train_accuracy: f64,
    pub epoch_seconds: f64,
    /// `||w||` over every parameter at the end (Momentum-SAM's radius against the weights).
    pub weight_norm: f64,
    /// The fraction of steps that took SAM's two passes (LookSAM's full steps; none for SGD
    /// and Momentum-SAM).
    pub two_pass_steps: f64,
    /// SAM's mean sharpness `L(w + e) - L(w)` over each epoch's steps that had it, as its
    /// step reports (and the `Learner`'s metric) give it (NaN for an epoch without one).
    pub sharpness: Vec<f64>,
    /// The same sharpness at the end of each epoch, on a fixed batch of training images at
    /// radius `probe_rho`, for every method alike.
    pub probed_sharpness: Vec<f64>,
}

/// A model the example trains: the digits' 64 pixels in, 10 logits out.
pub trait DigitsModel<B: Backend>: Module<B> {
    /// Built with Burn's default initialisation, `hidden` the MLP's layer widths.
    fn build(hidden: &[usize], device: &B::Device) -> Self;
    /// The logits for `x`, `[batch, 64]`.
    fn logits(&self, x: Tensor<B, 2>) -> Tensor<B, 2>;
}

impl<B: Backend> DigitsModel<B> for Mlp<B> {
    fn build(hidden: &[usize], device: &B::Device) -> Self {
        MlpConfig::new([&[FEATURES][..], hidden, &[CLASSES]].concat()).init(device)
    }

    fn logits(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.forward(x)
    }
}

impl<B: Backend> DigitsModel<B> for Cnn<B> {
    fn build(_hidden: &[usize], device: &B::Device) -> Self {
        CnnConfig::new().with_side(8).init(device)
    }

    fn logits(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.forward(x)
    }
}

/// Trains a model `M` with `optimizer` (any Burn optimizer, `MixedPrecision` or `Sam`, driven
/// through `burn-sam-accum` with windows of one batch). `progress` gets (epoch, test accuracy).
pub fn train<B, M, O>(setup: &Setup, optimizer: O, mut progress: impl FnMut(usize, f64)) -> Run
where
    B: AutodiffBackend,
    M: DigitsModel<B> + AutodiffModule<B>,
    M::InnerModule: DigitsModel<B::InnerBackend>,
    O: WindowOptimizer<M, B>,
{
    let device = B::Device::default();
    B::seed(&device, setup.seed);
    let model = M::build(&setup.hidden, &device);
    let mut model = burn_sam::cast_params(model, setup.dtype);
    let mut optimizer = AccumulationConfig::new(1).init(optimizer);
    let cross_entropy = CrossEntropyLossConfig::new().init(&device);
    // The loss in f32 whatever the parameters: log-softmax in f16 loses the small classes.
    let loss = |model: &M, (x, y): &(Tensor<B, 2>, Tensor<B, 1, Int>)| {
        let logits = model.logits(x.clone()).cast(FloatDType::F32);
        cross_entropy.forward(logits, y.clone())
    };

    let mut rng = Rng::new(setup.seed);
    let mut order: Vec<usize> = (0..setup.train.len()).collect();
    let mut test_accuracy = Vec::new();
    let mut seconds = 0.0;
    let (mut steps, mut two_pass) = (0, 0);
    let mut sharpness = Vec::new();
    let mut probed_sharpness = Vec::new();
    let probe_rows: Vec<usize> = (0..setup.train.len().min(512)).collect();
    let probe_batch = setup.train.batch::<B>(&probe_rows, setup.dtype, &device);
    for epoch in 1..=setup.epochs {
        let start = Instant::now();
        let (mut sharpness_sum, mut sharpness_steps) = (0.0, 0);
        rng.shuffle(&mut order);
        for indices in order.chunks(setup.batch_size) {
            let batch = setup.train.batch::<B>(indices, setup.dtype, &device);
            let window = [MicroBatch::new(batch)];
            let step = optimizer.step(setup.lr, model, &window, loss);
            let step = step.expect("a training step");
            let outcome = step.report.sam.map(|report| report.outcome);
            // Read back with the step's norms: no wait of its own.
            let sharp = step
                .report
                .sam
                .map_or(f64::NAN, |report| report.sharpness());
            if sharp.is_finite() {
                (sharpness_sum, sharpness_steps) = (sharpness_sum + sharp, sharpness_steps + 1);
            }
            steps += 1;
            two_pass += usize::from(matches!(
                outcome,
                Some(StepOutcome::Applied | StepOutcome::AscentSkipped)
            ));
            model = step.module;
        }
        seconds += start.elapsed().as_secs_f64();
        sharpness.push(sharpness_sum / f64::from(sharpness_steps));
        test_accuracy.push(accuracy(&model.valid(), setup.test, setup.dtype));
        probed_sharpness.push(probe(&model, &probe_batch, loss, setup.probe_rho));
        progress(epoch, *test_accuracy.last().unwrap());
    }
    let weights = model.valid();
    Run {
        train_accuracy: accuracy(&weights, setup.train, setup.dtype),
        weight_norm: weight_norm(&weights),
        test_accuracy,
        epoch_seconds: seconds / setup.epochs as f64,
        two_pass_steps: two_pass as f64 / steps as f64,
        sharpness,
        probed_sharpness,
    }
}

/// `L(w + e) - L(w)` of `loss` on `batch`, `e` SAM's perturbation at radius `rho` (a fresh
/// SAM's ascent, its first step): how sharp the weights are, whatever trained them.
fn probe<B, M, T>(model: &M, batch: &T, loss: impl Fn(&M, &T) -> Tensor<B, 1>, rho: f64) -> f64
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
{
    let value = |loss: Tensor<B, 1>| loss.into_scalar().elem::<f64>();
    let at_w = loss(model, batch);
    let grads = GradientsParams::from_grads(at_w.clone().backward(), model);
    let mut sam = SamConfig::new()
        .with_rho(rho)
        .init(SgdConfig::new().init::<B, M>());
    let perturbed = sam
        .ascend(0.0, model.clone(), grads)
        .expect("a probe's ascent");
    value(loss(&perturbed, batch).detach()) - value(at_w.detach())
}

/// `||w||` over every parameter of `model`.
fn weight_norm<B: Backend, M: Module<B>>(model: &M) -> f64 {
    struct Squares(f64);
    impl<B: Backend> ModuleVisitor<B> for Squares {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let sum = param.val().cast(FloatDType::F32).powi_scalar(2).sum();
            self.0 += sum.into_scalar().elem::<f64>();
        }
    }
    let mut squares = Squares(0.0);
    model.visit(&mut squares);
    squares.0.sqrt()
}

/// The fraction of `digits` whose label is the model's most likely class.
fn accuracy<B: Backend, M: DigitsModel<B>>(model: &M, digits: &Digits, dtype: FloatDType) -> f64 {
    let indices: Vec<usize> = (0..digits.len()).collect();
    let (x, y) = digits.batch::<B>(&indices, dtype, &B::Device::default());
    let predicted = model.logits(x).argmax(1).flatten::<1>(0, 1);
    let correct: i64 = predicted.equal(y).int().sum().into_scalar().elem();
    correct as f64 / digits.len() as f64
}
