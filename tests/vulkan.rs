//! The conformance suite on Vulkan (wgpu; Mesa lavapipe on a CPU) in f32.
#![cfg(feature = "vulkan")]

mod suite;

backend_suite!(
    vulkan_f32,
    burn::backend::Autodiff<burn::backend::Vulkan>,
    burn::tensor::FloatDType::F32
);
