//! The conformance suite on Vulkan (wgpu; Mesa lavapipe on a CPU) in f32.
#![cfg(feature = "vulkan")]

#[path = "../suite/mod.rs"]
mod suite;

backend_suite!(
    vulkan_f32,
    burn::backend::Autodiff<burn::backend::Vulkan>,
    burn::tensor::FloatDType::F32
);

// f16 parameters cast with `cast_params` on this f32-default device.
f16_params_suite!(
    vulkan_f16_params,
    burn::backend::Autodiff<burn::backend::Vulkan>
);
