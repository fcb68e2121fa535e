//! The gradient the base optimizer steps with: GSAM's, LookSAM's (kept or reused
//! direction) and Momentum-SAM's (which updates its momentum); the gradient itself otherwise.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

use super::{broadcast, state_like};
use crate::broadcast::Broadcast;
use crate::float::widen;
use crate::grad_map::{GradMap, ParamGrad};
use crate::norm::squared_norm;
use crate::param_map::ParamMap;
use crate::state::ParamState;

type Scalar<B> = Tensor<<B as AutodiffBackend>::InnerBackend, 1>;

/// `<g, g_p>` and `||g||^2` over the parameters with both gradients, as device scalars.
pub(super) fn gsam_sums<B: AutodiffBackend, M: AutodiffModule<B>>(
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

pub(super) enum DescentRule<'a, B: Backend> {
    /// `g_p - alpha * (g - coefficient * g_p)`.
    Gsam {
        alpha: f64,
        coefficient: Broadcast<B>,
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

pub(super) struct DescentMap<'a, B: Backend> {
    pub(super) ascent_grads: &'a ParamMap,
    pub(super) rule: DescentRule<'a, B>,
}

impl<B: Backend> GradMap<B> for DescentMap<'_, B> {
    fn map<const D: usize>(&mut self, param: ParamGrad<B, D>) -> Option<Tensor<B, D>> {
        let ParamGrad {
            id, tensor: grad, ..
        } = param;
        let grad = widen(grad);
        let ascent = self.ascent_grads.get::<Tensor<B, D>>(&id).cloned();
        let grad = match (&mut self.rule, ascent) {
            (DescentRule::Gsam { alpha, coefficient }, Some(ascent)) => {
                let parallel = grad.clone() * coefficient.get();
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
                let direction = looksam_direction(grad.clone(), ascent, *eps);
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

fn norm<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, 1> {
    squared_norm(x).sqrt()
}

/// pytorch_optimizer 4.1.0's `g_v = g_s - ||g_s|| <g^, g_s^> g^` with
/// `x^ = x / max(||x||, eps)`, from the perturbed gradient `grad` (`g_s`) and the ascent's
/// `ascent` (`g`).
fn looksam_direction<B: Backend, const D: usize>(
    grad: Tensor<B, D>,
    ascent: Tensor<B, D>,
    eps: f64,
) -> Tensor<B, D> {
    let ascent_unit = ascent.clone() / broadcast(norm(ascent).clamp_min(eps));
    let grad_norm = norm(grad.clone());
    let grad_unit = grad.clone() / broadcast(grad_norm.clone().clamp_min(eps));
    let cosine = (ascent_unit.clone() * grad_unit).sum();
    grad - ascent_unit * broadcast(grad_norm * cosine)
}
