//! [`AccumError`]: what goes wrong when configuring or stepping an accumulation.

use core::fmt;

use burn_sam::{ConfigError, SamError};

/// What went wrong when configuring or stepping an [`Accumulation`](crate::Accumulation).
#[derive(Debug, Clone, PartialEq)]
pub enum AccumError {
    /// A configuration field is outside its allowed range.
    InvalidConfig(ConfigError),
    /// A window without micro-batches: nothing was stepped.
    EmptyWindow,
    /// More micro-batches than the configured window holds.
    WindowTooLong {
        /// Micro-batches given.
        micro_batches: usize,
        /// The configured window.
        window: usize,
    },
    /// A micro-batch said it holds no items.
    ZeroItems {
        /// Its position in the window.
        index: usize,
    },
    /// A micro-batch's loss has no gradient for any parameter of the module: it was not
    /// computed with the module passed to the loss closure.
    LossWithoutModule {
        /// The micro-batch's position in the window.
        index: usize,
    },
    /// Some micro-batches of the window gave an item count and others did not.
    MixedItemCounts,
    /// The optimizer refused the step: gradients or module not matching, loss-scale hard stop.
    Optimizer(SamError),
}

impl From<SamError> for AccumError {
    fn from(error: SamError) -> Self {
        Self::Optimizer(error)
    }
}

impl From<ConfigError> for AccumError {
    fn from(error: ConfigError) -> Self {
        Self::InvalidConfig(error)
    }
}

impl fmt::Display for AccumError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidConfig(error) => error.fmt(f),
            Self::EmptyWindow => write!(f, "empty window: give at least one micro-batch"),
            Self::WindowTooLong {
                micro_batches,
                window,
            } => write!(
                f,
                "window of {micro_batches} micro-batches, but `window` = {window}: \
                 give at most {window}"
            ),
            Self::ZeroItems { index } => write!(
                f,
                "micro-batch {index} holds 0 items: each micro-batch needs at least 1"
            ),
            Self::LossWithoutModule { index } => write!(
                f,
                "the loss of micro-batch {index} has no gradient for the module's parameters: \
                 compute it with the module passed to the closure"
            ),
            Self::MixedItemCounts => write!(
                f,
                "some micro-batches give an item count and others do not: \
                 give it for all of them or for none (equal weights)"
            ),
            Self::Optimizer(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for AccumError {}
