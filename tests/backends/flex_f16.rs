//! Mixed precision on Flex with real f16 arithmetic.
#![cfg(feature = "flex")]

#[path = "../suite/mod.rs"]
mod suite;

f16_suite!(flex_f16, burn::backend::Autodiff<burn::backend::Flex>);
