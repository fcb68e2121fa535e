//! Where a backend needs another form of the same computation: every such choice in the
//! workspace, with its reason and the versions it was found on. The measurements behind them
//! are in `docs/performance.md` ("Backend quirks").
//!
//! Burn 0.21 names its backend (`Backend::name`) but describes none of these properties
//! (how a reduction is summed, whether devices exchange tensors directly), so the choices
//! follow the name: `"flex"`, and `"wgpu<...>"` for every CubeCL wgpu runtime (Vulkan, Metal,
//! WebGPU), fused or not.

use burn::tensor::backend::Backend;
use burn::tensor::Device;

/// Whether `||x||^2` is computed as the dot product `[1, n] x [n, 1]` rather than
/// `x.square().sum()`.
///
/// Flex (Burn 0.21) sums sequentially, through a temporary `x^2`, while its matmul is parallel
/// and reads `x` once. Everywhere else the reduction is the fast form: NdArray's GEMM packs both
/// operands and pads the 1x1 output to a full micro-kernel tile, and GPU matmuls are not built
/// for a 1x1 output while their reductions are parallel.
pub(crate) fn squared_norm_by_matmul<B: Backend>(device: &Device<B>) -> bool {
    B::name(device) == "flex"
}

/// Whether reading a value back waits for nothing but the value: on the CPU backends that
/// compute each operation as it is called (`"flex"`, `"ndarray"`).
///
/// There SAM reads its ascent's norm where it is made and moves the weights by a host scalar,
/// one multiply per tensor, in place. Elsewhere a read stalls the device's queue, so the
/// perturbation's scale and a "not finite" flag stay on the device, for a broadcast multiply
/// and a mask per tensor: fusion folds both into the move's one kernel, while on these CPU
/// backends they are passes of their own, which never came out ahead on the MLPs
/// (docs/performance.md, "Launches and host waits per step").
pub(crate) fn reads_are_free<B: Backend>(device: &Device<B>) -> bool {
    matches!(B::name(device).as_str(), "flex" | "ndarray")
}

/// Whether a global norm (or inner product) is computed over all tensors at once rather than
/// one reduction per tensor summed: on a fused backend (Burn's `fusion`, `"fusion<...>"`).
///
/// There a reduction and adding it to the running sum cost launches whatever the tensor's
/// size. Multiplying, adding and reducing equally long tensors is one fused kernel for all of
/// them, and `Tensor::cat` copies each of the rest in one launch (`tests/vulkan_fused_launches.rs`
/// holds the counts), at the cost of a buffer as large as those tensors while the norm is
/// computed. On the CPU backends both are passes over the gradients that the per-tensor form
/// does not make.
pub(crate) fn norm_all_at_once<B: Backend>(device: &Device<B>) -> bool {
    B::name(device).starts_with("fusion<")
}

/// Whether the element-wise operations before a reduction run in its kernel: on a fused
/// backend (`"fusion<...>"`), for a reduction over a dimension (`burn-cubecl-fusion` 0.21's
/// `ReduceFuser` takes `SumDim` and the other `*Dim` reductions, not a full `Sum`), so full
/// sums are taken over the last dimension of a same-rank view (`reduce::sum_all`). Elsewhere
/// `sum` is kept: on the CPU backends the view changes nothing but the order of additions.
pub(crate) fn reductions_fuse<B: Backend>(device: &Device<B>) -> bool {
    B::name(device).starts_with("fusion<")
}

/// Whether operations wait in a queue until something runs it: on a fused backend
/// (`"fusion<...>"`), which compiles each run of queued operations into kernels when something
/// is read or synced, so where a queue ends decides which operations share a kernel. Every
/// other backend runs (or launches) each operation as it is called.
pub(crate) fn operations_queue<B: Backend>(device: &Device<B>) -> bool {
    B::name(device).starts_with("fusion<")
}

/// Whether tensors change devices through the host and the replicas' passes run one after
/// another on the calling thread, for a backend whose devices cannot exchange tensors
/// directly.
///
/// cubecl-wgpu 0.10 (Burn 0.21) leaves the runtime's device-to-device send and receive
/// unimplemented (a `not implemented` panic in `ServerCommunication::comm_init`), so data goes
/// through the host. Its fused backend also computed at stale weights when a replica's thread
/// read a model moved by another thread, and drifted from the exact result with passes in
/// worker threads while other trainings ran in the same process; since its transfers go
/// through the host anyway, the passes run on one thread. Every other backend moves tensors
/// itself (CUDA peer to peer, the CPU backends by reference) and runs replicas in threads.
pub fn transfers_through_host<B: Backend>(device: &Device<B>) -> bool {
    B::name(device).contains("wgpu<")
}
