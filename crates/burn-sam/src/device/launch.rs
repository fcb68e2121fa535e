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

use std::sync::Once;

use burn::module::AutodiffModule;
use burn::tensor::backend::{AutodiffBackend, Backend};

use super::diagnostics::{closing_sync, launched, sync};
use super::quirks::operations_queue;

/// Runs what the step queued on the module's devices before the step returns.
///
/// A fused backend (Burn's `fusion`: CUDA, Vulkan) queues operations and compiles each run of
/// them into kernels when something is read ([`operations_queue`]). Left queued, the update
/// would fuse with the next step's first operations unless a read (saving a record) came in
/// between, and kernels fused differently can round differently (CUDA contracts a fused
/// `a * b + c` into one FMA), so a resumed run would differ from the uninterrupted one in the
/// last bit (seen on CUDA: docs/performance.md, "Backend quirks"). Ending every step here makes
/// each step's kernels the same whatever came before. Where burn-sam's features name the
/// fused backend's runtime (`fusion` with `cuda` or `wgpu`), the queue is launched without
/// waiting for it ([`launch_queued`]): the step's one read is its only wait. Elsewhere it
/// syncs, a second, short wait for the update's own kernels (Burn's `Backend` trait has no
/// other way to run what is queued). Backends without a queue have nothing to end.
pub(crate) fn end_step_on_device<B: AutodiffBackend, M: AutodiffModule<B>>(module: &M) {
    if !closing_sync() {
        return;
    }
    for device in module.devices() {
        if !operations_queue::<B::InnerBackend>(&device) {
            continue;
        }
        match launch_queued::<B::InnerBackend>(&device) {
            true => launched(),
            false => {
                static HINT: Once = Once::new();
                HINT.call_once(|| {
                    log::info!(
                        "burn-sam: steps on {} end with a device sync; on Burn's fused CUDA \
                         and wgpu backends, burn-sam's features `fusion` and `cuda` (or \
                         `wgpu`) end them without a wait",
                        B::InnerBackend::name(&device)
                    )
                });
                if let Err(error) = sync::<B>(&device) {
                    // The next read reports a failed device anyway; what was queued is done.
                    log::warn!("device sync failed: {error:?}");
                }
            }
        }
    }
}

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
