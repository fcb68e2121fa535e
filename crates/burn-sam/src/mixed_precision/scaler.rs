//! Dynamic loss scaling: PyTorch `GradScaler`'s update rule, with DeepSpeed's hysteresis and
//! optional bounds.

use burn::config::Config;
use burn::record::Record;

use crate::error::{ConfigError, LossScaleError};

/// Configuration of a dynamic [`LossScaler`]. The defaults are PyTorch `GradScaler`'s.
///
/// ```
/// use burn_sam::LossScalerConfig;
///
/// // DeepSpeed-style: tolerate one overflow before backing off, never below 1.
/// let scaler = LossScalerConfig::new()
///     .with_hysteresis(2)
///     .with_min_scale(Some(1.0))
///     .init();
/// assert_eq!(scaler.scale(), 65536.0);
/// ```
#[derive(Config, Debug)]
pub struct LossScalerConfig {
    /// Scale of the first step. Allowed: finite and `> 0`.
    #[config(default = 65536.0)]
    pub init_scale: f64,
    /// Factor applied after `growth_interval` clean steps. Allowed: finite and `> 1`.
    #[config(default = 2.0)]
    pub growth_factor: f64,
    /// Factor applied on overflow. Allowed: in `(0, 1)`.
    #[config(default = 0.5)]
    pub backoff_factor: f64,
    /// Clean steps in a row before the scale grows. Allowed: `>= 1`.
    #[config(default = 2000)]
    pub growth_interval: u64,
    /// Overflows in a row that back the scale off once (DeepSpeed's hysteresis; 1 backs off on
    /// every overflow, as PyTorch does). Allowed: `>= 1`.
    #[config(default = 1)]
    pub hysteresis: u32,
    /// The scale never backs off below this. Allowed: finite and `> 0`, at most `max_scale`.
    #[config(default = "None")]
    pub min_scale: Option<f64>,
    /// The scale never grows above this. Allowed: finite and `> 0`.
    #[config(default = "None")]
    pub max_scale: Option<f64>,
    /// Stop with [`LossScaleError`] after this many overflows in a row at `min_scale` (or
    /// with a scale that fell below f32's smallest normal number). `None` only logs errors.
    #[config(default = "None")]
    pub max_overflows_at_min: Option<u64>,
}

/// The state of a [`LossScaler`]: save it with any Burn recorder, alone or inside an
/// optimizer's record.
#[derive(Record, Clone, Copy, Debug, PartialEq)]
pub struct LossScalerRecord {
    /// The current scale, in f32 as PyTorch keeps it.
    pub scale: f32,
    /// Clean steps since the last overflow or growth.
    pub growth_tracker: u64,
    /// Overflows left before the next backoff.
    pub hysteresis_left: u32,
    /// Overflows in a row with the scale at its minimum.
    pub overflows_at_min: u64,
    /// Overflowed steps since creation.
    pub overflows: u64,
}

/// Dynamic loss scaling: multiply the loss by [`LossScaler::scale`] before the backward pass,
/// so that small f16 gradients do not flush to zero; divide the gradients by it before use;
/// skip steps whose gradients overflow and shrink the scale, grow it after a run of clean steps.
///
/// [`LossScaler::update`] follows PyTorch `GradScaler.update` exactly (checked against
/// `torch._amp_update_scale_`), plus optional hysteresis and bounds.
#[derive(Clone, Debug)]
pub struct LossScaler {
    config: LossScalerConfig,
    state: LossScalerRecord,
}

impl LossScalerConfig {
    /// Builds the scaler.
    ///
    /// # Panics
    /// When the configuration is invalid, with the message of [`LossScalerConfig::validate`].
    #[track_caller]
    pub fn init(&self) -> LossScaler {
        ConfigError::or_panic(self.try_init())
    }

    /// Builds the scaler, or says which field is invalid.
    pub fn try_init(&self) -> Result<LossScaler, ConfigError> {
        self.validate()?;
        Ok(LossScaler {
            config: self.clone(),
            state: LossScalerRecord {
                scale: self.init_scale as f32,
                growth_tracker: 0,
                hysteresis_left: self.hysteresis,
                overflows_at_min: 0,
                overflows: 0,
            },
        })
    }

    /// Checks every field against its allowed range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let check = |field, value, allowed, ok| {
            ConfigError::check("LossScalerConfig", field, value, allowed, ok)
        };
        let positive = |x: f64| x.is_finite() && x > 0.0;
        check(
            "init_scale",
            self.init_scale,
            "finite and > 0",
            positive(self.init_scale) && (self.init_scale as f32).is_finite(),
        )?;
        check(
            "growth_factor",
            self.growth_factor,
            "finite and > 1",
            self.growth_factor.is_finite() && self.growth_factor > 1.0,
        )?;
        check(
            "backoff_factor",
            self.backoff_factor,
            "in (0, 1)",
            self.backoff_factor > 0.0 && self.backoff_factor < 1.0,
        )?;
        check(
            "growth_interval",
            self.growth_interval as f64,
            ">= 1",
            self.growth_interval >= 1,
        )?;
        check(
            "hysteresis",
            self.hysteresis as f64,
            ">= 1",
            self.hysteresis >= 1,
        )?;
        if let Some(min) = self.min_scale {
            check("min_scale", min, "finite and > 0", positive(min))?;
        }
        if let Some(max) = self.max_scale {
            check("max_scale", max, "finite and > 0", positive(max))?;
        }
        if let (Some(min), Some(max)) = (self.min_scale, self.max_scale) {
            check("min_scale", min, "<= max_scale", min <= max)?;
        }
        Ok(())
    }
}

impl LossScaler {
    /// The current scale.
    pub fn scale(&self) -> f32 {
        self.state.scale
    }

    /// The configuration.
    pub fn config(&self) -> &LossScalerConfig {
        &self.config
    }

    /// Overflowed steps since creation (or since the loaded record's).
    pub fn overflows(&self) -> u64 {
        self.state.overflows
    }

    /// Records one optimizer step: `overflow` when any gradient was not finite.
    ///
    /// Errors only when `max_overflows_at_min` is set and reached.
    pub fn update(&mut self, overflow: bool) -> Result<(), LossScaleError> {
        let config = &self.config;
        let state = &mut self.state;
        if !overflow {
            state.overflows_at_min = 0;
            state.growth_tracker += 1;
            if state.growth_tracker == config.growth_interval {
                // Multiplied in f64 and stored in f32, as torch's `_amp_update_scale_`.
                let grown = (f64::from(state.scale) * config.growth_factor) as f32;
                if grown.is_finite() {
                    state.scale = config.max_scale.map_or(grown, |max| grown.min(max as f32));
                }
                state.growth_tracker = 0;
                state.hysteresis_left = config.hysteresis;
            }
            return Ok(());
        }
        state.overflows += 1;
        state.growth_tracker = 0;
        if state.hysteresis_left > 1 {
            state.hysteresis_left -= 1;
            log::debug!("loss scale {} kept: hysteresis", state.scale);
            return Ok(());
        }
        let floor = config.min_scale.map_or(0.0, |min| min as f32);
        let backed_off = ((f64::from(state.scale) * config.backoff_factor) as f32).max(floor);
        // Below f32's smallest normal number the scale cannot help any more.
        let at_min = backed_off == state.scale || backed_off < f32::MIN_POSITIVE;
        state.scale = backed_off;
        if !at_min {
            state.overflows_at_min = 0;
            log::debug!(
                "gradient overflow: loss scale backed off to {}",
                state.scale
            );
            return Ok(());
        }
        state.overflows_at_min += 1;
        log::error!(
            "gradient overflow with the loss scale at its minimum {} ({} in a row): the \
             gradients are not finite even unscaled",
            state.scale,
            state.overflows_at_min
        );
        match config.max_overflows_at_min {
            Some(limit) if state.overflows_at_min >= limit => Err(LossScaleError {
                scale: state.scale,
                overflows: state.overflows_at_min,
            }),
            _ => Ok(()),
        }
    }

    /// The state, for saving.
    pub fn to_record(&self) -> LossScalerRecord {
        self.state
    }

    /// Continues from a saved state.
    pub fn load_record(mut self, record: LossScalerRecord) -> Self {
        self.state = record;
        self
    }
}
