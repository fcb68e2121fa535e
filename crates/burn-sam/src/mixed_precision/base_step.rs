//! The base step under mixed precision: unscale the gradients into f32 and step f16/bf16
//! parameters through f32 master weights (Micikevicius et al., "Mixed Precision Training"),
//! only ever with finite gradients.

use std::collections::HashMap;

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, FloatDType, Tensor};

use crate::checkpoint::{dtype_name, narrow, NarrowParamRecord, SavedModel, SavedModelRecord};
use crate::device::by_shape;
use crate::device::end_step_on_device;
use crate::error::{LossScaleError, SamError};
use crate::float::{tracked, widen};
use crate::hand_back::StepError;
use crate::norm::{squared_sum, unscaled_norm};
use crate::param_map::ParamMap;
use crate::state::ParamState;

use super::{LossScaleHandle, LossScaler, LossScalerRecord};

/// The loss scaler, and the f32 master weights of the parameters narrower than f32 by id: on
/// the device (`Tensor<B::InnerBackend, 1>`, flattened), or as loaded from a record
/// (`Vec<f32>`) until their first step tells which device they belong to; and the global norm
/// the guarded step clips its gradient to.
#[derive(Clone)]
pub(crate) struct Precision {
    scaler: Option<LossScaler>,
    handle: LossScaleHandle,
    master_weights: bool,
    masters: ParamState<f32>,
    /// The float type of every parameter narrower than f32 that a step has seen (or a loaded
    /// record named): what a resumed model is put back to.
    narrow: HashMap<ParamId, DType>,
    max_grad_norm: Option<f64>,
}

/// The mixed-precision state of an optimizer: the loss scaler's and the f32 master weights,
/// saved as plain f32 values (exact whatever the backend's float type).
#[derive(Record, Clone, Debug)]
pub struct MixedPrecisionRecord {
    /// The loss scaler's state, when loss scaling is on.
    pub loss_scaler: Option<LossScalerRecord>,
    /// The f32 master copy of each parameter narrower than f32.
    pub master_weights: Vec<MasterWeightRecord>,
    /// The model saved beside the record: its parameters narrower than f32 and, when the
    /// record was taken with it, its fingerprint. `None` in records written before burn-sam
    /// saved it (their master weights say which parameters were narrow).
    pub model: Option<SavedModelRecord>,
}

/// The f32 master copy of one parameter.
#[derive(Record, Clone, Debug)]
pub struct MasterWeightRecord {
    /// The parameter's id, serialized.
    pub id: String,
    /// Its values in f32, flattened.
    pub values: Vec<f32>,
}

impl Precision {
    pub fn new(scaler: Option<LossScaler>, master_weights: bool) -> Self {
        Self {
            handle: LossScaleHandle::new(scaler.as_ref()),
            scaler,
            master_weights,
            masters: ParamState::default(),
            narrow: HashMap::new(),
            max_grad_norm: None,
        }
    }

    /// Clips the stepped gradient to global norm `max` (`None`: no clipping).
    pub fn with_max_grad_norm(self, max: Option<f64>) -> Self {
        Self {
            max_grad_norm: max,
            ..self
        }
    }

    pub fn scaler(&self) -> Option<&LossScaler> {
        self.scaler.as_ref()
    }

    /// The scale of the loss, 1 without loss scaling.
    pub fn loss_scale(&self) -> f32 {
        self.scaler.as_ref().map_or(1.0, LossScaler::scale)
    }

    pub fn handle(&self) -> &LossScaleHandle {
        &self.handle
    }

    /// Vouches for the next phase's gradients as a scaled loss's (a strategy's hand-over,
    /// whose scale the channel checked, or a phase that checked them already).
    pub fn vouch(&self) {
        self.handle.mark_loss_scaled();
    }

    /// Refused when loss scaling is on and nothing vouches for the gradients' scale: a loss
    /// scaled through the optimizer since the last check, or a strategy's accepted hand-over
    /// ([`Precision::vouch`]); the gradients would be off by the scale.
    pub fn check_scaled(&self) -> Result<(), SamError> {
        let scaled = self.handle.take_loss_scaled();
        match self.scaler.is_some() && !scaled {
            true => Err(SamError::UnscaledLoss),
            false => Ok(()),
        }
    }

    /// The unscaled global norm of `grads`.
    pub fn grad_norm<M, B>(&self, module: &M, grads: &GradientsParams) -> Result<f64, SamError>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        unscaled_norm(module, grads, None, self.loss_scale(), None)
    }

    /// [`Precision::grad_norm`]'s squared sum, scaled and still on the device.
    pub fn grad_squares<M, B>(
        &self,
        module: &M,
        grads: &GradientsParams,
    ) -> Result<Option<Tensor<B::InnerBackend, 1>>, SamError>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        squared_sum(module, grads, None, None)
    }

    /// The one scale update of an optimizer step.
    pub fn update(&mut self, overflow: bool) -> Result<(), LossScaleError> {
        let Some(scaler) = self.scaler.as_mut() else {
            return Ok(());
        };
        let updated = scaler.update(overflow);
        self.handle.publish(scaler);
        updated
    }

    /// The guarded base step: with finite `grads` (their unscaled norm `grad_norm`), unscaled
    /// in f32, clipped to the global norm `max_grad_norm` and stepped through master weights;
    /// otherwise nothing changes. No scale update.
    pub fn step_if_finite<M, B, O>(
        &mut self,
        base: &mut O,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        grad_norm: f64,
    ) -> (M, bool)
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        if !grad_norm.is_finite() {
            log::warn!(
                "gradient norm {grad_norm} at loss scale {}: skipping the update",
                self.loss_scale()
            );
            return (module, false);
        }
        let mut widen = Widen {
            grads,
            unscaled: GradientsParams::new(),
            // Unscaled, then clipped as `clip_grad_norm_` clips (PyTorch adds 1e-6 to the norm):
            // one multiply per gradient for both.
            factor: clip_factor(self.max_grad_norm, grad_norm) / f64::from(self.loss_scale()),
            masters: self,
            narrowed: HashMap::new(),
        };
        let module = module.map(&mut widen);
        let (grads, narrowed) = (widen.unscaled, widen.narrowed);
        let module = base.step(lr, module, grads);
        let module = narrow_stepped(module, &narrowed, &mut self.masters);
        end_step_on_device(&module);
        (module, true)
    }

    /// [`Precision::check_scaled`], [`Precision::grad_norm`], then
    /// [`Precision::step_if_finite`]: no scale update.
    pub fn guarded_step<M, B, O>(
        &mut self,
        base: &mut O,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> Result<(M, ScaledStepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        let loss_scale = self.loss_scale();
        or_hand_back!(self.check_scaled(), module);
        let grad_norm = or_hand_back!(self.grad_norm(&module, &grads), module);
        let (module, applied) = self.step_if_finite(base, lr, module, grads, grad_norm);
        let report = ScaledStepReport {
            applied,
            grad_norm,
            loss_scale,
        };
        Ok((module, report))
    }

    /// The record, with the `fingerprint` of the model saved beside it when one was taken.
    pub fn to_record<B: AutodiffBackend>(&self, fingerprint: Option<u64>) -> MixedPrecisionRecord {
        let masters = self.masters.to_values::<B::InnerBackend>().into_iter();
        let mut narrow: Vec<_> = self
            .narrow
            .iter()
            .map(|(id, &dtype)| NarrowParamRecord {
                id: id.serialize(),
                dtype: dtype_name(dtype),
            })
            .collect();
        // In one order whatever the map's: equal states write equal records.
        narrow.sort_by(|a, b| a.id.cmp(&b.id));
        MixedPrecisionRecord {
            model: Some(SavedModelRecord {
                narrow,
                fingerprint,
            }),
            loss_scaler: self.scaler.as_ref().map(LossScaler::to_record),
            master_weights: masters
                .map(|(id, values)| MasterWeightRecord {
                    id: id.serialize(),
                    values,
                })
                .collect(),
        }
    }

    /// Loads `record`, and says what it tells of the model saved beside it.
    pub fn load_record(&mut self, record: MixedPrecisionRecord) -> SavedModel {
        let masters: Vec<String> = record.master_weights.iter().map(|m| m.id.clone()).collect();
        let saved = SavedModel::read(record.model.as_ref(), &masters);
        self.narrow = saved.narrow_types();
        if let Some(state) = record.loss_scaler {
            self.scaler = self.scaler.take().map(|scaler| scaler.load_record(state));
        }
        if let Some(scaler) = &self.scaler {
            self.handle.publish(scaler);
        }
        let masters = record.master_weights.into_iter();
        self.masters = ParamState::from_values(
            masters.map(|master| (ParamId::deserialize(&master.id), master.values)),
        );
        saved
    }
}

/// What one guarded step ([`MixedPrecision::try_step`](crate::MixedPrecision::try_step),
/// [`guarded_step`](crate::strategy::guarded_step)) did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaledStepReport {
    /// Whether the update was applied (false: the gradients overflowed).
    pub applied: bool,
    /// The unscaled gradient norm.
    pub grad_norm: f64,
    /// The loss scale the gradients were computed with (1 without loss scaling).
    pub loss_scale: f32,
}

/// One step of any Burn optimizer, taken only with finite gradients: the gradients are cast
/// to each parameter's float type, with no loss scale and no master weights.
///
/// This is the check [`Sam`](crate::Sam) and [`MixedPrecision`](crate::MixedPrecision) make before
/// every update, for any Burn optimizer: one device read (the global gradient norm), and
/// weights and optimizer state untouched when a gradient is not finite.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::{GradientsParams, SgdConfig};
/// use burn::tensor::Tensor;
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let mut sgd = SgdConfig::new().init();
/// let loss = model.forward(Tensor::<B, 2>::ones([2, 3], &device)).sum();
/// let grads = GradientsParams::from_grads(loss.backward(), &model);
/// let (model, report) = burn_sam::strategy::guarded_step(&mut sgd, 0.1, model, grads).unwrap();
/// assert!(report.applied);
/// ```
pub fn guarded_step<M, B, O>(
    base: &mut O,
    lr: LearningRate,
    module: M,
    grads: GradientsParams,
) -> Result<(M, ScaledStepReport), StepError<M>>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
    O: Optimizer<M, B>,
{
    Precision::new(None, false).guarded_step(base, lr, module, grads)
}

/// What `clip_grad_norm_` multiplies gradients of global norm `norm` by: `max / (norm +
/// 1e-6)`, at most 1.
fn clip_factor(max: Option<f64>, norm: f64) -> f64 {
    max.map_or(1.0, |max| (max / (norm + 1e-6)).min(1.0))
}

/// Swaps narrow parameters for their f32 masters and unscales (and clips) every gradient.
struct Widen<'a> {
    grads: GradientsParams,
    unscaled: GradientsParams,
    /// `1 / scale`, times the clipping factor.
    factor: f64,
    masters: &'a mut Precision,
    narrowed: HashMap<ParamId, DType>,
}

impl<B: AutodiffBackend> ModuleMapper<B> for Widen<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let dtype = tensor.dtype();
        // What every float tensor is now (BatchNorm's statistics and frozen parameters
        // included) is what a resume puts back.
        match narrow(dtype) {
            true => self.masters.narrow.insert(id, dtype),
            false => self.masters.narrow.remove(&id),
        };
        let Some(grad) = self.grads.remove::<B::InnerBackend, D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let mut grad = widen(grad);
        if self.factor != 1.0 {
            grad = grad.mul_scalar(self.factor);
        }
        let tensor = if self.masters.master_weights && narrow(dtype) {
            let require_grad = tensor.is_require_grad();
            let weight = tensor.inner();
            let master = self.masters.master::<B, D>(id, weight);
            self.narrowed.insert(id, dtype);
            tracked(Tensor::from_inner(master), require_grad)
        } else {
            grad = grad.cast(dtype);
            tensor
        };
        self.unscaled.register(id, grad);
        Param::from_mapped_value(id, tensor, mapper)
    }
}

impl Precision {
    /// The f32 master copy of `weight`: the kept one (moved to the device when it came from a
    /// record), or `weight` widened the first time.
    fn master<B: AutodiffBackend, const D: usize>(
        &mut self,
        id: ParamId,
        weight: Tensor<B::InnerBackend, D>,
    ) -> Tensor<B::InnerBackend, D> {
        let kept = self
            .masters
            .take(&id, weight.shape(), &weight.device(), DType::F32);
        kept.unwrap_or_else(|| weight.cast(FloatDType::F32))
    }
}

/// Keeps the stepped f32 values of the `narrowed` parameters as masters and writes their
/// narrow casts into the module, queued grouped by shape ([`by_shape`]): on a fused backend
/// the casts of equally shaped tensors then run as one kernel.
fn narrow_stepped<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: M,
    narrowed: &HashMap<ParamId, DType>,
    masters: &mut ParamState<f32>,
) -> M {
    type Cast = Box<dyn FnOnce(&mut ParamMap)>;
    struct Stepped<'a> {
        narrowed: &'a HashMap<ParamId, DType>,
        masters: &'a mut ParamState<f32>,
        casts: Vec<(Vec<usize>, Cast)>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Stepped<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let (id, Some(&dtype)) = (param.id, self.narrowed.get(&param.id)) else {
                return;
            };
            let master = param.val().inner();
            self.masters.insert(id, master.clone());
            let shape = master.dims().to_vec();
            let cast = move |cast: &mut ParamMap| cast.insert(id, master.cast(dtype));
            self.casts.push((shape, Box::new(cast)));
        }
    }
    struct Put(ParamMap);
    impl<B: AutodiffBackend> ModuleMapper<B> for Put {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let (id, tensor, mapper) = param.consume();
            let Some(cast) = self.0.take::<Tensor<B::InnerBackend, D>>(&id) else {
                return Param::from_mapped_value(id, tensor, mapper);
            };
            let narrowed = tracked(Tensor::from_inner(cast), tensor.is_require_grad());
            Param::from_mapped_value(id, narrowed, mapper)
        }
    }
    let mut stepped = Stepped {
        narrowed,
        masters,
        casts: Vec::new(),
    };
    module.visit(&mut stepped);
    let mut cast = ParamMap::default();
    for queue in by_shape(stepped.casts) {
        queue(&mut cast);
    }
    module.map(&mut Put(cast))
}
