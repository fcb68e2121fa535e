//! The front page's quick start: SAM over Adam on a small regression problem, on the CPU.
//!
//! `cargo run --release --example quickstart`

use burn::backend::{Autodiff, Flex};
use burn::optim::AdamConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use burn_sam::SamConfig;
use burn_sam_suite::{Mlp, MlpConfig};

type B = Autodiff<Flex>;

fn main() {
    let device = Default::default();
    B::seed(&device, 0);
    let x = Tensor::<B, 2>::random([256, 8], Distribution::Normal(0.0, 1.0), &device);
    let y = x.clone().sin().sum_dim(1);
    let loss = |model: &Mlp<B>| (model.forward(x.clone()) - y.clone()).powi_scalar(2).mean();

    let mut model: Mlp<B> = MlpConfig::new(vec![8, 64, 1]).init(&device);
    let mut optim = SamConfig::new()
        .with_rho(0.05)
        .init(AdamConfig::new().init());
    for step in 1..=200 {
        let out = optim.step_with(1e-2, model, loss).expect("SAM step");
        model = out.module;
        if step % 40 == 0 {
            let report = out.report;
            println!(
                "step {step:>3}  loss {:.4}  |g| {:.3}  {:?}",
                out.loss.into_scalar(),
                report.ascent_grad_norm,
                report.outcome
            );
        }
    }
    println!("{:?}", optim.stats());
}
