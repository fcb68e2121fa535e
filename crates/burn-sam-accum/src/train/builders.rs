//! How a [`SamTraining`] is built: on one device or several, across MPI ranks, with a window
//! and item counts.

use std::sync::Arc;

use burn::tensor::Device;
use burn::train::{LearningComponentsTypes, TrainingModel, TrainingStrategy};
use burn_sam::strategy::Linkable;
use burn_sam::ConfigError;

#[cfg(feature = "mpi")]
use super::peers;
use super::replicas::Replicas;
#[cfg(feature = "mpi")]
use super::Ranks;
use super::{Ascent, Input, SamTraining, Traffic};
use crate::config::AccumulationConfig;
use crate::error::AccumError;
use crate::optimizer::WindowOptimizer;

impl<LC> SamTraining<LC>
where
    LC: LearningComponentsTypes + 'static,
    LC::Optimizer: WindowOptimizer<TrainingModel<LC>, LC::Backend>,
    Input<LC>: Clone,
{
    /// A strategy training on `device` with `optim`, the optimizer the `Learner` gets (or a
    /// clone of it: the strategy follows its loss scale). One micro-batch per step, unless
    /// the builder's `grads_accumulation` or [`SamTraining::with_accumulation`] says more.
    pub fn new(device: Device<LC::Backend>, optim: &LC::Optimizer) -> Self {
        Self {
            replicas: Replicas::new(vec![device]),
            ascent: Ascent::Synced,
            sam: optim.sam_config().cloned(),
            link: optim.step_link(),
            window: None,
            items: None,
        }
    }

    /// A strategy training a replica of the model on each of `devices` (the same device may
    /// be listed more than once), the optimizer on the first, with SAM's ascent where `ascent`
    /// says (optimizers that take one pass ignore it: plain data parallelism). Each replica
    /// takes a window of batches per step from its part of the data loader: the global batch
    /// is `devices.len()` times the loader's, and [`SamTraining::with_items`] weights batches
    /// of different sizes by their items across replicas too.
    ///
    /// ```no_run
    /// # use burn::train::{LearningComponentsTypes, TrainingStrategy};
    /// # use burn_sam_accum::WindowOptimizer;
    /// # fn wire<LC: LearningComponentsTypes + 'static>(
    /// #     gpus: Vec<burn::tensor::Device<LC::Backend>>, optim: &LC::Optimizer,
    /// # ) -> Result<TrainingStrategy<LC>, burn_sam_accum::AccumError>
    /// # where LC::Optimizer: WindowOptimizer<LC::TrainingModel, LC::Backend>,
    /// #       <LC::TrainingModel as burn::train::TrainStep>::Input: Clone,
    /// # {
    /// use burn_sam_accum::train::{Ascent, SamTraining};
    ///
    /// let strategy = SamTraining::data_parallel(gpus, optim, Ascent::Synced)?.into_strategy();
    /// # Ok(strategy)
    /// # }
    /// ```
    ///
    /// # Errors
    /// No device ([`AccumError::InvalidConfig`]), or [`Ascent::Local`] with a SAM variant
    /// other than SAM ([`SamError::LocalAscentVariant`](burn_sam::SamError::LocalAscentVariant)
    /// in [`AccumError::Optimizer`]).
    pub fn data_parallel(
        devices: Vec<Device<LC::Backend>>,
        optim: &LC::Optimizer,
        ascent: Ascent,
    ) -> Result<Self, AccumError> {
        ConfigError::check(
            "SamTraining::data_parallel",
            "devices",
            devices.len() as f64,
            "at least 1 device",
            !devices.is_empty(),
        )?;
        if let (Ascent::Local, Some(config)) = (ascent, optim.sam_config()) {
            config.check_local_ascent()?;
        }
        Ok(Self {
            replicas: Replicas::new(devices),
            ascent,
            sam: optim.sam_config().cloned(),
            link: optim.step_link(),
            window: None,
            items: None,
        })
    }

    /// Spans the MPI ranks of the job (cargo feature `mpi`): every rank runs this strategy
    /// with its own replicas (one device or several), the data loader is split into one part
    /// per replica of the whole job, and each step combines all ranks' replicas' gradients as
    /// one process with all of them would, bitwise: a reduce-scatter in replica order and an
    /// all-gather, about 2 (N - 1) / N of a gradient sent by each rank per exchange (a ring
    /// all-reduce's bytes; [`Traffic::rank_bytes`] counts them). Rank 0's weights are sent to
    /// every rank at start; rank 0 alone validates, reports metrics and writes checkpoints (its
    /// artifact directory must be readable by every rank to resume). Ranks started with a
    /// different model, window, ascent, SAM configuration or epochs are refused at start, on
    /// every rank.
    ///
    /// ```no_run
    /// # use burn::train::{LearningComponentsTypes, TrainingStrategy};
    /// # use burn_sam_accum::WindowOptimizer;
    /// # fn wire<LC: LearningComponentsTypes + 'static>(
    /// #     device: burn::tensor::Device<LC::Backend>, optim: &LC::Optimizer,
    /// # ) -> Result<TrainingStrategy<LC>, Box<dyn std::error::Error>>
    /// # where LC::Optimizer: WindowOptimizer<LC::TrainingModel, LC::Backend>,
    /// #       <LC::TrainingModel as burn::train::TrainStep>::Input: Clone,
    /// # {
    /// use burn_sam_accum::train::{Ascent, Ranks, SamTraining};
    ///
    /// // `mpirun -np 4 program`: 4 ranks of one replica each.
    /// let ranks = Ranks::init()?;
    /// let strategy = SamTraining::data_parallel(vec![device], optim, Ascent::Synced)?
    ///     .across_ranks(&ranks)
    ///     .into_strategy();
    /// # Ok(strategy)
    /// # }
    /// ```
    #[cfg(feature = "mpi")]
    pub fn across_ranks(self, ranks: &Ranks) -> Self {
        let peers = peers::Peers::ranks(ranks.clone());
        Self {
            replicas: self.replicas.with_peers(peers),
            ..self
        }
    }

    /// `SamTraining::new(device, optim).into_strategy()`: the strategy to give
    /// `SupervisedTraining::with_training_strategy`.
    pub fn strategy(device: Device<LC::Backend>, optim: &LC::Optimizer) -> TrainingStrategy<LC> {
        Self::new(device, optim).into_strategy()
    }

    /// This strategy as Burn's `TrainingStrategy::Custom`.
    pub fn into_strategy(self) -> TrainingStrategy<LC> {
        TrainingStrategy::Custom(Arc::new(self))
    }

    /// The bytes this strategy moves between devices, as it trains: keep it before
    /// [`SamTraining::into_strategy`].
    pub fn traffic(&self) -> Traffic {
        self.replicas.traffic().clone()
    }

    /// The ascent of data-parallel SAM.
    pub fn ascent(&self) -> Ascent {
        self.ascent
    }

    /// Steps once per `window` batches of the data loader (per replica), with the gradient of
    /// their union. The same setting as `SupervisedTraining::grads_accumulation`, which is
    /// read when this is not called: with both, they must agree (the run stops at its start
    /// otherwise). An error for `window = 0`.
    pub fn with_accumulation(mut self, window: usize) -> Result<Self, ConfigError> {
        AccumulationConfig::new(window).validate()?;
        self.window = Some(window);
        Ok(self)
    }

    /// Weights each batch of a window by `items(batch)` (its examples, tokens, ...) instead of
    /// equally: needed for the gradient of the union when batch sizes differ, as the last
    /// batch of an epoch often does.
    pub fn with_items(
        mut self,
        items: impl Fn(&Input<LC>) -> usize + Send + Sync + 'static,
    ) -> Self {
        self.items = Some(Arc::new(items));
        self
    }

    /// The window: [`SamTraining::with_accumulation`]'s, or the builder's
    /// `grads_accumulation`, or 1.
    ///
    /// # Panics
    /// When the builder's `grads_accumulation` is 0, with the message `with_accumulation(0)`
    /// returns, or differs from `with_accumulation`'s window: one of the two would be ignored.
    pub(super) fn window(&self, grads_accumulation: Option<usize>) -> usize {
        if let Some(window) = grads_accumulation {
            AccumulationConfig::new(window)
                .validate()
                .unwrap_or_else(|error| {
                    panic!("{error} (from `SupervisedTraining::grads_accumulation`)")
                });
        }
        match (self.window, grads_accumulation) {
            (Some(ours), Some(builder)) if ours != builder => panic!(
                "two accumulation windows: `SupervisedTraining::grads_accumulation({builder})` \
                 and `SamTraining::with_accumulation({ours})`; set one of them (SamTraining \
                 reads the builder's)"
            ),
            (ours, builder) => ours.or(builder).unwrap_or(1),
        }
    }
}
