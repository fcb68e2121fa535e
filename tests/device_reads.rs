//! Device reads (host syncs) per step, counted by `burn_sam::diagnostics::device_reads`: two per SAM step
//! (one per pass), one per loss-scaled or plain accumulated step, whatever the window size.
//! One test in its own binary, so that no other test reads in between.
#![cfg(feature = "flex")]

use burn::backend::{Autodiff, Flex};
use burn::optim::{AdamConfig, GradientsParams, SgdConfig};
use burn::tensor::{Distribution, Tensor};
use burn_sam::{LossScaledConfig, LossScalerConfig, SamConfig};
use burn_sam_accum::{AccumulationConfig, MicroBatch, SamMode};
use burn_sam_suite::{Mlp, MlpConfig};

type B = Autodiff<Flex>;
type Batch = (Tensor<B, 2>, Tensor<B, 2>);

fn loss(model: &Mlp<B>, (x, y): &Batch) -> Tensor<B, 1> {
    (model.forward(x.clone()) - y.clone()).powi_scalar(2).mean()
}

/// The reads `f` made.
fn reads(f: impl FnOnce()) -> u64 {
    let before = burn_sam::diagnostics::device_reads();
    f();
    burn_sam::diagnostics::device_reads() - before
}

#[test]
fn reads_per_step() {
    let device = Default::default();
    let model: Mlp<B> = MlpConfig::new(vec![4, 8, 2]).init(&device);
    let normal = Distribution::Normal(0.0, 1.0);
    let batch = || -> Batch {
        (
            Tensor::random([6, 4], normal, &device),
            Tensor::random([6, 2], normal, &device),
        )
    };
    let window: Vec<_> = (0..3).map(|_| MicroBatch::new(batch())).collect();
    let b = batch();
    let scaling = Some(LossScalerConfig::new().with_init_scale(8.0));

    let mut sam = SamConfig::new()
        .with_loss_scaling(scaling.clone())
        .init(AdamConfig::new().init());
    let n = reads(|| drop(sam.step_with(1e-3, model.clone(), |m: &Mlp<B>| loss(m, &b))));
    assert_eq!(n, 2, "loss-scaled SAM step");

    let mut scaled = LossScaledConfig::new(LossScalerConfig::new()).init(SgdConfig::new().init());
    let n = reads(|| {
        let grads =
            GradientsParams::from_grads(scaled.scale_loss(loss(&model, &b)).backward(), &model);
        drop(scaled.try_step(1e-3, model.clone(), grads));
    });
    assert_eq!(n, 1, "loss-scaled step");

    let sam = || {
        SamConfig::new()
            .with_loss_scaling(scaling.clone())
            .init(SgdConfig::new().init())
    };
    let mut exact = AccumulationConfig::new(3).init(sam());
    let n = reads(|| drop(exact.step(1e-3, model.clone(), &window, loss)));
    assert_eq!(n, 2, "exact SAM over a window of 3");

    let mut per_micro_batch = AccumulationConfig::new(3)
        .with_sam_mode(SamMode::PerMicroBatch)
        .init(sam());
    let n = reads(|| drop(per_micro_batch.step(1e-3, model.clone(), &window, loss)));
    assert_eq!(
        n, 4,
        "m-sharpness: one ascent norm per micro-batch, one descent norm"
    );

    let mut plain = AccumulationConfig::new(3).init(SgdConfig::new().init());
    let n = reads(|| drop(plain.step(1e-3, model.clone(), &window, loss)));
    assert_eq!(n, 1, "plain accumulation over a window of 3");
}
