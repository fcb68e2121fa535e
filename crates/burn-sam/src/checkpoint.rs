//! What an optimizer's record says about the model saved beside it (the float type of each
//! parameter narrower than f32, a fingerprint of the weights), and the resumed model checked
//! and put back against it.
//!
//! Burn loads a record's float tensors in the device's default float type and
//! `Param::load_record` keeps what it loaded, so an f16 model saved at full precision comes
//! back f32 on an f32 device and trains on in f32, silently; on an f16-default device the base
//! optimizer's f32 state of the master weights comes back f16, and the next step fails inside
//! the backend. A resume goes through here first.

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, HalfPrecisionSettings};
use burn::record::{Record, Recorder};
use burn::tensor::backend::Backend;
use burn::tensor::{get_device_settings, DType, FloatDType, Tensor};

use crate::device::read_back;
use crate::error::SamError;
use crate::float::tracked;
use crate::hand_back::StepError;

/// The model an optimizer's record was saved beside, as far as the record tells it.
#[derive(Record, Clone, Debug, PartialEq)]
pub struct SavedModelRecord {
    /// The parameters narrower than f32, with their float type.
    pub narrow: Vec<NarrowParamRecord>,
    /// [`fingerprint`] of the model's weights, when the record was taken with the model
    /// ([`LossScaling::label_model`](crate::LossScaling::label_model); `SamTraining` does it at
    /// each checkpoint).
    pub fingerprint: Option<u64>,
}

/// One parameter narrower than f32.
#[derive(Record, Clone, Debug, PartialEq)]
pub struct NarrowParamRecord {
    /// The parameter's id, serialized.
    pub id: String,
    /// Its float type: `"F16"` or `"BF16"`.
    pub dtype: String,
}

/// What a loaded record says the resumed model is, until the first step or
/// [`LossScaling::resume`](crate::LossScaling::resume) has checked the model against it.
#[derive(Clone, Debug, Default)]
pub(crate) struct SavedModel {
    /// The parameters narrower than f32 when saved: with their float type, or `None` in a
    /// record from before float types were saved (its master weights say which parameters
    /// were narrow, not in which type).
    narrow: HashMap<ParamId, Option<FloatDType>>,
    fingerprint: Option<u64>,
    /// Whether the base optimizer's record holds float tensors of f32 master weights (Adam's
    /// moments, SGD's momentum): an f16-default device loads them as f16.
    base_state_of_masters: bool,
}

impl SavedModel {
    /// What `record` says (`None`: a record from before this was saved, whose master weights
    /// `masters` are the parameters that were narrow).
    pub fn read(record: Option<&SavedModelRecord>, masters: &[String]) -> Self {
        let narrow = match record {
            Some(record) => record
                .narrow
                .iter()
                .map(|param| (ParamId::deserialize(&param.id), parse(&param.dtype)))
                .collect(),
            None => masters
                .iter()
                .map(|id| (ParamId::deserialize(id), None))
                .collect(),
        };
        Self {
            narrow,
            fingerprint: record.and_then(|record| record.fingerprint),
            base_state_of_masters: false,
        }
    }

    /// The saved float types that the record names.
    pub fn narrow_types(&self) -> HashMap<ParamId, DType> {
        let known = self.narrow.iter();
        known
            .filter_map(|(id, dtype)| Some((*id, DType::from((*dtype)?))))
            .collect()
    }

    /// Notes whether the base optimizer's loaded record holds float tensors, when the record
    /// held master weights (`masters`) and the default device's float type is narrow. Burn's
    /// records do not say what they hold; one with a float tensor serializes to fewer bytes at
    /// half precision than at full precision, beyond what the recorders' own metadata (their
    /// float type's name) makes of an empty record.
    pub fn with_base_state<B: Backend, R: Record<B>>(
        self,
        masters: bool,
        record: impl Fn() -> R,
    ) -> Self {
        fn saved<B: Backend, R: Record<B>>(record: R) -> i64 {
            let full = BinBytesRecorder::<FullPrecisionSettings>::default().record(record, ());
            full.map_or(0, |bytes| bytes.len() as i64)
        }
        fn halved<B: Backend, R: Record<B>>(record: R) -> i64 {
            let half = BinBytesRecorder::<HalfPrecisionSettings>::default().record(record, ());
            half.map_or(0, |bytes| bytes.len() as i64)
        }
        let floats = || {
            let empty = saved::<B, _>(()) - halved::<B, _>(());
            saved::<B, _>(record()) - halved::<B, _>(record()) != empty
        };
        // Two serializations of the base optimizer's whole state: only where the default
        // device, where records load, would have rounded it.
        let device = Default::default();
        let narrow_default = narrow(get_device_settings::<B>(&device).float_dtype.into());
        Self {
            base_state_of_masters: masters && narrow_default && floats(),
            ..self
        }
    }

    /// Whether anything is to be checked: a record that held no narrow parameter and no
    /// fingerprint says nothing about the model.
    pub fn says_anything(&self) -> bool {
        !self.narrow.is_empty() || self.fingerprint.is_some()
    }

    /// Refuses `module` when a step on it would not continue the saved run: a parameter that
    /// was narrow is now another type, or the device's default float type rounded the base
    /// optimizer's f32 state. No device read.
    pub fn check<B: Backend, M: Module<B>>(&self, module: &M) -> Result<(), SamError> {
        if let Some(device) = module.devices().first() {
            let default = DType::from(get_device_settings::<B>(device).float_dtype);
            if self.base_state_of_masters && narrow(default) {
                return Err(SamError::ResumeOnNarrowDefault { default });
            }
        }
        let mut dtypes = Dtypes::default();
        module.visit(&mut dtypes);
        let mut mismatched = self.narrow.iter().filter_map(|(id, saved)| {
            let now = *dtypes.0.get(id)?;
            let matches = match saved {
                Some(saved) => DType::from(*saved) == now,
                None => narrow(now),
            };
            (!matches).then_some((saved.map(DType::from), now))
        });
        let Some((saved, now)) = mismatched.next() else {
            return Ok(());
        };
        Err(SamError::ResumedDType {
            params: 1 + mismatched.count(),
            saved,
            now,
        })
    }

    /// `module` with every parameter that was narrow cast back to its saved float type, then
    /// [`SavedModel::check`]ed and compared with the saved fingerprint (one read of every
    /// weight). An error hands back the module with its types put back.
    pub fn restore<B: Backend, M: Module<B>>(&self, module: M) -> Result<M, StepError<M>> {
        let module = module.map(&mut PutBack(&self.narrow));
        or_hand_back!(self.check(&module), module);
        let differs = self
            .fingerprint
            .is_some_and(|saved| saved != fingerprint(&module));
        match differs {
            true => Err(StepError::new(module, SamError::ResumedModelDiffers)),
            false => Ok(module),
        }
    }
}

/// A fingerprint of `module`'s weights: a hash of every float parameter's values, widened to
/// f64 (so an f16 weight read back as f32 keeps its fingerprint), in the module's order. One
/// read of every weight: take it per checkpoint, not per step.
///
/// ```
/// use burn::backend::Flex;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::FloatDType;
///
/// let model: Linear<Flex> = LinearConfig::new(3, 2).init(&Default::default());
/// let f16 = burn_sam::cast_params(model.clone(), FloatDType::F16);
/// let f32 = burn_sam::cast_params(f16.clone(), FloatDType::F32);
/// assert_eq!(burn_sam::record::fingerprint(&f16), burn_sam::record::fingerprint(&f32));
/// assert_ne!(burn_sam::record::fingerprint(&model), burn_sam::record::fingerprint(&f16)); // rounded
/// ```
pub fn fingerprint<B: Backend, M: Module<B>>(module: &M) -> u64 {
    struct Hash(u64);
    impl Hash {
        // FNV-1a: the same value in every process and on every platform.
        fn add(&mut self, word: u64) {
            for byte in word.to_le_bytes() {
                self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    impl<B: Backend> ModuleVisitor<B> for Hash {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let data = read_back(param.val());
            self.add(data.num_elements() as u64);
            for value in data.iter::<f64>() {
                self.add(value.to_bits());
            }
        }
    }
    let mut hash = Hash(0xcbf2_9ce4_8422_2325);
    module.visit(&mut hash);
    hash.0
}

/// Whether `dtype` is narrower than f32: stepped through f32 master weights.
pub(crate) fn narrow(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
}

/// How a narrow float type is written in a record.
pub(crate) fn dtype_name(dtype: DType) -> String {
    format!("{dtype:?}")
}

fn parse(name: &str) -> Option<FloatDType> {
    match name {
        "F16" => Some(FloatDType::F16),
        "BF16" => Some(FloatDType::BF16),
        _ => None,
    }
}

#[derive(Default)]
struct Dtypes(HashMap<ParamId, DType>);

impl<B: Backend> ModuleVisitor<B> for Dtypes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.insert(param.id, param.val().dtype());
    }
}

struct PutBack<'a>(&'a HashMap<ParamId, Option<FloatDType>>);

impl<B: Backend> ModuleMapper<B> for PutBack<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(&Some(saved)) = self.0.get(&id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        if tensor.dtype() == DType::from(saved) {
            return Param::from_mapped_value(id, tensor, mapper);
        }
        let require_grad = tensor.is_require_grad();
        let cast = tracked(tensor.cast(saved).detach(), require_grad);
        Param::from_mapped_value(id, cast, mapper)
    }
}
