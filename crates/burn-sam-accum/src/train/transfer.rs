//! Models and gradients moved between the replicas' devices: by the backend, or through the
//! host where its devices cannot exchange tensors
//! ([`transfers_through_host`](burn_sam::strategy::transfers_through_host)).

use burn::module::{AutodiffModule, ModuleMapper, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Device, Tensor};
use burn_sam::diagnostics;
use burn_sam::strategy::{map_grads, transfers_through_host, GradMap, ParamGrad};

/// `tensor` on `device`, through the host where the backend's devices exchange tensors that
/// way (a read).
pub(super) fn tensor_to<B: Backend, const D: usize>(
    tensor: Tensor<B, D>,
    device: &Device<B>,
) -> Tensor<B, D> {
    if tensor.device() == *device || !transfers_through_host::<B>(device) {
        return tensor.to_device(device);
    }
    let dtype = tensor.dtype();
    Tensor::from_data(diagnostics::read_back(tensor), (device, dtype))
}

/// The module on `device` with a fresh autodiff graph (`Module::fork`).
pub(super) fn fork_to<B: AutodiffBackend, M: AutodiffModule<B>>(model: M, device: &Device<B>) -> M {
    if !transfers_through_host::<B>(device) {
        return model.fork(device);
    }
    struct HostMove<'a, B: Backend>(&'a Device<B>);
    impl<B: AutodiffBackend> ModuleMapper<B> for HostMove<'_, B> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let (id, tensor, mapper) = param.consume();
            let require_grad = tensor.is_require_grad();
            let moved = Tensor::from_inner(tensor_to(tensor.inner(), self.0));
            let moved = if require_grad {
                moved.require_grad()
            } else {
                moved
            };
            Param::from_mapped_value(id, moved, mapper)
        }
    }
    // The float parameters are then on `device` already: `fork` detaches them and moves the
    // rest (integer parameters, running statistics).
    model.map(&mut HostMove(device)).fork(device)
}

/// `grads`, gradients of `model`'s parameters, on `device`.
pub(super) fn grads_to<B: AutodiffBackend, M: AutodiffModule<B>>(
    grads: GradientsParams,
    model: &M,
    device: &Device<B>,
) -> GradientsParams {
    if !transfers_through_host::<B>(device) {
        return grads.to_device(device, model);
    }
    struct HostMove<'a, B: Backend>(&'a Device<B>);
    impl<B: Backend> GradMap<B> for HostMove<'_, B> {
        fn map<const D: usize>(&mut self, param: ParamGrad<B, D>) -> Option<Tensor<B, D>> {
            Some(tensor_to(param.tensor, self.0))
        }
    }
    map_grads(model, grads, &mut HostMove::<B::InnerBackend>(device)).0
}
