//! Mixed precision on CUDA with real f16 arithmetic.
#![cfg(feature = "cuda")]

#[path = "../suite/mod.rs"]
mod suite;

f16_suite!(cuda_f16, burn::backend::Autodiff<burn::backend::Cuda>);
