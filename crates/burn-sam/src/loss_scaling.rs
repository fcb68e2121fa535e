//! What every optimizer a strategy or a loop of one's own scales losses for offers: its link,
//! and through it the loss scale, the same for [`Sam`](crate::Sam),
//! [`LossScaled`](crate::LossScaled) and Burn's own optimizers.

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::SimpleOptimizer;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

use crate::channel::StepLink;
use crate::handle::LossScaleHandle;

/// An optimizer's loss scale and the link a training strategy steps it through.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::{GradientsParams, Optimizer, SgdConfig};
/// use burn::tensor::Tensor;
/// use burn_sam::{LossScaledConfig, LossScalerConfig, LossScaling};
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let mut model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let scaling = LossScalerConfig::new().with_init_scale(1024.0);
/// let mut optim = LossScaledConfig::new(scaling).init(SgdConfig::new().init());
/// let loss = model.forward(Tensor::<B, 2>::ones([2, 3], &device)).sum();
/// let grads = GradientsParams::from_grads(optim.scale_loss(loss).backward(), &model);
/// model = optim.step(0.1, model, grads);
/// assert_eq!(optim.loss_scale(), 1024.0);
/// ```
pub trait LossScaling {
    /// The strategy's end of the step protocol with this optimizer
    /// ([`strategy`](crate::strategy)).
    fn step_link(&self) -> StepLink;

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
}

/// Burn's own optimizers scale no loss and read no hand-over.
impl<O, M, B> LossScaling for OptimizerAdaptor<O, M, B>
where
    O: SimpleOptimizer<B::InnerBackend>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    fn step_link(&self) -> StepLink {
        StepLink::plain()
    }
}
