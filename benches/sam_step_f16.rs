//! A loss-scaled f16 SAM step against an unscaled f16 SAM step on Flex (real f16 arithmetic,
//! f32 master weights in both), for the 1.3M-parameter MLP of `sam_step`.
//! `cargo xtask bench` runs this and prints the ratio.

use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::optim::SgdConfig;
use burn::tensor::backend::{set_default_float_dtype, Backend};
use burn::tensor::{Distribution, FloatDType, Tensor};
use burn_sam::{LossScalerConfig, SamConfig};
use burn_sam_suite::{Mlp, MlpConfig};
use criterion::{criterion_group, criterion_main, Criterion};

type B = Autodiff<Flex>;

fn sam_step_f16(c: &mut Criterion) {
    let device = Default::default();
    set_default_float_dtype::<B>(&device, FloatDType::F16).expect("f16 before any tensor");
    B::seed(&device, 0);
    let model: Mlp<B> = MlpConfig::new(vec![784, 1024, 512, 10]).init(&device);
    let model = Mlp::<B>::from_inner(model.valid()); // initialise the lazy parameters once
    let x = Tensor::<B, 2>::random([128, 784], Distribution::Normal(0.0, 1.0), &device);
    let y = Tensor::<B, 2>::random([128, 10], Distribution::Normal(0.0, 1.0), &device);
    let loss = |m: &Mlp<B>| (m.forward(x.clone()) - y.clone()).powi_scalar(2).mean();

    let mut group = c.benchmark_group(format!("f16_mlp_{}_params", model.parameters()));
    group.sample_size(30);
    // A scale that never changes and never overflows: both runs do the same arithmetic.
    let scaler = LossScalerConfig::new()
        .with_init_scale(1024.0)
        .with_growth_interval(u64::MAX);
    for (name, scaling) in [("unscaled", None), ("scaled", Some(scaler))] {
        let mut sam = SamConfig::new()
            .with_loss_scaling(scaling)
            .init(SgdConfig::new().init());
        let mut current = Some(model.clone());
        group.bench_function(name, |b| {
            b.iter(|| {
                let step = sam.step_with(1e-3, current.take().unwrap(), loss).unwrap();
                current = Some(step.module);
                B::sync(&device).unwrap();
            })
        });
    }
    group.finish();
}

criterion_group!(benches, sam_step_f16);
criterion_main!(benches);
