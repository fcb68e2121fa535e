//! The shared state between an optimizer with loss scaling and code that computes its
//! gradients without holding it: the loss scale and overflows it publishes, and the step
//! protocol's two messages ([`crate::strategy`]).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::float::widen;
use crate::scaler::LossScaler;
use crate::state::ParamState;
use crate::strategy::{Handover, Passes};

/// A shared view of an optimizer's loss scale and overflow count, and the way code that
/// computes its gradients without holding it scales their loss. It follows every update and
/// loaded record of the optimizer it came from
/// ([`Sam::loss_scale_handle`](crate::Sam::loss_scale_handle),
/// [`LossScaled::loss_scale_handle`](crate::LossScaled::loss_scale_handle)) and of its clones.
///
/// A loss-scaled optimizer refuses a step unless a loss was scaled through it (its own
/// `scale_loss` or this handle's) since its last step: gradients of an unscaled loss would be
/// divided by the scale and vanish.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::Linear;
/// use burn::optim::SgdConfig;
/// use burn_sam::{LossScalerConfig, SamConfig};
///
/// let sgd = SgdConfig::new().init::<Autodiff<Flex>, Linear<Autodiff<Flex>>>();
/// let sam = SamConfig::new()
///     .with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(1024.0)))
///     .init(sgd);
/// let handle = sam.loss_scale_handle();
/// assert_eq!((handle.get(), handle.overflows()), (1024.0, 0));
/// ```
#[derive(Clone, Debug)]
pub struct LossScaleHandle(pub(crate) Arc<Mutex<Shared>>);

#[derive(Debug)]
pub(crate) struct Shared {
    pub scaling: bool,
    pub scale: f32,
    pub overflows: u64,
    /// A loss was scaled through the optimizer since its last phase (direct calls only).
    pub loss_scaled: bool,
    /// What the optimizer's next step takes (published by the optimizer).
    pub passes: Passes,
    /// What a strategy hands the next `Optimizer::step` (taken by the optimizer).
    pub handover: Option<Handover>,
    /// Momentum-SAM's momentum and radius, for the strategy's look-ahead.
    pub look_ahead: Option<(ParamState<f64>, f64)>,
}

impl LossScaleHandle {
    pub(crate) fn new(scaler: Option<&LossScaler>) -> Self {
        Self(Arc::new(Mutex::new(Shared {
            scaling: scaler.is_some(),
            scale: scaler.map_or(1.0, LossScaler::scale),
            overflows: scaler.map_or(0, LossScaler::overflows),
            loss_scaled: false,
            passes: Passes::One,
            handover: None,
            look_ahead: None,
        })))
    }

    /// A handle for an optimizer without loss scaling: the scale is always 1.
    pub fn unscaled() -> Self {
        Self::new(None)
    }

    pub(crate) fn shared(&self) -> MutexGuard<'_, Shared> {
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

    pub(crate) fn publish_passes(&self, passes: Passes) {
        self.shared().passes = passes;
    }

    pub(crate) fn publish_look_ahead(&self, look_ahead: Option<(ParamState<f64>, f64)>) {
        self.shared().look_ahead = look_ahead;
    }

    /// Whether a loss was scaled since the last call.
    pub(crate) fn take_loss_scaled(&self) -> bool {
        std::mem::take(&mut self.shared().loss_scaled)
    }

    /// Takes a strategy's word that the next phase's gradients carry the current scale.
    pub(crate) fn vouch_scaled(&self) {
        self.shared().loss_scaled = true;
    }

    pub(crate) fn take_handover(&self) -> Option<Handover> {
        self.shared().handover.take()
    }
}
