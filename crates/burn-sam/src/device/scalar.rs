//! One number of a step (a sum of squares, a norm, a factor) where the backend keeps it best:
//! read back where a read waits for nothing, on the device where it would wait for the queued
//! work. Formulas are written once over [`Scalar`]; only this file knows the two forms.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, DType, FloatDType, Tensor};

use super::broadcast::Broadcast;
use super::diagnostics::read_back;
use super::quirks::reads_are_free;

#[derive(Clone)]
pub(crate) enum Scalar<B: Backend> {
    /// Read back.
    Host(f64),
    /// A `[1]` tensor; taken as 0 where `zero` holds.
    Device {
        value: Broadcast<B>,
        zero: Option<Broadcast<B, Bool>>,
    },
}

impl<B: Backend> Scalar<B> {
    /// `value`, on the device: no read.
    pub fn device(value: Tensor<B, 1>) -> Self {
        Self::Device {
            value: Broadcast::new(value),
            zero: None,
        }
    }

    /// `value`, read back where that waits for nothing ([`reads_are_free`]).
    pub fn read_if_free(value: Tensor<B, 1>) -> Self {
        match reads_are_free::<B>(&value.device()) {
            true => Self::Host(read_together(vec![value])[0]),
            false => Self::device(value),
        }
    }

    fn map(
        self,
        host: impl FnOnce(f64) -> f64,
        device: impl FnOnce(Tensor<B, 1>) -> Tensor<B, 1>,
    ) -> Self {
        match self {
            Self::Host(x) => Self::Host(host(x)),
            Self::Device { value, zero } => Self::Device {
                value: Broadcast::new(device(value.into_scalar())),
                zero,
            },
        }
    }

    pub fn sqrt(self) -> Self {
        self.map(f64::sqrt, Tensor::sqrt)
    }

    pub fn add(self, x: f64) -> Self {
        self.map(|v| v + x, |v| v.add_scalar(x))
    }

    pub fn mul(self, x: f64) -> Self {
        self.map(|v| v * x, |v| v.mul_scalar(x))
    }

    pub fn div(self, x: f64) -> Self {
        self.map(|v| v / x, |v| v.div_scalar(x))
    }

    /// `numerator / self`.
    pub fn divides(self, numerator: f64) -> Self {
        self.map(|v| numerator / v, |v| v.recip().mul_scalar(numerator))
    }

    /// This, or 0 where `of` is not finite (inf or NaN).
    pub fn zero_unless_finite(self, of: &Self) -> Self {
        match (self, of.not_finite_on_device()) {
            (Self::Device { value, .. }, Some(flag)) => Self::Device {
                value,
                zero: Some(Broadcast::new(flag)),
            },
            (Self::Host(_), None) if of.known_not_finite() => Self::Host(0.0),
            (this, _) => this,
        }
    }

    /// Read back as 0: multiplying by it changes nothing worth a kernel.
    pub fn known_zero(&self) -> bool {
        matches!(self, Self::Host(x) if *x == 0.0)
    }

    /// Read back as not finite: known without a host wait.
    pub fn known_not_finite(&self) -> bool {
        matches!(self, Self::Host(x) if !x.is_finite())
    }

    /// On the device, true where this scalar is not finite; `None` once read back.
    pub fn not_finite_on_device(&self) -> Option<Tensor<B, 1, Bool>> {
        match self {
            // False for inf and NaN: one comparison where `is_finite` takes several kernels.
            Self::Device { value, .. } => {
                Some(value.scalar().clone().lower_elem(f64::INFINITY).bool_not())
            }
            Self::Host(_) => None,
        }
    }

    /// `x` times this scalar.
    pub fn times<const D: usize>(&mut self, x: Tensor<B, D>) -> Tensor<B, D> {
        match self {
            Self::Host(factor) => x.mul_scalar(*factor),
            Self::Device { value, zero: None } => x * value.get(),
            Self::Device {
                value,
                zero: Some(zero),
            } => (x * value.get()).mask_fill(zero.get(), 0.0),
        }
    }
}

/// Each of `scalars` as a number (0 for `None`; a device value as computed, before its
/// `zero`), those on the device read back together: one host wait for all of them.
fn read_all<B: Backend>(scalars: &[Option<Scalar<B>>]) -> Vec<f64> {
    let on_device: Vec<_> = scalars
        .iter()
        .flatten()
        .filter_map(|scalar| match scalar {
            Scalar::Device { value, .. } => Some(value.scalar().clone()),
            Scalar::Host(_) => None,
        })
        .collect();
    let mut read = read_together(on_device).into_iter();
    scalars
        .iter()
        .map(|scalar| match scalar {
            Some(Scalar::Host(x)) => *x,
            Some(Scalar::Device { .. }) => read.next().unwrap_or(f64::NAN),
            None => 0.0,
        })
        .collect()
}

/// `sqrt(squares) / loss_scale` for each of `squares` (0 for `None`), read back together.
pub(crate) fn read_norms<B: Backend>(squares: &[Option<Scalar<B>>], loss_scale: f32) -> Vec<f64> {
    read_norms_and(squares, loss_scale, Vec::new()).0
}

/// [`read_norms`] of `squares` and the values of `also` (NaN for `None`), all read back
/// together: one host wait.
pub(crate) fn read_norms_and<B: Backend>(
    squares: &[Option<Scalar<B>>],
    loss_scale: f32,
    also: Vec<Option<Tensor<B, 1>>>,
) -> (Vec<f64>, Vec<f64>) {
    let also: Vec<_> = also
        .into_iter()
        .map(|value| value.map(Scalar::device))
        .collect();
    let given = |scalars: &[Option<Scalar<B>>]| -> Vec<bool> {
        scalars.iter().map(Option::is_some).collect()
    };
    let (norms_given, also_given) = (given(squares), given(&also));
    let mut values = read_all(&[squares, &also].concat());
    let also = values.split_off(squares.len());
    let scale = f64::from(loss_scale);
    let norms = values
        .into_iter()
        .zip(norms_given)
        .map(|(squares, given)| if given { squares.sqrt() / scale } else { 0.0 })
        .collect();
    let also = also
        .into_iter()
        .zip(also_given)
        .map(|(value, given)| if given { value } else { f64::NAN })
        .collect();
    (norms, also)
}

/// The values of `[1]` tensors, in one read.
fn read_together<B: Backend>(mut values: Vec<Tensor<B, 1>>) -> Vec<f64> {
    match values.len() {
        0 => Vec::new(),
        1 => read_back(values.remove(0)).iter::<f64>().collect(),
        _ => {
            let dtype = match values.iter().any(|value| value.dtype() == DType::F64) {
                true => FloatDType::F64,
                false => FloatDType::F32,
            };
            let all = values.into_iter().map(|value| value.cast(dtype)).collect();
            read_back(Tensor::cat(all, 0)).iter::<f64>().collect()
        }
    }
}
