//! LookSAM's per-parameter rules, computed in stages over all parameters at once: each
//! parameter needs its own norms, so on a fused backend the small `[1]` operations that
//! follow them, queued parameter by parameter, each became a kernel (the counts before and
//! after are in `docs/performance.md`, "Launches and host waits per step"). Queued stage by
//! stage, every parameter's reductions come together, then all their `[1]`
//! operations (one shape: fused together), then the updates grouped by shape. The operations
//! are the same, in the same order for each parameter: the values do not change.

use burn::module::ParamId;
use burn::optim::GradientsParams;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::broadcast;
use crate::device::{by_shape, reduction_view, squared_norm, sum_all};
use crate::state::ParamState;

/// What a LookSAM step does with one parameter's gradient.
#[derive(Clone, Copy)]
pub(super) enum LookSamRule {
    /// A full step: `g_v = g_s - ||g_s|| <g^, g_s^> g^` (pytorch_optimizer 4.1.0, with
    /// `x^ = x / max(||x||, eps)`) from the perturbed gradient `g_s` and the ascent's `g`,
    /// kept unscaled; the step uses `g_s` unchanged.
    Keep { eps: f64, inverse_scale: f64 },
    /// A one-pass step: `g + alpha * ||g|| / (||g_v|| + 1e-8) * g_v`.
    Reuse { alpha: f64 },
}

/// Where the staged results go: a full step's directions, a one-pass step's gradients.
pub(super) struct LookSamOut<'a> {
    pub state: &'a mut ParamState<f64>,
    pub grads: &'a mut GradientsParams,
}

/// One parameter's share, stage by stage.
pub(super) trait Staged<B: Backend> {
    /// Runs stage `stage` (0 to [`STAGES`] - 1).
    fn run(&mut self, stage: usize);
    fn dims(&self) -> Vec<usize>;
    /// The update, once every stage has run.
    fn finish(self: Box<Self>, out: &mut LookSamOut<'_>);
}

pub(super) const STAGES: usize = 4;

/// `grad` (`g_s` or `g`) and `other` (the ascent's `g`, or the kept `g_v`) of one parameter,
/// as views its reductions fuse with ([`reduction_view`]).
pub(super) struct LookSamParam<B: Backend, const D: usize> {
    id: ParamId,
    rule: LookSamRule,
    dims: [usize; D],
    grad: Tensor<B, D>,
    other: Tensor<B, D>,
    /// `||other||^2` and `||grad||^2`, then what each rule derives from them.
    scalars: Vec<Tensor<B, 1>>,
}

impl<B: Backend, const D: usize> LookSamParam<B, D> {
    pub fn new(id: ParamId, rule: LookSamRule, grad: Tensor<B, D>, other: Tensor<B, D>) -> Self {
        Self {
            id,
            rule,
            dims: grad.dims(),
            grad: reduction_view(grad),
            other: reduction_view(other),
            scalars: Vec::new(),
        }
    }

    fn other_unit(&self) -> Tensor<B, D> {
        self.other.clone() / broadcast(self.scalars[0].clone())
    }
}

impl<B: Backend, const D: usize> Staged<B> for LookSamParam<B, D> {
    fn run(&mut self, stage: usize) {
        let s = &mut self.scalars;
        match (self.rule, stage) {
            (_, 0) => {
                s.push(squared_norm(self.other.clone()));
                s.push(squared_norm(self.grad.clone()));
            }
            // [max(||g||, eps), ||g_s||, max(||g_s||, eps)]
            (LookSamRule::Keep { eps, .. }, 1) => {
                let grad_norm = s[1].clone().sqrt();
                s[0] = s[0].clone().sqrt().clamp_min(eps);
                s[1] = grad_norm.clone();
                s.push(grad_norm.clamp_min(eps));
            }
            (LookSamRule::Keep { .. }, 2) => {
                let grad_unit = self.grad.clone() / broadcast(self.scalars[2].clone());
                let cosine = sum_all(self.other_unit() * grad_unit);
                self.scalars.push(cosine);
            }
            // The coefficient of `g^`: `||g_s|| <g^, g_s^>`.
            (LookSamRule::Keep { .. }, 3) => {
                s[3] = s[1].clone() * s[3].clone();
            }
            // `alpha * ||g|| / (||g_v|| + 1e-8)`.
            (LookSamRule::Reuse { alpha }, 1) => {
                let ratio = s[1].clone().sqrt() / s[0].clone().sqrt().add_scalar(1e-8);
                s[0] = ratio.mul_scalar(alpha);
            }
            _ => {}
        }
    }

    fn dims(&self) -> Vec<usize> {
        self.dims.to_vec()
    }

    fn finish(self: Box<Self>, out: &mut LookSamOut<'_>) {
        match self.rule {
            LookSamRule::Keep { inverse_scale, .. } => {
                let direction =
                    self.grad.clone() - self.other_unit() * broadcast(self.scalars[3].clone());
                let direction = direction.mul_scalar(inverse_scale).reshape(self.dims);
                out.state.insert(self.id, direction);
            }
            LookSamRule::Reuse { .. } => {
                let grad = self.grad + self.other * broadcast(self.scalars[0].clone());
                out.grads.register(self.id, grad.reshape(self.dims));
            }
        }
    }
}

/// Runs every parameter's stages, each for all of them before the next, and their updates
/// grouped by shape ([`by_shape`]).
pub(super) fn run_staged<B: Backend>(params: Vec<Box<dyn Staged<B>>>, out: &mut LookSamOut<'_>) {
    let mut params = params;
    for stage in 0..STAGES {
        for param in &mut params {
            param.run(stage);
        }
    }
    let params = params.into_iter().map(|param| (param.dims(), param));
    for param in by_shape(params.collect()) {
        param.finish(out);
    }
}
