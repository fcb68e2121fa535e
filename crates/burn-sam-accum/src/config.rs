use burn::config::Config;
use burn_sam::ConfigError;

use crate::accumulation::Accumulation;

/// How SAM uses the micro-batches of a window.
///
/// ```
/// use burn_sam_accum::{AccumulationConfig, SamMode};
///
/// // m-sharpness: each micro-batch perturbed by its own gradient.
/// let config = AccumulationConfig::new(4).with_sam_mode(SamMode::PerMicroBatch);
/// assert_eq!(AccumulationConfig::new(4).sam_mode, SamMode::Exact); // the default
/// # assert_eq!(config.sam_mode, SamMode::PerMicroBatch);
/// ```
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum SamMode {
    /// One perturbation from the whole window's gradient, then the descent gradient over the
    /// whole window at the perturbed weights: SAM on the large batch, exactly.
    Exact,
    /// m-sharpness (Andriushchenko & Flammarion, 2022): each micro-batch is perturbed by its
    /// own gradient, the descent gradients are accumulated, and the base optimizer steps once.
    PerMicroBatch,
}

/// Configuration of [`Accumulation`]: how many micro-batches make one optimizer step.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::Linear;
/// use burn::optim::SgdConfig;
/// use burn_sam_accum::AccumulationConfig;
///
/// type B = Autodiff<Flex>;
/// // Any Burn optimizer (here plain SGD), a `LossScaled` or a `Sam` one.
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
    /// How a [`Sam`](burn_sam::Sam) optimizer uses the window; ignored by other optimizers.
    #[config(default = "SamMode::Exact")]
    pub sam_mode: SamMode,
}

impl AccumulationConfig {
    /// Wraps `optimizer`: a Burn optimizer ([`Sgd`](burn::optim::Sgd), [`Adam`](burn::optim::Adam),
    /// ...), a [`LossScaled`](burn_sam::LossScaled) one or a [`Sam`](burn_sam::Sam) one.
    ///
    /// # Panics
    /// When the configuration is invalid, with the field and its allowed range;
    /// [`AccumulationConfig::try_init`] returns it instead.
    #[track_caller]
    pub fn init<O>(&self, optimizer: O) -> Accumulation<O> {
        // `panic!` in this body, not in a closure, so that `track_caller` names the caller.
        match self.try_init(optimizer) {
            Ok(accumulation) => accumulation,
            Err(error) => panic!("{error}"),
        }
    }

    /// Wraps `optimizer`, or says which field is invalid.
    pub fn try_init<O>(&self, optimizer: O) -> Result<Accumulation<O>, ConfigError> {
        self.validate()?;
        Ok(Accumulation::new(self.clone(), optimizer))
    }

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
