//! `SamSchedule::Adaptive` (AE-SAM) against the paper's rule written out in float64
//! (`reference/schedule_reference.py` wrote `tests/fixtures/schedule_reference.json`), its
//! limits (SAM and the base optimizer bitwise), its ascent that takes a base step itself, and
//! its statistics in the record.

use std::collections::HashMap;

use burn::optim::{Optimizer, SgdConfig};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use burn_sam::{SamConfig, SamSchedule, StepOutcome};
use burn_sam_suite::{load_record, record_bytes, Mlp};
use serde::Deserialize;

use super::fixture::{fixture_case, FixtureMlp};
use super::parity::torch_sgd;
use super::util::{assert_close, batch_grads, mse, narrow_scalars, tensors, tolerance};

const FIXTURE: &str = include_str!("../fixtures/schedule_reference.json");

#[derive(Deserialize)]
struct Case {
    #[serde(flatten)]
    mlp: FixtureMlp,
    options: HashMap<String, f64>,
    rho: f64,
    schedule: HashMap<String, f64>,
    sam_steps: Vec<bool>,
    trajectory: Vec<Vec<Vec<f64>>>,
}

type Batch<B> = (Tensor<B, 2>, Tensor<B, 2>);

/// The first fixture case's model and 12 batches, as a problem of its own: drawn without the
/// backend's generator, which tests running beside this one draw from too, so that which
/// steps fire is the same on every run.
fn fixed_problem<B: AutodiffBackend>() -> (Mlp<B>, Vec<Batch<B>>) {
    let case: Case = fixture_case(FIXTURE, "adaptive_sgd");
    let model = case.mlp.model::<B>();
    let batches = (0..case.trajectory.len())
        .map(|step| case.mlp.batch::<B>(step))
        .collect();
    (model, batches)
}

impl Case {
    fn schedule(&self) -> SamSchedule {
        SamSchedule::Adaptive {
            decay: self.schedule["decay"],
            threshold_start: self.schedule["threshold_start"],
            threshold_end: self.schedule["threshold_end"],
            steps: self.schedule["steps"] as usize,
        }
    }
}

/// The case's trajectory and decisions: SAM steps where the paper's rule fires, the base
/// optimizer's steps (one pass each) where it does not.
pub fn run<B: AutodiffBackend>(name: &str) {
    let case: Case = fixture_case(FIXTURE, name);
    let lr = case.options["lr"];
    let config = SamConfig::new()
        .with_rho(case.rho)
        .with_schedule(Some(case.schedule()));
    let mut sam = config.init(torch_sgd::<B>(&case.options));
    let mut model = case.mlp.model::<B>();
    let tol = tolerance::<B>();
    for (step, expected) in case.trajectory.iter().enumerate() {
        let (x, y) = case.mlp.batch::<B>(step);
        let mut passes = 0;
        let loss = |m: &Mlp<B>| {
            passes += 1;
            mse(m.forward(x.clone()), y.clone())
        };
        let taken = sam.step_with(lr, model, loss).unwrap();
        let sam_step = case.sam_steps[step];
        let outcome = match sam_step {
            true => StepOutcome::Applied,
            false => StepOutcome::BaseStep,
        };
        assert_eq!(taken.report.outcome, outcome, "{name} step {step}");
        assert_eq!(passes, 1 + usize::from(sam_step), "{name} step {step}");
        model = taken.module;
        let what = format!("{name} step {}", step + 1);
        assert_close(&tensors(&model), expected, tol, &what);
    }
}

/// A threshold that always fires is SAM bitwise, one that never fires the base optimizer
/// (through SAM's precision path, `rho` 0), and `Optimizer::step` under `step_per_pass`
/// learns from `awaits_descent` that a base step's ascent took the whole step.
pub fn limits_and_the_ascent_that_steps<B: AutodiffBackend>() {
    let (start, batches) = fixed_problem::<B>();
    let adaptive = |decay, c| SamSchedule::Adaptive {
        decay,
        threshold_start: c,
        threshold_end: c,
        steps: 10,
    };
    let trajectory = |config: SamConfig| {
        let mut sam = config.init(SgdConfig::new().init());
        let mut model = start.clone();
        let mut outcomes = Vec::new();
        for (x, y) in &batches {
            let loss = |m: &Mlp<B>| mse(m.forward(x.clone()), y.clone());
            let step = sam.step_with(0.1, model, loss).unwrap();
            outcomes.push(step.report.outcome);
            model = step.module;
        }
        (tensors(&model), outcomes)
    };
    let sam = trajectory(SamConfig::new());
    let always = trajectory(SamConfig::new().with_schedule(Some(adaptive(0.9, -1e6))));
    assert_eq!(
        always, sam,
        "an adaptive threshold that always fires is SAM"
    );
    let base = trajectory(SamConfig::new().with_rho(0.0));
    let never = trajectory(SamConfig::new().with_schedule(Some(adaptive(0.9, 1e6))));
    assert_eq!(
        never.0, base.0,
        "one that never fires is the base optimizer"
    );
    assert!(never.1.iter().all(|o| *o == StepOutcome::BaseStep));

    let config = SamConfig::new().with_schedule(Some(adaptive(0.5, 0.5)));
    let by_closure = trajectory(config.clone());
    assert!(
        by_closure.1.contains(&StepOutcome::BaseStep),
        "{:?}",
        by_closure.1
    );
    assert!(
        by_closure.1.contains(&StepOutcome::Applied),
        "{:?}",
        by_closure.1
    );
    let mut optim = config.init(SgdConfig::new().init()).step_per_pass();
    let mut model = start.clone();
    for batch in &batches {
        model = optim.step(0.1, model.clone(), batch_grads(&model, batch));
        if optim.awaits_descent() {
            model = optim.step(0.1, model.clone(), batch_grads(&model, batch));
        }
        assert!(!optim.awaits_descent());
    }
    assert_eq!(tensors(&model), by_closure.0, "Optimizer::step");
    let last = optim.last_report().expect("a report");
    assert_eq!(last.outcome, *by_closure.1.last().unwrap());
}

/// The statistics are in the record: 8 steps in one run equal 4, a record round trip and 4,
/// decision by decision; a resume without them decides otherwise.
pub fn records_resume_the_statistics<B: AutodiffBackend>() {
    let (start, batches) = fixed_problem::<B>();
    let batches = &batches[..8];
    let config = SamConfig::new().with_schedule(Some(SamSchedule::Adaptive {
        decay: 0.5,
        threshold_start: 0.5,
        threshold_end: -0.5,
        steps: 8,
    }));
    let run = |sam: &mut burn_sam::Sam<_>,
               mut model: Mlp<B>,
               batches: &[(Tensor<B, 2>, Tensor<B, 2>)]| {
        let mut outcomes = Vec::new();
        for (x, y) in batches {
            let loss = |m: &Mlp<B>| mse(m.forward(x.clone()), y.clone());
            let step = sam.step_with(0.1, model, loss).unwrap();
            outcomes.push(step.report.outcome);
            model = step.module;
        }
        (model, outcomes)
    };
    let mut uninterrupted = config.init(SgdConfig::new().init());
    let (expected, outcomes) = run(&mut uninterrupted, start.clone(), batches);
    assert!(
        outcomes[4..].contains(&StepOutcome::BaseStep),
        "{outcomes:?}"
    );
    assert!(
        outcomes[4..].contains(&StepOutcome::Applied),
        "{outcomes:?}"
    );

    let (first, second) = batches.split_at(4);
    let mut sam = config.init(SgdConfig::new().init());
    let (model, _) = run(&mut sam, start.clone(), first);
    let mut record = Optimizer::<Mlp<B>, B>::to_record(&sam);
    let statistics = record.1.schedule.expect("the statistics are recorded");
    assert!(statistics.mean > 0.0 && statistics.variance > 0.0);
    let bytes = record_bytes::<B, _>(record.clone());
    let resumed = config.init(SgdConfig::new().init());
    let mut resumed = Optimizer::<Mlp<B>, B>::load_record(resumed, load_record::<B, _>(bytes));
    let (resumed_model, resumed_outcomes) = run(&mut resumed, model.clone(), second);
    assert_eq!(resumed_outcomes, outcomes[4..]);
    if narrow_scalars::<B>() {
        assert_close(
            &tensors(&resumed_model),
            &tensors(&expected),
            1e-8,
            "resumed",
        );
    } else {
        assert_eq!(tensors(&resumed_model), tensors(&expected));
    }

    // Without them (a record from before schedules) the statistics start from 0.
    record.1.schedule = None;
    let amnesic = config.init(SgdConfig::new().init());
    let mut amnesic = Optimizer::<Mlp<B>, B>::load_record(amnesic, record);
    let (_, amnesic_outcomes) = run(&mut amnesic, model, second);
    assert_ne!(
        amnesic_outcomes,
        outcomes[4..],
        "the statistics carry real state"
    );
}

/// A refused adaptive ascent hands back the module it was given and forgets its decision:
/// foreign gradients, and (under loss scaling) an unscaled loss on a base step; the
/// statistics change only with a step taken.
pub fn refusals_hand_back_w_and_change_nothing<B: AutodiffBackend>() {
    let (model, batches) = fixed_problem::<B>();
    let foreign = fixed_problem::<B>().0; // the same weights, other parameters
    let never = SamSchedule::Adaptive {
        decay: 0.9,
        threshold_start: 1e6,
        threshold_end: 1e6,
        steps: 1,
    };
    let scaling = burn_sam::LossScalerConfig::new().with_init_scale(256.0);
    let mut sam = SamConfig::new()
        .with_schedule(Some(never))
        .with_loss_scaling(Some(scaling))
        .init(SgdConfig::new().init());
    let (x, y) = &batches[0];
    let w = tensors(&model);
    let scaled = |sam: &burn_sam::Sam<_>, m: &Mlp<B>| {
        use burn_sam::LossScaling;
        super::util::grads(m, sam.scale_loss(mse(m.forward(x.clone()), y.clone())))
    };
    let statistics = |sam: &burn_sam::Sam<_>| Optimizer::<Mlp<B>, B>::to_record(sam).1.schedule;
    let fresh = statistics(&sam);

    let wrong = scaled(&sam, &foreign);
    let refused = sam.ascend(0.1, model, wrong).unwrap_err();
    assert_eq!(tensors(&refused.module), w, "foreign gradients");
    let unscaled = super::util::grads(
        &refused.module,
        mse(refused.module.forward(x.clone()), y.clone()),
    );
    let refused = sam.ascend(0.1, refused.module, unscaled).unwrap_err();
    assert_eq!(refused.error, burn_sam::SamError::UnscaledLoss);
    assert_eq!(tensors(&refused.module), w, "an unscaled loss");
    assert!(!sam.awaits_descent() && sam.needs_ascent());
    assert_eq!(sam.stats().steps, 0);
    assert_eq!(statistics(&sam), fresh, "no statistics from a refused step");

    let grads = scaled(&sam, &refused.module);
    let stepped = sam.ascend(0.1, refused.module, grads).unwrap();
    assert!(!sam.awaits_descent(), "the ascent took the base step");
    assert_eq!(sam.last_report().unwrap().outcome, StepOutcome::BaseStep);
    assert_ne!(tensors(&stepped), w);
    assert_ne!(
        statistics(&sam),
        fresh,
        "the step's gradient is in the statistics"
    );
}
