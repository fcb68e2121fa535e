//! [`Sam::step_with`]: a step's passes in one call, with the loss as a closure of the model.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;

use super::{Sam, SamStep};
use crate::channel::{Linkable, StepLink};
use crate::hand_back::StepError;
use crate::protocol::Passes;

impl<O> Sam<O> {
    /// The step's passes in one call: `loss` is evaluated at `w`, then at `w + e(w)`, and the
    /// base optimizer steps `w`; on a one-pass step ([`Sam::needs_ascent`] false) `loss` is
    /// evaluated once, and Momentum-SAM's once at its look-ahead `w~`. Returns the updated
    /// weights `w` (an error hands back the `module` given), the first pass's loss and a
    /// report with both passes' losses and the sharpness
    /// ([`StepReport::sharpness`](crate::StepReport::sharpness)), read with the step's norms.
    /// With loss scaling the losses are scaled before each backward pass: the closure is the
    /// same as in f32 training.
    pub fn step_with<M, B, F>(
        &mut self,
        lr: LearningRate,
        module: M,
        mut loss: F,
    ) -> Result<SamStep<M, B>, StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
        F: FnMut(&M) -> Tensor<B, 1>,
    {
        // Before the first pass: a resumed model in the wrong float types would fail there.
        or_hand_back!(self.channel.check_resumed(&module), module);
        let link = self.step_link();
        link.clear_losses();
        let passes = self.family.plan().passes();
        let module = match passes {
            Passes::LookAhead => self.ascend(lr, module, GradientsParams::new())?,
            Passes::One | Passes::Two => module,
        };
        let (first_value, grads) = self.pass(&link, &module, &mut loss);
        let perturbed = match passes {
            Passes::Two => self.ascend(lr, module, grads)?,
            Passes::One | Passes::LookAhead => {
                let (module, report) = self.descend(lr, module, grads)?;
                return Ok(SamStep {
                    module,
                    loss: first_value,
                    report,
                });
            }
        };
        if let (false, Some(report)) = (self.awaits_descent(), self.last_report()) {
            // An adaptive schedule's base step: the ascent took the whole step.
            return Ok(SamStep {
                module: perturbed,
                loss: first_value,
                report,
            });
        }
        let (_, grads) = self.pass(&link, &perturbed, &mut loss);
        let (module, report) = self.descend(lr, perturbed, grads)?;
        Ok(SamStep {
            module,
            loss: first_value,
            report,
        })
    }

    /// One pass of `loss` at `module`, seeded as every pass of the step is (the same dropout
    /// masks): its value, noted for the report, and its gradient, the loss scaled.
    fn pass<M, B, F>(
        &self,
        link: &StepLink,
        module: &M,
        loss: &mut F,
    ) -> (Tensor<B, 1>, GradientsParams)
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        F: FnMut(&M) -> Tensor<B, 1>,
    {
        self.channel.seed_pass(module, 0);
        let value = loss(module);
        // Keeping only the value lets the pass's graph, and the weights it saved, go once it
        // is back-propagated: the base optimizer can then update them in place.
        let detached = value.clone().detach();
        link.note_loss(detached.clone(), 1.0);
        let scaled = self.precision.handle().scale_loss(value);
        (
            detached,
            GradientsParams::from_grads(scaled.backward(), module),
        )
    }
}
