//! Per-parameter state that an optimizer keeps between steps and saves in its record: the f32
//! master weights, Friendly-SAM's momentum, LookSAM's direction.

use std::marker::PhantomData;

use burn::module::ParamId;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Device, Element, Shape, Tensor, TensorData};

use crate::diagnostics::read_back;
use crate::param_map::ParamMap;

/// Each parameter's state, flattened: a device tensor once a step has used it, or the host
/// values of a loaded record (in `E`, which holds every value exactly) until a step tells
/// which device it belongs to.
#[derive(Clone)]
pub(crate) struct ParamState<E> {
    map: ParamMap,
    element: PhantomData<E>,
}

impl<E> std::fmt::Debug for ParamState<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParamState")
            .field("params", &self.map.iter().count())
            .finish()
    }
}

impl<E> Default for ParamState<E> {
    fn default() -> Self {
        Self {
            map: ParamMap::default(),
            element: PhantomData,
        }
    }
}

impl<E: Element + Clone + Send + Sync + 'static> ParamState<E> {
    /// The state of a parameter of loaded records' values.
    pub fn from_values(values: impl IntoIterator<Item = (ParamId, Vec<E>)>) -> Self {
        let mut state = Self::default();
        for (id, values) in values {
            state.map.insert(id, values);
        }
        state
    }

    pub fn insert<B: Backend, const D: usize>(&mut self, id: ParamId, tensor: Tensor<B, D>) {
        let n = tensor.shape().num_elements();
        self.map.insert(id, tensor.reshape([n]));
    }

    /// The state of `id` in `shape` on `device` (host values become `dtype`), `None` without
    /// state or with state of another size.
    pub fn get<B: Backend, const D: usize>(
        &self,
        id: &ParamId,
        shape: Shape,
        device: &Device<B>,
        dtype: DType,
    ) -> Option<Tensor<B, D>> {
        let flat = match self.map.get::<Tensor<B, 1>>(id) {
            Some(tensor) => tensor.clone(),
            None => from_host(self.map.get::<Vec<E>>(id)?.clone(), &shape, device, dtype)?,
        };
        shaped(flat, shape)
    }

    /// [`ParamState::get`], taking the state out: a tensor taken has one owner, and backends
    /// that can update it in place do.
    pub fn take<B: Backend, const D: usize>(
        &mut self,
        id: &ParamId,
        shape: Shape,
        device: &Device<B>,
        dtype: DType,
    ) -> Option<Tensor<B, D>> {
        let flat = match self.map.take::<Tensor<B, 1>>(id) {
            Some(tensor) => tensor,
            None => from_host(self.map.take::<Vec<E>>(id)?, &shape, device, dtype)?,
        };
        shaped(flat, shape)
    }

    /// Adds every entry of `other`, replacing those of the same parameters.
    pub fn extend(&mut self, other: Self) {
        self.map.extend(other.map);
    }

    /// Each parameter's values, read back from the device (`B`'s) where they are there.
    pub fn to_values<B: Backend>(&self) -> Vec<(ParamId, Vec<E>)> {
        let values = |id: &ParamId| match self.map.get::<Tensor<B, 1>>(id) {
            Some(tensor) => Some(read_back(tensor.clone()).iter::<E>().collect()),
            None => self.map.get::<Vec<E>>(id).cloned(),
        };
        self.map
            .iter()
            .filter_map(|id| Some((*id, values(id)?)))
            .collect()
    }
}

fn from_host<B: Backend, E: Element>(
    values: Vec<E>,
    shape: &Shape,
    device: &Device<B>,
    dtype: DType,
) -> Option<Tensor<B, 1>> {
    let n = shape.num_elements();
    (values.len() == n).then(|| Tensor::from_data(TensorData::new(values, [n]), (device, dtype)))
}

fn shaped<B: Backend, const D: usize>(flat: Tensor<B, 1>, shape: Shape) -> Option<Tensor<B, D>> {
    (flat.dims()[0] == shape.num_elements()).then(|| flat.reshape(shape))
}
