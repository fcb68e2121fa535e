//! The conformance suite on CUDA in f32.
#![cfg(feature = "cuda")]

#[path = "../suite/mod.rs"]
mod suite;

backend_suite!(
    tests,
    cuda_f32,
    burn::backend::Autodiff<burn::backend::Cuda>,
    burn::tensor::FloatDType::F32,
    util::MatmulInputs::Tf32
);

// f16 parameters cast with `cast_params` on this f32-default device.
f16_params_suite!(
    cuda_f16_params,
    burn::backend::Autodiff<burn::backend::Cuda>
);
