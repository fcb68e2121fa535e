//! The guide's troubleshooting chapter against the library, so that it cannot go stale: every
//! error variant has an entry showing the variant's own message; the table of configuration
//! fields is what the configs refuse, and holds every field the source checks; every panic
//! message written in the crates' source is quoted.

use std::collections::BTreeMap;
use std::path::Path;

use burn::backend::{Autodiff, Flex};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{Optimizer, Sgd, SgdConfig};
use burn::tensor::DType;
use burn::train::LearningComponentsMarker;
use burn_sam::{
    ConfigError, LossScaleError, LossScalerConfig, MixedPrecisionConfig, RhoSchedule, Sam,
    SamConfig, SamError, SamSchedule, SamVariant,
};
use burn_sam_accum::train::{Ascent, SamTraining};
use burn_sam_accum::{AccumError, AccumulationConfig};
use burn_sam_suite::Classifier;

type B = Autodiff<Flex>;
type SamSgd = Sam<OptimizerAdaptor<Sgd<Flex>, Classifier<B>, B>>;

const CHAPTER: &str = include_str!("../guide/src/troubleshooting.md");

/// The section under the heading `### `name``, up to the next heading.
fn section(name: &str) -> Option<String> {
    let heading = format!("### `{name}`");
    let mut lines = CHAPTER.lines().skip_while(|line| line.trim() != heading);
    lines.next()?;
    let body: Vec<&str> = lines.take_while(|line| !line.starts_with('#')).collect();
    Some(body.join("\n"))
}

/// The `text` blocks of `section`.
fn text_blocks(section: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```text" {
            let block: Vec<&str> = lines.by_ref().take_while(|line| *line != "```").collect();
            blocks.push(block.join("\n"));
        }
    }
    blocks
}

/// Asserts that the entry `name` exists and shows `message` as one of its `text` blocks.
fn assert_entry(name: &str, message: &str) {
    let section = section(name).unwrap_or_else(|| {
        panic!(
            "troubleshooting.md has no entry `### `{name}``; add it with\n```text\n{message}\n```"
        )
    });
    assert!(
        text_blocks(&section).iter().any(|block| block == message),
        "troubleshooting.md's entry `{name}` does not show the message as the library gives \
         it:\n```text\n{message}\n```"
    );
}

fn sgd() -> OptimizerAdaptor<Sgd<Flex>, Classifier<B>, B> {
    SgdConfig::new().init()
}

/// `SamError`'s variants by name: no wildcard, so a new variant does not compile until it
/// has an entry.
fn sam_error_name(error: &SamError) -> &'static str {
    match error {
        SamError::InvalidConfig(_) => "SamError::InvalidConfig",
        SamError::DescentWithoutAscent => "SamError::DescentWithoutAscent",
        SamError::AscentPending => "SamError::AscentPending",
        SamError::ForeignGradients { .. } => "SamError::ForeignGradients",
        SamError::ForeignModule => "SamError::ForeignModule",
        SamError::UnscaledLoss => "SamError::UnscaledLoss",
        SamError::LossScale(_) => "SamError::LossScale",
        SamError::SinglePassStep => "SamError::SinglePassStep",
        SamError::LookAheadGradients => "SamError::LookAheadGradients",
        SamError::LocalAscentVariant { .. } => "SamError::LocalAscentVariant",
        SamError::LocalAscentSchedule => "SamError::LocalAscentSchedule",
        SamError::NothingPicked { .. } => "SamError::NothingPicked",
        SamError::LossScaleMismatch { .. } => "SamError::LossScaleMismatch",
        SamError::UnlinkedStep { .. } => "SamError::UnlinkedStep",
        SamError::LinkedToAnotherOptimizer => "SamError::LinkedToAnotherOptimizer",
        SamError::RecordMismatch { .. } => "SamError::RecordMismatch",
        SamError::ResumedDType { .. } => "SamError::ResumedDType",
        SamError::ResumeOnNarrowDefault { .. } => "SamError::ResumeOnNarrowDefault",
        SamError::ResumedModelDiffers => "SamError::ResumedModelDiffers",
        SamError::UnsupportedDType { .. } => "SamError::UnsupportedDType",
    }
}

fn accum_error_name(error: &AccumError) -> &'static str {
    match error {
        AccumError::InvalidConfig(_) => "AccumError::InvalidConfig",
        AccumError::EmptyWindow => "AccumError::EmptyWindow",
        AccumError::WindowTooLong { .. } => "AccumError::WindowTooLong",
        AccumError::ZeroItems { .. } => "AccumError::ZeroItems",
        AccumError::LossWithoutModule { .. } => "AccumError::LossWithoutModule",
        AccumError::MixedItemCounts => "AccumError::MixedItemCounts",
        AccumError::Optimizer(_) => "AccumError::Optimizer",
    }
}

/// A refusal of `record`'s optimizer by one of `config`.
fn record_refusal(written_by: &SamConfig, config: &SamConfig) -> SamError {
    let (_, record) = Optimizer::<Classifier<B>, B>::to_record(&written_by.init(sgd()));
    let optim: SamSgd = config.init(sgd());
    optim.check_record(&record).unwrap_err()
}

/// One value of every `SamError` variant; record refusals are real ones.
fn sam_errors() -> Vec<SamError> {
    let invalid = SamConfig::new().with_rho(-1.0).validate().unwrap_err();
    let stuck = LossScaleError {
        scale: 1.0,
        overflows: 5,
    };
    vec![
        SamError::InvalidConfig(invalid),
        SamError::DescentWithoutAscent,
        SamError::AscentPending,
        SamError::ForeignGradients {
            gradients: 4,
            matched: 0,
        },
        SamError::ForeignModule,
        SamError::UnscaledLoss,
        SamError::LossScale(stuck),
        SamError::SinglePassStep,
        SamError::LookAheadGradients,
        SamError::LocalAscentVariant { variant: "GSAM" },
        SamError::LocalAscentSchedule,
        SamError::NothingPicked {
            names: vec!["LayerNorm".to_string()],
        },
        SamError::LossScaleMismatch {
            expected: 65536.0,
            handed: 1.0,
        },
        SamError::UnlinkedStep {
            variant: "SAM",
            look_ahead: false,
        },
        SamError::UnlinkedStep {
            variant: "Momentum-SAM",
            look_ahead: true,
        },
        SamError::LinkedToAnotherOptimizer,
        record_refusal(
            &SamConfig::new().with_variant(SamVariant::friendly_sam()),
            &SamConfig::new().with_variant(SamVariant::look_sam()),
        ),
        record_refusal(
            &SamConfig::new(),
            &SamConfig::new().with_loss_scaling(Some(LossScalerConfig::new())),
        ),
        SamError::ResumedDType {
            params: 4,
            saved: Some(DType::F16),
            now: DType::F32,
        },
        SamError::ResumedDType {
            params: 4,
            saved: None,
            now: DType::F32,
        },
        SamError::ResumeOnNarrowDefault {
            default: DType::F16,
        },
        SamError::ResumedModelDiffers,
        SamError::UnsupportedDType {
            dtype: DType::F16,
            backend: "ndarray".to_string(),
        },
    ]
}

fn accum_errors() -> Vec<AccumError> {
    let invalid = AccumulationConfig::new(0).validate().unwrap_err();
    vec![
        AccumError::InvalidConfig(invalid),
        AccumError::EmptyWindow,
        AccumError::WindowTooLong {
            micro_batches: 5,
            window: 4,
        },
        AccumError::ZeroItems { index: 2 },
        AccumError::LossWithoutModule { index: 0 },
        AccumError::MixedItemCounts,
        AccumError::Optimizer(SamError::ForeignModule),
    ]
}

#[test]
fn every_error_has_an_entry_with_its_message() {
    let mut named = Vec::new();
    for error in sam_errors() {
        assert_entry(sam_error_name(&error), &error.to_string());
        named.push(sam_error_name(&error));
    }
    for error in accum_errors() {
        assert_entry(accum_error_name(&error), &error.to_string());
        named.push(accum_error_name(&error));
    }
    named.extend(["ConfigError", "LossScaleError"]);
    named.extend(ranks_errors());
    // No entry for an error that no longer exists.
    for line in CHAPTER.lines() {
        if let Some(name) = line
            .strip_prefix("### `")
            .and_then(|rest| rest.strip_suffix('`'))
            .filter(|name| name.contains("Error"))
        {
            assert!(
                named.contains(&name),
                "troubleshooting.md: `{name}` is no error"
            );
        }
    }
}

/// `RanksError`'s entries: checked against the variants with the `mpi` feature, which builds
/// them.
#[cfg(feature = "mpi")]
fn ranks_errors() -> Vec<&'static str> {
    use burn_sam_accum::train::RanksError;
    let errors = [
        RanksError::AlreadyInitialized,
        RanksError::ThreadLevel {
            provided: "Single".to_string(),
        },
    ];
    errors
        .iter()
        .map(|error| {
            let name = match error {
                RanksError::AlreadyInitialized => "RanksError::AlreadyInitialized",
                RanksError::ThreadLevel { .. } => "RanksError::ThreadLevel",
            };
            assert_entry(name, &error.to_string());
            name
        })
        .collect()
}

#[cfg(not(feature = "mpi"))]
fn ranks_errors() -> Vec<&'static str> {
    vec!["RanksError::AlreadyInitialized", "RanksError::ThreadLevel"]
}

/// One refusal of every field check the configs make.
fn config_refusals() -> Vec<ConfigError> {
    let sam = |config: SamConfig| config.validate().unwrap_err();
    let scaler = |config: LossScalerConfig| config.validate().unwrap_err();
    let variant = |variant: SamVariant| variant.validate().unwrap_err();
    let schedule = |schedule: SamSchedule| schedule.validate(&SamVariant::Sam).unwrap_err();
    let adaptive = SamSchedule::adaptive(100);
    let with_adaptive = |edit: fn(&mut SamSchedule)| {
        let mut schedule = adaptive.clone();
        edit(&mut schedule);
        schedule
    };
    let rho = |rho_schedule: RhoSchedule| rho_schedule.validate(0.1).unwrap_err();
    let devices =
        SamTraining::<LearningComponentsMarker<B, f64, Classifier<B>, SamSgd>>::data_parallel(
            Vec::new(),
            &SamConfig::new().init(sgd()),
            Ascent::Synced,
        );
    let AccumError::InvalidConfig(devices) = devices.err().expect("no devices refused") else {
        panic!("no devices: not a config error");
    };
    vec![
        sam(SamConfig::new().with_rho(-1.0)),
        sam(SamConfig::new().with_eta(-1.0)),
        sam(SamConfig::new().with_eps(0.0)),
        sam(SamConfig::new().with_perturb_only(Some(Vec::new()))),
        sam(SamConfig::new().with_max_grad_norm(Some(0.0))),
        sam(SamConfig::new()
            .with_variant(SamVariant::Gsam { alpha: 0.01 })
            .with_max_grad_norm(Some(1.0))),
        SamSchedule::Every { k: 2 }
            .validate(&SamVariant::momentum_sam())
            .unwrap_err(),
        variant(SamVariant::Gsam { alpha: -1.0 }),
        variant(SamVariant::LookSam { k: 0, alpha: 0.7 }),
        variant(SamVariant::LookSam { k: 5, alpha: -1.0 }),
        variant(SamVariant::FriendlySam {
            sigma: -1.0,
            lambda: 0.9,
        }),
        variant(SamVariant::FriendlySam {
            sigma: 1.0,
            lambda: 2.0,
        }),
        variant(SamVariant::MomentumSam { mu: 1.0 }),
        rho(RhoSchedule::new(f64::NAN, 0.05, 0.0)),
        rho(RhoSchedule::new(0.05, 0.05, 0.0)),
        rho(RhoSchedule::new(0.0, 0.05, 0.5)),
        scaler(LossScalerConfig::new().with_init_scale(0.0)),
        scaler(LossScalerConfig::new().with_growth_factor(1.0)),
        scaler(LossScalerConfig::new().with_backoff_factor(1.0)),
        scaler(LossScalerConfig::new().with_growth_interval(0)),
        scaler(LossScalerConfig::new().with_hysteresis(0)),
        scaler(LossScalerConfig::new().with_min_scale(Some(0.0))),
        scaler(LossScalerConfig::new().with_max_scale(Some(0.0))),
        scaler(
            LossScalerConfig::new()
                .with_min_scale(Some(4.0))
                .with_max_scale(Some(2.0)),
        ),
        schedule(SamSchedule::Every { k: 0 }),
        schedule(SamSchedule::Random { p: 2.0, seed: 0 }),
        schedule(with_adaptive(|s| {
            if let SamSchedule::Adaptive { decay, .. } = s {
                *decay = 1.0;
            }
        })),
        schedule(with_adaptive(|s| {
            if let SamSchedule::Adaptive {
                threshold_start, ..
            } = s
            {
                *threshold_start = f64::NAN;
            }
        })),
        schedule(with_adaptive(|s| {
            if let SamSchedule::Adaptive { threshold_end, .. } = s {
                *threshold_end = f64::INFINITY;
            }
        })),
        schedule(with_adaptive(|s| {
            if let SamSchedule::Adaptive { steps, .. } = s {
                *steps = 0;
            }
        })),
        AccumulationConfig::new(0).validate().unwrap_err(),
        devices,
        MixedPrecisionConfig::new(LossScalerConfig::new())
            .with_max_grad_norm(Some(-1.0))
            .try_init(sgd())
            .err()
            .expect("a refused max_grad_norm"),
    ]
}

/// The rows of the chapter's table of fields: (config, field, allowed).
fn field_rows() -> Vec<(String, String, String)> {
    let section = section("ConfigError").expect("an entry `ConfigError`");
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 3, "a row of config, field, allowed: {line}");
            let code = |cell: &str| cell.trim().trim_matches('`').to_string();
            (code(cells[0]), code(cells[1]), cells[2].trim().to_string())
        })
        .collect()
}

#[test]
fn the_table_of_fields_is_what_the_configs_refuse() {
    let refused: Vec<(String, String, String)> = config_refusals()
        .into_iter()
        .map(|error| {
            let row = |s: &str| s.to_string();
            (row(error.config), row(error.field), row(error.allowed))
        })
        .collect();
    let rows = field_rows();
    for row in &refused {
        assert!(
            rows.contains(row),
            "troubleshooting.md's table lacks | `{}` | `{}` | {} |",
            row.0,
            row.1,
            row.2
        );
    }
    for row in &rows {
        assert!(
            refused.contains(row),
            "no config refuses the table's row {row:?}"
        );
    }
    // Every check in the source is in the table: the same fields, as many times.
    let count = |fields: Vec<String>| {
        let mut counts = BTreeMap::new();
        for field in fields {
            *counts.entry(field).or_insert(0) += 1;
        }
        counts
    };
    assert_eq!(
        count(rows.into_iter().map(|row| row.1).collect()),
        count(checked_fields()),
        "the table's fields against the fields the source checks"
    );
}

/// The library's source files, without test modules and comments.
fn library_sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, files: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).expect("a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                let code: Vec<&str> = text
                    .lines()
                    .take_while(|line| line.trim() != "#[cfg(test)]")
                    .filter(|line| !line.trim_start().starts_with("//"))
                    .collect();
                files.push((path.display().to_string(), code.join("\n")));
            }
        }
    }
    let mut files = Vec::new();
    walk(Path::new("crates/burn-sam/src"), &mut files);
    walk(Path::new("crates/burn-sam-accum/src"), &mut files);
    assert!(files.len() > 40, "the crates' sources");
    files
}

/// The string literal at the start of `text` (after whitespace), unescaped, with Rust's line
/// continuations joined.
fn literal(text: &str) -> Option<String> {
    let mut chars = text.trim_start().strip_prefix('"')?.chars().peekable();
    let mut value = String::new();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(value),
            '\\' => match chars.next()? {
                '\n' => {
                    while chars.peek().is_some_and(|c| c.is_whitespace()) {
                        chars.next();
                    }
                }
                'n' => value.push('\n'),
                other => value.push(other),
            },
            other => value.push(other),
        }
    }
    None
}

/// The field names of every `check(` call in the source: `ConfigError::check(config, field,
/// ..)` and the closures over it, `check(field, ..)`.
fn checked_fields() -> Vec<String> {
    let mut fields = Vec::new();
    for (_, code) in library_sources() {
        for (at, _) in code.match_indices("check(") {
            let before = &code[..at];
            let args = &code[at + "check(".len()..];
            if before.ends_with("ConfigError::") {
                let Some(after_config) = literal(args).and_then(|_| args.split_once(',')) else {
                    continue;
                };
                if let Some(field) = literal(after_config.1) {
                    fields.push(field);
                }
            } else if !before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.') {
                if let Some(field) = literal(args) {
                    fields.push(field);
                }
            }
        }
    }
    fields
}

/// Every message a panic in the crates' source is written with (`panic!`, `assert!`,
/// `assert_eq!`, `unreachable!`, `expect`), split at its `{..}` placeholders.
fn panic_messages() -> Vec<(String, Vec<String>)> {
    let mut messages = Vec::new();
    for (path, code) in library_sources() {
        for call in [
            "panic!(",
            "assert!(",
            "assert_eq!(",
            "unreachable!(",
            ".expect(",
            "warn!(",
            "error!(",
        ] {
            for (at, _) in code.match_indices(call) {
                let rest = &code[at + call.len()..];
                // The call's own literal: before the statement ends.
                let Some(start) = rest.find('"').filter(|&start| !rest[..start].contains(';'))
                else {
                    continue;
                };
                let Some(message) = literal(&rest[start..]) else {
                    continue;
                };
                let pieces = message
                    .split(['{', '}'])
                    .enumerate()
                    .filter(|(index, _)| index % 2 == 0)
                    .map(|(_, piece)| piece.trim().to_string())
                    .filter(|piece| piece.len() > 3)
                    .collect::<Vec<_>>();
                if !pieces.is_empty() {
                    messages.push((path.clone(), pieces));
                }
            }
        }
    }
    messages
}

#[test]
fn every_panic_message_of_the_source_is_quoted() {
    let messages = panic_messages();
    assert!(
        messages.len() >= 10,
        "the source's panic messages: {messages:?}"
    );
    // Quoted in text blocks, where a long message is one line as the library prints it.
    let quoted: String = text_blocks(CHAPTER).join("\n");
    for (path, pieces) in messages {
        for piece in pieces {
            assert!(
                quoted.contains(&piece),
                "troubleshooting.md quotes no panic message of {path} containing {piece:?}"
            );
        }
    }
}
