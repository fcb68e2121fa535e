//! Gradient accumulation that equals the large batch, alone and with SAM.
//!
//! An optimizer step from a window of micro-batches gets the gradient of their union: each
//! micro-batch's gradient is weighted by its number of items (equal weights when not given)
//! and summed in f32; a partial window (the end of an epoch) steps with what it holds,
//! normalised by what it holds. Under loss scaling the window has one scale, an overflow in
//! any micro-batch skips the whole window (weights and optimizer state unchanged) and backs
//! the scale off once. With [`Sam`](burn_sam::Sam), [`Ascent::Synced`] perturbs once with the
//! window's gradient (SAM on the large batch) and [`Ascent::Local`] perturbs each
//! micro-batch by its own gradient (m-sharpness).
//!
//! ```
//! use burn::backend::{Autodiff, Flex};
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::SgdConfig;
//! use burn::tensor::Tensor;
//! use burn_sam::SamConfig;
//! use burn_sam_accum::{AccumulationConfig, MicroBatch};
//!
//! type B = Autodiff<Flex>;
//! let device = Default::default();
//! let mut model: Linear<B> = LinearConfig::new(3, 1).init(&device);
//! // SAM on a batch of 16 rows, two micro-batches of 8 at a time in memory.
//! let sam = SamConfig::new().init(SgdConfig::new().init());
//! let mut accumulation = AccumulationConfig::new(2).init(sam);
//! let window = [
//!     MicroBatch::with_items(Tensor::<B, 2>::ones([8, 3], &device), 8),
//!     MicroBatch::with_items(Tensor::<B, 2>::ones([8, 3], &device), 8),
//! ];
//! let loss = |m: &Linear<B>, x: &Tensor<B, 2>| m.forward(x.clone()).powi_scalar(2).mean();
//! model = accumulation.step(0.1, model, &window, loss)?.module;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! See [`Accumulation`] for windows over a whole epoch, and [`train`] (cargo feature `train`)
//! for Burn's `Learner`. Errors hand the module back ([`burn_sam::StepError`]).

mod accumulation;
mod ascent;
mod config;
mod error;
mod grad_sum;
mod optimizer;
mod sam_window;
#[cfg(feature = "train")]
pub mod train;
mod window;

pub use accumulation::{Accumulation, WindowStep, Windows};
pub use ascent::Ascent;
pub use config::AccumulationConfig;
pub use error::AccumError;
pub use optimizer::{WindowOptimizer, WindowReport};
pub use window::{MicroBatch, Window};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
