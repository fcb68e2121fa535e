//! Data-parallel SAM on Vulkan (Mesa lavapipe on a CPU) over two distinct device handles, so
//! that models and gradients really move between devices (through the host: Burn 0.21 cannot
//! move tensors between wgpu devices itself). The main device is the default one: Burn's
//! `Learner` loads checkpoints onto the default device and moves them to the model's with the
//! backend's own transfer.
#![cfg(feature = "vulkan")]

#[path = "../data_parallel/mod.rs"]
mod data_parallel;

data_parallel_suite!(
    vulkan,
    burn::backend::Autodiff<burn::backend::Vulkan>,
    [
        burn::backend::wgpu::WgpuDevice::DefaultDevice,
        burn::backend::wgpu::WgpuDevice::Cpu
    ]
);
