//! The loss scaler's update rule against PyTorch (`reference/scaler_reference.py`), its
//! options, and its record.
#![cfg(feature = "flex")]

use burn::backend::Flex;
use burn_sam::record::LossScalerRecord;
use burn_sam::{LossScaler, LossScalerConfig};
use burn_sam_suite::{load_record, record_bytes};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    init_scale: f64,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: u64,
    overflows: Vec<bool>,
    scales: Vec<f64>,
    growth_trackers: Vec<u64>,
}

#[test]
fn update_matches_torch_grad_scaler() {
    let fixture: Fixture =
        serde_json::from_str(include_str!("fixtures/scaler_reference.json")).unwrap();
    assert_eq!(fixture.cases.len(), 4);
    for case in fixture.cases {
        let mut scaler = LossScalerConfig::new()
            .with_init_scale(case.init_scale)
            .with_growth_factor(case.growth_factor)
            .with_backoff_factor(case.backoff_factor)
            .with_growth_interval(case.growth_interval)
            .init();
        let steps = case
            .overflows
            .iter()
            .zip(&case.scales)
            .zip(&case.growth_trackers);
        for (i, ((&overflow, &scale), &tracker)) in steps.enumerate() {
            scaler.update(overflow).unwrap();
            let state = scaler.to_record();
            assert_eq!(
                f64::from(state.scale),
                scale,
                "{} step {i}: scale",
                case.name
            );
            assert_eq!(
                state.growth_tracker, tracker,
                "{} step {i}: tracker",
                case.name
            );
        }
    }
}

#[test]
fn hysteresis_delays_the_backoff() {
    let mut scaler = LossScalerConfig::new().with_hysteresis(2).init();
    scaler.update(true).unwrap();
    assert_eq!(scaler.scale(), 65536.0, "the first overflow is tolerated");
    scaler.update(true).unwrap();
    assert_eq!(scaler.scale(), 32768.0, "the second backs off");
    scaler.update(true).unwrap();
    assert_eq!(
        scaler.scale(),
        16384.0,
        "hysteresis is used up until the next growth"
    );
    assert_eq!(scaler.overflows(), 3);
}

#[test]
fn bounds_clamp_the_scale() {
    let mut scaler = LossScalerConfig::new()
        .with_init_scale(4.0)
        .with_growth_interval(1)
        .with_min_scale(Some(2.0))
        .with_max_scale(Some(16.0))
        .init();
    for _ in 0..10 {
        scaler.update(false).unwrap();
    }
    assert_eq!(scaler.scale(), 16.0);
    for _ in 0..10 {
        scaler.update(true).unwrap();
    }
    assert_eq!(scaler.scale(), 2.0);
}

#[test]
fn overflowing_at_the_minimum_stops_when_asked() {
    let mut scaler = LossScalerConfig::new()
        .with_init_scale(4.0)
        .with_min_scale(Some(1.0))
        .with_max_overflows_at_min(Some(3))
        .init();
    scaler.update(true).unwrap(); // 2
    scaler.update(true).unwrap(); // 1
    scaler.update(true).unwrap(); // at the minimum: 1 in a row
    scaler.update(true).unwrap(); // 2 in a row
    let error = scaler.update(true).unwrap_err();
    assert_eq!(error.overflows, 3);
    assert!(error.to_string().contains("minimum 1"), "{error}");

    // Without a limit it keeps going (and logs errors).
    let mut scaler = LossScalerConfig::new()
        .with_init_scale(1.0)
        .with_min_scale(Some(1.0))
        .init();
    for _ in 0..100 {
        scaler.update(true).unwrap();
    }
    // A clean step resets the count.
    let mut scaler = LossScalerConfig::new()
        .with_init_scale(1.0)
        .with_min_scale(Some(1.0))
        .with_max_overflows_at_min(Some(2))
        .init();
    scaler.update(true).unwrap();
    scaler.update(false).unwrap();
    scaler.update(true).unwrap();
}

#[test]
fn record_round_trip_resumes_exactly() {
    let config = LossScalerConfig::new()
        .with_growth_interval(3)
        .with_hysteresis(2);
    let flags = [
        false, true, false, false, true, true, false, false, false, false,
    ];
    let mut uninterrupted = config.init();
    for flag in flags {
        uninterrupted.update(flag).unwrap();
    }

    let mut first = config.init();
    for flag in &flags[..5] {
        first.update(*flag).unwrap();
    }
    let record: LossScalerRecord =
        load_record::<Flex, _>(record_bytes::<Flex, _>(first.to_record()));
    let mut resumed: LossScaler = config.init().load_record(record);
    for flag in &flags[5..] {
        resumed.update(*flag).unwrap();
    }
    assert_eq!(resumed.to_record(), uninterrupted.to_record());
}

#[test]
fn invalid_config_names_the_field() {
    let cases = [
        (LossScalerConfig::new().with_init_scale(0.0), "init_scale"),
        (
            LossScalerConfig::new().with_init_scale(f64::INFINITY),
            "init_scale",
        ),
        (LossScalerConfig::new().with_init_scale(1e39), "init_scale"),
        (
            LossScalerConfig::new().with_growth_factor(1.0),
            "growth_factor",
        ),
        (
            LossScalerConfig::new().with_backoff_factor(1.0),
            "backoff_factor",
        ),
        (
            LossScalerConfig::new().with_backoff_factor(0.0),
            "backoff_factor",
        ),
        (
            LossScalerConfig::new().with_growth_interval(0),
            "growth_interval",
        ),
        (LossScalerConfig::new().with_hysteresis(0), "hysteresis"),
        (
            LossScalerConfig::new().with_min_scale(Some(-1.0)),
            "min_scale",
        ),
        (
            LossScalerConfig::new()
                .with_min_scale(Some(8.0))
                .with_max_scale(Some(4.0)),
            "min_scale",
        ),
    ];
    for (config, name) in cases {
        let error = config.try_init().unwrap_err();
        assert_eq!((error.config, error.field), ("LossScalerConfig", name));
        assert!(
            error
                .to_string()
                .starts_with(&format!("invalid LossScalerConfig: `{name}`")),
            "{error}"
        );
    }
}

/// `init` of every config panics at the caller's line (`#[track_caller]`), with the message
/// `try_init` returns.
#[test]
fn init_panics_at_the_callers_line() {
    use std::sync::{Arc, Mutex};

    let location = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&location);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let file = info.location().map(|at| at.file().to_string());
        seen.lock().unwrap().push(file.unwrap_or_default());
    }));
    let panics = [
        std::panic::catch_unwind(|| {
            LossScalerConfig::new().with_init_scale(0.0).init();
        }),
        std::panic::catch_unwind(|| {
            burn_sam::SamConfig::new().with_rho(-1.0).init(());
        }),
        std::panic::catch_unwind(|| {
            burn_sam::MixedPrecisionConfig::new(LossScalerConfig::new().with_hysteresis(0))
                .init(());
        }),
        std::panic::catch_unwind(|| {
            burn_sam_accum::AccumulationConfig::new(0).init(());
        }),
    ];
    std::panic::set_hook(previous);
    assert!(panics.iter().all(Result::is_err));
    let files = location.lock().unwrap().clone();
    assert_eq!(files, vec![file!().to_string(); 4]);
}
