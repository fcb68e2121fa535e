//! A user's program built from README's dependency lines alone (`cargo xtask ci` writes its
//! `Cargo.toml` from README and builds it outside the workspace): SAM steps on Flex, and the
//! Learner strategy's type, so that `burn-sam-accum`'s `train` feature is built too.

use burn::backend::{Autodiff, Flex};
use burn::nn::{Linear, LinearConfig};
use burn::optim::SgdConfig;
use burn::tensor::{Distribution, Tensor};
use burn_sam::SamConfig;
use burn_sam_accum::train::Traffic;

type B = Autodiff<Flex>;

fn main() {
    let device = Default::default();
    let model: Linear<B> = LinearConfig::new(4, 1).init(&device);
    let x = Tensor::<B, 2>::random([16, 4], Distribution::Normal(0.0, 1.0), &device);
    let y = x.clone().sum_dim(1);
    let loss = |m: &Linear<B>| (m.forward(x.clone()) - y.clone()).powi_scalar(2).mean();
    let mut optim = SamConfig::new()
        .with_rho(0.05)
        .try_init(SgdConfig::new().init())
        .expect("a valid config");
    let first: f32 = loss(&model).into_scalar();
    let mut model = model;
    for _ in 0..30 {
        model = optim.step_with(0.05, model, loss).expect("a SAM step").module;
    }
    let last: f32 = loss(&model).into_scalar();
    assert!(last < first / 2.0, "SAM did not train: loss {first} -> {last}");
    assert_eq!(Traffic::default().steps(), 0);
    println!("README's dependency lines: 30 SAM steps, loss {first:.4} -> {last:.4}");
}
