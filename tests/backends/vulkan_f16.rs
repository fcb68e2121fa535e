//! Mixed precision on Vulkan (wgpu; Mesa lavapipe on a CPU) with real f16 arithmetic.
#![cfg(feature = "vulkan")]

#[path = "../suite/mod.rs"]
mod suite;

f16_suite!(vulkan_f16, burn::backend::Autodiff<burn::backend::Vulkan>);
