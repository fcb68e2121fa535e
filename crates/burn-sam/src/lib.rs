//! Sharpness-Aware Minimization (SAM, Foret et al. 2021), ASAM and the SAM family (GSAM,
//! LookSAM, Friendly-SAM; [`SamVariant`]) for the Burn framework, as a decorator over any Burn
//! optimizer.
//!
//! ```
//! use burn::backend::{Autodiff, Flex};
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::AdamConfig;
//! use burn::tensor::Tensor;
//! use burn_sam::SamConfig;
//!
//! type B = Autodiff<Flex>;
//! let device = Default::default();
//! let mut model: Linear<B> = LinearConfig::new(3, 1).init(&device);
//! let mut optim = SamConfig::new().with_rho(0.05).init(AdamConfig::new().init());
//! let (x, y) = (Tensor::<B, 2>::ones([8, 3], &device), Tensor::<B, 2>::zeros([8, 1], &device));
//!
//! for _ in 0..3 {
//!     // Both passes, with the loss as a closure of the model.
//!     let loss = |model: &Linear<B>| (model.forward(x.clone()) - y.clone()).powi_scalar(2).mean();
//!     model = optim.step_with(1e-2, model, loss).unwrap().module;
//! }
//! assert_eq!(optim.stats().steps, 3);
//! ```
//!
//! See [`Sam`] for the explicit `ascend`/`descend` phases and `Optimizer::step`.
//!
//! Mixed precision: [`SamConfig::loss_scaling`] turns on dynamic loss scaling
//! ([`LossScaler`], PyTorch `GradScaler`'s rule) with overflow-safe ascent and descent, and
//! parameters narrower than f32 are stepped through f32 master weights. [`MixedPrecision`] gives
//! any Burn optimizer the same without SAM; [`cast_params`] makes a model f16.
//!
//! Errors hand the module back ([`StepError`]): no call that takes the model by value loses it.
//!
//! Training strategies and other code that runs the passes without holding the optimizer
//! (burn-sam-accum) build on [`strategy`]: the step protocol and SAM's remaining phases.
//!
//! Cargo features: `fusion` with `cuda` or `wgpu`, for Burn's fused CUDA, Vulkan, Metal and
//! WebGPU backends. With them a step ends by launching what it queued on the device without
//! waiting for it ([`diagnostics::queue_launches`]); without them, on a fused backend, by a
//! device sync.

// First: its `or_hand_back!` is in scope in every module below.
#[macro_use]
mod hand_back;

mod cast;
mod channel;
mod checkpoint;
mod config;
mod device;
mod error;
mod family;
mod filter;
mod float;
mod grad_map;
mod label;
mod local_ascent;
mod merge;
mod mixed_precision;
mod moved;
mod norm;
mod param_map;
mod perturb;
mod protocol;
mod sam;
mod schedule;
mod seed;
mod state;
mod step_losses;
mod step_report;
pub mod strategy;
pub mod variant;

pub use cast::{cast_params, try_cast_params};
pub use config::SamConfig;
pub use device::diagnostics;
pub use error::{ConfigError, LossScaleError, SamError};
pub use hand_back::StepError;
pub use mixed_precision::{
    LossScaleHandle, LossScaler, LossScalerConfig, LossScaling, MixedPrecision,
    MixedPrecisionConfig, ScaledStepReport,
};
pub use norm::grad_norm;
pub use sam::{Sam, SamStats, SamStep};
pub use schedule::SamSchedule;
pub use seed::pass_seed;
pub use step_report::{StepOutcome, StepReport};
pub use variant::{RhoSchedule, SamVariant};

/// What the optimizers save: [`SamRecord`](record::SamRecord), SAM's part of
/// `Optimizer::Record`, and its parts, with the label that says what wrote it.
pub mod record {
    pub use crate::checkpoint::{fingerprint, NarrowParamRecord, SavedModelRecord};
    pub use crate::family::{ParamValuesRecord, VariantRecord};
    pub use crate::label::{SamRecordLabel, RECORD_FORMAT};
    pub use crate::mixed_precision::LossScalerRecord;
    pub use crate::mixed_precision::{MasterWeightRecord, MixedPrecisionRecord};
    pub use crate::sam::SamRecord;
    pub use crate::schedule::ScheduleRecord;
}

// The root paths of 0.1, deprecated, for one release.
#[allow(deprecated)]
pub use moved::*;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
