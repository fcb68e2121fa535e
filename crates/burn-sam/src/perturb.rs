//! SAM's move to `w + e(w)` and Momentum-SAM's to `w~`, each keeping every float tensor of
//! the module, and the exact restore from what they kept.

use std::collections::HashSet;

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::{GradientsParams, LearningRate};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

use crate::config::SamConfig;
use crate::device::{weighted, GlobalSum, Scalar};
use crate::float::{tracked, widen};
use crate::hand_back::StepError;
use crate::norm::squared_sum;
use crate::param_map::ParamMap;
use crate::state::ParamState;

/// What [`move_along`] did: the moved module, every float tensor it had before, and the
/// direction's `||a d||^2`, times the loss scale squared (`None` without gradients).
pub(crate) struct Moved<M, B: Backend> {
    pub module: M,
    pub snapshot: ParamMap,
    pub squares: Option<Scalar<B>>,
}

/// SAM's move along `direction` (the ascent gradient or a variant's direction, carrying the
/// loss scale `S`): `w + e`, `e = rho_t * a^2 * d / (S * (||a d|| + eps))` over the `picked`
/// parameters, with `||a d||` unscaled. Its scalars stay on the device (no host wait) unless
/// a read waits for nothing ([`Scalar`]). A norm that is not finite makes `e` zero (the
/// module stays at `w`); the step's read finds it.
pub(crate) fn move_along<M, B>(
    config: &SamConfig,
    lr: LearningRate,
    module: M,
    direction: GradientsParams,
    loss_scale: f32,
    picked: Option<HashSet<ParamId>>,
) -> Result<Moved<M, B::InnerBackend>, StepError<M>>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    let eta = config.asam_eta();
    let squares = squared_sum(&module, &direction, eta, picked.as_ref());
    let squares = or_hand_back!(squares, module).map(Scalar::read_if_free);
    let scale = f64::from(loss_scale);
    let factor = squares.as_ref().map(|squares| {
        let norm = squares.clone().sqrt().div(scale);
        let denominator = norm.add(config.eps).mul(scale);
        denominator
            .divides(config.rho_at(lr))
            .zero_unless_finite(squares)
    });
    sync_running_states(&module);
    let mut perturb = Perturb {
        grads: direction,
        eta,
        factor,
        picked,
        snapshot: ParamMap::default(),
    };
    let module = module.map(&mut perturb);
    Ok(Moved {
        module,
        snapshot: perturb.snapshot,
        squares,
    })
}

/// Momentum-SAM's look-ahead, its ascent without a pass: moves every parameter with a
/// momentum in `momentum` from `w` to `w - rho * v / (||v|| + eps)` (the norm global, kept
/// on the device: no read), and returns the moved module with every float tensor it had
/// before (before the first step, without a momentum, nothing moves).
pub(crate) fn look_ahead_by<M, B>(
    module: M,
    momentum: &ParamState<f64>,
    rho: f64,
    eps: f64,
) -> (M, ParamMap)
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    struct SquaredNorm<'a, B: Backend> {
        momentum: &'a ParamState<f64>,
        sum: GlobalSum<B>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for SquaredNorm<'_, B::InnerBackend> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(v) = momentum_of(self.momentum, &param.val().inner(), param.id) {
                self.sum.add_square(v);
            }
        }
    }
    let mut norm = SquaredNorm::<B::InnerBackend> {
        momentum,
        sum: GlobalSum::default(),
    };
    module.visit(&mut norm);
    // Negative: `w + (-s v)` is bitwise `w - s v`, with the new buffer on the left, where
    // backends add in place (NdArray and Flex subtract from a shared `w` more slowly).
    let scale = norm
        .sum
        .finish()
        .map(|squares| Scalar::device(squares).sqrt().add(eps).divides(-rho));
    let mut look_ahead = LookAhead {
        momentum,
        scale,
        snapshot: ParamMap::default(),
    };
    let module = module.map(&mut look_ahead);
    (module, look_ahead.snapshot)
}

/// The momentum of `id`, shaped like `weight`, in the widened float type.
fn momentum_of<B: Backend, const D: usize>(
    momentum: &ParamState<f64>,
    weight: &Tensor<B, D>,
    id: ParamId,
) -> Option<Tensor<B, D>> {
    let dtype = widen(weight.clone()).dtype();
    momentum.get(&id, weight.shape(), &weight.device(), dtype)
}

struct LookAhead<'a, B: Backend> {
    momentum: &'a ParamState<f64>,
    /// `-rho / (||v|| + eps)`; `None` without a momentum.
    scale: Option<Scalar<B>>,
    snapshot: ParamMap,
}

impl<B: AutodiffBackend> ModuleMapper<B> for LookAhead<'_, B::InnerBackend> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        self.snapshot.insert(id, tensor.clone());
        let weight = tensor.clone().inner();
        let dtype = weight.dtype();
        let moved = self.scale.as_mut().and_then(|scale| {
            let v = momentum_of(self.momentum, &weight, id)?;
            Some((scale.times(v) + widen(weight)).cast(dtype))
        });
        let Some(moved) = moved else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let require_grad = tensor.is_require_grad();
        Param::from_mapped_value(id, tracked(Tensor::from_inner(moved), require_grad), mapper)
    }
}

/// Moves every parameter with a gradient (that `picked` holds, when given) to
/// `w + factor * a^2 * g` (`factor` is 0 where the norm was not finite), and keeps every float tensor of the module (perturbed or not) in `snapshot`.
struct Perturb<B: Backend> {
    grads: GradientsParams,
    eta: Option<f64>,
    factor: Option<Scalar<B>>,
    picked: Option<HashSet<ParamId>>,
    snapshot: ParamMap,
}

impl<B: AutodiffBackend> ModuleMapper<B> for Perturb<B::InnerBackend> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        self.snapshot.insert(id, tensor.clone());
        let picked = self
            .picked
            .as_ref()
            .is_none_or(|picked| picked.contains(&id));
        let grad = self.grads.remove::<B::InnerBackend, D>(id);
        let unmoved = self.factor.as_ref().is_none_or(Scalar::known_zero);
        let (Some(grad), Some(factor), true) = (grad, &mut self.factor, picked && !unmoved) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let require_grad = tensor.is_require_grad();
        let weight = tensor.inner();
        let dtype = weight.dtype();
        // `step` is the only owner of its buffer: backends that can (Flex) compute it in place.
        let step = weighted(weight.clone(), widen(grad), self.eta, 2);
        let step = factor.times(step);
        let tensor = tracked(
            Tensor::from_inner((step + widen(weight)).cast(dtype)),
            require_grad,
        );
        Param::from_mapped_value(id, tensor, mapper)
    }
}

/// Whether every float tensor of a module is in the snapshot with the same type.
pub(crate) fn snapshot_covers<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    snapshot: &ParamMap,
) -> bool {
    struct Covers<'a> {
        snapshot: &'a ParamMap,
        all: bool,
    }
    impl<B: Backend> ModuleVisitor<B> for Covers<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.all &= self.snapshot.holds::<Tensor<B, D>>(&param.id);
        }
    }
    let mut covers = Covers {
        snapshot,
        all: true,
    };
    module.visit(&mut covers);
    covers.all
}

/// Puts every float tensor back as it was in the snapshot: the weights `w` exactly (no
/// `w + e - e`), and running statistics as they were after the forward pass at `w`.
/// Check [`snapshot_covers`] first.
pub(crate) struct Restore {
    pub snapshot: ParamMap,
}

impl<B: Backend> ModuleMapper<B> for Restore {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let kept = self.snapshot.take::<Tensor<B, D>>(&id);
        Param::from_mapped_value(id, kept.unwrap_or(tensor), mapper)
    }
}

/// Folds the running statistics (BatchNorm's `RunningState`) that forward passes left
/// pending into their values, so that they can be read and overwritten.
pub(crate) fn sync_running_states<B: AutodiffBackend, M: AutodiffModule<B>>(module: &M) {
    drop(module.valid());
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};

    use super::*;
    use crate::device::read_back;

    type B = Autodiff<Flex>;

    /// The look-ahead divides by `||v|| + eps` with the configuration's `eps`.
    #[test]
    fn the_look_ahead_divides_by_the_norm_plus_eps() {
        let model: Linear<B> = LinearConfig::new(2, 1)
            .with_bias(false)
            .init(&Default::default());
        let w: Vec<f64> = read_back(model.weight.val()).iter::<f64>().collect();
        // v = (3, 4): ||v|| = 5.
        let momentum = ParamState::from_values([(model.weight.id, vec![3.0, 4.0])]);
        let moved = |eps: f64| -> Vec<f64> {
            let (ahead, _) = look_ahead_by(model.clone(), &momentum, 1.0, eps);
            let ahead = read_back(ahead.weight.val());
            ahead.iter::<f64>().zip(&w).map(|(a, w)| w - a).collect()
        };
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(a, b)| (a - b).abs() < 1e-6);
        assert!(close(&moved(1e-12), &[0.6, 0.8]), "{:?}", moved(1e-12));
        assert!(close(&moved(5.0), &[0.3, 0.4]), "{:?}", moved(5.0));
    }
}
