//! The link between an optimizer with loss scaling and code that computes its gradients
//! without holding it, such as a training strategy inside Burn's `Learner`.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::{widen, LossScaler};

/// A shared view of an optimizer's loss scale, overflow count and next step's passes, and the
/// way code that computes its gradients scales their loss. It follows every update and loaded record of the
/// optimizer it came from ([`Sam::loss_scale_handle`](crate::Sam::loss_scale_handle),
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
pub struct LossScaleHandle(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    scaling: bool,
    scale: AtomicU32,
    overflows: AtomicU64,
    loss_scaled: AtomicBool,
    strategy_step: AtomicBool,
    single_pass: AtomicBool,
    local_descent: AtomicBool,
}

impl LossScaleHandle {
    pub(crate) fn new(scaler: Option<&LossScaler>) -> Self {
        Self(Arc::new(Shared {
            scaling: scaler.is_some(),
            scale: AtomicU32::new(scaler.map_or(1.0, LossScaler::scale).to_bits()),
            overflows: AtomicU64::new(scaler.map_or(0, LossScaler::overflows)),
            loss_scaled: AtomicBool::new(false),
            strategy_step: AtomicBool::new(false),
            single_pass: AtomicBool::new(false),
            local_descent: AtomicBool::new(false),
        }))
    }

    /// A handle for an optimizer without loss scaling: the scale is always 1.
    pub fn unscaled() -> Self {
        Self::new(None)
    }

    /// The current loss scale (1 without loss scaling).
    pub fn get(&self) -> f32 {
        f32::from_bits(self.0.scale.load(Ordering::Relaxed))
    }

    /// Steps whose gradients overflowed, since the optimizer was created (or since its loaded
    /// record's): each was skipped in whole or, for SAM's ascent, in part.
    pub fn overflows(&self) -> u64 {
        self.0.overflows.load(Ordering::Relaxed)
    }

    /// Whether the optimizer scales its loss.
    pub fn is_scaling(&self) -> bool {
        self.0.scaling
    }

    /// `loss * scale` in f32 (f64 stays f64), to call `backward` on; the loss unchanged
    /// without loss scaling. Tells the optimizer that its next step's gradients are scaled.
    pub fn scale_loss<B: Backend, const D: usize>(&self, loss: Tensor<B, D>) -> Tensor<B, D> {
        if !self.0.scaling {
            return loss;
        }
        self.0.loss_scaled.store(true, Ordering::Relaxed);
        widen(loss).mul_scalar(self.get())
    }

    /// Tells a [`Sam`](crate::Sam) optimizer that its next `Optimizer::step` call comes from a
    /// training strategy that runs both of SAM's passes on the same batch (as
    /// `burn_sam_accum::train::SamTraining` does), so that it does not warn about being
    /// stepped by Burn's default `Learner` strategy.
    pub fn announce_strategy_step(&self) {
        self.0.strategy_step.store(true, Ordering::Relaxed);
    }

    /// Tells a [`Sam`](crate::Sam) optimizer that its next `Optimizer::step` call is the
    /// descent of data-parallel SAM with local ascents
    /// ([`Sam::descend_local`](crate::Sam::descend_local)): the replicas perturbed their own
    /// copies, the module it gets stayed at `w`. Also announces the strategy's step.
    pub fn announce_local_descent(&self) {
        self.announce_strategy_step();
        self.0.local_descent.store(true, Ordering::Relaxed);
    }

    /// Whether the optimizer's next step takes one forward and backward pass where a
    /// [`Sam`](crate::Sam) step takes two (LookSAM between its full steps): what a training
    /// strategy asks before running the step's passes.
    pub fn single_pass_step(&self) -> bool {
        self.0.single_pass.load(Ordering::Relaxed)
    }

    pub(crate) fn publish_single_pass(&self, single_pass: bool) {
        self.0.single_pass.store(single_pass, Ordering::Relaxed);
    }

    pub(crate) fn publish(&self, scaler: &LossScaler) {
        self.0
            .scale
            .store(scaler.scale().to_bits(), Ordering::Relaxed);
        self.0
            .overflows
            .store(scaler.overflows(), Ordering::Relaxed);
    }

    /// Whether a loss was scaled since the last call.
    pub(crate) fn take_loss_scaled(&self) -> bool {
        self.0.loss_scaled.swap(false, Ordering::Relaxed)
    }

    /// Whether a strategy announced this step as a local descent.
    pub(crate) fn take_local_descent(&self) -> bool {
        self.0.local_descent.swap(false, Ordering::Relaxed)
    }

    /// Whether a strategy announced this step.
    pub(crate) fn take_strategy_step(&self) -> bool {
        self.0.strategy_step.swap(false, Ordering::Relaxed)
    }
}
