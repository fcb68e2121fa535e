//! [`Sam`]: the optimizer a user holds, its configuration's `init`, and what it reports. The
//! phases of a step are in `phases`, the one-call step in `step_with`, what the ascent leaves
//! for the descent in `pending`, and the `Optimizer` implementation that strategies and
//! Burn's `Learner` call in `optimizer`.

mod optimizer;
mod pending;
mod phases;
mod report;
mod step_with;
mod strategy_phases;

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;

use crate::channel::{Channel, Linkable, StepLink};
use crate::config::SamConfig;
use crate::error::{ConfigError, SamError};
use crate::family::{FamilyRules, Plan};
use crate::label::check_resume;
use crate::mixed_precision::{LossScalerConfig, Precision};
use crate::protocol::Passes;

use crate::step_report::{StepOutcome, StepReport};
use pending::Pending;
pub use report::{PendingAscent, SamRecord, SamStats, SamStep};
pub use strategy_phases::Phases;

/// Sharpness-Aware Minimization over any Burn optimizer `O`, and the SAM family
/// ([`SamVariant`](crate::SamVariant)).
///
/// Each batch takes two passes. The ascent moves the weights `w` to `w + e(w)` and keeps `w`;
/// the descent puts `w` back and lets `O` step it with the gradient taken at `w + e(w)`.
/// LookSAM's steps between its full ones take one pass ([`Sam::needs_ascent`] is false): the
/// descent alone, with the gradient at `w`; so do a [`SamSchedule`](crate::SamSchedule)'s base
/// steps, where the base optimizer steps as without SAM. Momentum-SAM's ascent takes no pass:
/// it moves to its look-ahead `w~`, where its one pass is taken ([`Sam::passes`]).
///
/// Between steps the module is always at `w`, for every variant and every way of driving
/// it: what you evaluate, validate or save after a step is the model itself. An error, and
/// a skipped step, hand back the weights the step started from
/// ([`StepError`](crate::StepError)).
///
/// Three ways to drive it:
/// - [`Sam::step_with`]: one call that runs the step's passes with a loss closure.
/// - [`Sam::ascend`] and [`Sam::descend`]: the two phases, for loops that compute gradients
///   themselves (skip `ascend` when [`Sam::needs_ascent`] is false). Errors are values that
///   hand the module back ([`StepError`](crate::StepError)).
/// - as an [`Optimizer`](burn::optim::Optimizer), for generic code that opts in with
///   [`Sam::step_per_pass`]: `step` after each forward and backward pass on the same batch,
///   twice per batch (once where `needs_ascent` is false). The first call is the ascent (it
///   returns the perturbed module), the second the descent.
///
/// **In Burn's `Learner`, run `Sam` under `burn_sam_accum::train::SamTraining`** (one device,
/// or data-parallel over several with `SamTraining::data_parallel`), built from the optimizer
/// the `Learner` gets. Burn's own strategies (`ExecutionStrategy::SingleDevice` or
/// `MultiDevice`) call `step` once per batch, so `Sam` would ascend on one batch and descend
/// with the next one's gradient (Momentum-SAM: take its pass at `w` instead of `w~`): their
/// first `step` panics with
/// [`SamError::UnlinkedStep`], naming the fix.
///
/// With loss scaling on, every phase needs the gradients of a loss scaled by this optimizer
/// ([`LossScaling::scale_loss`](crate::LossScaling::scale_loss), or the [`LossScaleHandle`](crate::LossScaleHandle)'s): a
/// phase whose loss nobody scaled is refused with [`SamError::UnscaledLoss`].
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
    precision: Precision,
    family: FamilyRules,
    channel: Channel,
    /// `Optimizer::step` without a strategy's hand-over is the caller's own pass loop.
    step_per_pass: bool,
}

impl<O> Sam<O> {
    pub(crate) fn new(config: SamConfig, base: O, precision: Precision) -> Self {
        let sam = Self {
            family: FamilyRules::new(config.variant.clone(), config.eps, config.schedule.clone()),
            config,
            base,
            pending: None,
            stats: SamStats::default(),
            precision,
            channel: Channel::reading_losses(),
            step_per_pass: false,
        };
        sam.publish();
        sam
    }

    /// Opts in to `Optimizer::step` without a training strategy, for code generic over Burn's
    /// optimizers that runs a forward and backward pass on the same batch before each call:
    /// two calls per batch (ascent, then descent), one where [`Sam::needs_ascent`] is false.
    /// Momentum-SAM's first call takes no gradients (`GradientsParams::new()`, no pass) and
    /// hands back its look-ahead `w~`, where the pass for the second call is taken. Under an
    /// adaptive schedule, make the second call only while [`Sam::awaits_descent`].
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
        self.resume_as(record).map(drop)
    }

    /// Whether this optimizer can continue `record`, and whether its variant state continues.
    fn resume_as(&self, record: &SamRecord) -> Result<bool, SamError> {
        check_resume(
            &self.config,
            record.label.as_ref(),
            &record.variant,
            &record.mixed_precision,
        )
    }

    /// Whether [`Sam::step_per_pass`] opted in to `Optimizer::step` without a strategy.
    pub fn is_step_per_pass(&self) -> bool {
        self.step_per_pass
    }

    /// [`Sam::is_step_per_pass`].
    #[deprecated(since = "0.2.0", note = "renamed `is_step_per_pass`")]
    pub fn steps_per_pass(&self) -> bool {
        self.step_per_pass
    }

    /// Whether this step starts with [`Sam::ascend`]: false on LookSAM's steps between its
    /// full ones and on a schedule's base steps, which take one pass, straight to
    /// [`Sam::descend`], and while an ascent waits for its descent.
    pub fn needs_ascent(&self) -> bool {
        self.pending.is_none() && self.family.plan().ascends()
    }

    /// The passes the next step takes: [`Passes::Two`] (ascend from the gradient at `w`,
    /// descend from the one at `w + e`), [`Passes::One`] (LookSAM between its full steps, a
    /// schedule's base step: descend from the gradient at `w`) or [`Passes::LookAhead`]
    /// (Momentum-SAM: ascend with no gradients, descend from the gradient at the `w~` it
    /// returned). Under an adaptive schedule a [`Passes::Two`] step's ascent may take a base
    /// step itself: [`Sam::awaits_descent`] says whether the second pass is run.
    pub fn passes(&self) -> Passes {
        self.family.plan().passes()
    }

    /// Whether an ascent waits for its descent: after [`Sam::ascend`], unless an adaptive
    /// [`SamSchedule`](crate::SamSchedule) decided from its gradient that the step is a base
    /// step, which the ascent then took (its report is [`Sam::last_report`]).
    pub fn awaits_descent(&self) -> bool {
        self.pending.is_some()
    }

    /// What the last finished step did: for calls that hand back only the module
    /// (`Optimizer::step`, an ascent that took a base step).
    pub fn last_report(&self) -> Option<StepReport> {
        self.channel.last_report()
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

    /// The module itself: between steps every variant's module is at `w`.
    #[deprecated(
        since = "0.2.0",
        note = "the module a step hands back is `w`: use it as it is"
    )]
    pub fn unperturbed<M: AutodiffModule<B>, B: AutodiffBackend>(&self, module: M) -> M {
        module
    }

    /// The module itself: Momentum-SAM moves to its look-ahead inside each step.
    #[deprecated(
        since = "0.2.0",
        note = "each Momentum-SAM step looks ahead itself, after a resume too: remove the call"
    )]
    pub fn look_ahead<M: AutodiffModule<B>, B: AutodiffBackend>(&mut self, module: M) -> M {
        module
    }

    /// Tells strategies what the step's state says: the passes of the step under way (or the
    /// next), their seed, and whether an ascent waits for its descent.
    fn publish(&self) {
        let pass_seed = self.config.pass_seed.map(|seed| (seed, self.stats.steps));
        let passes = self.family.plan().passes();
        self.channel
            .publish(passes, pass_seed, self.pending.is_some());
    }

    fn unlinked_step(&self) -> SamError {
        SamError::UnlinkedStep {
            variant: self.config.variant.name(),
            look_ahead: self.family.plan() == Plan::LookAhead,
        }
    }
}

impl<O> Linkable for Sam<O> {
    fn step_link(&self) -> StepLink {
        StepLink::new(self.precision.handle().clone(), self.channel.clone())
    }
}

impl<O> core::fmt::Debug for Sam<O> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sam")
            .field("config", &self.config)
            .field("base", &core::any::type_name::<O>())
            .field("perturbed", &self.pending.is_some())
            .field("stats", &self.stats)
            .field("loss_scale", &self.precision.loss_scale())
            .finish()
    }
}

impl SamConfig {
    /// Wraps `base` into a [`Sam`] optimizer.
    ///
    /// # Panics
    /// When the configuration is invalid, with the message of [`SamConfig::validate`];
    /// [`SamConfig::try_init`] returns it instead.
    #[track_caller]
    pub fn init<O>(&self, base: O) -> Sam<O> {
        ConfigError::or_panic(self.try_init(base))
    }

    /// Wraps `base` into a [`Sam`] optimizer, or says which field is invalid.
    ///
    /// ```
    /// use burn_sam::{LossScalerConfig, SamConfig};
    ///
    /// let scaling = LossScalerConfig::new().with_init_scale(0.0);
    /// let error = SamConfig::new().with_loss_scaling(Some(scaling)).try_init(()).unwrap_err();
    /// assert_eq!(error.config, "LossScalerConfig");
    /// assert_eq!(error.field, "init_scale");
    /// ```
    pub fn try_init<O>(&self, base: O) -> Result<Sam<O>, ConfigError> {
        self.validate()?;
        let scaler = self
            .loss_scaling
            .as_ref()
            .map(LossScalerConfig::try_init)
            .transpose()?;
        let precision =
            Precision::new(scaler, self.master_weights).with_max_grad_norm(self.max_grad_norm);
        Ok(Sam::new(self.clone(), base, precision))
    }
}
