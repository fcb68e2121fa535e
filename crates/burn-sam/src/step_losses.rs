//! The losses a step's passes saw, noted by whoever runs the passes and read back with the
//! step's norms in its one read: the report's `L(w)`, `L(w + e)` and sharpness.

use std::fmt;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::float::widen;
use crate::param_map::AnyValue;

/// The step's noted losses: at the weights, and at the perturbed weights.
#[derive(Default)]
pub(crate) struct StepLosses {
    at_weights: NotedLoss,
    perturbed: NotedLoss,
}

/// `sum_i w_i L_i` of a pass's micro-batches (a `Tensor<B, 1>`, detached) and `sum_i w_i`.
#[derive(Default)]
struct NotedLoss {
    sum: Option<AnyValue>,
    weight: f64,
}

impl fmt::Debug for StepLosses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let weight = |noted: &NotedLoss| noted.sum.as_ref().map(|_| noted.weight);
        f.debug_struct("StepLosses")
            .field("at_weights", &weight(&self.at_weights))
            .field("perturbed", &weight(&self.perturbed))
            .finish()
    }
}

impl StepLosses {
    /// Adds micro-batch loss `loss` (unscaled) with weight `weight` (its share of the window)
    /// to the pass at the perturbed weights or at the weights.
    pub fn note<B: Backend>(&mut self, loss: Tensor<B, 1>, weight: f64, perturbed: bool) {
        let noted = match perturbed {
            true => &mut self.perturbed,
            false => &mut self.at_weights,
        };
        // A whole batch's loss is its own term: no kernel for it.
        let term = match weight == 1.0 {
            true => widen(loss),
            false => widen(loss).mul_scalar(weight),
        };
        let sum = match noted.sum.as_ref().and_then(AnyValue::get::<Tensor<B, 1>>) {
            Some(sum) => sum + term,
            None => term,
        };
        noted.sum = Some(AnyValue::new(sum));
        noted.weight += weight;
    }

    /// The two passes' sums, on the device (`None` where nothing was noted).
    pub fn sums<B: Backend>(&self) -> [Option<Tensor<B, 1>>; 2] {
        [&self.at_weights, &self.perturbed].map(|noted| noted.sum.as_ref()?.get())
    }

    /// `[L(w), L(w + e)]` from the sums read back: each the weighted mean (NaN where nothing
    /// was noted).
    pub fn means(&self, sums: [f64; 2]) -> [f64; 2] {
        let mean = |noted: &NotedLoss, sum: f64| match (noted.sum.is_some(), noted.weight) {
            (false, _) => f64::NAN,
            (true, 1.0) => sum,
            (true, weight) => sum / weight,
        };
        [
            mean(&self.at_weights, sums[0]),
            mean(&self.perturbed, sums[1]),
        ]
    }
}
