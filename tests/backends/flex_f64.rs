//! The conformance suite on Flex (pure-Rust CPU) in f64.
#![cfg(feature = "flex")]

#[path = "../suite/mod.rs"]
mod suite;

backend_suite!(
    flex_f64,
    burn::backend::Autodiff<burn::backend::Flex>,
    burn::tensor::FloatDType::F64
);
