//! The crate's errors: invalid configurations, misuse of an optimizer's protocol and the loss
//! scale's hard stop.

use core::fmt;

use burn::tensor::DType;

/// A configuration field outside its allowed range.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    /// The config struct, as the user named it (`SamConfig`, `LossScalerConfig`, ...).
    pub config: &'static str,
    /// The field's name, as in the config struct.
    pub field: &'static str,
    /// The rejected value, as written in the message.
    pub value: String,
    /// The allowed range, in words.
    pub allowed: &'static str,
}

impl ConfigError {
    /// `Ok` when `ok`, otherwise the error naming `config.field`, its value and its range.
    ///
    /// ```
    /// use burn_sam::ConfigError;
    ///
    /// let error = ConfigError::check("MyConfig", "rho", -1.0, "finite and >= 0", false);
    /// assert_eq!(
    ///     error.unwrap_err().to_string(),
    ///     "invalid MyConfig: `rho` = -1, allowed: finite and >= 0"
    /// );
    /// ```
    pub fn check(
        config: &'static str,
        field: &'static str,
        value: impl fmt::Display,
        allowed: &'static str,
        ok: bool,
    ) -> Result<(), Self> {
        if ok {
            return Ok(());
        }
        Err(Self {
            config,
            field,
            value: value.to_string(),
            allowed,
        })
    }
}

impl ConfigError {
    /// `result`'s value, or a panic with its error's message: what every configuration's
    /// `init` does with its `try_init`. The panic names the caller of a `#[track_caller]`
    /// function that calls this.
    ///
    /// ```
    /// use burn_sam::ConfigError;
    ///
    /// let valid = ConfigError::check("MyConfig", "rho", 0.1, "finite and >= 0", true);
    /// assert_eq!(ConfigError::or_panic(valid.map(|()| 0.1)), 0.1);
    /// ```
    #[track_caller]
    pub fn or_panic<T>(result: Result<T, Self>) -> T {
        match result {
            Ok(value) => value,
            Err(error) => panic!("{error}"),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            config,
            field,
            value,
            allowed,
        } = self;
        write!(
            f,
            "invalid {config}: `{field}` = {value}, allowed: {allowed}"
        )
    }
}

impl std::error::Error for ConfigError {}

/// The loss scale can no longer shrink and every step overflows: training cannot make progress.
#[derive(Debug, Clone, PartialEq)]
pub struct LossScaleError {
    /// The scale, at its minimum.
    pub scale: f32,
    /// Overflows in a row at that scale.
    pub overflows: u64,
}

impl fmt::Display for LossScaleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "loss scale stuck at its minimum {} with {} overflows in a row: the gradients are \
             not finite even unscaled (a NaN in the model or the data, or a diverged run); \
             stopping as `max_overflows_at_min` asks",
            self.scale, self.overflows
        )
    }
}

impl std::error::Error for LossScaleError {}

/// What went wrong when configuring or stepping a [`Sam`](crate::Sam) or
/// [`MixedPrecision`](crate::MixedPrecision) optimizer.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::{GradientsParams, SgdConfig};
/// use burn::tensor::Tensor;
/// use burn_sam::{SamConfig, SamError};
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(2, 1).init(&device);
/// let mut optim = SamConfig::new().init(SgdConfig::new().init());
/// let loss = model.forward(Tensor::<B, 2>::ones([4, 2], &device)).mean();
/// let grads = GradientsParams::from_grads(loss.backward(), &model);
/// // A descent without its ascent: refused, and the model comes back as it was.
/// let refused = optim.descend(0.1, model, grads).unwrap_err();
/// assert_eq!(refused.error, SamError::DescentWithoutAscent);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum SamError {
    /// A configuration field is outside its allowed range.
    InvalidConfig(ConfigError),
    /// `descend` was called without a pending ascent.
    DescentWithoutAscent,
    /// `ascend` was called while the previous ascent still waits for its descent.
    AscentPending,
    /// The gradients hold parameters that the module does not have.
    ForeignGradients {
        /// Gradients registered.
        gradients: usize,
        /// Of those, how many belong to a parameter of the module.
        matched: usize,
    },
    /// The module given to the descent is not the one the ascent returned.
    ForeignModule,
    /// Loss scaling is on, but no loss was scaled since the last step: the gradients would be
    /// off by the scale.
    UnscaledLoss,
    /// The loss scale hit its minimum and kept overflowing (`max_overflows_at_min`).
    LossScale(LossScaleError),
    /// `ascend` was called on a step that takes one pass (LookSAM between its full steps, a
    /// [`SamSchedule`](crate::SamSchedule)'s base step): call `descend` with the gradient at the unperturbed weights ([`Sam::needs_ascent`](crate::Sam::needs_ascent)).
    SinglePassStep,
    /// Momentum-SAM's ascent got gradients: it takes no pass, moving to its look-ahead along
    /// its momentum ([`Passes::LookAhead`](crate::strategy::Passes::LookAhead)).
    LookAheadGradients,
    /// Local ascents (a perturbation per micro-batch or per replica, each from its own
    /// gradient: burn-sam-accum's `Ascent::Local`, a strategy's
    /// [`Handover::LocalDescent`](crate::strategy::Handover::LocalDescent)) with a variant
    /// other than SAM, whose rules join one ascent to one descent on the same weights
    /// ([`SamVariant::check_local_ascent`](crate::SamVariant::check_local_ascent)).
    LocalAscentVariant {
        /// The variant's name.
        variant: &'static str,
    },
    /// Local ascents under an adaptive [`SamSchedule`](crate::SamSchedule), which decides
    /// between a SAM step and a base step from the step's one gradient
    /// ([`SamConfig::check_local_ascent`](crate::SamConfig::check_local_ascent)).
    LocalAscentSchedule,
    /// [`SamConfig::perturb_only`](crate::SamConfig::perturb_only) picked no parameter of the module.
    NothingPicked {
        /// The names given.
        names: Vec<String>,
    },
    /// A training strategy handed over gradients of losses scaled by another scale than the
    /// optimizer's ([`Handover`](crate::strategy::Handover)).
    LossScaleMismatch {
        /// The optimizer's scale (1 without loss scaling).
        expected: f32,
        /// The scale the strategy said its losses carry.
        handed: f32,
    },
    /// `Optimizer::step` on a [`Sam`](crate::Sam) that no training strategy drives (Burn's
    /// default `Learner` strategy, or a loop of one's own) and that was not opted in with
    /// [`Sam::step_per_pass`](crate::Sam::step_per_pass).
    UnlinkedStep {
        /// The variant's name.
        variant: &'static str,
        /// Whether the variant's pass is taken at its look-ahead `w~` (Momentum-SAM).
        look_ahead: bool,
    },
    /// A training strategy handed a step over to the optimizer it holds a link to, and another
    /// optimizer was stepped: the strategy was built from another optimizer than the one the
    /// `Learner` steps.
    LinkedToAnotherOptimizer,
    /// `load_record` got a record this optimizer cannot continue exactly: another variant's
    /// state, other loss scaling or master weights, a newer record format
    /// ([`SamRecordLabel`](crate::record::SamRecordLabel)).
    RecordMismatch {
        /// The `Learner` epoch whose checkpoint the record is, when `SamTraining` saved it.
        epoch: Option<u64>,
        /// What the record holds.
        record: String,
        /// What the optimizer is.
        optimizer: String,
        /// How to continue.
        fix: String,
    },
    /// A resumed model's parameters are not in the float types they were saved in: Burn loads
    /// a record's floats in the device's default float type, so an f16 model saved at full
    /// precision comes back f32 on an f32 device
    /// ([`LossScaling::resume`](crate::LossScaling::resume) puts it back).
    ResumedDType {
        /// How many parameters differ.
        params: usize,
        /// The type one of them was saved in (`None`: narrower than f32, in a record from
        /// before float types were saved).
        saved: Option<DType>,
        /// Its type now.
        now: DType,
    },
    /// A resume on a device whose default float type is narrower than f32, of a base
    /// optimizer whose state of the f32 master weights Burn loaded in that type.
    ResumeOnNarrowDefault {
        /// The device's default float type.
        default: DType,
    },
    /// The resumed model is not the model saved beside the optimizer's record: its weights'
    /// [`fingerprint`](crate::record::fingerprint) differs (a half-precision recorder rounded them).
    ResumedModelDiffers,
    /// The backend cannot compute in the float type parameters were to be cast to.
    UnsupportedDType {
        /// The float type asked for.
        dtype: DType,
        /// The backend's name.
        backend: String,
    },
}

impl From<LossScaleError> for SamError {
    fn from(error: LossScaleError) -> Self {
        Self::LossScale(error)
    }
}

impl From<ConfigError> for SamError {
    fn from(error: ConfigError) -> Self {
        Self::InvalidConfig(error)
    }
}

const DESCENT_WITHOUT_ASCENT: &str =
    "SAM descent without an ascent: call `ascend` (or the first `step`) on this batch first";
const ASCENT_PENDING: &str =
    "SAM ascent while the previous ascent waits for its descent: call `descend` first";
const FOREIGN_MODULE: &str = "SAM descent got a module whose parameters differ from the ascent's: \
                 pass the module returned by the ascent";
const SINGLE_PASS_STEP: &str =
    "SAM ascent on a one-pass step (LookSAM between its full steps, or a schedule's base \
                 step): call \
                 `descend` with the gradient at the unperturbed weights; `needs_ascent` \
                 says which steps take two passes";
const LOCAL_ASCENT_SCHEDULE: &str =
    "an adaptive SamSchedule cannot take local ascents (each micro-batch or replica perturbed \
     by its own gradient): it decides between a SAM step and a base step from the step's one \
     gradient; use `Ascent::Synced`, or a schedule of `Every`, `From` or `Random`";
const LOOK_AHEAD_GRADIENTS: &str =
    "Momentum-SAM's ascent takes no pass: it moves the weights to their look-ahead \
                 `w~` along the momentum. Call `ascend` with `GradientsParams::new()`, take the \
                 step's one pass at the module it returns, and `descend` with that gradient \
                 (`Sam::passes` is `Passes::LookAhead`)";

impl fmt::Display for SamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidConfig(error) => error.fmt(f),
            Self::DescentWithoutAscent => f.write_str(DESCENT_WITHOUT_ASCENT),
            Self::AscentPending => f.write_str(ASCENT_PENDING),
            Self::ForeignGradients { gradients, matched } => write!(
                f,
                "gradients for parameters the module does not have ({matched} of {gradients} \
                 match): compute the gradients with this module"
            ),
            Self::ForeignModule => f.write_str(FOREIGN_MODULE),
            Self::UnscaledLoss => unscaled_loss(f),
            Self::LossScale(error) => error.fmt(f),
            Self::SinglePassStep => f.write_str(SINGLE_PASS_STEP),
            Self::LookAheadGradients => f.write_str(LOOK_AHEAD_GRADIENTS),
            Self::LocalAscentSchedule => f.write_str(LOCAL_ASCENT_SCHEDULE),
            Self::LocalAscentVariant { variant } => write!(
                f,
                "{variant} cannot take local ascents (each micro-batch or replica perturbed by \
                 its own gradient): its rule joins one ascent to one descent on the same \
                 weights; use `Ascent::Synced`, or `SamVariant::Sam`"
            ),
            Self::NothingPicked { names } => write!(
                f,
                "`SamConfig::perturb_only` = {names:?} picks no parameter of the module: name \
                 module types (\"BatchNorm\") or dotted paths (\"encoder.norm\") it has"
            ),
            Self::LossScaleMismatch { expected, handed } => write!(
                f,
                "the training strategy scaled its losses by {handed} but the optimizer's loss \
                 scale is {expected}: read the scale from `StepLink::next_step` before each step"
            ),
            Self::UnlinkedStep {
                variant,
                look_ahead,
            } => unlinked_step(f, variant, *look_ahead),
            Self::LinkedToAnotherOptimizer => linked_to_another_optimizer(f),
            Self::RecordMismatch {
                epoch,
                record,
                optimizer,
                fix,
            } => record_mismatch(f, *epoch, record, optimizer, fix),
            Self::ResumedDType { .. }
            | Self::ResumeOnNarrowDefault { .. }
            | Self::ResumedModelDiffers => refused_resume(f, self),
            Self::UnsupportedDType { dtype, backend } => write!(
                f,
                "the {backend} backend does not compute in {dtype:?} on this device: train \
                 {dtype:?} parameters on Flex, CUDA, Vulkan/WebGPU or LibTorch (NdArray has only \
                 f32 and f64)"
            ),
        }
    }
}

/// [`SamError::UnlinkedStep`]'s message: what the step would have trained, and the fix.
fn unlinked_step(f: &mut fmt::Formatter<'_>, variant: &str, look_ahead: bool) -> fmt::Result {
    match look_ahead {
        false => write!(
            f,
            "`Sam` ({variant}) was stepped through `Optimizer::step` by code that is not a SAM \
             training strategy, such as Burn's default `Learner` strategy, which steps once \
             per batch: {variant}'s ascent and descent would be taken on different batches, \
             silently training something that is not {variant}. In a `Learner`, add \
             `.with_training_strategy(burn_sam_accum::train::SamTraining::strategy(device, \
             &optim))` with the `optim` you give `Learner::new`; in a loop of your own, use \
             `Sam::step_with` or `Sam::ascend`/`Sam::descend`. Code that calls \
             `Optimizer::step` after each pass on the same batch opts in with \
             `Sam::step_per_pass()`"
        ),
        true => write!(
            f,
            "`Sam` ({variant}) was stepped through `Optimizer::step` by code that is not a SAM \
             training strategy, such as Burn's default `Learner` strategy, which takes each \
             batch's pass at the weights `w`: {variant}'s one pass belongs at its look-ahead \
             `w~ = w - rho * v / ||v||`, which the step's first call, with no gradients, moves \
             to. In a `Learner`, add \
             `.with_training_strategy(burn_sam_accum::train::SamTraining::strategy(device, \
             &optim))` with the `optim` you give `Learner::new`; in a loop of your own, use \
             `Sam::step_with` or `Sam::ascend`/`Sam::descend`. Code that calls \
             `Optimizer::step` itself opts in with `Sam::step_per_pass()`: a first call with \
             `GradientsParams::new()` returns `w~`, the second, with the gradient there, `w`"
        ),
    }
}

/// [`SamError::UnscaledLoss`]'s message: where the loss is scaled, in a loop and in a `Learner`.
fn unscaled_loss(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(
        f,
        "loss scaling is on, but no loss was scaled since the last step: call \
         `backward` on `optim.scale_loss(loss)`; in a Burn `Learner`, train with \
         `burn_sam_accum::train::SamTraining` and call \
         `burn_sam_accum::train::scale_loss` in the `TrainStep` (Burn's default \
         strategy cannot scale the loss)"
    )
}

/// [`SamError::LinkedToAnotherOptimizer`]'s message: the strategy and the `Learner` hold two
/// optimizers.
fn linked_to_another_optimizer(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(
        f,
        "the training strategy handed this step over to the optimizer it was built \
         from, but the `Learner` stepped another optimizer: build \
         `burn_sam_accum::train::SamTraining` from the optimizer you give `Learner::new` \
         (`SamTraining::strategy(device, &optim)`, then `Learner::new(model, optim, \
         ..)`), or from a clone of it. Two optimizers built from one configuration are \
         two optimizers: each has its own passes, loss scale and state"
    )
}

/// The messages of a refused resume.
fn refused_resume(f: &mut fmt::Formatter<'_>, error: &SamError) -> fmt::Result {
    let (params, saved, now) = match *error {
        SamError::ResumedDType { params, saved, now } => (params, saved, now),
        SamError::ResumeOnNarrowDefault { default } => {
            return write!(f, "{NARROW_DEFAULT}{default:?}{NARROW_DEFAULT_FIX}")
        }
        _ => return f.write_str(RESUMED_MODEL_DIFFERS),
    };
    let (saved, fix) = match saved {
        Some(saved) => (format!("{saved:?}"), RESUME_FIX),
        None => ("narrower than f32".to_string(), OLD_RECORD_FIX),
    };
    write!(
        f,
        "{params} parameter(s) saved {saved} are {now:?} in the resumed model: Burn loads a \
         record's float tensors in the device's default float type, and the run would go on \
         in {now:?}. {fix}"
    )
}

const NARROW_DEFAULT: &str = "cannot resume on a device whose default float type is narrower \
     than f32: Burn loaded the base optimizer's state of the f32 master weights (Adam's \
     moments, SGD's momentum) in it, rounded, and its next step would fail inside the backend. \
     Load the checkpoint on a device with an f32 default float type (`Cuda<f32>`, \
     `Vulkan<f32>`, no `set_default_float_dtype`) and call `optim.resume(model)`, which casts \
     the model back to ";
const NARROW_DEFAULT_FIX: &str =
    "; train in f16 that way from the start (`try_cast_params(model, FloatDType::F16)`)";
const RESUME_FIX: &str = "Call `optim.resume(model)` (the `LossScaling` trait) after loading the \
     model and the optimizer's record: it casts them back (`SamTraining` does it in a `Learner`)";
const OLD_RECORD_FIX: &str = "The record predates saved float types: cast the model with \
     `try_cast_params(model, FloatDType::F16)` (or the type it was saved in) after loading it";
const RESUMED_MODEL_DIFFERS: &str =
    "the resumed model is not the model saved beside the optimizer's record (the weights' \
     fingerprints differ): a half-precision recorder, such as Burn's `CompactRecorder`, \
     rounds the model's weights and the base optimizer's state to f16, so the run goes on near \
     where it stopped, not from it. Save checkpoints with \
     `NamedMpkFileRecorder::<FullPrecisionSettings>` to continue exactly, and load the model \
     and the optimizer's record of the same checkpoint";

/// [`SamError::RecordMismatch`]'s message.
fn record_mismatch(
    f: &mut fmt::Formatter<'_>,
    epoch: Option<u64>,
    record: &str,
    optimizer: &str,
    fix: &str,
) -> fmt::Result {
    let checkpoint = match epoch {
        Some(epoch) => format!(" (the Learner checkpoint of epoch {epoch})"),
        None => String::new(),
    };
    write!(
        f,
        "cannot resume from this record{checkpoint}: it holds {record}; the optimizer \
         is {optimizer}. {fix}"
    )
}

impl std::error::Error for SamError {}
