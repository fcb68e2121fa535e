//! `Sam` as Burn's `Optimizer`: a training strategy's hand-over says what each `step` call
//! is ([`crate::strategy`]); without one, a caller that opted in alternates the phases.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;

use super::phases::Descent;
use super::{Sam, SamRecord, StepReport};
use crate::error::{SamError, StepError};
use crate::family::VariantRecord;
use crate::label::{Resume, SamRecordLabel};
use crate::merge::merge_devices;
use crate::protocol::{check_handed_scale, Handover};
use crate::variant::SamVariant;

impl<O> Sam<O> {
    /// The ascent, or the descent when one is pending or the step takes one pass.
    fn next_phase<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        match self.needs_ascent() {
            true => self.ascend(lr, module, grads),
            false => self.descend(lr, module, grads).map(|(module, _)| module),
        }
    }

    /// A strategy's phase: the scale it says its losses carry vouches for the gradients.
    fn take_handover<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        handover: Handover,
    ) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        let expected = self.precision.scaler().map(|_| self.loss_scale());
        or_hand_back!(check_handed_scale(handover.loss_scale(), expected), module);
        self.precision.handle().vouch_scaled();
        match handover {
            Handover::Gradient { .. } if self.is_momentum_sam() => self
                .step_look_ahead(lr, module, grads, true)
                .map(|(module, _)| module),
            Handover::Gradient { .. } => self.next_phase(lr, module, grads),
            Handover::LocalDescent { .. } => self
                .descend_local(lr, module, grads)
                .map(|(module, _)| module),
        }
    }

    /// The step of data-parallel SAM with local ascents ([`Handover::LocalDescent`]): each
    /// replica moved its own copy of `module` with its own gradient, and `grads` is the
    /// combination of the replicas' gradients at their perturbed weights. Steps `module`, which
    /// stayed at `w`, like [`Sam::descend`]; the report's `ascent_grad_norm` is NaN (each
    /// replica had its own). Refused while an ascent is pending, and for variants other than
    /// SAM, whose rules join one ascent to one descent.
    fn descend_local<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        if self.pending.is_some() {
            return Err(StepError::new(module, SamError::AscentPending));
        }
        if self.config.variant != SamVariant::Sam {
            let variant = self.config.variant.name();
            return Err(StepError::new(
                module,
                SamError::LocalAscentVariant { variant },
            ));
        }
        self.step_descent(lr, module, grads, Descent::Local)
    }
}

/// A training strategy says what each call gets ([`Handover`], the
/// [`strategy`](crate::strategy) protocol). Without one, after [`Sam::step_per_pass`], `step`
/// alternates between [`Sam::ascend`] and [`Sam::descend`], so a loop that runs forward,
/// backward and `step` twice per batch gets SAM.
///
/// # Panics
/// On misuse that would otherwise train silently wrong, with the [`SamError`] message: a call
/// without a strategy's hand-over and without [`Sam::step_per_pass`]
/// ([`SamError::UnlinkedStep`]: Burn's default `Learner` strategy), a call while a strategy's
/// hand-over to another optimizer waits ([`SamError::LinkedToAnotherOptimizer`]), gradients
/// or a module of the second call that do not belong to the module of the first, or loss
/// scaling on and no loss scaled. Also when the loss scaler's `max_overflows_at_min` hard stop
/// is reached.
impl<M, B, O> Optimizer<M, B> for Sam<O>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
    O: Optimizer<M, B>,
{
    type Record = (O::Record, SamRecord);

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        let stepped = match self.precision.handle().take_handover() {
            Ok(Some(handover)) => self.take_handover(lr, module, grads, handover),
            Ok(None) if self.step_per_pass => self.next_phase(lr, module, grads),
            Ok(None) => Err(StepError::new(module, self.unlinked_step())),
            Err(error) => Err(StepError::new(module, error)),
        };
        stepped.unwrap_or_else(|error| panic!("{error}"))
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        let grads = merge_devices(&module, grads);
        self.step(lr, module, grads)
    }

    /// The base optimizer's record and SAM's own: counters, loss scaler, master weights.
    /// A pending ascent is not part of it: take records between steps.
    fn to_record(&self) -> Self::Record {
        let label = SamRecordLabel {
            epoch: self.precision.handle().shared().checkpoint_epoch,
            ..SamRecordLabel::of(&self.config)
        };
        let own = SamRecord {
            stats: self.stats,
            mixed_precision: self.precision.to_record::<B>(),
            variant: self.family.to_record::<B>(),
            label: Some(label),
        };
        (self.base.to_record(), own)
    }

    /// # Panics
    /// On a record this optimizer cannot continue exactly, before changing anything, with the
    /// message of [`Sam::check_record`]'s error (see [`SamRecord`]).
    fn load_record(mut self, (base, own): Self::Record) -> Self {
        let resume = self.resume(&own).unwrap_or_else(|error| panic!("{error}"));
        self.base = self.base.load_record(base);
        self.stats = own.stats;
        self.precision.load_record(own.mixed_precision);
        self.family.load_record(match resume {
            Resume::Exactly => own.variant,
            Resume::FreshVariantState => VariantRecord::default(),
        });
        self.publish_passes();
        self.pending = None;
        self.look_ahead = None;
        self
    }
}
