//! The end of a step on a fused backend: what the step queued is compiled and launched, so
//! that the next step's operations cannot fuse with it, without waiting for it to run.
//!
//! Burn's `fusion` queues operations and compiles each run of them into kernels when
//! something is read or synced, and its `Backend` trait offers no other way to run the queue.
//! burn-fusion's own client does (`GlobalFusionClient::sync`, which drains the calling
//! thread's stream and then runs a closure: an empty one waits for nothing), but it is
//! reached through the backend's fusion runtime, which a generic `B` does not name. The
//! features `fusion` with `cuda` or `wgpu` name the two that Burn's `Cuda`, `Vulkan`, `Metal`
//! and `Wgpu` use.

use burn::tensor::backend::Backend;

/// Launches what this thread queued on `device`, a fused backend's
/// ([`operations_queue`](crate::quirks::operations_queue)), without waiting for it, where the
/// features name the backend's runtime: true then, false otherwise (the caller syncs
/// instead).
#[cfg(all(feature = "fusion", any(feature = "cuda", feature = "wgpu")))]
pub(crate) fn launch_queued<B: Backend>(device: &B::Device) -> bool {
    fused::launch_queued(device)
}

/// Without the features, no fusion runtime is named: the caller syncs.
#[cfg(not(all(feature = "fusion", any(feature = "cuda", feature = "wgpu"))))]
pub(crate) fn launch_queued<B: Backend>(_device: &B::Device) -> bool {
    false
}

#[cfg(all(feature = "fusion", any(feature = "cuda", feature = "wgpu")))]
mod fused {
    use std::any::Any;

    use burn_cubecl::fusion::FusionCubeRuntime;
    use burn_fusion::client::GlobalFusionClient;

    pub fn launch_queued(device: &dyn Any) -> bool {
        #[cfg(feature = "cuda")]
        if let Some(device) = device.downcast_ref::<cubecl_cuda::CudaDevice>() {
            type Runtime = FusionCubeRuntime<cubecl_cuda::CudaRuntime>;
            GlobalFusionClient::<Runtime>::load(device).sync(|| ());
            return true;
        }
        #[cfg(feature = "wgpu")]
        if let Some(device) = device.downcast_ref::<cubecl_wgpu::WgpuDevice>() {
            type Runtime = FusionCubeRuntime<cubecl_wgpu::WgpuRuntime>;
            GlobalFusionClient::<Runtime>::load(device).sync(|| ());
            return true;
        }
        false
    }
}
