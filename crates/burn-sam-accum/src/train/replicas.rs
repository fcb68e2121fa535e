//! Data parallelism over replicas of the model: one worker thread per replica, each on its
//! device with its share of the window, running the user's `TrainStep`; the gradients are
//! combined on the main device in replica order, so results do not depend on which thread
//! finishes first. Replicas are keyed by their index, never by device id: CPU devices all
//! report the same id.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::{GradientsParams, LearningRate};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Device, Tensor};
use burn::train::{TrainOutput, TrainStep};
use burn_sam::strategy::{
    map_grads, perturb, transfers_through_host, GradMap, ParamGrad, StepLink,
};
use burn_sam::{diagnostics, SamConfig};

use super::kept_losses::KeptLosses;
use super::pass_scale::with_pass;
use super::peers::Peers;
use super::scatter::exchange;
use super::transfer::{fork_to, grads_to};
use crate::grad_sum::{Summed, WeightedSum};

/// Bytes this process sent: between its replicas' devices (the model or the perturbed model
/// out to each replica but the main one, their gradients back) and, across MPI ranks, in each
/// gradient exchange (its replicas' pieces of the other ranks' shards, then its summed shard
/// to every other rank); counted as they are sent, with the optimizer steps they served. The
/// same devices listed twice (CPU tests) count the bytes a transfer between distinct devices
/// would move.
///
/// ```
/// use burn_sam_accum::train::Traffic;
///
/// let traffic = Traffic::default();
/// assert_eq!((traffic.bytes(), traffic.steps(), traffic.bytes_per_step()), (0, 0, 0.0));
/// assert_eq!((traffic.rank_bytes(), traffic.exchanges()), (0, 0));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Traffic(Arc<Counts>);

#[derive(Debug, Default)]
struct Counts {
    bytes: AtomicU64,
    steps: AtomicU64,
    rank_bytes: AtomicU64,
    exchanges: AtomicU64,
}

impl Traffic {
    /// Bytes sent since the strategy was built.
    pub fn bytes(&self) -> u64 {
        self.0.bytes.load(Ordering::Relaxed)
    }

    /// Optimizer steps taken since the strategy was built.
    pub fn steps(&self) -> u64 {
        self.0.steps.load(Ordering::Relaxed)
    }

    /// Mean bytes per optimizer step (0 before the first).
    pub fn bytes_per_step(&self) -> f64 {
        match self.steps() {
            0 => 0.0,
            steps => self.bytes() as f64 / steps as f64,
        }
    }

    /// Of [`bytes`](Self::bytes), those sent to other MPI ranks.
    pub fn rank_bytes(&self) -> u64 {
        self.0.rank_bytes.load(Ordering::Relaxed)
    }

    /// Gradient exchanges across MPI ranks (`Ascent::Synced`: one per pass).
    pub fn exchanges(&self) -> u64 {
        self.0.exchanges.load(Ordering::Relaxed)
    }

    fn exchange(&self, bytes: u64) {
        self.send(bytes);
        self.0.rank_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.0.exchanges.fetch_add(1, Ordering::Relaxed);
    }

    fn send(&self, bytes: u64) {
        self.0.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(super) fn step(&self) {
        self.0.steps.fetch_add(1, Ordering::Relaxed);
    }
}

/// The devices of this process's replicas, the first one the main device (the optimizer's),
/// and the other processes whose replicas' gradients are combined with them.
pub(super) struct Replicas<B: AutodiffBackend> {
    devices: Vec<Device<B>>,
    traffic: Traffic,
    peers: Peers,
}

/// The combined result of one pass over the replicas.
pub(super) struct Combined<T, B: AutodiffBackend> {
    /// `sum_r sum_i w_ri grad L_ri` on the main device.
    pub grads: GradientsParams,
    /// Whether `grads` is one `TrainStep`'s gradient as it came (one replica, one batch):
    /// then in the parameters' float type, otherwise in f32.
    pub as_came: bool,
    /// The `TrainStep` outputs of the first pass, replica by replica.
    pub outputs: Vec<Vec<T>>,
    /// The losses of the pass, where a metric reads the step's report.
    pub losses: KeptLosses<B>,
}

/// SAM's radius and rule for local ascents, and the step's learning rate.
pub(super) type LocalAscent<'a> = Option<(&'a SamConfig, LearningRate)>;

impl<B: AutodiffBackend> Replicas<B> {
    pub fn new(devices: Vec<Device<B>>) -> Self {
        Self {
            devices,
            traffic: Traffic::default(),
            peers: Peers::default(),
        }
    }

    #[cfg(feature = "mpi")]
    pub fn with_peers(self, peers: Peers) -> Self {
        Self { peers, ..self }
    }

    pub fn peers(&self) -> &Peers {
        &self.peers
    }

    pub fn devices(&self) -> &[Device<B>] {
        &self.devices
    }

    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    pub fn main(&self) -> &Device<B> {
        &self.devices[0]
    }

    /// The window's gradient at `model`, replica `r` taking the gradient of
    /// `sum_i weights[r][i] L(shards[r][i])` on its device, in its thread, with every loss
    /// scaled by `loss_scale`; across ranks, summed with the other ranks' replicas' in rank
    /// order (every rank then holds bitwise the same sum). With `local`, each
    /// replica first moves its copy by its own gradient ([`perturb`]) and gives the gradient
    /// at its moved copy; one whose gradient was not finite gives that gradient instead, so
    /// that the combined one is not finite and the step is skipped everywhere.
    pub fn gradient<M>(
        &self,
        model: &M,
        shards: Vec<Vec<M::Input>>,
        weights: &[Vec<f64>],
        loss_scale: Option<f32>,
        local: LocalAscent<'_>,
        link: &StepLink,
    ) -> Combined<M::Output, B>
    where
        M: TrainStep + AutodiffModule<B>,
        M::Input: Clone,
    {
        // The models go out and the gradients come back on this thread, the passes run in the
        // replicas' threads (or here, where `transfers_through_host` says why).
        let jobs: Vec<_> = shards
            .into_iter()
            .enumerate()
            .filter(|(_, inputs)| !inputs.is_empty())
            .map(|(index, inputs)| (index, self.send_model(index, model.clone()), inputs))
            .collect();
        let pass = |(index, replica, inputs): (usize, M, Vec<M::Input>)| {
            let pass = replica_pass(replica, inputs, &weights[index], loss_scale, local, link);
            (index, pass)
        };
        let threads = jobs.len() > 1 && !transfers_through_host::<B>(self.main());
        let passes: Vec<_> = match threads {
            false => jobs.into_iter().map(pass).collect(),
            true => {
                // The weights the workers start from exist before any of them reads them: a
                // queue of this thread's is not another thread's (one host wait per pass).
                diagnostics::sync::<B>(self.main()).unwrap_or_else(|error| panic!("{error:?}"));
                in_threads(jobs, &pass)
            }
        };
        let mut outputs = Vec::with_capacity(passes.len());
        let mut local = Vec::with_capacity(passes.len());
        let mut losses = KeptLosses::default();
        for (index, (summed, replica, replica_outputs, kept)) in passes {
            let grads = self.receive_grads(index, summed.grads, &replica);
            local.push(Summed { grads, ..summed });
            outputs.push(replica_outputs);
            losses.append(kept, self.main());
        }
        // Summed in replica order: the result does not depend on which thread, or which rank,
        // finished first.
        let Summed { grads, as_came } = self.combine(model, local);
        Combined {
            grads,
            as_came,
            outputs,
            losses,
        }
    }

    /// The sum of every rank's replicas' gradients in global replica order, this rank's
    /// `local` among them: added here in one process, across ranks by a reduce-scatter in
    /// replica order ([`scatter`](super::scatter)), not in the network, whose order of
    /// additions MPI does not fix.
    fn combine<M: AutodiffModule<B>>(&self, model: &M, local: Vec<Summed>) -> Summed {
        if self.peers.size() > 1 {
            let (sum, sent) = exchange(&self.peers, model, local, self.main());
            self.traffic.exchange(sent);
            return sum;
        }
        let mut sum = WeightedSum::default();
        for summed in local {
            sum.add_summed(model, summed)
                .unwrap_or_else(|error| panic!("{error}"));
        }
        sum.finish()
    }

    /// The model on replica `index`'s device, counted as sent unless that is the main one.
    fn send_model<M: AutodiffModule<B>>(&self, index: usize, model: M) -> M {
        let replica = fork_to(model, &self.devices[index]);
        if index != 0 {
            self.traffic.send(module_bytes(&replica));
        }
        replica
    }

    /// Replica `index`'s gradients on the main device, counted as sent unless they are there.
    fn receive_grads<M: AutodiffModule<B>>(
        &self,
        index: usize,
        grads: GradientsParams,
        replica: &M,
    ) -> GradientsParams {
        if index == 0 {
            return grads;
        }
        let (grads, bytes) = grad_bytes(replica, grads);
        self.traffic.send(bytes);
        grads_to(grads, replica, self.main())
    }
}

/// A replica's panic (a `TrainStep` that failed, a misuse) goes on in the main thread.
fn join<T>(result: std::thread::Result<T>) -> T {
    result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// One replica's pass on its device: its weighted gradient (at its moved copy under a local
/// ascent), the copy it was taken at, the `TrainStep` outputs of the first pass and the
/// losses kept.
fn replica_pass<B, M>(
    replica: M,
    inputs: Vec<M::Input>,
    weights: &[f64],
    loss_scale: Option<f32>,
    local: LocalAscent<'_>,
    link: &StepLink,
) -> (Summed, M, Vec<M::Output>, KeptLosses<B>)
where
    B: AutodiffBackend,
    M: TrainStep + AutodiffModule<B>,
    M::Input: Clone,
{
    let mut outputs = Vec::with_capacity(inputs.len());
    let pass = |model: &M, inputs, outputs| {
        weighted_gradient(model, inputs, weights, loss_scale, link, outputs)
    };
    let Some((config, lr)) = local else {
        let (grads, losses) = pass(&replica, inputs, Some(&mut outputs));
        let kept = KeptLosses::new(losses, Vec::new());
        return (grads, replica, outputs, kept);
    };
    let (ascent, first_losses) = pass(&replica, inputs.clone(), Some(&mut outputs));
    let (grads, copy) = shared_copy(&replica, ascent.grads);
    let ascent_copy = Summed {
        grads: copy,
        as_came: ascent.as_came,
    };
    let moved = perturb(config, lr, replica, grads, loss_scale.unwrap_or(1.0))
        .unwrap_or_else(|error| panic!("{}", error.error));
    if moved.known_unperturbed() {
        let kept = KeptLosses::new(first_losses, Vec::new());
        return (ascent_copy, moved.module, outputs, kept);
    }
    drop(ascent_copy);
    let (Summed { grads, as_came }, losses) = pass(&moved.module, inputs, None);
    // Where the ascent's norm stayed on the device, a fault in it reaches the descent here.
    let grads = Summed {
        grads: moved.carry_fault(grads),
        as_came,
    };
    let kept = KeptLosses::new(first_losses, losses);
    (grads, moved.module, outputs, kept)
}

/// `sum_i grad (weights[i] L(inputs[i]))` at `model` ([`WeightedSum`]), and each loss with
/// its weight where the link has readers of the step's report.
fn weighted_gradient<B, M>(
    model: &M,
    inputs: Vec<M::Input>,
    weights: &[f64],
    loss_scale: Option<f32>,
    link: &StepLink,
    mut outputs: Option<&mut Vec<M::Output>>,
) -> (Summed, Vec<(Tensor<B, 1>, f64)>)
where
    B: AutodiffBackend,
    M: TrainStep + AutodiffModule<B>,
{
    let mut sum = WeightedSum::default();
    let mut losses = Vec::new();
    let keep_loss = link.has_readers();
    for (index, (input, &weight)) in inputs.into_iter().zip(weights).enumerate() {
        // Every pass of a batch draws the same random numbers, where SAM seeds them (one
        // replica: `SamTraining` refuses seeded passes over several).
        link.seed_pass(model, index);
        let (TrainOutput { grads, item }, scaled) =
            with_pass(loss_scale, weight, keep_loss, || model.step(input));
        if let Some(outputs) = outputs.as_mut() {
            outputs.push(item);
        }
        losses.push((scaled.loss, weight));
        // Weighted in its loss by `scale_loss`, as the direct path does; a `TrainStep`
        // without it (and without loss scaling) is weighted here, after `backward`.
        let weight = if scaled.used { 1.0 } else { weight };
        sum.add(model, grads, weight)
            .unwrap_or_else(|error| panic!("{error}"));
    }
    (sum.finish(), KeptLosses::of(losses))
}

/// `grads` and a second handle on each of its gradients (no copy of the data).
fn shared_copy<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: GradientsParams,
) -> (GradientsParams, GradientsParams) {
    struct Share(GradientsParams);
    impl<B: Backend> GradMap<B> for Share {
        fn map<const D: usize>(&mut self, param: ParamGrad<B, D>) -> Option<Tensor<B, D>> {
            let ParamGrad {
                id, tensor: grad, ..
            } = param;
            self.0.register(id, grad.clone());
            Some(grad)
        }
    }
    let mut share = Share(GradientsParams::new());
    let (grads, _) = map_grads(model, grads, &mut share);
    (grads, share.0)
}

/// The bytes of the module's float tensors.
fn module_bytes<B: AutodiffBackend, M: AutodiffModule<B>>(model: &M) -> u64 {
    struct Bytes(u64);
    impl<B: AutodiffBackend> ModuleVisitor<B> for Bytes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0 += tensor_bytes(&param.val());
        }
    }
    let mut bytes = Bytes(0);
    model.visit(&mut bytes);
    bytes.0
}

/// `grads`, and the bytes of those that are gradients of the module's parameters.
fn grad_bytes<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: GradientsParams,
) -> (GradientsParams, u64) {
    struct Bytes(u64);
    impl<B: Backend> GradMap<B> for Bytes {
        fn map<const D: usize>(&mut self, param: ParamGrad<B, D>) -> Option<Tensor<B, D>> {
            self.0 += tensor_bytes(&param.tensor);
            Some(param.tensor)
        }
    }
    let mut bytes = Bytes(0);
    let (grads, _) = map_grads(model, grads, &mut bytes);
    (grads, bytes.0)
}

fn tensor_bytes<B: burn::tensor::backend::Backend, const D: usize>(tensor: &Tensor<B, D>) -> u64 {
    (tensor.shape().num_elements() * tensor.dtype().size()) as u64
}

/// Runs `pass` on each job in a thread of its own; the results in the jobs' order.
fn in_threads<J: Send, R: Send>(jobs: Vec<J>, pass: &(impl Fn(J) -> R + Sync)) -> Vec<R> {
    std::thread::scope(|scope| {
        let workers: Vec<_> = jobs
            .into_iter()
            .map(|job| scope.spawn(move || pass(job)))
            .collect();
        workers
            .into_iter()
            .map(|worker| join(worker.join()))
            .collect()
    })
}
