//! [`AccumulationConfig`]: how many micro-batches make one optimizer step.

use burn::config::Config;
use burn_sam::ConfigError;

use crate::ascent::Ascent;

/// Configuration of [`Accumulation`](crate::Accumulation): how many micro-batches make one
/// optimizer step.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::Linear;
/// use burn::optim::SgdConfig;
/// use burn_sam_accum::AccumulationConfig;
///
/// type B = Autodiff<Flex>;
/// // Any Burn optimizer (here plain SGD), a `MixedPrecision` or a `Sam` one.
/// let sgd = SgdConfig::new().init::<B, Linear<B>>();
/// let accumulation = AccumulationConfig::new(4).try_init(sgd)?;
/// assert_eq!(accumulation.config().window, 4);
///
/// // A window of 0 is refused, naming the field and its range.
/// let error = AccumulationConfig::new(0).validate().unwrap_err();
/// assert!(error.to_string().contains("window"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Config, Debug)]
pub struct AccumulationConfig {
    /// Micro-batches per optimizer step (at least 1). A shorter window, such as the rest of
    /// an epoch, steps with what it holds.
    pub window: usize,
    /// Where a [`Sam`](burn_sam::Sam) optimizer takes its ascent: once for the window, or on
    /// each micro-batch (m-sharpness); ignored by other optimizers.
    #[config(default = "Ascent::Synced")]
    pub ascent: Ascent,
}

impl AccumulationConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check(
            "AccumulationConfig",
            "window",
            self.window as f64,
            "an integer >= 1",
            self.window >= 1,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_zero_is_rejected_by_name() {
        let error = AccumulationConfig::new(0).try_init(()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid AccumulationConfig: `window` = 0, allowed: an integer >= 1"
        );
        assert!(AccumulationConfig::new(1).try_init(()).is_ok());
    }
}
