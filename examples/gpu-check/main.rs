//! The whole GPU check in one binary, for a GPU host without a Rust toolchain or a network:
//! the conformance suite in f32 and f16, short runs of `noisy-digits` and `learner-digits` in
//! f16, and SAM's cost against its floor. `cargo xtask gpu-bundle` builds it with `--features
//! cuda,fusion` (Burn's fusion without its autotune, see `xtask/src/backends.rs`) into a folder with the data set and
//! `run.sh`; without `cuda` it runs the same stages on Flex (CPU), which is how the bundle is
//! tried on a machine without a GPU.
//!
//! `gpu-check all` runs every stage as a child process with a time limit (a crash or a hang
//! costs one stage, not the report), writes `gpu-report.json` and prints a table.

#[path = "../learner-digits/main.rs"]
#[allow(dead_code)] // its `main`
mod learner_digits;
#[path = "../noisy-digits/main.rs"]
#[allow(dead_code)] // its `main`
mod noisy_digits;
#[path = "../../tests/suite/mod.rs"]
mod suite;

mod bench;
mod launches;
mod report;
mod suite_runner;

use std::path::PathBuf;

use burn::backend::Autodiff;
use clap::{Parser, Subcommand, ValueEnum};

#[cfg(not(feature = "cuda"))]
type Backend = burn::backend::Flex;
#[cfg(feature = "cuda")]
type Backend = burn::backend::Cuda;
type B = Autodiff<Backend>;

const BACKEND: &str = if cfg!(all(
    feature = "cuda",
    feature = "fusion",
    feature = "autotune"
)) {
    "CUDA (fusion, autotune)"
} else if cfg!(all(feature = "cuda", feature = "fusion")) {
    "CUDA (fusion)"
} else if cfg!(feature = "cuda") {
    "CUDA"
} else {
    "Flex (CPU)"
};

// CUDA's f32 matmuls run on tensor cores with TF32 inputs (see the suite's `MatmulInputs`).
#[cfg(feature = "cuda")]
const MATMUL_INPUTS: suite::util::MatmulInputs = suite::util::MatmulInputs::Tf32;
#[cfg(not(feature = "cuda"))]
const MATMUL_INPUTS: suite::util::MatmulInputs = suite::util::MatmulInputs::F32;

backend_suite!(
    list,
    suite_f32,
    crate::B,
    burn::tensor::FloatDType::F32,
    crate::MATMUL_INPUTS
);
f16_suite!(list, suite_f16, crate::B);
f16_params_suite!(list, suite_f16_params, crate::B);

#[derive(Parser, Debug)]
#[command(about = "burn-sam's GPU check: the suite, the examples in f16, SAM's cost")]
struct Cli {
    /// CubeCL's compiled kernels and autotune results in this folder (CUDA), shared by the
    /// processes that name it.
    #[arg(long, global = true)]
    kernel_cache: Option<PathBuf>,
    /// With `--kernel-cache`: a line per kernel compiled and per autotune run, to this file.
    #[arg(long, global = true, requires = "kernel_cache")]
    kernel_log: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Every stage below in a child process of its own, then the report.
    All(report::Options),
    /// The conformance suite in one float type, in this process; results as JSON to `--json`.
    Suite {
        #[arg(value_enum)]
        dtype: Dtype,
        #[arg(long)]
        json: PathBuf,
    },
    /// Paired timings of SAM against its floor on two MLPs, a CNN with and without BatchNorm, a
    /// narrow ResNet-18 and a transformer encoder.
    Bench {
        /// Interleaved rounds per timing (one step of every function per round), >= 1.
        #[arg(long, default_value_t = 20)]
        rounds: usize,
        /// Rows per batch, >= 1.
        #[arg(long, default_value_t = 128)]
        batch: usize,
        /// The models to time, of mlp_100k, mlp_2m, cnn, cnn_bn, resnet18, encoder.
        #[arg(long, value_delimiter = ',', default_values_t = bench::MODELS.map(String::from))]
        models: Vec<String>,
        #[arg(long)]
        json: PathBuf,
    },
    /// Kernel launches and host waits per step of SAM and its family over their floors, on
    /// MLPs of 4 and 62 parameter tensors; results as JSON to `--json`.
    Launches {
        #[arg(long)]
        json: PathBuf,
    },
    /// `noisy-digits` with its own flags (`gpu-check noisy-digits -- --help`).
    NoisyDigits {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// `learner-digits` with its own flags; the accuracy as JSON to `--json`.
    LearnerDigits {
        #[arg(long)]
        json: PathBuf,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Dtype {
    F32,
    F16,
}

fn main() {
    let cli = Cli::parse();
    // Counting launches adds a log line per kernel: only for the stage that counts them.
    let counting = matches!(cli.command, Command::Launches { .. });
    let fallback = std::env::temp_dir().join(format!("gpu-check-{}", std::process::id()));
    let log = match (&cli.kernel_cache, &cli.kernel_log) {
        (Some(dir), Some(log)) => Some((dir.clone(), log.clone())),
        (Some(dir), None) => Some((dir.clone(), dir.join("kernels.log"))),
        (None, _) if counting => Some((fallback.clone(), fallback.join("kernels.log"))),
        (None, _) => None,
    };
    if let Some((dir, log)) = &log {
        kernel_cache(dir, log, counting);
    }
    let result = match cli.command {
        Command::All(options) => report::all(&options),
        Command::Suite { dtype, json } => suite_runner::run(dtype, &json),
        Command::Bench {
            rounds,
            batch,
            models,
            json,
        } => bench::run(rounds, batch, &models, &json),
        Command::Launches { json } => {
            let (_, log) = log.expect("a kernel log whenever launches are counted");
            launches::run(&log, &json)
        }
        Command::NoisyDigits { args } => {
            let args = noisy_digits::Args::parse_from(with_program("noisy-digits", args));
            noisy_digits::run(&args).map(drop)
        }
        Command::LearnerDigits { json, args } => {
            let args = learner_digits::Args::parse_from(with_program("learner-digits", args));
            learner_digits::run(&args).and_then(|accuracy| {
                report::write_json(&json, &serde_json::json!({ "test_accuracy": accuracy }))
            })
        }
    };
    if let Err(error) = result {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

/// Points CubeCL's caches at `dir` and its log of compilations (with `counting`, also of
/// launches) at `log`.
#[cfg(feature = "cuda")]
fn kernel_cache(dir: &std::path::Path, log: &std::path::Path, counting: bool) {
    let cache = burn_sam_suite::kernels::KernelCache {
        dir: dir.to_path_buf(),
        log: log.to_path_buf(),
    };
    match counting {
        true => cache.install_counting_launches(),
        false => cache.install(),
    }
}

/// Flex compiles nothing: there is no kernel cache to point anywhere.
#[cfg(not(feature = "cuda"))]
fn kernel_cache(_dir: &std::path::Path, _log: &std::path::Path, _counting: bool) {}

/// `args` as a command line of `program`, for clap.
fn with_program(program: &str, args: Vec<String>) -> Vec<String> {
    std::iter::once(program.to_string()).chain(args).collect()
}
