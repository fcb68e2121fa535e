//! How a `TrainStep` scales its loss: Burn calls it with the batch alone, so the scale of the
//! pass a strategy runs reaches it through this thread (each replica's worker thread sets its
//! own). The strategy hands the same scale over to the optimizer with the gradients.

use std::cell::RefCell;

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use burn_sam::strategy::widen;

/// The loss scale of the pass running on this thread, and whether the `TrainStep` used it.
struct PassScale {
    scale: f32,
    used: bool,
}

thread_local! {
    static PASS_SCALE: RefCell<Option<PassScale>> = const { RefCell::new(None) };
}

/// `loss` times the loss scale of the pass [`SamTraining`](super::SamTraining) is running, in
/// f32: call `backward` on this in your `TrainStep`. Returns `loss` unchanged without loss
/// scaling and outside [`SamTraining`](super::SamTraining), so the same `TrainStep` serves
/// f32 and f16 training, on one device or several. Keep the unscaled loss in the step's
/// output, for the metrics.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::tensor::Tensor;
/// use burn_sam_accum::train::scale_loss;
///
/// let loss = Tensor::<Autodiff<Flex>, 1>::from_floats([0.5], &Default::default());
/// // Outside a training strategy's pass: unchanged.
/// assert_eq!(scale_loss(loss).into_scalar(), 0.5);
/// ```
pub fn scale_loss<B: Backend, const D: usize>(loss: Tensor<B, D>) -> Tensor<B, D> {
    let scale = PASS_SCALE.with_borrow_mut(|pass| {
        let pass = pass.as_mut()?;
        pass.used = true;
        Some(pass.scale)
    });
    match scale {
        Some(scale) => widen(loss).mul_scalar(scale),
        None => loss,
    }
}

/// Runs `step` on this thread with its loss scaled by `loss_scale` (`None`: unscaled).
///
/// # Panics
/// When `loss_scale` is set and `step` did not call [`scale_loss`]: its gradients would be
/// taken as scaled and vanish.
pub(super) fn with_pass_scale<T>(loss_scale: Option<f32>, step: impl FnOnce() -> T) -> T {
    let Some(scale) = loss_scale else {
        return step();
    };
    PASS_SCALE.set(Some(PassScale { scale, used: false }));
    let output = step();
    let used = PASS_SCALE.take().is_some_and(|pass| pass.used);
    assert!(
        used,
        "loss scaling is on (scale {scale}) but the TrainStep did not call \
         burn_sam_accum::train::scale_loss on the loss it back-propagates"
    );
    output
}
