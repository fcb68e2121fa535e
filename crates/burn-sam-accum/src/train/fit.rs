//! `SamTraining` as Burn's `SupervisedLearningStrategy`: the start every rank agrees on, the
//! epochs, validation, checkpoints and early stopping.

use burn::data::dataloader::split::split_dataloader;
use burn::data::dataloader::Progress;
use burn::module::Module;
use burn::tensor::backend::DeviceOps;
use burn::train::{
    Learner, LearningComponentsTypes, SupervisedLearningStrategy, SupervisedTrainingEventProcessor,
    TrainLoader, TrainingComponents, TrainingModel, ValidLoader,
};

use burn_sam::{SamError, StepError};

use super::epoch::valid_epoch;
use super::peers::Layout;
use super::{announce, wire, Input, SamTraining};
use crate::optimizer::WindowOptimizer;

impl<LC> SamTraining<LC>
where
    LC: LearningComponentsTypes + 'static,
    LC::Optimizer: WindowOptimizer<TrainingModel<LC>, LC::Backend>,
    Input<LC>: Clone,
{
    /// Checks with every rank that all started alike ([`SamTraining::settings`]) and, on rank
    /// 0, says that SAM is on and how; this rank's replicas' place among the job's.
    fn agree_on_start(
        &self,
        model: &TrainingModel<LC>,
        window: usize,
        epochs: (usize, usize),
    ) -> Layout {
        let (devices, peers) = (self.replicas.devices(), self.replicas.peers());
        if let Some(seed) = self.sam.as_ref().and_then(|config| config.pass_seed) {
            // The backend's generator is one per process: replicas' threads would draw from
            // it in whatever order they run, and ranks would repeat each other's masks.
            assert!(
                devices.len() == 1 && peers.size() == 1,
                "SamConfig.pass_seed = {seed} with {} replicas on {} ranks: seeded passes need \
                 one replica in one process (the backend's random generator is one per \
                 process); leave `pass_seed` None for data-parallel training",
                devices.len(),
                peers.size()
            );
        }
        let layout = peers.handshake(devices.len(), &self.settings(model, window, epochs));
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
        layout
    }

    /// This rank's replicas' parts of `loader`, each on its replica's device, with the
    /// shuffles of the epochs before `starting_epoch` drawn. Every rank splits the loader into
    /// one part per replica of the job, as one process with all of them would (each part's
    /// shuffle is forked from the loader's in order), and keeps its own parts.
    fn split_loader(
        &self,
        loader: TrainLoader<LC>,
        layout: &Layout,
        starting_epoch: usize,
    ) -> Vec<TrainLoader<LC>> {
        let (devices, main) = (self.replicas.devices(), self.replicas.main());
        let parts = layout.first..layout.first + devices.len();
        let all_devices: Vec<_> = (0..layout.total)
            .map(|index| match parts.contains(&index) {
                true => devices[index - layout.first].clone(),
                false => main.clone(),
            })
            .collect();
        let loaders: Vec<_> = split_dataloader(loader, &all_devices)
            .into_iter()
            .skip(parts.start)
            .zip(devices)
            .map(|(loader, device)| loader.to_device(device))
            .collect();
        // A shuffling loader draws a new order each epoch: draw those of the skipped epochs.
        for _ in 1..starting_epoch {
            for loader in &loaders {
                drop(loader.iter());
            }
        }
        loaders
    }

    /// Puts the model of the checkpoint the `Learner` resumes from back as it was saved, before
    /// replicas or ranks copy it: Burn loads f16 parameters as f32 on an f32 device. Says so
    /// when it is not the model saved beside the optimizer's record (a half-precision
    /// recorder); refuses a resume that cannot continue the run.
    fn resume_model(&self, learner: &mut Learner<LC>, starting_epoch: usize) {
        let model = match self.link.resume(learner.model()) {
            Ok(model) => model,
            Err(StepError {
                module,
                error: error @ SamError::ResumedModelDiffers,
            }) => {
                let line = format!(
                    "burn-sam: SamTraining: resuming from the checkpoint of epoch {}: {error}",
                    starting_epoch.saturating_sub(1)
                );
                log::warn!("{line}");
                eprintln!("{line}");
                module
            }
            Err(error) => panic!("{error}"),
        };
        learner.load_model(model.into_record());
    }

    /// Moves the learner to the main device and, across ranks, loads rank 0's weights,
    /// whatever each rank initialised.
    fn start_replicas(&self, learner: &mut Learner<LC>) {
        learner.fork(self.replicas.main());
        let peers = self.replicas.peers();
        if peers.size() > 1 {
            let root = match peers.is_root() {
                true => wire::write_weights(&learner.model()),
                false => Vec::new(),
            };
            let weights = peers.broadcast(root);
            learner.load_model(wire::read_weights(learner.model(), &weights).into_record());
        }
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

impl<LC> SupervisedLearningStrategy<LC> for SamTraining<LC>
where
    LC: LearningComponentsTypes + 'static,
    LC::Optimizer: WindowOptimizer<TrainingModel<LC>, LC::Backend>,
    Input<LC>: Clone,
{
    fn fit(
        &self,
        mut components: TrainingComponents<LC>,
        mut learner: Learner<LC>,
        loader_train: TrainLoader<LC>,
        loader_valid: ValidLoader<LC>,
        starting_epoch: usize,
    ) -> (TrainingModel<LC>, SupervisedTrainingEventProcessor<LC>) {
        self.resume_model(&mut learner, starting_epoch);
        let window = self.window(components.grad_accumulation);
        let epochs = (starting_epoch, components.num_epochs);
        let layout = self.agree_on_start(&learner.model(), window, epochs);
        let loaders_train = self.split_loader(loader_train, &layout, starting_epoch);
        let loader_valid = loader_valid.to_device(self.replicas.main().inner());
        self.start_replicas(&mut learner);
        let peers = self.replicas.peers();
        let (processor, interrupter) = (&mut components.event_processor, &components.interrupter);

        for epoch in starting_epoch..=components.num_epochs {
            let progress = Progress::new(epoch, components.num_epochs);
            let stopped = self.train_epoch(
                &mut learner,
                &loaders_train,
                window,
                &progress,
                processor,
                interrupter,
            );
            if stopped {
                let reason = interrupter.get_message();
                let reason = reason.as_deref().unwrap_or("by another rank");
                log::info!("training interrupted: {reason}");
                break;
            }
            // Rank 0 alone validates, writes checkpoints and decides to stop early.
            let mut stop_early = false;
            if peers.is_root() {
                valid_epoch(&learner, &loader_valid, &progress, processor, interrupter);
                if let Some(checkpointer) = &mut components.checkpointer {
                    self.link.label_checkpoint(epoch, &learner.model());
                    checkpointer.checkpoint(&learner, epoch, &components.event_store);
                }
                if let Some(early_stopping) = &mut components.early_stopping {
                    stop_early = early_stopping.should_stop(epoch, &components.event_store);
                }
            }
            if peers.broadcast_flag(stop_early) {
                break;
            }
        }
        (learner.model(), components.event_processor)
    }
}
