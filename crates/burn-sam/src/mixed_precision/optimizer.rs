//! [`MixedPrecision`]: loss scaling and f32 master weights for any Burn optimizer, without SAM.

use burn::config::Config;
use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;

use super::{LossScalerConfig, MixedPrecisionRecord, Precision, ScaledStepReport};
use crate::channel::{Channel, Linkable, StepLink};
use crate::config::{max_grad_norm_ok, MAX_GRAD_NORM};
use crate::error::ConfigError;
use crate::hand_back::StepError;
use crate::merge::merge_devices;
use crate::step_report::{StepOutcome, StepReport};

/// Configuration of [`MixedPrecision`]: loss scaling and f32 master weights for any Burn
/// optimizer, without SAM.
#[derive(Config, Debug)]
pub struct MixedPrecisionConfig {
    /// The dynamic loss scale.
    pub loss_scaling: LossScalerConfig,
    /// Step parameters narrower than f32 through f32 master copies.
    #[config(default = true)]
    pub master_weights: bool,
    /// Clips the gradient to this global norm, as PyTorch's `clip_grad_norm_` after
    /// `GradScaler.unscale_` (`g * min(1, max / (||g|| + 1e-6))`), from the norm each step reads
    /// anyway. `None` does not clip. Allowed: finite and `> 0`.
    #[config(default = "None")]
    pub max_grad_norm: Option<f64>,
}

impl MixedPrecisionConfig {
    /// Wraps `base`.
    ///
    /// # Panics
    /// When the loss scaler's configuration is invalid, naming the field;
    /// [`MixedPrecisionConfig::try_init`] returns it instead.
    #[track_caller]
    pub fn init<O>(&self, base: O) -> MixedPrecision<O> {
        ConfigError::or_panic(self.try_init(base))
    }

    /// Wraps `base`, or says which field is invalid.
    pub fn try_init<O>(&self, base: O) -> Result<MixedPrecision<O>, ConfigError> {
        let scaler = self.loss_scaling.try_init()?;
        if let Some(max) = self.max_grad_norm {
            let ok = max_grad_norm_ok(max);
            ConfigError::check(
                "MixedPrecisionConfig",
                "max_grad_norm",
                max,
                MAX_GRAD_NORM,
                ok,
            )?;
        }
        let precision = Precision::new(Some(scaler), self.master_weights);
        Ok(MixedPrecision {
            base,
            precision: precision.with_max_grad_norm(self.max_grad_norm),
            channel: Channel::new(),
        })
    }
}

/// Mixed-precision training for any Burn optimizer: scale the loss with
/// [`LossScaling::scale_loss`](crate::LossScaling::scale_loss) before `backward`, then `step` as usual. Each step checks the
/// gradients once (one device read); on overflow it skips the update, leaving weights and
/// optimizer state untouched, and backs the scale off; otherwise it unscales the gradients
/// in f32 and steps, through f32 master weights for f16/bf16 parameters.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::{AdamConfig, GradientsParams, Optimizer};
/// use burn::tensor::Tensor;
/// use burn_sam::{MixedPrecisionConfig, LossScalerConfig, LossScaling};
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let mut model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let mut optim = MixedPrecisionConfig::new(LossScalerConfig::new()).init(AdamConfig::new().init());
/// let loss = model.forward(Tensor::<B, 2>::ones([2, 3], &device)).powi_scalar(2).mean();
/// let grads = GradientsParams::from_grads(optim.scale_loss(loss).backward(), &model);
/// model = optim.step(1e-3, model, grads);
/// ```
#[derive(Clone)]
pub struct MixedPrecision<O> {
    base: O,
    precision: Precision,
    channel: Channel,
}

impl<O> MixedPrecision<O> {
    /// The wrapped base optimizer.
    pub fn base(&self) -> &O {
        &self.base
    }

    /// One step with gradients of the scaled loss, reporting what happened. An error, with the
    /// module handed back unchanged, when the gradients belong to another module or no loss was
    /// scaled since the last step; also when `max_overflows_at_min` is reached.
    pub fn try_step<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> Result<(M, ScaledStepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        or_hand_back!(self.channel.check_resumed(&module), module);
        let (module, report) = self
            .precision
            .guarded_step(&mut self.base, lr, module, grads)?;
        or_hand_back!(self.precision.update(!report.applied), module);
        self.channel.publish_report(StepReport {
            outcome: match report.applied {
                true => StepOutcome::BaseStep,
                false => StepOutcome::UpdateSkipped,
            },
            ascent_grad_norm: f64::NAN,
            descent_grad_norm: report.grad_norm,
            loss_scale: report.loss_scale,
            loss: f64::NAN,
            perturbed_loss: f64::NAN,
        });
        Ok((module, report))
    }
}

impl<O> Linkable for MixedPrecision<O> {
    fn step_link(&self) -> StepLink {
        StepLink::new(self.precision.handle().clone(), self.channel.clone())
    }
}

/// A training strategy's hand-over ([`Handover`](crate::strategy::Handover)) vouches for the
/// scale of the gradients instead of [`LossScaling::scale_loss`](crate::LossScaling::scale_loss); each kind is one step.
///
/// # Panics
/// On foreign gradients, gradients of an unscaled loss, a call made while a strategy's
/// hand-over to another optimizer waits
/// ([`SamError::LinkedToAnotherOptimizer`](crate::SamError::LinkedToAnotherOptimizer)), or when
/// `max_overflows_at_min` is reached, with the message.
impl<M, B, O> Optimizer<M, B> for MixedPrecision<O>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
    O: Optimizer<M, B>,
{
    type Record = (O::Record, MixedPrecisionRecord);

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        let handover = self.channel.accept(Some(self.precision.loss_scale()));
        if handover.unwrap_or_else(|error| panic!("{error}")).is_some() {
            // The channel checked the hand-over's loss scale.
            self.precision.vouch();
        }
        match self.try_step(lr, module, grads) {
            Ok((module, _)) => module,
            Err(error) => panic!("{error}"),
        }
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        let grads = merge_devices(&module, grads);
        self.step(lr, module, grads)
    }

    fn to_record(&self) -> Self::Record {
        let fingerprint = self.channel.take_checkpoint().fingerprint;
        (
            self.base.to_record(),
            self.precision.to_record::<B>(fingerprint),
        )
    }

    /// The model loaded beside it is checked at the first step: call
    /// [`LossScaling::resume`](crate::LossScaling::resume) on it first.
    fn load_record(mut self, (base, precision): Self::Record) -> Self {
        self.base = self.base.load_record(base);
        let masters = !precision.master_weights.is_empty();
        let saved = self.precision.load_record(precision);
        let saved = saved.with_base_state::<B, _>(masters, || self.base.to_record());
        self.channel.publish_saved_model(saved);
        self
    }
}
