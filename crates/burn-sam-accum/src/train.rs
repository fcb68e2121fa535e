//! SAM, loss scaling and normalised gradient accumulation inside Burn's `Learner` (cargo
//! feature `train`).
//!
//! [`SamTraining`] replaces Burn's single-device training loop through
//! `TrainingStrategy::Custom`; metrics, the renderer, validation, checkpoints and early stopping
//! work as with Burn's default strategy. Per optimizer step it:
//! - advances the LR scheduler once (Burn's loop advances it once per batch);
//! - runs the user's `TrainStep` on each micro-batch of the window (1 by default) and weights
//!   its gradient by its share of the window (items, or equal), summed in f32: the gradient of
//!   the union, where Burn's `grads_accumulation` sums; the last, partial window of an epoch
//!   steps with what it holds, where Burn's drops it;
//! - does that once per pass of the optimizer: twice for [`Sam`](burn_sam::Sam) (ascent at `w`, descent at
//!   `w + e`; once on LookSAM's steps between its full ones, as the optimizer's
//!   [`LossScaleHandle::single_pass_step`](burn_sam::LossScaleHandle::single_pass_step) says),
//!   once for other optimizers ([`WindowOptimizer::PASSES`]).
//!
//! Loss scaling (f16 models): wrap the optimizer with loss scaling ([`SamConfig::loss_scaling`]
//! or [`LossScaled`](burn_sam::LossScaled)) and call [`scale_loss`] on the loss the
//! `TrainStep` back-propagates. The loss scale and the steps skipped on overflow are logged
//! once per epoch (Burn's `Learner` writes the log to `experiment.log` in its artifact
//! directory).
//!
//! Checkpoints are Burn's: the model, the optimizer's record (for [`Sam`](burn_sam::Sam): the base optimizer's
//! state, SAM's counters, the variant's state, the loss scaler and f32 master weights) and the
//! scheduler. A resumed
//! run replays the data loader's shuffles of the epochs it skips, so it continues where the
//! uninterrupted run would be.
//!
//! [`SamConfig::loss_scaling`]: burn_sam::SamConfig::loss_scaling

use std::cell::RefCell;
use std::sync::Arc;

use burn::data::dataloader::Progress;
use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend, DeviceOps};
use burn::tensor::{Device, Tensor};
use burn::train::{
    EventProcessorTraining, InferenceStep, Interrupter, Learner, LearnerEvent,
    LearningComponentsTypes, SupervisedLearningStrategy, SupervisedTrainingEventProcessor,
    TrainLoader, TrainStep, TrainingComponents, TrainingItem, TrainingModel, TrainingStrategy,
    ValidLoader,
};
use burn_sam::{ConfigError, LossScaleHandle};

use crate::grad_sum::GradSum;
use crate::window::item_weights;
use crate::{AccumulationConfig, WindowOptimizer};

/// The loss scale of the pass running on this thread, and whether the `TrainStep` used it.
struct PassScale {
    handle: LossScaleHandle,
    used: bool,
}

thread_local! {
    static PASS_SCALE: RefCell<Option<PassScale>> = const { RefCell::new(None) };
}

/// `loss` times the loss scale of the pass [`SamTraining`] is running, in f32: call `backward`
/// on this in your `TrainStep`. Returns `loss` unchanged without loss scaling and outside
/// [`SamTraining`], so the same `TrainStep` serves f32 and f16 training. Keep the unscaled
/// loss in the step's output, for the metrics.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::tensor::Tensor;
/// use burn_sam_accum::train::scale_loss;
///
/// let loss = Tensor::<Autodiff<Flex>, 1>::from_floats([0.5], &Default::default());
/// // Outside a training strategy's pass: unchanged.
/// assert_eq!(scale_loss(loss).into_scalar(), 0.5);
/// ```
pub fn scale_loss<B: Backend, const D: usize>(loss: Tensor<B, D>) -> Tensor<B, D> {
    PASS_SCALE.with_borrow_mut(|pass| match pass {
        Some(pass) => {
            pass.used = true;
            pass.handle.scale_loss(loss)
        }
        None => loss,
    })
}

/// Runs `step` with `handle` scaling the pass's loss; also says whether `step` asked for it.
fn with_pass_scale<T>(handle: &LossScaleHandle, step: impl FnOnce() -> T) -> (T, bool) {
    PASS_SCALE.set(Some(PassScale {
        handle: handle.clone(),
        used: false,
    }));
    let output = step();
    let used = PASS_SCALE.take().is_some_and(|pass| pass.used);
    (output, used)
}

type Input<LC> = <TrainingModel<LC> as TrainStep>::Input;
type Output<LC> = <TrainingModel<LC> as TrainStep>::Output;
type ItemCount<T> = Arc<dyn Fn(&T) -> usize + Send + Sync>;

/// A Burn training strategy (`TrainingStrategy::Custom`) for [`Sam`](burn_sam::Sam) and for any
/// [`WindowOptimizer`]: SAM's two passes through the model's own `TrainStep`, the LR
/// scheduler advanced once per optimizer step, normalised gradient accumulation with the
/// partial window flushed, loss scaling. See the [module documentation](self).
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
    device: Device<LC::Backend>,
    loss_scale: LossScaleHandle,
    window: Option<usize>,
    items: Option<ItemCount<Input<LC>>>,
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
            device,
            loss_scale: optim.loss_scale_handle(),
            window: None,
            items: None,
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

    /// Steps once per `window` batches of the data loader, with the gradient of their union.
    /// Overrides `SupervisedTraining::grads_accumulation`, which is otherwise taken as the
    /// window. An error for `window = 0`.
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

    fn weights(&self, inputs: &[Input<LC>]) -> Vec<f64> {
        let counts = inputs
            .iter()
            .map(|input| self.items.as_ref().map(|items| items(input)));
        item_weights(counts).unwrap_or_else(|error| panic!("{error}"))
    }

    /// The window's gradient at the learner's model, `sum_i w_i grad L_i` carrying the
    /// current loss scale, one `TrainStep` at a time; each output goes to `output`.
    fn window_gradient(
        &self,
        learner: &Learner<LC>,
        inputs: impl ExactSizeIterator<Item = Input<LC>>,
        weights: &[f64],
        mut output: impl FnMut(usize, Output<LC>),
    ) -> GradientsParams {
        let handle = &self.loss_scale;
        let single = inputs.len() == 1;
        let model = learner.model();
        let mut sum = GradSum::default();
        for (index, input) in inputs.enumerate() {
            let (step, used) = with_pass_scale(handle, || learner.train_step(input));
            assert!(
                used || !handle.is_scaling(),
                "loss scaling is on (scale {}) but the TrainStep did not call \
                 burn_sam_accum::train::scale_loss on the loss it back-propagates",
                handle.get()
            );
            output(index, step.item);
            if single {
                return step.grads;
            }
            sum.add(&model, step.grads, weights[index])
                .unwrap_or_else(|error| panic!("{error}"));
        }
        let grads = sum.into_grads();
        if <LC::Optimizer as WindowOptimizer<_, _>>::WIDE_GRADIENTS {
            grads
        } else {
            cast_to_params(&model, grads)
        }
    }

    fn train_epoch(
        &self,
        learner: &mut Learner<LC>,
        loader: &TrainLoader<LC>,
        window: usize,
        epoch: &Progress,
        processor: &mut SupervisedTrainingEventProcessor<LC>,
        interrupter: &Interrupter,
    ) {
        let most_passes = <LC::Optimizer as WindowOptimizer<_, _>>::PASSES;
        let overflows = self.loss_scale.overflows();
        let mut iterator = loader.iter();
        let mut iteration = 0;
        loop {
            let mut inputs = Vec::with_capacity(window);
            let mut progresses = Vec::with_capacity(window);
            while inputs.len() < window {
                let Some(input) = iterator.next() else { break };
                inputs.push(input);
                progresses.push(iterator.progress());
            }
            if inputs.is_empty() {
                break;
            }
            learner.lr_step();
            let lr = learner.lr_current();
            let weights = self.weights(&inputs);
            let passes = match self.loss_scale.single_pass_step() {
                true => 1,
                false => most_passes,
            };
            for pass in 1..=passes {
                let mut report = |index: usize, item: Output<LC>| {
                    if pass > 1 {
                        return;
                    }
                    let item = TrainingItem::new(
                        item,
                        progresses[index].clone(),
                        epoch.clone(),
                        Some(iteration + index + 1),
                        Some(lr),
                    );
                    processor.process_train(LearnerEvent::ProcessedItem(item));
                };
                let grads = if pass < passes {
                    let inputs = inputs.iter().cloned();
                    self.window_gradient(learner, inputs, &weights, &mut report)
                } else {
                    let inputs = std::mem::take(&mut inputs).into_iter();
                    self.window_gradient(learner, inputs, &weights, &mut report)
                };
                self.loss_scale.announce_strategy_step();
                learner.optimizer_step(grads);
            }
            iteration += weights.len();
            if interrupter.should_stop() {
                break;
            }
        }
        if self.loss_scale.is_scaling() {
            log::info!(
                "epoch {}: loss scale {}, {} steps overflowed (skipped in whole, or SAM's \
                 ascent skipped)",
                epoch.items_processed,
                self.loss_scale.get(),
                self.loss_scale.overflows() - overflows
            );
        }
        processor.process_train(LearnerEvent::EndEpoch(epoch.items_processed));
    }
}

/// Casts each gradient to its parameter's float type: a plain optimizer steps f16 parameters
/// with f16 gradients (accumulation itself ran in f32).
fn cast_to_params<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: GradientsParams,
) -> GradientsParams {
    struct Cast {
        grads: GradientsParams,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Cast {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) {
                let dtype = param.val().dtype();
                self.grads.register(param.id, grad.cast(dtype));
            }
        }
    }
    let mut cast = Cast { grads };
    module.visit(&mut cast);
    cast.grads
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
        let loader_train = loader_train.to_device(&self.device);
        let loader_valid = loader_valid.to_device(self.device.inner());
        learner.fork(&self.device);
        // A shuffling loader draws a new order each epoch: draw those of the skipped epochs.
        for _ in 1..starting_epoch {
            drop(loader_train.iter());
        }
        let mut processor = components.event_processor;
        let mut checkpointer = components.checkpointer;
        let mut early_stopping = components.early_stopping;
        let interrupter = components.interrupter;

        for epoch in starting_epoch..=components.num_epochs {
            let progress = Progress::new(epoch, components.num_epochs);
            self.train_epoch(
                &mut learner,
                &loader_train,
                window,
                &progress,
                &mut processor,
                &interrupter,
            );
            if interrupter.should_stop() {
                let reason = interrupter.get_message();
                log::info!(
                    "training interrupted: {}",
                    reason.as_deref().unwrap_or("no reason given")
                );
                break;
            }
            valid_epoch(
                &learner,
                &loader_valid,
                &progress,
                &mut processor,
                &interrupter,
            );
            if let Some(checkpointer) = &mut checkpointer {
                checkpointer.checkpoint(&learner, epoch, &components.event_store);
            }
            if let Some(early_stopping) = &mut early_stopping {
                if early_stopping.should_stop(epoch, &components.event_store) {
                    break;
                }
            }
        }
        (learner.model(), processor)
    }
}
