//! The step protocol's messages between an optimizer and the training strategy that runs its
//! passes (see [`crate::strategy`]): what the next step takes and what each `step` call gets.

use crate::error::SamError;

/// The forward and backward passes one optimizer step takes over the same batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passes {
    /// One: the gradient at `w`.
    One,
    /// Two: SAM's ascent at `w`, then its descent at `w + e`.
    Two,
    /// One, at the look-ahead `w~` (Momentum-SAM): the ascent, without gradients, moves the
    /// model there; the descent from the gradient at `w~` steps `w`.
    LookAhead,
}

impl Passes {
    /// 1 or 2.
    pub fn count(self) -> usize {
        match self {
            Self::One | Self::LookAhead => 1,
            Self::Two => 2,
        }
    }
}

/// What the optimizer's next step takes, from
/// [`StepLink::next_step`](crate::strategy::StepLink::next_step).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NextStep {
    /// The passes.
    pub passes: Passes,
    /// The scale every loss is multiplied by before its backward pass (in f32), `None`
    /// without loss scaling.
    pub loss_scale: Option<f32>,
}

/// What a strategy hands the next `Optimizer::step` call besides the gradients.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Handover {
    /// The gradient at the module `step` gets, of losses scaled by `loss_scale` (the
    /// [`NextStep::loss_scale`] the passes ran with).
    Gradient {
        /// The scale the losses were multiplied by, `None` when they were not.
        loss_scale: Option<f32>,
    },
    /// Data-parallel SAM with local ascents: the mean of the replicas' gradients, each taken
    /// at its own perturbed copy; the module `step` gets is at `w`. SAM steps `w` with it.
    LocalDescent {
        /// The scale the losses were multiplied by, `None` when they were not.
        loss_scale: Option<f32>,
    },
}

impl Handover {
    /// The scale the handed-over gradients carry.
    pub fn loss_scale(self) -> Option<f32> {
        match self {
            Self::Gradient { loss_scale } | Self::LocalDescent { loss_scale } => loss_scale,
        }
    }
}

/// Checks a strategy's [`Handover::loss_scale`] against the optimizer's scale (`None`
/// without loss scaling).
pub(crate) fn check_handed_scale(
    handed: Option<f32>,
    expected: Option<f32>,
) -> Result<(), SamError> {
    match (expected, handed) {
        (None, None) => Ok(()),
        (Some(_), None) => Err(SamError::UnscaledLoss),
        (expected, Some(handed)) if expected == Some(handed) => Ok(()),
        (expected, Some(handed)) => Err(SamError::LossScaleMismatch {
            expected: expected.unwrap_or(1.0),
            handed,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handed_scale_must_be_the_optimizers() {
        assert_eq!(check_handed_scale(None, None), Ok(()));
        assert_eq!(check_handed_scale(Some(8.0), Some(8.0)), Ok(()));
        assert_eq!(
            check_handed_scale(None, Some(8.0)),
            Err(SamError::UnscaledLoss)
        );
        let mismatch = |expected, handed| Err(SamError::LossScaleMismatch { expected, handed });
        assert_eq!(check_handed_scale(Some(4.0), Some(8.0)), mismatch(8.0, 4.0));
        assert_eq!(check_handed_scale(Some(4.0), None), mismatch(1.0, 4.0));
    }
}
