//! What a [`SamRecord`](crate::record::SamRecord) holds, written into it, and which records an optimizer
//! can continue exactly.

use burn::record::Record;

use crate::config::SamConfig;
use crate::error::SamError;
use crate::family::VariantRecord;
use crate::mixed_precision::MixedPrecisionRecord;
use crate::variant::{SamVariant, VariantProperties};

/// The format of burn-sam's own part of a record that this build writes and reads: 1 since
/// records name what they hold ([`SamRecordLabel`]), 2 since they name the variant by its
/// stable key ([`VariantProperties::key`](crate::variant::VariantProperties::key)) rather than its
/// display name; records without a label are format 0. Every earlier format still loads.
pub const RECORD_FORMAT: u32 = 2;

/// What a [`SamRecord`](crate::record::SamRecord) holds: the variant that wrote it, whether loss
/// scaling and f32 master weights were on, and the record format.
///
/// A record written before labels existed has none; to resume one that `load_record` cannot
/// place (per-parameter state of LookSAM or Friendly-SAM), label it with the configuration that
/// wrote it:
///
/// ```
/// use burn_sam::record::SamRecordLabel;
/// use burn_sam::{SamConfig, SamVariant};
///
/// let writer = SamConfig::new().with_variant(SamVariant::friendly_sam());
/// let label = SamRecordLabel::of(&writer);
/// assert_eq!((label.variant.as_str(), label.loss_scaling), ("friendly_sam", false));
/// // record.1.label = Some(label); then `load_record(record)` as usual.
/// ```
#[derive(Record, Clone, Debug, PartialEq)]
pub struct SamRecordLabel {
    /// burn-sam's record format ([`RECORD_FORMAT`] when this build wrote it).
    pub format: u32,
    /// The variant that wrote the record, by its stable key
    /// ([`VariantProperties::key`](crate::variant::VariantProperties::key)); by its name
    /// ([`SamVariant::name`](crate::SamVariant::name)) in records of format 1.
    pub variant: String,
    /// Whether the optimizer scaled its loss (the record then holds the loss scaler).
    pub loss_scaling: bool,
    /// Whether the optimizer stepped parameters narrower than f32 through f32 master weights.
    pub master_weights: bool,
    /// The `Learner` epoch whose checkpoint this is, when `SamTraining` saved it.
    pub epoch: Option<u64>,
}

impl SamRecordLabel {
    /// The label of a record written by an optimizer of `config`, in this build's format.
    pub fn of(config: &SamConfig) -> Self {
        Self {
            format: RECORD_FORMAT,
            variant: config.variant.properties().key.to_string(),
            loss_scaling: config.loss_scaling.is_some(),
            master_weights: config.master_weights,
            epoch: None,
        }
    }
}

/// What a record holds, read from its label or, without one (format 0), from its contents.
struct Holds {
    format: u32,
    /// The variant whose state it holds; `None` when it holds no variant state.
    variant: Option<String>,
    loss_scaling: bool,
    /// `None` where a record without a label cannot tell (no parameter narrower than f32).
    master_weights: Option<bool>,
    epoch: Option<u64>,
}

/// The variant a label names: by its key, or by its name in records of format 1.
fn named(variant: &str) -> Option<VariantProperties> {
    SamVariant::all()
        .iter()
        .map(SamVariant::properties)
        .find(|properties| properties.key == variant || properties.name == variant)
}

/// Whether the variant a label names keeps state (per-parameter tensors, a cycle) between
/// steps (a variant no build knows: as if it did, so that nothing is dropped silently).
fn keeps_state(variant: &str) -> bool {
    named(variant).is_none_or(|properties| properties.keeps_state)
}

/// The name messages show for the variant a label names.
fn display_name(variant: &str) -> &str {
    named(variant).map_or(variant, |properties| properties.name)
}

impl Holds {
    /// What the record holds, or `None` for a record without a label whose variant state
    /// could be LookSAM's or Friendly-SAM's.
    fn read(
        label: Option<&SamRecordLabel>,
        variant: &VariantRecord,
        mixed_precision: &MixedPrecisionRecord,
    ) -> Option<Self> {
        if let Some(label) = label {
            return Some(Self {
                format: label.format,
                variant: keeps_state(&label.variant)
                    .then(|| display_name(&label.variant).to_string()),
                loss_scaling: label.loss_scaling,
                master_weights: Some(label.master_weights),
                epoch: label.epoch,
            });
        }
        // Only Momentum-SAM records a radius; LookSAM's and Friendly-SAM's tensors look alike.
        let variant = match (variant.tensors.is_empty(), variant.rho > 0.0) {
            (true, _) => None,
            (false, true) => Some(SamVariant::momentum_sam().name().to_string()),
            (false, false) => return None,
        };
        Some(Self {
            format: 0,
            variant,
            loss_scaling: mixed_precision.loss_scaler.is_some(),
            master_weights: (!mixed_precision.master_weights.is_empty()).then_some(true),
            epoch: None,
        })
    }

    fn describe(&self) -> String {
        let variant = match &self.variant {
            Some(variant) => format!("{variant} state"),
            None => "no variant state".to_string(),
        };
        let masters = match self.master_weights {
            Some(true) => ", f32 master weights",
            Some(false) => ", no master weights",
            None => "",
        };
        format!(
            "{variant}, {}{masters} (record format {})",
            scaling(self.loss_scaling),
            self.format
        )
    }
}

fn scaling(on: bool) -> &'static str {
    match on {
        true => "loss scaling",
        false => "no loss scaling",
    }
}

impl SamRecordLabel {
    /// The optimizer that would write this label, as a refused resume names it.
    fn describe_optimizer(&self) -> String {
        let masters = match self.master_weights {
            true => "f32 master weights",
            false => "no master weights",
        };
        format!(
            "{}, {}, {masters} (reads record formats up to {RECORD_FORMAT})",
            display_name(&self.variant),
            scaling(self.loss_scaling),
        )
    }
}

/// The refusal of a record without a label whose state could be LookSAM's or Friendly-SAM's.
fn unlabelled_state(optimizer: String) -> SamError {
    SamError::RecordMismatch {
        epoch: None,
        record: "per-parameter state of LookSAM or Friendly-SAM, without a label (written \
                 before burn-sam labelled its records)"
            .to_string(),
        optimizer,
        fix: "the record does not say which of them wrote it: if you know, label it \
              (`record.1.label = Some(SamRecordLabel::of(&config))`, `config` the \
              writer's) and load it again"
            .to_string(),
    }
}

/// Whether an optimizer of `config` can continue from a record with `label`, `variant` and
/// `mixed_precision`, and whether the record's variant state continues: when it is not, the
/// record's variant keeps none (SAM, GSAM, or a record from before labels without any) and
/// the optimizer's variant starts its state as at its first step. The error names both sides
/// and the fix.
pub(crate) fn check_resume(
    config: &SamConfig,
    label: Option<&SamRecordLabel>,
    variant: &VariantRecord,
    mixed_precision: &MixedPrecisionRecord,
) -> Result<bool, SamError> {
    let own = SamRecordLabel::of(config);
    let optimizer = own.describe_optimizer();
    let Some(holds) = Holds::read(label, variant, mixed_precision) else {
        return Err(unlabelled_state(optimizer));
    };
    // Every mismatch at once, each with its fix: one rerun, not one per mismatch.
    let mut fixes = Vec::new();
    if holds.format > RECORD_FORMAT {
        fixes.push("it was written by a newer burn-sam: resume with that version".to_string());
    }
    if holds.loss_scaling != own.loss_scaling {
        fixes.push(format!(
            "resume with `loss_scaling` as when it was saved ({}); to change it, start a \
             fresh optimizer",
            scaling(holds.loss_scaling)
        ));
    }
    if holds
        .master_weights
        .is_some_and(|masters| masters != own.master_weights)
    {
        fixes.push(
            "resume with `master_weights` as when it was saved; to change it, start a fresh \
             optimizer"
                .to_string(),
        );
    }
    let own_name = config.variant.name();
    let same = |label: &SamRecordLabel| named(&label.variant).is_some_and(|p| p.name == own_name);
    let continues = match holds.variant.as_deref() {
        None => label.is_some_and(same),
        Some(variant) if variant == own_name => true,
        Some(variant) => {
            fixes.push(format!(
                "{own_name}'s state cannot continue {variant}'s: resume with the configuration \
                 that saved it (`SamVariant` {variant}), or start {own_name} from a fresh \
                 optimizer"
            ));
            true
        }
    };
    let Some(fix) = joined(fixes) else {
        return Ok(continues);
    };
    Err(SamError::RecordMismatch {
        epoch: holds.epoch,
        record: holds.describe(),
        optimizer,
        fix,
    })
}

/// The one fix, or "N mismatches: (1) ...; (2) ..."; `None` without any.
fn joined(mut fixes: Vec<String>) -> Option<String> {
    match fixes.len() {
        0 => None,
        1 => Some(fixes.remove(0)),
        count => {
            let listed: Vec<String> = fixes
                .iter()
                .enumerate()
                .map(|(index, fix)| format!("({}) {fix}", index + 1))
                .collect();
            Some(format!("{count} mismatches: {}", listed.join("; ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::ParamValuesRecord;
    use crate::mixed_precision::LossScalerConfig;

    /// What [`check_resume`] says of a record whose variant state continues, and of one whose
    /// variant keeps none.
    const EXACTLY: bool = true;
    const FRESH_VARIANT_STATE: bool = false;

    fn with_state(rho: f64) -> VariantRecord {
        VariantRecord {
            cycle: 3,
            tensors: vec![ParamValuesRecord {
                id: "0".into(),
                values: vec![1.0],
            }],
            rho,
        }
    }

    fn unscaled() -> MixedPrecisionRecord {
        MixedPrecisionRecord {
            loss_scaler: None,
            master_weights: Vec::new(),
            model: None,
        }
    }

    fn config(variant: SamVariant) -> SamConfig {
        SamConfig::new().with_variant(variant)
    }

    #[test]
    fn a_label_says_what_may_continue() {
        let msam = config(SamVariant::momentum_sam());
        let look = config(SamVariant::look_sam());
        let label = SamRecordLabel::of(&msam);
        let resume = |config: &SamConfig, label: &SamRecordLabel| {
            check_resume(config, Some(label), &with_state(1.0), &unscaled())
        };
        assert_eq!(resume(&msam, &label), Ok(EXACTLY));
        let refused = resume(&look, &label).unwrap_err().to_string();
        assert!(
            refused.contains("Momentum-SAM state") && refused.contains("LookSAM's state cannot"),
            "{refused}"
        );
        // SAM and GSAM keep no state: any variant starts its own from zero.
        let sam = SamRecordLabel::of(&SamConfig::new());
        assert_eq!(resume(&msam, &sam), Ok(FRESH_VARIANT_STATE));
        assert_eq!(resume(&SamConfig::new(), &sam), Ok(EXACTLY));
        let gsam = config(SamVariant::gsam());
        assert_eq!(resume(&gsam, &sam), Ok(FRESH_VARIANT_STATE));
        // A newer format, another loss scaling, other master weights: refused.
        let newer = SamRecordLabel {
            format: RECORD_FORMAT + 1,
            ..label.clone()
        };
        assert!(resume(&msam, &newer)
            .unwrap_err()
            .to_string()
            .contains("newer"));
        let scaled = msam
            .clone()
            .with_loss_scaling(Some(LossScalerConfig::new()));
        assert!(resume(&scaled, &label)
            .unwrap_err()
            .to_string()
            .contains("`loss_scaling`"));
        let without_masters = msam.clone().with_master_weights(false);
        assert!(resume(&without_masters, &label)
            .unwrap_err()
            .to_string()
            .contains("`master_weights`"));
    }

    /// Records name the variant by its key; format-1 records by its name, which still load.
    #[test]
    fn a_label_names_the_variant_by_a_stable_key_and_old_names_still_load() {
        let fsam = config(SamVariant::friendly_sam());
        let label = SamRecordLabel::of(&fsam);
        assert_eq!((label.format, label.variant.as_str()), (2, "friendly_sam"));
        let format_1 = SamRecordLabel {
            format: 1,
            variant: "Friendly-SAM".into(),
            ..label.clone()
        };
        let resume = |config: &SamConfig, label: &SamRecordLabel| {
            check_resume(config, Some(label), &with_state(0.0), &unscaled())
        };
        for label in [&label, &format_1] {
            assert_eq!(resume(&fsam, label), Ok(EXACTLY));
            let refused = resume(&config(SamVariant::look_sam()), label).unwrap_err();
            let refused = refused.to_string();
            assert!(refused.contains("it holds Friendly-SAM state"), "{refused}");
        }
        // GSAM keeps no state, by key or by name.
        let gsam = config(SamVariant::gsam());
        let by_name = SamRecordLabel {
            variant: "GSAM".into(),
            ..SamRecordLabel::of(&gsam)
        };
        for label in [SamRecordLabel::of(&gsam), by_name] {
            assert_eq!(resume(&gsam, &label), Ok(EXACTLY));
            assert_eq!(resume(&fsam, &label), Ok(FRESH_VARIANT_STATE));
        }
    }

    #[test]
    fn a_refusal_names_every_mismatch_at_once() {
        let msam = config(SamVariant::momentum_sam());
        let label = SamRecordLabel {
            format: RECORD_FORMAT + 1,
            ..SamRecordLabel::of(&msam)
        };
        let look = config(SamVariant::look_sam())
            .with_loss_scaling(Some(LossScalerConfig::new()))
            .with_master_weights(false);
        let refused = check_resume(&look, Some(&label), &with_state(1.0), &unscaled())
            .unwrap_err()
            .to_string();
        for words in [
            "4 mismatches: (1) it was written by a newer burn-sam",
            "(2) resume with `loss_scaling`",
            "(3) resume with `master_weights`",
            "(4) LookSAM's state cannot continue Momentum-SAM's",
        ] {
            assert!(refused.contains(words), "{words:?} not in {refused}");
        }
    }

    #[test]
    fn a_record_without_a_label_is_read_from_its_contents() {
        let msam = config(SamVariant::momentum_sam());
        let fsam = config(SamVariant::friendly_sam());
        let empty = VariantRecord::default();
        assert_eq!(
            check_resume(&fsam, None, &empty, &unscaled()),
            Ok(FRESH_VARIANT_STATE)
        );
        assert_eq!(
            check_resume(&msam, None, &with_state(1.0), &unscaled()),
            Ok(EXACTLY)
        );
        let ambiguous = check_resume(&fsam, None, &with_state(0.0), &unscaled());
        assert!(ambiguous
            .unwrap_err()
            .to_string()
            .contains("SamRecordLabel::of"));
    }
}
