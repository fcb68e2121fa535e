//! Maps over a set of gradients, one parameter at a time.

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor};

/// A function of one parameter's gradient, generic over its rank (which a closure cannot be):
/// what [`map_grads`] applies.
pub trait GradMap<B: Backend> {
    /// The gradient to keep for `param`'s parameter; `None` drops it.
    fn map<const D: usize>(&mut self, param: ParamGrad<B, D>) -> Option<Tensor<B, D>>;
}

/// One parameter's gradient, as [`map_grads`] hands it to a [`GradMap`].
#[derive(Debug)]
pub struct ParamGrad<B: Backend, const D: usize> {
    /// The parameter.
    pub id: ParamId,
    /// The float type of the parameter's value (its gradient may be wider).
    pub dtype: DType,
    /// The gradient.
    pub tensor: Tensor<B, D>,
}

/// Applies `f` to every gradient in `grads` of a float parameter of `module`, in the module's
/// order. Returns the gradients `f` keeps and how many of `grads` belong to `module` (the
/// others are dropped: compare with `grads.len()` to refuse foreign gradients).
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::backend::Backend;
/// use burn::tensor::Tensor;
/// use burn_sam::strategy::{map_grads, GradMap, ParamGrad};
///
/// struct Double;
/// impl<B: Backend> GradMap<B> for Double {
///     fn map<const D: usize>(&mut self, param: ParamGrad<B, D>) -> Option<Tensor<B, D>> {
///         Some(param.tensor.mul_scalar(2.0))
///     }
/// }
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let loss = model.forward(Tensor::<B, 2>::ones([2, 3], &device)).sum();
/// let grads = GradientsParams::from_grads(loss.backward(), &model);
/// let (doubled, matched) = map_grads(&model, grads, &mut Double);
/// assert_eq!((doubled.len(), matched), (2, 2));
/// ```
pub fn map_grads<B, M, F>(module: &M, grads: GradientsParams, f: &mut F) -> (GradientsParams, usize)
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    F: GradMap<B::InnerBackend>,
{
    struct Visit<'a, F> {
        grads: GradientsParams,
        mapped: GradientsParams,
        matched: usize,
        f: &'a mut F,
    }
    impl<B: AutodiffBackend, F: GradMap<B::InnerBackend>> ModuleVisitor<B> for Visit<'_, F> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
                return;
            };
            self.matched += 1;
            let dtype = param.val().dtype();
            let grad = ParamGrad {
                id: param.id,
                dtype,
                tensor: grad,
            };
            if let Some(grad) = self.f.map(grad) {
                self.mapped.register(param.id, grad);
            }
        }
    }
    let mut visit = Visit {
        grads,
        mapped: GradientsParams::new(),
        matched: 0,
        f,
    };
    module.visit(&mut visit);
    (visit.mapped, visit.matched)
}
