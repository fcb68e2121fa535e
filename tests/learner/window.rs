//! The Learner's window is the direct window: `SamTraining` with accumulation computes what
//! `Accumulation` computes over the same micro-batches, bitwise, because both weight each
//! micro-batch's loss before its backward pass (the `TrainStep` through `scale_loss`). Windows
//! of 3 (weights 1/3, which round differently from 1/4), weighted by item counts, with the
//! partial last window of an epoch, in f32 and loss-scaled f16, for SAM, Momentum-SAM and
//! `LossScaled`; and an overflowing loss scale backs off on the same steps on both paths.

use burn_sam::LossScaleHandle;
use burn_sam_accum::{AccumulationConfig, MicroBatch};

use super::*;

/// 120 examples in batches of 16 are 8 micro-batches, 7 of 16 and one of 8: windows of 3 are
/// 3, 3 and a partial 2 (16 and 8 rows, so item weights 2/3 and 1/3).
const WINDOW: usize = 3;

/// What a path ends with: the weights `w` (for Momentum-SAM, not its look-ahead) and the loss
/// scale with its overflow count.
#[derive(Debug, PartialEq)]
struct End {
    weights: Vec<f32>,
    loss_scale: (f32, u64),
}

fn scale_of(handle: &LossScaleHandle) -> (f32, u64) {
    (handle.get(), handle.overflows())
}

/// `epochs` of `optim` from `model` under `SamTraining` with windows of 3 (weighted by items
/// with `items`) on the unshuffled batches, and the same windows through `Accumulation`.
fn both_paths<O>(
    name: &str,
    model: &Model,
    optim: impl Fn() -> O,
    items: bool,
    epochs: usize,
) -> (End, End)
where
    O: WindowOptimizer<Model, B> + 'static,
{
    let learner_optim = optim();
    let handle = learner_optim.loss_scale_handle();
    let strategy = SamTraining::new(Default::default(), &learner_optim)
        .with_accumulation(WINDOW)
        .unwrap();
    let strategy = match items {
        true => strategy.with_items(ClassBatch::len),
        false => strategy,
    };
    let learner = Learner::new(model.clone(), learner_optim, 0.05);
    let trained = run(
        &artifacts(name),
        train_loader(16, None),
        epochs,
        learner,
        Some(strategy),
        None,
    );
    let learner = End {
        weights: weights(&trained),
        loss_scale: scale_of(&handle),
    };

    let mut accumulation = AccumulationConfig::new(WINDOW).init(optim());
    let mut module = model.clone();
    for _ in 0..epochs {
        let loader = train_loader(16, None);
        let batches: Vec<_> = loader
            .iter()
            .map(|batch| match items {
                true => {
                    let rows = batch.len();
                    MicroBatch::with_items(batch, rows)
                }
                false => MicroBatch::new(batch),
            })
            .collect();
        for window in accumulation.windows(batches) {
            let step = accumulation
                .step(0.05, module, &window, |m: &Model, batch| m.loss(batch))
                .unwrap();
            module = step.module;
        }
    }
    let w = accumulation.optimizer().unperturbed(module);
    let direct = End {
        weights: weights(&w.valid()),
        loss_scale: scale_of(&accumulation.optimizer().loss_scale_handle()),
    };
    (learner, direct)
}

fn scaling(init: f64) -> Option<LossScalerConfig> {
    Some(LossScalerConfig::new().with_init_scale(init))
}

fn sam(scaling: Option<LossScalerConfig>) -> Sam<SgdOptim> {
    SamConfig::new()
        .with_rho(0.05)
        .with_loss_scaling(scaling)
        .init(sgd())
}

fn momentum_sam(scaling: Option<LossScalerConfig>) -> Sam<SgdOptim> {
    SamConfig::new()
        .with_rho(1.0)
        .with_variant(SamVariant::MomentumSam { mu: 0.9 })
        .with_loss_scaling(scaling)
        .init(sgd())
}

fn loss_scaled(init: f64) -> burn_sam::LossScaled<SgdOptim> {
    LossScaledConfig::new(LossScalerConfig::new().with_init_scale(init)).init(sgd())
}

/// Every case on one model in one float type: SAM, Momentum-SAM and `LossScaled`, windows of 3
/// with equal and with item weights. `scaled` puts loss scaling on SAM's two variants too.
fn every_case(dtype: &str, model: Model, scaled: bool) {
    let scaling = || scaling(1024.0).filter(|_| scaled);
    for items in [false, true] {
        let case = |what: &str| format!("{what}-{dtype}-items-{items}");
        let (learner, direct) = both_paths(&case("sam"), &model, || sam(scaling()), items, 1);
        assert_eq!(learner, direct, "{}", case("SAM"));
        let (learner, direct) =
            both_paths(&case("msam"), &model, || momentum_sam(scaling()), items, 1);
        assert_eq!(learner, direct, "{}", case("Momentum-SAM"));
        let (learner, direct) =
            both_paths(&case("scaled"), &model, || loss_scaled(1024.0), items, 1);
        assert_eq!(learner, direct, "{}", case("LossScaled"));
        // Training moved the weights: the paths agree on something.
        assert_ne!(
            learner.weights,
            weights(&model.valid()),
            "{}",
            case("moved")
        );
    }
}

#[test]
fn windows_of_three_equal_the_direct_path_in_f32() {
    every_case("f32", model(), false);
}

#[test]
fn windows_of_three_equal_the_direct_path_in_loss_scaled_f16() {
    every_case("f16", cast_params(model(), FloatDType::F16), true);
}

#[test]
fn an_overflowing_loss_scale_backs_off_on_the_same_steps() {
    // 2^20 overflows the f16 gradients of the first windows (and would at a third of that
    // scale were the micro-batches weighted after backward): both paths skip the same windows
    // and end at the same scale and weights.
    const INIT: f64 = 1_048_576.0;
    let model = cast_params(model(), FloatDType::F16);
    let runs = [
        (
            "SAM",
            both_paths("overflow-sam", &model, || sam(scaling(INIT)), true, 2),
        ),
        (
            "LossScaled",
            both_paths("overflow-scaled", &model, || loss_scaled(INIT), true, 2),
        ),
    ];
    for (what, (learner, direct)) in runs {
        assert_eq!(learner, direct, "{what}");
        let (scale, overflows) = learner.loss_scale;
        assert!(
            overflows > 0 && f64::from(scale) < INIT,
            "{what}: {scale} after {overflows}"
        );
        assert_ne!(
            learner.weights,
            weights(&model.valid()),
            "{what}: no step applied"
        );
    }
}
