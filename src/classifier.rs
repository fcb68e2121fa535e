//! A classifier over an [`Mlp`] for Burn's `Learner`: its `TrainStep` is an ordinary one with
//! the single line loss scaling needs (`burn_sam_accum::train::scale_loss`).

use burn::data::dataloader::batcher::Batcher;
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Int, Tensor, TensorData};
use burn::train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};

use crate::Mlp;

/// An [`Mlp`] giving class logits; inputs are cast to the parameters' float type (f16 models
/// take the f32 batches as they are).
#[derive(Module, Debug)]
pub struct Classifier<B: Backend> {
    /// The network.
    pub mlp: Mlp<B>,
}

/// One example: features and a class.
#[derive(Clone, Debug)]
pub struct Example {
    /// Input features.
    pub features: Vec<f32>,
    /// Class index.
    pub label: usize,
}

/// `count` examples of `classes` overlapping Gaussian-ish blobs in `features` dimensions,
/// deterministic for a `seed`: class `i % classes`, centred at 1.5 on the dimensions
/// congruent to the class.
pub fn blobs(count: usize, seed: u64, features: usize, classes: usize) -> Vec<Example> {
    let mut rng = crate::Rng::new(seed);
    let mut uniform = move || rng.uniform() as f32;
    (0..count)
        .map(|i| {
            let label = i % classes;
            let features = (0..features)
                .map(|d| {
                    let centre = if d % classes == label { 1.5 } else { 0.0 };
                    let noise: f32 = (0..3).map(|_| uniform() - 0.5).sum();
                    centre + 1.2 * noise
                })
                .collect();
            Example { features, label }
        })
        .collect()
}

/// A batch of [`Example`]s on a device.
#[derive(Clone, Debug)]
pub struct ClassBatch<B: Backend> {
    /// `[batch, features]`.
    pub inputs: Tensor<B, 2>,
    /// `[batch]` class indices.
    pub targets: Tensor<B, 1, Int>,
}

impl<B: Backend> ClassBatch<B> {
    /// Examples in the batch.
    pub fn len(&self) -> usize {
        self.targets.dims()[0]
    }

    /// Never true: a data loader makes no empty batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Stacks [`Example`]s into a [`ClassBatch`].
#[derive(Clone, Debug, Default)]
pub struct ClassBatcher;

impl<B: Backend> Batcher<B, Example, ClassBatch<B>> for ClassBatcher {
    fn batch(&self, items: Vec<Example>, device: &B::Device) -> ClassBatch<B> {
        let width = items.first().map_or(0, |item| item.features.len());
        let features: Vec<f32> = items
            .iter()
            .flat_map(|item| item.features.clone())
            .collect();
        let labels: Vec<i64> = items.iter().map(|item| item.label as i64).collect();
        ClassBatch {
            inputs: Tensor::from_data(TensorData::new(features, [items.len(), width]), device),
            targets: Tensor::from_data(TensorData::new(labels, [items.len()]), device),
        }
    }
}

// The regions marked `snippet:` are shown in README.md and the guide, which `tests/snippets.rs` checks.
impl<B: Backend> Classifier<B> {
    // snippet: f16-forward
    /// Class logits, in f32 whatever the weights' float type.
    pub fn forward(&self, inputs: Tensor<B, 2>) -> Tensor<B, 2> {
        // Burn does not mix float types in one operation: the inputs are cast to the weights'
        // type (f16 after `cast_params`), the logits back to f32 for an exact loss. Here, not
        // in the loss, so that code evaluating the model after training works unchanged.
        let dtype = self.mlp.layers[0].weight.val().dtype();
        self.mlp.forward(inputs.cast(dtype)).cast(FloatDType::F32)
    }
    // snippet-end

    /// Logits and the mean cross-entropy, computed in f32.
    pub fn forward_classification(&self, batch: ClassBatch<B>) -> ClassificationOutput<B> {
        let logits = self.forward(batch.inputs);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), batch.targets.clone());
        ClassificationOutput::new(loss, logits, batch.targets)
    }

    /// The mean cross-entropy on `batch`.
    pub fn loss(&self, batch: &ClassBatch<B>) -> Tensor<B, 1> {
        self.forward_classification(batch.clone()).loss
    }
}

// snippet: train-step
impl<B: AutodiffBackend> TrainStep for Classifier<B> {
    type Input = ClassBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: ClassBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let item = self.forward_classification(batch);
        let grads = burn_sam_accum::train::scale_loss(item.loss.clone()).backward();
        TrainOutput::new(self, grads, item)
    }
}
// snippet-end

impl<B: Backend> InferenceStep for Classifier<B> {
    type Input = ClassBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: ClassBatch<B>) -> ClassificationOutput<B> {
        self.forward_classification(batch)
    }
}

/// Implements Burn's `TrainStep` and `InferenceStep` for a test model `$model<B>` with
/// `forward_classification(&self, ClassBatch<B>) -> ClassificationOutput<B>`, as
/// [`Classifier`] has them: the `TrainStep` back-propagates `scale_loss` of the loss.
#[macro_export]
macro_rules! classification_steps {
    ($model:ident) => {
        impl<B: burn::tensor::backend::AutodiffBackend> burn::train::TrainStep for $model<B> {
            type Input = $crate::ClassBatch<B>;
            type Output = burn::train::ClassificationOutput<B>;

            fn step(
                &self,
                batch: $crate::ClassBatch<B>,
            ) -> burn::train::TrainOutput<burn::train::ClassificationOutput<B>> {
                let item = self.forward_classification(batch);
                let grads = burn_sam_accum::train::scale_loss(item.loss.clone()).backward();
                burn::train::TrainOutput::new(self, grads, item)
            }
        }

        impl<B: burn::tensor::backend::Backend> burn::train::InferenceStep for $model<B> {
            type Input = $crate::ClassBatch<B>;
            type Output = burn::train::ClassificationOutput<B>;

            fn step(&self, batch: $crate::ClassBatch<B>) -> burn::train::ClassificationOutput<B> {
                self.forward_classification(batch)
            }
        }
    };
}
