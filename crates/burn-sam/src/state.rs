//! Per-parameter state that an optimizer keeps between steps and saves in its record: the f32
//! master weights, Friendly-SAM's momentum, LookSAM's direction.

use std::marker::PhantomData;

use burn::module::ParamId;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Device, Element, Shape, Tensor, TensorData};

use crate::device::read_back;
use crate::param_map::{AnyValue, ParamMap};

/// Each parameter's state: a device tensor in the parameter's shape once a step has used it,
/// or the host values of a loaded record (in `E`, which holds every value exactly) until a
/// step tells which device it belongs to.
///
/// Tensors are kept in their shape, not flattened: on a fused backend a flattening reshape
/// (its rank falls) ends the kernel being fused, so a reshape per parameter in a step's update
/// split what would otherwise be one kernel for all tensors of a shape.
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
        self.map.insert(id, Shaped::new(tensor));
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
        match self.map.get::<Shaped<B>>(id) {
            Some(tensor) => tensor.clone().in_shape(shape),
            None => shaped(
                from_host(self.map.get::<Vec<E>>(id)?.clone(), &shape, device, dtype)?,
                shape,
            ),
        }
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
        match self.map.take::<Shaped<B>>(id) {
            Some(tensor) => tensor.in_shape(shape),
            None => shaped(
                from_host(self.map.take::<Vec<E>>(id)?, &shape, device, dtype)?,
                shape,
            ),
        }
    }

    /// Adds every entry of `other`, replacing those of the same parameters.
    pub fn extend(&mut self, other: Self) {
        self.map.extend(other.map);
    }

    /// Each parameter's values, read back from the device (`B`'s) where they are there.
    pub fn to_values<B: Backend>(&self) -> Vec<(ParamId, Vec<E>)> {
        let values = |id: &ParamId| match self.map.get::<Shaped<B>>(id) {
            Some(tensor) => Some(read_back(tensor.flat()).iter::<E>().collect()),
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

/// A tensor of any rank, with the way back to it and to its flattened values.
#[derive(Clone)]
struct Shaped<B: Backend> {
    tensor: AnyValue,
    flatten: fn(&AnyValue) -> Tensor<B, 1>,
}

impl<B: Backend> Shaped<B> {
    fn new<const D: usize>(tensor: Tensor<B, D>) -> Self {
        fn flatten<B: Backend, const D: usize>(tensor: &AnyValue) -> Tensor<B, 1> {
            let tensor: Tensor<B, D> = tensor.get().expect("a tensor of its rank");
            let n = tensor.shape().num_elements();
            tensor.reshape([n])
        }
        Self {
            tensor: AnyValue::new(tensor),
            flatten: flatten::<B, D>,
        }
    }

    fn flat(&self) -> Tensor<B, 1> {
        (self.flatten)(&self.tensor)
    }

    /// The tensor as it was kept when it has `shape`, reshaped when only its size matches.
    fn in_shape<const D: usize>(self, shape: Shape) -> Option<Tensor<B, D>> {
        match self.tensor.get::<Tensor<B, D>>() {
            Some(tensor) if tensor.shape() == shape => Some(tensor),
            _ => shaped(self.flat(), shape),
        }
    }
}
