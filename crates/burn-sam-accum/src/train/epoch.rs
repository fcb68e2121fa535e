//! One training epoch of optimizer steps over the replicas' loaders, and Burn's validation
//! epoch.

use burn::data::dataloader::{DataLoaderIterator, Progress};
use burn::module::AutodiffModule;
use burn::train::{
    EventProcessorTraining, InferenceStep, Interrupter, Learner, LearnerEvent,
    LearningComponentsTypes, SupervisedTrainingEventProcessor, TrainLoader, TrainingItem,
    TrainingModel, ValidLoader,
};

use super::plan::Plan;
use super::{Input, SamTraining};
use crate::optimizer::WindowOptimizer;

impl<LC> SamTraining<LC>
where
    LC: LearningComponentsTypes + 'static,
    LC::Optimizer: WindowOptimizer<TrainingModel<LC>, LC::Backend>,
    Input<LC>: Clone,
{
    /// One epoch of optimizer steps, until every rank's loaders are done; whether some
    /// rank's interrupter stopped it.
    pub(super) fn train_epoch(
        &self,
        learner: &mut Learner<LC>,
        loaders: &[TrainLoader<LC>],
        window: usize,
        epoch: &Progress,
        processor: &mut SupervisedTrainingEventProcessor<LC>,
        interrupter: &Interrupter,
    ) -> bool {
        let start = self.counters();
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
        let facts = self.epoch_facts(&start);
        if root {
            if !facts.is_empty() {
                log::info!("epoch {}: {}", epoch.items_processed, facts.join("; "));
            }
            processor.process_train(LearnerEvent::EndEpoch(epoch.items_processed));
        }
        stopped
    }
}

/// The counters an epoch's log line reports the change of.
struct Counters {
    overflows: u64,
    bytes: u64,
    steps: u64,
    rank_bytes: u64,
    exchanges: u64,
}

impl<LC: LearningComponentsTypes> SamTraining<LC> {
    fn counters(&self) -> Counters {
        let traffic = self.replicas.traffic();
        Counters {
            overflows: self.link.loss_scale().overflows(),
            bytes: traffic.bytes(),
            steps: traffic.steps(),
            rank_bytes: traffic.rank_bytes(),
            exchanges: traffic.exchanges(),
        }
    }

    /// What a user of loss scaling or of several devices watches, since `start`: one line
    /// per epoch.
    fn epoch_facts(&self, start: &Counters) -> Vec<String> {
        let traffic = self.replicas.traffic();
        let mut facts = Vec::new();
        let loss_scale = self.link.loss_scale();
        if loss_scale.is_scaling() {
            facts.push(format!(
                "loss scale {}, {} steps overflowed (skipped in whole, or SAM's ascent skipped)",
                loss_scale.get(),
                loss_scale.overflows() - start.overflows
            ));
        }
        if self.replicas.devices().len() > 1 || self.replicas.peers().size() > 1 {
            let steps = traffic.steps() - start.steps;
            facts.push(format!(
                "{:.0} bytes sent between devices and ranks per step ({steps} steps)",
                (traffic.bytes() - start.bytes) as f64 / steps.max(1) as f64
            ));
        }
        if self.replicas.peers().size() > 1 {
            let exchanges = traffic.exchanges() - start.exchanges;
            facts.push(format!(
                "{:.0} bytes sent to the other ranks per gradient exchange ({exchanges} exchanges)",
                (traffic.rank_bytes() - start.rank_bytes) as f64 / exchanges.max(1) as f64
            ));
        }
        facts
    }
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

/// Burn's validation epoch: the model in inference mode over the validation loader.
pub(super) fn valid_epoch<LC: LearningComponentsTypes>(
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
