//! The conformance suite on LibTorch in f64.
#![cfg(feature = "tch")]

#[path = "../suite/mod.rs"]
mod suite;

backend_suite!(
    tch_f64,
    burn::backend::Autodiff<burn::backend::LibTorch<f64>>,
    burn::tensor::FloatDType::F64
);
