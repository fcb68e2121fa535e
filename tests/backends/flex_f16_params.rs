//! f16 parameters cast on Flex with an f32 default float type (`burn_sam::cast_params`).
#![cfg(feature = "flex")]

#[path = "../suite/mod.rs"]
mod suite;

f16_params_suite!(
    flex_f16_params,
    burn::backend::Autodiff<burn::backend::Flex>
);
