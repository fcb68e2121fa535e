//! Reductions in the form each backend computes fastest, and ASAM's weighting: the pieces
//! every norm and inner product of the crate is made of.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::quirks::{reductions_fuse, squared_norm_by_matmul};
use crate::float::widen;

/// `a * g` with `a = |w| + eta` under ASAM, `a = 1` under SAM; `power` 1 gives `a * g`, 2 gives
/// `a^2 * g`.
pub(crate) fn weighted<B: Backend, const D: usize>(
    weight: Tensor<B, D>,
    grad: Tensor<B, D>,
    eta: Option<f64>,
    power: i32,
) -> Tensor<B, D> {
    match eta {
        Some(eta) => widen(weight).abs().add_scalar(eta).powi_scalar(power) * grad,
        None => grad,
    }
}

/// `||x||^2` (shape `[1]`), in the form the backend computes fastest
/// ([`squared_norm_by_matmul`], [`sum_all`]).
pub(crate) fn squared_norm<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, 1> {
    if !squared_norm_by_matmul::<B>(&x.device()) {
        return sum_all(reduction_view(x).square());
    }
    let n = x.shape().num_elements();
    let row = x.reshape([1, n]);
    let column = row.clone().reshape([n, 1]);
    row.matmul(column).reshape([1])
}

/// `x` as [`sum_all`] reduces it where reductions fuse ([`reductions_fuse`]): a view of the
/// same rank with every element in the last dimension, `[1, .., 1, n]`, which the fuser reads
/// in place (a reshape that lowers the rank it does not take into a kernel). `x` elsewhere.
/// Element-wise operations on views, then [`sum_all`], run as one kernel.
pub(crate) fn reduction_view<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    if !reductions_fuse::<B>(&x.device()) {
        return x;
    }
    let view = view_dims(&x);
    x.reshape(view)
}

/// The dimensions of `x`'s [`reduction_view`].
pub(crate) fn view_dims<B: Backend, const D: usize>(x: &Tensor<B, D>) -> [usize; D] {
    if !reductions_fuse::<B>(&x.device()) {
        return x.dims();
    }
    let mut view = [1; D];
    view[D - 1] = x.shape().num_elements();
    view
}

/// The sum of every element of `x`, shape `[1]`: where reductions fuse, a reduction over the
/// last dimension of its [`reduction_view`] (Burn 0.21's fuser folds the element-wise
/// operations before a reduction over a dimension into its kernel, but not before a full
/// `sum`, which costs a kernel for those operations and one or two for the sum).
pub(crate) fn sum_all<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, 1> {
    if !reductions_fuse::<B>(&x.device()) {
        return x.sum();
    }
    reduction_view(x).sum_dim(D - 1).reshape([1])
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests read the values they check"
)]
mod tests {
    use burn::backend::Flex;

    use super::*;

    #[test]
    fn asam_weights_the_gradient_by_the_weight() {
        let device = Default::default();
        let weight = Tensor::<Flex, 1>::from_floats([-2.0, 0.5], &device);
        let grad = Tensor::<Flex, 1>::from_floats([1.0, 1.0], &device);
        let once = weighted(weight.clone(), grad.clone(), Some(0.5), 1);
        let twice = weighted(weight.clone(), grad.clone(), Some(0.5), 2);
        assert_eq!(once.into_data().to_vec::<f32>().unwrap(), [2.5, 1.0]);
        assert_eq!(twice.into_data().to_vec::<f32>().unwrap(), [6.25, 1.0]);
        let sam = weighted(weight, grad, None, 2);
        assert_eq!(sam.into_data().to_vec::<f32>().unwrap(), [1.0, 1.0]);
    }
}
