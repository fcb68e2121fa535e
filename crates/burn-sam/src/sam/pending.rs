//! What a step's ascent leaves for its descent, and which descent ends the step.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::PendingAscent;
use crate::device::{read_norms, Scalar};
use crate::param_map::{AnyValue, ParamMap};
use crate::state::ParamState;

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

    /// The ascent's report and the descent's unscaled norm (0 without `descent`), read back
    /// together: one host wait.
    pub fn read_norms<B: Backend>(
        &self,
        descent: Option<Tensor<B, 1>>,
        loss_scale: f32,
    ) -> (PendingAscent, f64) {
        let ascent = self.ascent_squares.as_ref().map(|squares| {
            squares
                .get::<Option<Scalar<B>>>()
                .expect("the ascent's norm is on the descent's backend")
        });
        let gradient_ascent = ascent.is_some();
        let norms = read_norms(&[ascent.flatten(), descent.map(Scalar::device)], loss_scale);
        let ascent = match gradient_ascent {
            true => PendingAscent::of(norms[0]),
            false => PendingAscent::NONE,
        };
        (ascent, norms[1])
    }
}
