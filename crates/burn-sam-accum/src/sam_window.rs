//! SAM's two ways of stepping from a window: one perturbation for the whole window, or one
//! per micro-batch (m-sharpness). Every error puts the unperturbed weights back.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn_sam::strategy::{or_hand_back, Linkable, Passes, Phases};
use burn_sam::{Sam, StepError, StepReport};

use crate::error::AccumError;
use crate::grad_sum::WeightedSum;
use crate::window::Window;

type WindowResult<M> = Result<(M, StepReport), StepError<M, AccumError>>;

/// One SAM step with learning rate `lr` from `window`'s micro-batches.
pub(crate) struct SamWindow<'a, 'w, O, M, T, B: AutodiffBackend> {
    pub sam: &'a mut Sam<O>,
    pub lr: LearningRate,
    pub window: &'a mut Window<'w, M, T, B>,
}

impl<O, M, T, B> SamWindow<'_, '_, O, M, T, B>
where
    O: Optimizer<M, B>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    /// SAM on the large batch: the ascent with the window's gradient at `w`, the descent with
    /// the window's gradient at `w + e`; a one-pass step (LookSAM) descends with the gradient
    /// at `w`, Momentum-SAM's with the gradient at its look-ahead.
    pub fn synced(self, module: M) -> WindowResult<M> {
        let Self { sam, lr, window } = self;
        let link = sam.step_link();
        let passes = sam.passes();
        let at = match passes {
            // Momentum-SAM's ascent takes no pass: the window's one gradient is taken at `w~`.
            Passes::LookAhead => sam.ascend(lr, module, GradientsParams::new()),
            Passes::One | Passes::Two => Ok(module),
        };
        let at = at.map_err(StepError::convert)?;
        let grads = match window.gradient(&at, &link) {
            Ok(grads) => grads,
            Err(error) => return Err(abandon(sam, at, error)),
        };
        if passes != Passes::Two {
            return sam.descend(lr, at, grads).map_err(StepError::convert);
        }
        // An overflowed ascent left the weights at `w`: the descent's read finds it.
        let perturbed = sam.ascend(lr, at, grads).map_err(StepError::convert)?;
        if !sam.awaits_descent() {
            // An adaptive schedule's base step: the ascent took the whole step.
            let report = sam.last_report().expect("a finished step's report");
            return Ok((perturbed, report));
        }
        match window.gradient(&perturbed, &link) {
            Ok(grads) => sam
                .descend(lr, perturbed, grads)
                .map_err(StepError::convert),
            Err(error) => Err(abandon(sam, perturbed, error)),
        }
    }

    /// m-sharpness: micro-batch `i` is perturbed by its own gradient and contributes
    /// `w_i * grad L_i(w + e_i)`; the last descent steps with the sum.
    pub fn local(self, mut module: M) -> WindowResult<M> {
        let Self { sam, lr, window } = self;
        or_hand_back!(sam.config().check_local_ascent(), module);
        let link = sam.step_link();
        let mut descent = WeightedSum::default();
        let last = window.len() - 1;
        let mut index = 0;
        loop {
            // The perturbation divides by the norm: the ascent gradient needs no weight.
            let grads = or_hand_back!(window.micro_gradient(index, &module, &link, 1.0), module);
            let perturbed = sam.ascend(lr, module, grads).map_err(StepError::convert)?;
            let weight = window.weight(index);
            let added = window
                .micro_gradient(index, &perturbed, &link, weight)
                .and_then(|grads| Ok(descent.add(&perturbed, grads, 1.0)?));
            if let Err(error) = added {
                return Err(abandon(sam, perturbed, error));
            }
            if index == last {
                return sam
                    .descend(lr, perturbed, descent.into_grads())
                    .map_err(StepError::convert);
            }
            module = sam.restore(perturbed).map_err(StepError::convert)?;
            index += 1;
        }
    }
}

/// Ends a step that failed after its ascent (if any): the weights go back to `w`.
fn abandon<O, M, B>(sam: &mut Sam<O>, perturbed: M, error: AccumError) -> StepError<M, AccumError>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    let module = sam
        .restore(perturbed)
        .unwrap_or_else(|failed| failed.module);
    StepError { module, error }
}
