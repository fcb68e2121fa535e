//! Which optimizer steps are SAM steps and which are the base optimizer's own: a schedule over
//! SAM's step count, read by every two-pass variant.

use burn::config::Config;

use crate::error::ConfigError;
use crate::variant::{PassRule, SamVariant};

/// Which optimizer steps are SAM steps ([`SamConfig::schedule`](crate::SamConfig::schedule));
/// the others are **base steps**: one pass, and the base optimizer steps `w` with the gradient
/// at `w`, as it would without SAM.
///
/// The decision is a function of SAM's step count ([`SamStats::steps`](crate::SamStats),
/// every step counted, skipped ones too, saved in the record): every replica and rank takes
/// the same decisions, and a resumed run takes the uninterrupted run's. A base step leaves the
/// variant's state as it is (Friendly-SAM's momentum, LookSAM's cycle and kept direction), and
/// updates the loss scale once, as every step does.
///
/// ```
/// use burn_sam::{SamConfig, SamSchedule};
///
/// let late = SamConfig::new().with_schedule(Some(SamSchedule::From { step: 7_500 }));
/// assert!(!late.schedule.as_ref().unwrap().is_sam_step(7_499));
/// assert!(late.schedule.as_ref().unwrap().is_sam_step(7_500));
/// let every = SamSchedule::Every { k: 5 };
/// let sam_steps: Vec<u64> = (0..12).filter(|&step| every.is_sam_step(step)).collect();
/// assert_eq!(sam_steps, [0, 5, 10]);
/// ```
#[derive(Config, Debug, PartialEq)]
pub enum SamSchedule {
    /// SAM on every `k`-th step (0, k, 2k, ...), base steps between (Composer's `interval`,
    /// which scales `rho` with `k`: 0.05 at every step, 0.5 at `k` 10). Equals LookSAM with
    /// `alpha` 0 and the same `k`.
    Every {
        /// Steps per SAM step. Allowed: `>= 1`.
        k: u64,
    },
    /// Base steps before step `step`, SAM from it on: late-phase SAM (Zhou et al., ICLR 2025),
    /// whose "few epochs of SAM at the end" match full SAM's generalization there.
    From {
        /// The first SAM step (0: SAM throughout).
        step: u64,
    },
    /// A SAM step with probability `p`, drawn per step from `seed` and the step count
    /// (SS-SAM, Zhao et al., 2022): the same draws on every replica, rank and resume.
    Random {
        /// The probability of a SAM step. Allowed: in `[0, 1]`.
        p: f64,
        /// The draws' seed.
        seed: u64,
    },
}

impl SamSchedule {
    /// Whether step `step` (SAM's step count before it, from 0) is a SAM step.
    pub fn is_sam_step(&self, step: u64) -> bool {
        match *self {
            Self::Every { k } => step.is_multiple_of(k.max(1)),
            Self::From { step: first } => step >= first,
            Self::Random { p, seed } => uniform(seed, step) < p,
        }
    }

    /// The schedule in words, as `SamTraining`'s start line prints it.
    pub fn describe(&self) -> String {
        match *self {
            Self::Every { k } => format!("SAM every {k} steps, one-pass base steps between"),
            Self::From { step } => {
                format!("one-pass base steps before step {step}, SAM from it on")
            }
            Self::Random { p, seed } => {
                format!("SAM on a random {p} of the steps (seed {seed}), one-pass base steps on the others")
            }
        }
    }

    /// Checks the schedule's fields, and that `variant` can take base steps: Momentum-SAM
    /// cannot, since each of its steps takes its one pass at the look-ahead its momentum
    /// points to, and a step at `w` instead is no cheaper.
    pub fn validate(&self, variant: &SamVariant) -> Result<(), ConfigError> {
        let check = |field, value, allowed, ok| {
            ConfigError::check("SamSchedule", field, value, allowed, ok)
        };
        match *self {
            Self::Every { k } => check("k", k as f64, "an integer >= 1", k >= 1)?,
            Self::From { .. } => {}
            Self::Random { p, .. } => check("p", p, "in [0, 1]", (0.0..=1.0).contains(&p))?,
        }
        ConfigError::check(
            "SamConfig",
            "schedule",
            f64::NAN,
            "None with SamVariant::MomentumSam: its steps take one pass already, at the \
             look-ahead (a schedule's base step at `w` would save nothing); use a schedule \
             with SAM, GSAM, LookSAM or Friendly-SAM",
            variant.properties().passes != PassRule::LookAhead,
        )
    }
}

/// A draw in `[0, 1)` from `seed` and `step`: splitmix64 of both, its top 53 bits.
fn uniform(seed: u64, step: u64) -> f64 {
    let bits = splitmix64(splitmix64(seed) ^ step);
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sam_steps(schedule: SamSchedule, steps: u64) -> Vec<u64> {
        (0..steps)
            .filter(|&step| schedule.is_sam_step(step))
            .collect()
    }

    #[test]
    fn each_schedule_picks_its_steps() {
        assert_eq!(sam_steps(SamSchedule::Every { k: 3 }, 10), [0, 3, 6, 9]);
        assert_eq!(sam_steps(SamSchedule::Every { k: 1 }, 4), [0, 1, 2, 3]);
        assert_eq!(sam_steps(SamSchedule::From { step: 8 }, 10), [8, 9]);
        assert_eq!(sam_steps(SamSchedule::From { step: 0 }, 3), [0, 1, 2]);
        let random = |p| SamSchedule::Random { p, seed: 7 };
        assert_eq!(sam_steps(random(1.0), 1000).len(), 1000);
        assert!(sam_steps(random(0.0), 1000).is_empty());
        // 10_000 fair draws: 5_000 +- 50 (one standard deviation).
        let half = sam_steps(random(0.5), 10_000).len();
        assert!((4_800..=5_200).contains(&half), "{half}");
        // The same seed draws the same steps; another seed, others.
        assert_eq!(sam_steps(random(0.5), 64), sam_steps(random(0.5), 64));
        let other = SamSchedule::Random { p: 0.5, seed: 8 };
        assert_ne!(sam_steps(random(0.5), 64), sam_steps(other, 64));
    }

    #[test]
    fn bad_schedules_name_their_field_and_momentum_sam_is_refused() {
        let field = |schedule: SamSchedule| schedule.validate(&SamVariant::Sam).unwrap_err();
        let error = field(SamSchedule::Every { k: 0 });
        assert_eq!((error.config, error.field), ("SamSchedule", "k"));
        for p in [-0.1, 1.5, f64::NAN] {
            let error = field(SamSchedule::Random { p, seed: 0 });
            assert_eq!((error.config, error.field), ("SamSchedule", "p"));
        }
        let every = SamSchedule::Every { k: 2 };
        for variant in SamVariant::all() {
            let checked = every.validate(&variant);
            match variant.properties().passes {
                PassRule::LookAhead => {
                    let message = checked.unwrap_err().to_string();
                    assert!(message.contains("`schedule`"), "{message}");
                    assert!(message.contains("SamVariant::MomentumSam"), "{message}");
                }
                _ => assert!(checked.is_ok(), "{variant:?}"),
            }
        }
    }
}
