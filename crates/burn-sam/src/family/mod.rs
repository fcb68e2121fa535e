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
use crate::schedule::{SamSchedule, ScheduleRecord};
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
    /// An adaptive schedule's statistics, and those that include the step under way's
    /// gradient once it decided (kept when the step is counted).
    statistics: ScheduleRecord,
    decided: Option<ScheduleRecord>,
    plan: Plan,
}

/// What the next step does, decided once: when the step before it ended or a record was
/// loaded, from the variant's pass rule, LookSAM's cycle, the schedule and SAM's step count.
/// An adaptive schedule's decision turns [`Plan::Decide`] into `Ascent` or `Base` within the
/// step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// SAM's ascent from the gradient at `w`, then the descent from the gradient at `w + e`.
    Ascent,
    /// AE-SAM: the norm of the step's first gradient makes it `Ascent` or `Base`.
    Decide,
    /// Momentum-SAM: the look-ahead without a pass, then the descent from the gradient at `w~`.
    LookAhead,
    /// No ascent: LookSAM between its full steps, the descent with its kept direction.
    Reuse,
    /// No ascent: a schedule's base step, the base optimizer alone with the gradient at `w`.
    Base,
}

impl Plan {
    /// The passes a step of this plan takes.
    pub fn passes(self) -> Passes {
        match self {
            Self::Ascent | Self::Decide => Passes::Two,
            Self::LookAhead => Passes::LookAhead,
            Self::Reuse | Self::Base => Passes::One,
        }
    }

    /// Whether the step starts with an ascent.
    pub fn ascends(self) -> bool {
        !matches!(self, Self::Reuse | Self::Base)
    }
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
        let mut rules = Self {
            properties: variant.properties(),
            eps,
            cycle: 0,
            state: ParamState::default(),
            rho: 0.0,
            schedule,
            steps: 0,
            statistics: ScheduleRecord::default(),
            decided: None,
            plan: Plan::Ascent,
        };
        rules.replan();
        rules
    }

    /// What the step under way (or the next one) does.
    pub fn plan(&self) -> Plan {
        self.plan
    }

    /// Plans the next step afresh, forgetting a decision a refused step made.
    pub fn replan(&mut self) {
        self.decided = None;
        let cycle_full = match self.properties.passes {
            PassRule::TwoEvery { k } => self.cycle.is_multiple_of(k as u64),
            PassRule::Two | PassRule::LookAhead => true,
        };
        let scheduled = self.schedule.as_ref().map(|s| s.sam_step(self.steps));
        self.plan = match (self.properties.passes, scheduled) {
            (PassRule::LookAhead, _) => Plan::LookAhead,
            (_, Some(Some(false))) => Plan::Base,
            _ if !cycle_full => Plan::Reuse,
            (_, Some(None)) => Plan::Decide,
            _ => Plan::Ascent,
        };
    }

    /// The adaptive schedule's decision from the squared norm of the step's first gradient:
    /// the plan becomes `Ascent` or `Base`, and the statistics that include this gradient are
    /// kept once the step is counted.
    pub fn decide(&mut self, squared_norm: f64) -> Plan {
        let schedule = self.schedule.as_ref().expect("an adaptive schedule");
        let decision = schedule.decide(self.steps, squared_norm, self.statistics);
        self.decided = Some(decision.statistics);
        self.plan = match decision.sam {
            true => Plan::Ascent,
            false => Plan::Base,
        };
        self.plan
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
        if self.plan == Plan::Base {
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
        if let Some(statistics) = self.decided.take() {
            self.statistics = statistics;
        }
        self.replan();
    }

    /// The adaptive schedule's statistics, for the record (`None` without one).
    pub fn schedule_record(&self) -> Option<ScheduleRecord> {
        let adaptive = matches!(self.schedule, Some(SamSchedule::Adaptive { .. }));
        adaptive.then_some(self.statistics)
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
        self.cycle = record.cycle;
        self.rho = record.rho;
        let values = record.tensors.into_iter();
        self.state = ParamState::from_values(
            values.map(|tensor| (ParamId::deserialize(&tensor.id), tensor.values)),
        );
        self.replan();
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
            passes.push(rules.plan().ascends());
            rules.advance(did_its_part);
        }
        // The fourth step (a full one) did not do its part: it is retried.
        assert_eq!(passes, [true, false, false, true, true, false]);
        let sam = FamilyRules::new(SamVariant::Sam, 1e-12, None);
        assert_eq!(sam.plan(), Plan::Ascent);
    }
}
