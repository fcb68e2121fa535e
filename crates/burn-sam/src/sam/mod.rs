//! [`Sam`]: the optimizer a user holds, its configuration's `init`, and what it reports. The
//! phases of a step are in `phases`, Momentum-SAM's look-ahead in `look_ahead`, and the
//! `Optimizer` implementation that strategies and Burn's `Learner` call in `optimizer`.

mod look_ahead;
mod optimizer;
mod phases;
mod report;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::config::SamConfig;
use crate::error::{ConfigError, SamError};
use crate::family::FamilyRules;
use crate::handle::LossScaleHandle;
use crate::label::{check_resume, Resume};
use crate::param_map::ParamMap;
use crate::precision::MixedPrecision;
use crate::scaler::LossScalerConfig;
use crate::variant::SamVariant;

use phases::Pending;
pub use report::{PendingAscent, SamRecord, SamStats, SamStep, StepOutcome, StepReport};

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
        let pass_seed = self.config.pass_seed.map(|seed| (seed, self.stats.steps));
        handle.publish_passes(self.family.passes(), pass_seed);
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
            MixedPrecision::new(scaler, self.master_weights).with_max_grad_norm(self.max_grad_norm);
        Ok(Sam::new(self.clone(), base, precision))
    }
}
