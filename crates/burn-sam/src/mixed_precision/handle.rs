//! The loss scale an optimizer publishes, shared with code that computes its gradients
//! without holding it, and the mark that a loss was scaled through it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::LossScaler;
use crate::float::widen;

/// A shared view of an optimizer's loss scale and overflow count, and the way code that
/// computes its gradients without holding it scales their loss. It follows every update and
/// loaded record of the optimizer it came from
/// ([`LossScaling::loss_scale_handle`](crate::LossScaling::loss_scale_handle)) and of its
/// clones.
///
/// A loss-scaled optimizer refuses a step unless a loss was scaled through it (its own
/// `scale_loss` or this handle's) since its last step: gradients of an unscaled loss would be
/// divided by the scale and vanish.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::Linear;
/// use burn::optim::SgdConfig;
/// use burn_sam::{LossScalerConfig, LossScaling, SamConfig};
///
/// let sgd = SgdConfig::new().init::<Autodiff<Flex>, Linear<Autodiff<Flex>>>();
/// let sam = SamConfig::new()
///     .with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(1024.0)))
///     .init(sgd);
/// let handle = sam.loss_scale_handle();
/// assert_eq!((handle.get(), handle.overflows()), (1024.0, 0));
/// ```
#[derive(Clone, Debug)]
pub struct LossScaleHandle(Arc<Mutex<Shared>>);

#[derive(Debug)]
struct Shared {
    scaling: bool,
    scale: f32,
    overflows: u64,
    /// A loss was scaled through the optimizer since its last phase.
    loss_scaled: bool,
}

impl LossScaleHandle {
    pub(crate) fn new(scaler: Option<&LossScaler>) -> Self {
        Self(Arc::new(Mutex::new(Shared {
            scaling: scaler.is_some(),
            scale: scaler.map_or(1.0, LossScaler::scale),
            overflows: scaler.map_or(0, LossScaler::overflows),
            loss_scaled: false,
        })))
    }

    /// A handle for an optimizer without loss scaling, which steps with whatever gradients it
    /// gets (Burn's own optimizers): the scale is always 1.
    pub fn unscaled() -> Self {
        Self::new(None)
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        // Every write leaves the state whole: a panic elsewhere cannot tear it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current loss scale (1 without loss scaling).
    pub fn get(&self) -> f32 {
        self.shared().scale
    }

    /// Steps whose gradients overflowed, since the optimizer was created (or since its loaded
    /// record's): each was skipped in whole or, for SAM's ascent, in part.
    pub fn overflows(&self) -> u64 {
        self.shared().overflows
    }

    /// Whether the optimizer scales its loss.
    pub fn is_scaling(&self) -> bool {
        self.shared().scaling
    }

    /// `loss * scale` in f32 (f64 stays f64), to call `backward` on; the loss unchanged
    /// without loss scaling. Tells the optimizer that its next phase's gradients are scaled.
    pub fn scale_loss<B: Backend, const D: usize>(&self, loss: Tensor<B, D>) -> Tensor<B, D> {
        let scale = {
            let mut shared = self.shared();
            if !shared.scaling {
                return loss;
            }
            shared.loss_scaled = true;
            shared.scale
        };
        widen(loss).mul_scalar(scale)
    }

    pub(crate) fn publish(&self, scaler: &LossScaler) {
        let mut shared = self.shared();
        shared.scale = scaler.scale();
        shared.overflows = scaler.overflows();
    }

    /// Whether a loss was scaled since the last call.
    pub(crate) fn mark_loss_scaled(&self) {
        self.shared().loss_scaled = true;
    }

    pub(crate) fn take_loss_scaled(&self) -> bool {
        std::mem::take(&mut self.shared().loss_scaled)
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests read the values they check"
)]
mod tests {
    use super::*;

    #[test]
    fn a_scaled_loss_vouches_for_one_phase() {
        let scaler = crate::mixed_precision::LossScalerConfig::new()
            .try_init()
            .unwrap();
        let handle = LossScaleHandle::new(Some(&scaler));
        assert!(!handle.take_loss_scaled());
        let loss =
            burn::tensor::Tensor::<burn::backend::Flex, 1>::from_floats([2.0], &Default::default());
        let scaled = handle.scale_loss(loss).into_scalar();
        assert_eq!(scaled, 2.0 * scaler.scale());
        assert!(handle.take_loss_scaled());
        assert!(!handle.take_loss_scaled());
    }
}
