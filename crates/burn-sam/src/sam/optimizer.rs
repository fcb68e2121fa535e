//! `Sam` as Burn's `Optimizer`: a training strategy's hand-over says what each `step` call
//! is ([`crate::strategy`]); without one, a caller that opted in alternates the phases.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;

use super::phases::{At, Descent};
use super::{Sam, SamRecord};
use crate::error::SamError;
use crate::family::VariantRecord;
use crate::hand_back::StepError;
use crate::label::{Resume, SamRecordLabel};
use crate::merge::merge_devices;
use crate::protocol::{check_handed_scale, Handover};

/// What one `Optimizer::step` call is, decided before it runs ([`Sam::phase`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// [`Sam::ascend`].
    Ascent,
    /// [`Sam::descend`]: after an ascent, a one-pass step, or Momentum-SAM's direct step.
    Descent,
    /// Momentum-SAM's step under a strategy, which holds the model at `w`.
    LookAheadAtWeights,
    /// Data-parallel SAM with local ascents ([`Handover::LocalDescent`]): each replica moved
    /// its own copy of the module with its own gradient, and the gradients are the
    /// combination of the replicas' gradients at their perturbed weights. Steps the module,
    /// which stayed at `w`; the report's `ascent_grad_norm` is NaN (each replica had its own).
    LocalDescent,
}

impl<O> Sam<O> {
    /// The phase a `step` call with `handover` (`None`: a direct call) is, or why the call is
    /// refused. A strategy's scale must be the optimizer's; a direct call needs
    /// [`Sam::step_per_pass`] and then alternates ascent and descent; local descents are
    /// SAM's alone, and never while an ascent waits.
    pub(super) fn phase(&self, handover: Option<Handover>) -> Result<Phase, SamError> {
        let Some(handover) = handover else {
            return match (self.step_per_pass, self.needs_ascent()) {
                (false, _) => Err(self.unlinked_step()),
                (true, true) => Ok(Phase::Ascent),
                (true, false) => Ok(Phase::Descent),
            };
        };
        let expected = self.precision.scaler().map(|_| self.loss_scale());
        check_handed_scale(handover.loss_scale(), expected)?;
        match handover {
            Handover::Gradient { .. } if self.is_momentum_sam() => Ok(Phase::LookAheadAtWeights),
            Handover::Gradient { .. } if self.needs_ascent() => Ok(Phase::Ascent),
            Handover::Gradient { .. } => Ok(Phase::Descent),
            Handover::LocalDescent { .. } if self.pending.is_some() => Err(SamError::AscentPending),
            Handover::LocalDescent { .. } => {
                self.config.variant.check_local_ascent()?;
                Ok(Phase::LocalDescent)
            }
        }
    }

    /// Runs `phase`.
    fn run_phase<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        phase: Phase,
    ) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        let stepped = match phase {
            Phase::Ascent => return self.ascend(lr, module, grads),
            Phase::Descent => self.descend(lr, module, grads),
            Phase::LookAheadAtWeights => self.step_look_ahead(lr, module, grads, At::Weights),
            Phase::LocalDescent => self.step_descent(lr, module, grads, Descent::Local),
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
        let handover = self.precision.handle().take_handover();
        let phase = handover.and_then(|handover| {
            let phase = self.phase(handover)?;
            if handover.is_some() {
                // The strategy's scale, which `phase` checked, vouches for the gradients.
                self.precision.handle().vouch_scaled();
            }
            Ok(phase)
        });
        let stepped = match phase {
            Ok(phase) => self.run_phase(lr, module, grads, phase),
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

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::SgdConfig;
    use burn::tensor::Tensor;

    use super::*;
    use crate::config::SamConfig;
    use crate::scaler::LossScalerConfig;
    use crate::variant::SamVariant;

    fn sam(variant: SamVariant) -> Sam<()> {
        SamConfig::new().with_variant(variant).init(())
    }

    const GRADIENT: Option<Handover> = Some(Handover::Gradient { loss_scale: None });
    const LOCAL: Option<Handover> = Some(Handover::LocalDescent { loss_scale: None });

    #[test]
    fn a_direct_call_needs_the_opt_in_and_then_alternates() {
        let unlinked = |variant: &'static str, look_ahead| SamError::UnlinkedStep {
            variant,
            look_ahead,
        };
        assert_eq!(
            sam(SamVariant::Sam).phase(None),
            Err(unlinked("SAM", false))
        );
        let momentum = sam(SamVariant::momentum_sam());
        assert_eq!(momentum.phase(None), Err(unlinked("Momentum-SAM", true)));
        assert_eq!(
            sam(SamVariant::Sam).step_per_pass().phase(None),
            Ok(Phase::Ascent)
        );
        // Momentum-SAM's one pass is a descent from the look-ahead it handed out.
        assert_eq!(momentum.step_per_pass().phase(None), Ok(Phase::Descent));
    }

    #[test]
    fn a_handover_picks_the_phase() {
        assert_eq!(sam(SamVariant::Sam).phase(GRADIENT), Ok(Phase::Ascent));
        let momentum = sam(SamVariant::momentum_sam());
        assert_eq!(momentum.phase(GRADIENT), Ok(Phase::LookAheadAtWeights));
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
    fn a_handover_must_carry_the_optimizers_scale() {
        let scaling = LossScalerConfig::new().with_init_scale(256.0);
        let sam = SamConfig::new().with_loss_scaling(Some(scaling)).init(());
        let handed = |loss_scale| Some(Handover::Gradient { loss_scale });
        assert_eq!(sam.phase(handed(Some(256.0))), Ok(Phase::Ascent));
        assert_eq!(sam.phase(handed(None)), Err(SamError::UnscaledLoss));
        let mismatch = SamError::LossScaleMismatch {
            expected: 256.0,
            handed: 128.0,
        };
        assert_eq!(sam.phase(handed(Some(128.0))), Err(mismatch));
    }

    #[test]
    fn after_an_ascent_a_handover_descends_and_a_local_one_is_refused() {
        type B = Autodiff<Flex>;
        let device = Default::default();
        let model: Linear<B> = LinearConfig::new(3, 1).init(&device);
        let loss = model.forward(Tensor::<B, 2>::ones([2, 3], &device)).sum();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let mut sam = SamConfig::new().init(SgdConfig::new().init::<B, Linear<B>>());
        let _perturbed = sam.ascend(0.1, model, grads).unwrap();
        assert_eq!(sam.phase(GRADIENT), Ok(Phase::Descent));
        assert_eq!(sam.phase(LOCAL), Err(SamError::AscentPending));
    }
}
