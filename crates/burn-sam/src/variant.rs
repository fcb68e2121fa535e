//! The members of the SAM family [`Sam`](crate::Sam) runs, and the radius schedule they share.

use burn::config::Config;

use crate::error::{ConfigError, SamError};

/// Which member of the SAM family a [`Sam`](crate::Sam) optimizer runs. Each changes SAM in
/// one place: the direction of the ascent (Friendly-SAM, Momentum-SAM), the gradient the base
/// optimizer steps with (GSAM), or which steps take the second pass (LookSAM, Momentum-SAM). Loss scaling, master
/// weights, overflow handling, accumulation and the Learner strategies work the same for all.
///
/// ```
/// use burn_sam::{SamConfig, SamVariant};
///
/// let gsam = SamConfig::new().with_variant(SamVariant::gsam());
/// assert_eq!(gsam.variant, SamVariant::Gsam { alpha: 0.01 });
/// ```
#[derive(Config, Debug, PartialEq)]
pub enum SamVariant {
    /// SAM (Foret et al., ICLR 2021): perturb along `g`, step with the gradient at `w + e`.
    Sam,
    /// GSAM (Zhuang et al., ICLR 2022): perturb along `g`, then step with
    /// `g_p - alpha * g_perp`, where `g_p` is the gradient at `w + e` and `g_perp` the part of
    /// `g` orthogonal to it. The default `alpha` 0.01 is the paper's ResNet setting
    /// (pytorch_optimizer defaults to 0.4).
    Gsam {
        /// Weight of the orthogonal part subtracted. Allowed: finite and `>= 0`.
        alpha: f64,
    },
    /// LookSAM (Liu et al., CVPR 2022): every `k`-th step (0, k, 2k, ...) is a full SAM step
    /// that keeps, per parameter, the part `g_v` of the perturbed gradient orthogonal to `g`;
    /// the steps between take **one** pass and step with
    /// `g + alpha * (||g|| / (||g_v|| + 1e-8)) * g_v`, per tensor as in pytorch_optimizer
    /// 4.1.0. `alpha = 0` is "SAM every k steps" (Composer's `interval`).
    LookSam {
        /// Steps per cycle, the first of which is a full SAM step. Allowed: `>= 1`.
        k: usize,
        /// Weight of the kept direction on one-pass steps. Allowed: finite and `>= 0`.
        alpha: f64,
    },
    /// Friendly-SAM (Li et al., CVPR 2024): the first step perturbs along `g` and sets
    /// `m = g`; later ones perturb along `g - sigma * m` (`m` of the previous step), then
    /// update `m <- lambda * m + (1 - lambda) * g` with the raw `g`.
    FriendlySam {
        /// Weight of the momentum removed from the ascent gradient. Allowed: finite and `>= 0`.
        sigma: f64,
        /// Decay of the gradient momentum. Allowed: in `[0, 1]`.
        lambda: f64,
    },
    /// Momentum-SAM (Becker, Altrock, Risse, 2024): **one pass per step**. The gradient of
    /// step t is taken at `w~ = w - rho * v / (||v|| + eps)` (`SamConfig::eps`, 1e-12 by default
    /// as in the authors' code), where `v` is the momentum of
    /// the gradients (`v <- mu * v + g`, starting at 0, so the first step's gradient is at
    /// `w`); the base optimizer steps `w` with it. With SGD of momentum `mu` (or Adam's
    /// `beta_1` as `mu`), `v` points where the base optimizer's momentum points: the gradient
    /// is taken where the coming steps lead, the authors' method. `v` is Momentum-SAM's own,
    /// so another `mu` (or a base optimizer without momentum) is allowed and well defined: the
    /// look-ahead then follows another average of past gradients than the base step does
    /// (`mu` 0: the last gradient alone). Its radius is far larger than SAM's: the authors
    /// use `rho` 3 with SGD at learning rate 0.5 and 1 with AdamW; the radius that works
    /// depends on how long you train more than on the model's size (the guide's
    /// "Choosing" chapter, "Momentum-SAM's radius"). Each step moves to `w~` itself (an ascent that takes no pass) and hands back
    /// `w`.
    MomentumSam {
        /// Decay of the momentum `v`; usually the base optimizer's momentum (or `beta_1`).
        /// Allowed: in `[0, 1)`.
        mu: f64,
    },
}

impl SamVariant {
    /// GSAM with the paper's `alpha` 0.01.
    pub fn gsam() -> Self {
        Self::Gsam { alpha: 0.01 }
    }

    /// LookSAM with the paper's `k` 10 and `alpha` 0.7.
    pub fn look_sam() -> Self {
        Self::LookSam { k: 10, alpha: 0.7 }
    }

    /// Friendly-SAM with the paper's `sigma` 1 and `lambda` 0.9.
    pub fn friendly_sam() -> Self {
        Self::FriendlySam {
            sigma: 1.0,
            lambda: 0.9,
        }
    }

    /// Momentum-SAM with the momentum of SGD's usual 0.9.
    pub fn momentum_sam() -> Self {
        Self::MomentumSam { mu: 0.9 }
    }

    /// Every variant, at its defaults: what a record's variant name is looked up in.
    pub fn all() -> [Self; 5] {
        [
            Self::Sam,
            Self::gsam(),
            Self::look_sam(),
            Self::friendly_sam(),
            Self::momentum_sam(),
        ]
    }

    /// What the variant is, as data: every property the optimizer, the strategies, the
    /// records and the logs read, so that they never match on the variant itself.
    ///
    /// ```
    /// use burn_sam::{DescentFrom, PassRule, PerturbFrom, SamVariant};
    ///
    /// let look = SamVariant::look_sam().properties();
    /// assert_eq!(look.passes, PassRule::TwoEvery { k: 10 });
    /// assert_eq!(look.descent, DescentFrom::KeptDirection { alpha: 0.7 });
    /// let momentum = SamVariant::momentum_sam().properties();
    /// assert_eq!(momentum.perturbation, PerturbFrom::Momentum);
    /// assert!(momentum.keeps_state && !momentum.local_ascent);
    /// ```
    pub fn properties(&self) -> VariantProperties {
        let base = VariantProperties {
            name: "SAM",
            key: "sam",
            passes: PassRule::Two,
            keeps_state: false,
            local_ascent: false,
            perturbation: PerturbFrom::Gradient,
            descent: DescentFrom::Perturbed,
        };
        match *self {
            Self::Sam => VariantProperties {
                local_ascent: true,
                ..base
            },
            Self::Gsam { alpha } => VariantProperties {
                name: "GSAM",
                key: "gsam",
                descent: DescentFrom::LessOrthogonal { alpha },
                ..base
            },
            Self::LookSam { k, alpha } => VariantProperties {
                name: "LookSAM",
                key: "looksam",
                passes: PassRule::TwoEvery { k },
                keeps_state: true,
                descent: DescentFrom::KeptDirection { alpha },
                ..base
            },
            Self::FriendlySam { sigma, lambda } => VariantProperties {
                name: "Friendly-SAM",
                key: "friendly_sam",
                keeps_state: true,
                perturbation: PerturbFrom::GradientLessMomentum { sigma, lambda },
                ..base
            },
            Self::MomentumSam { mu } => VariantProperties {
                name: "Momentum-SAM",
                key: "momentum_sam",
                passes: PassRule::LookAhead,
                keeps_state: true,
                perturbation: PerturbFrom::Momentum,
                descent: DescentFrom::LookAhead { mu },
                ..base
            },
        }
    }

    /// The variant's short name, as the examples and logs print it.
    pub fn name(&self) -> &'static str {
        self.properties().name
    }

    /// Whether the variant can take a perturbation per micro-batch or per replica, each from
    /// its own gradient (m-sharpness, data-parallel local ascents): SAM's alone, since every
    /// other variant's rule joins one ascent to one descent on the same weights.
    ///
    /// ```
    /// use burn_sam::SamVariant;
    ///
    /// assert!(SamVariant::Sam.check_local_ascent().is_ok());
    /// let refused = SamVariant::gsam().check_local_ascent().unwrap_err();
    /// assert!(refused.to_string().starts_with("GSAM cannot take local ascents"));
    /// ```
    ///
    /// # Errors
    /// [`SamError::LocalAscentVariant`] for every variant but [`SamVariant::Sam`].
    pub fn check_local_ascent(&self) -> Result<(), SamError> {
        match self.properties().local_ascent {
            true => Ok(()),
            false => Err(SamError::LocalAscentVariant {
                variant: self.name(),
            }),
        }
    }

    /// Checks every hyperparameter against its allowed range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let check =
            |field, value, allowed, ok| ConfigError::check("SamVariant", field, value, allowed, ok);
        let non_negative = |value: f64| value.is_finite() && value >= 0.0;
        match *self {
            Self::Sam => Ok(()),
            Self::Gsam { alpha } => check("alpha", alpha, "finite and >= 0", non_negative(alpha)),
            Self::LookSam { k, alpha } => {
                check("k", k as f64, "an integer >= 1", k >= 1)?;
                check("alpha", alpha, "finite and >= 0", non_negative(alpha))
            }
            Self::FriendlySam { sigma, lambda } => {
                check("sigma", sigma, "finite and >= 0", non_negative(sigma))?;
                check("lambda", lambda, "in [0, 1]", (0.0..=1.0).contains(&lambda))
            }
            Self::MomentumSam { mu } => check("mu", mu, "in [0, 1)", (0.0..1.0).contains(&mu)),
        }
    }
}

/// What a variant is ([`SamVariant::properties`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VariantProperties {
    /// The short name the examples and logs print.
    pub name: &'static str,
    /// The stable key records name the variant by (`"sam"`, `"gsam"`, `"looksam"`,
    /// `"friendly_sam"`, `"momentum_sam"`): never reworded, unlike `name`.
    pub key: &'static str,
    /// Which steps take which passes.
    pub passes: PassRule,
    /// Whether it keeps state across steps, saved in its record: all but SAM and GSAM.
    pub keeps_state: bool,
    /// Whether it can take local ascents, a perturbation per micro-batch or replica from its
    /// own gradient (m-sharpness): SAM's alone, since every other rule joins one ascent to one
    /// descent on the same weights.
    pub local_ascent: bool,
    /// Where the perturbation comes from.
    pub perturbation: PerturbFrom,
    /// What the base optimizer steps with.
    pub descent: DescentFrom,
}

/// Which passes a variant's steps take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassRule {
    /// Two on every step: the ascent's gradient at `w`, the descent's at `w + e`.
    Two,
    /// Two on every `k`-th step (0, k, 2k, ...), one on the others (LookSAM).
    TwoEvery {
        /// Steps per cycle.
        k: usize,
    },
    /// One, at the look-ahead the ascent moves to without a pass (Momentum-SAM).
    LookAhead,
}

/// Where a variant's perturbation comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PerturbFrom {
    /// The gradient at `w`, normalised to the radius.
    Gradient,
    /// The gradient less `sigma` times its momentum, which decays by `lambda` (Friendly-SAM).
    GradientLessMomentum {
        /// Weight of the momentum removed.
        sigma: f64,
        /// Decay of the momentum.
        lambda: f64,
    },
    /// The momentum of past gradients, against it (Momentum-SAM's `-rho * v / ||v||`).
    Momentum,
}

/// The gradient a variant's base optimizer steps with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DescentFrom {
    /// The gradient at the perturbed weights, as it is (SAM, ASAM, Friendly-SAM): the only one
    /// whose global norm SAM reads, so the only one `max_grad_norm` clips.
    Perturbed,
    /// `g_p - alpha * g_perp` (GSAM).
    LessOrthogonal {
        /// Weight of the orthogonal part.
        alpha: f64,
    },
    /// The perturbed gradient on full steps, keeping its part orthogonal to `g`; the gradient
    /// plus `alpha` times that kept direction on one-pass steps (LookSAM).
    KeptDirection {
        /// Weight of the kept direction.
        alpha: f64,
    },
    /// The gradient at the look-ahead, folded into the momentum `v <- mu * v + g`
    /// (Momentum-SAM).
    LookAhead {
        /// Decay of the momentum.
        mu: f64,
    },
}

/// A radius that follows the learning rate, as GSAM schedules it: `rho` (the config's) at
/// `lr_max`, `rho_min` at `lr_min`, linear in between. Learning rates outside
/// `[lr_min, lr_max]` are clamped to it, so the radius never leaves `[rho_min, rho]` (the
/// GSAM authors' scheduler extrapolates).
///
/// ```
/// use burn_sam::{RhoSchedule, SamConfig};
///
/// let config = SamConfig::new()
///     .with_rho(0.1)
///     .with_rho_schedule(Some(RhoSchedule::new(0.0, 0.1, 0.02)));
/// assert_eq!(config.rho_at(0.1), 0.1);
/// assert!((config.rho_at(0.05) - 0.06).abs() < 1e-12);
/// ```
#[derive(Config, Debug, PartialEq)]
pub struct RhoSchedule {
    /// The learning rate at which the radius is `rho_min`. Allowed: finite, `< lr_max`.
    pub lr_min: f64,
    /// The learning rate at which the radius is the config's `rho`. Allowed: finite.
    pub lr_max: f64,
    /// The radius at `lr_min`. Allowed: finite, `>= 0` and `<= rho`.
    pub rho_min: f64,
}

impl RhoSchedule {
    /// The radius at learning rate `lr`, `rho_max` at `lr_max`.
    pub fn rho_at(&self, rho_max: f64, lr: f64) -> f64 {
        let position = ((lr - self.lr_min) / (self.lr_max - self.lr_min)).clamp(0.0, 1.0);
        self.rho_min + (rho_max - self.rho_min) * position
    }

    /// Checks the schedule against `rho`, the radius at `lr_max`.
    pub fn validate(&self, rho: f64) -> Result<(), ConfigError> {
        let check = |field, value, allowed, ok| {
            ConfigError::check("RhoSchedule", field, value, allowed, ok)
        };
        check("lr_min", self.lr_min, "finite", self.lr_min.is_finite())?;
        check(
            "lr_max",
            self.lr_max,
            "finite and > lr_min",
            self.lr_max.is_finite() && self.lr_max > self.lr_min,
        )?;
        check(
            "rho_min",
            self.rho_min,
            "finite, >= 0 and <= SamConfig::rho",
            self.rho_min.is_finite() && self.rho_min >= 0.0 && self.rho_min <= rho,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_say_what_each_variant_is() {
        let all = SamVariant::all();
        let names: Vec<&str> = all.iter().map(SamVariant::name).collect();
        assert_eq!(
            names,
            ["SAM", "GSAM", "LookSAM", "Friendly-SAM", "Momentum-SAM"]
        );
        let stateful: Vec<bool> = all.iter().map(|v| v.properties().keeps_state).collect();
        assert_eq!(stateful, [false, false, true, true, true]);
        let local: Vec<bool> = all.iter().map(|v| v.properties().local_ascent).collect();
        assert_eq!(local, [true, false, false, false, false]);
        let clipped: Vec<bool> = all
            .iter()
            .map(|v| v.properties().descent == DescentFrom::Perturbed)
            .collect();
        assert_eq!(clipped, [true, false, false, true, false]);
        let gsam = SamVariant::Gsam { alpha: 0.3 }.properties();
        assert_eq!(gsam.descent, DescentFrom::LessOrthogonal { alpha: 0.3 });
        let friendly = SamVariant::friendly_sam().properties();
        assert_eq!(
            friendly.perturbation,
            PerturbFrom::GradientLessMomentum {
                sigma: 1.0,
                lambda: 0.9
            }
        );
    }

    #[test]
    fn bad_hyperparameters_name_their_field() {
        let field = |variant: SamVariant| variant.validate().unwrap_err().field;
        assert_eq!(field(SamVariant::Gsam { alpha: -0.1 }), "alpha");
        assert_eq!(field(SamVariant::LookSam { k: 0, alpha: 0.7 }), "k");
        assert_eq!(
            field(SamVariant::LookSam {
                k: 5,
                alpha: f64::NAN
            }),
            "alpha"
        );
        let fsam = |sigma, lambda| SamVariant::FriendlySam { sigma, lambda };
        assert_eq!(field(fsam(-1.0, 0.9)), "sigma");
        assert_eq!(field(fsam(1.0, 1.5)), "lambda");
        assert_eq!(field(SamVariant::MomentumSam { mu: 1.0 }), "mu");
        assert_eq!(field(SamVariant::MomentumSam { mu: f64::NAN }), "mu");
        for variant in [
            SamVariant::Sam,
            SamVariant::gsam(),
            SamVariant::look_sam(),
            SamVariant::friendly_sam(),
            SamVariant::momentum_sam(),
            SamVariant::MomentumSam { mu: 0.0 },
            SamVariant::LookSam { k: 1, alpha: 0.0 },
        ] {
            assert!(variant.validate().is_ok(), "{variant:?}");
        }
        let message = SamVariant::LookSam { k: 0, alpha: 0.7 }
            .validate()
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            "invalid SamVariant: `k` = 0, allowed: an integer >= 1"
        );
    }

    #[test]
    fn schedule_is_linear_in_the_learning_rate_and_clamped() {
        let schedule = RhoSchedule::new(0.01, 0.11, 0.02);
        assert_eq!(schedule.rho_at(0.1, 0.11), 0.1);
        assert_eq!(schedule.rho_at(0.1, 0.01), 0.02);
        assert!((schedule.rho_at(0.1, 0.06) - 0.06).abs() < 1e-15);
        assert_eq!(schedule.rho_at(0.1, 1.0), 0.1);
        assert_eq!(schedule.rho_at(0.1, 0.0), 0.02);
    }

    #[test]
    fn bad_schedules_name_their_field() {
        let field = |schedule: RhoSchedule, rho| schedule.validate(rho).unwrap_err().field;
        assert_eq!(field(RhoSchedule::new(0.1, 0.1, 0.0), 0.05), "lr_max");
        assert_eq!(field(RhoSchedule::new(0.2, 0.1, 0.0), 0.05), "lr_max");
        assert_eq!(field(RhoSchedule::new(f64::NAN, 0.1, 0.0), 0.05), "lr_min");
        assert_eq!(field(RhoSchedule::new(0.0, 0.1, 0.06), 0.05), "rho_min");
        assert_eq!(field(RhoSchedule::new(0.0, 0.1, -0.01), 0.05), "rho_min");
        assert!(RhoSchedule::new(0.0, 0.1, 0.05).validate(0.05).is_ok());
    }
}
