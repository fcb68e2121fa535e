//! One-element device values (a step's scale, its "not finite" flag) broadcast against
//! tensors of any rank.

use std::collections::HashMap;

use burn::tensor::backend::Backend;
use burn::tensor::{BasicOps, Float, Tensor, TensorKind};

use crate::param_map::AnyValue;

/// A `[1]` tensor, reshaped to `[1; D]` once per rank `D` and shared by every tensor of that
/// rank: on a fused backend, tensors of one shape that share their operands are updated by one
/// kernel, where a reshape per tensor makes a kernel per tensor.
#[derive(Clone)]
pub(crate) struct Broadcast<B: Backend, K: TensorKind<B> = Float> {
    scalar: Tensor<B, 1, K>,
    ranked: HashMap<usize, AnyValue>,
}

impl<B: Backend, K: TensorKind<B> + BasicOps<B> + 'static> Broadcast<B, K> {
    pub fn new(scalar: Tensor<B, 1, K>) -> Self {
        Self {
            scalar,
            ranked: HashMap::new(),
        }
    }

    /// The value shaped `[1; D]`.
    pub fn scalar(&self) -> &Tensor<B, 1, K> {
        &self.scalar
    }

    pub fn into_scalar(self) -> Tensor<B, 1, K> {
        self.scalar
    }

    pub fn get<const D: usize>(&mut self) -> Tensor<B, D, K> {
        let scalar = &self.scalar;
        let ranked = self
            .ranked
            .entry(D)
            .or_insert_with(|| AnyValue::new(scalar.clone().reshape([1; D])));
        ranked
            .get()
            .expect("each rank's entry holds a tensor of that rank")
    }
}
