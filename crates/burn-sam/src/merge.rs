//! Gradients computed on several devices, as one set.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::{GradientsParams, MultiGradientsParams};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;

/// Merges gradients computed on several devices into one set, on the device
/// [`MultiGradientsParams`] assigns to each parameter.
pub(crate) fn merge_devices<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: MultiGradientsParams,
) -> GradientsParams {
    struct Merge<B> {
        multi: MultiGradientsParams,
        merged: GradientsParams,
        backend: core::marker::PhantomData<B>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Merge<B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some((grad, _)) = self.multi.remove::<B::InnerBackend, D>(param.id) {
                self.merged.register(param.id, grad);
            }
        }
    }
    let mut merge = Merge::<B> {
        multi: grads,
        merged: GradientsParams::new(),
        backend: core::marker::PhantomData,
    };
    module.visit(&mut merge);
    merge.merged
}
