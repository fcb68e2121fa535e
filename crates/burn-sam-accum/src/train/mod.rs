//! SAM, loss scaling and normalised gradient accumulation inside Burn's `Learner` (cargo
//! feature `train`), on one device or data-parallel over several.
//!
//! [`SamTraining`] replaces Burn's training loop through `TrainingStrategy::Custom`; metrics,
//! the renderer, validation, checkpoints and early stopping work as with Burn's default
//! strategy. Per optimizer step it:
//! - advances the LR scheduler once (Burn's loop advances it once per batch);
//! - runs the user's `TrainStep` on each micro-batch of the window (1 by default) and weights
//!   its gradient by its share of the window (items, or equal), summed in f32: the gradient of
//!   the union, where Burn's `grads_accumulation` sums; the last, partial window of an epoch
//!   steps with what it holds, where Burn's drops it;
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
//! mean over all replicas' batches (Burn's multi-device loop sums them). [`Ascent`] says where
//! SAM's ascent happens: once, from the combined gradient ([`Ascent::Synced`]: SAM on the
//! global batch), or on each replica from its own gradient ([`Ascent::Local`]: m-sharpness, no
//! exchange before the descent). [`Traffic`] counts the bytes moved between devices.
//!
//! Across the processes of an MPI job (cargo feature `mpi`, [`SamTraining::across_ranks`]):
//! each rank runs its own replicas, the loader is split into one part per replica of the job,
//! and each gradient exchange is a reduce-scatter in replica order and an all-gather, so every
//! rank holds bitwise the weights one process with all the replicas would. Rank 0
//! alone validates, reports metrics and writes checkpoints.
//!
//! Loss scaling (f16 models): wrap the optimizer with loss scaling ([`SamConfig::loss_scaling`]
//! or [`LossScaled`](burn_sam::LossScaled)) and call [`scale_loss`] on the loss the
//! `TrainStep` back-propagates (on every replica's thread: the strategy sets the pass's scale
//! there, and hands the same scale to the optimizer with the gradients).
//! One scale serves all replicas; a non-finite gradient on any of them skips the step for all,
//! with one scale update. The loss scale and the steps skipped on overflow, and over several
//! devices the bytes moved per step, are logged once per epoch (Burn's `Learner` writes the
//! log to `experiment.log` in its artifact directory).
//!
//! Checkpoints are Burn's: the model, the optimizer's record (for [`Sam`](burn_sam::Sam): the base optimizer's
//! state, SAM's counters, the variant's state, the loss scaler and f32 master weights) and the
//! scheduler. A resumed run replays the data loaders' shuffles of the epochs it skips (each
//! replica's), so it continues where the uninterrupted run would be.
//!
//! [`SamConfig::loss_scaling`]: burn_sam::SamConfig::loss_scaling

mod announce;
mod pass_scale;
mod peers;
#[cfg(feature = "mpi")]
mod ranks;
mod replicas;
mod scatter;
mod transfer;
mod wire;

use std::sync::Arc;

use burn::config::Config;
use burn::data::dataloader::split::split_dataloader;
use burn::data::dataloader::{DataLoaderIterator, Progress};
use burn::module::{AutodiffModule, Module};
use burn::optim::{GradientsParams, LearningRate};
use burn::tensor::backend::{AutodiffBackend, Backend, DeviceOps};
use burn::tensor::{Device, Tensor};
use burn::train::{
    EventProcessorTraining, InferenceStep, Interrupter, Learner, LearnerEvent,
    LearningComponentsTypes, SupervisedLearningStrategy, SupervisedTrainingEventProcessor,
    TrainLoader, TrainStep, TrainingComponents, TrainingItem, TrainingModel, TrainingStrategy,
    ValidLoader,
};
use burn_sam::strategy::{map_grads, GradMap, Handover, ParamGrad, Passes, StepLink};
use burn_sam::{ConfigError, SamConfig, SamError, SamVariant};

pub use pass_scale::scale_loss;
#[cfg(feature = "mpi")]
pub use ranks::{Ranks, RanksError};
pub use replicas::Traffic;

use crate::config::AccumulationConfig;
use crate::error::AccumError;
use crate::optimizer::WindowOptimizer;
use crate::window::item_weights;
use peers::{Reader, Writer};
use replicas::{LocalAscent, Replicas};

type Input<LC> = <TrainingModel<LC> as TrainStep>::Input;
type Output<LC> = <TrainingModel<LC> as TrainStep>::Output;
type ItemCount<T> = Arc<dyn Fn(&T) -> usize + Send + Sync>;

/// A Burn training strategy (`TrainingStrategy::Custom`) for [`Sam`](burn_sam::Sam) and for any
/// [`WindowOptimizer`]: SAM's two passes through the model's own `TrainStep`, the LR
/// scheduler advanced once per optimizer step, normalised gradient accumulation with the
/// partial window flushed, loss scaling; on one device ([`SamTraining::new`]) or data-parallel
/// over several ([`SamTraining::data_parallel`]). See the [module documentation](self).
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

/// Where data-parallel SAM takes its ascent: the third argument of
/// [`SamTraining::data_parallel`], whose example shows it in use.
///
/// ```
/// use burn_sam_accum::train::Ascent;
///
/// // Local ascents exchange half the bytes per step: one gradient and one model.
/// let ascent = Ascent::Local;
/// assert_ne!(ascent, Ascent::Synced);
/// ```
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum Ascent {
    /// One perturbation from the gradient combined over all replicas, sent to every replica,
    /// then the combined descent gradient: SAM on the global batch, exactly. Two gradient
    /// exchanges and two model broadcasts per step; every SAM variant.
    Synced,
    /// Each replica perturbs its own copy with its own gradient, without an exchange before
    /// the descent; the descent gradients are combined and the base optimizer steps once:
    /// m-sharpness with m = a replica's window (DDP's `no_sync()` ascent). One exchange and
    /// one broadcast per step, as plain data parallelism; `SamVariant::Sam` only.
    Local,
}

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
            link: StepLink::new(optim.loss_scale_handle()),
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
    /// other than SAM ([`SamError::LocalAscentVariant`]
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
            if config.variant != SamVariant::Sam {
                let variant = config.variant.name();
                return Err(SamError::LocalAscentVariant { variant }.into());
            }
        }
        Ok(Self {
            replicas: Replicas::new(devices),
            ascent,
            sam: optim.sam_config().cloned(),
            link: StepLink::new(optim.loss_scale_handle()),
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
    /// their union. Overrides `SupervisedTraining::grads_accumulation`, which is otherwise
    /// taken as the window. An error for `window = 0`.
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

    /// # Panics
    /// When the builder's `grads_accumulation` is 0, with the message `with_accumulation(0)`
    /// returns.
    fn window(&self, grads_accumulation: Option<usize>) -> usize {
        let window = self.window.or(grads_accumulation).unwrap_or(1);
        let config = AccumulationConfig::new(window);
        config.validate().unwrap_or_else(|error| {
            panic!("{error} (from `SupervisedTraining::grads_accumulation`)")
        });
        window
    }

    /// Each of this process's batches' share of the step, replica by replica, from every
    /// rank's batches and item counts; or why no step is taken: every rank's loaders are
    /// done, or `stop` is set on some rank (its interrupter).
    fn plan(&self, shards: &[Vec<Input<LC>>], stop: bool) -> Plan {
        const NO_COUNT: u64 = u64::MAX;
        let mut mine = Writer::default();
        mine.u8(stop as u8);
        mine.u64(shards.len() as u64);
        for inputs in shards {
            mine.u64(inputs.len() as u64);
            for input in inputs {
                let items = self.items.as_ref().map(|items| items(input) as u64);
                mine.u64(items.unwrap_or(NO_COUNT));
            }
        }
        let peers = self.replicas.peers();
        let mut stopped = false;
        let mut counts = Vec::new();
        let mut own = 0..0;
        for (rank, bytes) in peers.all_gather(mine.0).iter().enumerate() {
            let mut reader = Reader::new(bytes);
            stopped |= reader.u8() == 1;
            let start = counts.len();
            for _ in 0..reader.u64() {
                for _ in 0..reader.u64() {
                    let items = reader.u64();
                    counts.push((items != NO_COUNT).then_some(items as usize));
                }
            }
            if rank == peers.rank() {
                own = start..counts.len();
            }
        }
        if stopped {
            return Plan::Stopped;
        }
        if counts.is_empty() {
            return Plan::EpochDone;
        }
        let weights = item_weights(counts.into_iter()).unwrap_or_else(|error| panic!("{error}"));
        let mut weights = weights[own].iter().copied();
        let weights = shards
            .iter()
            .map(|inputs| weights.by_ref().take(inputs.len()).collect())
            .collect();
        Plan::Step(weights)
    }

    /// What local ascents perturb with at learning rate `lr`: SAM's configuration, when the
    /// optimizer is SAM and the ascents are local.
    fn local_ascent(&self, lr: LearningRate) -> LocalAscent<'_> {
        match self.ascent {
            Ascent::Local => self.sam.as_ref().map(|config| (config, lr)),
            Ascent::Synced => None,
        }
    }

    /// One pass's gradient at the learner's model, losses scaled by `loss_scale`, in the form
    /// the optimizer steps with, and the `TrainStep` outputs.
    fn gradient(
        &self,
        learner: &Learner<LC>,
        shards: Vec<Vec<Input<LC>>>,
        weights: &[Vec<f64>],
        loss_scale: Option<f32>,
        local: LocalAscent<'_>,
    ) -> (GradientsParams, Vec<Vec<Output<LC>>>) {
        // Momentum-SAM's passes run at its look-ahead; the learner's model stays at `w`.
        let model = self.link.look_ahead(learner.model());
        let combined = self
            .replicas
            .gradient(&model, shards, weights, loss_scale, local);
        let wide = <LC::Optimizer as WindowOptimizer<_, _>>::WIDE_GRADIENTS;
        let grads = match combined.as_came || wide {
            true => combined.grads,
            false => cast_to_params(&model, combined.grads),
        };
        (grads, combined.outputs)
    }

    /// One optimizer step from the replicas' windows: each pass the optimizer's next step
    /// takes, its gradient handed over to `Optimizer::step` (the [`burn_sam::strategy`]
    /// protocol). `report` gets the first pass's `TrainStep` outputs, replica by replica,
    /// before the optimizer steps: the metrics read the losses while the step runs, as in the
    /// runs whose kernels `tests/vulkan_fused_kernels.rs` counts.
    fn optimizer_step(
        &self,
        learner: &mut Learner<LC>,
        mut shards: Vec<Vec<Input<LC>>>,
        weights: &[Vec<f64>],
        lr: LearningRate,
        mut report: impl FnMut(Vec<Vec<Output<LC>>>),
    ) {
        let next = self.link.next_step();
        if let (Passes::Two, Some(local)) = (next.passes, self.local_ascent(lr)) {
            let loss_scale = next.loss_scale;
            let (grads, outputs) = self.gradient(learner, shards, weights, loss_scale, Some(local));
            report(outputs);
            self.step_linked(learner, grads, Handover::LocalDescent { loss_scale });
            return;
        }
        let passes = next.passes.count();
        for pass in 1..=passes {
            let shards = match pass < passes {
                true => shards.clone(),
                false => std::mem::take(&mut shards),
            };
            // An overflowing ascent backs the scale off before the descent's pass.
            let loss_scale = self.link.next_step().loss_scale;
            let (grads, outputs) = self.gradient(learner, shards, weights, loss_scale, None);
            if pass == 1 {
                report(outputs);
            }
            self.step_linked(learner, grads, Handover::Gradient { loss_scale });
        }
    }

    /// `Optimizer::step` on the learner's optimizer with `handover`.
    ///
    /// # Panics
    /// When the learner's optimizer is not the one this strategy was built from (nor a clone):
    /// its first step stops, rather than every step running the wrong passes.
    fn step_linked(&self, learner: &mut Learner<LC>, grads: GradientsParams, handover: Handover) {
        self.link.hand_over(handover);
        learner.optimizer_step(grads);
        if let Err(error) = self.link.check_taken() {
            panic!("{error}");
        }
    }

    /// One epoch of optimizer steps, until every rank's loaders are done; whether some
    /// rank's interrupter stopped it.
    fn train_epoch(
        &self,
        learner: &mut Learner<LC>,
        loaders: &[TrainLoader<LC>],
        window: usize,
        epoch: &Progress,
        processor: &mut SupervisedTrainingEventProcessor<LC>,
        interrupter: &Interrupter,
    ) -> bool {
        let overflows = self.link.loss_scale().overflows();
        let traffic = self.replicas.traffic();
        let (bytes, steps) = (traffic.bytes(), traffic.steps());
        let (rank_bytes, exchanges) = (traffic.rank_bytes(), traffic.exchanges());
        let root = self.replicas.peers().is_root();
        let mut iterators: Vec<_> = loaders.iter().map(|loader| loader.iter()).collect();
        let mut iteration = 0;
        let stopped = loop {
            let (shards, progress) = next_window(&mut iterators, window);
            let weights = match self.plan(&shards, interrupter.should_stop()) {
                Plan::Step(weights) => weights,
                Plan::EpochDone => break false,
                Plan::Stopped => break true,
            };
            learner.lr_step();
            let lr = learner.lr_current();
            self.optimizer_step(learner, shards, &weights, lr, |outputs| {
                // Rank 0 alone reports: the metrics of its replicas' batches.
                if !root {
                    return;
                }
                for item in outputs.into_iter().flatten() {
                    iteration += 1;
                    let item = TrainingItem::new(
                        item,
                        progress.clone(),
                        epoch.clone(),
                        Some(iteration),
                        Some(lr),
                    );
                    processor.process_train(LearnerEvent::ProcessedItem(item));
                }
            });
            self.replicas.traffic().step();
        };
        // One line per epoch with what a user of loss scaling or of several devices watches.
        let mut facts = Vec::new();
        let loss_scale = self.link.loss_scale();
        if loss_scale.is_scaling() {
            facts.push(format!(
                "loss scale {}, {} steps overflowed (skipped in whole, or SAM's ascent skipped)",
                loss_scale.get(),
                loss_scale.overflows() - overflows
            ));
        }
        if self.replicas.devices().len() > 1 || self.replicas.peers().size() > 1 {
            let steps = traffic.steps() - steps;
            facts.push(format!(
                "{:.0} bytes sent between devices and ranks per step ({steps} steps)",
                (traffic.bytes() - bytes) as f64 / steps.max(1) as f64
            ));
        }
        if self.replicas.peers().size() > 1 {
            let exchanges = traffic.exchanges() - exchanges;
            facts.push(format!(
                "{:.0} bytes sent to the other ranks per gradient exchange ({exchanges} exchanges)",
                (traffic.rank_bytes() - rank_bytes) as f64 / exchanges.max(1) as f64
            ));
        }
        if root {
            if !facts.is_empty() {
                log::info!("epoch {}: {}", epoch.items_processed, facts.join("; "));
            }
            processor.process_train(LearnerEvent::EndEpoch(epoch.items_processed));
        }
        stopped
    }

    /// What every rank must agree on, as `(name, value)`: a rank started differently is
    /// refused at start.
    fn settings(
        &self,
        model: &TrainingModel<LC>,
        window: usize,
        epochs: (usize, usize),
    ) -> Vec<(&'static str, String)> {
        vec![
            ("model (parameter shapes)", wire::shapes(model)),
            ("window", window.to_string()),
            ("ascent", format!("{:?}", self.ascent)),
            ("optimizer's SAM configuration", format!("{:?}", self.sam)),
            ("item counts", self.items.is_some().to_string()),
            ("epochs (first, last)", format!("{epochs:?}")),
            ("loss scale", self.link.loss_scale().get().to_string()),
        ]
    }
}

/// What the ranks agreed to do next.
enum Plan {
    /// A step, with this process's batches' weights, replica by replica.
    Step(Vec<Vec<f64>>),
    /// No rank has a batch left this epoch.
    EpochDone,
    /// Some rank's interrupter asked to stop.
    Stopped,
}

/// The next window of each replica's loader (empty for a loader that is done) and the
/// progress over all of them.
fn next_window<T>(
    iterators: &mut [Box<dyn DataLoaderIterator<T> + '_>],
    window: usize,
) -> (Vec<Vec<T>>, Progress) {
    let mut shards = Vec::with_capacity(iterators.len());
    let mut progress = Progress::new(0, 0);
    for iterator in iterators {
        shards.push(iterator.by_ref().take(window).collect());
        let part = iterator.progress();
        progress.items_processed += part.items_processed;
        progress.items_total += part.items_total;
    }
    (shards, progress)
}

/// Casts each gradient to its parameter's float type: a plain optimizer steps f16 parameters
/// with f16 gradients (accumulation itself ran in f32).
fn cast_to_params<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: GradientsParams,
) -> GradientsParams {
    struct Cast;
    impl<B: Backend> GradMap<B> for Cast {
        fn map<const D: usize>(&mut self, param: ParamGrad<B, D>) -> Option<Tensor<B, D>> {
            Some(param.tensor.cast(param.dtype))
        }
    }
    map_grads(module, grads, &mut Cast).0
}

/// Burn's validation epoch: the model in inference mode over the validation loader.
fn valid_epoch<LC: LearningComponentsTypes>(
    learner: &Learner<LC>,
    loader: &ValidLoader<LC>,
    epoch: &Progress,
    processor: &mut SupervisedTrainingEventProcessor<LC>,
    interrupter: &Interrupter,
) {
    let model = learner.model().valid();
    let mut iterator = loader.iter();
    let mut iteration = 0;
    while let Some(input) = iterator.next() {
        iteration += 1;
        let item = TrainingItem::new(
            model.step(input),
            iterator.progress(),
            epoch.clone(),
            Some(iteration),
            None,
        );
        processor.process_valid(LearnerEvent::ProcessedItem(item));
        if interrupter.should_stop() {
            break;
        }
    }
    processor.process_valid(LearnerEvent::EndEpoch(epoch.items_processed));
}

impl<LC> SupervisedLearningStrategy<LC> for SamTraining<LC>
where
    LC: LearningComponentsTypes + 'static,
    LC::Optimizer: WindowOptimizer<TrainingModel<LC>, LC::Backend>,
    Input<LC>: Clone,
{
    fn fit(
        &self,
        components: TrainingComponents<LC>,
        mut learner: Learner<LC>,
        loader_train: TrainLoader<LC>,
        loader_valid: ValidLoader<LC>,
        starting_epoch: usize,
    ) -> (TrainingModel<LC>, SupervisedTrainingEventProcessor<LC>) {
        let window = self.window(components.grad_accumulation);
        let devices = self.replicas.devices();
        let main = self.replicas.main();
        let peers = self.replicas.peers();
        let epochs = (starting_epoch, components.num_epochs);
        let settings = self.settings(&learner.model(), window, epochs);
        let layout = peers.handshake(devices.len(), &settings);
        if peers.is_root() {
            // Burn's log goes to a file: say on stderr too that SAM is on, and how.
            let line = announce::announcement(
                self.sam.as_ref(),
                self.link.next_step().loss_scale,
                window,
                devices.len(),
                peers.size(),
            );
            log::info!("{line}");
            eprintln!("{line}");
        }
        // Every rank splits the loader into one part per replica of the job, as one process
        // with all of them would (each part's shuffle is forked from the loader's in order),
        // and keeps its own parts.
        let parts = layout.first..layout.first + devices.len();
        let all_devices: Vec<_> = (0..layout.total)
            .map(|index| match parts.contains(&index) {
                true => devices[index - layout.first].clone(),
                false => main.clone(),
            })
            .collect();
        let loaders_train: Vec<_> = split_dataloader(loader_train, &all_devices)
            .into_iter()
            .skip(parts.start)
            .zip(devices)
            .map(|(loader, device)| loader.to_device(device))
            .collect();
        let loader_valid = loader_valid.to_device(main.inner());
        learner.fork(main);
        if peers.size() > 1 {
            // Rank 0's weights, whatever each rank initialised.
            let root = match peers.is_root() {
                true => wire::write_weights(&learner.model()),
                false => Vec::new(),
            };
            let weights = peers.broadcast(root);
            learner.load_model(wire::read_weights(learner.model(), &weights).into_record());
        }
        // A shuffling loader draws a new order each epoch: draw those of the skipped epochs.
        for _ in 1..starting_epoch {
            for loader in &loaders_train {
                drop(loader.iter());
            }
        }
        let mut processor = components.event_processor;
        let mut checkpointer = components.checkpointer;
        let mut early_stopping = components.early_stopping;
        let interrupter = components.interrupter;

        for epoch in starting_epoch..=components.num_epochs {
            let progress = Progress::new(epoch, components.num_epochs);
            let stopped = self.train_epoch(
                &mut learner,
                &loaders_train,
                window,
                &progress,
                &mut processor,
                &interrupter,
            );
            if stopped {
                let reason = interrupter.get_message();
                log::info!(
                    "training interrupted: {}",
                    reason.as_deref().unwrap_or("by another rank")
                );
                break;
            }
            // Rank 0 alone validates, writes checkpoints and decides to stop early.
            let mut stop_early = false;
            if peers.is_root() {
                valid_epoch(
                    &learner,
                    &loader_valid,
                    &progress,
                    &mut processor,
                    &interrupter,
                );
                if let Some(checkpointer) = &mut checkpointer {
                    self.link.label_checkpoint(epoch);
                    checkpointer.checkpoint(&learner, epoch, &components.event_store);
                }
                if let Some(early_stopping) = &mut early_stopping {
                    stop_early = early_stopping.should_stop(epoch, &components.event_store);
                }
            }
            if peers.broadcast_flag(stop_early) {
                break;
            }
        }
        (learner.model(), processor)
    }
}
