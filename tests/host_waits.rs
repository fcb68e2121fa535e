//! Host waits per step (`burn_sam::diagnostics`) on Flex, a CPU backend where a read waits
//! for nothing (`quirks::reads_are_free`): one device read per pass (its gradient norm), one
//! per micro-batch's ascent under m-sharpness, and no sync (a step ends its queue only on a
//! fused backend, which queues operations), down to Burn's `Learner`, where replicas in worker
//! threads add one sync per pass. Where a read stalls a queue (GPU backends), the ascent's norm stays on the
//! device and every step reads once: `tests/vulkan_fused_launches.rs` holds that. One test in
//! its own binary, so that no other test waits in between.
#![cfg(feature = "flex")]

use burn::backend::{Autodiff, Flex};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, GradientsParams, Sgd, SgdConfig};
use burn::tensor::{Distribution, Tensor};
use burn_sam::diagnostics::{device_reads, device_syncs};
use burn_sam::LossScaling;
use burn_sam::{LossScalerConfig, MixedPrecisionConfig, Sam, SamConfig, SamSchedule, SamVariant};
use burn_sam_accum::train::{SamMetric, SamTraining};
use burn_sam_accum::{AccumulationConfig, Ascent, MicroBatch};
use burn_sam_suite::{blobs, ClassBatcher, Classifier, Mlp, MlpConfig, Quiet};

type B = Autodiff<Flex>;
type Batch = (Tensor<B, 2>, Tensor<B, 2>);
type SgdOptim = OptimizerAdaptor<Sgd<Flex>, Classifier<B>, B>;

fn loss(model: &Mlp<B>, (x, y): &Batch) -> Tensor<B, 1> {
    (model.forward(x.clone()) - y.clone()).powi_scalar(2).mean()
}

/// The reads and syncs `f` made.
fn waits(f: impl FnOnce()) -> (u64, u64) {
    let (reads, syncs) = (device_reads(), device_syncs());
    f();
    (device_reads() - reads, device_syncs() - syncs)
}

#[test]
fn one_read_per_pass_and_no_sync() {
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
    let momentum = SgdConfig::new().with_momentum(Some(MomentumConfig::new().with_dampening(0.0)));

    // Reads in each of three steps: LookSAM's one-pass steps and Momentum-SAM's steps read
    // once, the others once per pass.
    let variant = |variant| SamConfig::new().with_variant(variant);
    let scheduled = |schedule| SamConfig::new().with_schedule(Some(schedule));
    let adaptive = |c| SamSchedule::Adaptive {
        decay: 0.9,
        threshold_start: c,
        threshold_end: c,
        steps: 3,
    };
    let variants = [
        ("SAM", SamConfig::new(), [2, 2, 2]),
        ("ASAM", SamConfig::new().with_adaptive(true), [2, 2, 2]),
        ("GSAM", variant(SamVariant::gsam()), [2, 2, 2]),
        (
            "Friendly-SAM",
            variant(SamVariant::friendly_sam()),
            [2, 2, 2],
        ),
        ("LookSAM", variant(SamVariant::look_sam()), [2, 1, 1]),
        (
            "Momentum-SAM",
            variant(SamVariant::momentum_sam()),
            [1, 1, 1],
        ),
        // A schedule's base step reads once, as the base optimizer's step; AE-SAM reads the
        // first gradient's norm to decide (its base step needs no other read).
        (
            "SAM every 2",
            scheduled(SamSchedule::Every { k: 2 }),
            [2, 1, 2],
        ),
        ("AE-SAM firing", scheduled(adaptive(-1e6)), [3, 3, 3]),
        ("AE-SAM not firing", scheduled(adaptive(1e6)), [1, 1, 1]),
    ];
    for (name, config, reads) in variants {
        for scaling in [None, scaling.clone()] {
            let f16 = scaling.is_some();
            let mut sam = config
                .clone()
                .with_loss_scaling(scaling)
                .init(momentum.init());
            let mut model = Some(model.clone());
            for (step, reads) in reads.into_iter().enumerate() {
                let n = waits(|| {
                    let taken =
                        sam.step_with(1e-3, model.take().unwrap(), |m: &Mlp<B>| loss(m, &b));
                    model = Some(taken.unwrap().module);
                });
                assert_eq!(n, (reads, 0), "{name} (loss scaling {f16}), step {step}");
            }
        }
    }

    let mut scaled =
        MixedPrecisionConfig::new(LossScalerConfig::new()).init(SgdConfig::new().init());
    let n = waits(|| {
        let grads =
            GradientsParams::from_grads(scaled.scale_loss(loss(&model, &b)).backward(), &model);
        drop(scaled.try_step(1e-3, model.clone(), grads));
    });
    assert_eq!(n, (1, 0), "loss-scaled step");

    let sam = || {
        SamConfig::new()
            .with_loss_scaling(scaling.clone())
            .init(AdamConfig::new().init())
    };
    let mut exact = AccumulationConfig::new(3).init(sam());
    let n = waits(|| drop(exact.step(1e-3, model.clone(), &window, loss)));
    assert_eq!(n, (2, 0), "exact SAM over a window of 3");

    let mut per_micro_batch = AccumulationConfig::new(3)
        .with_ascent(Ascent::Local)
        .init(sam());
    let n = waits(|| drop(per_micro_batch.step(1e-3, model.clone(), &window, loss)));
    assert_eq!(
        n,
        (4, 0),
        "m-sharpness: one ascent norm per micro-batch, one descent norm"
    );

    let mut plain = AccumulationConfig::new(3).init(SgdConfig::new().init());
    let n = waits(|| drop(plain.step(1e-3, model.clone(), &window, loss)));
    assert_eq!(n, (1, 0), "plain accumulation over a window of 3");

    // Burn's Learner with `SamTraining`: one epoch of 6 batches (checkpoint and validation
    // included), SAM and Momentum-SAM.
    // The same with SAM's metrics registered: the losses they read join the step's read.
    for (config, reads) in [
        (SamConfig::new(), 12),
        (variant(SamVariant::momentum_sam()), 6),
    ] {
        for metrics in [false, true] {
            let n = waits(|| learner_epoch(config.init(momentum.init()), None, metrics));
            assert_eq!(
                n,
                (reads, 0),
                "SamTraining, {:?}, metrics {metrics}",
                config.variant
            );
        }
    }
    // Data-parallel over two replicas in their own threads: 3 steps of a batch per replica,
    // and one sync per pass before the workers read the model. Synced: a read per pass (its
    // combined norm); Local: each replica reads its own ascent's norm, then the descent one.
    for (ascent, reads, syncs) in [(Ascent::Synced, 6, 6), (Ascent::Local, 9, 3)] {
        for metrics in [false, true] {
            let sam = SamConfig::new().init(momentum.init());
            let n = waits(|| learner_epoch(sam, Some(ascent), metrics));
            assert_eq!(
                n,
                (reads, syncs),
                "SamTraining over two replicas, {ascent:?}, metrics {metrics}"
            );
        }
    }
}

/// One `Learner` epoch of 6 batches of 20 under `SamTraining`, on one device or, with an
/// `ascent`, data-parallel over two replicas; with `metrics`, SAM's registered.
fn learner_epoch(optim: Sam<SgdOptim>, ascent: Option<Ascent>, metrics: bool) {
    use burn::data::dataloader::DataLoaderBuilder;
    use burn::data::dataset::InMemDataset;
    use burn::train::metric::LossMetric;
    use burn::train::{Learner, SupervisedTraining};

    let model = Classifier {
        mlp: MlpConfig::new(vec![2, 8, 3]).init(&Default::default()),
    };
    let train = DataLoaderBuilder::new(ClassBatcher)
        .batch_size(20)
        .build(InMemDataset::new(blobs(120, 7, 2, 3)));
    let valid = DataLoaderBuilder::new(ClassBatcher)
        .batch_size(60)
        .build(InMemDataset::new(blobs(60, 99, 2, 3)));
    let strategy = match ascent {
        None => SamTraining::new(Default::default(), &optim),
        Some(ascent) => {
            SamTraining::data_parallel(vec![Default::default(); 2], &optim, ascent).expect("SAM")
        }
    };
    let dir = std::env::temp_dir().join(format!("burn-sam-waits-{}", std::process::id()));
    let mut training = SupervisedTraining::new(&dir, train, valid);
    if metrics {
        training = training
            .metric_train_numeric(SamMetric::sharpness(&optim))
            .metric_train_numeric(SamMetric::grad_norm(&optim))
            .metric_train_numeric(SamMetric::sam_steps(&optim));
    }
    training
        .metrics((LossMetric::new(),))
        .renderer(Quiet)
        .with_application_logger(None)
        .with_training_strategy(strategy.into_strategy())
        .num_epochs(1)
        .launch(Learner::new(model, optim, 0.05));
    let _ = std::fs::remove_dir_all(&dir);
}
