//! The root paths that 0.2 moved into modules, deprecated, for one release: each names its
//! new home.

#![allow(missing_docs)]

use burn::module::Module;
use burn::tensor::backend::Backend;

#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "moved to `burn_sam::record::SamRecord`")]
pub type SamRecord = crate::sam::SamRecord;

#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "moved to `burn_sam::record::SamRecordLabel`")]
pub type SamRecordLabel = crate::label::SamRecordLabel;

#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "moved to `burn_sam::record::VariantRecord`")]
pub type VariantRecord = crate::family::VariantRecord;

#[doc(hidden)]
#[deprecated(
    since = "0.2.0",
    note = "moved to `burn_sam::record::ParamValuesRecord`"
)]
pub type ParamValuesRecord = crate::family::ParamValuesRecord;

#[doc(hidden)]
#[deprecated(
    since = "0.2.0",
    note = "moved to `burn_sam::record::MixedPrecisionRecord`"
)]
pub type MixedPrecisionRecord = crate::mixed_precision::MixedPrecisionRecord;

#[doc(hidden)]
#[deprecated(
    since = "0.2.0",
    note = "moved to `burn_sam::record::MasterWeightRecord`"
)]
pub type MasterWeightRecord = crate::mixed_precision::MasterWeightRecord;

#[doc(hidden)]
#[deprecated(
    since = "0.2.0",
    note = "moved to `burn_sam::record::SavedModelRecord`"
)]
pub type SavedModelRecord = crate::checkpoint::SavedModelRecord;

#[doc(hidden)]
#[deprecated(
    since = "0.2.0",
    note = "moved to `burn_sam::record::NarrowParamRecord`"
)]
pub type NarrowParamRecord = crate::checkpoint::NarrowParamRecord;

#[doc(hidden)]
#[deprecated(
    since = "0.2.0",
    note = "moved to `burn_sam::record::LossScalerRecord`"
)]
pub type LossScalerRecord = crate::mixed_precision::LossScalerRecord;

#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "moved to `burn_sam::record::ScheduleRecord`")]
pub type ScheduleRecord = crate::schedule::ScheduleRecord;

#[doc(hidden)]
#[deprecated(
    since = "0.2.0",
    note = "moved to `burn_sam::variant::VariantProperties`"
)]
pub type VariantProperties = crate::variant::VariantProperties;

#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "moved to `burn_sam::variant::PassRule`")]
pub type PassRule = crate::variant::PassRule;

#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "moved to `burn_sam::variant::PerturbFrom`")]
pub type PerturbFrom = crate::variant::PerturbFrom;

#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "moved to `burn_sam::variant::DescentFrom`")]
pub type DescentFrom = crate::variant::DescentFrom;

#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "moved to `burn_sam::strategy::PendingAscent`")]
pub type PendingAscent = crate::sam::PendingAscent;

#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "renamed `burn_sam::MixedPrecision`")]
pub type LossScaled<O> = crate::mixed_precision::MixedPrecision<O>;

#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "renamed `burn_sam::MixedPrecisionConfig`")]
pub type LossScaledConfig = crate::mixed_precision::MixedPrecisionConfig;

#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "moved to `burn_sam::record::RECORD_FORMAT`")]
pub const RECORD_FORMAT: u32 = crate::label::RECORD_FORMAT;

#[doc(hidden)]
#[deprecated(since = "0.2.0", note = "moved to `burn_sam::record::fingerprint`")]
pub fn fingerprint<B: Backend, M: Module<B>>(module: &M) -> u64 {
    crate::checkpoint::fingerprint(module)
}

#[cfg(test)]
#[allow(deprecated)]
mod tests {
    /// Code written against 0.2's root paths still compiles, with the same types.
    #[test]
    fn the_old_paths_name_the_same_items() {
        let label: crate::SamRecordLabel =
            crate::record::SamRecordLabel::of(&crate::SamConfig::new());
        let _: crate::record::SamRecordLabel = label;
        let rule: crate::PassRule = crate::variant::PassRule::Two;
        assert_eq!(rule, crate::variant::PassRule::Two);
        assert_eq!(crate::RECORD_FORMAT, crate::record::RECORD_FORMAT);
        let _: Option<crate::PendingAscent> = None::<crate::strategy::PendingAscent>;
        let scaling = crate::LossScalerConfig::new();
        let _: crate::MixedPrecision<()> = crate::LossScaledConfig::new(scaling).init(());
    }
}
