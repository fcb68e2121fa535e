//! For training strategies and other code that runs an optimizer's passes without holding it
//! (`burn_sam_accum` builds on this): the step protocol, SAM's phases beyond `ascend` and
//! `descend`, and the building blocks of a step. Training with [`Sam`] or
//! [`LossScaled`](crate::LossScaled) needs nothing here.
//!
//! # The step protocol
//! Burn's `Learner` reaches its optimizer only through `Optimizer::step(lr, module, grads)`.
//! A strategy holds a [`StepLink`] to it instead; values cross it one way each:
//! the optimizer publishes what its next step takes ([`StepLink::next_step`]), the strategy
//! says what it hands each `step` call ([`StepLink::hand_over`]). One optimizer step:
//!
//! 1. `next = link.next_step()`: [`Passes::Two`] (SAM) or [`Passes::One`] (LookSAM between
//!    its full steps, optimizers without SAM), and the scale to multiply every loss by.
//! 2. One device, each pass: the gradient at the learner's model, `hand_over(Handover::Gradient)`,
//!    `Optimizer::step`. Of two passes the first ascends (the model comes back at `w + e`),
//!    the second descends (the base optimizer steps `w`); a single pass is the whole step.
//! 3. N replicas, synced ascent: the same; each pass's gradient is the item-weighted mean of
//!    the replicas' gradients at the same model.
//! 4. N replicas, local ascents (on [`Passes::Two`]): each replica moves its copy by its own
//!    gradient ([`perturb`]) and takes the gradient there
//!    ([`Perturbation::carry_fault`] passes an overflowing ascent on to it); their mean is
//!    handed over as [`Handover::LocalDescent`], and one `Optimizer::step` steps `w`.
//! 5. Momentum-SAM ([`Passes::LookAhead`]): one pass at `link.look_ahead(model)`, handed over
//!    as `Handover::Gradient`; `Optimizer::step` gets the model at `w` and steps it.
//!
//! A `step` with nothing handed over is a direct call. [`Sam`] refuses it
//! ([`SamError::UnlinkedStep`]: Burn's own strategies step once per batch) unless the caller
//! opted in with [`Sam::step_per_pass`]; it then alternates ascent and descent itself and needs
//! `scale_loss` to have been called since its last phase. A direct call while a hand-over to
//! another optimizer waits on the same thread is [`SamError::LinkedToAnotherOptimizer`], and so
//! is a hand-over left untaken by the call it was made for ([`StepLink::check_taken`]): the
//! strategy holds a link to another optimizer than the one it steps.

use std::fmt;

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;

use crate::error::SamError;
use crate::hand_back::StepError;
use crate::handle::LossScaleHandle;
use crate::perturb::look_ahead_by;
use crate::sam::{PendingAscent, Sam, StepReport};

pub use crate::float::widen;
pub use crate::grad_map::{map_grads, GradMap, ParamGrad};
pub use crate::or_hand_back;
pub use crate::perturbation::{perturb, Perturbation};
pub use crate::precision::guarded_step;
pub use crate::protocol::{Handover, NextStep, Passes};
pub use crate::quirks::transfers_through_host;

/// A strategy's end of the step protocol with one optimizer (see the [module
/// documentation](self)): built from the optimizer's [`LossScaleHandle`], it follows the
/// optimizer's updates and loaded records, and those of its clones.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::Linear;
/// use burn::optim::SgdConfig;
/// use burn_sam::strategy::{Passes, StepLink};
/// use burn_sam::SamConfig;
///
/// let sam = SamConfig::new().init(SgdConfig::new().init::<Autodiff<Flex>, Linear<Autodiff<Flex>>>());
/// let link = StepLink::new(sam.loss_scale_handle());
/// assert_eq!(link.next_step().passes, Passes::Two);
/// assert_eq!(link.next_step().loss_scale, None);
/// ```
#[derive(Clone)]
pub struct StepLink(LossScaleHandle);

impl StepLink {
    /// The link to the optimizer `handle` came from.
    pub fn new(handle: LossScaleHandle) -> Self {
        Self(handle)
    }

    /// What the optimizer's next step takes.
    pub fn next_step(&self) -> NextStep {
        let shared = self.0.shared();
        NextStep {
            passes: shared.passes,
            loss_scale: shared.scaling.then_some(shared.scale),
        }
    }

    /// Seeds `module`'s backend for micro-batch `micro_batch`'s forward pass of the next step
    /// ([`LossScaleHandle::seed_pass`]): a no-op unless the optimizer has a
    /// [`SamConfig::pass_seed`](crate::SamConfig::pass_seed).
    pub fn seed_pass<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        module: &M,
        micro_batch: usize,
    ) {
        self.0.seed_pass(module, micro_batch);
    }

    /// Says what the next `Optimizer::step` call gets, just before making it.
    pub fn hand_over(&self, handover: Handover) {
        self.0.hand_over(handover);
    }

    /// Checks, just after the `Optimizer::step` call that followed [`StepLink::hand_over`], that
    /// the optimizer stepped was this link's (or a clone of it).
    ///
    /// # Errors
    /// [`SamError::LinkedToAnotherOptimizer`] when the hand-over is still there: the call
    /// stepped an optimizer that does not read it, such as a second optimizer built from the
    /// same configuration. Links to Burn's own optimizers ([`LossScaleHandle::unscaled`]) have
    /// nothing to check.
    pub fn check_taken(&self) -> Result<(), SamError> {
        self.0.check_taken()
    }

    /// The model to take the next step's gradient at, for a step of [`Passes::LookAhead`]
    /// (Momentum-SAM's `w~ = w - rho * v / (||v|| + 1e-12)`); `model` itself otherwise. The
    /// model the strategy keeps, validates and saves stays at `w`.
    pub fn look_ahead<B: AutodiffBackend, M: AutodiffModule<B>>(&self, model: M) -> M {
        let look_ahead = self.0.shared().look_ahead.clone();
        match look_ahead {
            Some((momentum, rho)) => look_ahead_by(model, &momentum, rho).0,
            None => model,
        }
    }

    /// Says that the optimizer's next record is the checkpoint of `Learner` epoch `epoch`: a
    /// [`Sam`] writes it into its record's label, and a refused resume names it.
    pub fn label_checkpoint(&self, epoch: usize) {
        self.0.shared().checkpoint_epoch = Some(epoch as u64);
    }

    /// The optimizer's loss scale and overflows.
    pub fn loss_scale(&self) -> &LossScaleHandle {
        &self.0
    }
}

impl fmt::Debug for StepLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StepLink").field(&self.next_step()).finish()
    }
}

/// SAM's phases beyond [`Sam::ascend`] and [`Sam::descend`], for code that drives them over
/// several gradients per step (gradient accumulation's windows, m-sharpness).
pub trait Phases {
    /// The ascent waiting for its descent, if any, with its norm read back from the device:
    /// a host wait that the step itself does not make (its descent reads the norm).
    fn pending_ascent<B: AutodiffBackend>(&self) -> Option<PendingAscent>;

    /// Ends the pending step without updating: puts the weights kept by [`Sam::ascend`] back,
    /// leaves the base optimizer untouched, backs the loss scale off and counts the step as
    /// `UpdateSkipped` (reading the ascent's norm for its report). For a fault found between
    /// the passes, such as a micro-batch of an accumulated window that cannot be used.
    ///
    /// # Errors
    /// Without a pending ascent, or with a module that is not the ascent's: `module` handed
    /// back as given. The loss scale's hard stop: the weights of before the ascent.
    fn skip<M, B>(&mut self, module: M) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend;

    /// Ends the pending ascent without a step: puts the weights kept by [`Sam::ascend`] back
    /// and changes nothing else (no counter, no loss-scale update). m-sharpness uses it to
    /// perturb each micro-batch on its own and step once for all of them.
    ///
    /// # Errors
    /// As [`Phases::skip`]'s first.
    fn restore<M, B>(&mut self, module: M) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend;
}

impl<O> Phases for Sam<O> {
    fn pending_ascent<B: AutodiffBackend>(&self) -> Option<PendingAscent> {
        self.ascent_pending::<B>()
    }

    fn skip<M, B>(&mut self, module: M) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        self.skip_pending(module)
    }

    fn restore<M, B>(&mut self, module: M) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        self.restore_pending(module)
    }
}
