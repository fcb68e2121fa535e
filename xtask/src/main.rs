//! Project tasks: `cargo xtask <task>`.
//!
//! - `house`: the house rules of `crates/` (file and function lengths, the floors of
//!   ARCHITECTURE.md, no circle of imports).
//! - `ci`: the house rules, formatting, clippy and the docs with the GPU features, a publish dry run of the
//!   crates, the README's tests, a crate built from README's dependency lines outside the
//!   workspace, the Vulkan suite (also fused) when Mesa's lavapipe is installed, and the MPI
//!   tests when Open MPI is (`.ci/run` installs both and runs this).
//! - `test-gpu`: the GPU check (`examples/gpu-check`) on this machine's CUDA GPU, and the
//!   data-parallel tests where it has two or more.
//! - `gpu-bundle`: the GPU check as a folder to carry to a GPU host without Rust.
//! - `test-vulkan`: the suite on Vulkan (Mesa lavapipe on the CPU), f32 and f16, and the
//!   data-parallel tests over two device handles; the suite again with Burn's `fusion` and
//!   `autotune`.
//! - `test-mpi`: data-parallel SAM across MPI ranks (`tests/mpi_ranks.rs` under `mpirun` on
//!   loopback: 2 and 3 ranks, a refused mismatch, a dying rank and the resume after it).
//! - `test-tch`: the suite on LibTorch (the `torch` Python package's), f32 and f64.
//! - `reference`: regenerates the PyTorch reference fixtures (needs `python3` with `torch` and
//!   `pytorch_optimizer==4.1.0`).
//! - `bench [--backends a,b]`: runs the benchmarks on every backend this machine has (or the
//!   ones named) and prints SAM's cost against its limits.

mod backends;
mod bench;
mod house;
mod mpi;
mod readme_crate;

use std::path::{Path, PathBuf};
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

/// What CI checks, each step timed. Every target is type-checked with the GPU features by
/// clippy; code is generated three times: for the README's test command (CPU backends), for
/// the Vulkan suite, and for the Vulkan suite with Burn's fusion.
fn ci() {
    let mpi = mpi::installed();
    // With MPI, the `mpi` feature is linted and documented too (it links the MPI library).
    let features = match mpi {
        true => format!("{GPU_FEATURES},mpi"),
        false => GPU_FEATURES.to_string(),
    };
    house();
    let mut times = Vec::new();
    let mut step = |what: &'static str, args: &[&str], env: &[(&str, String)]| {
        let start = std::time::Instant::now();
        run_with("cargo", args, env);
        times.push((what, start.elapsed().as_secs_f64()));
    };
    step("fmt", &["fmt", "--all", "--", "--check"], &[]);
    step(
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--features",
            &features,
            "--",
            "-D",
            "warnings",
        ],
        &[],
    );
    // The same features as clippy, so that the dependencies' metadata is reused. The root
    // package turns on the published crates' only feature (`train`), so they are documented as
    // docs.rs builds them (`all-features`); the root's `tch` needs LibTorch and is left out.
    step(
        "doc",
        &["doc", "--workspace", "--no-deps", "--features", &features],
        &[("RUSTDOCFLAGS", "-D warnings".into())],
    );
    // Packages both crates and builds them from the packages, as crates.io would get them.
    let publish_target = publish_target_dir().display().to_string();
    step(
        "publish dry run",
        &[
            "publish",
            "--dry-run",
            "--allow-dirty",
            "-p",
            "burn-sam",
            "-p",
            "burn-sam-accum",
        ],
        &[("CARGO_TARGET_DIR", publish_target)],
    );
    step("README's tests", &["test", "--workspace"], &[]);
    let (manifest, target) = readme_crate::write();
    step(
        "README's deps",
        &["run", "--manifest-path", &manifest],
        &[("CARGO_TARGET_DIR", target)],
    );
    if backends::lavapipe_installed() {
        step("Vulkan suite", &backends::VULKAN_TEST, &[]);
        step("Vulkan, fused", &backends::VULKAN_FUSION_TEST, &[]);
    } else {
        eprintln!("Mesa lavapipe is not installed: skipping the Vulkan suite (see `cargo xtask test-vulkan`)");
    }
    if mpi {
        let start = std::time::Instant::now();
        mpi::test_mpi();
        times.push(("MPI ranks", start.elapsed().as_secs_f64()));
    } else {
        eprintln!("Open MPI is not installed: skipping the MPI tests (see `cargo xtask test-mpi`)");
    }
    eprintln!("\nCI steps:");
    for (what, seconds) in times {
        eprintln!("  {what:<16} {seconds:>7.1} s");
    }
}

/// The target directory of the publish dry run, with its builds of the packaged crates
/// forgotten, and cargo's unpacked copies of them removed.
///
/// The dry run serves the packaged burn-sam to burn-sam-accum from a local registry; the
/// packages carry a fixed file time (2006) and the same version every run, so cargo would
/// take an earlier run's unpacked copy and build of burn-sam as up to date and verify
/// burn-sam-accum against them. Its own target directory keeps that away from the other
/// steps' builds; everything named burn-sam in it is this step's alone.
fn publish_target_dir() -> PathBuf {
    let dir = backends::target_dir().join("publish-check");
    let forget = |folder: &Path| {
        let Ok(entries) = std::fs::read_dir(folder) else {
            return;
        };
        for entry in entries.flatten() {
            if !entry.file_name().to_string_lossy().starts_with("burn-sam") {
                continue;
            }
            let path = entry.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            if let Err(error) = removed {
                fail(&format!("cannot remove {}: {error}", path.display()));
            }
        }
    };
    forget(&dir.join("debug/.fingerprint"));
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")));
    if let Some(home) = cargo_home {
        // Local registries have no host in their folder's name: "-<hash>".
        let sources = std::fs::read_dir(home.join("registry/src"))
            .into_iter()
            .flatten();
        for registry in sources.flatten() {
            if registry.file_name().to_string_lossy().starts_with('-') {
                forget(&registry.path());
            }
        }
    }
    dir
}

/// `cargo xtask house`: exits with the broken rules, if any.
fn house() {
    // Cargo's run-time value: a binary kept in a shared target dir may have been built in
    // another checkout, whose path the compile-time value would still name.
    let manifest = std::env::var("CARGO_MANIFEST_DIR");
    let manifest = manifest.unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let root = Path::new(&manifest).join("..");
    let broken = house::check(&root);
    if !broken.is_empty() {
        for rule in &broken {
            eprintln!("{rule}");
        }
        fail(&format!(
            "{} house rules broken (ARCHITECTURE.md says what they are)",
            broken.len()
        ));
    }
    eprintln!(
        "house rules hold: no file over {} lines, no fn over {}, no import up a floor, no circle, none from behind a face",
        house::MAX_FILE_LINES,
        house::MAX_FN_LINES
    );
}

/// The features clippy and the docs check every target with: the GPU backends as Burn's
/// defaults build them (fused), as the GPU check runs them; the Vulkan suite builds them
/// unfused too.
const GPU_FEATURES: &str = "vulkan,cuda,fusion,autotune";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["ci"] => ci(),
        ["house"] => house(),
        ["test-gpu"] => backends::test_gpu(),
        ["gpu-bundle"] => backends::gpu_bundle(),
        ["test-vulkan"] => {
            backends::require_lavapipe();
            run("cargo", &backends::VULKAN_TEST);
            run("cargo", &backends::VULKAN_FUSION_TEST);
        }
        ["test-tch"] => backends::test_tch(),
        ["test-mpi"] => mpi::test_mpi(),
        ["reference"] => {
            run("python3", &["reference/sam_reference.py"]);
            run("python3", &["reference/scaler_reference.py"]);
            run("python3", &["reference/family_reference.py"]);
            run("python3", &["reference/clip_reference.py"]);
            run("python3", &["reference/schedule_reference.py"]);
        }
        ["bench"] => bench::bench(&[]),
        ["bench", "--backends", list] => bench::bench(&list.split(',').collect::<Vec<_>>()),
        _ => {
            eprintln!(
                "usage: cargo xtask <ci | house | test-gpu | gpu-bundle | test-vulkan | test-mpi | test-tch | reference | bench [--backends flex,ndarray,libtorch,vulkan]>"
            );
            exit(2);
        }
    }
}
