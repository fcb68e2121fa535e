//! The conformance suite on NdArray in f64.
#![cfg(feature = "ndarray")]

#[path = "../suite/mod.rs"]
mod suite;

backend_suite!(
    ndarray_f64,
    burn::backend::Autodiff<burn::backend::NdArray<f64>>,
    burn::tensor::FloatDType::F64
);
