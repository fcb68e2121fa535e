//! One optimizer step inside the `Learner`: each pass the optimizer's next step takes, its
//! gradient combined over the replicas and handed over to `Optimizer::step` (the
//! [`burn_sam::strategy`] protocol).

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;
use burn::train::{Learner, LearningComponentsTypes, TrainingModel};
use burn_sam::strategy::{map_grads, GradMap, Handover, ParamGrad, Passes};

use super::replicas::LocalAscent;
use super::{Ascent, Input, Output, SamTraining};
use crate::optimizer::WindowOptimizer;

/// How long a step waits for SAM's metrics to read a step's report before it warns and goes
/// on: far longer than Burn's metrics take for a step's outputs.
const READERS_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

impl<LC> SamTraining<LC>
where
    LC: LearningComponentsTypes + 'static,
    LC::Optimizer: WindowOptimizer<TrainingModel<LC>, LC::Backend>,
    Input<LC>: Clone,
{
    /// What local ascents perturb with at learning rate `lr`: SAM's configuration, when the
    /// optimizer is SAM and the ascents are local.
    fn local_ascent(&self, lr: LearningRate) -> LocalAscent<'_> {
        match self.ascent {
            Ascent::Local => self.sam.as_ref().map(|config| (config, lr)),
            Ascent::Synced => None,
        }
    }

    /// One pass's gradient at the learner's model, losses scaled by `loss_scale`, in the form
    /// the optimizer steps with, and the `TrainStep` outputs; the pass's losses are noted on
    /// the link where a metric reads the step's report.
    fn gradient(
        &self,
        learner: &Learner<LC>,
        shards: Vec<Vec<Input<LC>>>,
        weights: &[Vec<f64>],
        loss_scale: Option<f32>,
        local: LocalAscent<'_>,
    ) -> (GradientsParams, Vec<Vec<Output<LC>>>) {
        let model = learner.model();
        let combined = self
            .replicas
            .gradient(&model, shards, weights, loss_scale, local, &self.link);
        let wide = <LC::Optimizer as WindowOptimizer<_, _>>::WIDE_GRADIENTS;
        let grads = match combined.as_came || wide {
            true => combined.grads,
            false => cast_to_params(&model, combined.grads),
        };
        combined.losses.note(&self.link);
        (grads, combined.outputs)
    }

    /// One optimizer step from the replicas' windows: each pass the optimizer's next step
    /// takes, its gradient handed over to `Optimizer::step` (the [`burn_sam::strategy`]
    /// protocol). `report` gets the first pass's `TrainStep` outputs, replica by replica.
    ///
    /// The outputs go just before the last pass's step, whose read of the norms blocks this
    /// thread at once. The metrics read the losses on another thread, and a read of a fused
    /// tensor drains the queue that made it: handed over while this thread was still queuing
    /// the next pass, the outputs would let the metrics cut that queue at a different point
    /// every step, and fusion would compile every cut anew (`tests/vulkan_fused_kernels.rs`
    /// counts them). Where a metric reads the step's report ([`StepLink::subscribe`]) they go
    /// just after the step, its report fed first (a metric then finds it in step order), and
    /// the next step waits until the metrics have read them: their reads of the outputs then
    /// cut the queue just after the step, every step.
    ///
    /// [`StepLink::subscribe`]: burn_sam::strategy::StepLink::subscribe
    pub(super) fn optimizer_step(
        &self,
        learner: &mut Learner<LC>,
        shards: Vec<Vec<Input<LC>>>,
        weights: &[Vec<f64>],
        lr: LearningRate,
        mut report: impl FnMut(Vec<Vec<Output<LC>>>),
    ) {
        self.link.clear_losses();
        if !self.link.has_readers() {
            return self.passes(learner, shards, weights, lr, report);
        }
        let mut first = None;
        self.passes(learner, shards, weights, lr, |outputs| {
            first = Some(outputs)
        });
        let outputs = first.expect("the first pass's outputs");
        // Fed before the outputs go, where they go (rank 0): the metric of each output finds
        // its step's report. Then read before the next step queues anything.
        let root = self.replicas.peers().is_root();
        if root {
            self.link.feed(outputs.iter().map(Vec::len).sum());
        }
        report(outputs);
        if root {
            self.link.await_readers(READERS_PATIENCE);
        }
    }

    /// The passes of one optimizer step; `report` gets the first pass's outputs just before
    /// the last pass's step.
    fn passes(
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
        if next.passes == Passes::LookAhead {
            // Momentum-SAM's ascent takes no pass: the learner's model moves to `w~`.
            let handover = Handover::Gradient {
                loss_scale: next.loss_scale,
            };
            self.step_linked(learner, GradientsParams::new(), handover);
        }
        let passes = next.passes.count();
        let mut first = None;
        for pass in 1..=passes {
            let shards = match pass < passes {
                true => shards.clone(),
                false => std::mem::take(&mut shards),
            };
            let loss_scale = self.link.next_step().loss_scale;
            let (grads, outputs) = self.gradient(learner, shards, weights, loss_scale, None);
            first.get_or_insert(outputs);
            if pass == passes {
                report(first.take().expect("the first pass's outputs"));
            }
            self.step_linked(learner, grads, Handover::Gradient { loss_scale });
            if pass < passes && !self.link.awaits_descent() {
                // An adaptive schedule's base step: the ascent took the whole step.
                report(first.take().expect("the first pass's outputs"));
                return;
            }
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
