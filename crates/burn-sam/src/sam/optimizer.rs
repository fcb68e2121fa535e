//! `Sam` as Burn's `Optimizer`: a training strategy's hand-over says what each `step` call
//! is ([`crate::strategy`]); without one, a caller that opted in alternates the phases.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;

use super::{Sam, SamRecord};
use crate::error::SamError;
use crate::family::VariantRecord;
use crate::hand_back::StepError;
use crate::label::SamRecordLabel;
use crate::merge::merge_devices;
use crate::protocol::Handover;

impl<O> Sam<O> {
    /// Refuses an `Optimizer::step` call that cannot run: a direct call needs
    /// [`Sam::step_per_pass`]; local descents are SAM's alone, and never while an ascent
    /// waits.
    fn check_call(&self, handover: Option<Handover>) -> Result<(), SamError> {
        match handover {
            None if !self.step_per_pass => Err(self.unlinked_step()),
            Some(Handover::LocalDescent { .. }) if self.pending.is_some() => {
                Err(SamError::AscentPending)
            }
            Some(Handover::LocalDescent { .. }) => self.config.check_local_ascent(),
            _ => Ok(()),
        }
    }

    /// Runs an accepted call: a direct call or a strategy's gradient hand-over is the ascent
    /// while one is needed and the descent after it (or a one-pass step); a local descent
    /// ([`Handover::LocalDescent`]) steps the module, which stayed at `w`, with the
    /// combination of the replicas' gradients, each at its own perturbed copy (its report's
    /// `ascent_grad_norm` is NaN).
    fn run_call<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        handover: Option<Handover>,
    ) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        or_hand_back!(self.check_call(handover), module);
        if handover.is_some() {
            // The channel checked the hand-over's loss scale.
            self.precision.vouch();
        }
        let stepped = match handover {
            Some(Handover::LocalDescent { .. }) => self.step_descent(lr, module, grads, None),
            _ if self.needs_ascent() => return self.ascend(lr, module, grads),
            _ => self.descend(lr, module, grads),
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
            Ok(handover) => self.run_call(lr, module, grads, handover),
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
        let continues = self
            .resume_as(&own)
            .unwrap_or_else(|error| panic!("{error}"));
        self.base = self.base.load_record(base);
        self.stats = own.stats;
        let masters = !own.mixed_precision.master_weights.is_empty();
        let saved = self.precision.load_record(own.mixed_precision);
        let saved = saved.with_base_state::<B, _>(masters, || self.base.to_record());
        self.channel.publish_saved_model(saved);
        let variant = match continues {
            true => own.variant,
            false => VariantRecord::default(),
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

    const GRADIENT: Option<Handover> = Some(Handover::Gradient { loss_scale: None });
    const LOCAL: Option<Handover> = Some(Handover::LocalDescent { loss_scale: None });

    #[test]
    fn a_direct_call_needs_the_opt_in() {
        let unlinked = |variant: &'static str, look_ahead| SamError::UnlinkedStep {
            variant,
            look_ahead,
        };
        assert_eq!(
            sam(SamVariant::Sam).check_call(None),
            Err(unlinked("SAM", false))
        );
        let momentum = sam(SamVariant::momentum_sam());
        assert_eq!(
            momentum.check_call(None),
            Err(unlinked("Momentum-SAM", true))
        );
        // Then the first call is the ascent, Momentum-SAM's (to its look-ahead) as SAM's.
        for variant in [SamVariant::Sam, SamVariant::momentum_sam()] {
            let opted_in = sam(variant).step_per_pass();
            assert_eq!(opted_in.check_call(None), Ok(()));
            assert!(opted_in.needs_ascent());
        }
    }

    #[test]
    fn local_descents_are_sams_alone() {
        assert_eq!(sam(SamVariant::Sam).check_call(GRADIENT), Ok(()));
        assert_eq!(sam(SamVariant::Sam).check_call(LOCAL), Ok(()));
        for variant in [SamVariant::gsam(), SamVariant::momentum_sam()] {
            let name = variant.name();
            assert_eq!(sam(variant.clone()).check_call(GRADIENT), Ok(()));
            assert_eq!(
                sam(variant).check_call(LOCAL),
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
        assert_eq!(sam.check_call(GRADIENT), Ok(()));
        assert!(!sam.needs_ascent());
        assert_eq!(sam.check_call(LOCAL), Err(SamError::AscentPending));
        // Momentum-SAM's look-ahead is pending the same way.
        let sgd = SgdConfig::new().init::<B, Linear<B>>();
        let mut momentum = SamConfig::new()
            .with_variant(SamVariant::momentum_sam())
            .init(sgd);
        let _ahead = momentum.ascend(0.1, model, GradientsParams::new()).unwrap();
        assert!(!momentum.needs_ascent());
        assert_eq!(momentum.check_call(LOCAL), Err(SamError::AscentPending));
    }
}
