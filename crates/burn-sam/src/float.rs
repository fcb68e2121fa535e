//! Float-type rules shared by every computation on gradients and weights.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor};

/// The float type burn-sam computes norms, perturbations, unscaled gradients, accumulated
/// gradients and scaled losses in: f64 stays f64, everything narrower becomes f32 (eps =
/// 1e-12 is 0 in f16, squared f16 gradients overflow at 256, and 2^16 is infinite in f16).
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{DType, FloatDType, Tensor};
///
/// let half = Tensor::<Flex, 1>::ones([2], &Default::default()).cast(FloatDType::F16);
/// assert_eq!(burn_sam::strategy::widen(half).dtype(), DType::F32);
/// ```
pub fn widen<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Tensor<B, D> {
    match tensor.dtype() {
        DType::F64 | DType::F32 => tensor,
        _ => tensor.cast(FloatDType::F32),
    }
}

/// `tensor`, tracked by the autodiff graph when the parameter it replaces was
/// (`require_grad`): frozen parameters stay frozen through every map over a module.
pub(crate) fn tracked<B: Backend, const D: usize>(
    tensor: Tensor<B, D>,
    require_grad: bool,
) -> Tensor<B, D> {
    if require_grad {
        tensor.require_grad()
    } else {
        tensor
    }
}
