use burn::module::{AutodiffModule, ParamId};
use burn::optim::LearningRate;
use burn::optim::{GradientsParams, MultiGradientsParams, Optimizer};
use burn::record::Record;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

use crate::config::SamConfig;
use crate::error::{SamError, StepError};
use crate::family::{FamilyRules, VariantRecord};
use crate::filter::perturbed_params;
use crate::handle::LossScaleHandle;
use crate::label::{check_resume, Resume, SamRecordLabel};
use crate::merge::merge_devices;
use crate::or_hand_back;
use crate::param_map::ParamMap;
use crate::perturb::{
    kept_tensors, look_ahead_by, move_along, snapshot_covers, sync_running_states, Restore,
};
use crate::precision::{MixedPrecision, MixedPrecisionRecord};
use crate::state::ParamState;
use crate::strategy::{check_handed_scale, Handover};
use crate::variant::SamVariant;

/// Sharpness-Aware Minimization over any Burn optimizer `O`, and the SAM family
/// ([`SamVariant`](crate::SamVariant)).
///
/// Each batch takes two passes. The ascent moves the weights `w` to `w + e(w)` and keeps `w`;
/// the descent puts `w` back and lets `O` step it with the gradient taken at `w + e(w)`.
/// LookSAM's steps between its full ones take one pass ([`Sam::needs_ascent`] is false): the
/// descent alone, with the gradient at `w`.
///
/// Three ways to drive it:
/// - [`Sam::step_with`]: one call that runs the step's passes with a loss closure.
/// - [`Sam::ascend`] and [`Sam::descend`]: the two phases, for loops that compute gradients
///   themselves (skip `ascend` when [`Sam::needs_ascent`] is false). Errors are values that
///   hand the module back ([`StepError`]).
/// - as an [`Optimizer`], for generic code that opts in with [`Sam::step_per_pass`]: `step`
///   after each forward and backward pass on the same batch, twice per batch (once where
///   `needs_ascent` is false). The first call is the ascent (it returns the perturbed module),
///   the second the descent.
///
/// **In Burn's `Learner`, run `Sam` under `burn_sam_accum::train::SamTraining`** (one device,
/// or data-parallel over several with `SamTraining::data_parallel`), built from the optimizer
/// the `Learner` gets. Burn's own strategies (`ExecutionStrategy::SingleDevice` or
/// `MultiDevice`) call `step` once per batch, so `Sam` would ascend on one batch and descend
/// with the next one's gradient (Momentum-SAM: the `Learner` would validate and save its
/// look-ahead `w~`): their first `step` panics with [`SamError::UnlinkedStep`], naming the
/// fix.
///
/// With loss scaling on, every phase needs the gradients of a loss scaled by this optimizer
/// ([`Sam::scale_loss`], or the [`LossScaleHandle`]'s): a phase whose loss nobody scaled is
/// refused with [`SamError::UnscaledLoss`].
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::SgdConfig;
/// use burn::tensor::Tensor;
/// use burn_sam::SamConfig;
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let x = Tensor::<B, 2>::ones([4, 3], &device);
///
/// let mut sam = SamConfig::new().with_rho(0.05).init(SgdConfig::new().init());
/// let step = sam
///     .step_with(0.1, model, |model: &Linear<B>| model.forward(x.clone()).powi_scalar(2).mean())
///     .unwrap();
/// println!("loss {} -> {:?}", step.loss.into_scalar(), step.report.outcome);
/// ```
#[derive(Clone)]
pub struct Sam<O> {
    config: SamConfig,
    base: O,
    pending: Option<Pending>,
    stats: SamStats,
    precision: MixedPrecision,
    family: FamilyRules,
    /// Momentum-SAM: the weights `w` of the module last handed out at `w~`.
    look_ahead: Option<ParamMap>,
    /// `Optimizer::step` without a strategy's hand-over is the caller's own pass loop.
    step_per_pass: bool,
}

/// What the ascent leaves for the descent.
#[derive(Clone)]
struct Pending {
    snapshot: ParamMap,
    /// The ascent gradient, for variants whose descent combines it (GSAM, LookSAM).
    ascent_grads: ParamMap,
    /// The variant's state after this step (Friendly-SAM's momentum), kept if it applies.
    variant_state: ParamState<f64>,
    grad_norm: f64,
    /// False when the ascent overflowed: it then made this step's one loss-scale update.
    perturbed: bool,
}

/// What [`Sam::ascend`] did, while its descent is pending.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PendingAscent {
    /// `||a * g||` of the ascent gradient, unscaled.
    pub grad_norm: f64,
    /// False when the ascent gradient was not finite: the weights were left unperturbed and
    /// the loss scale has already backed off.
    pub perturbed: bool,
}

/// Counters of what SAM did, saved in its record.
#[derive(Record, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamStats {
    /// Optimizer steps taken (descents, skipped or not).
    pub steps: u64,
    /// Steps whose ascent gradient was not finite: no perturbation, plain base step.
    pub ascents_skipped: u64,
    /// Steps whose descent gradient was not finite: weights and base state left untouched.
    pub updates_skipped: u64,
}

/// SAM's own state, saved beside the base optimizer's record, with a label saying what wrote
/// it.
///
/// `load_record` continues only a record it can continue exactly, and panics before changing
/// anything otherwise, with the message of [`Sam::check_record`]'s error: another variant's
/// state, loss scaling or master weights on where they were off (or the reverse), a record
/// format newer than [`RECORD_FORMAT`](crate::RECORD_FORMAT). One pairing of variants is
/// allowed: a record of a variant that keeps no state (SAM, GSAM) loads into any variant,
/// whose own state then starts as at its first step (Momentum-SAM's momentum at zero,
/// LookSAM's cycle with a full step). A record written before labels existed (`label`
/// `None`) loads where its contents say what wrote it (no variant state, or Momentum-SAM's
/// radius); one with LookSAM's or Friendly-SAM's state is refused until it is labelled
/// ([`SamRecordLabel::of`](crate::SamRecordLabel::of)).
#[derive(Record, Clone, Debug)]
pub struct SamRecord {
    /// Counters.
    pub stats: SamStats,
    /// Loss scaler and f32 master weights.
    pub mixed_precision: MixedPrecisionRecord,
    /// The variant's state (Friendly-SAM's momentum, LookSAM's cycle and kept direction).
    pub variant: VariantRecord,
    /// What wrote the record; `None` in records written before labels existed.
    pub label: Option<SamRecordLabel>,
}

/// What one SAM step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// Perturbed, then stepped with the gradient at the perturbed weights.
    Applied,
    /// The ascent gradient was not finite: the weights were not perturbed and the base
    /// optimizer stepped with the descent gradient, taken at the unperturbed weights.
    AscentSkipped,
    /// The descent gradient was not finite: weights and base optimizer state are unchanged.
    UpdateSkipped,
    /// A one-pass step: LookSAM's, stepped with the gradient at the weights plus the direction
    /// kept by the last full step, or Momentum-SAM's, with the gradient at its look-ahead.
    SinglePass,
}

impl StepOutcome {
    /// Whether the base optimizer stepped.
    pub fn applied(self) -> bool {
        self != Self::UpdateSkipped
    }
}

/// The outcome of one step and the gradient norms it saw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepReport {
    /// What happened.
    pub outcome: StepOutcome,
    /// `||a * g||` of the ascent direction (SAM: `a = 1`, the gradient), the norm the
    /// perturbation divides by (NaN on a one-pass step, which has no ascent).
    pub ascent_grad_norm: f64,
    /// `||g||` of the descent gradient, the one the base optimizer steps with (NaN after
    /// [`Phases::skip`](crate::strategy::Phases::skip), which has none).
    pub descent_grad_norm: f64,
    /// The loss scale of the descent pass (1 without loss scaling). Norms are unscaled.
    pub loss_scale: f32,
}

/// The result of [`Sam::step_with`].
#[derive(Debug)]
pub struct SamStep<M, B: AutodiffBackend> {
    /// The updated module.
    pub module: M,
    /// The loss of the first pass, at the unperturbed weights, detached.
    pub loss: Tensor<B, 1>,
    /// What the step did.
    pub report: StepReport,
}

impl<O> Sam<O> {
    pub(crate) fn new(config: SamConfig, base: O, precision: MixedPrecision) -> Self {
        let sam = Self {
            family: FamilyRules::new(config.variant.clone(), config.eps),
            config,
            base,
            pending: None,
            stats: SamStats::default(),
            precision,
            look_ahead: None,
            step_per_pass: false,
        };
        sam.publish_passes();
        sam
    }

    /// Opts in to `Optimizer::step` without a training strategy, for code generic over Burn's
    /// optimizers that runs a forward and backward pass on the same batch before each call:
    /// two calls per batch (ascent, then descent), one where [`Sam::needs_ascent`] is false.
    /// Momentum-SAM's `step` hands back its look-ahead `w~`: evaluate and save
    /// [`Sam::unperturbed`].
    ///
    /// Without it, such a call panics with [`SamError::UnlinkedStep`]: Burn's default `Learner`
    /// strategy makes it once per batch, which is not SAM. A training strategy
    /// (`burn_sam_accum::train::SamTraining`) needs no opt-in.
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::{GradientsParams, Optimizer, SgdConfig};
    /// use burn::tensor::Tensor;
    /// use burn_sam::SamConfig;
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let mut model: Linear<B> = LinearConfig::new(3, 1).init(&device);
    /// let mut optim = SamConfig::new().init(SgdConfig::new().init()).step_per_pass();
    /// let x = Tensor::<B, 2>::ones([4, 3], &device);
    /// // One batch: a pass and a `step` for the ascent, a pass and a `step` for the descent.
    /// for _ in 0..2 {
    ///     let loss = model.forward(x.clone()).powi_scalar(2).mean();
    ///     let grads = GradientsParams::from_grads(loss.backward(), &model);
    ///     model = optim.step(0.1, model, grads);
    /// }
    /// assert_eq!(optim.stats().steps, 1);
    /// ```
    pub fn step_per_pass(mut self) -> Self {
        self.step_per_pass = true;
        self
    }

    /// Whether `load_record` would continue from `record` (SAM's part of the optimizer's
    /// record), checked without changing anything; the error names what the record holds,
    /// what this optimizer is, and how to continue. See [`SamRecord`].
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::Linear;
    /// use burn::optim::{Optimizer, SgdConfig};
    /// use burn_sam::{SamConfig, SamVariant};
    ///
    /// type B = Autodiff<Flex>;
    /// let sgd = || SgdConfig::new().init::<B, Linear<B>>();
    /// let friendly = SamConfig::new().with_variant(SamVariant::friendly_sam()).init(sgd());
    /// let look = SamConfig::new().with_variant(SamVariant::look_sam()).init(sgd());
    /// let (_, record) = friendly.to_record();
    /// assert!(friendly.check_record(&record).is_ok());
    /// let refused = look.check_record(&record).unwrap_err();
    /// assert!(refused.to_string().contains("cannot continue Friendly-SAM's"));
    /// ```
    pub fn check_record(&self, record: &SamRecord) -> Result<(), SamError> {
        self.resume(record).map(drop)
    }

    fn resume(&self, record: &SamRecord) -> Result<Resume, SamError> {
        check_resume(
            &self.config,
            record.label.as_ref(),
            &record.variant,
            &record.mixed_precision,
        )
    }

    /// Whether [`Sam::step_per_pass`] opted in to `Optimizer::step` without a strategy.
    pub fn steps_per_pass(&self) -> bool {
        self.step_per_pass
    }

    /// Whether this step takes SAM's two passes (ascend, then descend): false on LookSAM's
    /// steps between its full ones, which take one pass, straight to [`Sam::descend`].
    pub fn needs_ascent(&self) -> bool {
        self.pending.is_none() && self.family.needs_ascent()
    }

    /// The current loss scale, 1 without loss scaling.
    pub fn loss_scale(&self) -> f32 {
        self.precision.loss_scale()
    }

    /// A shared view of the loss scale and overflows that follows this optimizer's updates,
    /// for code that computes its gradients without holding it.
    pub fn loss_scale_handle(&self) -> LossScaleHandle {
        self.precision.handle().clone()
    }

    /// `loss * scale` in f32, to call `backward` on when driving the phases yourself; the loss
    /// unchanged without loss scaling. [`Sam::step_with`] does this for you.
    pub fn scale_loss<B: Backend, const D: usize>(&self, loss: Tensor<B, D>) -> Tensor<B, D> {
        self.precision.handle().scale_loss(loss)
    }

    /// The configuration.
    pub fn config(&self) -> &SamConfig {
        &self.config
    }

    /// The wrapped base optimizer.
    pub fn base(&self) -> &O {
        &self.base
    }

    /// Counters since the optimizer was created (or since the loaded record's).
    pub fn stats(&self) -> SamStats {
        self.stats
    }

    /// Tells strategies how many passes the next step takes, and Momentum-SAM's look-ahead.
    fn publish_passes(&self) {
        let handle = self.precision.handle();
        handle.publish_passes(self.family.passes());
        if self.is_momentum_sam() {
            let rho = self.family.look_ahead_rho();
            handle.publish_look_ahead(Some((self.family.momentum().clone(), rho)));
        }
    }

    fn is_momentum_sam(&self) -> bool {
        matches!(self.config.variant, SamVariant::MomentumSam { .. })
    }

    fn unlinked_step(&self) -> SamError {
        SamError::UnlinkedStep {
            variant: self.config.variant.name(),
            look_ahead: self.is_momentum_sam(),
        }
    }

    /// Momentum-SAM: the model to take the next gradient at, `w~ = w - rho * v / (||v|| +
    /// 1e-12)`, from the model at `w` (the whole step's model is then `w~`, and `w` is kept
    /// to step from); `module` itself for the other variants and before the first step.
    ///
    /// Through [`Sam::step_with`], [`Sam::descend`] and `Optimizer::step`, Momentum-SAM hands
    /// back the model at `w~`: each step restores `w` exactly, steps it, and moves to the next
    /// `w~`. Evaluate and save [`Sam::unperturbed`]; after loading a saved model and record,
    /// call `look_ahead` before the first pass. (`SamTraining` keeps the model at `w` and
    /// does this itself.)
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::momentum::MomentumConfig;
    /// use burn::optim::SgdConfig;
    /// use burn::tensor::Tensor;
    /// use burn_sam::{SamConfig, SamVariant};
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let mut model: Linear<B> = LinearConfig::new(3, 1).init(&device);
    /// let sgd = SgdConfig::new().with_momentum(Some(MomentumConfig::new().with_dampening(0.0)));
    /// let mut sam = SamConfig::new()
    ///     .with_rho(0.5)
    ///     .with_variant(SamVariant::momentum_sam())
    ///     .init(sgd.init());
    /// let x = Tensor::<B, 2>::ones([4, 3], &device);
    /// for _ in 0..3 {
    ///     // One pass per step, at w~.
    ///     let loss = |m: &Linear<B>| m.forward(x.clone()).powi_scalar(2).mean();
    ///     model = sam.step_with(0.1, model, loss).unwrap().module;
    /// }
    /// // `model` is at w~; evaluate and save the weights w.
    /// let weights = sam.unperturbed(model.clone());
    /// assert_ne!(weights.weight.val().into_data(), model.weight.val().into_data());
    /// ```
    pub fn look_ahead<M, B>(&mut self, module: M) -> M
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        if !self.is_momentum_sam() {
            return module;
        }
        let rho = self.family.look_ahead_rho();
        let (module, snapshot) = look_ahead_by(module, self.family.momentum(), rho);
        self.look_ahead = snapshot;
        module
    }

    /// Momentum-SAM: the model at `w` for `module` at `w~` (the module a step handed back);
    /// `module` itself otherwise. See [`Sam::look_ahead`].
    pub fn unperturbed<M, B>(&self, module: M) -> M
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        match &self.look_ahead {
            Some(snapshot) => module.map(&mut Restore {
                snapshot: snapshot.clone(),
            }),
            None => module,
        }
    }

    /// A Momentum-SAM step: `module` at `w~` (`at_weights` false: a direct call; `w` comes back
    /// from the kept weights) or at `w` (a strategy's hand-over). Steps `w` with `grads` and
    /// hands back the next `w~`, or `w` to a strategy, which looks ahead through its link. A
    /// skipped step or an error hands `module` back as it came.
    fn step_look_ahead<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        at_weights: bool,
    ) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        let given = module.clone();
        // The kept `w` is moved into the module, not cloned, so that the base optimizer can
        // update it in place; a step that does not apply keeps the weights it hands back.
        let kept = match at_weights {
            true => None,
            false => self.look_ahead.take(),
        };
        let moved: Option<Vec<ParamId>> = kept.as_ref().map(|kept| kept.iter().copied().collect());
        let weights = match kept {
            Some(snapshot) => module.map(&mut Restore { snapshot }),
            None => module,
        };
        let (weights, report) = match self.step_descent(lr, weights, grads, Descent::SinglePass) {
            Ok(stepped) => stepped,
            Err(error) => {
                self.look_ahead = moved.map(|ids| kept_tensors(&error.module, &ids));
                return Err(StepError::new(given, error.error));
            }
        };
        if !report.outcome.applied() {
            self.look_ahead = moved.map(|ids| kept_tensors(&weights, &ids));
            return Ok((given, report));
        }
        self.family.set_look_ahead_rho(self.config.rho_at(lr));
        self.publish_passes();
        if at_weights {
            self.look_ahead = None;
            return Ok((weights, report));
        }
        Ok((self.look_ahead(weights), report))
    }

    /// First phase: moves `module` from `w` to `w + e(w)` using `grads`, the gradient at `w`,
    /// and keeps `w` for [`Sam::descend`]. `lr` is this step's learning rate, which the
    /// radius follows under a [`SamConfig::rho_schedule`].
    ///
    /// `grads` may be loss-scaled ([`Sam::scale_loss`]): the norm is unscaled for free.
    /// When the gradient is not finite (an overflow) the module is returned unperturbed, the
    /// loss scale backs off (this step's one update) and the step becomes a plain base step
    /// with the descent gradient, taken at `w` with the reduced scale. A warning is logged;
    /// nothing non-finite is written.
    ///
    /// # Errors
    /// With `module` handed back unchanged and nothing pending: an ascent is already pending
    /// ([`SamError::AscentPending`]), `grads` hold parameters `module` does not have
    /// ([`SamError::ForeignGradients`]), loss scaling is on and no loss was scaled
    /// ([`SamError::UnscaledLoss`]), the step takes one pass ([`SamError::SinglePassStep`]),
    /// [`SamConfig::perturb_only`] picks nothing ([`SamError::NothingPicked`]), or the loss
    /// scale's hard stop ([`SamError::LossScale`]).
    pub fn ascend<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        if self.pending.is_some() {
            return Err(StepError::new(module, SamError::AscentPending));
        }
        if !self.family.needs_ascent() {
            return Err(StepError::new(module, SamError::SinglePassStep));
        }
        or_hand_back!(self.precision.check_scaled(), module);
        let picked = or_hand_back!(
            perturbed_params(&module, self.config.perturb_only.as_deref()),
            module
        );
        let loss_scale = self.loss_scale();
        let ascent = or_hand_back!(
            self.family
                .ascent(&module, grads, loss_scale, picked.as_ref()),
            module
        );
        let (module, snapshot, grad_norm) = move_along(
            &self.config,
            lr,
            module,
            ascent.direction,
            loss_scale,
            picked,
        )?;
        let perturbed = grad_norm.is_finite();
        if !perturbed {
            log::warn!("SAM ascent gradient norm is {grad_norm}: not perturbing this batch");
            or_hand_back!(self.precision.update(true), module);
        }
        self.pending = Some(Pending {
            snapshot,
            ascent_grads: ascent.ascent_grads,
            variant_state: ascent.state,
            grad_norm,
            perturbed,
        });
        Ok(module)
    }

    /// Second phase: puts the weights kept by [`Sam::ascend`] back and steps them with the
    /// base optimizer using `grads`, the gradient taken at the perturbed `module` (GSAM
    /// combines it with the ascent's). On a one-pass step (LookSAM between its full steps,
    /// [`Sam::needs_ascent`] false), the whole step: `grads` is the gradient at `module`.
    ///
    /// Running statistics (BatchNorm) are restored to their values after the first pass, as
    /// if the batch had been seen once. `grads` may be loss-scaled: they are unscaled in f32
    /// before the base optimizer sees them, and parameters narrower than f32 are stepped
    /// through f32 master weights. When `grads` is not finite, nothing is stepped: the
    /// unperturbed weights and the base optimizer's state are returned unchanged, and the loss
    /// scale backs off.
    ///
    /// # Errors
    /// Without a pending ascent ([`SamError::DescentWithoutAscent`]) or with a module that is
    /// not the ascent's ([`SamError::ForeignModule`]): `module` handed back as given, the
    /// pending ascent kept. With gradients of another module or of an unscaled loss: the step
    /// is dropped and the weights of before the ascent are handed back. After the loss scale's
    /// hard stop ([`SamError::LossScale`]): the weights as the step left them.
    pub fn descend<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        if self.is_momentum_sam() {
            return self.step_look_ahead(lr, module, grads, false);
        }
        let descent = match self.pending.is_some() {
            true => Descent::AfterAscent,
            false => Descent::SinglePass,
        };
        if descent == Descent::AfterAscent || self.family.needs_ascent() {
            or_hand_back!(self.check_pending(&module), module);
        }
        self.step_descent(lr, module, grads, descent)
    }

    /// The step of data-parallel SAM with local ascents ([`Handover::LocalDescent`]): each
    /// replica moved its own copy of `module` with its own gradient, and `grads` is the
    /// combination of the replicas' gradients at their perturbed weights. Steps `module`, which
    /// stayed at `w`, like [`Sam::descend`]; the report's `ascent_grad_norm` is NaN (each
    /// replica had its own). Refused while an ascent is pending, and for variants other than
    /// SAM, whose rules join one ascent to one descent.
    fn descend_local<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        if self.pending.is_some() {
            return Err(StepError::new(module, SamError::AscentPending));
        }
        if self.config.variant != SamVariant::Sam {
            let variant = self.config.variant.name();
            return Err(StepError::new(
                module,
                SamError::LocalAscentVariant { variant },
            ));
        }
        self.step_descent(lr, module, grads, Descent::Local)
    }

    /// The descent's step, once the pending ascent (if any) is known to match `module`.
    fn step_descent<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        kind: Descent,
    ) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        let loss_scale = self.loss_scale();
        let descent = self.precision.grad_norm(&module, &grads);
        let (module, mut pending) = match kind {
            Descent::AfterAscent => self.put_back(module),
            Descent::SinglePass | Descent::Local => (module, Pending::single_pass()),
        };
        // Refused gradients end the step unfinished: the weights go back to `w`.
        let descent_grad_norm = or_hand_back!(descent, module);
        let grads = match descent_grad_norm.is_finite() && pending.perturbed {
            true => self.family.descent(
                &module,
                grads,
                &pending.ascent_grads,
                loss_scale,
                descent_grad_norm,
            ),
            false => grads,
        };
        let (module, applied) =
            self.precision
                .step_if_finite(&mut self.base, lr, module, grads, descent_grad_norm);
        if applied && pending.perturbed {
            self.family
                .commit_ascent(core::mem::take(&mut pending.variant_state));
        }
        let outcome = match (applied, kind, pending.perturbed) {
            (false, ..) => StepOutcome::UpdateSkipped,
            (true, Descent::SinglePass, _) => StepOutcome::SinglePass,
            (true, Descent::AfterAscent, false) => StepOutcome::AscentSkipped,
            (true, ..) => StepOutcome::Applied,
        };
        let report = or_hand_back!(
            self.finish(&pending, outcome, descent_grad_norm, loss_scale),
            module
        );
        Ok((module, report))
    }

    /// [`Phases::skip`](crate::strategy::Phases::skip).
    pub(crate) fn skip_pending<M, B>(&mut self, module: M) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        or_hand_back!(self.check_pending(&module), module);
        let loss_scale = self.loss_scale();
        let (module, pending) = self.put_back(module);
        let report = or_hand_back!(
            self.finish(&pending, StepOutcome::UpdateSkipped, f64::NAN, loss_scale),
            module
        );
        Ok((module, report))
    }

    /// [`Phases::restore`](crate::strategy::Phases::restore).
    pub(crate) fn restore_pending<M, B>(&mut self, module: M) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        or_hand_back!(self.check_pending(&module), module);
        Ok(self.put_back(module).0)
    }

    /// The ascent waiting for its descent, if any.
    pub(crate) fn ascent_pending(&self) -> Option<PendingAscent> {
        self.pending.as_ref().map(|pending| PendingAscent {
            grad_norm: pending.grad_norm,
            perturbed: pending.perturbed,
        })
    }

    fn check_pending<M, B>(&self, module: &M) -> Result<(), SamError>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        let Some(pending) = self.pending.as_ref() else {
            return Err(SamError::DescentWithoutAscent);
        };
        if !snapshot_covers(module, &pending.snapshot) {
            return Err(SamError::ForeignModule);
        }
        Ok(())
    }

    /// Takes the pending ascent and puts its snapshot back into `module` (checked to cover it).
    fn put_back<M, B>(&mut self, module: M) -> (M, Pending)
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        let mut pending = self.pending.take().expect("checked by check_pending");
        // A loss scaled within the step that ends here must not vouch for the next phase.
        self.precision.handle().take_loss_scaled();
        sync_running_states(&module);
        let module = module.map(&mut Restore {
            snapshot: core::mem::take(&mut pending.snapshot),
        });
        (module, pending)
    }

    /// The step's one loss-scale update (unless the overflowed ascent made it) and counters.
    fn finish(
        &mut self,
        pending: &Pending,
        outcome: StepOutcome,
        descent_grad_norm: f64,
        loss_scale: f32,
    ) -> Result<StepReport, SamError> {
        self.stats.steps += 1;
        self.stats.ascents_skipped += u64::from(!pending.perturbed);
        self.stats.updates_skipped += u64::from(outcome == StepOutcome::UpdateSkipped);
        self.family.advance(matches!(
            outcome,
            StepOutcome::Applied | StepOutcome::SinglePass
        ));
        self.publish_passes();
        if pending.perturbed {
            self.precision
                .update(outcome == StepOutcome::UpdateSkipped)?;
        }
        let report = StepReport {
            outcome,
            ascent_grad_norm: pending.grad_norm,
            descent_grad_norm,
            loss_scale,
        };
        log::debug!("SAM step {}: {report:?}", self.stats.steps);
        Ok(report)
    }

    /// The step's passes in one call: `loss` is evaluated at `w`, then at `w + e(w)`, and the
    /// base optimizer steps `w`; on a one-pass step ([`Sam::needs_ascent`] false) `loss` is
    /// evaluated once. Returns the updated module, the first pass's loss and a report.
    /// With loss scaling the losses are scaled before each backward pass: the closure is the
    /// same as in f32 training.
    pub fn step_with<M, B, F>(
        &mut self,
        lr: LearningRate,
        module: M,
        mut loss: F,
    ) -> Result<SamStep<M, B>, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
        F: FnMut(&M) -> Tensor<B, 1>,
    {
        let first = loss(&module);
        // Keeping only the value lets the first pass's graph, and the weights it saved, go
        // once it is back-propagated: the base optimizer can then update them in place.
        let first_value = first.clone().detach();
        let grads = GradientsParams::from_grads(self.scale_loss(first).backward(), &module);
        if !self.family.needs_ascent() {
            let (module, report) = self.descend(lr, module, grads)?;
            return Ok(SamStep {
                module,
                loss: first_value,
                report,
            });
        }
        let perturbed = self.ascend(lr, module, grads)?;
        let second = self.scale_loss(loss(&perturbed));
        let grads = GradientsParams::from_grads(second.backward(), &perturbed);
        let (module, report) = self.descend(lr, perturbed, grads)?;
        Ok(SamStep {
            module,
            loss: first_value,
            report,
        })
    }
}

impl<O> Sam<O> {
    /// The ascent, or the descent when one is pending or the step takes one pass.
    fn next_phase<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        match self.needs_ascent() {
            true => self.ascend(lr, module, grads),
            false => self.descend(lr, module, grads).map(|(module, _)| module),
        }
    }

    /// A strategy's phase: the scale it says its losses carry vouches for the gradients.
    fn take_handover<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        handover: Handover,
    ) -> Result<M, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        let expected = self.precision.scaler().map(|_| self.loss_scale());
        or_hand_back!(check_handed_scale(handover.loss_scale(), expected), module);
        self.precision.handle().vouch_scaled();
        match handover {
            Handover::Gradient { .. } if self.is_momentum_sam() => self
                .step_look_ahead(lr, module, grads, true)
                .map(|(module, _)| module),
            Handover::Gradient { .. } => self.next_phase(lr, module, grads),
            Handover::LocalDescent { .. } => self
                .descend_local(lr, module, grads)
                .map(|(module, _)| module),
        }
    }
}

/// Which descent a step ends with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Descent {
    /// After [`Sam::ascend`]: the weights go back to the snapshot.
    AfterAscent,
    /// LookSAM's one-pass step.
    SinglePass,
    /// After the replicas' own ascents ([`Handover::LocalDescent`]).
    Local,
}

impl Pending {
    /// A one-pass step's: nothing perturbed, nothing kept, the scale update still to make.
    fn single_pass() -> Self {
        Self {
            snapshot: ParamMap::default(),
            ascent_grads: ParamMap::default(),
            variant_state: ParamState::default(),
            grad_norm: f64::NAN,
            perturbed: true,
        }
    }
}

impl<O> core::fmt::Debug for Sam<O> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sam")
            .field("config", &self.config)
            .field("base", &core::any::type_name::<O>())
            .field("perturbed", &self.pending.is_some())
            .field("stats", &self.stats)
            .field("loss_scale", &self.loss_scale())
            .finish()
    }
}

/// A training strategy says what each call gets ([`Handover`], the
/// [`strategy`](crate::strategy) protocol). Without one, after [`Sam::step_per_pass`], `step`
/// alternates between [`Sam::ascend`] and [`Sam::descend`], so a loop that runs forward,
/// backward and `step` twice per batch gets SAM.
///
/// # Panics
/// On misuse that would otherwise train silently wrong, with the [`SamError`] message: a call
/// without a strategy's hand-over and without [`Sam::step_per_pass`]
/// ([`SamError::UnlinkedStep`]: Burn's default `Learner` strategy), a call while a strategy's
/// hand-over to another optimizer waits ([`SamError::LinkedToAnotherOptimizer`]), gradients
/// or a module of the second call that do not belong to the module of the first, or loss
/// scaling on and no loss scaled. Also when the loss scaler's `max_overflows_at_min` hard stop
/// is reached.
impl<M, B, O> Optimizer<M, B> for Sam<O>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
    O: Optimizer<M, B>,
{
    type Record = (O::Record, SamRecord);

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        let stepped = match self.precision.handle().take_handover() {
            Ok(Some(handover)) => self.take_handover(lr, module, grads, handover),
            Ok(None) if self.step_per_pass => self.next_phase(lr, module, grads),
            Ok(None) => Err(StepError::new(module, self.unlinked_step())),
            Err(error) => Err(StepError::new(module, error)),
        };
        stepped.unwrap_or_else(|error| panic!("{error}"))
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        let grads = merge_devices(&module, grads);
        self.step(lr, module, grads)
    }

    /// The base optimizer's record and SAM's own: counters, loss scaler, master weights.
    /// A pending ascent is not part of it: take records between steps.
    fn to_record(&self) -> Self::Record {
        let label = SamRecordLabel {
            epoch: self.precision.handle().shared().checkpoint_epoch,
            ..SamRecordLabel::of(&self.config)
        };
        let own = SamRecord {
            stats: self.stats,
            mixed_precision: self.precision.to_record::<B>(),
            variant: self.family.to_record::<B>(),
            label: Some(label),
        };
        (self.base.to_record(), own)
    }

    /// # Panics
    /// On a record this optimizer cannot continue exactly, before changing anything, with the
    /// message of [`Sam::check_record`]'s error (see [`SamRecord`]).
    fn load_record(mut self, (base, own): Self::Record) -> Self {
        let resume = self.resume(&own).unwrap_or_else(|error| panic!("{error}"));
        self.base = self.base.load_record(base);
        self.stats = own.stats;
        self.precision.load_record(own.mixed_precision);
        self.family.load_record(match resume {
            Resume::Exactly => own.variant,
            Resume::FreshVariantState => VariantRecord::default(),
        });
        self.publish_passes();
        self.pending = None;
        self.look_ahead = None;
        self
    }
}
