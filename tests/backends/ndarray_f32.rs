//! The conformance suite on NdArray in f32.
#![cfg(feature = "ndarray")]

#[path = "../suite/mod.rs"]
mod suite;

backend_suite!(
    ndarray_f32,
    burn::backend::Autodiff<burn::backend::NdArray<f32>>,
    burn::tensor::FloatDType::F32
);
