//! The base step under mixed precision: unscale the gradients into f32 and step f16/bf16
//! parameters through f32 master weights (Micikevicius et al., "Mixed Precision Training").

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use burn::module::{AutodiffModule, Module, ModuleMapper, Param, ParamId};
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, FloatDType, Tensor, TensorData};

use burn::record::Record;
use burn::tensor::backend::Backend;

use crate::params::{read_back, widen};
use crate::scaler::{LossScaleError, LossScaleHandle, LossScaler, LossScalerRecord};

/// An f32 master copy, flattened: on the device, or as loaded from a record until its first
/// use tells which device it belongs to.
#[derive(Clone)]
enum Master {
    Device(Arc<dyn Any + Send + Sync>),
    Host(Arc<Vec<f32>>),
}

/// The loss scaler and the master weights of the parameters narrower than f32, by id.
#[derive(Clone)]
pub(crate) struct MixedPrecision {
    pub scaler: Option<LossScaler>,
    /// Follows the scale as it changes, for code that cannot ask the optimizer.
    published: LossScaleHandle,
    enabled: bool,
    copies: HashMap<ParamId, Master>,
}

/// The mixed-precision state of an optimizer: the loss scaler's and the f32 master weights,
/// saved as plain f32 values (exact whatever the backend's float type).
#[derive(Record, Clone, Debug)]
pub struct MixedPrecisionRecord {
    /// The loss scaler's state, when loss scaling is on.
    pub loss_scaler: Option<LossScalerRecord>,
    /// The f32 master copy of each parameter narrower than f32.
    pub master_weights: Vec<MasterWeightRecord>,
}

/// The f32 master copy of one parameter.
#[derive(Record, Clone, Debug)]
pub struct MasterWeightRecord {
    /// The parameter's id, serialized.
    pub id: String,
    /// Its values in f32, flattened.
    pub values: Vec<f32>,
}

fn narrow(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
}

impl MixedPrecision {
    pub fn new(scaler: Option<LossScaler>, master_weights: bool) -> Self {
        Self {
            published: LossScaleHandle::new(scaler.as_ref().map_or(1.0, LossScaler::scale)),
            scaler,
            enabled: master_weights,
            copies: HashMap::new(),
        }
    }

    /// The scale of the loss, 1 without loss scaling.
    pub fn loss_scale(&self) -> f32 {
        self.scaler.as_ref().map_or(1.0, LossScaler::scale)
    }

    /// `loss * scale` in f32; the loss unchanged without loss scaling.
    pub fn scale_loss<B: Backend, const D: usize>(&self, loss: Tensor<B, D>) -> Tensor<B, D> {
        match &self.scaler {
            Some(scaler) => scaler.scale_loss(loss),
            None => loss,
        }
    }

    /// The one scale update of an optimizer step.
    pub fn update(&mut self, overflow: bool) -> Result<(), LossScaleError> {
        let updated = self
            .scaler
            .as_mut()
            .map_or(Ok(()), |scaler| scaler.update(overflow));
        self.published.set(self.loss_scale());
        updated
    }

    /// A view of the loss scale that follows every update and loaded record.
    pub fn loss_scale_handle(&self) -> LossScaleHandle {
        self.published.clone()
    }

    /// One base step: gradients divided by `loss_scale` in f32, parameters narrower than f32
    /// stepped through their master copies, then cast back (ids and `require_grad` kept).
    pub fn step<M, B, O>(
        &mut self,
        base: &mut O,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> M
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        let mut widen = Widen {
            grads,
            unscaled: GradientsParams::new(),
            inverse_scale: 1.0 / f64::from(self.loss_scale()),
            masters: self,
            narrowed: HashMap::new(),
        };
        let module = module.map(&mut widen);
        let (grads, narrowed) = (widen.unscaled, widen.narrowed);
        let module = base.step(lr, module, grads);
        module.map(&mut Narrow {
            narrowed,
            masters: self,
        })
    }

    pub fn to_record<B: AutodiffBackend>(&self) -> MixedPrecisionRecord {
        let host = |master: &Master| match master {
            Master::Device(tensor) => tensor
                .downcast_ref::<Tensor<B::InnerBackend, 1>>()
                .map(|tensor| read_back(tensor.clone()).iter::<f32>().collect()),
            Master::Host(values) => Some(values.as_ref().clone()),
        };
        MixedPrecisionRecord {
            loss_scaler: self.scaler.as_ref().map(LossScaler::to_record),
            master_weights: self
                .copies
                .iter()
                .filter_map(|(id, master)| {
                    Some(MasterWeightRecord {
                        id: id.serialize(),
                        values: host(master)?,
                    })
                })
                .collect(),
        }
    }

    pub fn load_record(&mut self, record: MixedPrecisionRecord) {
        if let Some(state) = record.loss_scaler {
            self.scaler = self.scaler.take().map(|scaler| scaler.load_record(state));
            self.published.set(self.loss_scale());
        }
        self.copies = record
            .master_weights
            .into_iter()
            .map(|master| {
                let id = ParamId::deserialize(&master.id);
                (id, Master::Host(Arc::new(master.values)))
            })
            .collect();
    }
}

/// Swaps narrow parameters for their f32 masters and unscales every gradient.
struct Widen<'a> {
    grads: GradientsParams,
    unscaled: GradientsParams,
    inverse_scale: f64,
    masters: &'a mut MixedPrecision,
    narrowed: HashMap<ParamId, DType>,
}

impl<B: AutodiffBackend> ModuleMapper<B> for Widen<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(grad) = self.grads.remove::<B::InnerBackend, D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let dtype = tensor.dtype();
        let mut grad = widen(grad);
        if self.inverse_scale != 1.0 {
            grad = grad.mul_scalar(self.inverse_scale);
        }
        let tensor = if self.masters.enabled && narrow(dtype) {
            let require_grad = tensor.is_require_grad();
            let weight = tensor.inner();
            let shape = weight.shape();
            let master = match self.masters.copies.remove(&id) {
                Some(Master::Device(master)) => master
                    .downcast::<Tensor<B::InnerBackend, 1>>()
                    .ok()
                    .map(Arc::unwrap_or_clone),
                Some(Master::Host(values)) => Some(Tensor::from_data(
                    TensorData::new(values.as_ref().clone(), [values.len()]),
                    (&weight.device(), DType::F32),
                )),
                None => None,
            };
            let master = match master {
                Some(master) if master.dims()[0] == shape.num_elements() => master.reshape(shape),
                _ => weight.cast(FloatDType::F32),
            };
            self.narrowed.insert(id, dtype);
            let master = Tensor::from_inner(master);
            if require_grad {
                master.require_grad()
            } else {
                master
            }
        } else {
            grad = grad.cast(dtype);
            tensor
        };
        self.unscaled.register(id, grad);
        Param::from_mapped_value(id, tensor, mapper)
    }
}

/// Keeps the stepped f32 values as masters and writes their narrow cast into the module.
struct Narrow<'a> {
    narrowed: HashMap<ParamId, DType>,
    masters: &'a mut MixedPrecision,
}

impl<B: AutodiffBackend> ModuleMapper<B> for Narrow<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(dtype) = self.narrowed.remove(&id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let require_grad = tensor.is_require_grad();
        let master = tensor.inner();
        let n = master.shape().num_elements();
        let narrowed = Tensor::from_inner(master.clone().cast(dtype));
        self.masters
            .copies
            .insert(id, Master::Device(Arc::new(master.reshape([n]))));
        let narrowed = if require_grad {
            narrowed.require_grad()
        } else {
            narrowed
        };
        Param::from_mapped_value(id, narrowed, mapper)
    }
}

/// Casts every float tensor of `module` to `dtype`, keeping parameter ids and
/// `require_grad` flags: how to train in f16 on a device whose default float type is f32.
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
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{DType, FloatDType};
///
/// let model: Linear<Autodiff<Flex>> = LinearConfig::new(3, 1).init(&Default::default());
/// let model = burn_sam::cast_params(model, FloatDType::F16);
/// assert_eq!(model.weight.val().dtype(), DType::F16);
/// ```
pub fn cast_params<B: Backend, M: Module<B>>(module: M, dtype: FloatDType) -> M {
    struct Cast(FloatDType);
    impl<B: Backend> ModuleMapper<B> for Cast {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let (id, tensor, mapper) = param.consume();
            let require_grad = tensor.is_require_grad();
            let cast = tensor.cast(self.0).detach();
            let cast = if require_grad {
                cast.require_grad()
            } else {
                cast
            };
            Param::from_mapped_value(id, cast, mapper)
        }
    }
    module.map(&mut Cast(dtype))
}
