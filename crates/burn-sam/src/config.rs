//! [`SamConfig`]: SAM's radius, variant, schedule, loss scaling and master weights, checked
//! before an optimizer is built.

use burn::config::Config;

use crate::error::{ConfigError, SamError};
use crate::mixed_precision::LossScalerConfig;
use crate::schedule::SamSchedule;
use crate::variant::{DescentFrom, RhoSchedule, SamVariant};

/// Configuration of [`Sam`](crate::Sam): Sharpness-Aware Minimization (Foret et al., 2021), its
/// adaptive form ASAM (Kwon et al., 2021), and the variants of [`SamVariant`] (GSAM, LookSAM,
/// Friendly-SAM).
///
/// The perturbation is `e = rho * a^2 * g / (||a * g|| + eps)`, with `a = 1` for SAM and
/// `a = |w| + eta` for ASAM, the norm taken over all parameters with a gradient (or those
/// [`SamConfig::perturb_only`] picks). Friendly-SAM replaces `g` by its own direction.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::Linear;
/// use burn::optim::AdamConfig;
/// use burn_sam::SamConfig;
///
/// let base = AdamConfig::new().init::<Autodiff<Flex>, Linear<Autodiff<Flex>>>();
/// let sam = SamConfig::new().with_rho(0.1).init(base);
/// assert_eq!(sam.config().rho, 0.1);
/// ```
#[derive(Config, Debug)]
pub struct SamConfig {
    /// Radius of the neighbourhood in which the loss is maximised. `rho = 0` is the base
    /// optimizer exactly. Allowed: finite and `>= 0`.
    #[config(default = 0.05)]
    pub rho: f64,
    /// Use ASAM's scale-invariant neighbourhood `a = |w| + eta`.
    #[config(default = false)]
    pub adaptive: bool,
    /// ASAM's offset in `a = |w| + eta`; 0 reproduces `davda54/sam`, the ASAM paper uses
    /// 0.01. Allowed: finite and `>= 0`.
    #[config(default = 0.0)]
    pub eta: f64,
    /// Added to the gradient norm before dividing by it. Allowed: finite and `> 0`.
    #[config(default = 1e-12)]
    pub eps: f64,
    /// Dynamic loss scaling for f16/bf16 training; `None` trains unscaled.
    #[config(default = "None")]
    pub loss_scaling: Option<LossScalerConfig>,
    /// Step parameters narrower than f32 through f32 master copies kept in the optimizer
    /// (without them, updates below half an f16 ulp of the weight are rounded away).
    #[config(default = true)]
    pub master_weights: bool,
    /// The member of the SAM family to run.
    #[config(default = "SamVariant::Sam")]
    pub variant: SamVariant,
    /// A radius that follows the learning rate (GSAM's schedule), `rho` at its `lr_max`;
    /// `None` keeps `rho` constant.
    #[config(default = "None")]
    pub rho_schedule: Option<RhoSchedule>,
    /// Perturb only the parameters these names pick: module types (`"BatchNorm"`,
    /// `"LayerNorm"`: SAM-ON's normalisation layers, Mueller et al., NeurIPS 2023) or dotted
    /// path prefixes (`"encoder.norm"`, `"layers.0"`). The norm runs over the picked
    /// parameters; every parameter is still stepped. `None` perturbs all. Allowed: a list of
    /// one or more non-empty names; a step where they pick nothing is refused
    /// ([`SamError::NothingPicked`](crate::SamError::NothingPicked)).
    #[config(default = "None")]
    pub perturb_only: Option<Vec<String>>,
    /// Clips the descent gradient to this global norm, as PyTorch's `clip_grad_norm_` does
    /// (`g * min(1, max / (||g|| + 1e-6))`): once per step, after unscaling, with the norm over
    /// every parameter the base optimizer steps (with accumulation, replicas or ranks, of the
    /// combined gradient), the norm SAM reads anyway (no extra host wait). `None` does not
    /// clip. Allowed: finite and `> 0`, with [`SamVariant::Sam`] (SAM, ASAM, SAM-ON) and
    /// [`SamVariant::FriendlySam`], which step with the descent gradient as it is; GSAM,
    /// LookSAM and Momentum-SAM step with a gradient of their own making.
    #[config(default = "None")]
    pub max_grad_norm: Option<f64>,
    /// Seeds the backend's random generator before each forward pass with
    /// [`pass_seed`](crate::pass_seed)`(pass_seed, step, micro_batch)`, the step count being
    /// SAM's (saved in its record): both passes of a step draw the same dropout masks (as
    /// Google's JAX SAM does with one PRNG key), `rho = 0` is the base optimizer bitwise when
    /// the base is fed the same seeds, and a resumed run draws the uninterrupted run's masks.
    /// `None` leaves the generator alone: each pass draws masks of its own (as davda54/sam
    /// does). The generator is the backend's one per process: anything else that draws from
    /// it during a step (data augmentation through the backend) draws from the seeded
    /// sequence too. With `SamTraining`, one replica per process.
    #[config(default = "None")]
    pub pass_seed: Option<u64>,
    /// Which optimizer steps are SAM steps: the others are base steps (one pass, the base
    /// optimizer at `w`, about the base optimizer's cost). `None`: every step is the
    /// variant's. Allowed with every variant but [`SamVariant::MomentumSam`], whose steps take
    /// one pass already. With LookSAM the schedule picks LookSAM's steps, and LookSAM's own
    /// cycle (a full step every `k` of them, one-pass steps between) runs over those.
    #[config(default = "None")]
    pub schedule: Option<SamSchedule>,
}

impl SamConfig {
    /// The radius at learning rate `lr`: `rho`, or what [`SamConfig::rho_schedule`] gives.
    pub fn rho_at(&self, lr: f64) -> f64 {
        match &self.rho_schedule {
            Some(schedule) => schedule.rho_at(self.rho, lr),
            None => self.rho,
        }
    }

    /// Whether a step can take local ascents, a perturbation per micro-batch or replica from
    /// its own gradient (m-sharpness, data-parallel local ascents): with
    /// [`SamVariant::Sam`] ([`SamVariant::check_local_ascent`]), and a schedule that decides
    /// before the step's gradients (not [`SamSchedule::Adaptive`]).
    ///
    /// # Errors
    /// [`SamError::LocalAscentVariant`] and [`SamError::LocalAscentSchedule`].
    pub fn check_local_ascent(&self) -> Result<(), SamError> {
        self.variant.check_local_ascent()?;
        match self.schedule {
            Some(SamSchedule::Adaptive { .. }) => Err(SamError::LocalAscentSchedule),
            _ => Ok(()),
        }
    }

    /// ASAM's `eta` when [`SamConfig::adaptive`] is on.
    pub(crate) fn asam_eta(&self) -> Option<f64> {
        self.adaptive.then_some(self.eta)
    }

    /// Checks every field against its allowed range.
    ///
    /// ```
    /// use burn_sam::SamConfig;
    ///
    /// let error = SamConfig::new().with_rho(-1.0).validate().unwrap_err();
    /// assert!(error.to_string().contains("rho"));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        let check =
            |field, value, allowed, ok| ConfigError::check("SamConfig", field, value, allowed, ok);
        check(
            "rho",
            self.rho,
            "finite and >= 0",
            self.rho.is_finite() && self.rho >= 0.0,
        )?;
        check(
            "eta",
            self.eta,
            "finite and >= 0",
            self.eta.is_finite() && self.eta >= 0.0,
        )?;
        check(
            "eps",
            self.eps,
            "finite and > 0",
            self.eps.is_finite() && self.eps > 0.0,
        )?;
        if let Some(names) = &self.perturb_only {
            check(
                "perturb_only",
                names.len() as f64,
                "one or more names, none empty (the value is how many were given)",
                !names.is_empty() && names.iter().all(|name| !name.is_empty()),
            )?;
        }
        if let Some(schedule) = &self.rho_schedule {
            schedule.validate(self.rho)?;
        }
        if let Some(schedule) = &self.schedule {
            schedule.validate(&self.variant)?;
        }
        if let Some(max) = self.max_grad_norm {
            check("max_grad_norm", max, MAX_GRAD_NORM, max_grad_norm_ok(max))?;
            check(
                "max_grad_norm",
                max,
                "with SamVariant::Sam or SamVariant::FriendlySam only: GSAM, LookSAM and \
                 Momentum-SAM step with a gradient of their own making, whose norm SAM does \
                 not read",
                self.variant.properties().descent == DescentFrom::Perturbed,
            )?;
        }
        self.variant.validate()
    }
}

/// The allowed range of a `max_grad_norm`.
pub(crate) const MAX_GRAD_NORM: &str = "finite and > 0";

/// Whether `max` is a `max_grad_norm` in [`MAX_GRAD_NORM`].
pub(crate) fn max_grad_norm_ok(max: f64) -> bool {
    max.is_finite() && max > 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(config: SamConfig) -> (&'static str, String) {
        let error = config.validate().unwrap_err();
        assert_eq!(error.config, "SamConfig");
        (error.field, error.to_string())
    }

    #[test]
    fn defaults_match_davda54() {
        let config = SamConfig::new();
        assert_eq!(
            (config.rho, config.adaptive, config.eta, config.eps),
            (0.05, false, 0.0, 1e-12)
        );
        assert!(config.validate().is_ok());
        assert!(SamConfig::new().with_rho(0.0).validate().is_ok());
    }

    #[test]
    fn invalid_fields_are_named_with_their_range() {
        for rho in [-0.1, f64::NAN, f64::INFINITY] {
            let (field, message) = rejected(SamConfig::new().with_rho(rho));
            assert_eq!(field, "rho");
            assert!(
                message.contains("`rho`") && message.contains(">= 0"),
                "{message}"
            );
        }
        for eps in [0.0, -1e-12, f64::NAN] {
            let (field, message) = rejected(SamConfig::new().with_eps(eps));
            assert_eq!(field, "eps");
            assert!(message.contains("> 0"), "{message}");
        }
        for eta in [-0.01, f64::INFINITY] {
            assert_eq!(rejected(SamConfig::new().with_eta(eta)).0, "eta");
        }
        for max in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let (field, message) = rejected(SamConfig::new().with_max_grad_norm(Some(max)));
            assert_eq!(field, "max_grad_norm");
            assert!(message.contains("> 0"), "{message}");
        }
        for variant in [
            SamVariant::gsam(),
            SamVariant::look_sam(),
            SamVariant::momentum_sam(),
        ] {
            let config = SamConfig::new()
                .with_variant(variant)
                .with_max_grad_norm(Some(1.0));
            let (field, message) = rejected(config);
            assert_eq!(field, "max_grad_norm");
            assert!(message.contains("SamVariant::Sam or"), "{message}");
        }
        let friendly = SamConfig::new()
            .with_variant(SamVariant::friendly_sam())
            .with_max_grad_norm(Some(1.0));
        assert!(friendly.validate().is_ok());
    }

    #[test]
    fn init_panics_with_the_message_and_try_init_returns_it() {
        let config = SamConfig::new().with_eps(0.0);
        assert!(config.try_init(()).is_err());
        let panic = std::panic::catch_unwind(|| config.init(())).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(
            message.contains("invalid SamConfig: `eps` = 0"),
            "{message}"
        );
    }
}
