//! The benchmarks' models and optimizer steps, generic over the backend: `benches/sam_cost.rs`
//! times them on Flex with criterion, `examples/gpu-check` on CUDA.

use std::time::Instant;

use burn::config::Config;
use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AvgPool2d, AvgPool2dConfig};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::activation::relu;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, FloatDType, Tensor};
use burn_sam::SamConfig;
use burn_sam_accum::{AccumulationConfig, MicroBatch, WindowOptimizer};

use crate::Mlp;

/// Layer sizes of the benchmarks' small MLP (102k parameters): a step is mostly kernel launches.
pub const MLP_100K: [usize; 3] = [784, 128, 10];

/// Layer sizes of the benchmarks' large MLP (2.1M parameters).
pub const MLP_2M: [usize; 4] = [784, 2048, 256, 10];

/// A small CNN on square images (flattened; 28x28 by default): conv 1->8 3x3, relu, conv
/// 8->16 3x3, optional BatchNorm, relu, average pool 2, linear to 10 (24k parameters at 28x28,
/// most of the time in the convolutions).
#[derive(Module, Debug)]
pub struct Cnn<B: Backend> {
    conv1: Conv2d<B>,
    conv2: Conv2d<B>,
    norm: Option<BatchNorm<B>>,
    pool: AvgPool2d,
    linear: Linear<B>,
}

/// Configuration of a [`Cnn`].
#[derive(Config, Debug)]
pub struct CnnConfig {
    /// BatchNorm after the second convolution.
    #[config(default = false)]
    pub batch_norm: bool,
    /// The images' side in pixels (at least 6).
    #[config(default = 28)]
    pub side: usize,
}

impl CnnConfig {
    /// Builds the CNN with Burn's default initialisation.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Cnn<B> {
        Cnn {
            conv1: Conv2dConfig::new([1, 8], [3, 3]).init(device),
            conv2: Conv2dConfig::new([8, 16], [3, 3]).init(device),
            norm: self
                .batch_norm
                .then(|| BatchNormConfig::new(16).init(device)),
            pool: AvgPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            linear: LinearConfig::new(16 * ((self.side - 4) / 2).pow(2), 10).init(device),
        }
    }
}

/// Two 3x3 convolutions with BatchNorm and a shortcut (a 1x1 convolution with BatchNorm where
/// the shape changes): ResNet's basic block.
#[derive(Module, Debug)]
pub struct BasicBlock<B: Backend> {
    conv1: Conv2d<B>,
    norm1: BatchNorm<B>,
    conv2: Conv2d<B>,
    norm2: BatchNorm<B>,
    shortcut: Option<(Conv2d<B>, BatchNorm<B>)>,
}

impl<B: Backend> BasicBlock<B> {
    fn new(channels: [usize; 2], stride: usize, device: &B::Device) -> Self {
        let conv = |channels, kernel: usize, stride| {
            Conv2dConfig::new(channels, [kernel, kernel])
                .with_stride([stride, stride])
                // Symmetric: Burn 0.21 pads asymmetric padding with `pad`, which fails on
                // Flex in f16 (a dtype mismatch in `slice_assign`).
                .with_padding(PaddingConfig2d::Explicit(
                    kernel / 2,
                    kernel / 2,
                    kernel / 2,
                    kernel / 2,
                ))
                .with_bias(false)
                .init(device)
        };
        let norm = |channels| BatchNormConfig::new(channels).init(device);
        let [input, output] = channels;
        BasicBlock {
            conv1: conv(channels, 3, stride),
            norm1: norm(output),
            conv2: conv([output, output], 3, 1),
            norm2: norm(output),
            shortcut: (stride != 1 || input != output)
                .then(|| (conv(channels, 1, stride), norm(output))),
        }
    }

    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let y = relu(self.norm1.forward(self.conv1.forward(x.clone())));
        let y = self.norm2.forward(self.conv2.forward(y));
        let shortcut = match &self.shortcut {
            Some((conv, norm)) => norm.forward(conv.forward(x)),
            None => x,
        };
        relu(y + shortcut)
    }
}

/// ResNet-18's shape, narrow enough to time on two CPU cores, for the benchmarks' 28x28
/// one-channel inputs: a 3x3 stem of stride 2 with BatchNorm, four stages of two basic blocks
/// (4, 8, 16, 32 channels; strides 1, 2, 2, 2), global average pooling and a linear layer to
/// 10. 62 parameter tensors, as ResNet-18 (45k parameters; ResNet-18 has 11M).
#[derive(Module, Debug)]
pub struct ResNet<B: Backend> {
    stem: Conv2d<B>,
    norm: BatchNorm<B>,
    blocks: Vec<BasicBlock<B>>,
    linear: Linear<B>,
}

/// Configuration of a [`ResNet`].
#[derive(Config, Debug)]
pub struct ResNetConfig {
    /// Channels of the four stages.
    #[config(default = "[4, 8, 16, 32]")]
    pub widths: [usize; 4],
}

impl ResNetConfig {
    /// Builds the network with Burn's default initialisation.
    pub fn init<B: Backend>(&self, device: &B::Device) -> ResNet<B> {
        let mut blocks = Vec::new();
        let mut input = self.widths[0];
        for (stage, &width) in self.widths.iter().enumerate() {
            let stride = if stage == 0 { 1 } else { 2 };
            blocks.push(BasicBlock::new([input, width], stride, device));
            blocks.push(BasicBlock::new([width, width], 1, device));
            input = width;
        }
        ResNet {
            stem: Conv2dConfig::new([1, self.widths[0]], [3, 3])
                .with_stride([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .with_bias(false)
                .init(device),
            norm: BatchNormConfig::new(self.widths[0]).init(device),
            blocks,
            linear: LinearConfig::new(input, 10).init(device),
        }
    }
}

/// A pre-norm transformer encoder over the rows of a 28x28 input (28 tokens of 28 values):
/// a linear embedding to `d_model`, Burn's `TransformerEncoder` (`norm_first`, no dropout),
/// the mean over tokens and a linear layer to 10. With 4 layers of width 32: 68 parameter
/// tensors (35k parameters).
#[derive(Module, Debug)]
pub struct Encoder<B: Backend> {
    embed: Linear<B>,
    encoder: TransformerEncoder<B>,
    head: Linear<B>,
}

/// Configuration of an [`Encoder`].
#[derive(Config, Debug)]
pub struct EncoderConfig {
    /// Width of the tokens.
    #[config(default = 32)]
    pub d_model: usize,
    /// Encoder layers.
    #[config(default = 4)]
    pub layers: usize,
}

impl EncoderConfig {
    /// Builds the encoder with Burn's default initialisation.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Encoder<B> {
        let config = TransformerEncoderConfig::new(self.d_model, 2 * self.d_model, 4, self.layers)
            .with_norm_first(true)
            .with_dropout(0.0);
        Encoder {
            embed: LinearConfig::new(28, self.d_model).init(device),
            encoder: config.init(device),
            head: LinearConfig::new(self.d_model, 10).init(device),
        }
    }
}

/// A benchmarked model: flattened 784-pixel inputs to 10 outputs.
pub trait Net<B: AutodiffBackend>: AutodiffModule<B> + Clone {
    /// The outputs for `x` of shape `[batch, 784]`.
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2>;
}

impl<B: AutodiffBackend> Net<B> for Mlp<B> {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        Mlp::forward(self, x)
    }
}

impl<B: Backend> Cnn<B> {
    /// The outputs for square images `x`, flattened: `[batch, side * side]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let [batch, pixels] = x.dims();
        let side = pixels.isqrt();
        let x = relu(self.conv1.forward(x.reshape([batch, 1, side, side])));
        let mut x = self.conv2.forward(x);
        if let Some(norm) = &self.norm {
            x = norm.forward(x);
        }
        let x = self.pool.forward(relu(x));
        self.linear.forward(x.flatten(1, 3))
    }
}

impl<B: AutodiffBackend> Net<B> for Cnn<B> {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        Cnn::forward(self, x)
    }
}

impl<B: AutodiffBackend> Net<B> for ResNet<B> {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let [batch, _] = x.dims();
        let mut x = relu(
            self.norm
                .forward(self.stem.forward(x.reshape([batch, 1, 28, 28]))),
        );
        for block in &self.blocks {
            x = block.forward(x);
        }
        let [_, channels, height, width] = x.dims();
        let pooled = x.reshape([batch, channels, height * width]).mean_dim(2);
        self.linear.forward(pooled.reshape([batch, channels]))
    }
}

impl<B: AutodiffBackend> Net<B> for Encoder<B> {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let [batch, _] = x.dims();
        let tokens = self.embed.forward(x.reshape([batch, 28, 28]));
        let encoded = self.encoder.forward(TransformerEncoderInput::new(tokens));
        let [_, _, width] = encoded.dims();
        self.head
            .forward(encoded.mean_dim(1).reshape([batch, width]))
    }
}

/// An independent copy of `model` with its parameters in `dtype`. Not `model.clone()`: clones
/// share BatchNorm's running statistics, and casting a clone would cast the original's too.
pub fn copy_as<B: AutodiffBackend, M: Net<B>>(model: &M, dtype: FloatDType) -> M {
    burn_sam::cast_params(M::from_inner(model.valid()), dtype)
}

/// The number of elements of the largest parameter of `model`.
pub fn largest_param<B: AutodiffBackend, M: Net<B>>(model: &M) -> usize {
    struct Largest(usize);
    impl<B: Backend> ModuleVisitor<B> for Largest {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0 = self.0.max(param.shape().num_elements());
        }
    }
    let mut largest = Largest(0);
    model.visit(&mut largest);
    largest.0
}

/// Inputs `[rows, 784]` and regression targets `[rows, 10]`.
pub type Batch<B> = (Tensor<B, 2>, Tensor<B, 2>);

/// A batch of standard normal inputs and targets in `dtype`.
pub fn batch<B: Backend>(rows: usize, dtype: FloatDType) -> Batch<B> {
    let device = Default::default();
    let normal = Distribution::Normal(0.0, 1.0);
    let x = Tensor::<B, 2>::random([rows, 784], normal, &device);
    let y = Tensor::<B, 2>::random([rows, 10], normal, &device);
    (x.cast(dtype), y.cast(dtype))
}

/// Mean-squared error, computed in f32 whatever the parameters' type.
pub fn loss<B: AutodiffBackend, M: Net<B>>(model: &M, (x, y): &Batch<B>) -> Tensor<B, 1> {
    let output = model.forward(x.clone()).cast(FloatDType::F32);
    (output - y.clone().cast(FloatDType::F32))
        .powi_scalar(2)
        .mean()
}

/// One optimizer step of `M` from its current state.
pub type Step<'a, M> = Box<dyn FnMut(M) -> M + 'a>;

/// A step of SGD with `sgd`.
pub fn base_step<'a, B: AutodiffBackend, M: Net<B> + 'a>(
    sgd: SgdConfig,
    batch: &'a Batch<B>,
) -> Step<'a, M> {
    let mut sgd = sgd.init();
    Box::new(move |model: M| {
        let grads = GradientsParams::from_grads(loss(&model, batch).backward(), &model);
        sgd.step(1e-3, model, grads)
    })
}

/// SAM's floor: two forward/backward passes (the first gradient is dropped) and one base step.
pub fn two_passes_step<'a, B: AutodiffBackend, M: Net<B> + 'a>(batch: &'a Batch<B>) -> Step<'a, M> {
    passes_step(vec![batch; 2])
}

/// Forward/backward passes over `batches` in order, every gradient dropped but the last, and
/// one base step with it: the work a step cannot do without, with nothing of its own.
fn passes_step<'a, B: AutodiffBackend, M: Net<B> + 'a>(batches: Vec<&'a Batch<B>>) -> Step<'a, M> {
    let mut sgd = SgdConfig::new().init();
    Box::new(move |model: M| {
        let (last, rest) = batches.split_last().expect("a batch");
        for batch in rest {
            drop(GradientsParams::from_grads(
                loss(&model, batch).backward(),
                &model,
            ));
        }
        let grads = GradientsParams::from_grads(loss(&model, last).backward(), &model);
        sgd.step(1e-3, model, grads)
    })
}

/// A SAM step (`step_with`) with `config` over SGD with `sgd`.
pub fn sam_step<'a, B: AutodiffBackend, M: Net<B> + 'a>(
    config: SamConfig,
    sgd: SgdConfig,
    batch: &'a Batch<B>,
) -> Step<'a, M> {
    let mut sam = config.init(sgd.init());
    Box::new(move |model: M| {
        let step = sam.step_with(1e-3, model, |m: &M| loss(m, batch));
        step.expect("SAM step").module
    })
}

/// One pass over the parameters: every weight through one element-wise operation into a new
/// buffer (reads the parameters once, writes them once), the unit a step's update costs.
pub fn param_pass_step<'a, B: AutodiffBackend, M: Net<B> + 'a>() -> Step<'a, M> {
    struct Pass;
    impl<B: AutodiffBackend> ModuleMapper<B> for Pass {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            param.map(|tensor| {
                // Held while the operation runs, so that no backend reuses the input's buffer.
                let held = tensor.clone();
                let out = Tensor::from_inner(tensor.inner().mul_scalar(1.0)).require_grad();
                drop(held);
                out
            })
        }
    }
    Box::new(|model: M| model.map(&mut Pass))
}

/// Accumulation's floor: the window's forward/backward passes `passes` times (gradients
/// dropped but the last) and one base step, without weighting or summing: one pass for plain
/// accumulation, two for accumulated SAM.
pub fn window_passes_step<'a, B: AutodiffBackend, M: Net<B> + 'a>(
    window: &'a [MicroBatch<Batch<B>>],
    passes: usize,
) -> Step<'a, M> {
    let batches = window.iter().map(|micro| &micro.data);
    passes_step(batches.cycle().take(passes * window.len()).collect())
}

/// One accumulated step of `optimizer` over `window`.
pub fn accumulated_step<'a, B, M, O>(
    optimizer: O,
    window: &'a [MicroBatch<Batch<B>>],
) -> Step<'a, M>
where
    B: AutodiffBackend,
    M: Net<B> + 'a,
    O: WindowOptimizer<M, B> + 'a,
{
    let mut accumulation = AccumulationConfig::new(window.len()).init(optimizer);
    Box::new(move |model: M| {
        let step = accumulation.step(1e-3, model, window, loss::<B, M>);
        step.expect("accumulated step").module
    })
}

/// A step to time: its name, the model it starts from, and the step.
pub struct Timed<'a, M> {
    /// Name in reports (`sam_step`, ...).
    pub name: &'static str,
    /// The model the first step starts from.
    pub start: &'a M,
    /// The step.
    pub step: Step<'a, M>,
}

/// The median time of one step of each of `timed`, in ms, over `rounds` interleaved rounds
/// (one step of every function per round, the order rotating), each step followed by a device
/// sync: ratios of these compare steps that ran under the same machine load, where timing one
/// function at a time lets load drift between numerator and denominator. `states` holds each
/// function's current model (`None`: start from `start`) and is updated.
pub fn paired_medians<B: AutodiffBackend, M>(
    timed: &mut [Timed<M>],
    states: &mut [Option<M>],
    rounds: usize,
) -> Vec<(&'static str, f64)>
where
    M: Clone,
{
    burst_medians::<B, M>(timed, states, rounds, 1)
}

/// [`paired_medians`] of runs of `steps` back-to-back steps, per step: the device syncs once
/// per run, as in training, where the host queues a step while the device runs the one
/// before, so that waits inside a step are measured as training pays for them.
pub fn burst_medians<B: AutodiffBackend, M>(
    timed: &mut [Timed<M>],
    states: &mut [Option<M>],
    rounds: usize,
    steps: usize,
) -> Vec<(&'static str, f64)>
where
    M: Clone,
{
    assert!(
        rounds > 0 && steps > 0,
        "burst_medians: rounds and steps must be >= 1"
    );
    let device = Default::default();
    let mut times = vec![Vec::with_capacity(rounds); timed.len()];
    for round in 0..rounds {
        for offset in 0..timed.len() {
            let index = (round + offset) % timed.len();
            let state = states[index]
                .take()
                .unwrap_or_else(|| timed[index].start.clone());
            let start = Instant::now();
            let mut state = state;
            for _ in 0..steps {
                state = (timed[index].step)(state);
            }
            states[index] = Some(state);
            B::sync(&device).expect("device sync");
            times[index].push(start.elapsed().as_secs_f64() * 1e3 / steps as f64);
        }
    }
    timed
        .iter()
        .zip(&mut times)
        .map(|(timed, times)| {
            times.sort_by(f64::total_cmp);
            (timed.name, times[rounds / 2])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};

    use super::*;

    type B = Autodiff<Flex>;

    /// The number of parameter tensors of `module` that training updates (not BatchNorm's running
    /// statistics).
    fn param_tensors<B: AutodiffBackend, M: Module<B>>(module: &M) -> usize {
        struct Count(usize);
        impl<B: AutodiffBackend> ModuleVisitor<B> for Count {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
                self.0 += usize::from(param.val().is_require_grad());
            }
        }
        let mut count = Count(0);
        module.visit(&mut count);
        count.0
    }

    #[test]
    fn the_realistic_models_have_their_namesakes_tensor_counts() {
        let device = Default::default();
        let resnet = ResNetConfig::new().init::<B>(&device);
        let encoder = EncoderConfig::new().init::<B>(&device);
        assert_eq!(param_tensors(&resnet), 62, "ResNet-18");
        assert_eq!(param_tensors(&encoder), 68);
        for dtype in [FloatDType::F32, FloatDType::F16] {
            let (x, _) = batch::<B>(2, dtype);
            let resnet = copy_as(&resnet, dtype);
            let encoder = copy_as(&encoder, dtype);
            assert_eq!(Net::forward(&resnet, x.clone()).dims(), [2, 10]);
            assert_eq!(Net::forward(&encoder, x).dims(), [2, 10]);
        }
    }
}
