//! What a SAM step reports and what its record holds.

use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;

use crate::family::{Plan, VariantRecord};
use crate::label::SamRecordLabel;
use crate::mixed_precision::MixedPrecisionRecord;
use crate::schedule::ScheduleRecord;
use crate::step_report::{StepOutcome, StepReport};

/// What [`Sam::ascend`](super::Sam::ascend) did, as its descent (or
/// [`Phases::pending_ascent`](crate::strategy::Phases::pending_ascent)) reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PendingAscent {
    /// `||a * g||` of the ascent gradient, unscaled.
    pub grad_norm: f64,
    /// False when the ascent gradient was not finite: the weights were left at `w` (the
    /// perturbation was zero), and the step backs the loss scale off.
    pub perturbed: bool,
}

impl PendingAscent {
    /// A one-pass step's: no ascent, nothing that overflowed.
    pub(crate) const NONE: Self = Self {
        grad_norm: f64::NAN,
        perturbed: true,
    };

    pub(crate) fn of(grad_norm: f64) -> Self {
        Self {
            grad_norm,
            perturbed: grad_norm.is_finite(),
        }
    }
}

/// Counters of what SAM did, saved in its record.
#[derive(Record, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamStats {
    /// Optimizer steps taken (descents, skipped or not).
    pub steps: u64,
    /// Steps whose ascent gradient was not finite: no perturbation, plain base step.
    pub ascents_skipped: u64,
    /// Steps whose descent gradient was not finite: weights and base state left untouched.
    pub updates_skipped: u64,
}

/// SAM's own state, saved beside the base optimizer's record, with a label saying what wrote
/// it.
///
/// `load_record` continues only a record it can continue exactly, and panics before changing
/// anything otherwise, with the message of [`Sam::check_record`](super::Sam::check_record)'s error:
/// another variant's state, loss scaling or master weights on where they were off (or the reverse),
/// a record format newer than [`RECORD_FORMAT`](crate::record::RECORD_FORMAT). One pairing of variants is
/// allowed: a record of a variant that keeps no state (SAM, GSAM) loads into any variant, whose own
/// state then starts as at its first step (Momentum-SAM's momentum at zero, LookSAM's cycle with a
/// full step). A record written before labels existed (`label` `None`) loads where its contents say
/// what wrote it (no variant state, or Momentum-SAM's radius); one with LookSAM's or Friendly-SAM's
/// state is refused until it is labelled ([`SamRecordLabel::of`](crate::record::SamRecordLabel::of)).
#[derive(Record, Clone, Debug)]
pub struct SamRecord {
    /// Counters.
    pub stats: SamStats,
    /// Loss scaler and f32 master weights.
    pub mixed_precision: MixedPrecisionRecord,
    /// The variant's state (Friendly-SAM's momentum, LookSAM's cycle and kept direction).
    pub variant: VariantRecord,
    /// What wrote the record; `None` in records written before labels existed.
    pub label: Option<SamRecordLabel>,
    /// An adaptive [`SamSchedule`](crate::SamSchedule)'s statistics; `None` without one, and
    /// in records written before schedules existed (the statistics then start from 0).
    pub schedule: Option<ScheduleRecord>,
}

impl StepOutcome {
    /// What a step of `plan` did, once its descent `applied` the update or not, with an ascent
    /// that `perturbed` the weights or found its gradient not finite.
    pub(crate) fn of(plan: Plan, applied: bool, perturbed: bool) -> Self {
        match (applied, plan) {
            (false, _) => Self::UpdateSkipped,
            (true, Plan::Reuse | Plan::LookAhead) => Self::SinglePass,
            (true, Plan::Base) => Self::BaseStep,
            (true, _) if !perturbed => Self::AscentSkipped,
            (true, _) => Self::Applied,
        }
    }
}

/// The result of [`Sam::step_with`](super::Sam::step_with).
#[derive(Debug)]
pub struct SamStep<M, B: AutodiffBackend> {
    /// The updated module.
    pub module: M,
    /// The loss of the first pass, at the unperturbed weights, detached.
    pub loss: Tensor<B, 1>,
    /// What the step did.
    pub report: StepReport,
}
