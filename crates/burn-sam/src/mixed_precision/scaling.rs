//! What every linked optimizer offers a loop of one's own: its loss scale, and the labelling
//! and resume of its checkpoints, the same for [`Sam`](crate::Sam),
//! [`MixedPrecision`](crate::MixedPrecision) and Burn's own optimizers.

use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::LossScaleHandle;
use crate::channel::Linkable;
use crate::hand_back::StepError;

/// An optimizer's loss scale, and the labelling and resume of its checkpoints: every
/// [`Linkable`](crate::strategy::Linkable) optimizer has them, read through its link.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::{GradientsParams, Optimizer, SgdConfig};
/// use burn::tensor::Tensor;
/// use burn_sam::{MixedPrecisionConfig, LossScalerConfig, LossScaling};
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let mut model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let scaling = LossScalerConfig::new().with_init_scale(1024.0);
/// let mut optim = MixedPrecisionConfig::new(scaling).init(SgdConfig::new().init());
/// let loss = model.forward(Tensor::<B, 2>::ones([2, 3], &device)).sum();
/// let grads = GradientsParams::from_grads(optim.scale_loss(loss).backward(), &model);
/// model = optim.step(0.1, model, grads);
/// assert_eq!(optim.loss_scale(), 1024.0);
/// ```
pub trait LossScaling: Linkable {
    /// A shared view of the loss scale and overflows that follows this optimizer's updates,
    /// for code that computes its gradients without holding it.
    fn loss_scale_handle(&self) -> LossScaleHandle {
        self.step_link().loss_scale().clone()
    }

    /// The current loss scale, 1 without loss scaling.
    fn loss_scale(&self) -> f32 {
        self.loss_scale_handle().get()
    }

    /// `loss * scale` in f32, to call `backward` on when computing the gradients yourself; the
    /// loss unchanged without loss scaling.
    fn scale_loss<B: Backend, const D: usize>(&self, loss: Tensor<B, D>) -> Tensor<B, D> {
        self.loss_scale_handle().scale_loss(loss)
    }

    /// Says that this optimizer's next record (`to_record`) is saved beside `model`: the
    /// record holds the model's [`fingerprint`](crate::record::fingerprint) (one read of every
    /// weight), which [`LossScaling::resume`] checks. `SamTraining` does it at each checkpoint.
    fn label_model<B: Backend, M: Module<B>>(&self, model: &M) {
        self.step_link().label_model(model);
    }

    /// The resumed `module` as it was saved, after `load_record`: parameters that were f16
    /// or bf16 cast back to that type (Burn loads a record's floats in the device's default
    /// float type, so they come back f32 on an f32 device), checked against the record.
    /// Without it, the first step refuses such a model ([`SamError::ResumedDType`]).
    /// Unchanged when no record was loaded or nothing needs putting back; `SamTraining` does
    /// it when the `Learner` resumes.
    ///
    /// # Errors
    /// With the module handed back, its types put back: the device's default float type
    /// rounded the base optimizer's state ([`SamError::ResumeOnNarrowDefault`]); the record
    /// predates saved float types and a parameter is no longer narrow
    /// ([`SamError::ResumedDType`]); the record was labelled with a model
    /// ([`LossScaling::label_model`]) and `module`'s weights differ from it, as after a
    /// half-precision recorder ([`SamError::ResumedModelDiffers`]).
    ///
    /// [`SamError::ResumedDType`]: crate::SamError::ResumedDType
    /// [`SamError::ResumeOnNarrowDefault`]: crate::SamError::ResumeOnNarrowDefault
    /// [`SamError::ResumedModelDiffers`]: crate::SamError::ResumedModelDiffers
    fn resume<B: Backend, M: Module<B>>(&self, module: M) -> Result<M, StepError<M>> {
        self.step_link().resume(module)
    }
}

impl<T: Linkable> LossScaling for T {}
