//! Sharpness-Aware Minimization (SAM, Foret et al. 2021) and ASAM for the Burn framework, as a
//! decorator over any Burn optimizer.
//!
//! ```
//! use burn::backend::{Autodiff, Flex};
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::{AdamConfig, GradientsParams, Optimizer};
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
//!     // Twice per batch: the first step perturbs, the second steps the base optimizer.
//!     for _ in 0..2 {
//!         let loss = (model.forward(x.clone()) - y.clone()).powi_scalar(2).mean();
//!         let grads = GradientsParams::from_grads(loss.backward(), &model);
//!         model = optim.step(1e-2, model, grads);
//!     }
//! }
//! assert_eq!(optim.stats().steps, 3);
//! ```
//!
//! See [`Sam`] for the explicit `ascend`/`descend` phases and the one-call
//! [`Sam::step_with`].
//!
//! Mixed precision: [`SamConfig::loss_scaling`] turns on dynamic loss scaling
//! ([`LossScaler`], PyTorch `GradScaler`'s rule) with overflow-safe ascent and descent, and
//! parameters narrower than f32 are stepped through f32 master weights. [`LossScaled`] gives
//! any Burn optimizer the same without SAM; [`cast_params`] makes a model f16.

mod config;
mod error;
mod loss_scaled;
mod params;
mod precision;
mod sam;
mod scaler;

pub use config::SamConfig;
pub use error::SamError;
pub use loss_scaled::{LossScaled, LossScaledConfig, ScaledStepReport};
pub use params::{device_reads, grad_norm};
pub use precision::{cast_params, MasterWeightRecord, MixedPrecisionRecord};
pub use sam::{PendingAscent, Sam, SamRecord, SamStats, SamStep, StepOutcome, StepReport};
pub use scaler::{LossScaleError, LossScaleHandle, LossScaler, LossScalerConfig, LossScalerRecord};
