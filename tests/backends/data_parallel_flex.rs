//! Data-parallel SAM on Flex (f32 and f16), the same device listed twice: each replica runs in
//! its own thread with its own autodiff graph.

#[path = "../data_parallel/mod.rs"]
mod data_parallel;

data_parallel_suite!(
    flex,
    burn::backend::Autodiff<burn::backend::Flex>,
    [Default::default(), Default::default()]
);
