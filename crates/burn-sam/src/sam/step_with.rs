//! [`Sam::step_with`]: a step's passes in one call, with the loss as a closure of the model.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;

use super::{Sam, SamStep};
use crate::hand_back::StepError;
use crate::protocol::Passes;

impl<O> Sam<O> {
    /// The step's passes in one call: `loss` is evaluated at `w`, then at `w + e(w)`, and the
    /// base optimizer steps `w`; on a one-pass step ([`Sam::needs_ascent`] false) `loss` is
    /// evaluated once, and Momentum-SAM's once at its look-ahead `w~`. Returns the updated
    /// weights `w` (an error hands back the `module` given), the first pass's loss and a
    /// report. With loss scaling the losses are scaled before each backward pass: the closure
    /// is the same as in f32 training.
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
        let passes = self.family.plan().passes();
        let module = match passes {
            Passes::LookAhead => self.ascend(lr, module, GradientsParams::new())?,
            Passes::One | Passes::Two => module,
        };
        self.channel.seed_pass(&module, 0);
        let first = loss(&module);
        // Keeping only the value lets the first pass's graph, and the weights it saved, go
        // once it is back-propagated: the base optimizer can then update them in place.
        let first_value = first.clone().detach();
        let grads = GradientsParams::from_grads(
            self.precision.handle().scale_loss(first).backward(),
            &module,
        );
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
        if let (false, Some(report)) = (self.awaits_descent(), self.last_report) {
            // An adaptive schedule's base step: the ascent took the whole step.
            return Ok(SamStep {
                module: perturbed,
                loss: first_value,
                report,
            });
        }
        // The same seed as the first pass's: the same dropout masks.
        self.channel.seed_pass(&perturbed, 0);
        let second = self.precision.handle().scale_loss(loss(&perturbed));
        let grads = GradientsParams::from_grads(second.backward(), &perturbed);
        let (module, report) = self.descend(lr, perturbed, grads)?;
        Ok(SamStep {
            module,
            loss: first_value,
            report,
        })
    }
}
