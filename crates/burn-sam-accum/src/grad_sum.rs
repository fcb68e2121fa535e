//! The weighted sum of micro-batch gradients, by parameter: what accumulation and the
//! replicas of data-parallel training both step with.

use burn::module::AutodiffModule;
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;
use burn_sam::strategy::{map_grads, widen, GradMap, ParamGrad};
use burn_sam::SamError;

/// `sum_i w_i g_i` over gradients added one at a time, in f32 (f64 for f64 gradients). A sum
/// of one gradient of weight 1 (a one-batch step) is that gradient as it came, in the
/// parameters' float type ([`Summed::as_came`]).
#[derive(Default)]
pub(crate) struct WeightedSum {
    sum: GradientsParams,
    terms: usize,
    /// The first term, while it is the only one and came as `backward` gave it.
    single: Option<GradientsParams>,
}

/// A finished [`WeightedSum`].
pub(crate) struct Summed {
    pub grads: GradientsParams,
    /// Whether `grads` is one gradient as `backward` gave it (in the parameters' float type),
    /// rather than a sum in f32.
    #[cfg_attr(not(feature = "train"), allow(dead_code))]
    pub as_came: bool,
}

impl WeightedSum {
    /// Adds `weight * grads`, an error when some belong to no parameter of `module` (checked
    /// once there are two terms; the optimizer's norm checks a single one).
    pub fn add<B: AutodiffBackend, M: AutodiffModule<B>>(
        &mut self,
        module: &M,
        grads: GradientsParams,
        weight: f64,
    ) -> Result<(), SamError> {
        self.push(module, grads, weight, weight == 1.0)
    }

    /// Adds a finished sum, with weight 1.
    #[cfg_attr(not(feature = "train"), allow(dead_code))]
    pub fn add_summed<B: AutodiffBackend, M: AutodiffModule<B>>(
        &mut self,
        module: &M,
        summed: Summed,
    ) -> Result<(), SamError> {
        self.push(module, summed.grads, 1.0, summed.as_came)
    }

    fn push<B: AutodiffBackend, M: AutodiffModule<B>>(
        &mut self,
        module: &M,
        grads: GradientsParams,
        weight: f64,
        as_came: bool,
    ) -> Result<(), SamError> {
        self.terms += 1;
        if self.terms == 1 && as_came {
            self.single = Some(grads);
            return Ok(());
        }
        if let Some(single) = self.single.take() {
            add_weighted(module, &mut self.sum, single, 1.0)?;
        }
        add_weighted(module, &mut self.sum, grads, weight)
    }

    pub fn finish(self) -> Summed {
        match self.single {
            Some(grads) => Summed {
                grads,
                as_came: true,
            },
            None => Summed {
                grads: self.sum,
                as_came: false,
            },
        }
    }

    pub fn into_grads(self) -> GradientsParams {
        self.finish().grads
    }
}

/// `sum += weight * widen(grads)`, parameter by parameter.
fn add_weighted<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    sum: &mut GradientsParams,
    grads: GradientsParams,
    weight: f64,
) -> Result<(), SamError> {
    let gradients = grads.len();
    let (_, matched) = map_grads(module, grads, &mut AddTo { sum, weight });
    match matched == gradients {
        true => Ok(()),
        false => Err(SamError::ForeignGradients { gradients, matched }),
    }
}

struct AddTo<'a> {
    sum: &'a mut GradientsParams,
    weight: f64,
}

impl<B: Backend> GradMap<B> for AddTo<'_> {
    fn map<const D: usize>(&mut self, param: ParamGrad<B, D>) -> Option<Tensor<B, D>> {
        let ParamGrad {
            id, tensor: grad, ..
        } = param;
        let mut grad = widen(grad);
        if self.weight != 1.0 {
            grad = grad.mul_scalar(self.weight);
        }
        // The running sum is the only owner of its buffer: backends that can add in place.
        let total = match self.sum.remove::<B, D>(id) {
            Some(sum) => sum + grad,
            None => grad,
        };
        self.sum.register(id, total);
        None
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests read the values they check"
)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::{DType, FloatDType};

    use super::*;

    type B = Autodiff<Flex>;

    /// The gradient of `sum(model(x))` with `x` all `value`, the model cast to `dtype`.
    fn grads(model: &Linear<B>, value: f32) -> GradientsParams {
        let x = Tensor::<B, 2>::full([2, 3], value, &Default::default())
            .cast(model.weight.val().dtype());
        GradientsParams::from_grads(model.forward(x).sum().backward(), model)
    }

    fn weight_grad(summed: &GradientsParams, model: &Linear<B>) -> Vec<f32> {
        let grad = summed.get::<Flex, 2>(model.weight.id).unwrap();
        grad.cast(FloatDType::F32).into_data().to_vec().unwrap()
    }

    #[test]
    fn one_term_of_weight_one_comes_as_it_came() {
        let model: Linear<B> = LinearConfig::new(3, 1).init(&Default::default());
        let model = burn_sam::cast_params(model, FloatDType::F16);
        let mut sum = WeightedSum::default();
        sum.add(&model, grads(&model, 1.0), 1.0).unwrap();
        let summed = sum.finish();
        assert!(summed.as_came);
        let grad = summed.grads.get::<Flex, 2>(model.weight.id).unwrap();
        assert_eq!(grad.dtype(), DType::F16);

        // Weighted, or with a second term: a sum in f32.
        let mut sum = WeightedSum::default();
        sum.add(&model, grads(&model, 1.0), 0.5).unwrap();
        let summed = sum.finish();
        assert!(!summed.as_came);
        assert_eq!(weight_grad(&summed.grads, &model), vec![1.0; 3]);
    }

    #[test]
    fn terms_are_weighted_and_summed_in_f32() {
        let model: Linear<B> = LinearConfig::new(3, 1).init(&Default::default());
        let model = burn_sam::cast_params(model, FloatDType::F16);
        let mut sum = WeightedSum::default();
        // d sum(x w + b) / dw = 2 x per column: 1 * 2 + 0.75 * 6.
        sum.add(&model, grads(&model, 1.0), 1.0).unwrap();
        sum.add(&model, grads(&model, 3.0), 0.75).unwrap();
        let summed = sum.finish();
        assert!(!summed.as_came);
        let grad = summed.grads.get::<Flex, 2>(model.weight.id).unwrap();
        assert_eq!(grad.dtype(), DType::F32);
        assert_eq!(weight_grad(&summed.grads, &model), vec![2.0 + 4.5; 3]);

        // A finished sum added to another keeps "as it came" only alone.
        let mut one = WeightedSum::default();
        one.add(&model, grads(&model, 1.0), 1.0).unwrap();
        let mut outer = WeightedSum::default();
        outer.add_summed(&model, one.finish()).unwrap();
        assert!(outer.finish().as_came);
    }

    #[test]
    fn gradients_of_another_module_are_refused() {
        let model: Linear<B> = LinearConfig::new(3, 1).init(&Default::default());
        let other: Linear<B> = LinearConfig::new(3, 1).init(&Default::default());
        let mut sum = WeightedSum::default();
        sum.add(&model, grads(&model, 1.0), 0.5).unwrap();
        let refused = sum.add(&model, grads(&other, 1.0), 0.5).unwrap_err();
        assert_eq!(
            refused,
            SamError::ForeignGradients {
                gradients: 2,
                matched: 0
            }
        );
    }
}
