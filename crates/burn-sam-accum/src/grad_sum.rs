//! A running sum of gradients by parameter.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use burn_sam::{widen, SamError};

/// A running sum of gradients by parameter, in f32 (or f64).
#[derive(Default)]
pub(crate) struct GradSum {
    sum: GradientsParams,
}

impl GradSum {
    /// Adds `weight * grads`, an error when some belong to no parameter of `module`.
    pub fn add<B: AutodiffBackend, M: AutodiffModule<B>>(
        &mut self,
        module: &M,
        grads: GradientsParams,
        weight: f64,
    ) -> Result<(), SamError> {
        let gradients = grads.len();
        let mut add = Add::<B> {
            grads,
            weight,
            sum: &mut self.sum,
            matched: 0,
            backend: core::marker::PhantomData,
        };
        module.visit(&mut add);
        if add.matched != gradients {
            return Err(SamError::ForeignGradients {
                gradients,
                matched: add.matched,
            });
        }
        Ok(())
    }

    pub fn into_grads(self) -> GradientsParams {
        self.sum
    }
}

struct Add<'a, B> {
    grads: GradientsParams,
    weight: f64,
    sum: &'a mut GradientsParams,
    matched: usize,
    backend: core::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Add<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
            return;
        };
        self.matched += 1;
        let mut grad = widen(grad);
        if self.weight != 1.0 {
            grad = grad.mul_scalar(self.weight);
        }
        // The running sum is the only owner of its buffer: backends that can add in place.
        let total = match self.sum.remove::<B::InnerBackend, D>(param.id) {
            Some(sum) => sum + grad,
            None => grad,
        };
        self.sum.register(param.id, total);
    }
}
