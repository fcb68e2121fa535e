//! The shared state between an optimizer with loss scaling and code that computes its
//! gradients without holding it: the loss scale and overflows it publishes, and the step
//! protocol's two messages ([`crate::strategy`]).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use burn::module::AutodiffModule;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

use crate::error::SamError;
use crate::float::widen;
use crate::protocol::{Handover, Passes};
use crate::scaler::LossScaler;
use crate::seed::seed_pass;
use crate::state::ParamState;

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
    /// Whether an optimizer reads this handle's hand-overs (`Sam`, `LossScaled`); a plain
    /// optimizer's handle ([`LossScaleHandle::unscaled`]) has no reader.
    pub has_reader: bool,
    /// The `Learner` epoch a strategy is checkpointing, written into the optimizer's record.
    pub checkpoint_epoch: Option<u64>,
    /// Momentum-SAM's momentum and radius, for the strategy's look-ahead.
    pub look_ahead: Option<(ParamState<f64>, f64)>,
    /// The run's pass seed and the next step's count (`SamConfig::pass_seed`).
    pub pass_seed: Option<(u64, u64)>,
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
            has_reader: true,
            checkpoint_epoch: None,
            look_ahead: None,
            pass_seed: None,
        })))
    }

    /// A handle for an optimizer without loss scaling, which steps with whatever gradients it
    /// gets (Burn's own optimizers): the scale is always 1.
    pub fn unscaled() -> Self {
        let handle = Self::new(None);
        handle.shared().has_reader = false;
        handle
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

    pub(crate) fn publish_passes(&self, passes: Passes, pass_seed: Option<(u64, u64)>) {
        let mut shared = self.shared();
        shared.passes = passes;
        shared.pass_seed = pass_seed;
    }

    /// Seeds `module`'s backend for micro-batch `micro_batch`'s forward pass of the next step,
    /// when the optimizer has a [`SamConfig::pass_seed`](crate::SamConfig::pass_seed); does
    /// nothing otherwise. Both passes of a step get the same seed.
    pub fn seed_pass<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        module: &M,
        micro_batch: usize,
    ) {
        let pass_seed = self.shared().pass_seed;
        if let Some(pass_seed) = pass_seed {
            seed_pass(module, pass_seed, micro_batch);
        }
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

    /// The strategy's hand-over for this call; `None` for a direct call. A direct call while
    /// a strategy's hand-over to another optimizer is in flight on this thread is an error:
    /// the strategy is linked to another optimizer than the one being stepped.
    pub(crate) fn take_handover(&self) -> Result<Option<Handover>, SamError> {
        let handover = self.shared().handover.take();
        match handover {
            Some(handover) => {
                in_flight::land();
                Ok(Some(handover))
            }
            None if in_flight::is_set() => Err(SamError::LinkedToAnotherOptimizer),
            None => Ok(None),
        }
    }

    /// Hands `handover` to the next `Optimizer::step` of this handle's optimizer.
    pub(crate) fn hand_over(&self, handover: Handover) {
        self.shared().handover = Some(handover);
        in_flight::set();
    }

    /// After the `Optimizer::step` call that followed [`LossScaleHandle::hand_over`]: an error
    /// when this handle's optimizer exists and did not take the hand-over, so the call stepped
    /// another optimizer.
    pub(crate) fn check_taken(&self) -> Result<(), SamError> {
        in_flight::land();
        let mut shared = self.shared();
        let left = shared.handover.take();
        match left.is_some() && shared.has_reader {
            true => Err(SamError::LinkedToAnotherOptimizer),
            false => Ok(()),
        }
    }
}

/// Whether a strategy's hand-over waits, on this thread, for the `Optimizer::step` call it was
/// made for. Burn's `Learner` steps its optimizer on the thread of the strategy that calls
/// `Learner::optimizer_step`, so an optimizer stepped while a hand-over it did not get is in
/// flight is not the one the strategy holds a link to.
mod in_flight {
    use std::cell::Cell;

    thread_local! {
        static IN_FLIGHT: Cell<bool> = const { Cell::new(false) };
    }

    pub fn set() {
        IN_FLIGHT.set(true);
    }

    pub fn land() {
        IN_FLIGHT.set(false);
    }

    pub fn is_set() -> bool {
        IN_FLIGHT.get()
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests read the values they check"
)]
mod tests {
    use super::*;

    const HANDOVER: Handover = Handover::Gradient { loss_scale: None };

    #[test]
    fn a_handover_is_taken_once_by_the_call_it_was_made_for() {
        let handle = LossScaleHandle::new(None);
        handle.hand_over(HANDOVER);
        assert_eq!(handle.take_handover(), Ok(Some(HANDOVER)));
        assert_eq!(handle.check_taken(), Ok(()));
        // The next call without one is a direct call.
        assert_eq!(handle.take_handover(), Ok(None));
    }

    #[test]
    fn a_handover_to_another_optimizer_is_refused_on_both_ends() {
        let (linked, stepped) = (LossScaleHandle::new(None), LossScaleHandle::new(None));
        linked.hand_over(HANDOVER);
        // The optimizer stepped has no hand-over while one waits on this thread.
        assert_eq!(
            stepped.take_handover(),
            Err(SamError::LinkedToAnotherOptimizer)
        );
        assert_eq!(
            linked.check_taken(),
            Err(SamError::LinkedToAnotherOptimizer)
        );
        // Burn's own optimizers read no hand-over: nothing to check.
        let unscaled = LossScaleHandle::unscaled();
        unscaled.hand_over(HANDOVER);
        assert_eq!(unscaled.check_taken(), Ok(()));
    }

    #[test]
    fn a_scaled_loss_vouches_for_one_phase() {
        let scaler = crate::scaler::LossScalerConfig::new().try_init().unwrap();
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
