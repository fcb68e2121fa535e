//! Mixed precision, one concept per file: the loss scale's rule (`scaler`), its shared view
//! and the mark that a loss was scaled (`handle`), the base step that unscales, clips and
//! steps through f32 master weights (`base_step`), the trait every optimizer offers for it
//! (`scaling`), and [`MixedPrecision`], the same for any Burn optimizer without SAM
//! (`optimizer`).

mod base_step;
mod handle;
mod optimizer;
mod scaler;
mod scaling;

pub(crate) use base_step::Precision;
pub use base_step::{guarded_step, MasterWeightRecord, MixedPrecisionRecord, ScaledStepReport};
pub use handle::LossScaleHandle;
pub use optimizer::{MixedPrecision, MixedPrecisionConfig};
pub use scaler::{LossScaler, LossScalerConfig, LossScalerRecord};
pub use scaling::LossScaling;
