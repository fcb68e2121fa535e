//! What each member of the SAM family changes around SAM's two passes: the ascent direction
//! (Friendly-SAM), the gradient the base optimizer steps with (GSAM, LookSAM), and which steps
//! take one pass (LookSAM); with the per-parameter state they keep between steps.
//!
//! Gradients arrive multiplied by the loss scale `S`. Every rule below is linear in the
//! gradients it combines, so it runs on scaled gradients and yields scaled ones; only state
//! kept across steps (whose scale may differ) is stored unscaled.

mod ascent;
mod descent;
mod looksam;

use std::collections::HashSet;

use burn::module::{AutodiffModule, ParamId};
use burn::optim::GradientsParams;
use burn::record::Record;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

use ascent::AscentRule;
use descent::{DescentMap, DescentRule};

use crate::error::SamError;
use crate::grad_map::map_grads;
use crate::param_map::ParamMap;
use crate::protocol::Passes;
use crate::schedule::{Decision, SamSchedule, ScheduleRecord};
use crate::state::ParamState;
use crate::variant::{PassRule, PerturbFrom, SamVariant, VariantProperties};

/// The member of the SAM family and its state: LookSAM's position in its cycle, and by
/// parameter (flattened, unscaled, in the gradients' widened float type) Friendly-SAM's
/// momentum `m` or LookSAM's direction `g_v`; as `Vec<f64>` when loaded from a record, until a step puts it on the
/// device.
#[derive(Clone)]
pub(crate) struct FamilyRules {
    properties: VariantProperties,
    eps: f64,
    cycle: u64,
    state: ParamState<f64>,
    rho: f64,
    schedule: Option<SamSchedule>,
    /// SAM's step count (`SamStats::steps`), which the schedule reads.
    steps: u64,
    /// An adaptive schedule's statistics, and its decision for the step under way.
    statistics: ScheduleRecord,
    decision: Option<Decision>,
}

/// The state of a SAM variant, saved in [`SamRecord`](crate::record::SamRecord).
#[derive(Record, Clone, Debug, Default)]
pub struct VariantRecord {
    /// LookSAM: steps taken in its cycle (a full step at every multiple of `k`).
    pub cycle: u64,
    /// Friendly-SAM's gradient momentum, LookSAM's direction `g_v` or Momentum-SAM's
    /// momentum `v`, per parameter.
    pub tensors: Vec<ParamValuesRecord>,
    /// Momentum-SAM: the radius of the look-ahead after the last step (0 for the others).
    pub rho: f64,
}

/// One parameter's state tensor, flattened.
#[derive(Record, Clone, Debug)]
pub struct ParamValuesRecord {
    /// The parameter's id, serialized.
    pub id: String,
    /// The values, exactly (f64 holds every f16, f32 and f64 value).
    pub values: Vec<f64>,
}

/// What the ascent computed from its gradient: the direction to perturb along and normalise
/// (scaled), what the descent needs of the gradient, and the state to keep once it is known
/// to be finite.
pub(crate) struct AscentGradients {
    pub direction: GradientsParams,
    pub ascent_grads: ParamMap,
    pub state: ParamState<f64>,
}

impl FamilyRules {
    pub fn new(variant: SamVariant, eps: f64, schedule: Option<SamSchedule>) -> Self {
        Self {
            properties: variant.properties(),
            eps,
            cycle: 0,
            state: ParamState::default(),
            rho: 0.0,
            schedule,
            steps: 0,
            statistics: ScheduleRecord::default(),
            decision: None,
        }
    }

    /// Whether the next step is the variant's, not a schedule's base step; an adaptive
    /// schedule's step is the variant's until its first gradient decides otherwise.
    pub fn sam_step(&self) -> bool {
        let Some(schedule) = &self.schedule else {
            return true;
        };
        let decided = self.decision.map(|decision| decision.sam);
        schedule.sam_step(self.steps).or(decided).unwrap_or(true)
    }

    /// Whether the schedule decides from the step's first gradient (AE-SAM).
    pub fn decides_from_gradient(&self) -> bool {
        matches!(self.schedule, Some(SamSchedule::Adaptive { .. }))
    }

    /// The adaptive schedule's decision from the squared norm of the step's first gradient,
    /// held for the step (and kept with its statistics once it is counted); returns whether
    /// it is a SAM step.
    pub fn decide(&mut self, squared_norm: f64) -> bool {
        let schedule = self.schedule.as_ref().expect("an adaptive schedule");
        let decision = schedule.decide(self.steps, squared_norm, self.statistics);
        self.decision = Some(decision);
        decision.sam
    }

    /// Forgets a decision whose step was refused.
    pub fn undecide(&mut self) {
        self.decision = None;
    }

    /// False on LookSAM's steps between full ones and on a schedule's base steps: they take
    /// one pass and no ascent.
    pub fn needs_ascent(&self) -> bool {
        let variant = match self.properties.passes {
            PassRule::TwoEvery { k } => self.cycle.is_multiple_of(k as u64),
            PassRule::Two | PassRule::LookAhead => true,
        };
        variant && self.sam_step()
    }

    /// The passes the next step takes.
    pub fn passes(&self) -> Passes {
        match self.properties.passes {
            PassRule::LookAhead => Passes::LookAhead,
            _ if self.needs_ascent() => Passes::Two,
            _ => Passes::One,
        }
    }

    /// Momentum-SAM's momentum `v` (unscaled), per parameter; empty before its first step.
    pub fn momentum(&self) -> &ParamState<f64> {
        &self.state
    }

    /// The radius of Momentum-SAM's look-ahead, set by each applied step.
    pub fn look_ahead_rho(&self) -> f64 {
        self.rho
    }

    /// The ascent's direction from its gradient `grads`: `g - sigma * S * m` for Friendly-SAM
    /// (`g` on its first step), `g` for the others; GSAM and LookSAM keep `g` for the descent.
    pub fn ascent<B, M>(
        &self,
        module: &M,
        grads: GradientsParams,
        loss_scale: f32,
        picked: Option<&HashSet<ParamId>>,
    ) -> Result<AscentGradients, SamError>
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
    {
        let (keep, momentum) = AscentRule::needs(&self.properties);
        if !keep && momentum.is_none() {
            return Ok(AscentGradients {
                direction: grads,
                ascent_grads: ParamMap::default(),
                state: ParamState::default(),
            });
        }
        let mut rule = AscentRule {
            rules: self,
            picked,
            keep,
            momentum,
            inverse_scale: 1.0 / f64::from(loss_scale),
            loss_scale: f64::from(loss_scale),
            ascent_grads: ParamMap::default(),
            state: ParamState::default(),
        };
        let gradients = grads.len();
        let (direction, matched) = map_grads(module, grads, &mut rule);
        if matched != gradients {
            return Err(SamError::ForeignGradients { gradients, matched });
        }
        Ok(AscentGradients {
            direction,
            ascent_grads: rule.ascent_grads,
            state: rule.state,
        })
    }

    /// Keeps what a step computed once it is applied: the ascent's state and, for
    /// Momentum-SAM, `rho` (the step's radius) as its next look-ahead's. A skipped step leaves
    /// the variant's state as it was, like the base optimizer's.
    pub fn commit(&mut self, ascent_state: ParamState<f64>, rho: f64) {
        self.state.extend(ascent_state);
        if self.properties.perturbation == PerturbFrom::Momentum {
            self.rho = rho;
        }
    }

    /// The gradient the base optimizer steps with, from the finite descent gradient `grads`
    /// (unscaled norm `grad_norm`) and the ascent's gradient (none on a one-pass step).
    pub fn descent<B, M>(
        &mut self,
        module: &M,
        grads: GradientsParams,
        ascent_grads: &ParamMap,
        loss_scale: f32,
        grad_norm: f64,
    ) -> GradientsParams
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
    {
        if !self.sam_step() {
            return grads;
        }
        let Some(rule) = DescentRule::of(self, module, &grads, ascent_grads, loss_scale, grad_norm)
        else {
            return grads;
        };
        let mut descent = DescentMap::new(ascent_grads, rule);
        let (mut out, _) = map_grads(module, grads, &mut descent);
        if let Some(state) = descent.finish(&mut out) {
            self.state = state;
        }
        out
    }

    /// Counts a finished step: LookSAM's cycle moves on only with its steps that did their
    /// part (a full step whose perturbed gradient was applied, or a one-pass step applied),
    /// so an overflowing full step is retried rather than leaving the cycle without a
    /// direction; a schedule's base step is not LookSAM's.
    pub fn advance(&mut self, did_its_part: bool) {
        if did_its_part {
            self.cycle += 1;
        }
        self.steps += 1;
        if let Some(decision) = self.decision.take() {
            self.statistics = decision.statistics;
        }
    }

    /// The adaptive schedule's statistics, for the record (`None` without one).
    pub fn schedule_record(&self) -> Option<ScheduleRecord> {
        self.decides_from_gradient().then_some(self.statistics)
    }

    pub fn to_record<B: AutodiffBackend>(&self) -> VariantRecord {
        let tensors = self.state.to_values::<B::InnerBackend>().into_iter();
        VariantRecord {
            rho: self.rho,
            cycle: self.cycle,
            tensors: tensors
                .map(|(id, values)| ParamValuesRecord {
                    id: id.serialize(),
                    values,
                })
                .collect(),
        }
    }

    /// Loads the variant's state, SAM's step count `steps` the schedule reads and an adaptive
    /// schedule's statistics (from 0 where the record has none).
    pub fn load_record(
        &mut self,
        record: VariantRecord,
        steps: u64,
        statistics: Option<ScheduleRecord>,
    ) {
        self.steps = steps;
        self.statistics = statistics.unwrap_or_default();
        self.decision = None;
        self.cycle = record.cycle;
        self.rho = record.rho;
        let values = record.tensors.into_iter();
        self.state = ParamState::from_values(
            values.map(|tensor| (ParamId::deserialize(&tensor.id), tensor.values)),
        );
    }
}

/// The state of `id`, shaped and typed like `like`.
fn state_like<B: Backend, const D: usize>(
    state: &ParamState<f64>,
    id: &ParamId,
    like: &Tensor<B, D>,
) -> Option<Tensor<B, D>> {
    state.get(id, like.shape(), &like.device(), like.dtype())
}

/// A `[1]` tensor broadcast against `D` dimensions.
fn broadcast<B: Backend, const D: usize>(scalar: Tensor<B, 1>) -> Tensor<B, D> {
    scalar.reshape([1; D])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looksam_takes_one_pass_between_full_steps() {
        let mut rules = FamilyRules::new(SamVariant::LookSam { k: 3, alpha: 0.7 }, 1e-12, None);
        let mut passes = Vec::new();
        for did_its_part in [true, true, true, false, true, true] {
            passes.push(rules.needs_ascent());
            rules.advance(did_its_part);
        }
        // The fourth step (a full one) did not do its part: it is retried.
        assert_eq!(passes, [true, false, false, true, true, false]);
        let sam = FamilyRules::new(SamVariant::Sam, 1e-12, None);
        assert!(sam.needs_ascent());
    }
}
