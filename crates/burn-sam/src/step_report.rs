//! What one step did and saw: its outcome, the gradient norms, the loss scale and the losses
//! of its passes, as [`Sam::step_with`](crate::Sam::step_with), `Optimizer::step` and the
//! `Learner`'s metrics report it.

/// What one SAM step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// Perturbed, then stepped with the gradient at the perturbed weights.
    Applied,
    /// The ascent gradient was not finite: the weights were not perturbed and the base
    /// optimizer stepped with the descent gradient, taken at the unperturbed weights.
    AscentSkipped,
    /// The descent gradient was not finite: weights and base optimizer state are unchanged.
    UpdateSkipped,
    /// A one-pass step: LookSAM's, stepped with the gradient at the weights plus the direction
    /// kept by the last full step, or Momentum-SAM's, with the gradient at its look-ahead.
    SinglePass,
    /// A [`SamSchedule`](crate::SamSchedule)'s base step: one pass, the base optimizer
    /// stepped with the gradient at the weights, as without SAM.
    BaseStep,
}

impl StepOutcome {
    /// Whether the base optimizer stepped.
    pub fn applied(self) -> bool {
        self != Self::UpdateSkipped
    }

    /// Whether the step took SAM's two passes (its ascent found a finite gradient or not).
    pub fn two_passes(self) -> bool {
        matches!(self, Self::Applied | Self::AscentSkipped)
    }

    /// Whether an overflow skipped the step's update or its ascent (loss scaling backs off).
    pub fn overflowed(self) -> bool {
        matches!(self, Self::UpdateSkipped | Self::AscentSkipped)
    }
}

/// The outcome of one step, the gradient norms and the losses it saw.
///
/// The losses are the window's weighted means of the losses the passes back-propagated
/// (unscaled), where the step saw them: [`Sam::step_with`](crate::Sam::step_with) and
/// burn-sam-accum's `Accumulation` and `SamTraining` note them; with
/// [`Sam::ascend`](crate::Sam::ascend) and [`Sam::descend`](crate::Sam::descend) called
/// directly, note them on the optimizer's link before the descent
/// ([`StepLink::note_loss`](crate::strategy::StepLink::note_loss)), or they are NaN. They are
/// read back with the step's norms: no host wait of their own.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepReport {
    /// What happened.
    pub outcome: StepOutcome,
    /// `||a * g||` of the ascent direction (SAM: `a = 1`, the gradient at `w`), the norm the
    /// perturbation divides by (NaN on a one-pass step, which has no ascent).
    pub ascent_grad_norm: f64,
    /// `||g||` of the descent gradient, the one the base optimizer steps with (NaN after
    /// [`Phases::skip`](crate::strategy::Phases::skip), which has none).
    pub descent_grad_norm: f64,
    /// The loss scale of the descent pass (1 without loss scaling). Norms are unscaled.
    pub loss_scale: f32,
    /// `L(w)`, the loss of the pass at the weights (NaN where none was noted, and on
    /// Momentum-SAM's steps, whose one pass is at its look-ahead).
    pub loss: f64,
    /// `L(w + e)`, the loss of the pass at the perturbed weights (SAM's second pass,
    /// Momentum-SAM's one pass at its look-ahead; NaN on a step without one).
    pub perturbed_loss: f64,
}

impl StepReport {
    /// The sharpness SAM minimises, `L(w + e) - L(w)`: the rise of the loss at the perturbed
    /// weights over the loss at the weights, on the same batch. NaN unless the step saw both
    /// and was [`StepOutcome::Applied`] (an overflowed ascent left `e` at 0).
    ///
    /// A useful radius shows a small positive sharpness in the first epochs; one near 0 moves
    /// the weights too little to matter, one of the order of the loss itself too far.
    pub fn sharpness(&self) -> f64 {
        match self.outcome {
            StepOutcome::Applied => self.perturbed_loss - self.loss,
            _ => f64::NAN,
        }
    }

    /// The gradient norm SAM divides by: the ascent's on a step with SAM's two passes (with
    /// ASAM, of the reweighted gradient), otherwise the one pass's (at `w`, or at
    /// Momentum-SAM's look-ahead).
    pub fn grad_norm(&self) -> f64 {
        match self.ascent_grad_norm.is_nan() {
            true => self.descent_grad_norm,
            false => self.ascent_grad_norm,
        }
    }
}
