use core::fmt;

use crate::LossScaleError;

/// What went wrong when configuring or driving a [`Sam`](crate::Sam) optimizer.
#[derive(Debug, Clone, PartialEq)]
pub enum SamError {
    /// A configuration field is outside its allowed range.
    InvalidConfig {
        /// The field's name, as in the config struct.
        field: &'static str,
        /// The rejected value.
        value: f64,
        /// The allowed range, in words.
        allowed: &'static str,
    },
    /// `descend` was called without a pending ascent.
    DescentWithoutAscent,
    /// `ascend` was called while the previous ascent still waits for its descent.
    AscentPending,
    /// The gradients hold parameters that the module does not have.
    ForeignGradients {
        /// Gradients registered.
        gradients: usize,
        /// Of those, how many belong to a parameter of the module.
        matched: usize,
    },
    /// The module given to the descent is not the one the ascent returned.
    ForeignModule,
    /// The loss scale hit its minimum and kept overflowing (`max_overflows_at_min`).
    LossScale(LossScaleError),
}

impl From<LossScaleError> for SamError {
    fn from(error: LossScaleError) -> Self {
        Self::LossScale(error)
    }
}

impl fmt::Display for SamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidConfig {
                field,
                value,
                allowed,
            } => write!(f, "invalid SAM config: `{field}` = {value}, allowed: {allowed}"),
            Self::DescentWithoutAscent => write!(
                f,
                "SAM descent without an ascent: call `ascend` (or the first `step`) on this batch first"
            ),
            Self::AscentPending => write!(
                f,
                "SAM ascent while the previous ascent waits for its descent: call `descend` first"
            ),
            Self::ForeignGradients { gradients, matched } => write!(
                f,
                "SAM got gradients for parameters the module does not have ({matched} of {gradients} match): \
                 compute the gradients with this module"
            ),
            Self::ForeignModule => write!(
                f,
                "SAM descent got a module whose parameters differ from the ascent's: \
                 pass the module returned by the ascent"
            ),
            Self::LossScale(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for SamError {}
