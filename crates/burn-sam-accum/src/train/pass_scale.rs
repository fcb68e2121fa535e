//! How a `TrainStep` scales and weights its loss: Burn calls it with the batch alone, so the
//! loss scale of the pass a strategy runs, and the micro-batch's weight in its window, reach
//! it through this thread (each replica's worker thread sets its own). The strategy hands the
//! same scale over to the optimizer with the gradients.

use std::any::Any;
use std::cell::RefCell;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use burn_sam::strategy::widen;

use crate::window::weighted;

/// The micro-batch running on this thread: its pass's loss scale, its weight in the window,
/// whether the `TrainStep` applied them, and its loss where the step's report wants it.
struct Pass {
    scale: Option<f32>,
    weight: f64,
    used: bool,
    loss: Option<PassLoss>,
}

/// The loss a `TrainStep` gave [`scale_loss`], as a detached `Tensor<B, 1>` of its backend.
pub(super) type PassLoss = Box<dyn Any + Send>;

/// What a pass's `TrainStep` did with [`scale_loss`].
pub(super) struct Scaled {
    /// Whether it called it, which weighted its loss.
    pub used: bool,
    /// The loss it gave, unscaled and unweighted, when asked to keep it.
    pub loss: Option<PassLoss>,
}

thread_local! {
    static PASS: RefCell<Option<Pass>> = const { RefCell::new(None) };
}

/// `loss` times the loss scale of the pass [`SamTraining`](super::SamTraining) is running and
/// times the micro-batch's share of its window, in f32 (f64 stays f64): call `backward` on
/// this in your `TrainStep`. It is what the direct path
/// ([`Accumulation`](crate::Accumulation)) back-propagates, in the same order of operations,
/// so the two compute one thing bitwise, and in f16 what flows back is no larger than the
/// window's mean gradient. Returns `loss` unchanged outside
/// [`SamTraining`](super::SamTraining), so the same `TrainStep` serves f32 and f16 training,
/// on one device or several. Keep the unscaled loss in the step's output, for the metrics.
///
/// Without loss scaling a `TrainStep` may leave it out: its gradient is then weighted after
/// `backward`, which equals the direct path bitwise only for power-of-two weights (windows
/// of 1, 2, 4, ...).
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::tensor::Tensor;
/// use burn_sam_accum::train::scale_loss;
///
/// let loss = Tensor::<Autodiff<Flex>, 1>::from_floats([0.5], &Default::default());
/// // Outside a training strategy's pass: unchanged.
/// let loss = scale_loss(loss);
/// assert_eq!(loss.into_scalar(), 0.5);
/// ```
pub fn scale_loss<B: Backend, const D: usize>(loss: Tensor<B, D>) -> Tensor<B, D> {
    let pass = PASS.with_borrow_mut(|pass| {
        let pass = pass.as_mut()?;
        pass.used = true;
        if let Some(kept) = pass.loss.as_mut() {
            *kept = Box::new(loss.clone().detach().reshape([-1]).sum());
        }
        Some((pass.scale, pass.weight))
    });
    let Some((scale, weight)) = pass else {
        return loss;
    };
    let loss = widen(loss);
    let loss = match scale {
        Some(scale) => loss.mul_scalar(scale),
        None => loss,
    };
    weighted(loss, weight)
}

/// Runs `step` on this thread with its loss scaled by `loss_scale` (`None`: unscaled) and
/// weighted by `weight`; also says whether `step` called [`scale_loss`], which weighted its
/// loss (otherwise the caller weights its gradient), and with `keep_loss` the loss it gave.
///
/// # Panics
/// When `loss_scale` is set and `step` did not call [`scale_loss`]: its gradients would be
/// taken as scaled and vanish.
pub(super) fn with_pass<T>(
    loss_scale: Option<f32>,
    weight: f64,
    keep_loss: bool,
    step: impl FnOnce() -> T,
) -> (T, Scaled) {
    PASS.set(Some(Pass {
        scale: loss_scale,
        weight,
        used: false,
        loss: keep_loss.then(|| Box::new(()) as PassLoss),
    }));
    let output = step();
    let pass = PASS.take();
    let used = pass.as_ref().is_some_and(|pass| pass.used);
    if let Some(scale) = loss_scale {
        assert!(
            used,
            "loss scaling is on (scale {scale}) but the TrainStep did not call \
             burn_sam_accum::train::scale_loss on the loss it back-propagates"
        );
    }
    let loss = pass.and_then(|pass| pass.loss).filter(|_| used);
    (output, Scaled { used, loss })
}
