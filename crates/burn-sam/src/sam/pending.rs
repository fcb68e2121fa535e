//! What a step's ascent leaves for its descent, and which descent ends the step.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::PendingAscent;
use crate::device::{read_norms_and, Scalar};
use crate::param_map::{AnyValue, ParamMap};
use crate::state::ParamState;
use crate::step_losses::StepLosses;

/// What the ascent leaves for the descent.
#[derive(Clone)]
pub(super) struct Pending {
    pub snapshot: ParamMap,
    /// The ascent gradient, for variants whose descent combines it (GSAM, LookSAM).
    pub ascent_grads: ParamMap,
    /// The variant's state after this step (Friendly-SAM's momentum), kept if it applies.
    pub variant_state: ParamState<f64>,
    /// The ascent direction's `||a d||^2` (scaled), an `Option<Scalar<B::InnerBackend>>`:
    /// when still on the device, read with the descent's, the step's one read. `None` without
    /// a gradient ascent (a one-pass step, Momentum-SAM's look-ahead).
    pub ascent_squares: Option<AnyValue>,
}

impl Pending {
    /// A one-pass step's, or Momentum-SAM's look-ahead with what it kept: no ascent gradient.
    pub fn without_ascent(snapshot: ParamMap) -> Self {
        Self {
            snapshot,
            ascent_grads: ParamMap::default(),
            variant_state: ParamState::default(),
            ascent_squares: None,
        }
    }

    /// The ascent's report, the descent's unscaled norm (0 without `descent`) and the step's
    /// noted losses `[L(w), L(w + e)]` (NaN where none was noted), read back together: one
    /// host wait.
    pub fn read_norms<B: Backend>(
        &self,
        descent: Option<Tensor<B, 1>>,
        loss_scale: f32,
        losses: &StepLosses,
    ) -> StepRead {
        let ascent = self.ascent_squares.as_ref().map(|squares| {
            squares
                .get::<Option<Scalar<B>>>()
                .expect("the ascent's norm is on the descent's backend")
        });
        let gradient_ascent = ascent.is_some();
        let squares = [ascent.flatten(), descent.map(Scalar::device)];
        let (norms, sums) = read_norms_and(&squares, loss_scale, losses.sums::<B>().into());
        StepRead {
            ascent: match gradient_ascent {
                true => PendingAscent::of(norms[0]),
                false => PendingAscent::NONE,
            },
            descent_norm: norms[1],
            losses: losses.means([sums[0], sums[1]]),
        }
    }
}

/// What the step's one read gives.
pub(super) struct StepRead {
    pub ascent: PendingAscent,
    pub descent_norm: f64,
    /// `[L(w), L(w + e)]`.
    pub losses: [f64; 2],
}
