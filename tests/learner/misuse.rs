//! Misuse that stops at the first step: `Sam` in Burn's default strategy, and a strategy built
//! from another optimizer than the one it steps.

use super::*;

/// Burn's default strategy steps the optimizer once per batch: `Sam` there (f32 SAM, which
/// would ascend and descend on different batches, and Momentum-SAM, whose Learner would take
/// its pass at `w`) stops at its first step with the fix for that variant.
#[test]
fn sam_in_burns_default_strategy_stops_at_its_first_step() {
    let msam = SamVariant::momentum_sam();
    let cases = [
        (
            SamConfig::new().with_rho(0.05),
            [
                "`Sam` (SAM) was stepped through `Optimizer::step`",
                "ascent and descent would be taken on different batches",
                "SamTraining::strategy(device, &optim)",
            ],
        ),
        (
            SamConfig::new().with_rho(1.0).with_variant(msam),
            [
                "`Sam` (Momentum-SAM)",
                "one pass belongs at its look-ahead",
                "SamTraining::strategy(device, &optim)",
            ],
        ),
    ];
    for (config, words) in cases {
        let sam = config.init(sgd());
        let name = format!("default-{}", config.variant.name());
        let message = first_step_panic(&name, |dir| {
            let learner = Learner::new(model(), sam, 0.05);
            run(dir, train_loader(16, Some(3)), 2, learner, None, None);
        });
        for words in words {
            assert!(message.contains(words), "{words:?} not in {message}");
        }
    }
}

/// A `SamTraining` built from a second optimizer of the same configuration, not the one the
/// `Learner` steps, stops at the first step with one message: f32 SAM, loss-scaled f16 SAM
/// (whose `TrainStep` did scale its loss) and Momentum-SAM. (A strategy built from an optimizer
/// of another type than the `Learner`'s does not compile.)
#[test]
fn a_strategy_built_from_another_optimizer_stops_at_its_first_step() {
    let expected = "the `Learner` stepped another optimizer";
    let scaling = Some(LossScalerConfig::new().with_init_scale(1024.0));
    let configs = [
        ("sam", SamConfig::new().with_rho(0.05), false),
        (
            "f16-sam",
            SamConfig::new().with_rho(0.05).with_loss_scaling(scaling),
            true,
        ),
        (
            "msam",
            SamConfig::new()
                .with_rho(1.0)
                .with_variant(SamVariant::momentum_sam()),
            false,
        ),
    ];
    for (name, config, f16) in configs {
        let optim = config.init(sgd());
        let other = config.init(sgd());
        let model = match f16 {
            true => cast_params(model(), FloatDType::F16),
            false => model(),
        };
        let message = first_step_panic(&format!("other-{name}"), |dir| {
            let strategy = SamTraining::new(Default::default(), &other);
            let learner = Learner::new(model, optim, 0.05);
            run(
                dir,
                train_loader(16, Some(3)),
                2,
                learner,
                Some(strategy),
                None,
            );
        });
        assert!(message.contains(expected), "{name}: {message}");
        assert!(!message.contains("no loss was scaled"), "{name}: {message}");
    }
}
