//! What each member of the SAM family changes around SAM's two passes: the ascent direction
//! (Friendly-SAM), the gradient the base optimizer steps with (GSAM, LookSAM), and which steps
//! take one pass (LookSAM); with the per-parameter state they keep between steps.
//!
//! Gradients arrive multiplied by the loss scale `S`. Every rule below is linear in the
//! gradients it combines, so it runs on scaled gradients and yields scaled ones; only state
//! kept across steps (whose scale may differ) is stored unscaled.

use std::collections::HashSet;

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::record::Record;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

use crate::error::SamError;
use crate::float::widen;
use crate::grad_map::{map_grads, GradMap, ParamGrad};
use crate::norm::squared_norm;
use crate::param_map::ParamMap;
use crate::protocol::Passes;
use crate::state::ParamState;
use crate::variant::SamVariant;

/// The member of the SAM family and its state: LookSAM's position in its cycle, and by
/// parameter (flattened, unscaled, in the gradients' widened float type) Friendly-SAM's
/// momentum `m` or LookSAM's direction `g_v`; as `Vec<f64>` when loaded from a record, until a step puts it on the
/// device.
#[derive(Clone)]
pub(crate) struct FamilyRules {
    variant: SamVariant,
    eps: f64,
    cycle: u64,
    state: ParamState<f64>,
    rho: f64,
}

/// The state of a SAM variant, saved in [`SamRecord`](crate::SamRecord).
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
    pub fn new(variant: SamVariant, eps: f64) -> Self {
        Self {
            variant,
            eps,
            cycle: 0,
            state: ParamState::default(),
            rho: 0.0,
        }
    }

    /// False on LookSAM's steps between full ones: they take one pass.
    pub fn needs_ascent(&self) -> bool {
        match self.variant {
            SamVariant::LookSam { k, .. } => self.cycle.is_multiple_of(k as u64),
            SamVariant::MomentumSam { .. } => false,
            _ => true,
        }
    }

    /// The passes the next step takes.
    pub fn passes(&self) -> Passes {
        match self.variant {
            SamVariant::MomentumSam { .. } => Passes::LookAhead,
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

    pub fn set_look_ahead_rho(&mut self, rho: f64) {
        self.rho = rho;
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
        let keep = matches!(
            self.variant,
            SamVariant::Gsam { .. } | SamVariant::LookSam { .. }
        );
        let momentum = match self.variant {
            SamVariant::FriendlySam { sigma, lambda } => Some((sigma, lambda)),
            _ => None,
        };
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

    /// Keeps the state the ascent computed, once its step is applied: a skipped step leaves
    /// the variant's state as it was, like the base optimizer's.
    pub fn commit_ascent(&mut self, ascent_state: ParamState<f64>) {
        self.state.extend(ascent_state);
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
        let rule = match self.variant {
            SamVariant::Gsam { alpha } => {
                let Some((dot, ascent_squares)) = gsam_sums::<B, M>(module, &grads, ascent_grads)
                else {
                    return grads;
                };
                // GSAM's `cos * ||g|| / (||g_p|| + eps)` with the authors' eps placement, from
                // unscaled sums; it stays a device scalar: no read.
                let scale = f64::from(loss_scale);
                let ascent_norm = ascent_squares.sqrt().div_scalar(scale);
                let cosine = dot.div_scalar(scale * scale).div(
                    ascent_norm
                        .clone()
                        .mul_scalar(grad_norm)
                        .add_scalar(self.eps),
                );
                let coefficient = (cosine * ascent_norm).div_scalar(grad_norm + self.eps);
                DescentRule::Gsam { alpha, coefficient }
            }
            SamVariant::LookSam { alpha, .. } if ascent_grads.is_empty() => {
                DescentRule::LookSamReuse {
                    alpha,
                    state: &self.state,
                }
            }
            SamVariant::LookSam { .. } => DescentRule::LookSamKeep {
                eps: self.eps,
                inverse_scale: 1.0 / f64::from(loss_scale),
                state: ParamState::default(),
            },
            // The old `v` is taken out, so that `mu * v + g` can run in its buffer.
            SamVariant::MomentumSam { mu } => DescentRule::Momentum {
                mu,
                inverse_scale: 1.0 / f64::from(loss_scale),
                old: core::mem::take(&mut self.state),
                new: ParamState::default(),
            },
            _ => return grads,
        };
        let mut descent = DescentMap { ascent_grads, rule };
        let (out, _) = map_grads(module, grads, &mut descent);
        if let DescentRule::Momentum { old, new, .. } = descent.rule {
            // Parameters without a gradient this step keep their `v`.
            self.state = old;
            self.state.extend(new);
            return out;
        }
        if let DescentRule::LookSamKeep { state, .. } = descent.rule {
            // A full step replaces every direction: a parameter without a gradient now has none.
            self.state = state;
        }
        out
    }

    /// Counts a finished step: LookSAM's cycle moves on only with steps that did their part
    /// (a full step whose perturbed gradient was applied, or a one-pass step applied), so an
    /// overflowing full step is retried rather than leaving the cycle without a direction.
    pub fn advance(&mut self, did_its_part: bool) {
        if did_its_part {
            self.cycle += 1;
        }
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

    pub fn load_record(&mut self, record: VariantRecord) {
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

struct AscentRule<'a> {
    rules: &'a FamilyRules,
    picked: Option<&'a HashSet<ParamId>>,
    keep: bool,
    momentum: Option<(f64, f64)>,
    inverse_scale: f64,
    loss_scale: f64,
    ascent_grads: ParamMap,
    state: ParamState<f64>,
}

impl<B: Backend> GradMap<B> for AscentRule<'_> {
    fn map<const D: usize>(&mut self, param: ParamGrad<B, D>) -> Option<Tensor<B, D>> {
        let ParamGrad {
            id, tensor: grad, ..
        } = param;
        let grad = widen(grad);
        if self.keep {
            self.ascent_grads.insert(id, grad.clone());
        }
        let picked = self.picked.is_none_or(|picked| picked.contains(&id));
        let Some((sigma, lambda)) = self.momentum.filter(|_| picked) else {
            return Some(grad);
        };
        let unscaled = if self.inverse_scale == 1.0 {
            grad.clone()
        } else {
            grad.clone().mul_scalar(self.inverse_scale)
        };
        let Some(momentum) = state_like(&self.rules.state, &id, &grad) else {
            self.state.insert(id, unscaled);
            return Some(grad);
        };
        let direction = grad - momentum.clone().mul_scalar(sigma * self.loss_scale);
        self.state
            .insert(id, lerp(momentum, unscaled, 1.0 - lambda));
        Some(direction)
    }
}

/// `start + weight * (end - start)`, rounded as `torch.lerp` rounds it (from the nearer end),
/// so that Friendly-SAM's momentum follows pytorch_optimizer's bit for bit.
fn lerp<B: Backend, const D: usize>(
    start: Tensor<B, D>,
    end: Tensor<B, D>,
    weight: f64,
) -> Tensor<B, D> {
    let difference = end.clone() - start.clone();
    if weight.abs() < 0.5 {
        start + difference.mul_scalar(weight)
    } else {
        end - difference.mul_scalar(1.0 - weight)
    }
}

type Scalar<B> = Tensor<<B as AutodiffBackend>::InnerBackend, 1>;

/// `<g, g_p>` and `||g||^2` over the parameters with both gradients, as device scalars.
fn gsam_sums<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
    ascent_grads: &ParamMap,
) -> Option<(Scalar<B>, Scalar<B>)> {
    struct Sums<'a, B: AutodiffBackend> {
        grads: &'a GradientsParams,
        ascent_grads: &'a ParamMap,
        sums: Option<(Scalar<B>, Scalar<B>)>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Sums<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let (Some(grad), Some(ascent)) = (
                self.grads.get::<B::InnerBackend, D>(param.id),
                self.ascent_grads
                    .get::<Tensor<B::InnerBackend, D>>(&param.id),
            ) else {
                return;
            };
            let dot = (ascent.clone() * widen(grad)).sum();
            let squares = squared_norm(ascent.clone());
            self.sums = Some(match self.sums.take() {
                Some((dots, sum)) => (dots + dot, sum + squares),
                None => (dot, squares),
            });
        }
    }
    let mut sums = Sums::<B> {
        grads,
        ascent_grads,
        sums: None,
    };
    module.visit(&mut sums);
    sums.sums
}

enum DescentRule<'a, B: Backend> {
    /// `g_p - alpha * (g - coefficient * g_p)`.
    Gsam {
        alpha: f64,
        coefficient: Tensor<B, 1>,
    },
    /// A full LookSAM step: stores `g_v` (unscaled), steps with `g_s` unchanged.
    LookSamKeep {
        eps: f64,
        inverse_scale: f64,
        state: ParamState<f64>,
    },
    /// A one-pass LookSAM step: `g + alpha * ||g|| / (||g_v|| + 1e-8) * g_v`.
    LookSamReuse {
        alpha: f64,
        state: &'a ParamState<f64>,
    },
    /// Momentum-SAM: steps with `g` unchanged and stores `v <- mu * v + g` (unscaled; `g`
    /// on the first step).
    Momentum {
        mu: f64,
        inverse_scale: f64,
        old: ParamState<f64>,
        new: ParamState<f64>,
    },
}

struct DescentMap<'a, B: Backend> {
    ascent_grads: &'a ParamMap,
    rule: DescentRule<'a, B>,
}

impl<B: Backend> GradMap<B> for DescentMap<'_, B> {
    fn map<const D: usize>(&mut self, param: ParamGrad<B, D>) -> Option<Tensor<B, D>> {
        let ParamGrad {
            id, tensor: grad, ..
        } = param;
        let grad = widen(grad);
        let ascent = self.ascent_grads.get::<Tensor<B, D>>(&id).cloned();
        let norm = |x: Tensor<B, D>| squared_norm(x).sqrt();
        let grad = match (&mut self.rule, ascent) {
            (DescentRule::Gsam { alpha, coefficient }, Some(ascent)) => {
                let parallel = grad.clone() * broadcast(coefficient.clone());
                grad - (ascent - parallel).mul_scalar(*alpha)
            }
            (
                DescentRule::LookSamKeep {
                    eps,
                    inverse_scale,
                    state,
                },
                Some(ascent),
            ) => {
                // pytorch_optimizer 4.1.0: g_v = g_s - ||g_s|| <g^, g_s^> g^ with x^ = x / max(||x||, eps).
                let ascent_unit = ascent.clone() / broadcast(norm(ascent).clamp_min(*eps));
                let grad_norm = norm(grad.clone());
                let grad_unit = grad.clone() / broadcast(grad_norm.clone().clamp_min(*eps));
                let cosine = (ascent_unit.clone() * grad_unit).sum();
                let direction = grad.clone() - ascent_unit * broadcast(grad_norm * cosine);
                state.insert(id, direction.mul_scalar(*inverse_scale));
                grad
            }
            (DescentRule::LookSamReuse { alpha, state }, _) => {
                match state_like(state, &id, &grad) {
                    Some(direction) => {
                        let ratio = norm(grad.clone()) / norm(direction.clone()).add_scalar(1e-8);
                        grad + direction * broadcast(ratio.mul_scalar(*alpha))
                    }
                    None => grad,
                }
            }
            (
                DescentRule::Momentum {
                    mu,
                    inverse_scale,
                    old,
                    new,
                },
                _,
            ) => {
                let unscaled = match *inverse_scale == 1.0 {
                    true => grad.clone(),
                    false => grad.clone().mul_scalar(*inverse_scale),
                };
                let momentum = match old.take(&id, grad.shape(), &grad.device(), grad.dtype()) {
                    Some(momentum) => momentum.mul_scalar(*mu) + unscaled,
                    None => unscaled,
                };
                new.insert(id, momentum);
                grad
            }
            _ => grad,
        };
        Some(grad)
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;

    fn values(tensor: Tensor<Flex, 1>) -> Vec<f32> {
        tensor.into_data().to_vec().unwrap()
    }

    #[test]
    fn lerp_rounds_from_the_nearer_end() {
        let device = Default::default();
        let start = Tensor::<Flex, 1>::from_floats([0.1, -3.3, 7.7], &device);
        let end = Tensor::<Flex, 1>::from_floats([0.7, 1e-3, -2.9], &device);
        // `start + 1 * (end - start)` is not `end` in f32 for these values; torch.lerp's is.
        assert_eq!(
            values(lerp(start.clone(), end.clone(), 1.0)),
            values(end.clone())
        );
        assert_eq!(
            values(lerp(start.clone(), end.clone(), 0.0)),
            values(start.clone())
        );
        let at = |weight: f32| -> Vec<f32> {
            let (a, b) = ([0.1f32, -3.3, 7.7], [0.7f32, 1e-3, -2.9]);
            (0..3)
                .map(|i| match weight < 0.5 {
                    true => a[i] + weight * (b[i] - a[i]),
                    false => b[i] - (1.0 - weight) * (b[i] - a[i]),
                })
                .collect()
        };
        assert_eq!(values(lerp(start.clone(), end.clone(), 0.25)), at(0.25));
        assert_eq!(values(lerp(start, end, 0.75)), at(0.75));
    }

    #[test]
    fn looksam_takes_one_pass_between_full_steps() {
        let mut rules = FamilyRules::new(SamVariant::LookSam { k: 3, alpha: 0.7 }, 1e-12);
        let mut passes = Vec::new();
        for did_its_part in [true, true, true, false, true, true] {
            passes.push(rules.needs_ascent());
            rules.advance(did_its_part);
        }
        // The fourth step (a full one) did not do its part: it is retried.
        assert_eq!(passes, [true, false, false, true, true, false]);
        let sam = FamilyRules::new(SamVariant::Sam, 1e-12);
        assert!(sam.needs_ascent());
    }
}
