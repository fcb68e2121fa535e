//! The strategy channel: what an optimizer tells the training strategy that runs its passes
//! (the passes of its next step, their seed) and what the strategy tells it (the hand-over of
//! each `Optimizer::step` call, the checkpoint being saved), with the strategy's end of it,
//! [`StepLink`]. The loss scale travels beside it, in the [`LossScaleHandle`].

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use burn::module::{AutodiffModule, Module};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::SimpleOptimizer;
use burn::tensor::backend::{AutodiffBackend, Backend};

use crate::checkpoint::{fingerprint, SavedModel};
use crate::error::SamError;
use crate::hand_back::StepError;
use crate::mixed_precision::LossScaleHandle;
use crate::protocol::{check_handed_scale, Handover, NextStep, Passes};
use crate::seed::seed_pass;
use crate::step_losses::StepLosses;
use crate::step_report::StepReport;

mod reports;
pub use reports::ReportFeed;

/// The optimizer's end of the channel, shared with every [`StepLink`] built from it and with
/// the optimizer's clones.
#[derive(Clone, Debug)]
pub(crate) struct Channel(Arc<Mutex<Messages>>);

#[derive(Debug)]
struct Messages {
    /// What the optimizer's next step takes (published by the optimizer).
    passes: Passes,
    /// The run's pass seed and the next step's count (`SamConfig::pass_seed`).
    pass_seed: Option<(u64, u64)>,
    /// What a strategy hands the next `Optimizer::step` (taken by the optimizer).
    handover: Option<Handover>,
    /// Whether an optimizer reads the hand-overs (`Sam`, `MixedPrecision`); Burn's own
    /// optimizers ([`StepLink::plain`]) have no reader.
    has_reader: bool,
    /// The `Learner` epoch a strategy is checkpointing and the fingerprint of the model saved
    /// beside the record, taken into the optimizer's next record.
    checkpoint: Checkpoint,
    /// What the loaded record says of the model saved beside it, until a step or a resume
    /// has checked the model against it (published by the optimizer).
    saved_model: Option<SavedModel>,
    /// Whether the optimizer's ascent waits for its descent (published by the optimizer).
    awaiting_descent: bool,
    /// The losses noted for the step under way, where the optimizer reads them (`Sam`).
    losses: Option<StepLosses>,
    /// The last step's report (published by the optimizer).
    last_report: Option<StepReport>,
    /// The readers of the steps' reports (a `Learner`'s metrics).
    feeds: Vec<reports::Feeding>,
}

/// What a strategy or a loop of one's own says of the record being taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    /// The `Learner` epoch whose checkpoint it is.
    pub epoch: Option<u64>,
    /// The fingerprint of the model saved beside it.
    pub fingerprint: Option<u64>,
}

impl Channel {
    pub fn new() -> Self {
        Self::with_reader(true)
    }

    fn with_reader(has_reader: bool) -> Self {
        Self(Arc::new(Mutex::new(Messages {
            passes: Passes::One,
            pass_seed: None,
            handover: None,
            has_reader,
            checkpoint: Checkpoint::default(),
            saved_model: None,
            awaiting_descent: false,
            losses: None,
            last_report: None,
            feeds: Vec::new(),
        })))
    }

    /// A channel whose optimizer reads the losses noted for its steps ([`StepLink::note_loss`]).
    pub fn reading_losses() -> Self {
        let channel = Self::new();
        channel.messages().losses = Some(StepLosses::default());
        channel
    }

    /// The losses noted for the step that ends now; the next step's start from none.
    pub fn take_losses(&self) -> StepLosses {
        let mut messages = self.messages();
        match messages.losses.as_mut() {
            Some(losses) => core::mem::take(losses),
            None => StepLosses::default(),
        }
    }

    /// Puts back losses taken before the step's end, for its end to read.
    pub fn restore_losses(&self, losses: StepLosses) {
        if let Some(noted) = self.messages().losses.as_mut() {
            *noted = losses;
        }
    }

    /// The step's report, for the strategy that hands it to the report feeds.
    pub fn publish_report(&self, report: StepReport) {
        self.messages().last_report = Some(report);
    }

    pub fn last_report(&self) -> Option<StepReport> {
        self.messages().last_report
    }

    fn messages(&self) -> MutexGuard<'_, Messages> {
        // Every write leaves the messages whole: a panic elsewhere cannot tear them.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The optimizer's one message: the passes its next step takes and their seed, and
    /// whether an ascent waits for its descent.
    pub fn publish(&self, passes: Passes, pass_seed: Option<(u64, u64)>, awaiting: bool) {
        let mut messages = self.messages();
        messages.passes = passes;
        messages.pass_seed = pass_seed;
        messages.awaiting_descent = awaiting;
    }

    /// What was said of the record being taken, once: a later record is another checkpoint.
    pub fn take_checkpoint(&self) -> Checkpoint {
        core::mem::take(&mut self.messages().checkpoint)
    }

    /// Says that the next record is saved beside `model`.
    pub fn label_model<B: Backend, M: Module<B>>(&self, model: &M) {
        let fingerprint = fingerprint(model);
        self.messages().checkpoint.fingerprint = Some(fingerprint);
    }

    /// What a loaded record says of the model saved beside it.
    pub fn publish_saved_model(&self, saved: SavedModel) {
        self.messages().saved_model = saved.says_anything().then_some(saved);
    }

    /// Refuses a step on a resumed model that would not continue the saved run
    /// ([`SavedModel::check`]); once a step passes, nothing is left to check.
    pub fn check_resumed<B: Backend, M: Module<B>>(&self, module: &M) -> Result<(), SamError> {
        let Some(saved) = self.messages().saved_model.clone() else {
            return Ok(());
        };
        saved.check(module)?;
        self.messages().saved_model = None;
        Ok(())
    }

    /// `module` put back as saved ([`SavedModel::restore`]); unchanged when no record was
    /// loaded.
    pub fn resume<B: Backend, M: Module<B>>(&self, module: M) -> Result<M, StepError<M>> {
        let Some(saved) = self.messages().saved_model.clone() else {
            return Ok(module);
        };
        let module = saved.restore(module)?;
        self.messages().saved_model = None;
        Ok(module)
    }

    /// Seeds `module`'s backend for micro-batch `micro_batch`'s passes of the next step, when
    /// the optimizer has a pass seed.
    pub fn seed_pass<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        module: &M,
        micro_batch: usize,
    ) {
        let pass_seed = self.messages().pass_seed;
        if let Some(pass_seed) = pass_seed {
            seed_pass(module, pass_seed, micro_batch);
        }
    }

    /// What this `Optimizer::step` call is, for an optimizer whose loss scale is `expected`
    /// (`None` without loss scaling): a hand-over made for it, its scale checked, or a direct
    /// call (`None`). A direct call while a hand-over to another optimizer is in flight on this thread
    /// is refused: the strategy is linked to another optimizer than the one being stepped.
    pub fn accept(&self, expected: Option<f32>) -> Result<Option<Handover>, SamError> {
        let handover = self.messages().handover.take();
        match handover {
            Some(handover) => {
                in_flight::land();
                check_handed_scale(handover.loss_scale(), expected)?;
                Ok(Some(handover))
            }
            None if in_flight::is_set() => Err(SamError::LinkedToAnotherOptimizer),
            None => Ok(None),
        }
    }

    fn hand_over(&self, handover: Handover) {
        self.messages().handover = Some(handover);
        in_flight::set();
    }

    fn check_taken(&self) -> Result<(), SamError> {
        in_flight::land();
        let mut messages = self.messages();
        let left = messages.handover.take();
        match left.is_some() && messages.has_reader {
            true => Err(SamError::LinkedToAnotherOptimizer),
            false => Ok(()),
        }
    }
}

/// An optimizer a training strategy (or a loop of one's own) links to: [`Sam`](crate::Sam),
/// [`MixedPrecision`](crate::MixedPrecision) and Burn's own optimizers. Every one has
/// [`LossScaling`](crate::LossScaling)'s methods through its link.
pub trait Linkable {
    /// The strategy's end of the step protocol with this optimizer
    /// ([`strategy`](crate::strategy)).
    fn step_link(&self) -> StepLink;
}

/// Burn's own optimizers scale no loss and read no hand-over.
impl<O, M, B> Linkable for OptimizerAdaptor<O, M, B>
where
    O: SimpleOptimizer<B::InnerBackend>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    fn step_link(&self) -> StepLink {
        StepLink::plain()
    }
}

/// A strategy's end of the step protocol with one optimizer (see
/// [`strategy`](crate::strategy)): from the optimizer's [`Linkable::step_link`], it follows
/// the optimizer's updates and loaded records, and those of its clones.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::Linear;
/// use burn::optim::SgdConfig;
/// use burn_sam::strategy::{Linkable, Passes};
/// use burn_sam::SamConfig;
///
/// let sam = SamConfig::new().init(SgdConfig::new().init::<Autodiff<Flex>, Linear<Autodiff<Flex>>>());
/// let link = sam.step_link();
/// assert_eq!(link.next_step().passes, Passes::Two);
/// assert_eq!(link.next_step().loss_scale, None);
/// ```
#[derive(Clone)]
pub struct StepLink {
    scale: LossScaleHandle,
    channel: Channel,
}

impl StepLink {
    pub(crate) fn new(scale: LossScaleHandle, channel: Channel) -> Self {
        Self { scale, channel }
    }

    /// The link to an optimizer that reads no hand-over and scales no loss (Burn's own): one
    /// pass per step, nothing to check.
    pub fn plain() -> Self {
        Self::new(LossScaleHandle::unscaled(), Channel::with_reader(false))
    }

    /// What the optimizer's next step takes.
    pub fn next_step(&self) -> NextStep {
        let passes = self.channel.messages().passes;
        NextStep {
            passes,
            loss_scale: self.scale.is_scaling().then(|| self.scale.get()),
        }
    }

    /// Whether the optimizer's last `step` was an ascent that waits for its descent: false
    /// after an ascent that took the whole step (an adaptive
    /// [`SamSchedule`](crate::SamSchedule)'s base step), whose second pass is not run.
    pub fn awaits_descent(&self) -> bool {
        self.channel.messages().awaiting_descent
    }

    /// Seeds `module`'s backend for micro-batch `micro_batch`'s forward pass of the next step:
    /// a no-op unless the optimizer has a
    /// [`SamConfig::pass_seed`](crate::SamConfig::pass_seed). Both passes of a step get the
    /// same seed.
    pub fn seed_pass<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        module: &M,
        micro_batch: usize,
    ) {
        self.channel.seed_pass(module, micro_batch);
    }

    /// Says what the next `Optimizer::step` call gets, just before making it.
    pub fn hand_over(&self, handover: Handover) {
        self.channel.hand_over(handover);
    }

    /// Checks, just after the `Optimizer::step` call that followed [`StepLink::hand_over`], that
    /// the optimizer stepped was this link's (or a clone of it).
    ///
    /// # Errors
    /// [`SamError::LinkedToAnotherOptimizer`] when the hand-over is still there: the call
    /// stepped an optimizer that does not read it, such as a second optimizer built from the
    /// same configuration. [`StepLink::plain`] links have nothing to check.
    pub fn check_taken(&self) -> Result<(), SamError> {
        self.channel.check_taken()
    }

    /// Says that the optimizer's next record is the checkpoint of `Learner` epoch `epoch`,
    /// saved beside `model`: a [`Sam`](crate::Sam) writes the epoch into its record's label (a
    /// refused resume names it), and [`Sam`](crate::Sam) and
    /// [`MixedPrecision`](crate::MixedPrecision) the model's [`fingerprint`](crate::record::fingerprint),
    /// which [`StepLink::resume`] checks. One read of every weight.
    pub fn label_checkpoint<B: Backend, M: Module<B>>(&self, epoch: usize, model: &M) {
        self.channel.label_model(model);
        self.channel.messages().checkpoint.epoch = Some(epoch as u64);
    }

    /// Says that the optimizer's next record is saved beside `model`
    /// ([`LossScaling::label_model`](crate::LossScaling::label_model)).
    pub fn label_model<B: Backend, M: Module<B>>(&self, model: &M) {
        self.channel.label_model(model);
    }

    /// Refuses a step on a resumed model that [`StepLink::resume`] has not put back (the
    /// optimizer's own steps check it too): for code that runs the step's first pass itself,
    /// before it runs. No device read.
    ///
    /// # Errors
    /// [`SamError::ResumedDType`], [`SamError::ResumeOnNarrowDefault`].
    pub fn check_resumed<B: Backend, M: Module<B>>(&self, module: &M) -> Result<(), SamError> {
        self.channel.check_resumed(module)
    }

    /// The resumed `module` as it was saved: its parameters that were narrower than f32 cast
    /// back to their saved float types (Burn loads them in the device's default type), checked
    /// against the loaded record; unchanged when no record was loaded. See
    /// [`LossScaling::resume`](crate::LossScaling::resume).
    ///
    /// # Errors
    /// With the module handed back (its types put back):
    /// [`SamError::ResumeOnNarrowDefault`], [`SamError::ResumedDType`] (a record from before
    /// float types were saved), [`SamError::ResumedModelDiffers`].
    pub fn resume<B: Backend, M: Module<B>>(&self, module: M) -> Result<M, StepError<M>> {
        self.channel.resume(module)
    }

    /// The optimizer's loss scale and overflows.
    pub fn loss_scale(&self) -> &LossScaleHandle {
        &self.scale
    }
}

impl fmt::Debug for StepLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StepLink").field(&self.next_step()).finish()
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
mod tests {
    use super::*;

    const HANDOVER: Handover = Handover::Gradient { loss_scale: None };

    #[test]
    fn a_handover_is_taken_once_by_the_call_it_was_made_for() {
        let link = StepLink::new(LossScaleHandle::unscaled(), Channel::new());
        link.hand_over(HANDOVER);
        assert_eq!(link.channel.accept(None), Ok(Some(HANDOVER)));
        assert_eq!(link.check_taken(), Ok(()));
        // The next call without one is a direct call.
        assert_eq!(link.channel.accept(None), Ok(None));
    }

    #[test]
    fn a_handover_to_another_optimizer_is_refused_on_both_ends() {
        let linked = StepLink::new(LossScaleHandle::unscaled(), Channel::new());
        let stepped = Channel::new();
        linked.hand_over(HANDOVER);
        // The optimizer stepped has no hand-over while one waits on this thread.
        assert_eq!(
            stepped.accept(None),
            Err(SamError::LinkedToAnotherOptimizer)
        );
        assert_eq!(
            linked.check_taken(),
            Err(SamError::LinkedToAnotherOptimizer)
        );
        // Burn's own optimizers read no hand-over: nothing to check.
        let plain = StepLink::plain();
        plain.hand_over(HANDOVER);
        assert_eq!(plain.check_taken(), Ok(()));
    }

    #[test]
    fn an_accepted_handover_carries_the_optimizers_scale() {
        let channel = Channel::new();
        let handed = |loss_scale| {
            channel.hand_over(Handover::Gradient { loss_scale });
            channel.accept(Some(256.0))
        };
        assert!(matches!(handed(Some(256.0)), Ok(Some(_))));
        assert_eq!(handed(None), Err(SamError::UnscaledLoss));
        let mismatch = SamError::LossScaleMismatch {
            expected: 256.0,
            handed: 128.0,
        };
        assert_eq!(handed(Some(128.0)), Err(mismatch));
    }
}
