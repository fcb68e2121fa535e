//! The Rust snippets of README.md and of the guide (`guide/src/`), compiled and run on the UCI
//! digits, and checked to be the documents' text: each `<!-- snippet: NAME -->` block must
//! equal the region `// snippet: NAME` ... `// snippet-end` of this file, `src/classifier.rs`
//! or `mpi_ranks.rs` (built with the `mpi` feature; a `diff` block: its `+` and context lines),
//! every `rust` block must have such a marker, and every region must be shown somewhere.

use std::error::Error;
use std::path::Path;

use burn::backend::{Autodiff, Flex};
use burn::optim::SgdConfig;
use burn::tensor::FloatDType;
use burn::train::metric::{AccuracyMetric, LossMetric};
use burn::train::{Learner, SupervisedTraining};
use burn_sam_suite::digits::{digits_loader, Digits, CLASSES, FEATURES};
use burn_sam_suite::{ClassBatch, Classifier, MlpConfig, Quiet};

type B = Autodiff<Flex>;
type Result<T = ()> = std::result::Result<T, Box<dyn Error>>;

fn model() -> Classifier<B> {
    Classifier {
        mlp: MlpConfig::new(vec![FEATURES, 32, CLASSES]).init(&Default::default()),
    }
}

fn digits(count: usize) -> Digits {
    let digits = Digits::load(Path::new("examples/data/digits.csv.gz")).expect("the data set");
    digits.split(digits.len() - count).1
}

fn batches(count: usize) -> Vec<ClassBatch<B>> {
    let digits = digits(count * 32);
    (0..count)
        .map(|i| {
            let indices: Vec<usize> = (i * 32..(i + 1) * 32).collect();
            let (inputs, targets) = digits.batch(&indices, FloatDType::F32, &Default::default());
            ClassBatch { inputs, targets }
        })
        .collect()
}

#[test]
fn quick_start() -> Result {
    let (lr, batch) = (0.05, batches(1).remove(0));
    let mut model = model();
    // snippet: quick-start
    use burn::optim::AdamConfig;
    use burn_sam::SamConfig;

    // Wrap any Burn optimizer.
    let mut optim = SamConfig::new()
        .with_rho(0.05)
        .try_init(AdamConfig::new().init())?;

    // One call per batch runs both passes with your loss closure (errors hand the model back).
    let step = optim.step_with(lr, model, |m: &Classifier<B>| m.loss(&batch))?;
    model = step.module; // step.loss: the first pass's loss; step.report: what happened

    // snippet-end
    assert_eq!(optim.stats().steps, 1);
    drop(model);
    Ok(())
}

#[test]
fn sam_family() -> Result {
    let (lr, batches) = (0.05, batches(10));
    let mut model = model();
    // snippet: sam-family
    use burn::optim::SgdConfig;
    use burn_sam::{RhoSchedule, SamConfig, SamVariant};

    // LookSAM: a full SAM step every 5 steps, one pass on the others.
    let mut optim = SamConfig::new()
        .with_rho(0.1)
        .with_variant(SamVariant::LookSam { k: 5, alpha: 0.7 })
        // The radius follows the learning rate: 0.1 at lr 0.05, 0.02 at lr 0.
        .with_rho_schedule(Some(RhoSchedule::new(0.0, 0.05, 0.02)))
        .try_init(SgdConfig::new().init())?;

    for batch in batches {
        // `step_with` runs the passes this step takes; `needs_ascent` says how many.
        let two_passes = optim.needs_ascent();
        model = optim
            .step_with(lr, model, |m: &Classifier<B>| m.loss(&batch))?
            .module;
        println!("two passes: {two_passes}");
    }
    // snippet-end
    assert_eq!(optim.stats().steps, 10);
    drop(model);
    Ok(())
}

#[test]
fn schedules() -> Result {
    let (lr, batches) = (0.05, batches(8));
    let (epochs, batches_per_epoch) = (1, batches.len());
    let mut model = model();
    // snippet: schedules
    use burn::optim::momentum::MomentumConfig;
    use burn::optim::SgdConfig;
    use burn_sam::{SamConfig, SamSchedule, StepOutcome};

    // SGD for the first half of the run, SAM for the second (late-phase SAM).
    let run = epochs * batches_per_epoch;
    let sgd = SgdConfig::new().with_momentum(Some(MomentumConfig::new()));
    let mut optim = SamConfig::new()
        .with_rho(0.3)
        .with_schedule(Some(SamSchedule::From { step: run / 2 }))
        .try_init(sgd.init())?;

    for batch in batches {
        // A base step calls the closure once: one pass, SGD's own step.
        let step = optim.step_with(lr, model, |m: &Classifier<B>| m.loss(&batch))?;
        let sam_step = step.report.outcome != StepOutcome::BaseStep;
        model = step.module;
        println!("SAM step: {sam_step}");
    }
    // snippet-end
    assert_eq!(optim.stats().steps, 8);
    assert_eq!(optim.last_report().unwrap().outcome, StepOutcome::Applied);
    drop(model);
    Ok(())
}

#[test]
fn optimizer_step() -> Result {
    let (lr, batches) = (0.05, batches(3));
    let mut model = model();
    // snippet: optimizer-step
    use burn::optim::{GradientsParams, Optimizer, SgdConfig};
    use burn_sam::SamConfig;

    // Generic code that steps any Burn optimizer after each forward and backward pass.
    let mut optim = SamConfig::new()
        .try_init(SgdConfig::new().init())?
        .step_per_pass(); // without it, `Optimizer::step` panics naming `SamTraining`

    for batch in batches {
        for _pass in 0..2 {
            // The same batch twice: the ascent at w, the descent at w + e.
            let grads = GradientsParams::from_grads(model.loss(&batch).backward(), &model);
            model = optim.step(lr, model, grads);
        }
    }
    // snippet-end
    assert_eq!(optim.stats().steps, 3);
    drop(model);
    Ok(())
}

#[test]
fn split_losses() -> Result {
    let (lr, batches) = (0.05, batches(3));
    let mut model = model();
    let mut reports = Vec::new();
    // snippet: split-losses
    use burn::optim::{GradientsParams, SgdConfig};
    use burn_sam::strategy::Linkable;
    use burn_sam::SamConfig;

    let mut optim = SamConfig::new().try_init(SgdConfig::new().init::<B, Classifier<B>>())?;
    let link = optim.step_link();
    for batch in batches {
        let loss = model.loss(&batch);
        link.note_loss(loss.clone().detach(), 1.0); // 1.0: the whole batch
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let perturbed = optim.ascend(lr, model, grads)?;
        let loss = perturbed.loss(&batch);
        link.note_loss(loss.clone().detach(), 1.0); // at w + e: an ascent awaits its descent
        let grads = GradientsParams::from_grads(loss.backward(), &perturbed);
        let (stepped, report) = optim.descend(lr, perturbed, grads)?;
        println!("L(w) {}, sharpness {}", report.loss, report.sharpness());
        model = stepped;
        reports.push(report);
    }
    // snippet-end
    assert_eq!(reports.len(), 3);
    for report in reports {
        assert!(
            report.loss.is_finite() && report.sharpness() > 0.0,
            "{report:?}"
        );
    }
    drop(model);
    Ok(())
}

#[test]
fn momentum_sam() -> Result {
    let (lr, batches) = (0.05, batches(4));
    let mut model = model();
    // snippet: momentum-sam
    use burn::optim::momentum::MomentumConfig;
    use burn::optim::SgdConfig;
    use burn_sam::{SamConfig, SamVariant};

    let sgd = SgdConfig::new().with_momentum(Some(MomentumConfig::new().with_dampening(0.0)));
    let mut optim = SamConfig::new()
        .with_rho(3.0)
        .with_variant(SamVariant::momentum_sam()) // mu 0.9, as SGD's momentum
        .try_init(sgd.init())?;

    for batch in batches {
        // One pass per step, at the look-ahead w~; `model` comes back at w.
        model = optim
            .step_with(lr, model, |m: &Classifier<B>| m.loss(&batch))?
            .module;
    }
    // snippet-end
    let stats = optim.stats();
    assert_eq!(
        (stats.steps, stats.ascents_skipped, stats.updates_skipped),
        (4, 0, 0)
    );
    // The look-ahead of the next step is away from the weights `model` holds.
    let weights = model.mlp.layers[0].weight.val().into_data();
    let ahead = optim.ascend(lr, model, burn::optim::GradientsParams::new())?;
    assert_ne!(ahead.mlp.layers[0].weight.val().into_data(), weights);
    Ok(())
}

#[test]
fn mixed_precision() -> Result {
    let (lr, batch) = (0.05, batches(1).remove(0));
    let model = model();
    // snippet: mixed-precision
    use burn::optim::AdamConfig;
    use burn::tensor::FloatDType;
    use burn_sam::{LossScalerConfig, SamConfig};

    let model = burn_sam::try_cast_params(model, FloatDType::F16)?; // f16 parameters
    let mut optim = SamConfig::new()
        .with_loss_scaling(Some(LossScalerConfig::new())) // PyTorch GradScaler's defaults
        .with_max_grad_norm(Some(1.0)) // optional: clip_grad_norm_ after unscaling, once per step
        .try_init(AdamConfig::new().init())?;
    let step = optim.step_with(lr, model, |m: &Classifier<B>| m.loss(&batch))?; // the same closure
    println!(
        "{:?} at loss scale {}",
        step.report.outcome, step.report.loss_scale
    );
    // snippet-end
    assert_eq!(
        step.module.mlp.layers[0].weight.val().dtype(),
        burn::tensor::DType::F16
    );
    Ok(())
}

#[test]
fn accumulation() -> Result {
    let lr = 0.05;
    let batches = batches(5).into_iter();
    let mut model = model();
    // snippet: accumulation
    use burn::optim::AdamConfig;
    use burn_sam::SamConfig;
    use burn_sam_accum::{AccumulationConfig, Ascent, MicroBatch};

    // Any Burn optimizer, a `MixedPrecision` one, or a `Sam` one.
    let sam = SamConfig::new().try_init(AdamConfig::new().init())?;
    let mut accumulation = AccumulationConfig::new(4) // micro-batches per step
        .with_ascent(Ascent::Synced) // or Ascent::Local (m-sharpness)
        .try_init(sam)?;

    // Weighted by item count (or `MicroBatch::new(b)` for equal weights).
    let micro_batches = batches.map(|b| MicroBatch::with_items(b.clone(), b.targets.dims()[0]));
    for window in accumulation.windows(micro_batches) {
        // The last window holds the rest.
        let step = accumulation.step(lr, model, &window, |m: &Classifier<B>, b| m.loss(b))?;
        model = step.module; // step.loss: the window's loss; step.report: what happened
    }
    // snippet-end
    assert_eq!(accumulation.optimizer().stats().steps, 2);
    drop(model);
    Ok(())
}

/// Weights of a model, for bitwise comparison.
fn weights(model: &Classifier<B>) -> Vec<Vec<f32>> {
    model
        .mlp
        .layers
        .iter()
        .flat_map(|layer| {
            let bias = layer.bias.as_ref().map(|bias| bias.val().into_data());
            [Some(layer.weight.val().into_data()), bias]
        })
        .flatten()
        .map(|data| data.convert::<f32>().to_vec().expect("f32 data"))
        .collect()
}

#[test]
fn resume() -> Result {
    resume_snippet(false)
}

/// The resume snippet with f16 parameters: the loaded model comes back f32, `resume` puts it
/// back to f16, and the run continues bitwise.
#[test]
fn resume_f16() -> Result {
    resume_snippet(true)
}

fn resume_snippet(f16: bool) -> Result {
    let (lr, batches, device) = (0.05, batches(4), Default::default());
    let dir = std::env::temp_dir().join(format!(
        "burn-sam-snippet-{}-resume-{f16}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    let mut model = match f16 {
        true => burn_sam::cast_params(model(), burn::tensor::FloatDType::F16),
        false => model(),
    };
    let fresh = model.clone(); // the same architecture: its weights are replaced by the loaded ones
    let _ = weights(&model); // read every parameter before the runs (Burn initialises lazily)
    let uninterrupted = {
        let mut optim = burn_sam::SamConfig::new()
            .with_rho(0.05)
            .try_init(burn::optim::AdamConfig::new().init())?;
        let mut model = model.clone();
        for batch in &batches {
            model = optim
                .step_with(lr, model, |m: &Classifier<B>| m.loss(batch))?
                .module;
        }
        weights(&model)
    };
    let (before, after) = batches.split_at(2);
    // snippet: resume
    use burn::module::Module;
    use burn::optim::{AdamConfig, Optimizer};
    use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
    use burn_sam::{LossScaling, SamConfig};

    // Full precision: `CompactRecorder` would store the weights and Adam's moments in f16.
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let config = SamConfig::new().with_rho(0.05);
    let mut optim = config.try_init(AdamConfig::new().init())?;
    for batch in before {
        model = optim
            .step_with(lr, model, |m: &Classifier<B>| m.loss(batch))?
            .module;
    }
    // Save both: the model, and the optimizer's record (Adam's moments, SAM's counters and
    // state, the model's float types and, labelled with the model, its fingerprint).
    optim.label_model(&model);
    model.save_file(dir.join("model"), &recorder)?;
    recorder.record(optim.to_record(), dir.join("optim"))?;

    // Resume, in this process or a new one: a model of the same architecture, the same config.
    let model = fresh.load_file(dir.join("model"), &recorder, &device)?;
    let optim = config.try_init(AdamConfig::new().init())?;
    // A record it cannot continue exactly is refused here, naming the fix (`Sam::check_record`).
    let mut optim = optim.load_record(recorder.load(dir.join("optim"), &device)?);
    // Burn loads f16 parameters as f32: `resume` casts them back, and checks the fingerprint.
    let mut model = optim.resume(model)?;
    for batch in after {
        model = optim
            .step_with(lr, model, |m: &Classifier<B>| m.loss(batch))?
            .module;
    }
    // snippet-end
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        weights(&model),
        uninterrupted,
        "the resumed run is the uninterrupted one"
    );
    let dtype = model.mlp.layers[0].weight.val().dtype();
    assert_eq!(dtype == burn::tensor::DType::F16, f16, "{dtype:?}");
    Ok(())
}

/// The Learner program of the front page and the guide: SAM (`f16` false) or f16 SAM
/// with loss scaling.
fn learner_program(f16: bool) -> Result {
    let device = burn::tensor::Device::<B>::default();
    let artifact_dir =
        std::env::temp_dir().join(format!("burn-sam-snippet-{}-{f16}", std::process::id()));
    let loader_train = digits_loader::<B>(digits(256), 32, 1);
    let loader_valid = digits_loader::<Flex>(digits(64), 32, 1);
    let (epochs, lr_scheduler) = (1, 0.05);
    let model = model();
    let result = if f16 {
        // snippet: learner-f16
        use burn::tensor::FloatDType;
        use burn_sam::{LossScalerConfig, SamConfig};
        use burn_sam_accum::train::SamTraining;

        let model = burn_sam::try_cast_params(model, FloatDType::F16)?;
        let optim = SamConfig::new()
            .with_rho(0.05)
            .with_loss_scaling(Some(LossScalerConfig::new()))
            .try_init(SgdConfig::new().init())?;
        // snippet-end
        let strategy = SamTraining::new(device, &optim).into_strategy();
        SupervisedTraining::new(&artifact_dir, loader_train, loader_valid)
            .renderer(Quiet)
            .with_application_logger(None)
            .num_epochs(epochs)
            .with_training_strategy(strategy)
            .launch(Learner::new(model, optim, lr_scheduler))
    } else {
        // snippet: learner
        use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
        use burn_sam::SamConfig;
        use burn_sam_accum::train::{SamMetric, SamTraining};

        let optim = SamConfig::new()
            .with_rho(0.05)
            .try_init(SgdConfig::new().init())?;
        let strategy = SamTraining::new(device, &optim)
            .with_accumulation(4)? // optional: 4 batches per optimizer step
            .with_items(|batch: &ClassBatch<B>| batch.targets.dims()[0]) // optional: weigh batches by their size
            .into_strategy();
        let result = SupervisedTraining::new(&artifact_dir, loader_train, loader_valid)
            .metrics((AccuracyMetric::new(), LossMetric::new()))
            .metric_train_numeric(SamMetric::sharpness(&optim)) // optional: L(w + e) - L(w) per step
            // Full precision, so that a resumed run continues exactly: `CompactRecorder` stores the
            // model's and the base optimizer's float tensors in f16.
            .with_file_checkpointer(NamedMpkFileRecorder::<FullPrecisionSettings>::new())
            .num_epochs(epochs)
            .with_training_strategy(strategy)
            .launch(Learner::new(model, optim, lr_scheduler));
        // snippet-end
        let lines = |metric: &str| -> std::io::Result<usize> {
            let log = artifact_dir.join(format!("train/epoch-1/{metric}.log"));
            Ok(std::fs::read_to_string(log)?.lines().count())
        };
        assert_eq!(
            lines("SAM_Sharpness")?,
            lines("Loss")?,
            "one line per batch"
        );
        result
    };
    let _ = std::fs::remove_dir_all(&artifact_dir);
    let dtype = result.model.mlp.layers[0].weight.val().dtype();
    let expected = if f16 {
        FloatDType::F16
    } else {
        FloatDType::F32
    };
    assert_eq!(dtype, burn::tensor::DType::from(expected));
    Ok(())
}

#[test]
fn learner() -> Result {
    learner_program(false)
}

#[test]
fn learner_metrics() -> Result {
    use burn_sam::SamConfig;
    use burn_sam_accum::train::SamTraining;

    let device = burn::tensor::Device::<B>::default();
    let artifact_dir =
        std::env::temp_dir().join(format!("burn-sam-snippet-{}-metrics", std::process::id()));
    let loader_train = digits_loader::<B>(digits(256), 32, 1);
    let loader_valid = digits_loader::<Flex>(digits(64), 32, 1);
    let optim = SamConfig::new()
        .with_rho(0.05)
        .try_init(SgdConfig::new().init())?;
    // snippet: learner-metrics
    use burn_sam_accum::train::SamMetric;

    let training = SupervisedTraining::new(&artifact_dir, loader_train, loader_valid)
        .metric_train_numeric(SamMetric::sharpness(&optim)) // L(w + e) - L(w)
        .metric_train_numeric(SamMetric::grad_norm(&optim)) // the norm SAM divides by
        .metric_train_numeric(SamMetric::loss_scale(&optim)) // f16: the step's loss scale
        .metric_train_numeric(SamMetric::overflowed_steps(&optim)) // f16: % of steps skipped
        .metric_train_numeric(SamMetric::sam_steps(&optim)); // % of steps with two passes
                                                             // snippet-end
    let strategy = SamTraining::new(device, &optim).into_strategy();
    training
        .renderer(Quiet)
        .with_application_logger(None)
        .num_epochs(1)
        .with_training_strategy(strategy)
        .launch(Learner::new(model(), optim, 0.05));
    let logged = |metric: &str| -> std::io::Result<String> {
        std::fs::read_to_string(artifact_dir.join(format!("train/epoch-1/{metric}.log")))
    };
    let steps = logged("SAM_Steps")?;
    assert!(
        !steps.is_empty() && steps.lines().all(|line| line == "100,1"),
        "{steps}"
    );
    for metric in [
        "SAM_Sharpness",
        "SAM_Gradient_Norm",
        "Loss_Scale",
        "Overflowed_Steps",
    ] {
        assert_eq!(
            logged(metric)?.lines().count(),
            steps.lines().count(),
            "{metric}"
        );
    }
    let _ = std::fs::remove_dir_all(&artifact_dir);
    Ok(())
}

#[test]
fn learner_f16() -> Result {
    learner_program(true)
}

#[test]
fn learner_data_parallel() -> Result {
    let device = burn::tensor::Device::<B>::default();
    let artifact_dir =
        std::env::temp_dir().join(format!("burn-sam-snippet-{}-dp", std::process::id()));
    let loader_train = digits_loader::<B>(digits(256), 32, 1);
    let loader_valid = digits_loader::<Flex>(digits(64), 32, 1);
    let (epochs, lr_scheduler) = (1, 0.05);
    let model = model();
    let param_bytes = 4.0 * burn::module::Module::num_params(&model) as f64;
    // snippet: learner-data-parallel
    use burn_sam::SamConfig;
    use burn_sam_accum::train::{Ascent, SamTraining};

    let optim = SamConfig::new()
        .with_rho(0.05)
        .try_init(SgdConfig::new().init())?;
    // The main device first; with CUDA: vec![CudaDevice::new(0), CudaDevice::new(1)].
    let devices = vec![device; 2];
    let strategy = SamTraining::data_parallel(devices, &optim, Ascent::Synced)?
        // Weigh batches by their size, across replicas too.
        .with_items(|batch: &ClassBatch<B>| batch.targets.dims()[0]);
    // Bytes moved between devices: a counter shared with the strategy, to read during or after
    // training (`into_strategy` consumes the strategy, so take it first).
    let traffic = strategy.traffic();
    let strategy = strategy.into_strategy();
    // snippet-end
    let result = SupervisedTraining::new(&artifact_dir, loader_train, loader_valid)
        .renderer(Quiet)
        .with_application_logger(None)
        .num_epochs(epochs)
        .with_training_strategy(strategy)
        .launch(Learner::new(model, optim, lr_scheduler));
    let _ = std::fs::remove_dir_all(&artifact_dir);
    drop(result);
    // Synced SAM sends the model and the perturbed model out, and two gradients back, per
    // step: 4 (N - 1) P bytes, P the f32 parameters' (README's table).
    assert!(traffic.steps() > 0);
    assert_eq!(traffic.bytes_per_step(), 4.0 * param_bytes);
    Ok(())
}

/// The documents whose Rust blocks are compiled here: the front page and the guide's chapters.
const DOCUMENTS: [(&str, &str); 14] = [
    ("README.md", include_str!("../README.md")),
    (
        "guide/src/SUMMARY.md",
        include_str!("../guide/src/SUMMARY.md"),
    ),
    (
        "guide/src/using-sam.md",
        include_str!("../guide/src/using-sam.md"),
    ),
    (
        "guide/src/choosing.md",
        include_str!("../guide/src/choosing.md"),
    ),
    (
        "guide/src/mixed-precision.md",
        include_str!("../guide/src/mixed-precision.md"),
    ),
    (
        "guide/src/accumulation.md",
        include_str!("../guide/src/accumulation.md"),
    ),
    (
        "guide/src/learner.md",
        include_str!("../guide/src/learner.md"),
    ),
    (
        "guide/src/data-parallel.md",
        include_str!("../guide/src/data-parallel.md"),
    ),
    ("guide/src/ranks.md", include_str!("../guide/src/ranks.md")),
    (
        "guide/src/resuming.md",
        include_str!("../guide/src/resuming.md"),
    ),
    (
        "guide/src/main-example.md",
        include_str!("../guide/src/main-example.md"),
    ),
    (
        "guide/src/gpu-check.md",
        include_str!("../guide/src/gpu-check.md"),
    ),
    (
        "guide/src/troubleshooting.md",
        include_str!("../guide/src/troubleshooting.md"),
    ),
    ("guide/src/tests.md", include_str!("../guide/src/tests.md")),
];

/// The sources holding the regions the documents show.
const SOURCES: [&str; 3] = [
    include_str!("snippets.rs"),
    include_str!("../src/classifier.rs"),
    include_str!("mpi_ranks.rs"),
];

/// The lines between `// snippet: name` and `// snippet-end`, dedented.
fn region(name: &str) -> Vec<String> {
    let source = SOURCES.join("\n");
    let start = format!("// snippet: {name}");
    let lines: Vec<&str> = source
        .lines()
        .skip_while(|line| line.trim() != start)
        .skip(1)
        .take_while(|line| line.trim() != "// snippet-end")
        .collect();
    let lines = match lines.iter().rposition(|line| !line.trim().is_empty()) {
        Some(last) => &lines[..=last],
        None => &lines[..0],
    };
    assert!(!lines.is_empty(), "no region `{name}`");
    let indent = lines
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.len() - line.trim_start().len())
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .map(|line| line.get(indent..).unwrap_or("").to_string())
        .collect()
}

/// The names of the snippets `document` shows, each checked against its region; every `rust`
/// block must be one.
fn checked_snippets<'a>(path: &str, document: &'a str) -> Vec<&'a str> {
    let lines: Vec<&str> = document.lines().collect();
    let mut checked = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        if let Some(name) = line
            .strip_prefix("<!-- snippet: ")
            .and_then(|rest| rest.strip_suffix(" -->"))
        {
            let open = lines[index + 1];
            let body: Vec<&str> = lines[index + 2..]
                .iter()
                .take_while(|line| !line.starts_with("```"))
                .copied()
                .collect();
            let shown: Vec<String> = match open {
                "```rust" => body.iter().map(|line| line.to_string()).collect(),
                // The program after the change: added and unchanged lines.
                "```diff" => body
                    .iter()
                    .filter(|line| !line.starts_with('-'))
                    .map(|line| line.get(1..).unwrap_or("").to_string())
                    .collect(),
                other => panic!("{path}: block `{name}` opens with {other:?}"),
            };
            assert_eq!(
                shown,
                region(name),
                "{path}: block `{name}` differs from its region"
            );
            checked.push(name);
        } else if line.trim_start() == "```rust" {
            let marked = index > 0 && lines[index - 1].starts_with("<!-- snippet: ");
            assert!(
                marked,
                "{path} line {}: a rust block without a test",
                index + 1
            );
        }
    }
    checked
}

#[test]
fn documents_show_these_tests() {
    let chapters: Vec<String> = std::fs::read_dir("guide/src")
        .expect("the guide's chapters")
        .map(|entry| {
            let name = entry.expect("a chapter").file_name();
            format!("guide/src/{}", name.to_string_lossy())
        })
        .collect();
    for chapter in &chapters {
        assert!(
            DOCUMENTS.iter().any(|(path, _)| path == chapter),
            "{chapter} is not in DOCUMENTS: its snippets would go unchecked"
        );
    }
    let shown: Vec<&str> = DOCUMENTS
        .iter()
        .flat_map(|(path, document)| checked_snippets(path, document))
        .collect();
    let regions = SOURCES.iter().flat_map(|source| {
        source
            .lines()
            .filter_map(|line| line.trim().strip_prefix("// snippet: "))
    });
    for name in regions {
        assert!(
            shown.contains(&name),
            "no document shows the region `{name}`"
        );
    }
    // The front page's quick starts: the direct loop, and the f16 `Learner` in three changes.
    let front = checked_snippets("README.md", DOCUMENTS[0].1);
    for name in [
        "quick-start",
        "learner",
        "learner-f16",
        "train-step",
        "f16-forward",
    ] {
        assert!(front.contains(&name), "README.md shows no `{name}` block");
    }
}
