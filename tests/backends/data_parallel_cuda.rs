//! Data-parallel SAM on two CUDA GPUs (`cargo xtask test-gpu` runs it on hosts with two or
//! more).
#![cfg(feature = "cuda")]

#[path = "../data_parallel/mod.rs"]
mod data_parallel;

data_parallel_suite!(
    cuda,
    burn::backend::Autodiff<burn::backend::Cuda>,
    [
        burn::backend::cuda::CudaDevice::new(0),
        burn::backend::cuda::CudaDevice::new(1)
    ]
);
