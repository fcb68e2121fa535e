//! Counters for benchmarks and tests: every time burn-sam makes the host wait for the device.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use burn::tensor::backend::{Backend, ExecutionError};
use burn::tensor::{Tensor, TensorData};

static DEVICE_READS: AtomicU64 = AtomicU64::new(0);
static DEVICE_SYNCS: AtomicU64 = AtomicU64::new(0);
static QUEUE_LAUNCHES: AtomicU64 = AtomicU64::new(0);
static CLOSING_SYNC: AtomicBool = AtomicBool::new(true);

/// Turns the end of every step's queue on a fused backend on or off, for the whole process
/// (on by default): a device sync, or, on the fused backends that burn-sam's features name, a
/// launch without a wait ([`queue_launches`]). For measuring what it costs (the GPU check's bench), not for
/// training: without it a fused backend may fuse a step's update into the next step's first
/// kernels, which can round differently, so a resumed run is no longer bitwise the
/// uninterrupted one on CUDA (the guide's GPU chapter, "Resume").
pub fn set_closing_sync(on: bool) {
    CLOSING_SYNC.store(on, Ordering::Relaxed);
}

/// Whether steps end their queue ([`set_closing_sync`]).
pub fn closing_sync() -> bool {
    CLOSING_SYNC.load(Ordering::Relaxed)
}

/// How many times burn-sam has read values back from the device in this process. A SAM step
/// reads once on a GPU backend (both passes' gradient norms, which decide whether it is
/// applied) and once per pass on a CPU backend (Flex, NdArray), where a read waits for
/// nothing; a `MixedPrecision` step once; records read the master weights and the variants'
/// state; data-parallel training reads each tensor it moves between devices through the host
/// (lavapipe) and each gradient tensor it exchanges across MPI ranks. Reads made by your own
/// code are not counted, unless they go through [`read_back`].
pub fn device_reads() -> u64 {
    DEVICE_READS.load(Ordering::Relaxed)
}

/// How many times burn-sam has waited for a device to finish what was queued (`B::sync`) in
/// this process: once at the end of every step that updated the weights on a fused backend
/// (Burn's `fusion`), except where burn-sam's features name it and it launches the queue
/// instead ([`queue_launches`]); never on the others, which have no queue. Data-parallel
/// training also syncs once per pass before its replicas' worker threads read the model
/// (on every backend that runs them in threads: never with one replica).
pub fn device_syncs() -> u64 {
    DEVICE_SYNCS.load(Ordering::Relaxed)
}

/// How many times burn-sam has ended a step by launching what a fused backend queued without
/// waiting for it: with the features `fusion` and `cuda` or `wgpu`, on Burn's fused `Cuda`,
/// `Vulkan`, `Metal` and `Wgpu`, once at the end of every step that updated the weights. Not
/// a host wait.
pub fn queue_launches() -> u64 {
    QUEUE_LAUNCHES.load(Ordering::Relaxed)
}

/// Every wait of the host for a device: [`device_reads`] plus [`device_syncs`]. While the host
/// waits, a GPU runs out of queued work; after it, the GPU idles while the host queues more.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::SgdConfig;
/// use burn::tensor::Tensor;
/// use burn_sam::{diagnostics, SamConfig};
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let x = Tensor::<B, 2>::ones([4, 3], &device);
/// let mut sam = SamConfig::new().init(SgdConfig::new().init());
/// let before = diagnostics::host_waits();
/// sam.step_with(0.1, model, |m: &Linear<B>| m.forward(x.clone()).mean()).unwrap();
/// // On a CPU backend, where a read waits for nothing, one read per pass (its gradient
/// // norm); on a GPU backend one read for both. A fused backend's step then ends its queue:
/// // a launch where burn-sam's features name the backend (no wait), a sync elsewhere.
/// assert_eq!(diagnostics::host_waits() - before, 2);
/// ```
pub fn host_waits() -> u64 {
    device_reads() + device_syncs()
}

/// Reads `tensor` back to the host, counted by [`device_reads`]. Every read of a device value
/// in burn-sam and burn-sam-accum goes through here (the `disallowed-methods` rule in
/// `crates/clippy.toml` keeps it so); reading a tensor of your own through it counts that
/// read too.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::Tensor;
/// use burn_sam::diagnostics;
///
/// let before = diagnostics::device_reads();
/// let data = diagnostics::read_back(Tensor::<Flex, 1>::from_floats([2.0], &Default::default()));
/// assert_eq!(data.to_vec::<f32>().unwrap(), [2.0]);
/// assert_eq!(diagnostics::device_reads() - before, 1);
/// ```
#[allow(
    clippy::disallowed_methods,
    reason = "the one counted read of a device value"
)]
pub fn read_back<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> TensorData {
    DEVICE_READS.fetch_add(1, Ordering::Relaxed);
    tensor.into_data()
}

/// Counts a launch of a fused queue without a wait ([`queue_launches`]).
pub(crate) fn launched() {
    QUEUE_LAUNCHES.fetch_add(1, Ordering::Relaxed);
}

/// Waits for `device` to run what was queued, counted by [`device_syncs`]: every `B::sync` in
/// burn-sam and burn-sam-accum goes through here (`crates/clippy.toml`).
#[allow(clippy::disallowed_methods, reason = "the one counted device sync")]
pub fn sync<B: Backend>(device: &B::Device) -> Result<(), ExecutionError> {
    DEVICE_SYNCS.fetch_add(1, Ordering::Relaxed);
    B::sync(device)
}
