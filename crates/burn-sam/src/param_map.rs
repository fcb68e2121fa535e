//! A type-erased map from parameter ids to values of any type, so that optimizers generic
//! over the module only in their methods can keep per-parameter tensors between calls.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use burn::module::ParamId;

/// Values by parameter id; each entry keeps its own type (a `Tensor<B, D>`, a `Vec<f32>`).
#[derive(Clone, Default)]
pub(crate) struct ParamMap(HashMap<ParamId, Arc<dyn Any + Send + Sync>>);

impl ParamMap {
    pub fn insert<T: Any + Send + Sync>(&mut self, id: ParamId, value: T) {
        self.0.insert(id, Arc::new(value));
    }

    /// Removes the entry of `id` when it holds a `T`, and returns it; a clone only when the
    /// map's clones still share it, so that a tensor taken back has one owner and can be
    /// updated in place.
    pub fn take<T: Any + Send + Sync + Clone>(&mut self, id: &ParamId) -> Option<T> {
        let value = self.0.get(id)?.clone().downcast::<T>().ok()?;
        self.0.remove(id);
        Some(Arc::unwrap_or_clone(value))
    }

    /// Whether the entry of `id` holds a `T`.
    pub fn holds<T: Any>(&self, id: &ParamId) -> bool {
        self.0.get(id).is_some_and(|value| value.is::<T>())
    }

    pub fn get<T: Any>(&self, id: &ParamId) -> Option<&T> {
        self.0.get(id)?.downcast_ref()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds every entry of `other`, replacing those with the same id.
    pub fn extend(&mut self, other: ParamMap) {
        self.0.extend(other.0);
    }

    pub fn iter(&self) -> impl Iterator<Item = &ParamId> {
        self.0.keys()
    }
}

/// One value of any type, such as a device scalar of the backend a step runs on, kept
/// between the calls of a step by an optimizer generic over the backend only in its methods.
#[derive(Clone)]
pub(crate) struct AnyValue(Arc<dyn Any + Send + Sync>);

impl AnyValue {
    pub fn new<T: Any + Send + Sync>(value: T) -> Self {
        Self(Arc::new(value))
    }

    /// The value when it is a `T`.
    pub fn get<T: Any + Clone>(&self) -> Option<T> {
        self.0.downcast_ref().cloned()
    }
}
