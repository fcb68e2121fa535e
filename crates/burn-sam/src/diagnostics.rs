//! Counters for benchmarks and tests.

use std::sync::atomic::{AtomicU64, Ordering};

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

static DEVICE_READS: AtomicU64 = AtomicU64::new(0);

/// How many times burn-sam has read values back from the device in this process. A SAM step
/// reads once per pass (its gradient norm), a `LossScaled` step once; records read the master
/// weights. Reads made by your own code are not counted.
pub fn device_reads() -> u64 {
    DEVICE_READS.load(Ordering::Relaxed)
}

/// Reads `tensor` back to the host, counted by [`device_reads`].
pub(crate) fn read_back<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> TensorData {
    DEVICE_READS.fetch_add(1, Ordering::Relaxed);
    tensor.into_data()
}
