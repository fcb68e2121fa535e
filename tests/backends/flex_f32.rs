//! The conformance suite on Flex (pure-Rust CPU) in f32.
#![cfg(feature = "flex")]

#[path = "../suite/mod.rs"]
mod suite;

backend_suite!(
    flex_f32,
    burn::backend::Autodiff<burn::backend::Flex>,
    burn::tensor::FloatDType::F32
);
