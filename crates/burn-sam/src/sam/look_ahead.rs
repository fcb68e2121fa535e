//! Momentum-SAM's look-ahead: its one pass is taken at `w~ = w - rho * v / (||v|| + 1e-12)`,
//! and each step puts `w` back before the base optimizer steps it.

use burn::module::{AutodiffModule, ParamId};
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::tensor::backend::AutodiffBackend;

use super::phases::{At, Descent};
use super::{Sam, StepReport};
use crate::hand_back::StepError;
use crate::perturb::{kept_tensors, look_ahead_by, Restore};

impl<O> Sam<O> {
    /// Momentum-SAM: the model to take the next gradient at, `w~ = w - rho * v / (||v|| +
    /// 1e-12)`, from the model at `w` (the whole step's model is then `w~`, and `w` is kept
    /// to step from); `module` itself for the other variants and before the first step.
    ///
    /// Through [`Sam::step_with`], [`Sam::descend`] and `Optimizer::step`, Momentum-SAM hands
    /// back the model at `w~`: each step restores `w` exactly, steps it, and moves to the next
    /// `w~`. Evaluate and save [`Sam::unperturbed`]; after loading a saved model and record,
    /// call `look_ahead` before the first pass. (`SamTraining` keeps the model at `w` and
    /// does this itself.)
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::momentum::MomentumConfig;
    /// use burn::optim::SgdConfig;
    /// use burn::tensor::Tensor;
    /// use burn_sam::{SamConfig, SamVariant};
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let mut model: Linear<B> = LinearConfig::new(3, 1).init(&device);
    /// let sgd = SgdConfig::new().with_momentum(Some(MomentumConfig::new().with_dampening(0.0)));
    /// let mut sam = SamConfig::new()
    ///     .with_rho(0.5)
    ///     .with_variant(SamVariant::momentum_sam())
    ///     .init(sgd.init());
    /// let x = Tensor::<B, 2>::ones([4, 3], &device);
    /// for _ in 0..3 {
    ///     // One pass per step, at w~.
    ///     let loss = |m: &Linear<B>| m.forward(x.clone()).powi_scalar(2).mean();
    ///     model = sam.step_with(0.1, model, loss).unwrap().module;
    /// }
    /// // `model` is at w~; evaluate and save the weights w.
    /// let weights = sam.unperturbed(model.clone());
    /// assert_ne!(weights.weight.val().into_data(), model.weight.val().into_data());
    /// ```
    pub fn look_ahead<M, B>(&mut self, module: M) -> M
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        if !self.is_momentum_sam() {
            return module;
        }
        let rho = self.family.look_ahead_rho();
        let (module, snapshot) = look_ahead_by(module, self.family.momentum(), rho);
        self.look_ahead = snapshot;
        module
    }

    /// Momentum-SAM: the model at `w` for `module` at `w~` (the module a step handed back);
    /// `module` itself otherwise. See [`Sam::look_ahead`].
    pub fn unperturbed<M, B>(&self, module: M) -> M
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
    {
        match &self.look_ahead {
            Some(snapshot) => module.map(&mut Restore {
                snapshot: snapshot.clone(),
            }),
            None => module,
        }
    }

    /// A Momentum-SAM step with `module` where `at` says. Steps `w` with `grads` and hands
    /// back the next `w~` to a direct caller, or `w` to a strategy, which looks ahead through
    /// its link. A skipped step or an error hands `module` back as it came.
    pub(super) fn step_look_ahead<M, B>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        at: At,
    ) -> Result<(M, StepReport), StepError<M>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: Optimizer<M, B>,
    {
        let given = module.clone();
        // The kept `w` is moved into the module, not cloned, so that the base optimizer can
        // update it in place; a step that does not apply keeps the weights it hands back.
        let kept = match at {
            At::Weights => None,
            At::LookAhead => self.look_ahead.take(),
        };
        let moved: Option<Vec<ParamId>> = kept.as_ref().map(|kept| kept.iter().copied().collect());
        let weights = match kept {
            Some(snapshot) => module.map(&mut Restore { snapshot }),
            None => module,
        };
        let (weights, report) = match self.step_descent(lr, weights, grads, Descent::SinglePass) {
            Ok(stepped) => stepped,
            Err(error) => {
                self.look_ahead = moved.map(|ids| kept_tensors(&error.module, &ids));
                return Err(StepError::new(given, error.error));
            }
        };
        if !report.outcome.applied() {
            self.look_ahead = moved.map(|ids| kept_tensors(&weights, &ids));
            return Ok((given, report));
        }
        self.family.set_look_ahead_rho(self.config.rho_at(lr));
        self.publish_passes();
        match at {
            At::Weights => {
                self.look_ahead = None;
                Ok((weights, report))
            }
            At::LookAhead => Ok((self.look_ahead(weights), report)),
        }
    }
}
