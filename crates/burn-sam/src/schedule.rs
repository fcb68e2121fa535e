//! Which optimizer steps are SAM steps and which are the base optimizer's own: a schedule over
//! SAM's step count, read by every two-pass variant.

use burn::config::Config;
use burn::record::Record;

use crate::error::ConfigError;
use crate::variant::{PassRule, SamVariant};

/// Which optimizer steps are SAM steps ([`SamConfig::schedule`](crate::SamConfig::schedule));
/// the others are **base steps**: one pass, and the base optimizer steps `w` with the gradient
/// at `w`, as it would without SAM.
///
/// `Every`, `From` and `Random` decide from SAM's step count
/// ([`SamStats::steps`](crate::SamStats), every step counted, skipped ones too, saved in the
/// record), before the step: [`Sam::passes`](crate::Sam::passes) says
/// [`Passes::One`](crate::strategy::Passes::One) for a base step. `Adaptive` decides from the
/// first pass's gradient, in the ascent: an ascent it turns into a base step takes the step
/// itself ([`Sam::awaits_descent`](crate::Sam::awaits_descent) is then false). Either way every
/// replica and rank takes the same decisions (they see the same combined gradient), and a
/// resumed run takes the uninterrupted run's. A base step leaves the variant's state as it is
/// (Friendly-SAM's momentum, LookSAM's cycle and kept direction), and updates the loss scale
/// once, as every step does.
///
/// ```
/// use burn_sam::{SamConfig, SamSchedule};
///
/// let late = SamConfig::new().with_schedule(Some(SamSchedule::From { step: 7_500 }));
/// assert_eq!(late.schedule.as_ref().unwrap().sam_step(7_499), Some(false));
/// assert_eq!(late.schedule.as_ref().unwrap().sam_step(7_500), Some(true));
/// let every = SamSchedule::Every { k: 5 };
/// let sam_steps: Vec<u64> = (0..12).filter(|&step| every.sam_step(step) == Some(true)).collect();
/// assert_eq!(sam_steps, [0, 5, 10]);
/// // AE-SAM's rule waits for the step's first gradient.
/// assert_eq!(SamSchedule::adaptive(10_000).sam_step(0), None);
/// ```
#[derive(Config, Debug, PartialEq)]
pub enum SamSchedule {
    /// SAM on every `k`-th step (0, k, 2k, ...), base steps between (Composer's `interval`,
    /// which scales `rho` with `k`: 0.05 at every step, 0.5 at `k` 10). Equals LookSAM with
    /// `alpha` 0 and the same `k`.
    Every {
        /// Steps per SAM step. Allowed: `>= 1`.
        k: usize,
    },
    /// Base steps before step `step`, SAM from it on: late-phase SAM (Zhou et al., ICLR 2025),
    /// whose "few epochs of SAM at the end" match full SAM's generalization there.
    From {
        /// The first SAM step (0: SAM throughout).
        step: usize,
    },
    /// A SAM step with probability `p`, drawn per step from `seed` and the step count
    /// (SS-SAM, Zhao et al., 2022): the same draws on every replica, rank and resume.
    Random {
        /// The probability of a SAM step. Allowed: in `[0, 1]`.
        p: f64,
        /// The draws' seed.
        seed: u64,
    },
    /// AE-SAM's rule (Jiang et al., ICLR 2023): a SAM step when the squared norm `x` of the
    /// step's first gradient (at `w`, unscaled, over every parameter with a gradient) is large
    /// against its running mean and variance, `x >= mean + c * sqrt(variance)`, where
    /// `mean <- decay * mean + (1 - decay) * x` and
    /// `variance <- decay * variance + (1 - decay) * (x - mean)^2` (both from 0, updated
    /// before the test, by every step whose `x` is finite), and `c` moves linearly from
    /// `threshold_start` at step 0 to `threshold_end` at step `steps` (then stays). A lower
    /// `c` fires more often. The statistics are in SAM's record.
    Adaptive {
        /// The statistics' decay `delta`. Allowed: in `[0, 1)`.
        decay: f64,
        /// `c` at step 0. Allowed: finite.
        threshold_start: f64,
        /// `c` from step `steps` on. Allowed: finite.
        threshold_end: f64,
        /// The steps over which `c` moves (the run's length, for AE-SAM). Allowed: `>= 1`.
        steps: usize,
    },
}

/// The running statistics of [`SamSchedule::Adaptive`], saved in
/// [`SamRecord`](crate::record::SamRecord).
#[derive(Record, Clone, Copy, Debug, Default, PartialEq)]
pub struct ScheduleRecord {
    /// The running mean of the first gradient's squared norm.
    pub mean: f64,
    /// Its running variance.
    pub variance: f64,
}

/// An adaptive step's decision and the statistics that include its gradient, kept once the
/// step is counted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Decision {
    pub sam: bool,
    pub statistics: ScheduleRecord,
}

impl SamSchedule {
    /// AE-SAM over a run of `steps` optimizer steps, with decay 0.9 and `c` from 1 down to -1:
    /// few SAM steps early, more later, about half over the run on a steady gradient norm
    /// (our reading of the paper's settings).
    pub fn adaptive(steps: usize) -> Self {
        Self::Adaptive {
            decay: 0.9,
            threshold_start: 1.0,
            threshold_end: -1.0,
            steps,
        }
    }

    /// Whether step `step` (SAM's step count before it, from 0) is a SAM step; `None` for
    /// [`SamSchedule::Adaptive`], which decides from the step's first gradient.
    pub fn sam_step(&self, step: u64) -> Option<bool> {
        match *self {
            Self::Every { k } => Some(step.is_multiple_of(k.max(1) as u64)),
            Self::From { step: first } => Some(step >= first as u64),
            Self::Random { p, seed } => Some(uniform(seed, step) < p),
            Self::Adaptive { .. } => None,
        }
    }

    /// [`SamSchedule::Adaptive`]'s decision for step `step` from the squared norm of its first
    /// gradient, with the statistics `before` it: a SAM step when that norm is not finite
    /// (the ascent then skips itself, as without a schedule; the statistics stay).
    pub(crate) fn decide(&self, step: u64, squared_norm: f64, before: ScheduleRecord) -> Decision {
        let Self::Adaptive {
            decay,
            threshold_start,
            threshold_end,
            steps,
        } = *self
        else {
            unreachable!("only an adaptive schedule decides from the gradient")
        };
        if !squared_norm.is_finite() {
            return Decision {
                sam: true,
                statistics: before,
            };
        }
        let mean = decay * before.mean + (1.0 - decay) * squared_norm;
        let variance = decay * before.variance + (1.0 - decay) * (squared_norm - mean).powi(2);
        let progress = (step as f64 / steps as f64).min(1.0);
        let c = threshold_start + (threshold_end - threshold_start) * progress;
        Decision {
            sam: squared_norm >= mean + c * variance.sqrt(),
            statistics: ScheduleRecord { mean, variance },
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
            Self::Adaptive {
                decay,
                threshold_start,
                threshold_end,
                steps,
            } => format!(
                "AE-SAM: SAM when the first gradient's squared norm >= mean + c * std (decay \
                 {decay}, c from {threshold_start} to {threshold_end} over {steps} steps), \
                 one-pass base steps on the others"
            ),
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
            Self::Adaptive {
                decay,
                threshold_start,
                threshold_end,
                steps,
            } => {
                check("decay", decay, "in [0, 1)", (0.0..1.0).contains(&decay))?;
                let finite = "finite";
                check(
                    "threshold_start",
                    threshold_start,
                    finite,
                    threshold_start.is_finite(),
                )?;
                check(
                    "threshold_end",
                    threshold_end,
                    finite,
                    threshold_end.is_finite(),
                )?;
                check("steps", steps as f64, "an integer >= 1", steps >= 1)?;
            }
        }
        ConfigError::check(
            "SamConfig",
            "schedule",
            format!("Some({self:?})"),
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
            .filter(|&step| schedule.sam_step(step) == Some(true))
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
    fn adaptive_fires_on_gradients_large_against_their_statistics() {
        let schedule = SamSchedule::Adaptive {
            decay: 0.5,
            threshold_start: 0.0,
            threshold_end: 2.0,
            steps: 2,
        };
        // Step 0: mean 0.5 * 4 = 2, variance 0.5 * (4 - 2)^2 = 2, c 0: 4 >= 2 fires.
        let first = schedule.decide(0, 4.0, ScheduleRecord::default());
        let statistics = ScheduleRecord {
            mean: 2.0,
            variance: 2.0,
        };
        assert_eq!(
            first,
            Decision {
                sam: true,
                statistics
            }
        );
        // Step 1: mean 1.5, variance 0.5 * 2 + 0.5 * 0.25 = 1.125, c 1: 1 < 1.5 + 1.06.
        let second = schedule.decide(1, 1.0, statistics);
        assert!(!second.sam);
        assert_eq!(
            second.statistics,
            ScheduleRecord {
                mean: 1.5,
                variance: 1.125
            }
        );
        // Past `steps`, c stays at 2; a non-finite norm is a SAM step that changes nothing.
        let late = schedule.decide(10, 1.5 + 2.0 * 1.125f64.sqrt(), second.statistics);
        assert!(!late.sam, "the norm enters the mean before the test");
        let overflow = schedule.decide(3, f64::INFINITY, second.statistics);
        assert_eq!(
            overflow,
            Decision {
                sam: true,
                statistics: second.statistics
            }
        );
        assert_eq!(schedule.sam_step(0), None);
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
        let adaptive = |decay, threshold_start, steps| SamSchedule::Adaptive {
            decay,
            threshold_start,
            threshold_end: 0.0,
            steps,
        };
        assert_eq!(field(adaptive(1.0, 0.0, 10)).field, "decay");
        assert_eq!(field(adaptive(0.9, f64::NAN, 10)).field, "threshold_start");
        assert_eq!(field(adaptive(0.9, 0.0, 0)).field, "steps");
        assert!(SamSchedule::adaptive(100)
            .validate(&SamVariant::Sam)
            .is_ok());
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
