//! SAM, loss scaling and normalised gradient accumulation inside Burn's `Learner` (cargo
//! feature `train`), on one device or data-parallel over several.
//!
//! [`SamTraining`] replaces Burn's training loop through `TrainingStrategy::Custom`; metrics,
//! the renderer, validation, checkpoints and early stopping work as with Burn's default
//! strategy. Per optimizer step it:
//! - advances the LR scheduler once (Burn's loop advances it once per batch);
//! - runs the user's `TrainStep` on each micro-batch of the window (1 by default), whose
//!   [`scale_loss`] weights its loss by its share of the window (items, or equal) before the
//!   backward pass, as [`Accumulation`](crate::Accumulation) does, and sums the gradients in
//!   f32: the gradient of the union, bitwise the direct window's, where Burn's
//!   `grads_accumulation` sums; the last, partial window of an epoch steps with what it
//!   holds, where Burn's drops it. (A `TrainStep` without `scale_loss`, allowed without loss
//!   scaling, has its gradient weighted after `backward`: the same up to rounding.)
//! - does that once per pass the optimizer's next step takes, as its
//!   [`StepLink`] says: twice for [`Sam`](burn_sam::Sam) (ascent
//!   at `w`, descent at `w + e`), once on LookSAM's steps between its full ones and for other
//!   optimizers; and hands each pass's gradient to `Optimizer::step` (the
//!   [protocol](burn_sam::strategy)).
//!
//! Data-parallel ([`SamTraining::data_parallel`]): N replicas of the model on N devices of one
//! backend, the optimizer on the first (main) device. The data loader is split into N
//! contiguous parts; each step every replica runs the `TrainStep` on a window from its part,
//! in its own thread, and the gradients are combined on the main device as the item-weighted
//! mean over all replicas' batches (Burn's multi-device loop sums them), each batch's loss
//! weighted before its backward pass as on one device. With one batch per replica and step
//! that is bitwise the single-device window of the same batches; with more, each replica sums
//! its own batches first, so the sum is added in another order (2.9e-8 apart, relative, after
//! three steps of windows of 2 on 2 replicas). [`Ascent`] says where
//! SAM's ascent happens: once, from the combined gradient ([`Ascent::Synced`]: SAM on the
//! global batch), or on each replica from its own gradient ([`Ascent::Local`]: m-sharpness, no
//! exchange before the descent). [`Traffic`] counts the bytes moved between devices.
//!
//! Across the processes of an MPI job (cargo feature `mpi`, `SamTraining::across_ranks`):
//! each rank runs its own replicas, the loader is split into one part per replica of the job,
//! and each gradient exchange is a reduce-scatter in replica order and an all-gather, so every
//! rank holds bitwise the weights one process with all the replicas would. Rank 0
//! alone validates, reports metrics and writes checkpoints.
//!
//! Loss scaling (f16 models): wrap the optimizer with loss scaling ([`SamConfig::loss_scaling`]
//! or [`MixedPrecision`](burn_sam::MixedPrecision)) and call [`scale_loss`] on the loss the
//! `TrainStep` back-propagates (on every replica's thread: the strategy sets the pass's scale
//! there, and hands the same scale to the optimizer with the gradients).
//! One scale serves all replicas; a non-finite gradient on any of them skips the step for all,
//! with one scale update. The loss scale and the steps skipped on overflow, and over several
//! devices the bytes moved per step, are logged once per epoch (Burn's `Learner` writes the
//! log to `experiment.log` in its artifact directory).
//!
//! Checkpoints are Burn's: the model, the optimizer's record (for [`Sam`](burn_sam::Sam): the base
//! optimizer's state, SAM's counters, the variant's state, the loss scaler and f32 master weights)
//! and the scheduler. A resumed run replays the data loaders' shuffles of the epochs it skips (each
//! replica's), so it continues where the uninterrupted run would be.
//!
//! [`SamConfig::loss_scaling`]: burn_sam::SamConfig::loss_scaling

mod announce;
mod builders;
mod epoch;
mod fit;
mod kept_losses;
mod metrics;
mod pass_scale;
mod peers;
mod plan;
#[cfg(feature = "mpi")]
mod ranks;
mod replicas;
mod scatter;
mod step;
mod transfer;
mod wire;

use std::sync::Arc;

use burn::train::{LearningComponentsTypes, TrainStep, TrainingModel};
use burn_sam::strategy::StepLink;
use burn_sam::SamConfig;

pub use crate::ascent::Ascent;
pub use metrics::SamMetric;
pub use pass_scale::scale_loss;
#[cfg(feature = "mpi")]
pub use ranks::{Ranks, RanksError};
pub use replicas::Traffic;

use replicas::Replicas;

type Input<LC> = <TrainingModel<LC> as TrainStep>::Input;
type Output<LC> = <TrainingModel<LC> as TrainStep>::Output;
type ItemCount<T> = Arc<dyn Fn(&T) -> usize + Send + Sync>;

/// A Burn training strategy (`TrainingStrategy::Custom`) for [`Sam`](burn_sam::Sam) and for any
/// [`WindowOptimizer`](crate::WindowOptimizer): SAM's two passes through the model's own
/// `TrainStep`, the LR scheduler advanced once per optimizer step, normalised gradient accumulation
/// with the partial window flushed, loss scaling; on one device ([`SamTraining::new`]) or
/// data-parallel over several ([`SamTraining::data_parallel`]). See the [module
/// documentation](self).
///
/// [`SamTraining::strategy`] gives the `TrainingStrategy` in one call; with options, build it
/// and finish with [`SamTraining::into_strategy`]:
///
/// ```no_run
/// # use burn::train::{LearningComponentsTypes, TrainingStrategy};
/// # use burn_sam_accum::WindowOptimizer;
/// # fn wire<LC: LearningComponentsTypes + 'static>(
/// #     device: burn::tensor::Device<LC::Backend>, optim: &LC::Optimizer,
/// # ) -> Result<TrainingStrategy<LC>, burn_sam::ConfigError>
/// # where LC::Optimizer: WindowOptimizer<LC::TrainingModel, LC::Backend>,
/// #       <LC::TrainingModel as burn::train::TrainStep>::Input: Clone,
/// # {
/// use burn_sam_accum::train::SamTraining;
///
/// // `optim` is the optimizer given to `Learner::new`, e.g. `SamConfig::new().init(sgd)`.
/// let strategy = SamTraining::new(device, optim).with_accumulation(4)?.into_strategy();
/// # Ok(strategy)
/// # }
/// ```
pub struct SamTraining<LC: LearningComponentsTypes> {
    replicas: Replicas<LC::Backend>,
    ascent: Ascent,
    /// The optimizer's SAM configuration, which local ascents perturb with.
    sam: Option<SamConfig>,
    link: StepLink,
    window: Option<usize>,
    items: Option<ItemCount<Input<LC>>>,
}
