//! The device forms: how each backend computes, reads and launches best. The maths modules
//! (`perturb`, `family/`, `norm`, the step) write formulas over what this face exports and
//! never import the files behind it (`cargo xtask house` checks it; ARCHITECTURE.md's rule):
//! a backend's quirk changes here and nowhere else.
//!
//! - [`Scalar`]: a number of the step, read back or still on the device.
//! - [`GlobalSum`]: a sum of squares or products over many tensors, as one device scalar.
//! - reductions and ASAM's weighting in the form each backend computes fastest (`reduce`).
//! - [`by_shape`]: the order per-parameter work is queued in, for the fuser.
//! - [`end_step_on_device`]: how a step ends on a backend that queues its work.
//! - [`diagnostics`]: the one counted read and sync, and their counters (public).

mod broadcast;
pub mod diagnostics;
mod global_sum;
mod launch;
mod queue_order;
mod quirks;
mod reduce;
mod scalar;

pub(crate) use diagnostics::read_back;
pub(crate) use global_sum::GlobalSum;
pub(crate) use launch::end_step_on_device;
pub(crate) use queue_order::by_shape;
pub use quirks::transfers_through_host;
pub(crate) use reduce::{reduction_view, squared_norm, sum_all, weighted};
pub(crate) use scalar::{read_norms, read_norms_and, Scalar};
