//! SAM's two phases: the ascent to `w + e(w)`, and the descent that puts `w` back and steps
//! it; a one-pass step is the descent alone. Every way through a step ends in
//! [`Sam::step_descent`] and [`Sam::finish`].

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

use super::{PendingAscent, Sam, SamStep, StepOutcome, StepReport};
use crate::error::SamError;
use crate::filter::perturbed_params;
use crate::hand_back::StepError;
use crate::norm::read_norms;
use crate::param_map::{AnyValue, ParamMap};
use crate::perturb::{move_along, snapshot_covers, sync_running_states, AscentNorm, Restore};
use crate::state::ParamState;

/// What the ascent leaves for the descent.
#[derive(Clone)]
pub(super) struct Pending {
    snapshot: ParamMap,
    /// The ascent gradient, for variants whose descent combines it (GSAM, LookSAM).
    ascent_grads: ParamMap,
    /// The variant's state after this step (Friendly-SAM's momentum), kept if it applies.
    variant_state: ParamState<f64>,
    /// The ascent direction's norm, an `AscentNorm<B::InnerBackend>`: when still on the
    /// device, read with the descent's, the step's one read. `None` on a one-pass step, which
    /// has no ascent.
    ascent_norm: Option<AnyValue>,
}

/// Where the module a Momentum-SAM step gets is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum At {
    /// At `w`: a strategy's hand-over (the strategy keeps the model at `w`).
    Weights,
    /// At the `w~` this optimizer handed out: a direct call; `w` comes back from the kept
    /// weights.
    LookAhead,
}

impl Pending {
    /// A one-pass step's: nothing perturbed, nothing kept.
    fn single_pass() -> Self {
        Self {
            snapshot: ParamMap::default(),
            ascent_grads: ParamMap::default(),
            variant_state: ParamState::default(),
            ascent_norm: None,
        }
    }

    /// The ascent's report and the descent's unscaled norm (0 without `descent`), read back
    /// together: one host wait.
    fn read_norms<B: Backend>(
        &self,
        descent: Option<Tensor<B, 1>>,
        loss_scale: f32,
    ) -> (PendingAscent, f64) {
        let ascent = self.ascent_norm.as_ref().map(|norm| {
            norm.get::<AscentNorm<B>>()
                .expect("the ascent's norm is on the descent's backend")
        });
        let on_device = match &ascent {
            Some(AscentNorm::OnDevice(squares)) => squares.clone(),
            _ => None,
        };
        let norms = read_norms(&[on_device, descent], loss_scale);
        let ascent = match ascent {
            Some(AscentNorm::Read(norm)) => PendingAscent::of(norm),
            Some(AscentNorm::OnDevice(_)) => PendingAscent::of(norms[0]),
            None => PendingAscent::NONE,
        };
        (ascent, norms[1])
    }
}

/// Which descent a step ends with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Descent {
    /// After [`Sam::ascend`]: the weights go back to the snapshot.
    AfterAscent,
    /// LookSAM's one-pass step.
    SinglePass,
    /// After the replicas' own ascents ([`Handover::LocalDescent`]).
    Local,
}

impl<O> Sam<O> {
    /// First phase: moves `module` from `w` to `w + e(w)` using `grads`, the gradient at `w`,
    /// and keeps `w` for [`Sam::descend`]. `lr` is this step's learning rate, which the
    /// radius follows under a [`SamConfig::rho_schedule`](crate::SamConfig::rho_schedule).
    ///
    /// `grads` may be loss-scaled ([`Sam::scale_loss`]): the norm is unscaled for free.
    /// The ascent waits for nothing: its norm stays on the device, and the descent reads it
    /// with its own (one host wait per step). When the gradient is not finite (an overflow)
    /// the perturbation is zero: the module stays at `w`, and the descent pass, at `w` with
    /// the same loss scale, usually overflows too; the step is then skipped
    /// ([`StepOutcome::UpdateSkipped`](crate::StepOutcome::UpdateSkipped)), or, when the
    /// descent gradient is finite, a plain base step
    /// ([`StepOutcome::AscentSkipped`](crate::StepOutcome::AscentSkipped)). Either way the
    /// loss scale backs off once and nothing non-finite is written.
    ///
    /// # Errors
    /// With `module` handed back unchanged and nothing pending: an ascent is already pending
    /// ([`SamError::AscentPending`]), `grads` hold parameters `module` does not have
    /// ([`SamError::ForeignGradients`]), loss scaling is on and no loss was scaled
    /// ([`SamError::UnscaledLoss`]), the step takes one pass ([`SamError::SinglePassStep`]),
    /// or [`SamConfig::perturb_only`](crate::SamConfig::perturb_only) picks nothing
    /// ([`SamError::NothingPicked`]). The loss scale's hard stop comes from the descent.
    pub fn ascend<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        if self.pending.is_some() {
            return Err(StepError::new(module, SamError::AscentPending));
        }
        if !self.family.needs_ascent() {
            return Err(StepError::new(module, SamError::SinglePassStep));
        }
        or_hand_back!(self.precision.check_scaled(), module);
        let picked = or_hand_back!(
            perturbed_params(&module, self.config.perturb_only.as_deref()),
            module
        );
        let loss_scale = self.loss_scale();
        let ascent = or_hand_back!(
            self.family
                .ascent(&module, grads, loss_scale, picked.as_ref()),
            module
        );
        let moved = move_along(
            &self.config,
            lr,
            module,
            ascent.direction,
            loss_scale,
            picked,
        )?;
        self.pending = Some(Pending {
            snapshot: moved.snapshot,
            ascent_grads: ascent.ascent_grads,
            variant_state: ascent.state,
            ascent_norm: Some(AnyValue::new(moved.norm)),
        });
        Ok(moved.module)
    }

    /// Second phase: puts the weights kept by [`Sam::ascend`] back and steps them with the
    /// base optimizer using `grads`, the gradient taken at the perturbed `module` (GSAM
    /// combines it with the ascent's). On a one-pass step (LookSAM between its full steps,
    /// [`Sam::needs_ascent`] false), the whole step: `grads` is the gradient at `module`.
    ///
    /// Running statistics (BatchNorm) are restored to their values after the first pass, as
    /// if the batch had been seen once. `grads` may be loss-scaled: they are unscaled in f32
    /// before the base optimizer sees them, and parameters narrower than f32 are stepped
    /// through f32 master weights. When `grads` is not finite, nothing is stepped: the
    /// unperturbed weights and the base optimizer's state are returned unchanged, and the loss
    /// scale backs off.
    ///
    /// # Errors
    /// Without a pending ascent ([`SamError::DescentWithoutAscent`]) or with a module that is
    /// not the ascent's ([`SamError::ForeignModule`]): `module` handed back as given, the
    /// pending ascent kept. With gradients of another module or of an unscaled loss: the step
    /// is dropped and the weights of before the ascent are handed back. After the loss scale's
    /// hard stop ([`SamError::LossScale`]): the weights as the step left them.
    pub fn descend<M, B>(
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
        if self.is_momentum_sam() {
            return self.step_look_ahead(lr, module, grads, At::LookAhead);
        }
        let descent = match self.pending.is_some() {
            true => Descent::AfterAscent,
            false => Descent::SinglePass,
        };
        if descent == Descent::AfterAscent || self.family.needs_ascent() {
            or_hand_back!(self.check_pending(&module), module);
        }
        self.step_descent(lr, module, grads, descent)
    }

    /// The descent's step, once the pending ascent (if any) is known to match `module`.
    pub(super) fn step_descent<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        kind: Descent,
    ) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        let loss_scale = self.loss_scale();
        let descent = self.precision.grad_squares(&module, &grads);
        let (module, mut pending) = match kind {
            Descent::AfterAscent => self.put_back(module),
            Descent::SinglePass | Descent::Local => (module, Pending::single_pass()),
        };
        // Refused gradients end the step unfinished: the weights go back to `w`.
        let descent = or_hand_back!(descent, module);
        let (ascent, descent_grad_norm) =
            pending.read_norms::<B::InnerBackend>(descent, loss_scale);
        if !ascent.perturbed {
            log::warn!(
                "SAM ascent gradient norm {} at loss scale {loss_scale}: this batch was not perturbed",
                ascent.grad_norm
            );
        }
        let grads = match descent_grad_norm.is_finite() && ascent.perturbed {
            true => self.family.descent(
                &module,
                grads,
                &pending.ascent_grads,
                loss_scale,
                descent_grad_norm,
            ),
            false => grads,
        };
        let (module, applied) =
            self.precision
                .step_if_finite(&mut self.base, lr, module, grads, descent_grad_norm);
        if applied && ascent.perturbed {
            self.family
                .commit_ascent(core::mem::take(&mut pending.variant_state));
        }
        let outcome = match (applied, kind, ascent.perturbed) {
            (false, ..) => StepOutcome::UpdateSkipped,
            (true, Descent::SinglePass, _) => StepOutcome::SinglePass,
            (true, Descent::AfterAscent, false) => StepOutcome::AscentSkipped,
            (true, ..) => StepOutcome::Applied,
        };
        let report = or_hand_back!(
            self.finish(ascent, outcome, descent_grad_norm, loss_scale),
            module
        );
        Ok((module, report))
    }

    /// [`Phases::skip`](crate::strategy::Phases::skip).
    pub(crate) fn skip_pending<M, B>(&mut self, module: M) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        or_hand_back!(self.check_pending(&module), module);
        let loss_scale = self.loss_scale();
        let (module, pending) = self.put_back(module);
        let (ascent, _) = pending.read_norms::<B::InnerBackend>(None, loss_scale);
        let report = or_hand_back!(
            self.finish(ascent, StepOutcome::UpdateSkipped, f64::NAN, loss_scale),
            module
        );
        Ok((module, report))
    }

    /// [`Phases::restore`](crate::strategy::Phases::restore).
    pub(crate) fn restore_pending<M, B>(&mut self, module: M) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        or_hand_back!(self.check_pending(&module), module);
        Ok(self.put_back(module).0)
    }

    /// The ascent waiting for its descent, if any, its norm read from the device.
    pub(crate) fn ascent_pending<B: AutodiffBackend>(&self) -> Option<PendingAscent> {
        let pending = self.pending.as_ref()?;
        Some(
            pending
                .read_norms::<B::InnerBackend>(None, self.loss_scale())
                .0,
        )
    }

    pub(super) fn check_pending<M, B>(&self, module: &M) -> Result<(), SamError>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        let Some(pending) = self.pending.as_ref() else {
            return Err(SamError::DescentWithoutAscent);
        };
        if !snapshot_covers(module, &pending.snapshot) {
            return Err(SamError::ForeignModule);
        }
        Ok(())
    }

    /// Takes the pending ascent and puts its snapshot back into `module` (checked to cover it).
    pub(super) fn put_back<M, B>(&mut self, module: M) -> (M, Pending)
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        let mut pending = self.pending.take().expect("checked by check_pending");
        // A loss scaled within the step that ends here must not vouch for the next phase.
        self.precision.handle().take_loss_scaled();
        sync_running_states(&module);
        let module = module.map(&mut Restore {
            snapshot: core::mem::take(&mut pending.snapshot),
        });
        (module, pending)
    }

    /// The step's one loss-scale update and counters.
    fn finish(
        &mut self,
        ascent: PendingAscent,
        outcome: StepOutcome,
        descent_grad_norm: f64,
        loss_scale: f32,
    ) -> Result<StepReport, SamError> {
        self.stats.steps += 1;
        self.stats.ascents_skipped += u64::from(!ascent.perturbed);
        self.stats.updates_skipped += u64::from(outcome == StepOutcome::UpdateSkipped);
        self.family.advance(matches!(
            outcome,
            StepOutcome::Applied | StepOutcome::SinglePass
        ));
        self.publish_passes();
        let skipped = outcome == StepOutcome::UpdateSkipped;
        self.precision.update(skipped || !ascent.perturbed)?;
        let report = StepReport {
            outcome,
            ascent_grad_norm: ascent.grad_norm,
            descent_grad_norm,
            loss_scale,
        };
        log::debug!("SAM step {}: {report:?}", self.stats.steps);
        Ok(report)
    }

    /// The step's passes in one call: `loss` is evaluated at `w`, then at `w + e(w)`, and the
    /// base optimizer steps `w`; on a one-pass step ([`Sam::needs_ascent`] false) `loss` is
    /// evaluated once. Returns the updated module, the first pass's loss and a report.
    /// With loss scaling the losses are scaled before each backward pass: the closure is the
    /// same as in f32 training.
    pub fn step_with<M, B, F>(
        &mut self,
        lr: LearningRate,
        module: M,
        mut loss: F,
    ) -> Result<SamStep<M, B>, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
        F: FnMut(&M) -> Tensor<B, 1>,
    {
        let handle = self.precision.handle().clone();
        handle.seed_pass(&module, 0);
        let first = loss(&module);
        // Keeping only the value lets the first pass's graph, and the weights it saved, go
        // once it is back-propagated: the base optimizer can then update them in place.
        let first_value = first.clone().detach();
        let grads = GradientsParams::from_grads(self.scale_loss(first).backward(), &module);
        if !self.family.needs_ascent() {
            let (module, report) = self.descend(lr, module, grads)?;
            return Ok(SamStep {
                module,
                loss: first_value,
                report,
            });
        }
        let perturbed = self.ascend(lr, module, grads)?;
        // The same seed as the first pass's: the same dropout masks.
        handle.seed_pass(&perturbed, 0);
        let second = self.scale_loss(loss(&perturbed));
        let grads = GradientsParams::from_grads(second.backward(), &perturbed);
        let (module, report) = self.descend(lr, perturbed, grads)?;
        Ok(SamStep {
            module,
            loss: first_value,
            report,
        })
    }
}
