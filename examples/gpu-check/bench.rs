//! SAM's cost on this backend: paired medians (interleaved rounds, a device sync after every
//! step) of a base step, SAM's floor (two passes) and a SAM step, in f32 and f16, and of
//! loss-scaled against unscaled f16 SAM, and Momentum-SAM against momentum SGD, on the five
//! models `cargo xtask bench` times on the CPU backends (so that the CUDA row joins its table;
//! the narrow ResNet-18 and the encoder have as many parameter tensors as users' models) and
//! the CNN with BatchNorm; with burn-sam's host waits per SAM step. Then the same in bursts of
//! back-to-back steps with one sync per burst, as training runs them, SAM as it ends each
//! step (launching its queue without a wait, with burn-sam's `fusion` and `cuda` features),
//! without that end, and with a device sync after it (how steps ended before): what each
//! costs.

use std::path::Path;

use burn::optim::momentum::MomentumConfig;
use burn::optim::SgdConfig;
use burn::tensor::backend::Backend as _;
use burn::tensor::FloatDType;
use burn_sam::{LossScalerConfig, SamConfig, SamVariant};
use burn_sam_suite::bench::{
    base_step, batch, burst_medians, copy_as, paired_medians, sam_step, two_passes_step, CnnConfig,
    EncoderConfig, Net, ResNetConfig, Step, Timed, MLP_100K, MLP_2M,
};
use burn_sam_suite::MlpConfig;
use serde_json::{json, Map, Value};

use crate::report::write_json;
use crate::B;

/// Steps of each function before timing: kernels compile and autotune on their first use.
const WARM_UP: usize = 3;
/// Back-to-back steps per burst.
const BURST: usize = 8;
/// Rounds of bursts, at most.
const BURST_ROUNDS: usize = 5;

/// The models `bench` times, by name.
pub const MODELS: [&str; 6] = ["mlp_100k", "mlp_2m", "cnn", "cnn_bn", "resnet18", "encoder"];

pub fn run(rounds: usize, rows: usize, names: &[String], json: &Path) -> Result<(), String> {
    if rounds == 0 || rows == 0 {
        return Err(format!(
            "--rounds = {rounds}, --batch = {rows}: both must be >= 1"
        ));
    }
    if let Some(name) = names.iter().find(|name| !MODELS.contains(&name.as_str())) {
        return Err(format!(
            "--models: no model {name}; allowed: {}",
            MODELS.join(", ")
        ));
    }
    let device = Default::default();
    B::seed(&device, 0);
    let mut models = Map::new();
    let mlp = |sizes: &[usize]| MlpConfig::new(sizes.to_vec()).init::<B>(&device);
    let cnn = |batch_norm| {
        CnnConfig::new()
            .with_batch_norm(batch_norm)
            .init::<B>(&device)
    };
    for name in MODELS
        .iter()
        .filter(|model| names.iter().any(|name| name == *model))
    {
        let facts = match *name {
            "mlp_100k" => bench_model(mlp(&MLP_100K), rounds, rows),
            "mlp_2m" => bench_model(mlp(&MLP_2M), rounds, rows),
            "cnn" => bench_model(cnn(false), rounds, rows),
            "cnn_bn" => bench_model(cnn(true), rounds, rows),
            "resnet18" => bench_model(ResNetConfig::new().init::<B>(&device), rounds, rows),
            "encoder" => bench_model(EncoderConfig::new().init::<B>(&device), rounds, rows),
            other => unreachable!("{other} is not in MODELS"),
        };
        models.insert(name.to_string(), facts);
    }
    let report = json!({
        "backend": crate::BACKEND,
        "batch": rows,
        "rounds": rounds,
        "models": models,
    });
    write_json(json, &report)
}

fn bench_model<M: Net<B>>(model: M, rounds: usize, rows: usize) -> Value {
    // Initialise the lazy parameters once, so that every clone starts from the same weights.
    let model = copy_as(&model, FloatDType::F32);
    let model_f16 = copy_as(&model, FloatDType::F16);
    let (f32_batch, f16_batch) = (
        batch::<B>(rows, FloatDType::F32),
        batch::<B>(rows, FloatDType::F16),
    );
    // Large enough for the gradients, small enough for f16 (no overflow, no skipped steps).
    let scaled =
        SamConfig::new().with_loss_scaling(Some(LossScalerConfig::new().with_init_scale(256.0)));
    let momentum =
        || SgdConfig::new().with_momentum(Some(MomentumConfig::new().with_dampening(0.0)));
    let msam = SamConfig::new().with_variant(SamVariant::momentum_sam());
    let timed = |name, start, step| Timed { name, start, step };
    let mut steps: Vec<Timed<M>> = vec![
        timed("base_f32", &model, base_step(SgdConfig::new(), &f32_batch)),
        timed("two_passes_f32", &model, two_passes_step(&f32_batch)),
        timed(
            "sam_f32",
            &model,
            sam_step(SamConfig::new(), SgdConfig::new(), &f32_batch),
        ),
        timed(
            "base_f16",
            &model_f16,
            base_step(SgdConfig::new(), &f16_batch),
        ),
        timed("two_passes_f16", &model_f16, two_passes_step(&f16_batch)),
        timed(
            "sam_f16",
            &model_f16,
            sam_step(SamConfig::new(), SgdConfig::new(), &f16_batch),
        ),
        timed(
            "scaled_sam_f16",
            &model_f16,
            sam_step(scaled, SgdConfig::new(), &f16_batch),
        ),
        timed("momentum_f32", &model, base_step(momentum(), &f32_batch)),
        timed("msam_f32", &model, sam_step(msam, momentum(), &f32_batch)),
    ];
    let mut states: Vec<Option<M>> = steps.iter().map(|_| None).collect();
    eprintln!("warming up ({WARM_UP} steps of each)");
    paired_medians::<B, M>(&mut steps, &mut states, WARM_UP);
    let waits = burn_sam::diagnostics::host_waits();
    let medians = paired_medians::<B, M>(&mut steps, &mut states, rounds);
    // Four SAM steps (f32, f16, loss-scaled f16, Momentum-SAM) per round.
    let waits_per_sam_step =
        (burn_sam::diagnostics::host_waits() - waits) as f64 / (4 * rounds) as f64;
    let ms = by_name(&medians);
    let of = |name: &str| ms[name].as_f64().expect("a timing");
    let ratios = json!({
        "sam_over_base_f32": of("sam_f32") / of("base_f32"),
        "sam_over_two_passes_f32": of("sam_f32") / of("two_passes_f32"),
        "sam_over_base_f16": of("sam_f16") / of("base_f16"),
        "sam_over_two_passes_f16": of("sam_f16") / of("two_passes_f16"),
        "scaled_over_unscaled_f16": of("scaled_sam_f16") / of("sam_f16"),
        "msam_over_base_f32": of("msam_f32") / of("momentum_f32"),
    });
    eprintln!("{}", json!({ "ms": ms, "ratios": ratios }));
    let bursts = bursts(&model, &f32_batch, rounds.min(BURST_ROUNDS));
    json!({
        "params": model.num_params(),
        "ms": ms,
        "ratios": ratios,
        "host_waits_per_sam_step": waits_per_sam_step,
        "bursts": bursts,
    })
}

/// Per-step medians of bursts of [`BURST`] f32 steps: two passes, SAM, SAM without the sync
/// that ends each step, momentum SGD and Momentum-SAM.
fn bursts<M: Net<B>>(model: &M, batch: &burn_sam_suite::bench::Batch<B>, rounds: usize) -> Value {
    let momentum =
        || SgdConfig::new().with_momentum(Some(MomentumConfig::new().with_dampening(0.0)));
    let msam = SamConfig::new().with_variant(SamVariant::momentum_sam());
    let sam = || sam_step(SamConfig::new(), SgdConfig::new(), batch);
    let timed = |name, step| Timed {
        name,
        start: model,
        step,
    };
    let mut steps: Vec<Timed<M>> = vec![
        timed("two_passes", two_passes_step(batch)),
        timed("sam", sam()),
        timed("sam_no_closing_sync", without_closing_sync(sam())),
        timed("sam_then_sync", then_sync(sam())),
        timed("momentum", base_step(momentum(), batch)),
        timed("msam", sam_step(msam, momentum(), batch)),
    ];
    let mut states: Vec<Option<M>> = steps.iter().map(|_| None).collect();
    burst_medians::<B, M>(&mut steps, &mut states, 1, WARM_UP);
    let medians = burst_medians::<B, M>(&mut steps, &mut states, rounds, BURST);
    let ms = by_name(&medians);
    let of = |name: &str| ms[name].as_f64().expect("a timing");
    let ratios = json!({
        "sam_over_two_passes": of("sam") / of("two_passes"),
        "sam_no_closing_sync_over_two_passes": of("sam_no_closing_sync") / of("two_passes"),
        "msam_over_base": of("msam") / of("momentum"),
    });
    let report = json!({
        "steps": BURST,
        "rounds": rounds,
        "ms": ms,
        "ratios": ratios,
        "closing_launch_ms": of("sam") - of("sam_no_closing_sync"),
        "closing_sync_ms": of("sam_then_sync") - of("sam_no_closing_sync"),
    });
    eprintln!("bursts: {report}");
    report
}

/// Medians by step name, in ms.
fn by_name(medians: &[(&str, f64)]) -> Map<String, Value> {
    medians
        .iter()
        .map(|&(name, ms)| (name.to_string(), ms.into()))
        .collect()
}

/// `step` followed by a device sync, as burn-sam ended steps before it launched their queue.
fn then_sync<'a, M: 'a>(mut step: Step<'a, M>) -> Step<'a, M> {
    Box::new(move |model| {
        let model = step(model);
        B::sync(&Default::default()).expect("device sync");
        model
    })
}

/// `step` with the end of burn-sam's steps off (`diagnostics::set_closing_sync`).
fn without_closing_sync<'a, M: 'a>(mut step: Step<'a, M>) -> Step<'a, M> {
    Box::new(move |model| {
        burn_sam::diagnostics::set_closing_sync(false);
        let model = step(model);
        burn_sam::diagnostics::set_closing_sync(true);
        model
    })
}
