//! SAM's numbers as Burn `Learner` metrics: the sharpness `L(w + e) - L(w)`, the gradient
//! norm, the loss scale, the steps an overflow skipped and the share of SAM's two-pass steps.

use std::sync::Arc;

use burn::train::metric::{
    format_float, Metric, MetricAttributes, MetricMetadata, MetricName, Numeric, NumericAttributes,
    NumericEntry, SerializedEntry,
};
use burn_sam::strategy::{Linkable, ReportFeed};
use burn_sam::StepReport;

/// One of SAM's numbers, per optimizer step, as a numeric Burn metric with `Input = ()` (like
/// Burn's learning-rate metric): one line each to register, with the optimizer given to
/// [`SamTraining`](super::SamTraining) and to `Learner::new`:
/// `.metric_train_numeric(SamMetric::sharpness(&optim))` on `SupervisedTraining`.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::Linear;
/// use burn::optim::SgdConfig;
/// use burn::train::metric::Metric;
/// use burn_sam::SamConfig;
/// use burn_sam_accum::train::SamMetric;
///
/// let optim = SamConfig::new().init(SgdConfig::new().init::<Autodiff<Flex>, Linear<Autodiff<Flex>>>());
/// let sharpness = SamMetric::sharpness(&optim);
/// // Burn writes it to `train/epoch-N/SAM_Sharpness.log`.
/// assert_eq!(sharpness.name().as_str(), "SAM Sharpness");
/// ```
///
/// It reads the report of the step each training output came from
/// ([`StepReport`](burn_sam::StepReport)), read back with the step's norms: no host wait of
/// its own. Registered, it has `SamTraining` keep each micro-batch's loss (one sum of a
/// `[1]` tensor each) and hand the outputs to the metrics just after the step rather than
/// just before; without it nothing is kept. With several replicas the report is the combined
/// step's, its losses the weighted means over the replicas' batches; across MPI ranks, rank
/// 0's, whose losses are over its own replicas' batches (the batches Burn's loss metric shows
/// there). A step where the number is not defined (the sharpness of a one-pass step) is
/// logged with weight 0 and left out of the epoch's mean.
#[derive(Clone)]
pub struct SamMetric {
    name: MetricName,
    feed: ReportFeed,
    value: fn(&StepReport) -> f64,
    unit: Option<&'static str>,
    higher_is_better: bool,
    precision: usize,
    state: Mean,
}

impl SamMetric {
    fn new(optim: &impl Linkable, name: &str, value: fn(&StepReport) -> f64) -> Self {
        Self {
            name: Arc::new(name.to_string()),
            feed: optim.step_link().subscribe(),
            value,
            unit: None,
            higher_is_better: false,
            precision: 4,
            state: Mean::default(),
        }
    }

    fn percent(mut self) -> Self {
        self.unit = Some("%");
        self.precision = 1;
        self
    }

    /// `L(w + e) - L(w)`, the sharpness SAM minimises
    /// ([`StepReport::sharpness`](burn_sam::StepReport::sharpness)), on SAM's two-pass steps.
    pub fn sharpness(optim: &impl Linkable) -> Self {
        Self::new(optim, "SAM Sharpness", StepReport::sharpness)
    }

    /// The gradient norm SAM divides by ([`StepReport::grad_norm`](burn_sam::StepReport::grad_norm)),
    /// unscaled.
    pub fn grad_norm(optim: &impl Linkable) -> Self {
        Self::new(optim, "SAM Gradient Norm", StepReport::grad_norm)
    }

    /// The loss scale of the step (1 without loss scaling).
    pub fn loss_scale(optim: &impl Linkable) -> Self {
        let mut metric = Self::new(optim, "Loss Scale", |report| f64::from(report.loss_scale));
        metric.precision = 0;
        metric
    }

    /// The share of steps an overflow skipped, in whole or in their ascent, in percent.
    pub fn overflowed_steps(optim: &impl Linkable) -> Self {
        Self::new(optim, "Overflowed Steps", |report| {
            percent(report.outcome.overflowed())
        })
        .percent()
    }

    /// The share of steps that took SAM's two passes, in percent: all of them for SAM, fewer
    /// under a [`SamSchedule`](burn_sam::SamSchedule), LookSAM or AE-SAM, none for
    /// Momentum-SAM.
    pub fn sam_steps(optim: &impl Linkable) -> Self {
        let mut metric = Self::new(optim, "SAM Steps", |report| {
            percent(report.outcome.two_passes())
        })
        .percent();
        metric.higher_is_better = true;
        metric
    }
}

fn percent(yes: bool) -> f64 {
    if yes {
        100.0
    } else {
        0.0
    }
}

impl Metric for SamMetric {
    type Input = ();

    fn update(&mut self, _item: &(), _metadata: &MetricMetadata) -> SerializedEntry {
        let value = self
            .feed
            .next()
            .flatten()
            .map_or(f64::NAN, |report| (self.value)(&report));
        let defined = value.is_finite();
        if defined {
            self.state.add(value);
        }
        let (current, running) = match defined {
            true => (value, self.state.mean()),
            false => (0.0, self.state.mean()),
        };
        let unit = self.unit.map(|unit| format!(" {unit}")).unwrap_or_default();
        let shown = |value: f64| match value.is_finite() {
            true => format_float(value, self.precision),
            false => "-".to_string(),
        };
        let formatted = format!(
            "epoch {}{unit} - batch {}{unit}",
            shown(running),
            shown(if defined { current } else { f64::NAN })
        );
        let serialized = NumericEntry::Aggregated {
            aggregated_value: current,
            count: usize::from(defined),
        };
        SerializedEntry::new(formatted, serialized.serialize())
    }

    fn clear(&mut self) {
        self.state = Mean::default();
    }

    fn name(&self) -> MetricName {
        self.name.clone()
    }

    fn attributes(&self) -> MetricAttributes {
        NumericAttributes {
            unit: self.unit.map(str::to_string),
            higher_is_better: self.higher_is_better,
        }
        .into()
    }
}

impl Numeric for SamMetric {
    fn value(&self) -> NumericEntry {
        NumericEntry::Aggregated {
            aggregated_value: self.state.last,
            count: 1,
        }
    }

    fn running_value(&self) -> NumericEntry {
        NumericEntry::Aggregated {
            aggregated_value: self.state.mean(),
            count: self.state.count,
        }
    }
}

/// The mean of the defined values of an epoch.
#[derive(Clone, Copy, Debug)]
struct Mean {
    sum: f64,
    count: usize,
    last: f64,
}

impl Default for Mean {
    fn default() -> Self {
        Self {
            sum: 0.0,
            count: 0,
            last: f64::NAN,
        }
    }
}

impl Mean {
    fn add(&mut self, value: f64) {
        self.sum += value;
        self.count += 1;
        self.last = value;
    }

    fn mean(&self) -> f64 {
        self.sum / self.count as f64
    }
}
