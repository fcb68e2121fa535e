//! The global gradient norm, read back in one device sync: the check that keeps non-finite
//! gradients away from the weights, and SAM's denominator.

use std::collections::HashSet;

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;

use crate::device::{read_norms, GlobalSum, Scalar};
use crate::error::SamError;
use crate::float::widen;

/// The global L2 norm of `grads`, `sqrt(sum_p ||g_p||^2)`, computed in f32 (f64 for f64
/// gradients) and read back in one device sync: infinite or NaN when any gradient is.
/// An error when some gradients belong to no parameter of `module`.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let loss = model.forward(Tensor::<B, 2>::ones([2, 3], &device)).sum();
/// let grads = GradientsParams::from_grads(loss.backward(), &model);
/// assert!(burn_sam::grad_norm(&model, &grads).unwrap() > 0.0);
/// ```
pub fn grad_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
) -> Result<f64, SamError> {
    unscaled_norm(module, grads, None, 1.0, None)
}

/// `sqrt(sum_p ||a_p * g_p||^2) / loss_scale` over the parameters of `module` that have a
/// gradient (and are in `picked`, when given), read back in one device sync. Every step
/// decides with it: a finite norm lets the gradients be used, any other skips them; a
/// non-finite gradient of a parameter left out of the norm makes it NaN too.
pub(crate) fn unscaled_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
    eta: Option<f64>,
    loss_scale: f32,
    picked: Option<&HashSet<ParamId>>,
) -> Result<f64, SamError> {
    let squares = squared_sum(module, grads, eta, picked)?;
    Ok(read_norms(
        &[squares.map(Scalar::<B::InnerBackend>::device)],
        loss_scale,
    )[0])
}

/// [`unscaled_norm`]'s `sum_p ||a_p * g_p||^2`, still scaled and on the device (`None`
/// without gradients): a step reads it later, with its other norms.
pub(crate) fn squared_sum<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
    eta: Option<f64>,
    picked: Option<&HashSet<ParamId>>,
) -> Result<Option<Tensor<B::InnerBackend, 1>>, SamError> {
    let mut visitor = SquaredNorm::<B> {
        grads,
        eta,
        picked,
        sum: GlobalSum::default(),
        matched: 0,
    };
    module.visit(&mut visitor);
    if visitor.matched != grads.len() {
        return Err(SamError::ForeignGradients {
            gradients: grads.len(),
            matched: visitor.matched,
        });
    }
    Ok(visitor.sum.finish())
}

struct SquaredNorm<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    eta: Option<f64>,
    picked: Option<&'a HashSet<ParamId>>,
    sum: GlobalSum<B::InnerBackend>,
    matched: usize,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for SquaredNorm<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(grad) = self.grads.get::<B::InnerBackend, D>(param.id) else {
            return;
        };
        self.matched += 1;
        let picked = self.picked.is_none_or(|picked| picked.contains(&param.id));
        match (picked, self.eta) {
            // Widened by the sum: once for all tensors where it concatenates them.
            (true, None) => self.sum.add_square(grad),
            (true, Some(eta)) => {
                let weight = param.val().inner();
                self.sum.add_weighted_square(weight, widen(grad), eta)
            }
            // 0 for finite gradients, NaN for any inf or NaN: left out of the norm, still
            // checked by it.
            (false, _) => self.sum.add_square(widen(grad).sum().mul_scalar(0.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};

    use super::*;

    type B = Autodiff<Flex>;

    #[test]
    fn the_norm_is_unscaled_and_checks_every_gradient() {
        let device = Default::default();
        let model: Linear<B> = LinearConfig::new(2, 1).init(&device);
        let x = Tensor::<B, 2>::from_floats([[3.0, 4.0]], &device);
        // d/dw = x = (3, 4), d/db = 1, all times 8.
        let loss = model.forward(x).sum().mul_scalar(8.0);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let norm = unscaled_norm(&model, &grads, None, 8.0, None).unwrap();
        assert!((norm - 26f64.sqrt()).abs() < 1e-6, "{norm}");
        let weight = HashSet::from([model.weight.id]);
        let norm = unscaled_norm(&model, &grads, None, 8.0, Some(&weight)).unwrap();
        assert!((norm - 5.0).abs() < 1e-6, "{norm}");

        // A parameter left out of the norm still makes it NaN when its gradient is not finite.
        let mut poisoned = GradientsParams::new();
        let bias = model.bias.as_ref().unwrap().id;
        let finite = grads.get::<Flex, 2>(model.weight.id).unwrap();
        poisoned.register(model.weight.id, finite);
        let infinite = grads
            .get::<Flex, 1>(bias)
            .unwrap()
            .mul_scalar(f32::INFINITY);
        poisoned.register(bias, infinite);
        let norm = unscaled_norm(&model, &poisoned, None, 8.0, Some(&weight)).unwrap();
        assert!(norm.is_nan(), "{norm}");
    }
}
