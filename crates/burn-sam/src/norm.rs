//! The global gradient norm, read back in one device sync: the check that keeps non-finite
//! gradients away from the weights, and SAM's denominator.

use std::collections::HashSet;

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, FloatDType, Tensor};

use crate::diagnostics::read_back;
use crate::error::SamError;
use crate::float::widen;
use crate::quirks::{norm_all_at_once, reductions_fuse, squared_norm_by_matmul};

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
    let mut view = [1; D];
    view[D - 1] = x.shape().num_elements();
    x.reshape(view)
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

/// `sum_i ||x_i||^2` over tensors of any shape, in the widened float type ([`widen`]), as a
/// device scalar: a reduction per tensor summed, or, where [`norm_all_at_once`] says so,
/// a few reductions over all of them ([`squares_by_length`]). Every global norm of the crate
/// is one of these.
#[derive(Default)]
pub(crate) enum SquaresSum<B: Backend> {
    #[default]
    Empty,
    Summed(Tensor<B, 1>),
    Flat(Vec<Term<B>>),
}

/// A flattened tensor of a [`SquaresSum`], or ASAM's `(|w| + eta) * g` of one: computed when
/// the sum is, with the other tensors of its length, so that a fused backend runs those
/// products as one kernel rather than one per tensor.
pub(crate) struct Term<B: Backend> {
    x: Tensor<B, 1>,
    weight: Option<(Tensor<B, 1>, f64)>,
}

impl<B: Backend> Term<B> {
    fn value(self) -> Tensor<B, 1> {
        match self.weight {
            Some((weight, eta)) => weighted(weight, self.x, Some(eta), 1),
            None => self.x,
        }
    }
}

impl<B: Backend> SquaresSum<B> {
    pub fn add<const D: usize>(&mut self, x: Tensor<B, D>) {
        self.push(x, None);
    }

    /// Adds `(|weight| + eta) * x`.
    pub fn add_weighted<const D: usize>(
        &mut self,
        weight: Tensor<B, D>,
        x: Tensor<B, D>,
        eta: f64,
    ) {
        self.push(x, Some((weight, eta)));
    }

    fn push<const D: usize>(&mut self, x: Tensor<B, D>, weight: Option<(Tensor<B, D>, f64)>) {
        if let Self::Empty = self {
            if norm_all_at_once::<B>(&x.device()) {
                *self = Self::Flat(Vec::new());
            }
        }
        match self {
            Self::Flat(all) => all.push(Term {
                x: flat(x),
                weight: weight.map(|(weight, eta)| (flat(weight), eta)),
            }),
            Self::Empty | Self::Summed(_) => {
                let x = match weight {
                    Some((weight, eta)) => weighted(weight, x, Some(eta), 1),
                    None => x,
                };
                let squares = squared_norm(widen(x));
                *self = match std::mem::take(self) {
                    Self::Summed(sum) => {
                        let dtype = sum.dtype();
                        Self::Summed(sum + squares.cast(dtype))
                    }
                    _ => Self::Summed(squares),
                };
            }
        }
    }

    /// The sum, `None` when nothing was added.
    pub fn finish(self) -> Option<Tensor<B, 1>> {
        match self {
            Self::Empty => None,
            Self::Summed(sum) => Some(sum),
            Self::Flat(all) => Some(squares_by_length(all)),
        }
    }
}

/// `sum_i ||x_i||^2` over flattened tensors with one kernel per length rather than per tensor:
/// tensors of a length that repeats (a model's layers are alike) are squared and added
/// element-wise, which a fused backend runs as one kernel however many there are, and the
/// rest are concatenated (a copy each) and squared once; then one reduction for each.
fn squares_by_length<B: Backend>(all: Vec<Term<B>>) -> Tensor<B, 1> {
    let mut groups: Vec<Vec<Term<B>>> = Vec::new();
    for term in all {
        let alike = |group: &&mut Vec<Term<B>>| {
            group[0].x.dims() == term.x.dims() && group[0].x.dtype() == term.x.dtype()
        };
        match groups.iter_mut().find(alike) {
            Some(group) => group.push(term),
            None => groups.push(vec![term]),
        }
    }
    let (mut lone, mut squares) = (Vec::new(), Vec::new());
    for mut group in groups {
        match group.len() {
            1 => lone.push(group.remove(0).value()),
            _ => squares.extend(
                group
                    .into_iter()
                    .map(|term| widen(term.value()).square())
                    .reduce(|a, b| a + b),
            ),
        }
    }
    let lone = (!lone.is_empty()).then(|| squared_norm(cat_widened(lone)));
    let squares = (!squares.is_empty()).then(|| sum_all(cat_widened(squares)));
    match (lone, squares) {
        (Some(lone), Some(squares)) => {
            let dtype = lone.dtype();
            lone + squares.cast(dtype)
        }
        (lone, squares) => lone.or(squares).expect("at least one tensor"),
    }
}

/// The tensors concatenated in their own type when they share it, widened once ([`widen`]);
/// otherwise each cast to f32 (f64 when one is f64) first.
fn cat_widened<B: Backend>(mut all: Vec<Tensor<B, 1>>) -> Tensor<B, 1> {
    if all.len() == 1 {
        return widen(all.remove(0));
    }
    let dtype = all[0].dtype();
    if all.iter().all(|x| x.dtype() == dtype) {
        return widen(Tensor::cat(all, 0));
    }
    let wide = match all.iter().any(|x| x.dtype() == DType::F64) {
        true => FloatDType::F64,
        false => FloatDType::F32,
    };
    Tensor::cat(all.into_iter().map(|x| x.cast(wide)).collect(), 0)
}

fn flat<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, 1> {
    let n = x.shape().num_elements();
    x.reshape([n])
}

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
    Ok(read_norms::<B::InnerBackend>(&[squares], loss_scale)[0])
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
        sum: SquaresSum::default(),
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

/// `sqrt(squares) / loss_scale` for each of `squares` (0 for `None`), read back together: one
/// host wait for all of them.
pub(crate) fn read_norms<B: Backend>(
    squares: &[Option<Tensor<B, 1>>],
    loss_scale: f32,
) -> Vec<f64> {
    let mut present: Vec<_> = squares.iter().flatten().cloned().collect();
    let values = match present.len() {
        0 => Vec::new(),
        1 => read_back(present.remove(0)).iter::<f64>().collect(),
        _ => {
            let dtype = match present.iter().any(|sum| sum.dtype() == DType::F64) {
                true => FloatDType::F64,
                false => FloatDType::F32,
            };
            let all = present.into_iter().map(|sum| sum.cast(dtype)).collect();
            read_back(Tensor::cat(all, 0)).iter::<f64>().collect()
        }
    };
    let mut values = values.into_iter();
    let scale = f64::from(loss_scale);
    squares
        .iter()
        .map(|sum| match sum {
            Some(_) => values.next().unwrap_or(f64::NAN).sqrt() / scale,
            None => 0.0,
        })
        .collect()
}

struct SquaredNorm<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    eta: Option<f64>,
    picked: Option<&'a HashSet<ParamId>>,
    sum: SquaresSum<B::InnerBackend>,
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
            (true, None) => self.sum.add(grad),
            (true, Some(eta)) => self.sum.add_weighted(param.val().inner(), widen(grad), eta),
            // 0 for finite gradients, NaN for any inf or NaN: left out of the norm, still
            // checked by it.
            (false, _) => self.sum.add(widen(grad).sum().mul_scalar(0.0)),
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
