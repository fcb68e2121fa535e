//! Walks over a module's float parameters: the global gradient norm, the perturbation that
//! keeps a snapshot of every tensor, and the exact restore from that snapshot.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::{GradientsParams, MultiGradientsParams};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, FloatDType, Tensor, TensorData};

use crate::SamError;

/// The module's float tensors by id, as they were before the perturbation. Type-erased so
/// that `Sam<O>` stays generic over the module only in its methods.
pub(crate) type Snapshot = HashMap<ParamId, Arc<dyn Any + Send + Sync>>;

/// The dtype SAM computes in: f64 stays f64, everything narrower is widened to f32
/// (eps = 1e-12 is 0 in f16, and squared f16 gradients overflow at 256).
pub(crate) fn widen<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Tensor<B, D> {
    let dtype = match tensor.dtype() {
        DType::F64 => FloatDType::F64,
        _ => FloatDType::F32,
    };
    tensor.cast(dtype)
}

/// `a * g` with `a = |w| + eta` under ASAM, `a = 1` under SAM; `power` 1 gives `a * g`, 2 gives
/// `a^2 * g`.
fn weighted<B: Backend, const D: usize>(
    weight: Tensor<B, D>,
    grad: Tensor<B, D>,
    eta: Option<f64>,
    power: i32,
) -> Tensor<B, D> {
    match eta {
        Some(eta) => widen(weight).abs().add_scalar(eta).powi_scalar(power) * grad,
        None => grad,
    }
}

/// `||x||^2` as the dot product `<x, x>`: one read of `x` with no temporary, where
/// `square().sum()` writes a temporary and, on Flex, sums sequentially (7x slower).
fn squared_norm<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, 1> {
    let n = x.shape().num_elements();
    let row = x.reshape([1, n]);
    let column = row.clone().reshape([n, 1]);
    row.matmul(column).reshape([1])
}

static DEVICE_READS: AtomicU64 = AtomicU64::new(0);

/// How many times burn-sam has read values back from the device in this process. A SAM step
/// reads once per pass (its gradient norm), a `LossScaled` step once; records read the master
/// weights. Reads made by your own code are not counted. For benchmarks and tests.
pub fn device_reads() -> u64 {
    DEVICE_READS.load(Ordering::Relaxed)
}

/// Reads `tensor` back to the host, counted by [`device_reads`].
pub(crate) fn read_back<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> TensorData {
    DEVICE_READS.fetch_add(1, Ordering::Relaxed);
    tensor.into_data()
}

/// The global L2 norm of `grads`, `sqrt(sum_p ||g_p||^2)`, computed in f32 (f64 for f64
/// gradients) and read back in one device sync: infinite or NaN when any gradient is.
/// An error when some gradients belong to no parameter of `module`.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let loss = model.forward(Tensor::<B, 2>::ones([2, 3], &device)).sum();
/// let grads = GradientsParams::from_grads(loss.backward(), &model);
/// assert!(burn_sam::grad_norm(&model, &grads).unwrap() > 0.0);
/// ```
pub fn grad_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
) -> Result<f64, SamError> {
    weighted_grad_norm(module, grads, None)
}

/// `sqrt(sum_p ||a_p * g_p||^2)` over the parameters of `module` that have a gradient, read
/// back in one device sync; an error when some gradients belong to no parameter of `module`.
pub(crate) fn weighted_grad_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
    eta: Option<f64>,
) -> Result<f64, SamError> {
    let mut visitor = SquaredNorm::<B> {
        grads,
        eta,
        sum: None,
        matched: 0,
    };
    module.visit(&mut visitor);
    if visitor.matched != grads.len() {
        return Err(SamError::ForeignGradients {
            gradients: grads.len(),
            matched: visitor.matched,
        });
    }
    let norm = visitor.sum.map_or(0.0, |sum| {
        let value = read_back(sum).iter::<f64>().next();
        value.unwrap_or(f64::NAN).sqrt()
    });
    Ok(norm)
}

struct SquaredNorm<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    eta: Option<f64>,
    sum: Option<Tensor<B::InnerBackend, 1>>,
    matched: usize,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for SquaredNorm<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(grad) = self.grads.get::<B::InnerBackend, D>(param.id) else {
            return;
        };
        self.matched += 1;
        let scaled = weighted(param.val().inner(), widen(grad), self.eta, 1);
        let squares = squared_norm(scaled);
        self.sum = Some(match self.sum.take() {
            Some(sum) => {
                let dtype = sum.dtype();
                sum + squares.cast(dtype)
            }
            None => squares,
        });
    }
}

/// Moves every parameter with a gradient to `w + scale * a^2 * g` and keeps every float
/// tensor of the module (perturbed or not) in the snapshot.
pub(crate) struct Perturb {
    pub grads: GradientsParams,
    pub eta: Option<f64>,
    pub scale: f64,
    pub snapshot: Snapshot,
}

impl<B: AutodiffBackend> ModuleMapper<B> for Perturb {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        self.snapshot.insert(id, Arc::new(tensor.clone()));
        let tensor = match self.grads.remove::<B::InnerBackend, D>(id) {
            Some(grad) if self.scale != 0.0 => {
                let require_grad = tensor.is_require_grad();
                let weight = tensor.inner();
                let dtype = weight.dtype();
                // `step` is the only owner of its buffer: backends that can (Flex) compute both
                // operations in place, so the ascent allocates nothing.
                let step =
                    weighted(weight.clone(), widen(grad), self.eta, 2).mul_scalar(self.scale);
                let moved = Tensor::from_inner((step + widen(weight)).cast(dtype));
                if require_grad {
                    moved.require_grad()
                } else {
                    moved
                }
            }
            _ => tensor,
        };
        Param::from_mapped_value(id, tensor, mapper)
    }
}

/// Whether every float tensor of a module is in the snapshot with the same type.
pub(crate) fn snapshot_covers<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    snapshot: &Snapshot,
) -> bool {
    struct Covers<'a> {
        snapshot: &'a Snapshot,
        all: bool,
    }
    impl<B: Backend> ModuleVisitor<B> for Covers<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let kept = self.snapshot.get(&param.id);
            self.all &= kept.is_some_and(|kept| kept.is::<Tensor<B, D>>());
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
    pub snapshot: Snapshot,
}

impl<B: Backend> ModuleMapper<B> for Restore {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        // Taking the snapshot's reference leaves the weights with one owner, so that the base
        // optimizer can update them in place.
        let kept = self
            .snapshot
            .remove(&id)
            .and_then(|kept| kept.downcast().ok());
        let kept = kept.map(|kept: Arc<Tensor<B, D>>| Arc::unwrap_or_clone(kept));
        Param::from_mapped_value(id, kept.unwrap_or(tensor), mapper)
    }
}

/// Merges gradients computed on several devices into one set, on the device
/// [`MultiGradientsParams`] assigns to each parameter.
pub(crate) fn merge_devices<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: MultiGradientsParams,
) -> GradientsParams {
    struct Merge<B> {
        multi: MultiGradientsParams,
        merged: GradientsParams,
        backend: core::marker::PhantomData<B>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Merge<B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some((grad, _)) = self.multi.remove::<B::InnerBackend, D>(param.id) {
                self.merged.register(param.id, grad);
            }
        }
    }
    let mut merge = Merge::<B> {
        multi: grads,
        merged: GradientsParams::new(),
        backend: core::marker::PhantomData,
    };
    module.visit(&mut merge);
    merge.merged
}

/// Folds the running statistics (BatchNorm's `RunningState`) that forward passes left
/// pending into their values, so that they can be read and overwritten.
pub(crate) fn sync_running_states<B: AutodiffBackend, M: AutodiffModule<B>>(module: &M) {
    drop(module.valid());
}
