//! The ascent's direction: the gradient, or Friendly-SAM's `g - sigma * S * m`; GSAM and
//! LookSAM keep the gradient for the descent.

use std::collections::HashSet;

use burn::module::ParamId;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{state_like, FamilyRules};
use crate::float::widen;
use crate::grad_map::{GradMap, ParamGrad};
use crate::param_map::ParamMap;
use crate::state::ParamState;
use crate::variant::{DescentFrom, PerturbFrom, VariantProperties};

pub(super) struct AscentRule<'a> {
    pub(super) rules: &'a FamilyRules,
    pub(super) picked: Option<&'a HashSet<ParamId>>,
    pub(super) keep: bool,
    pub(super) momentum: Option<(f64, f64)>,
    pub(super) inverse_scale: f64,
    pub(super) loss_scale: f64,
    pub(super) ascent_grads: ParamMap,
    pub(super) state: ParamState<f64>,
}

impl AscentRule<'_> {
    /// What a variant's ascent needs of its gradient: whether to keep it for the descent
    /// (GSAM and LookSAM combine the two), and Friendly-SAM's `(sigma, lambda)`.
    pub(super) fn needs(properties: &VariantProperties) -> (bool, Option<(f64, f64)>) {
        let keep = matches!(
            properties.descent,
            DescentFrom::LessOrthogonal { .. } | DescentFrom::KeptDirection { .. }
        );
        let momentum = match properties.perturbation {
            PerturbFrom::GradientLessMomentum { sigma, lambda } => Some((sigma, lambda)),
            PerturbFrom::Gradient | PerturbFrom::Momentum => None,
        };
        (keep, momentum)
    }
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

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests read the values they check"
)]
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
}
