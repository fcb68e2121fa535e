//! Casting a model's parameters to another float type, such as f16 for mixed precision.

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor};

use crate::error::SamError;
use crate::float::tracked;
use crate::hand_back::StepError;

/// Casts every float tensor of `module` to `dtype`, keeping parameter ids and
/// `require_grad` flags: how to train in f16 on a device whose default float type is f32.
///
/// The forward pass then computes in `dtype`: cast the inputs to it
/// (`x.cast(FloatDType::F16)`), since Burn does not mix float types in one operation
/// (Flex: "matmul: dtype mismatch F32/F16"), and cast the logits back to f32 before the loss
/// (`logits.cast(FloatDType::F32)`): the loss and its softmax are then exact in f32, and only
/// the layers run in f16.
///
/// Float running states (BatchNorm's statistics) are cast too. Burn shares them between
/// clones of a module and maps them in place, so cast an independent copy
/// (`M::from_inner(model.valid())`) rather than a clone if you keep using the original.
///
/// Prefer this over an f16 default float type when you save and resume optimizers with
/// state (Adam's moments): Burn loads every float tensor of a record in the device's
/// default float type, so an f16 default would load the f32 optimizer state that master
/// weights need as f16.
///
/// Flex, CUDA, Vulkan/WebGPU and LibTorch compute in f16 and bf16; NdArray does not: this
/// returns [`SamError::UnsupportedDType`] there, with the module unchanged.
///
/// ```
/// use burn::backend::{Autodiff, Flex, NdArray};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{DType, FloatDType};
/// use burn_sam::try_cast_params;
///
/// let model: Linear<Autodiff<Flex>> = LinearConfig::new(3, 1).init(&Default::default());
/// let model = try_cast_params(model, FloatDType::F16).unwrap();
/// assert_eq!(model.weight.val().dtype(), DType::F16);
///
/// let model: Linear<NdArray> = LinearConfig::new(3, 1).init(&Default::default());
/// let error = try_cast_params(model, FloatDType::F16).unwrap_err();
/// assert!(error.to_string().contains("NdArray has only f32 and f64"));
/// ```
pub fn try_cast_params<B: Backend, M: Module<B>>(
    module: M,
    dtype: FloatDType,
) -> Result<M, StepError<M>> {
    if let Some(device) = module.devices().first() {
        let supported = B::supports_dtype(device, DType::from(dtype));
        let unsupported = SamError::UnsupportedDType {
            dtype: DType::from(dtype),
            backend: B::name(device),
        };
        or_hand_back!(supported.then_some(()).ok_or(unsupported), module);
    }
    Ok(module.map(&mut Cast(dtype)))
}

/// [`try_cast_params`], panicking with its message on a backend without `dtype`.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{DType, FloatDType};
///
/// let model: Linear<Autodiff<Flex>> = LinearConfig::new(3, 1).init(&Default::default());
/// let model = burn_sam::cast_params(model, FloatDType::F16);
/// assert_eq!(model.weight.val().dtype(), DType::F16);
/// ```
#[track_caller]
pub fn cast_params<B: Backend, M: Module<B>>(module: M, dtype: FloatDType) -> M {
    match try_cast_params(module, dtype) {
        Ok(module) => module,
        Err(error) => panic!("{error}"),
    }
}

struct Cast(FloatDType);

impl<B: Backend> ModuleMapper<B> for Cast {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let require_grad = tensor.is_require_grad();
        let cast = tracked(tensor.cast(self.0).detach(), require_grad);
        Param::from_mapped_value(id, cast, mapper)
    }
}
