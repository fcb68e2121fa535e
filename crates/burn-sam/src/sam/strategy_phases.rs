//! [`Phases`]: SAM's phases beyond `ascend` and `descend`, for strategies that drive them
//! over several gradients per step (accumulation's windows, m-sharpness).

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;

use super::{PendingAscent, Sam, StepOutcome, StepReport};
use crate::hand_back::StepError;
use crate::step_losses::StepLosses;

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
        let pending = self.pending.as_ref()?;
        let loss_scale = self.precision.loss_scale();
        let losses = StepLosses::default();
        Some(
            pending
                .read_norms::<B::InnerBackend>(None, loss_scale, &losses)
                .ascent,
        )
    }

    fn skip<M, B>(&mut self, module: M) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        or_hand_back!(self.check_pending(&module), module);
        let loss_scale = self.precision.loss_scale();
        let (module, pending) = self.put_back(module);
        let losses = self.channel.take_losses();
        let mut read = pending.read_norms::<B::InnerBackend>(None, loss_scale, &losses);
        read.descent_norm = f64::NAN;
        let report = or_hand_back!(
            self.finish(read, StepOutcome::UpdateSkipped, loss_scale),
            module
        );
        Ok((module, report))
    }

    fn restore<M, B>(&mut self, module: M) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        or_hand_back!(self.check_pending(&module), module);
        Ok(self.put_back(module).0)
    }
}
