//! A window of micro-batches and their loss, evaluated one micro-batch at a time.

use burn::module::AutodiffModule;
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;
use burn_sam::strategy::{widen, StepLink};

use crate::error::AccumError;
use crate::grad_sum::WeightedSum;

/// One micro-batch of a window: the data the loss closure receives and, optionally, how many
/// items (examples, tokens) it holds.
///
/// ```
/// use burn_sam_accum::MicroBatch;
///
/// // A last, short batch of an epoch weighs 3/19 of a window of 16 + 3 rows.
/// let window = [MicroBatch::with_items("16 rows", 16), MicroBatch::with_items("3 rows", 3)];
/// assert_eq!(window[1].items, Some(3));
/// // Without item counts the micro-batches weigh equally.
/// assert_eq!(MicroBatch::new("a batch").items, None);
/// ```
#[derive(Clone, Debug)]
pub struct MicroBatch<T> {
    /// Passed to the loss closure.
    pub data: T,
    /// The number of items the micro-batch's loss averages over; `None` for equal weights.
    pub items: Option<usize>,
}

impl<T> MicroBatch<T> {
    /// A micro-batch weighted like every other of its window.
    pub fn new(data: T) -> Self {
        Self { data, items: None }
    }

    /// A micro-batch of `items` items: its gradient is weighted by `items / total items`, so
    /// that a window of mean losses gets the gradient of the mean over the union.
    pub fn with_items(data: T, items: usize) -> Self {
        Self {
            data,
            items: Some(items),
        }
    }
}

/// The micro-batches of one window and their loss: computes weighted gradients one
/// micro-batch at a time, so that only one micro-batch's activations are alive at once.
/// [`WindowOptimizer`](crate::WindowOptimizer)s drive it.
pub struct Window<'a, M, T, B: AutodiffBackend> {
    batches: &'a [MicroBatch<T>],
    weights: Vec<f64>,
    loss: &'a mut dyn FnMut(&M, &T) -> Tensor<B, 1>,
    /// `sum_i w_i L_i` of the first evaluation of each micro-batch, detached.
    first_losses: Option<Tensor<B, 1>>,
    evaluated: usize,
}

impl<'a, M: AutodiffModule<B>, T, B: AutodiffBackend> Window<'a, M, T, B> {
    /// Checks the micro-batches and computes their weights. `loss` is the mean loss of one
    /// micro-batch at the given module.
    pub fn new(
        batches: &'a [MicroBatch<T>],
        loss: &'a mut dyn FnMut(&M, &T) -> Tensor<B, 1>,
    ) -> Result<Self, AccumError> {
        let weights = item_weights(batches.iter().map(|batch| batch.items))?;
        Ok(Self {
            batches,
            weights,
            loss,
            first_losses: None,
            evaluated: 0,
        })
    }

    /// The number of micro-batches.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// Always false: a window holds at least one micro-batch.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Micro-batch `index`'s share of the window, `items / total items` (or `1 / len`).
    pub fn weight(&self, index: usize) -> f64 {
        self.weights[index]
    }

    /// The window's gradient at `module`, `sum_i w_i grad L_i`, with every loss scaled through
    /// `link` (the optimizer's [`StepLink`]) and weighted before its backward pass.
    /// Accumulated in f32 (f64 for f64 gradients); a window of one micro-batch gives its
    /// gradient as it came.
    pub fn gradient(&mut self, module: &M, link: &StepLink) -> Result<GradientsParams, AccumError> {
        let mut sum = WeightedSum::default();
        for index in 0..self.len() {
            // Weighted before the backward pass, as `loss / window` is in PyTorch: what flows
            // through f16 layers is no larger than the window's mean gradient.
            let grads = self.micro_gradient(index, module, link, self.weights[index])?;
            sum.add(module, grads, 1.0)?;
        }
        Ok(sum.into_grads())
    }

    /// The gradient of `weight` times micro-batch `index`'s loss, scaled through `link`, at
    /// `module`, in the parameters' float type; an error when the loss does not depend on
    /// `module`.
    pub fn micro_gradient(
        &mut self,
        index: usize,
        module: &M,
        link: &StepLink,
        weight: f64,
    ) -> Result<GradientsParams, AccumError> {
        // Each pass of a micro-batch draws the same random numbers, where SAM seeds them.
        link.seed_pass(module, index);
        let loss = (self.loss)(module, &self.batches[index].data);
        link.note_loss(loss.clone().detach(), self.weights[index]);
        if index == self.evaluated {
            let term = widen(loss.clone().detach()).mul_scalar(self.weights[index]);
            self.first_losses = Some(match self.first_losses.take() {
                Some(sum) => sum + term,
                None => term,
            });
            self.evaluated += 1;
        }
        let loss = weighted(link.loss_scale().scale_loss(widen(loss)), weight);
        let grads = GradientsParams::from_grads(loss.backward(), module);
        if grads.is_empty() {
            return Err(AccumError::LossWithoutModule { index });
        }
        Ok(grads)
    }

    /// The window's loss, `sum_i w_i L_i / sum_i w_i` over the micro-batches evaluated so far
    /// (all of them, unless a skipped SAM window stopped early), each from its first
    /// evaluation (for SAM, at the unperturbed weights), detached. `None` before any.
    pub fn loss(&self) -> Option<Tensor<B, 1>> {
        let evaluated: f64 = self.weights[..self.evaluated].iter().sum();
        let sum = self.first_losses.clone()?;
        Some(if self.evaluated == self.len() {
            sum
        } else {
            sum.div_scalar(evaluated)
        })
    }
}

/// `weight * loss`, the loss already scaled: each micro-batch's loss is weighted before its
/// backward pass, on every path (here and in `train::scale_loss`), so that the direct path
/// and the `Learner`'s compute one thing bitwise whatever the weights.
pub(crate) fn weighted<B: Backend, const D: usize>(
    loss: Tensor<B, D>,
    weight: f64,
) -> Tensor<B, D> {
    match weight == 1.0 {
        true => loss,
        false => loss.mul_scalar(weight),
    }
}

/// Each micro-batch's share of its window, `items / total items`, or `1 / len` when no
/// micro-batch gives a count.
pub(crate) fn item_weights(
    items: impl ExactSizeIterator<Item = Option<usize>>,
) -> Result<Vec<f64>, AccumError> {
    let len = items.len();
    if len == 0 {
        return Err(AccumError::EmptyWindow);
    }
    let items: Vec<Option<usize>> = items.collect();
    if let Some(index) = items.iter().position(|&count| count == Some(0)) {
        return Err(AccumError::ZeroItems { index });
    }
    match items.iter().copied().collect::<Option<Vec<usize>>>() {
        Some(counts) => {
            let total: usize = counts.iter().sum();
            Ok(counts.iter().map(|&n| n as f64 / total as f64).collect())
        }
        None if items.iter().any(Option::is_some) => Err(AccumError::MixedItemCounts),
        None => Ok(vec![1.0 / len as f64; len]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_item_shares_or_equal() {
        let weights = |items: &[Option<usize>]| item_weights(items.iter().copied());
        assert_eq!(
            weights(&[Some(16), Some(3), Some(1)]),
            Ok(vec![0.8, 0.15, 0.05])
        );
        assert_eq!(weights(&[None, None, None, None]), Ok(vec![0.25; 4]));
        assert_eq!(weights(&[Some(7)]), Ok(vec![1.0]));
        assert_eq!(weights(&[]), Err(AccumError::EmptyWindow));
        assert_eq!(
            weights(&[Some(2), Some(0)]),
            Err(AccumError::ZeroItems { index: 1 })
        );
        assert_eq!(weights(&[Some(2), None]), Err(AccumError::MixedItemCounts));
    }
}
