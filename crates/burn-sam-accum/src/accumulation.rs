//! [`Accumulation`]: one optimizer step from a window of micro-batches, with the gradient of
//! their union, around any [`WindowOptimizer`].

use burn::module::AutodiffModule;
use burn::optim::LearningRate;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;

use burn_sam::strategy::or_hand_back;
use burn_sam::{ConfigError, StepError};

use crate::config::AccumulationConfig;
use crate::error::AccumError;
use crate::optimizer::{WindowOptimizer, WindowReport};
use crate::window::{MicroBatch, Window};

/// Gradient accumulation over windows of micro-batches, around any [`WindowOptimizer`].
///
/// Each [`Accumulation::step`] gets a window of micro-batches and a loss closure, runs the
/// passes one micro-batch at a time and steps the optimizer once, with the gradient of the
/// union: micro-batch gradients are weighted by their item counts (equal weights without
/// them) and summed in f32. A shorter window (the end of an epoch) steps with what it holds,
/// normalised by what it holds: that is how to flush a partial window.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::SgdConfig;
/// use burn::tensor::Tensor;
/// use burn_sam::SamConfig;
/// use burn_sam_accum::{AccumulationConfig, MicroBatch};
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let mut model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let sam = SamConfig::new().init(SgdConfig::new().init());
/// let mut accumulation = AccumulationConfig::new(4).init(sam);
///
/// // Ten micro-batches of 8 rows: windows of 4, 4 and a last one of 2.
/// let batches = (0..10).map(|_| MicroBatch::with_items(Tensor::<B, 2>::ones([8, 3], &device), 8));
/// for window in accumulation.windows(batches) {
///     let step = accumulation
///         .step(0.1, model, &window, |model: &Linear<B>, x: &Tensor<B, 2>| {
///             model.forward(x.clone()).powi_scalar(2).mean()
///         })
///         .unwrap();
///     model = step.module;
/// }
/// assert_eq!(accumulation.optimizer().stats().steps, 3);
/// ```
#[derive(Clone, Debug)]
pub struct Accumulation<O> {
    config: AccumulationConfig,
    optimizer: O,
}

/// The result of [`Accumulation::step`].
#[derive(Debug)]
pub struct WindowStep<M, B: AutodiffBackend> {
    /// The updated module.
    pub module: M,
    /// The window's loss, `sum_i w_i L_i` at the weights before the step, detached (over the
    /// micro-batches evaluated, when an overflow stopped a SAM window early).
    pub loss: Tensor<B, 1>,
    /// What the step did.
    pub report: WindowReport,
}

impl<O> Accumulation<O> {
    pub(crate) fn new(config: AccumulationConfig, optimizer: O) -> Self {
        Self { config, optimizer }
    }

    /// One optimizer step from `micro_batches` (1 to `window` of them). `loss` returns the
    /// mean loss of one micro-batch at the given module; it is called once per micro-batch
    /// and pass (twice with SAM), and each loss is back-propagated before the next is built.
    ///
    /// An error hands the module back as it was: a bad window, a loss not computed with the
    /// module, or the optimizer's refusal ([`AccumError`]).
    pub fn step<M, B, T, F>(
        &mut self,
        lr: LearningRate,
        module: M,
        micro_batches: &[MicroBatch<T>],
        mut loss: F,
    ) -> Result<WindowStep<M, B>, StepError<M, AccumError>>
    where
        M: AutodiffModule<B>,
        B: AutodiffBackend,
        O: WindowOptimizer<M, B>,
        F: FnMut(&M, &T) -> Tensor<B, 1>,
    {
        // Before the first pass, which a resumed model in the wrong float types would fail.
        let resumed = self.optimizer.step_link().check_resumed(&module);
        or_hand_back!(resumed.map_err(AccumError::Optimizer), module);
        if micro_batches.len() > self.config.window {
            let error = AccumError::WindowTooLong {
                micro_batches: micro_batches.len(),
                window: self.config.window,
            };
            return Err(StepError { module, error });
        }
        self.optimizer.step_link().clear_losses();
        let mut window = or_hand_back!(Window::new(micro_batches, &mut loss), module);
        let (module, report) =
            self.optimizer
                .step_window(lr, module, &mut window, self.config.ascent)?;
        log::debug!("accumulated step: {report:?}");
        let loss = window
            .loss()
            .expect("every window optimizer evaluates the first micro-batch");
        Ok(WindowStep {
            module,
            loss,
            report,
        })
    }

    /// Groups `micro_batches` into windows of `window`, the last one holding the rest.
    pub fn windows<I: IntoIterator>(&self, micro_batches: I) -> Windows<I::IntoIter> {
        Windows {
            micro_batches: micro_batches.into_iter(),
            window: self.config.window,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AccumulationConfig {
        &self.config
    }

    /// The wrapped optimizer, for its records, stats and loss scale.
    pub fn optimizer(&self) -> &O {
        &self.optimizer
    }

    /// The wrapped optimizer, mutably (to load a record).
    pub fn optimizer_mut(&mut self) -> &mut O {
        &mut self.optimizer
    }

    /// Unwraps the optimizer.
    pub fn into_optimizer(self) -> O {
        self.optimizer
    }
}

/// Windows of micro-batches; see [`Accumulation::windows`].
#[derive(Debug)]
pub struct Windows<I> {
    micro_batches: I,
    window: usize,
}

impl<I: Iterator> Iterator for Windows<I> {
    type Item = Vec<I::Item>;

    fn next(&mut self) -> Option<Self::Item> {
        let window: Vec<_> = self.micro_batches.by_ref().take(self.window).collect();
        (!window.is_empty()).then_some(window)
    }
}

impl AccumulationConfig {
    /// Wraps `optimizer`: a Burn optimizer ([`Sgd`](burn::optim::Sgd), [`Adam`](burn::optim::Adam),
    /// ...), a [`MixedPrecision`](burn_sam::MixedPrecision) one or a [`Sam`](burn_sam::Sam) one.
    ///
    /// # Panics
    /// When the configuration is invalid, with the field and its allowed range;
    /// [`AccumulationConfig::try_init`] returns it instead.
    #[track_caller]
    pub fn init<O>(&self, optimizer: O) -> Accumulation<O> {
        ConfigError::or_panic(self.try_init(optimizer))
    }

    /// Wraps `optimizer`, or says which field is invalid.
    pub fn try_init<O>(&self, optimizer: O) -> Result<Accumulation<O>, ConfigError> {
        self.validate()?;
        Ok(Accumulation::new(self.clone(), optimizer))
    }
}
