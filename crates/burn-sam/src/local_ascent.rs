//! SAM's ascent for a copy of the model that is dropped once its gradient is taken: what a
//! strategy's local ascent moves each replica with.

use std::fmt;

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, Tensor};

use crate::device::{read_norms, Scalar};

use crate::config::SamConfig;
use crate::filter::perturbed_params;
use crate::grad_map::{map_grads, GradMap, ParamGrad};
use crate::hand_back::StepError;
use crate::perturb::move_along;

/// A module moved by [`perturb`], and the norm of the gradient it moved along: still on the
/// device where a read would wait for the queued work (GPU backends), read back on the CPU
/// backends.
pub struct Perturbation<M, B: AutodiffBackend> {
    /// The module at `w + e(w)`; at `w` when the gradient was not finite.
    pub module: M,
    /// `||a g||^2` times the loss scale squared.
    squares: Option<Scalar<B::InnerBackend>>,
    loss_scale: f32,
}

impl<M: AutodiffModule<B>, B: AutodiffBackend> Perturbation<M, B> {
    /// `||a * g||` of the gradient, unscaled (ASAM's `a = |w| + eta`, SAM's `a = 1`): a host
    /// wait when the norm is still on the device.
    pub fn grad_norm(&self) -> f64 {
        read_norms(std::slice::from_ref(&self.squares), self.loss_scale)[0]
    }

    /// False when the gradient was not finite: the module was left at `w`. Reads
    /// [`Perturbation::grad_norm`].
    pub fn perturbed(&self) -> bool {
        self.grad_norm().is_finite()
    }

    /// Known without a host wait that the module was left at `w`: the norm was read back and
    /// is not finite. A strategy can then skip the pass at the moved module, whose gradient
    /// could not be used.
    pub fn known_unperturbed(&self) -> bool {
        self.squares.as_ref().is_some_and(Scalar::known_not_finite)
    }

    /// `grads`, taken at the moved module, made not finite when the gradient it moved along
    /// was not, so that the step they reach is skipped as an overflowing ascent's must be,
    /// without a host wait here: one of them (the first of the module's) is filled with NaN
    /// on the device. Unchanged bit for bit otherwise.
    pub fn carry_fault(&self, grads: GradientsParams) -> GradientsParams {
        let Some(not_finite) = self.squares.as_ref().and_then(Scalar::not_finite_on_device) else {
            return grads;
        };
        let mut mark = MarkFirst(Some(not_finite));
        map_grads(&self.module, grads, &mut mark).0
    }
}

impl<M: fmt::Debug, B: AutodiffBackend> fmt::Debug for Perturbation<M, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Perturbation")
            .field("module", &self.module)
            .field("loss_scale", &self.loss_scale)
            .finish_non_exhaustive()
    }
}

/// Fills the first gradient it maps with NaN where the flag is true.
struct MarkFirst<B: Backend>(Option<Tensor<B, 1, Bool>>);

impl<B: Backend> GradMap<B> for MarkFirst<B> {
    fn map<const D: usize>(&mut self, param: ParamGrad<B, D>) -> Option<Tensor<B, D>> {
        let grad = param.tensor;
        Some(match self.0.take() {
            Some(flag) => grad.mask_fill(flag.reshape([1; D]), f64::NAN),
            None => grad,
        })
    }
}

/// SAM's ascent as a pure function of the configuration: moves `module` from `w` to
/// `w + e(w)`, `e = rho_t * a^2 * g / (||a g|| + eps)`, with `g` the gradient at `w` (`grads`,
/// carrying `loss_scale`), `rho_t` the radius at learning rate `lr` ([`SamConfig::rho_at`]),
/// only the parameters [`SamConfig::perturb_only`] picks. [`Sam::ascend`](crate::Sam::ascend)
/// moves by this same path, and also keeps `w` to step from. On GPU backends nothing waits:
/// a gradient that is not finite zeroes `e` on the device, and
/// [`Perturbation::carry_fault`] passes the fault on to the gradients taken at the module.
///
/// For a copy of the model that is dropped once its gradient is taken: data-parallel SAM's
/// local ascent, where each replica is perturbed by its own gradient. The SAM variants'
/// own rules (Friendly-SAM's direction, GSAM's and LookSAM's descents) need the optimizer's
/// state and are not applied here.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
/// use burn_sam::strategy::perturb;
/// use burn_sam::SamConfig;
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let loss = model.forward(Tensor::<B, 2>::ones([2, 3], &device)).sum();
/// let grads = GradientsParams::from_grads(loss.backward(), &model);
/// let moved = perturb(&SamConfig::new().with_rho(0.05), 0.1, model, grads, 1.0).unwrap();
/// assert!(moved.perturbed() && moved.grad_norm() > 0.0);
/// ```
///
/// # Errors
/// With `module` handed back unmoved: `grads` hold parameters `module` does not have
/// ([`SamError::ForeignGradients`](crate::SamError::ForeignGradients)), or
/// [`SamConfig::perturb_only`] picks nothing
/// ([`SamError::NothingPicked`](crate::SamError::NothingPicked)).
pub fn perturb<M, B>(
    config: &SamConfig,
    lr: LearningRate,
    module: M,
    grads: GradientsParams,
    loss_scale: f32,
) -> Result<Perturbation<M, B>, StepError<M>>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    let picked = or_hand_back!(
        perturbed_params(&module, config.perturb_only.as_deref()),
        module
    );
    let moved = move_along(config, lr, module, grads, loss_scale, picked)?;
    Ok(Perturbation {
        module: moved.module,
        squares: moved.squares,
        loss_scale,
    })
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests read the values they check"
)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::Tensor;

    use super::*;

    type B = Autodiff<Flex>;

    fn flat(model: &Linear<B>) -> Vec<f64> {
        let mut values: Vec<f64> = model.weight.val().into_data().iter::<f64>().collect();
        values.extend(model.bias.as_ref().unwrap().val().into_data().iter::<f64>());
        values
    }

    /// The model, `dL/dw` of `sum(model(x))` times `scale`, flattened like [`flat`].
    fn setup(scale: f64) -> (Linear<B>, GradientsParams, Vec<f64>) {
        let device = Default::default();
        let model: Linear<B> = LinearConfig::new(3, 2).init(&device);
        let x = Tensor::<B, 2>::from_floats([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]], &device);
        let loss = model.forward(x).sum().mul_scalar(scale);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        // d sum(x w + b) / dw[i][j] = sum_rows x[., i]; / db[j] = rows.
        let column = [4.0, -1.75, -0.5];
        let mut grad: Vec<f64> = column.iter().flat_map(|&g| [g, g]).collect();
        grad.extend([2.0, 2.0]);
        (model, grads, grad)
    }

    #[test]
    fn sam_moves_by_rho_along_the_unit_gradient() {
        for (scale, eta) in [(1.0, None), (1024.0, None), (1.0, Some(0.01))] {
            let (model, grads, grad) = setup(scale);
            let w = flat(&model);
            let config = SamConfig::new()
                .with_rho(0.05)
                .with_adaptive(eta.is_some())
                .with_eta(eta.unwrap_or(0.0));
            let moved = perturb(&config, 0.1, model, grads, scale as f32).unwrap();
            let a: Vec<f64> = w
                .iter()
                .map(|w| eta.map_or(1.0, |eta| w.abs() + eta))
                .collect();
            let norm = grad
                .iter()
                .zip(&a)
                .map(|(g, a)| (a * g).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!(
                (moved.grad_norm() - norm).abs() <= 1e-6 * norm,
                "{scale} {eta:?}"
            );
            let expected: Vec<f64> = (0..w.len())
                .map(|i| w[i] + 0.05 * a[i] * a[i] * grad[i] / norm)
                .collect();
            for (got, want) in flat(&moved.module).iter().zip(&expected) {
                assert!((got - want).abs() <= 1e-6, "{scale} {eta:?}: {got} {want}");
            }
        }
    }

    #[test]
    fn a_gradient_that_is_not_finite_moves_nothing() {
        let (model, grads, _) = setup(f64::INFINITY);
        let w = flat(&model);
        let moved = perturb(&SamConfig::new(), 0.1, model, grads, 1.0).unwrap();
        assert!(!moved.perturbed() && !moved.grad_norm().is_finite());
        // On the CPU the norm is read back: the pass at the module can be skipped.
        assert!(moved.known_unperturbed());
        assert_eq!(flat(&moved.module), w);
    }
}
