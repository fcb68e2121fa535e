//! The losses of a step's micro-batches, kept where a metric reads the step's report: taken
//! from `scale_loss` on each replica's thread, and noted on the optimizer's link on the main
//! device, in replica order, before the pass's `Optimizer::step` reads them with its norms.

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Device, Tensor};
use burn_sam::strategy::StepLink;

use super::pass_scale::PassLoss;
use super::transfer::tensor_to;

/// Each micro-batch's loss (detached, unscaled) and its weight in the window.
type Losses<B> = Vec<(Tensor<B, 1>, f64)>;

/// The losses of one pass over the replicas.
pub(super) struct KeptLosses<B: AutodiffBackend> {
    /// At the weights the optimizer holds (`w`, or its perturbed weights).
    at_pass: Losses<B>,
    /// At a replica's own perturbed weights (a local ascent).
    locally_perturbed: Losses<B>,
}

impl<B: AutodiffBackend> Default for KeptLosses<B> {
    fn default() -> Self {
        Self {
            at_pass: Vec::new(),
            locally_perturbed: Vec::new(),
        }
    }
}

impl<B: AutodiffBackend> KeptLosses<B> {
    /// The losses `scale_loss` kept, with their weights.
    pub fn of(kept: Vec<(Option<PassLoss>, f64)>) -> Losses<B> {
        kept.into_iter()
            .filter_map(|(loss, weight)| Some((*loss?.downcast::<Tensor<B, 1>>().ok()?, weight)))
            .collect()
    }

    /// Losses of a pass at the optimizer's weights, and of one at a replica's own perturbed
    /// weights.
    pub fn new(at_pass: Losses<B>, locally_perturbed: Losses<B>) -> Self {
        Self {
            at_pass,
            locally_perturbed,
        }
    }

    /// Adds `other`'s losses after these, moved to `device` in one transfer (through the host
    /// where the devices exchange tensors that way: one read).
    pub fn append(&mut self, other: Self, device: &Device<B>) {
        let split = other.at_pass.len();
        let all: Vec<_> = other
            .at_pass
            .into_iter()
            .chain(other.locally_perturbed)
            .collect();
        let Some((first, _)) = all.first() else {
            return;
        };
        let moved = match first.device() == *device {
            true => all,
            false => {
                let (losses, weights): (Vec<_>, Vec<_>) = all.into_iter().unzip();
                let joined = Tensor::cat(losses, 0).inner();
                let joined = Tensor::<B, 1>::from_inner(tensor_to(joined, device));
                let parts = (0..weights.len()).map(|i| joined.clone().slice(i..i + 1));
                parts.zip(weights).collect()
            }
        };
        let mut moved = moved.into_iter();
        self.at_pass.extend(moved.by_ref().take(split));
        self.locally_perturbed.extend(moved);
    }

    /// Notes the losses on `link`, in order.
    pub fn note(self, link: &StepLink) {
        for (loss, weight) in self.at_pass {
            link.note_loss(loss, weight);
        }
        for (loss, weight) in self.locally_perturbed {
            link.note_perturbed_loss(loss, weight);
        }
    }
}
