//! A step's two phases, for every variant: the ascent moves `w` (to SAM's `w + e(w)`, from a
//! gradient; to Momentum-SAM's look-ahead `w~`, without a pass) and keeps it, the descent
//! puts `w` back and steps it; a one-pass step (LookSAM between its full ones) is the descent
//! alone. Every way through a step ends in [`Sam::step_descent`] and [`Sam::finish`], and
//! every way out of a pending step in [`Sam::put_back`]: the caller always gets `w` back.
//!
//! The algorithm, as davda54/sam's `sam.py` writes it, and where each line is here:
//!
//! ```text
//! first_step:                                    Sam::ascend -> gradient_ascent
//!   grad_norm = ||g||                            perturb::move_along (norm::squared_sum)
//!   scale = rho / (grad_norm + 1e-12)            perturb::move_along (`factor`, one formula
//!                                                  over device::Scalar: 0 if not finite)
//!   old_p = p.clone(); p += g * scale            perturb::Perturb::map_float (the snapshot
//!                                                  is every float tensor, kept in Pending)
//! second_step:                                   Sam::descend -> step_descent
//!   p = old_p                                    Sam::put_back (perturb::Restore)
//!   base_optimizer.step()                        precision: step_if_finite (unscaled,
//!                                                  clipped, through f32 masters; nothing
//!                                                  written unless the gradient is finite)
//! ```
//!
//! The family changes the direction (`family::FamilyRules::ascent`) and the gradient the base
//! optimizer gets (`family::FamilyRules::descent`); everything else is shared.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::tensor::backend::AutodiffBackend;

use super::pending::{Pending, StepRead};
use super::{Sam, StepOutcome, StepReport};
use crate::error::SamError;
use crate::family::Plan;
use crate::filter::perturbed_params;
use crate::hand_back::StepError;
use crate::param_map::{AnyValue, ParamMap};
use crate::perturb::{look_ahead_by, move_along, snapshot_covers, sync_running_states, Restore};

impl<O> Sam<O> {
    /// First phase: moves `module` from `w` and keeps `w` for [`Sam::descend`]. SAM and its
    /// two-pass variants move to `w + e(w)` using `grads`, the gradient at `w`; Momentum-SAM
    /// moves to its look-ahead `w~ = w - rho * v / (||v|| + eps)` along its momentum and
    /// takes no pass for it: give it no gradients (`GradientsParams::new()`) and take the
    /// step's one pass at the module it returns ([`Sam::passes`] is
    /// [`Passes::LookAhead`](crate::strategy::Passes::LookAhead)). `lr` is this step's
    /// learning rate, which the radius follows under a
    /// [`SamConfig::rho_schedule`](crate::SamConfig::rho_schedule).
    ///
    /// `grads` may be loss-scaled ([`LossScaling::scale_loss`](crate::LossScaling::scale_loss)):
    /// the norm is unscaled for free.
    /// The ascent waits for nothing: its norm stays on the device, and the descent reads it
    /// with its own (one host wait per step). When the gradient is not finite (an overflow)
    /// the perturbation is zero: the module stays at `w`, and the descent pass, at `w` with
    /// the same loss scale, usually overflows too; the step is then skipped
    /// ([`StepOutcome::UpdateSkipped`](crate::StepOutcome::UpdateSkipped)), or, when the
    /// descent gradient is finite, a plain base step
    /// ([`StepOutcome::AscentSkipped`](crate::StepOutcome::AscentSkipped)). Either way the
    /// loss scale backs off once and nothing non-finite is written.
    ///
    /// Under an adaptive [`SamSchedule`](crate::SamSchedule) the ascent first reads the
    /// gradient's norm (a host wait) and decides; on a base step it steps `w` with `grads`
    /// and hands it back, the step done ([`Sam::awaits_descent`] false, its report in
    /// [`Sam::last_report`]).
    ///
    /// # Errors
    /// With `module` handed back unchanged and nothing pending: an ascent is already pending
    /// ([`SamError::AscentPending`]), `grads` hold parameters `module` does not have
    /// ([`SamError::ForeignGradients`]), loss scaling is on and no loss was scaled
    /// ([`SamError::UnscaledLoss`]), the step takes one pass ([`SamError::SinglePassStep`]),
    /// Momentum-SAM got gradients ([`SamError::LookAheadGradients`]), or
    /// [`SamConfig::perturb_only`](crate::SamConfig::perturb_only) picks nothing
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
        O: Optimizer<M, B>,
    {
        if self.pending.is_some() {
            return Err(StepError::new(module, SamError::AscentPending));
        }
        or_hand_back!(self.channel.check_resumed(&module), module);
        let plan = self.family.plan();
        if !plan.ascends() {
            return Err(StepError::new(module, SamError::SinglePassStep));
        }
        if plan == Plan::LookAhead {
            if !grads.is_empty() {
                return Err(StepError::new(module, SamError::LookAheadGradients));
            }
            let rho = self.family.look_ahead_rho();
            let (module, snapshot) =
                look_ahead_by(module, self.family.momentum(), rho, self.config.eps);
            self.hold(Pending::without_ascent(snapshot));
            return Ok(module);
        }
        let taken = match plan {
            Plan::Decide => self.decided_ascent(lr, module, grads),
            _ => self.gradient_ascent(lr, module, grads),
        };
        if taken.is_err() {
            self.family.replan();
        }
        taken
    }

    /// An adaptive schedule's ascent: its decision from the gradient's norm (a host read),
    /// then SAM's ascent or the whole base step.
    fn decided_ascent<M, B>(
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
        // The scale first, as every ascent checks it: a refused step has used the mark.
        or_hand_back!(self.precision.check_scaled(), module);
        let squares = or_hand_back!(self.precision.grad_squares(&module, &grads), module);
        // The losses noted so far are read with the norm: a base step's report needs no
        // other read (a SAM step's descent reads them again, with its own norms).
        let losses = self.channel.take_losses();
        let read = Pending::without_ascent(ParamMap::default()).read_norms::<B::InnerBackend>(
            squares,
            self.precision.loss_scale(),
            &losses,
        );
        // Checked: the phase decided on takes the same gradients.
        self.precision.vouch();
        match self.family.decide(read.descent_norm.powi(2)) {
            Plan::Ascent => {
                self.channel.restore_losses(losses);
                self.gradient_ascent(lr, module, grads)
            }
            _ => self
                .step_descent(lr, module, grads, Some(read))
                .map(|(module, _)| module),
        }
    }

    /// SAM's ascent from the gradient at `w`: the module moved to `w + e(w)`, `w` kept.
    fn gradient_ascent<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        or_hand_back!(self.precision.check_scaled(), module);
        let picked = or_hand_back!(
            perturbed_params(&module, self.config.perturb_only.as_deref()),
            module
        );
        let loss_scale = self.precision.loss_scale();
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
        self.hold(Pending {
            snapshot: moved.snapshot,
            ascent_grads: ascent.ascent_grads,
            variant_state: ascent.state,
            ascent_squares: Some(AnyValue::new(moved.squares)),
        });
        Ok(moved.module)
    }

    /// Keeps what the ascent left for the descent, and tells strategies a descent is awaited.
    fn hold(&mut self, pending: Pending) {
        self.pending = Some(pending);
        self.publish();
    }

    /// Second phase: puts the weights kept by [`Sam::ascend`] back and steps them with the
    /// base optimizer using `grads`, the gradient taken at the module the ascent returned
    /// (GSAM combines it with the ascent's); hands back the stepped `w`. On a one-pass step
    /// (LookSAM between its full steps, [`Sam::needs_ascent`] false), the whole step: `grads`
    /// is the gradient at `module`.
    ///
    /// Running statistics (BatchNorm) are restored to their values after the first pass, as
    /// if the batch had been seen once. `grads` may be loss-scaled: they are unscaled in f32
    /// before the base optimizer sees them, and parameters narrower than f32 are stepped
    /// through f32 master weights. When `grads` is not finite, nothing is stepped: the
    /// weights of before the ascent and the base optimizer's state are returned unchanged,
    /// and the loss scale backs off.
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
        // A step planned with an ascent needs it first; a one-pass step is the descent alone.
        if self.pending.is_some() || self.family.plan().ascends() {
            or_hand_back!(self.check_pending(&module), module);
        }
        self.step_descent(lr, module, grads, None)
    }

    /// The descent's step, once the pending ascent (if any) is known to match `module`;
    /// `known`: the step's read, when it was made already (the unscaled norm of `grads`, the
    /// losses).
    pub(super) fn step_descent<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        known: Option<StepRead>,
    ) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        or_hand_back!(self.channel.check_resumed(&module), module);
        let loss_scale = self.precision.loss_scale();
        // An adaptive base step's norm was read for its decision: no second read.
        let descent = self.precision.check_scaled().and_then(|()| match known {
            Some(_) => Ok(None),
            None => self.precision.grad_squares(&module, &grads),
        });
        let (module, mut pending) = match self.pending.is_some() {
            true => self.put_back(module),
            false => (module, Pending::without_ascent(ParamMap::default())),
        };
        // Refused gradients end the step unfinished: the weights go back to `w`.
        let descent = or_hand_back!(descent, module);
        let losses = self.channel.take_losses();
        let read = match known {
            Some(read) => read,
            None => pending.read_norms::<B::InnerBackend>(descent, loss_scale, &losses),
        };
        let (ascent, descent_grad_norm) = (read.ascent, read.descent_norm);
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
            let state = core::mem::take(&mut pending.variant_state);
            self.family.commit(state, self.config.rho_at(lr));
        }
        let outcome = StepOutcome::of(self.family.plan(), applied, ascent.perturbed);
        let report = or_hand_back!(self.finish(read, outcome, loss_scale), module);
        Ok((module, report))
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
        self.publish();
        // A loss scaled within the step that ends here must not vouch for the next phase.
        self.precision.handle().take_loss_scaled();
        sync_running_states(&module);
        let module = module.map(&mut Restore {
            snapshot: core::mem::take(&mut pending.snapshot),
        });
        (module, pending)
    }

    /// The step's one loss-scale update and counters.
    pub(super) fn finish(
        &mut self,
        read: StepRead,
        outcome: StepOutcome,
        loss_scale: f32,
    ) -> Result<StepReport, SamError> {
        let ascent = read.ascent;
        if !ascent.perturbed {
            log::warn!(
                "SAM ascent gradient norm {} at loss scale {loss_scale}: this batch was not perturbed",
                ascent.grad_norm
            );
        }
        self.stats.steps += 1;
        self.stats.ascents_skipped += u64::from(!ascent.perturbed);
        self.stats.updates_skipped += u64::from(outcome == StepOutcome::UpdateSkipped);
        self.family.advance(matches!(
            outcome,
            StepOutcome::Applied | StepOutcome::SinglePass
        ));
        self.publish();
        let skipped = outcome == StepOutcome::UpdateSkipped;
        self.precision.update(skipped || !ascent.perturbed)?;
        let [loss, perturbed_loss] = read.losses;
        let report = StepReport {
            outcome,
            ascent_grad_norm: ascent.grad_norm,
            descent_grad_norm: read.descent_norm,
            loss_scale,
            loss,
            perturbed_loss,
        };
        log::debug!("SAM step {}: {report:?}", self.stats.steps);
        self.channel.publish_report(report);
        Ok(report)
    }
}
