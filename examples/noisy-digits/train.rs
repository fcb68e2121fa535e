//! One training run: an MLP on the noisy training labels, tested on clean labels each epoch.

use std::time::Instant;

use burn::module::AutodiffModule;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, FloatDType, Int, Tensor};
use burn_sam::StepOutcome;
use burn_sam_accum::{AccumulationConfig, MicroBatch, WindowOptimizer};
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
}

/// Trains with `optimizer` (any Burn optimizer, `MixedPrecision` or `Sam`, driven through
/// `burn-sam-accum` with windows of one batch). `progress` gets (epoch, test accuracy).
pub fn train<B, O>(setup: &Setup, optimizer: O, mut progress: impl FnMut(usize, f64)) -> Run
where
    B: AutodiffBackend,
    O: WindowOptimizer<Mlp<B>, B>,
{
    let device = B::Device::default();
    B::seed(&device, setup.seed);
    let sizes = [&[FEATURES][..], &setup.hidden, &[CLASSES]].concat();
    let model: Mlp<B> = MlpConfig::new(sizes).init(&device);
    let mut model = burn_sam::cast_params(model, setup.dtype);
    let mut optimizer = AccumulationConfig::new(1).init(optimizer);
    let cross_entropy = CrossEntropyLossConfig::new().init(&device);
    // The loss in f32 whatever the parameters: log-softmax in f16 loses the small classes.
    let loss = |model: &Mlp<B>, (x, y): &(Tensor<B, 2>, Tensor<B, 1, Int>)| {
        let logits = model.forward(x.clone()).cast(FloatDType::F32);
        cross_entropy.forward(logits, y.clone())
    };

    let mut rng = Rng::new(setup.seed);
    let mut order: Vec<usize> = (0..setup.train.len()).collect();
    let mut test_accuracy = Vec::new();
    let mut seconds = 0.0;
    let (mut steps, mut two_pass) = (0, 0);
    for epoch in 1..=setup.epochs {
        let start = Instant::now();
        rng.shuffle(&mut order);
        for indices in order.chunks(setup.batch_size) {
            let batch = setup.train.batch::<B>(indices, setup.dtype, &device);
            let window = [MicroBatch::new(batch)];
            let step = optimizer.step(setup.lr, model, &window, loss);
            let step = step.expect("a training step");
            let outcome = step.report.sam.map(|report| report.outcome);
            steps += 1;
            two_pass += usize::from(matches!(
                outcome,
                Some(StepOutcome::Applied | StepOutcome::AscentSkipped)
            ));
            model = step.module;
        }
        seconds += start.elapsed().as_secs_f64();
        test_accuracy.push(accuracy(&model.valid(), setup.test, setup.dtype));
        progress(epoch, *test_accuracy.last().unwrap());
    }
    let weights = model.valid();
    Run {
        train_accuracy: accuracy(&weights, setup.train, setup.dtype),
        weight_norm: weight_norm(&weights),
        test_accuracy,
        epoch_seconds: seconds / setup.epochs as f64,
        two_pass_steps: two_pass as f64 / steps as f64,
    }
}

/// `||w||` over every parameter of `model`.
fn weight_norm<B: burn::tensor::backend::Backend>(model: &Mlp<B>) -> f64 {
    let squares = |tensor: Tensor<B, 1>| -> f64 {
        let sum = tensor.cast(FloatDType::F32).powi_scalar(2).sum();
        sum.into_scalar().elem()
    };
    let layer_squares = model.layers.iter().map(|layer| {
        let bias = layer.bias.as_ref().map_or(0.0, |bias| squares(bias.val()));
        squares(layer.weight.val().flatten(0, 1)) + bias
    });
    layer_squares.sum::<f64>().sqrt()
}

/// The fraction of `digits` whose label is the model's most likely class.
fn accuracy<B: burn::tensor::backend::Backend>(
    model: &Mlp<B>,
    digits: &Digits,
    dtype: FloatDType,
) -> f64 {
    let indices: Vec<usize> = (0..digits.len()).collect();
    let (x, y) = digits.batch::<B>(&indices, dtype, &B::Device::default());
    let predicted = model.forward(x).argmax(1).flatten::<1>(0, 1);
    let correct: i64 = predicted.equal(y).int().sum().into_scalar().elem();
    correct as f64 / digits.len() as f64
}
