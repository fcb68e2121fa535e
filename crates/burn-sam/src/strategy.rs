//! For training strategies and other code that runs an optimizer's passes without holding it
//! (`burn_sam_accum` builds on this): the step protocol, SAM's phases beyond `ascend` and
//! `descend`, and the building blocks of a step. Training with [`Sam`](crate::Sam) or
//! [`MixedPrecision`](crate::MixedPrecision) needs nothing here.
//!
//! # The step protocol
//! Burn's `Learner` reaches its optimizer only through `Optimizer::step(lr, module, grads)`.
//! A strategy holds a [`StepLink`] to it instead (from [`Linkable::step_link`]); values cross
//! it one way each: the optimizer publishes what its next step takes
//! ([`StepLink::next_step`]), the strategy says what it hands each `step` call
//! ([`StepLink::hand_over`]). One optimizer step:
//!
//! 1. `next = link.next_step()`: [`Passes::Two`] (SAM), [`Passes::One`] (LookSAM between
//!    its full steps, optimizers without SAM) or [`Passes::LookAhead`] (Momentum-SAM), and the
//!    scale to multiply every loss by.
//! 2. One device, each pass: the gradient at the learner's model, `hand_over(Handover::Gradient)`,
//!    `Optimizer::step`. Of two passes the first ascends (the model comes back at `w + e`),
//!    the second descends (the base optimizer steps `w`); a single pass is the whole step.
//! 3. N replicas, synced ascent: the same; each pass's gradient is the item-weighted mean of
//!    the replicas' gradients at the same model.
//! 4. N replicas, local ascents (on [`Passes::Two`]): each replica moves its copy by its own
//!    gradient ([`perturb`]) and takes the gradient there
//!    ([`Perturbation::carry_fault`] passes an overflowing ascent on to it); their mean is
//!    handed over as [`Handover::LocalDescent`], and one `Optimizer::step` steps `w`.
//! 5. Momentum-SAM ([`Passes::LookAhead`]): first `hand_over(Handover::Gradient)` and
//!    `Optimizer::step` with no gradients (`GradientsParams::new()`): its ascent takes no
//!    pass, and the model comes back at its look-ahead `w~`. Then one pass there, handed over
//!    as in 2; the model comes back at `w`, stepped.
//!
//! Between steps the model is at `w` on every path: what a strategy validates and saves.
//!
//! A `step` with nothing handed over is a direct call. [`Sam`](crate::Sam) refuses it
//! ([`SamError::UnlinkedStep`](crate::SamError::UnlinkedStep): Burn's own strategies step
//! once per batch) unless the caller opted in with
//! [`Sam::step_per_pass`](crate::Sam::step_per_pass); it then alternates ascent and descent
//! itself and needs `scale_loss` to have been called since its last phase. A direct call while a hand-over to
//! another optimizer waits on the same thread is [`SamError::LinkedToAnotherOptimizer`](crate::SamError::LinkedToAnotherOptimizer), and so
//! is a hand-over left untaken by the call it was made for ([`StepLink::check_taken`]): the
//! strategy holds a link to another optimizer than the one it steps.

pub use crate::channel::{Linkable, ReportFeed, StepLink};
pub use crate::device::transfers_through_host;
pub use crate::float::widen;
pub use crate::grad_map::{map_grads, GradMap, ParamGrad};
pub use crate::local_ascent::{perturb, Perturbation};
pub use crate::mixed_precision::guarded_step;
pub use crate::or_hand_back;
pub use crate::protocol::{Handover, NextStep, Passes};
pub use crate::sam::{PendingAscent, Phases};
