//! Sums of squares or products over many tensors, as one device scalar: per tensor on the
//! CPU backends, by length on fused ones.

use std::any::Any;

use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor};

use super::quirks::norm_all_at_once;
use super::reduce::{reduction_view, squared_norm, sum_all, view_dims, weighted};
use crate::float::widen;

/// `sum_i <x_i, y_i>` over tensors of any shape, squares (`y_i = x_i`) or products, in the
/// widened float type ([`widen`]), as a device scalar: a reduction per tensor summed, or,
/// where [`norm_all_at_once`] says so, one reduction per length ([`sum_by_length`]).
/// Every global norm and inner product of the crate is one of these.
#[derive(Default)]
pub(crate) enum GlobalSum<B: Backend> {
    #[default]
    Empty,
    Summed(Tensor<B, 1>),
    Grouped(Vec<Box<dyn AnyTerm<B>>>),
}

/// A tensor of a [`GlobalSum`] and what multiplies it, kept until the sum is taken with the
/// other tensors of its length and rank: a fused backend then runs their products, the
/// additions and the reduction as one kernel. (Flattening would not do: Burn 0.21's fuser
/// takes no reshape that lowers the rank into a kernel.)
struct Term<B: Backend, const D: usize> {
    x: Tensor<B, D>,
    factor: Factor<B, D>,
}

enum Factor<B: Backend, const D: usize> {
    /// `x * x`.
    Itself,
    /// ASAM's `((|weight| + eta) * x)^2`.
    Weighted(Tensor<B, D>, f64),
    /// `x * y`.
    Other(Tensor<B, D>),
}

impl<B: Backend, const D: usize> Term<B, D> {
    /// The element-wise product over the factors' [`reduction_view`]s, widened: the fuser
    /// reads the views in place, but takes no view of a tensor computed in its kernel.
    fn product(self) -> Tensor<B, D> {
        let x = reduction_view(self.x);
        match self.factor {
            Factor::Itself => widen(x).square(),
            Factor::Weighted(weight, eta) => {
                widen(weighted(reduction_view(weight), x, Some(eta), 1)).square()
            }
            Factor::Other(y) => widen(x) * widen(reduction_view(y)),
        }
    }
}

/// A [`Term`] of any rank.
pub(crate) trait AnyTerm<B: Backend> {
    fn dims(&self) -> Vec<usize>;
    fn dtype(&self) -> DType;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
    /// For a square `||v||^2`, `v` flattened.
    fn squared_flat(self: Box<Self>) -> Result<Tensor<B, 1>, Box<dyn AnyTerm<B>>>;
    /// The sum of the products of this term and of `alike`, terms of its shape and type
    /// (its [`reduction_view`]'s).
    fn sum_with(self: Box<Self>, alike: Vec<Box<dyn AnyTerm<B>>>) -> Tensor<B, 1>;
}

impl<B: Backend, const D: usize> AnyTerm<B> for Term<B, D> {
    /// The dimensions of its factors' [`reduction_view`]s.
    fn dims(&self) -> Vec<usize> {
        view_dims(&self.x).to_vec()
    }

    fn dtype(&self) -> DType {
        self.x.dtype()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }

    fn squared_flat(self: Box<Self>) -> Result<Tensor<B, 1>, Box<dyn AnyTerm<B>>> {
        let n = self.x.shape().num_elements();
        match self.factor {
            Factor::Itself => Ok(self.x.reshape([n])),
            Factor::Weighted(weight, eta) => {
                Ok(weighted(weight, self.x, Some(eta), 1).reshape([n]))
            }
            Factor::Other(_) => Err(self),
        }
    }

    fn sum_with(self: Box<Self>, alike: Vec<Box<dyn AnyTerm<B>>>) -> Tensor<B, 1> {
        let products = alike.into_iter().map(|term| {
            let term = term.into_any().downcast::<Self>();
            term.expect("a term of the same shape has the same rank")
                .product()
        });
        sum_all(products.fold(self.product(), |sum, x| sum + x))
    }
}

impl<B: Backend> GlobalSum<B> {
    /// Adds `||x||^2`.
    pub fn add_square<const D: usize>(&mut self, x: Tensor<B, D>) {
        self.push(Term {
            x,
            factor: Factor::Itself,
        });
    }

    /// Adds `||(|weight| + eta) * x||^2`.
    pub fn add_weighted_square<const D: usize>(
        &mut self,
        weight: Tensor<B, D>,
        x: Tensor<B, D>,
        eta: f64,
    ) {
        self.push(Term {
            x,
            factor: Factor::Weighted(weight, eta),
        });
    }

    /// Adds `<x, y>`.
    pub fn add_product<const D: usize>(&mut self, x: Tensor<B, D>, y: Tensor<B, D>) {
        self.push(Term {
            x,
            factor: Factor::Other(y),
        });
    }

    fn push<const D: usize>(&mut self, term: Term<B, D>) {
        if let Self::Empty = self {
            if norm_all_at_once::<B>(&term.x.device()) {
                *self = Self::Grouped(Vec::new());
            }
        }
        if let Self::Grouped(all) = self {
            all.push(Box::new(term));
            return;
        }
        let sum = match term.factor {
            Factor::Itself => squared_norm(widen(term.x)),
            Factor::Weighted(weight, eta) => {
                squared_norm(widen(weighted(weight, term.x, Some(eta), 1)))
            }
            Factor::Other(y) => sum_all(widen(term.x) * widen(y)),
        };
        *self = match std::mem::take(self) {
            Self::Summed(total) => Self::Summed(add(total, sum)),
            _ => Self::Summed(sum),
        };
    }

    /// The sum, `None` when nothing was added.
    pub fn finish(self) -> Option<Tensor<B, 1>> {
        match self {
            Self::Empty => None,
            Self::Summed(sum) => Some(sum),
            Self::Grouped(all) => Some(sum_by_length(all)),
        }
    }
}

/// `a + b` in `a`'s float type.
fn add<B: Backend>(a: Tensor<B, 1>, b: Tensor<B, 1>) -> Tensor<B, 1> {
    let dtype = a.dtype();
    a + b.cast(dtype)
}

/// `sum_i <x_i, y_i>` with one reduction per length (and rank) rather than per tensor: the
/// products of tensors of a length that repeats (a model's layers are alike) are added
/// element-wise and reduced, which a fused backend runs as one kernel however many there
/// are; the squares of the other tensors are concatenated and reduced once.
fn sum_by_length<B: Backend>(all: Vec<Box<dyn AnyTerm<B>>>) -> Tensor<B, 1> {
    type Group<B> = (Box<dyn AnyTerm<B>>, Vec<Box<dyn AnyTerm<B>>>);
    let mut groups: Vec<Group<B>> = Vec::new();
    for term in all {
        let alike = |(first, _): &&mut Group<B>| {
            first.dims() == term.dims() && first.dtype() == term.dtype()
        };
        match groups.iter_mut().find(alike) {
            Some((_, alike)) => alike.push(term),
            None => groups.push((term, Vec::new())),
        }
    }
    let (mut sums, mut lone) = (Vec::new(), Vec::new());
    for (first, alike) in groups {
        if !alike.is_empty() {
            sums.push(first.sum_with(alike));
            continue;
        }
        // The squares of lone lengths are concatenated (a copy each) and reduced once; a
        // product would copy both factors, and is reduced alone.
        match first.squared_flat() {
            Ok(flat) => lone.push(flat),
            Err(product) => sums.push(product.sum_with(Vec::new())),
        }
    }
    if !lone.is_empty() {
        sums.push(squared_norm(cat_widened(lone)));
    }
    sums.into_iter().reduce(add).expect("at least one tensor")
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

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests read the values they check"
)]
mod tests {
    use burn::backend::Flex;

    use super::*;

    #[test]
    fn sums_by_length_group_alike_tensors_and_keep_every_term() {
        let device = Default::default();
        let x = |values: [f32; 6]| Tensor::<Flex, 1>::from_floats(values, &device);
        let a = x([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = x([-1.0, 0.5, 2.0, 0.0, 1.0, -2.0]);
        let mut terms: Vec<Box<dyn AnyTerm<Flex>>> = Vec::new();
        let term = |x: Tensor<Flex, 2>, factor| Box::new(Term { x, factor });
        // One shape (on a fused backend, one length and rank), so one group.
        terms.push(term(a.clone().reshape([2, 3]), Factor::Itself));
        terms.push(term(b.clone().reshape([2, 3]), Factor::Itself));
        let weight = b.clone().reshape([6, 1]);
        terms.push(term(
            a.clone().reshape([6, 1]),
            Factor::Weighted(weight, 0.5),
        ));
        // Lone lengths: a square concatenated, a product reduced alone.
        terms.push(Box::new(Term {
            x: Tensor::<Flex, 1>::from_floats([2.0; 3], &device),
            factor: Factor::Itself,
        }));
        terms.push(Box::new(Term {
            x: Tensor::<Flex, 1>::from_floats([1.0, 2.0], &device),
            factor: Factor::Other(Tensor::from_floats([-1.0, 3.0], &device)),
        }));
        let squares = |x: &Tensor<Flex, 1>| x.clone().square().sum().into_scalar();
        let (a_squares, b_squares) = (squares(&a), squares(&b));
        let weighted = squares(&(b.abs().add_scalar(0.5) * a));
        // 2^2 * 3 for the lone square, 1 * -1 + 2 * 3 for the lone product.
        let want = a_squares + b_squares + weighted + 12.0 + 5.0;
        let got = sum_by_length(terms).into_scalar();
        assert!((got - want).abs() < 1e-4, "{got} != {want}");
    }
}
