//! [`StepError`], which hands the module back with any error, and [`or_hand_back!`], how every
//! call that takes a module by value keeps it on failure.

use core::fmt;

use crate::error::SamError;

/// An error from a call that took the module by value, with the module handed back.
///
/// **The rule, for every variant and every way through a step:** an error, and a skipped step
/// (`StepOutcome::UpdateSkipped`, not an error), hand back exactly the module the step was
/// given, its weights `w`: before the ascent the module as it came, after it `w` from what the
/// ascent kept (the pending ascent is undone; Momentum-SAM's look-ahead is such an ascent).
/// The one exception: when the step itself was applied and only what follows it failed (the
/// loss scale's hard stop), the stepped weights. Between steps the module is always `w`.
///
/// It converts into `Box<dyn Error>` like any error, so `?` works; match on it to keep
/// training with the module.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::{GradientsParams, SgdConfig};
/// use burn::tensor::Tensor;
/// use burn_sam::{SamConfig, SamError};
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let mut sam = SamConfig::new().init(SgdConfig::new().init());
/// let loss = model.forward(Tensor::<B, 2>::ones([2, 3], &device)).sum();
/// let grads = GradientsParams::from_grads(loss.backward(), &model);
///
/// // A descent without an ascent: refused, and the model comes back.
/// let error = sam.descend(0.1, model, grads).unwrap_err();
/// assert_eq!(error.error, SamError::DescentWithoutAscent);
/// let model = error.module;
/// ```
pub struct StepError<M, E = SamError> {
    /// The module, handed back.
    pub module: M,
    /// What went wrong.
    pub error: E,
}

impl<M, E> StepError<M, E> {
    pub(crate) fn new(module: M, error: impl Into<E>) -> Self {
        Self {
            module,
            error: error.into(),
        }
    }

    /// The module, dropping the error.
    pub fn into_module(self) -> M {
        self.module
    }

    /// The same module with the error converted, e.g. into a wider error type.
    pub fn map_error<F>(self, map: impl FnOnce(E) -> F) -> StepError<M, F> {
        StepError {
            module: self.module,
            error: map(self.error),
        }
    }

    /// The same module with the error converted by `From`: `.map_err(StepError::convert)?`
    /// where a caller's error type wraps this one.
    pub fn convert<F: From<E>>(self) -> StepError<M, F> {
        self.map_error(F::from)
    }
}

impl<M, E: fmt::Debug> fmt::Debug for StepError<M, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<M, E: fmt::Display> fmt::Display for StepError<M, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<M, E: std::error::Error + 'static> std::error::Error for StepError<M, E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// `$result`'s value, or a return of `Err(StepError)` that hands `$module` back with the error
/// (converted with `Into`): how every call that takes a module by value keeps it on failure.
///
/// ```
/// use burn_sam::strategy::or_hand_back;
/// use burn_sam::{SamError, StepError};
///
/// fn check(module: Vec<f32>) -> Result<Vec<f32>, StepError<Vec<f32>>> {
///     let len = or_hand_back!(
///         if module.is_empty() { Err(SamError::DescentWithoutAscent) } else { Ok(module.len()) },
///         module
///     );
///     assert!(len > 0);
///     Ok(module)
/// }
/// assert_eq!(check(Vec::new()).unwrap_err().module, Vec::<f32>::new());
/// ```
#[macro_export]
#[doc(hidden)]
macro_rules! or_hand_back {
    ($result:expr, $module:expr) => {
        match $result {
            Ok(value) => value,
            Err(error) => {
                return Err($crate::StepError {
                    module: $module,
                    error: ::core::convert::Into::into(error),
                })
            }
        }
    };
}
