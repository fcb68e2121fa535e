use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{GradientsParams, LearningRate, Optimizer, SimpleOptimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use burn_sam::{LossScaled, Sam, StepOutcome, StepReport};

use crate::window::GradSum;
use crate::{AccumError, SamMode, Window};

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

/// An optimizer that takes one step from a window of micro-batches, running their passes
/// through [`Window`]. A window is all or nothing: a non-finite gradient anywhere in it skips
/// the step, and loss scaling sees one scale and makes one update per window.
///
/// Implemented for Burn's optimizers ([`OptimizerAdaptor`]: SGD, Adam, AdamW, ...),
/// [`LossScaled`] and [`Sam`].
pub trait WindowOptimizer<M: AutodiffModule<B>, B: AutodiffBackend> {
    /// Runs the window's passes and steps `module` once with learning rate `lr`.
    fn step_window<T>(
        &mut self,
        lr: LearningRate,
        module: M,
        window: &mut Window<'_, M, T, B>,
        sam_mode: SamMode,
    ) -> Result<(M, WindowReport), AccumError>;
}

impl<O, M, B> WindowOptimizer<M, B> for OptimizerAdaptor<O, M, B>
where
    O: SimpleOptimizer<B::InnerBackend>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    fn step_window<T>(
        &mut self,
        lr: LearningRate,
        module: M,
        window: &mut Window<'_, M, T, B>,
        _sam_mode: SamMode,
    ) -> Result<(M, WindowReport), AccumError> {
        let grads = window.gradient(&module, 1.0)?;
        let grad_norm = burn_sam::grad_norm(&module, &grads)?;
        let applied = grad_norm.is_finite();
        let module = if applied {
            let grads = cast_to_params(&module, grads);
            self.step(lr, module, grads)
        } else {
            log::warn!("window gradient norm is {grad_norm}: skipping the update");
            module
        };
        let report = WindowReport {
            applied,
            micro_batches: window.len(),
            grad_norm,
            loss_scale: 1.0,
            sam: None,
        };
        Ok((module, report))
    }
}

impl<O, M, B> WindowOptimizer<M, B> for LossScaled<O>
where
    O: Optimizer<M, B>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    fn step_window<T>(
        &mut self,
        lr: LearningRate,
        module: M,
        window: &mut Window<'_, M, T, B>,
        _sam_mode: SamMode,
    ) -> Result<(M, WindowReport), AccumError> {
        let grads = window.gradient(&module, self.loss_scale())?;
        let (module, step) = self.try_step(lr, module, grads)?;
        let report = WindowReport {
            applied: step.applied,
            micro_batches: window.len(),
            grad_norm: step.grad_norm,
            loss_scale: step.loss_scale,
            sam: None,
        };
        Ok((module, report))
    }
}

impl<O, M, B> WindowOptimizer<M, B> for Sam<O>
where
    O: Optimizer<M, B>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    fn step_window<T>(
        &mut self,
        lr: LearningRate,
        module: M,
        window: &mut Window<'_, M, T, B>,
        sam_mode: SamMode,
    ) -> Result<(M, WindowReport), AccumError> {
        let loss_scale = self.loss_scale();
        let (module, step) = match sam_mode {
            SamMode::Exact => {
                let grads = window.gradient(&module, loss_scale)?;
                let perturbed = self.ascend(module, grads)?;
                if self.ascent_overflowed() {
                    self.skip(perturbed)?
                } else {
                    let grads = window.gradient(&perturbed, loss_scale)?;
                    self.descend(lr, perturbed, grads)?
                }
            }
            SamMode::PerMicroBatch => self.per_micro_batch(lr, module, window, loss_scale)?,
        };
        let report = WindowReport {
            applied: step.outcome == StepOutcome::Applied,
            micro_batches: window.len(),
            grad_norm: step.descent_grad_norm,
            loss_scale,
            sam: Some(step),
        };
        Ok((module, report))
    }
}

/// The SAM steps of a window, beyond [`Sam`]'s own phases.
trait SamWindow<M: AutodiffModule<B>, B: AutodiffBackend> {
    fn ascent_overflowed(&self) -> bool;

    /// m-sharpness: micro-batch `i` is perturbed by its own gradient and contributes
    /// `w_i * grad L_i(w + e_i)`; the last descent steps with the sum.
    fn per_micro_batch<T>(
        &mut self,
        lr: LearningRate,
        module: M,
        window: &mut Window<'_, M, T, B>,
        loss_scale: f32,
    ) -> Result<(M, StepReport), AccumError>;
}

impl<O, M, B> SamWindow<M, B> for Sam<O>
where
    O: Optimizer<M, B>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    fn ascent_overflowed(&self) -> bool {
        self.pending_ascent()
            .is_some_and(|ascent| !ascent.perturbed)
    }

    fn per_micro_batch<T>(
        &mut self,
        lr: LearningRate,
        mut module: M,
        window: &mut Window<'_, M, T, B>,
        loss_scale: f32,
    ) -> Result<(M, StepReport), AccumError> {
        let scale = f64::from(loss_scale);
        let mut descent = GradSum::default();
        let last = window.len() - 1;
        let mut index = 0;
        loop {
            // The perturbation divides by the norm: the ascent gradient needs no weight.
            let grads = window.micro_gradient(index, &module, scale)?;
            let perturbed = self.ascend(module, grads)?;
            if self.ascent_overflowed() {
                return Ok(self.skip(perturbed)?);
            }
            let factor = scale * window.weight(index);
            descent.add(
                &perturbed,
                window.micro_gradient(index, &perturbed, factor)?,
                1.0,
            )?;
            if index == last {
                return Ok(self.descend(lr, perturbed, descent.into_grads())?);
            }
            module = self.restore(perturbed)?;
            index += 1;
        }
    }
}

/// Casts each gradient to its parameter's float type: a plain optimizer steps f16 parameters
/// with f16 gradients (accumulation itself ran in f32).
pub(crate) fn cast_to_params<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: GradientsParams,
) -> GradientsParams {
    struct Cast {
        grads: GradientsParams,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Cast {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) {
                let dtype = param.val().dtype();
                self.grads.register(param.id, grad.cast(dtype));
            }
        }
    }
    let mut cast = Cast { grads };
    module.visit(&mut cast);
    cast.grads
}
