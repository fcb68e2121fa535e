//! The conformance suite on LibTorch in f32.
#![cfg(feature = "tch")]

#[path = "../suite/mod.rs"]
mod suite;

backend_suite!(
    tch_f32,
    burn::backend::Autodiff<burn::backend::LibTorch<f32>>,
    burn::tensor::FloatDType::F32
);
