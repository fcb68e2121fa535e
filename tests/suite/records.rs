//! Records say what they hold: `load_record` continues only a record it can continue exactly,
//! refuses the others before changing anything, and still reads the records written before
//! labels existed (`tests/fixtures/records-before-labels`) where they say what wrote them.

use std::panic::{catch_unwind, AssertUnwindSafe};

use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::backend::AutodiffBackend;
use burn_sam::record::{SamRecord, SamRecordLabel, RECORD_FORMAT};
use burn_sam::LossScaling;
use burn_sam::{LossScalerConfig, Sam, SamConfig, SamError, SamVariant};
use burn_sam_suite::{record_bytes, Mlp};

use super::util::{mse, problem, tensors, Problem};

type Sgd<B> = burn::optim::adaptor::OptimizerAdaptor<
    burn::optim::Sgd<<B as AutodiffBackend>::InnerBackend>,
    Mlp<B>,
    B,
>;

fn sgd<B: AutodiffBackend>() -> Sgd<B> {
    let momentum = MomentumConfig::new().with_dampening(0.0);
    SgdConfig::new().with_momentum(Some(momentum)).init()
}

/// An optimizer of `config` after three steps, so that its record holds state.
fn trained<B: AutodiffBackend>(config: &SamConfig) -> Sam<Sgd<B>> {
    trained_on(config, &problem::<B>(3)).0
}

/// An optimizer of `config` after a step on each of `problem`'s batches, and the model it
/// trained.
fn trained_on<B: AutodiffBackend>(
    config: &SamConfig,
    problem: &Problem<B>,
) -> (Sam<Sgd<B>>, Mlp<B>) {
    let mut sam = config.init(sgd::<B>());
    let mut model = problem.model.clone();
    for (x, y) in &problem.batches {
        let loss = |m: &Mlp<B>| mse(m.forward(x.clone()), y.clone());
        model = sam.step_with(0.05, model, loss).unwrap().module;
    }
    (sam, model)
}

fn own<B: AutodiffBackend>(sam: &Sam<Sgd<B>>) -> SamRecord {
    Optimizer::<Mlp<B>, B>::to_record(sam).1
}

/// SAM's part of a record in a canonical order (state by parameter id), as bytes.
fn canonical<B: AutodiffBackend>(mut record: SamRecord) -> Vec<u8> {
    record.variant.tensors.sort_by(|a, b| a.id.cmp(&b.id));
    record
        .mixed_precision
        .master_weights
        .sort_by(|a, b| a.id.cmp(&b.id));
    record_bytes::<B, _>(record)
}

/// `model` after one more step of `sam` on `problem`'s first batch.
fn next_step<B: AutodiffBackend>(
    sam: &mut Sam<Sgd<B>>,
    model: Mlp<B>,
    problem: &Problem<B>,
) -> Vec<Vec<f64>> {
    let (x, y) = &problem.batches[0];
    let loss = |m: &Mlp<B>| mse(m.forward(x.clone()), y.clone());
    tensors(&sam.step_with(0.05, model, loss).unwrap().module)
}

/// `record` loaded into `sam` (SAM's part; the base optimizer's own).
fn load<B: AutodiffBackend>(sam: Sam<Sgd<B>>, record: SamRecord) -> Sam<Sgd<B>> {
    let base = Optimizer::<Mlp<B>, B>::to_record(&sam).0;
    Optimizer::<Mlp<B>, B>::load_record(sam, (base, record))
}

/// An optimizer of `config` refuses `record`: `check_record` says why (the message contains
/// each of `words`), and `load_record` panics with the same message before changing anything:
/// the optimizer it was cloned from (which shares its loss scale and step protocol) counts
/// and steps bitwise as its untouched twin.
fn refuses<B: AutodiffBackend>(config: &SamConfig, record: &SamRecord, words: &[&str]) {
    let problem = problem::<B>(3);
    let (mut sam, model) = trained_on(config, &problem);
    let (mut twin, twin_model) = trained_on(config, &problem);
    let error = sam
        .check_record(record)
        .expect_err("the record must be refused");
    let message = error.to_string();
    assert!(
        matches!(error, SamError::RecordMismatch { .. }),
        "{message}"
    );
    for words in words {
        assert!(message.contains(words), "{words:?} not in {message}");
    }
    let clone = sam.clone();
    let panic = catch_unwind(AssertUnwindSafe(|| drop(load(clone, record.clone()))))
        .expect_err("load_record must refuse it");
    assert_eq!(panic.downcast_ref::<String>(), Some(&message));
    assert_eq!(sam.stats(), twin.stats());
    let scales = (
        sam.loss_scale_handle().get(),
        twin.loss_scale_handle().get(),
    );
    assert_eq!(scales.0, scales.1);
    assert_eq!(
        next_step(&mut sam, model, &problem),
        next_step(&mut twin, twin_model, &problem)
    );
}

fn config(variant: SamVariant) -> SamConfig {
    SamConfig::new().with_rho(0.1).with_variant(variant)
}

/// Each pairing a record cannot continue is refused, naming both sides and the fix.
pub fn refused_pairings_change_nothing<B: AutodiffBackend>() {
    let friendly = config(SamVariant::friendly_sam());
    let momentum = config(SamVariant::momentum_sam()).with_rho(1.0);
    let look = config(SamVariant::LookSam { k: 3, alpha: 0.7 });
    let record = own(&trained::<B>(&friendly));
    assert_eq!(record.label, Some(SamRecordLabel::of(&friendly)));

    // Another variant's state, also into plain SAM.
    let fix = "resume with the configuration that saved it";
    for (into, words) in [
        (
            &look,
            [
                "Friendly-SAM state",
                "LookSAM's state cannot continue Friendly-SAM's",
                fix,
            ],
        ),
        (
            &SamConfig::new(),
            ["Friendly-SAM state", "SAM's state cannot", fix],
        ),
    ] {
        refuses::<B>(into, &record, &words);
    }
    refuses::<B>(
        &look,
        &own(&trained::<B>(&momentum)),
        &["Momentum-SAM state", "the optimizer is LookSAM"],
    );

    // Loss scaling and master weights as when saved, and the reverse.
    let scaling = Some(LossScalerConfig::new().with_init_scale(64.0));
    let scaled = friendly.clone().with_loss_scaling(scaling);
    refuses::<B>(&scaled, &record, &["no loss scaling", "`loss_scaling`"]);
    refuses::<B>(&friendly, &own(&trained::<B>(&scaled)), &["`loss_scaling`"]);
    let no_masters = friendly.clone().with_master_weights(false);
    refuses::<B>(&no_masters, &record, &["`master_weights`"]);
    refuses::<B>(
        &friendly,
        &own(&trained::<B>(&no_masters)),
        &["`master_weights`"],
    );

    // A format this build cannot read.
    let mut newer = record.clone();
    newer.label.as_mut().unwrap().format = RECORD_FORMAT + 1;
    refuses::<B>(&friendly, &newer, &["newer burn-sam"]);
}

/// A record of a variant without state (SAM) loads into any variant, whose state starts as at
/// its first step; the same variant continues exactly.
pub fn allowed_pairings_load<B: AutodiffBackend>() {
    let sam = own(&trained::<B>(&SamConfig::new().with_rho(0.1)));
    assert_eq!(sam.stats.steps, 3);

    let momentum = config(SamVariant::momentum_sam()).with_rho(1.0);
    let loaded = load(trained::<B>(&momentum), sam.clone());
    let after = own(&loaded);
    assert_eq!(after.stats, sam.stats, "the counters continue");
    assert!(
        after.variant.tensors.is_empty(),
        "the momentum starts at zero"
    );
    let model = problem::<B>(1).model;
    let mut loaded = loaded;
    let looked = loaded.ascend(0.1, model.clone(), GradientsParams::new());
    assert_eq!(
        tensors(&looked.unwrap()),
        tensors(&model),
        "no look-ahead before Momentum-SAM's first step"
    );

    let look = config(SamVariant::LookSam { k: 3, alpha: 0.7 });
    let loaded = load(trained::<B>(&look), sam.clone());
    assert!(
        loaded.needs_ascent(),
        "LookSAM's cycle starts with a full step"
    );
    assert_eq!(own(&loaded).variant.cycle, 0);

    let friendly = config(SamVariant::friendly_sam());
    let record = own(&trained::<B>(&friendly));
    let loaded = load(trained::<B>(&friendly), record.clone());
    assert_eq!(
        canonical::<B>(own(&loaded)),
        canonical::<B>(record),
        "the same variant continues exactly"
    );
}

/// A record written before labels existed, as committed in `tests/fixtures`.
fn unlabelled<B: AutodiffBackend>(bytes: &[u8]) -> SamRecord {
    let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::default();
    let record: SamRecord = Recorder::<B>::load(&recorder, bytes.to_vec(), &Default::default())
        .expect("the fixture loads");
    assert_eq!((record.label.clone(), record.stats.steps), (None, 3));
    record
}

/// Records from before labels: loaded where their contents say what wrote them (no variant
/// state, or Momentum-SAM's radius), refused with the way to continue where they do not.
pub fn records_before_labels<B: AutodiffBackend>() {
    let scaling = Some(LossScalerConfig::new().with_init_scale(256.0));
    let scaled_sam = unlabelled::<B>(include_bytes!(
        "../fixtures/records-before-labels/sam-loss-scaled.mpk"
    ));
    let sam = SamConfig::new()
        .with_rho(0.1)
        .with_loss_scaling(scaling.clone());
    let loaded = load(trained::<B>(&sam), scaled_sam.clone());
    assert_eq!(loaded.stats(), scaled_sam.stats);
    assert_eq!(
        own(&loaded).mixed_precision.loss_scaler,
        scaled_sam.mixed_precision.loss_scaler
    );
    refuses::<B>(
        &SamConfig::new(),
        &scaled_sam,
        &["record format 0", "`loss_scaling`"],
    );
    let momentum = config(SamVariant::momentum_sam()).with_rho(1.0);
    let scaled_momentum = momentum.clone().with_loss_scaling(scaling);
    assert!(trained::<B>(&scaled_momentum)
        .check_record(&scaled_sam)
        .is_ok());

    let momentum_record = unlabelled::<B>(include_bytes!(
        "../fixtures/records-before-labels/momentum-sam.mpk"
    ));
    let loaded = load(trained::<B>(&momentum), momentum_record.clone());
    assert_eq!(own(&loaded).variant.tensors.len(), 4, "v is kept");
    let look = config(SamVariant::look_sam());
    refuses::<B>(&look, &momentum_record, &["Momentum-SAM state"]);

    let friendly_record = unlabelled::<B>(include_bytes!(
        "../fixtures/records-before-labels/friendly-sam.mpk"
    ));
    let friendly = config(SamVariant::friendly_sam());
    refuses::<B>(
        &friendly,
        &friendly_record,
        &["LookSAM or Friendly-SAM", "SamRecordLabel::of(&config)"],
    );
    let mut labelled = friendly_record.clone();
    labelled.label = Some(SamRecordLabel::of(&friendly));
    let loaded = load(trained::<B>(&friendly), labelled);
    let state = |record: SamRecord| {
        let mut tensors: Vec<_> = record
            .variant
            .tensors
            .into_iter()
            .map(|t| (t.id, t.values))
            .collect();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        tensors
    };
    assert_eq!(state(own(&loaded)), state(friendly_record), "m is kept");
}
