//! The gradient the base optimizer steps with: GSAM's, LookSAM's (kept or reused
//! direction) and Momentum-SAM's (which updates its momentum); the gradient itself otherwise.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

use super::looksam::{run_staged, LookSamOut, LookSamParam, LookSamRule, Staged};
use super::{state_like, FamilyRules};
use crate::device::{GlobalSum, Scalar};
use crate::float::widen;
use crate::grad_map::{GradMap, ParamGrad};
use crate::param_map::ParamMap;
use crate::state::ParamState;
use crate::variant::DescentFrom;

type Sum<B> = Tensor<<B as AutodiffBackend>::InnerBackend, 1>;

/// `<g, g_p>` and `||g||^2` over the parameters with both gradients, as device scalars, each
/// a [`GlobalSum`]: on a fused backend a few kernels for all parameters.
fn gsam_sums<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
    ascent_grads: &ParamMap,
) -> Option<(Sum<B>, Sum<B>)> {
    struct Sums<'a, B: AutodiffBackend> {
        grads: &'a GradientsParams,
        ascent_grads: &'a ParamMap,
        dots: GlobalSum<B::InnerBackend>,
        squares: GlobalSum<B::InnerBackend>,
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
            self.dots.add_product(ascent.clone(), grad);
            self.squares.add_square(ascent.clone());
        }
    }
    let mut sums = Sums::<B> {
        grads,
        ascent_grads,
        dots: GlobalSum::default(),
        squares: GlobalSum::default(),
    };
    module.visit(&mut sums);
    Some((sums.dots.finish()?, sums.squares.finish()?))
}

pub(super) enum DescentRule<'a, B: Backend> {
    /// `g_p - alpha * (g - coefficient * g_p)`.
    Gsam { alpha: f64, coefficient: Scalar<B> },
    /// LookSAM, staged ([`LookSamRule`]); `kept` holds the directions a one-pass step reuses.
    LookSam {
        rule: LookSamRule,
        kept: &'a ParamState<f64>,
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

impl<'a, B: Backend> DescentRule<'a, B> {
    /// The rule of `rules`' variant for the finite descent gradient `grads` (unscaled norm
    /// `grad_norm`) and the ascent's gradient (none on a one-pass step); `None` where the
    /// base optimizer steps with `grads` as they are.
    pub(super) fn of<AB, M>(
        rules: &'a mut FamilyRules,
        module: &M,
        grads: &GradientsParams,
        ascent_grads: &ParamMap,
        loss_scale: f32,
        grad_norm: f64,
    ) -> Option<Self>
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
    {
        let inverse_scale = 1.0 / f64::from(loss_scale);
        let rule = match rules.properties.descent {
            DescentFrom::Perturbed => return None,
            DescentFrom::LessOrthogonal { alpha } => {
                let sums = gsam_sums::<AB, M>(module, grads, ascent_grads)?;
                let coefficient = rules.gsam_coefficient(sums, loss_scale, grad_norm);
                DescentRule::Gsam {
                    alpha,
                    coefficient: Scalar::device(coefficient),
                }
            }
            DescentFrom::KeptDirection { alpha } if ascent_grads.is_empty() => {
                DescentRule::LookSam {
                    rule: LookSamRule::Reuse { alpha },
                    kept: &rules.state,
                }
            }
            DescentFrom::KeptDirection { .. } => DescentRule::LookSam {
                rule: LookSamRule::Keep {
                    eps: rules.eps,
                    inverse_scale,
                },
                kept: &rules.state,
            },
            // The old `v` is taken out, so that `mu * v + g` can run in its buffer.
            DescentFrom::LookAhead { mu } => DescentRule::Momentum {
                mu,
                inverse_scale,
                old: core::mem::take(&mut rules.state),
                new: ParamState::default(),
            },
        };
        Some(rule)
    }
}

impl FamilyRules {
    /// GSAM's `cos * ||g|| / (||g_p|| + eps)` with the authors' eps placement, from the
    /// scaled sums `<g, g_p>` and `||g||^2`; it stays a device scalar: no read.
    fn gsam_coefficient<B: Backend>(
        &self,
        (dot, ascent_squares): (Tensor<B, 1>, Tensor<B, 1>),
        loss_scale: f32,
        grad_norm: f64,
    ) -> Tensor<B, 1> {
        let scale = f64::from(loss_scale);
        let ascent_norm = ascent_squares.sqrt().div_scalar(scale);
        let cosine = dot.div_scalar(scale * scale).div(
            ascent_norm
                .clone()
                .mul_scalar(grad_norm)
                .add_scalar(self.eps),
        );
        (cosine * ascent_norm).div_scalar(grad_norm + self.eps)
    }
}

pub(super) struct DescentMap<'a, B: Backend> {
    ascent_grads: &'a ParamMap,
    rule: DescentRule<'a, B>,
    /// LookSAM's parameters, to compute in stages once every gradient is seen.
    staged: Vec<Box<dyn Staged<B>>>,
}

impl<'a, B: Backend> DescentMap<'a, B> {
    pub fn new(ascent_grads: &'a ParamMap, rule: DescentRule<'a, B>) -> Self {
        Self {
            ascent_grads,
            rule,
            staged: Vec::new(),
        }
    }

    /// Once every gradient is mapped into `out`: LookSAM's staged rules, and the variant's
    /// state after this step where it changes.
    pub fn finish(self, out: &mut GradientsParams) -> Option<ParamState<f64>> {
        match self.rule {
            DescentRule::Momentum { mut old, new, .. } => {
                // Parameters without a gradient this step keep their `v`.
                old.extend(new);
                Some(old)
            }
            DescentRule::LookSam { rule, .. } => {
                let mut state = ParamState::default();
                let mut looksam = LookSamOut {
                    state: &mut state,
                    grads: out,
                };
                run_staged(self.staged, &mut looksam);
                // A full step replaces every direction: a parameter without a gradient now
                // has none.
                matches!(rule, LookSamRule::Keep { .. }).then_some(state)
            }
            DescentRule::Gsam { .. } => None,
        }
    }
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
                let parallel = coefficient.times(grad.clone());
                grad - (ascent - parallel).mul_scalar(*alpha)
            }
            (DescentRule::LookSam { rule, kept }, ascent) => {
                let other = match rule {
                    LookSamRule::Keep { .. } => ascent,
                    LookSamRule::Reuse { .. } => state_like(kept, &id, &grad),
                };
                if let Some(other) = other {
                    let param = LookSamParam::new(id, *rule, grad.clone(), other);
                    self.staged.push(Box::new(param));
                }
                grad
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
