//! What an optimizer must do to step from a window of micro-batches, and how Burn's
//! optimizers, `MixedPrecision` and `Sam` do it.

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{GradientsParams, LearningRate, Optimizer, SimpleOptimizer};
use burn::tensor::backend::AutodiffBackend;
use burn_sam::strategy::{guarded_step, or_hand_back, Linkable, StepLink};
use burn_sam::{
    LossScaling, MixedPrecision, Sam, SamConfig, ScaledStepReport, StepError, StepReport,
};

use crate::ascent::Ascent;
use crate::error::AccumError;
use crate::sam_window::SamWindow;
use crate::window::Window;

/// What one window's step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowReport {
    /// Whether the base optimizer stepped. False when a gradient of any micro-batch was not
    /// finite: weights and optimizer state are then unchanged.
    pub applied: bool,
    /// The micro-batches the step used.
    pub micro_batches: usize,
    /// The unscaled norm of the window gradient the base optimizer stepped with (for SAM, the
    /// descent gradient); not finite, or NaN when never computed, for a skipped window.
    pub grad_norm: f64,
    /// The loss scale of the whole window (1 without loss scaling).
    pub loss_scale: f32,
    /// SAM's own report, for a [`Sam`] optimizer.
    pub sam: Option<StepReport>,
}

/// An optimizer that takes one step from a window of micro-batches: directly, running their
/// passes through [`Window`] ([`Accumulation`](crate::Accumulation)), or through Burn's
/// `Learner`, where a training strategy runs the passes the optimizer's
/// [`StepLink`](burn_sam::strategy::StepLink) asks for and calls `Optimizer::step` after each
/// (`train::SamTraining`). A window is all or nothing: a non-finite gradient
/// anywhere in it skips the step, and loss scaling sees one scale and makes one update per
/// window.
///
/// Implemented for Burn's optimizers ([`OptimizerAdaptor`]: SGD, Adam, AdamW, ...),
/// [`MixedPrecision`] and [`Sam`]; the loss scale and the strategy's link come from
/// [`LossScaling`].
pub trait WindowOptimizer<M: AutodiffModule<B>, B: AutodiffBackend>:
    Optimizer<M, B> + LossScaling
{
    /// Whether `Optimizer::step` takes f32 gradients for parameters narrower than f32 (it
    /// unscales them and steps through master weights); otherwise accumulated gradients are
    /// cast to each parameter's type first.
    const WIDE_GRADIENTS: bool;

    /// SAM's configuration, for a [`Sam`] optimizer: what data-parallel training's local
    /// ascents perturb with.
    fn sam_config(&self) -> Option<&SamConfig> {
        None
    }

    /// The module itself: every optimizer hands back the weights `w`.
    #[deprecated(
        since = "0.2.0",
        note = "the module a step hands back is `w`: use it as it is"
    )]
    fn unperturbed(&self, module: M) -> M {
        module
    }

    /// Runs the window's passes and steps `module` once with learning rate `lr`. On an error
    /// the module comes back as it was.
    fn step_window<T>(
        &mut self,
        lr: LearningRate,
        module: M,
        window: &mut Window<'_, M, T, B>,
        ascent: Ascent,
    ) -> Result<(M, WindowReport), StepError<M, AccumError>>;
}

/// A step without SAM from the window's gradient (losses scaled through `link`): what Burn's
/// optimizers and `MixedPrecision` share, `step` being each one's guarded step.
fn guarded_window_step<M, B, T>(
    module: M,
    window: &mut Window<'_, M, T, B>,
    link: &StepLink,
    step: impl FnOnce(M, GradientsParams) -> Result<(M, ScaledStepReport), StepError<M>>,
) -> Result<(M, WindowReport), StepError<M, AccumError>>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    let grads = or_hand_back!(window.gradient(&module, link), module);
    let (module, step) = step(module, grads).map_err(StepError::convert)?;
    let report = WindowReport {
        applied: step.applied,
        micro_batches: window.len(),
        grad_norm: step.grad_norm,
        loss_scale: step.loss_scale,
        sam: None,
    };
    Ok((module, report))
}

impl<O, M, B> WindowOptimizer<M, B> for OptimizerAdaptor<O, M, B>
where
    O: SimpleOptimizer<B::InnerBackend>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    const WIDE_GRADIENTS: bool = false;

    fn step_window<T>(
        &mut self,
        lr: LearningRate,
        module: M,
        window: &mut Window<'_, M, T, B>,
        _ascent: Ascent,
    ) -> Result<(M, WindowReport), StepError<M, AccumError>> {
        guarded_window_step(module, window, &StepLink::plain(), |module, grads| {
            guarded_step(self, lr, module, grads)
        })
    }
}

impl<O, M, B> WindowOptimizer<M, B> for MixedPrecision<O>
where
    O: Optimizer<M, B>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    const WIDE_GRADIENTS: bool = true;

    fn step_window<T>(
        &mut self,
        lr: LearningRate,
        module: M,
        window: &mut Window<'_, M, T, B>,
        _ascent: Ascent,
    ) -> Result<(M, WindowReport), StepError<M, AccumError>> {
        let link = self.step_link();
        guarded_window_step(module, window, &link, |module, grads| {
            self.try_step(lr, module, grads)
        })
    }
}

impl<O, M, B> WindowOptimizer<M, B> for Sam<O>
where
    O: Optimizer<M, B>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    const WIDE_GRADIENTS: bool = true;

    fn sam_config(&self) -> Option<&SamConfig> {
        Some(self.config())
    }

    fn step_window<T>(
        &mut self,
        lr: LearningRate,
        module: M,
        window: &mut Window<'_, M, T, B>,
        ascent: Ascent,
    ) -> Result<(M, WindowReport), StepError<M, AccumError>> {
        let (loss_scale, micro_batches) = (self.loss_scale(), window.len());
        let sam_window = SamWindow {
            sam: self,
            lr,
            window,
        };
        let (module, step) = match ascent {
            Ascent::Synced => sam_window.synced(module)?,
            Ascent::Local => sam_window.local(module)?,
        };
        let report = WindowReport {
            applied: step.outcome.applied(),
            micro_batches,
            grad_norm: step.descent_grad_norm,
            loss_scale,
            sam: Some(step),
        };
        Ok((module, report))
    }
}
