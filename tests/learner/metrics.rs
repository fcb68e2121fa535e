//! SAM's metrics in the `Learner`: registered with one line each, they are written to the
//! run's logs with the values the direct path's report gives for the same steps (the
//! sharpness, the gradient norm, the loss scale, the overflowed steps, the share of SAM steps),
//! one line per training output; windows of 3 with the partial last window, in f32, in
//! loss-scaled f16 (one window overflowing) and under a schedule of SAM steps.

use burn_sam::strategy::Linkable;
use burn_sam::StepReport;
use burn_sam_accum::train::SamMetric;
use burn_sam_accum::{AccumulationConfig, MicroBatch};

use super::*;

/// Each metric's name in the logs, and its value for a step's report as the log writes it.
type Column = (&'static str, fn(&StepReport) -> f64);

const COLUMNS: [Column; 5] = [
    ("SAM_Sharpness", StepReport::sharpness),
    ("SAM_Gradient_Norm", StepReport::grad_norm),
    ("Loss_Scale", |report| f64::from(report.loss_scale)),
    ("Overflowed_Steps", |report| {
        100.0 * f64::from(u8::from(report.outcome.overflowed()))
    }),
    ("SAM_Steps", |report| {
        100.0 * f64::from(u8::from(report.outcome.two_passes()))
    }),
];

/// One epoch of `optim` in the `Learner` with SAM's metrics and windows of 3 (batches of 16
/// unshuffled: windows of 3, 3 and 2), and each metric's log lines.
fn learner_logs(name: &str, model: Model, optim: Sam<SgdOptim>) -> Vec<Vec<String>> {
    let dir = artifacts(name);
    let training = SupervisedTraining::new(&dir, train_loader(16, None), valid_loader())
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .metric_train_numeric(SamMetric::sharpness(&optim))
        .metric_train_numeric(SamMetric::grad_norm(&optim))
        .metric_train_numeric(SamMetric::loss_scale(&optim))
        .metric_train_numeric(SamMetric::overflowed_steps(&optim))
        .metric_train_numeric(SamMetric::sam_steps(&optim))
        .renderer(Quiet)
        .with_application_logger(None)
        .num_epochs(1);
    let strategy = SamTraining::new(Default::default(), &optim)
        .with_accumulation(3)
        .unwrap();
    training
        .with_training_strategy(strategy.into_strategy())
        .launch(Learner::new(model, optim, 0.05));
    COLUMNS
        .iter()
        .map(|(file, _)| {
            let path = dir.join(format!("train/epoch-1/{file}.log"));
            let log = std::fs::read_to_string(&path)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            log.lines().map(str::to_string).collect()
        })
        .collect()
}

/// The same windows through `Accumulation`: each step's report and micro-batch count.
fn direct_reports(model: Model, optim: Sam<SgdOptim>) -> Vec<(StepReport, usize)> {
    let mut accumulation = AccumulationConfig::new(3).init(optim);
    let batches: Vec<_> = train_loader(16, None).iter().map(MicroBatch::new).collect();
    let mut module = model;
    let mut reports = Vec::new();
    for window in accumulation.windows(batches) {
        let step = accumulation
            .step(0.05, module, &window, |m: &Model, batch| m.loss(batch))
            .unwrap();
        reports.push((step.report.sam.expect("SAM's report"), window.len()));
        module = step.module;
    }
    reports
}

/// The log lines the direct reports give: one per micro-batch, a value not defined on a
/// step logged with weight 0.
fn expected_logs(reports: &[(StepReport, usize)]) -> Vec<Vec<String>> {
    COLUMNS
        .iter()
        .map(|(_, value)| {
            let line = |report: &StepReport| match value(report) {
                v if v.is_finite() => format!("{v},1"),
                _ => "0,0".to_string(),
            };
            reports
                .iter()
                .flat_map(|(report, items)| vec![line(report); *items])
                .collect()
        })
        .collect()
}

fn check(name: &str, model: Model, optim: impl Fn() -> Sam<SgdOptim>) -> Vec<(StepReport, usize)> {
    let logs = learner_logs(name, model.clone(), optim());
    let reports = direct_reports(model, optim());
    assert_eq!(logs, expected_logs(&reports), "{name}");
    reports
}

#[test]
fn sam_metrics_in_the_logs_equal_the_direct_reports_in_f32() {
    let sam = || SamConfig::new().with_rho(0.05).init(sgd());
    let reports = check("metrics-f32", model(), sam);
    // 3 windows of 3, 3 and 2 micro-batches, each two passes: SAM's losses rise at w + e.
    assert_eq!(reports.len(), 3);
    for (report, _) in &reports {
        assert!(report.sharpness() > 0.0, "{report:?}");
        assert!(report.loss.is_finite() && report.grad_norm() > 0.0);
    }
}

#[test]
fn sam_metrics_in_the_logs_equal_the_direct_reports_in_loss_scaled_f16() {
    // 2^20 overflows the first window's f16 gradients: a skipped step in both logs.
    let sam = || {
        SamConfig::new()
            .with_rho(0.05)
            .with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(1_048_576.0)))
            .init(sgd())
    };
    let reports = check("metrics-f16", cast_params(model(), FloatDType::F16), sam);
    assert!(reports
        .iter()
        .any(|(report, _)| report.outcome.overflowed()));
    assert!(reports
        .iter()
        .any(|(report, _)| report.sharpness().is_finite()));
    assert!(reports
        .iter()
        .any(|(report, _)| report.loss_scale < 1_048_576.0));
}

#[test]
fn sam_metrics_in_the_logs_equal_the_direct_reports_under_a_schedule() {
    let sam = || {
        SamConfig::new()
            .with_rho(0.05)
            .with_schedule(Some(SamSchedule::Every { k: 2 }))
            .init(sgd())
    };
    let reports = check("metrics-every-2", model(), sam);
    let two_passes: Vec<bool> = reports
        .iter()
        .map(|(r, _)| r.outcome.two_passes())
        .collect();
    assert_eq!(two_passes, [true, false, true]);
    // A base step has no loss at w + e: no sharpness.
    assert!(reports[1].0.sharpness().is_nan() && reports[1].0.loss.is_finite());
}

#[test]
fn a_run_without_sam_metrics_keeps_no_loss() {
    let optim = SamConfig::new().with_rho(0.05).init(sgd());
    let link = optim.step_link();
    sam_two_epochs("metrics-none", model(), optim);
    // Nothing noted: the Learner's steps report no losses.
    let report = link.last_report().expect("a step's report");
    assert!(report.loss.is_nan() && report.perturbed_loss.is_nan());
    assert!(report.ascent_grad_norm.is_finite());
}
