//! SAM's move to `w + e(w)`, which keeps every float tensor of the module, and the exact
//! restore from what it kept.

use std::collections::HashSet;

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

use crate::float::tracked;
use crate::norm::weighted;
use crate::param_map::ParamMap;
use crate::widen;

/// Moves every parameter with a gradient (that `picked` holds, when given) to
/// `w + scale * a^2 * g` and keeps every float tensor of the module (perturbed or not) in
/// `snapshot`.
pub(crate) struct Perturb {
    pub grads: GradientsParams,
    pub eta: Option<f64>,
    pub scale: f64,
    pub picked: Option<HashSet<ParamId>>,
    pub snapshot: ParamMap,
}

impl<B: AutodiffBackend> ModuleMapper<B> for Perturb {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        self.snapshot.insert(id, tensor.clone());
        let picked = self
            .picked
            .as_ref()
            .is_none_or(|picked| picked.contains(&id));
        let tensor = match self.grads.remove::<B::InnerBackend, D>(id) {
            Some(grad) if self.scale != 0.0 && picked => {
                let require_grad = tensor.is_require_grad();
                let weight = tensor.inner();
                let dtype = weight.dtype();
                // `step` is the only owner of its buffer: backends that can (Flex) compute both
                // operations in place, so the ascent allocates nothing.
                let step =
                    weighted(weight.clone(), widen(grad), self.eta, 2).mul_scalar(self.scale);
                tracked(
                    Tensor::from_inner((step + widen(weight)).cast(dtype)),
                    require_grad,
                )
            }
            _ => tensor,
        };
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
