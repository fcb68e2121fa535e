//! Mixed precision on CUDA with real f16 arithmetic.
#![cfg(feature = "cuda")]

mod suite;

f16_suite!(cuda_f16, burn::backend::Autodiff<burn::backend::Cuda>);
