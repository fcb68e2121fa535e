//! Project tasks: `cargo xtask <task>`.
//!
//! - `ci`: formatting, clippy, the tests, the CUDA build, and the Vulkan suite when Mesa's
//!   lavapipe is installed (`.ci/run` runs this).
//! - `test-gpu [--build-only]`: the suite and a short run of the main example on CUDA.
//! - `test-vulkan`: the suite on Vulkan (Mesa lavapipe on the CPU), f32 and f16.
//! - `test-tch`: the suite on LibTorch (the `torch` Python package's), f32 and f64.
//! - `reference`: regenerates the PyTorch reference fixtures (needs `python3` with `torch`).
//! - `bench`: runs the benchmarks on Flex and prints SAM's cost against its limits.

mod backends;
mod bench;

use std::process::{exit, Command};

/// Runs `program args`, exiting with its status when it fails.
pub fn run(program: &str, args: &[&str]) {
    run_with(program, args, &[]);
}

/// Runs `program args` with extra environment variables, exiting when it fails.
pub fn run_with(program: &str, args: &[&str], env: &[(&str, String)]) {
    eprintln!("$ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .status()
        .unwrap_or_else(|error| fail(&format!("cannot start {program}: {error}")));
    if !status.success() {
        eprintln!("`{program} {}` failed: {status}", args.join(" "));
        exit(status.code().unwrap_or(1));
    }
}

/// Prints `message` and exits with status 1.
pub fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    exit(1)
}

fn ci() {
    run("cargo", &["fmt", "--all", "--", "--check"]);
    run(
        "cargo",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--features",
            "vulkan,cuda",
            "--",
            "-D",
            "warnings",
        ],
    );
    // The README's test command.
    run("cargo", &["test", "--workspace"]);
    // The GPU paths compile on every machine, so that they never rot: the CUDA and Vulkan test
    // files and the main example (clippy above checked every target with these features).
    run(
        "cargo",
        &[
            "test",
            "--features",
            "vulkan,cuda",
            "--no-run",
            "--test",
            "cuda",
            "--test",
            "cuda_f16",
            "--test",
            "vulkan",
            "--test",
            "vulkan_f16",
            "--example",
            "noisy-digits",
            "--example",
            "learner-digits",
        ],
    );
    if backends::lavapipe_installed() {
        backends::test_vulkan(&["--features", "vulkan,cuda"]);
    } else {
        eprintln!("Mesa lavapipe is not installed: skipping the Vulkan suite (see `cargo xtask test-vulkan`)");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["ci"] => ci(),
        ["test-gpu"] => backends::test_gpu(false),
        ["test-gpu", "--build-only"] => backends::test_gpu(true),
        ["test-vulkan"] => {
            backends::require_lavapipe();
            backends::test_vulkan(&["--features", "vulkan"]);
        }
        ["test-tch"] => backends::test_tch(),
        ["reference"] => {
            run("python3", &["reference/sam_reference.py"]);
            run("python3", &["reference/scaler_reference.py"]);
        }
        ["bench"] => bench::bench(),
        _ => {
            eprintln!(
                "usage: cargo xtask <ci | test-gpu [--build-only] | test-vulkan | test-tch | reference | bench>"
            );
            exit(2);
        }
    }
}
