//! Models, data and helpers shared by burn-sam's conformance suite, examples and benchmarks.

pub mod bench;
mod classifier;
pub mod digits;
pub mod kernels;
pub mod launches;
mod quiet;
mod record;
mod rng;

pub use classifier::{blobs, ClassBatch, ClassBatcher, Classifier, Example};
pub use quiet::Quiet;
pub use record::{checkpoint_sam_record, checkpoint_sam_record_with, load_record, record_bytes};
pub use rng::Rng;

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::tanh;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// A multilayer perceptron with `tanh` between its linear layers.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    /// The linear layers, input first.
    pub layers: Vec<Linear<B>>,
}

/// Layer widths of an [`Mlp`], input first: `[4, 8, 3]` is 4 -> 8 -> 3.
#[derive(Config, Debug)]
pub struct MlpConfig {
    /// Widths, input first; at least two.
    pub sizes: Vec<usize>,
}

impl MlpConfig {
    /// Builds the MLP with Burn's default initialisation.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Mlp<B> {
        assert!(
            self.sizes.len() >= 2,
            "MlpConfig.sizes needs at least two widths"
        );
        let layers = self
            .sizes
            .windows(2)
            .map(|pair| LinearConfig::new(pair[0], pair[1]).init(device))
            .collect();
        Mlp { layers }
    }
}

impl<B: Backend> Mlp<B> {
    /// Applies the layers with `tanh` between them (not after the last).
    pub fn forward(&self, mut x: Tensor<B, 2>) -> Tensor<B, 2> {
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x);
            if i < last {
                x = tanh(x);
            }
        }
        x
    }
}
