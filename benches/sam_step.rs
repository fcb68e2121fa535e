//! One SAM step against two base steps (SAM's physical limit is 2x) on Flex, for an MLP with
//! 1.3M parameters. `cargo xtask bench` runs this and prints the ratio.

use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use burn_sam::SamConfig;
use burn_sam_suite::{Mlp, MlpConfig};
use criterion::{criterion_group, criterion_main, Criterion};

type B = Autodiff<Flex>;

fn loss(model: &Mlp<B>, x: &Tensor<B, 2>, y: &Tensor<B, 2>) -> Tensor<B, 1> {
    (model.forward(x.clone()) - y.clone()).powi_scalar(2).mean()
}

fn sam_step(c: &mut Criterion) {
    let device = Default::default();
    B::seed(&device, 0);
    let sizes = vec![784, 1024, 512, 10];
    let model: Mlp<B> = MlpConfig::new(sizes).init(&device);
    let model = model.valid(); // initialise the lazy parameters once
    let model = Mlp::<B>::from_inner(model);
    let x = Tensor::<B, 2>::random([128, 784], Distribution::Normal(0.0, 1.0), &device);
    let y = Tensor::<B, 2>::random([128, 10], Distribution::Normal(0.0, 1.0), &device);
    let lr = 1e-3;

    let mut group = c.benchmark_group(format!("mlp_{}_params", model.parameters()));
    group.sample_size(30);

    let mut base = SgdConfig::new().init();
    let mut current = Some(model.clone());
    group.bench_function("base_step", |b| {
        b.iter(|| {
            let model = current.take().unwrap();
            let grads = GradientsParams::from_grads(loss(&model, &x, &y).backward(), &model);
            current = Some(base.step(lr, model, grads));
            B::sync(&device).unwrap();
        })
    });

    let asam = SamConfig::new().with_rho(0.5).with_adaptive(true);
    for (name, config) in [("sam_step", SamConfig::new()), ("asam_step", asam)] {
        let mut sam = config.init(SgdConfig::new().init());
        let mut current = Some(model.clone());
        group.bench_function(name, |b| {
            b.iter(|| {
                let model = current.take().unwrap();
                let step = sam.step_with(lr, model, |m| loss(m, &x, &y)).unwrap();
                current = Some(step.module);
                B::sync(&device).unwrap();
            })
        });
    }
    group.finish();
}

criterion_group!(benches, sam_step);
criterion_main!(benches);
