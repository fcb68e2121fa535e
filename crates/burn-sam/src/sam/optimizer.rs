//! `Sam` as Burn's `Optimizer`: a training strategy's hand-over says what each `step` call
//! is ([`crate::strategy`]); without one, a caller that opted in alternates the phases.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;

use super::{Sam, SamRecord};
use crate::channel::Call;
use crate::error::SamError;
use crate::family::VariantRecord;
use crate::hand_back::StepError;
use crate::label::{Resume, SamRecordLabel};
use crate::merge::merge_devices;
use crate::protocol::Handover;

/// What one `Optimizer::step` call is, decided before it runs ([`Sam::phase`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// [`Sam::ascend`] (Momentum-SAM's: with no gradients, to its look-ahead).
    Ascent,
    /// [`Sam::descend`]: after an ascent, or a one-pass step.
    Descent,
    /// Data-parallel SAM with local ascents ([`Handover::LocalDescent`]): each replica moved
    /// its own copy of the module with its own gradient, and the gradients are the
    /// combination of the replicas' gradients at their perturbed weights. Steps the module,
    /// which stayed at `w`; the report's `ascent_grad_norm` is NaN (each replica had its own).
    LocalDescent,
}

impl<O> Sam<O> {
    /// The phase an accepted `step` call is, or why the call is refused: a direct call needs
    /// [`Sam::step_per_pass`] and then alternates ascent and descent, as a strategy's
    /// gradient hand-overs do; local descents are SAM's alone, and never while an ascent
    /// waits.
    pub(super) fn phase(&self, call: Call) -> Result<Phase, SamError> {
        let Call::Handed(handover) = call else {
            return match (self.step_per_pass, self.needs_ascent()) {
                (false, _) => Err(self.unlinked_step()),
                (true, true) => Ok(Phase::Ascent),
                (true, false) => Ok(Phase::Descent),
            };
        };
        match handover {
            Handover::Gradient { .. } if self.needs_ascent() => Ok(Phase::Ascent),
            Handover::Gradient { .. } => Ok(Phase::Descent),
            Handover::LocalDescent { .. } if self.pending.is_some() => Err(SamError::AscentPending),
            Handover::LocalDescent { .. } => {
                self.config.check_local_ascent()?;
                Ok(Phase::LocalDescent)
            }
        }
    }

    /// Runs the phase of `call`.
    fn run_phase<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        call: Call,
    ) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        let phase = or_hand_back!(self.phase(call), module);
        let stepped = match phase {
            Phase::Ascent => return self.ascent(lr, module, grads, call),
            Phase::Descent => self.descent(lr, module, grads, call),
            Phase::LocalDescent => self.step_descent(lr, module, grads, call, None),
        };
        stepped.map(|(module, _)| module)
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
        let expected = self.precision.scaler().map(|_| self.precision.loss_scale());
        let stepped = match self.channel.accept(expected) {
            Ok(call) => self.run_phase(lr, module, grads, call),
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
        let checkpoint = self.channel.take_checkpoint();
        let label = SamRecordLabel {
            epoch: checkpoint.epoch,
            ..SamRecordLabel::of(&self.config)
        };
        let own = SamRecord {
            stats: self.stats,
            mixed_precision: self.precision.to_record::<B>(checkpoint.fingerprint),
            variant: self.family.to_record::<B>(),
            label: Some(label),
            schedule: self.family.schedule_record(),
        };
        (self.base.to_record(), own)
    }

    /// The model loaded beside it is checked at the first step: call
    /// [`LossScaling::resume`](crate::LossScaling::resume) on it first.
    ///
    /// # Panics
    /// On a record this optimizer cannot continue exactly, before changing anything, with the
    /// message of [`Sam::check_record`]'s error (see [`SamRecord`]).
    fn load_record(mut self, (base, own): Self::Record) -> Self {
        let resume = self
            .resume_as(&own)
            .unwrap_or_else(|error| panic!("{error}"));
        self.base = self.base.load_record(base);
        self.stats = own.stats;
        let masters = !own.mixed_precision.master_weights.is_empty();
        let saved = self.precision.load_record(own.mixed_precision);
        let saved = saved.with_base_state::<B, _>(masters, || self.base.to_record());
        self.channel.publish_saved_model(saved);
        let variant = match resume {
            Resume::Exactly => own.variant,
            Resume::FreshVariantState => VariantRecord::default(),
        };
        self.family
            .load_record(variant, own.stats.steps, own.schedule);
        self.pending = None;
        self.publish();
        self
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::SgdConfig;
    use burn::tensor::Tensor;

    use super::*;
    use crate::config::SamConfig;
    use crate::variant::SamVariant;

    fn sam(variant: SamVariant) -> Sam<()> {
        SamConfig::new().with_variant(variant).init(())
    }

    const GRADIENT: Call = Call::Handed(Handover::Gradient { loss_scale: None });
    const LOCAL: Call = Call::Handed(Handover::LocalDescent { loss_scale: None });

    #[test]
    fn a_direct_call_needs_the_opt_in_and_then_alternates() {
        let unlinked = |variant: &'static str, look_ahead| SamError::UnlinkedStep {
            variant,
            look_ahead,
        };
        assert_eq!(
            sam(SamVariant::Sam).phase(Call::Direct),
            Err(unlinked("SAM", false))
        );
        let momentum = sam(SamVariant::momentum_sam());
        assert_eq!(
            momentum.phase(Call::Direct),
            Err(unlinked("Momentum-SAM", true))
        );
        assert_eq!(
            sam(SamVariant::Sam).step_per_pass().phase(Call::Direct),
            Ok(Phase::Ascent)
        );
        // Momentum-SAM's step starts with its ascent to the look-ahead, as SAM's does.
        assert_eq!(
            momentum.step_per_pass().phase(Call::Direct),
            Ok(Phase::Ascent)
        );
    }

    #[test]
    fn a_handover_picks_the_phase() {
        assert_eq!(sam(SamVariant::Sam).phase(GRADIENT), Ok(Phase::Ascent));
        let momentum = sam(SamVariant::momentum_sam());
        assert_eq!(momentum.phase(GRADIENT), Ok(Phase::Ascent));
        assert_eq!(sam(SamVariant::Sam).phase(LOCAL), Ok(Phase::LocalDescent));
        for variant in [SamVariant::gsam(), SamVariant::momentum_sam()] {
            let name = variant.name();
            assert_eq!(
                sam(variant).phase(LOCAL),
                Err(SamError::LocalAscentVariant { variant: name })
            );
        }
    }

    #[test]
    fn after_an_ascent_a_handover_descends_and_a_local_one_is_refused() {
        type B = Autodiff<Flex>;
        let device = Default::default();
        let model: Linear<B> = LinearConfig::new(3, 1).init(&device);
        let loss = model.forward(Tensor::<B, 2>::ones([2, 3], &device)).sum();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let mut sam = SamConfig::new().init(SgdConfig::new().init::<B, Linear<B>>());
        let _perturbed = sam.ascend(0.1, model.clone(), grads).unwrap();
        assert_eq!(sam.phase(GRADIENT), Ok(Phase::Descent));
        assert_eq!(sam.phase(LOCAL), Err(SamError::AscentPending));
        // Momentum-SAM's look-ahead is pending the same way.
        let sgd = SgdConfig::new().init::<B, Linear<B>>();
        let mut momentum = SamConfig::new()
            .with_variant(SamVariant::momentum_sam())
            .init(sgd);
        let _ahead = momentum.ascend(0.1, model, GradientsParams::new()).unwrap();
        assert_eq!(momentum.phase(GRADIENT), Ok(Phase::Descent));
    }
}
