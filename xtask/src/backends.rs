//! The suite on the backends a plain `cargo test` does not run: CUDA, Vulkan, LibTorch.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{fail, run, run_with};

fn target_dir() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()))
}

/// Whether Mesa's software Vulkan driver (lavapipe) is installed.
pub fn lavapipe_installed() -> bool {
    ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"]
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flatten()
        .flatten()
        .any(|entry| entry.file_name().to_string_lossy().starts_with("lvp_icd"))
}

pub fn require_lavapipe() {
    if !lavapipe_installed() {
        fail("Mesa lavapipe is not installed: `apt-get install -y mesa-vulkan-drivers`");
    }
}

/// The suite on Vulkan, f32 and f16, with `features` (which must include `vulkan`).
pub fn test_vulkan(features: &[&str]) {
    let mut args = vec!["test"];
    args.extend(features);
    args.extend(["--test", "vulkan", "--test", "vulkan_f16"]);
    run("cargo", &args);
}

/// Whether this machine has an NVIDIA driver: its device node and its user-space library.
fn cuda_driver() -> bool {
    let library = Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("libcuda.so"));
    library && Path::new("/dev/nvidiactl").exists()
}

const CUDA_TESTS: [&str; 4] = ["--test", "cuda", "--test", "cuda_f16"];

/// Short runs of the main example, f32 and f16.
const EXAMPLE_RUNS: [&str; 2] = [
    "--epochs 5 --seeds 1 --dtype f32",
    "--epochs 5 --seeds 1 --dtype f16",
];

pub fn test_gpu(build_only: bool) {
    if build_only {
        return build_gpu_bundle();
    }
    if !cuda_driver() {
        fail(
            "no CUDA driver here (libcuda.so and /dev/nvidiactl): run this on a machine with an \
             NVIDIA GPU, or `cargo xtask test-gpu --build-only` to build the binaries for one",
        );
    }
    let mut args = vec!["test", "--features", "cuda"];
    args.extend(CUDA_TESTS);
    run("cargo", &args);
    let plot = target_dir().join("noisy-digits-cuda.svg");
    for flags in EXAMPLE_RUNS {
        let mut args = vec![
            "run",
            "--release",
            "--features",
            "cuda",
            "--example",
            "noisy-digits",
            "--",
        ];
        args.extend(flags.split(' '));
        args.extend(["--plot", plot.to_str().expect("UTF-8 path")]);
        run("cargo", &args);
    }
    // Burn's Learner with SamTraining, f16 with loss scaling and accumulation.
    run(
        "cargo",
        &[
            "run",
            "--release",
            "--features",
            "cuda",
            "--example",
            "learner-digits",
            "--",
            "--method",
            "sam",
            "--dtype",
            "f16",
            "--window",
            "2",
            "--epochs",
            "5",
        ],
    );
}

/// Builds the CUDA test binaries and the example into one folder, for a GPU host without a
/// Rust toolchain, and says how to run them there.
fn build_gpu_bundle() {
    let bundle = target_dir().join("gpu-bundle");
    std::fs::create_dir_all(&bundle).expect("bundle folder");
    let mut args = vec![
        "test",
        "--features",
        "cuda",
        "--no-run",
        "--message-format=json",
    ];
    args.extend(CUDA_TESTS);
    eprintln!("$ cargo {}", args.join(" "));
    let out = Command::new("cargo")
        .args(&args)
        .output()
        .unwrap_or_else(|error| fail(&format!("cannot start cargo: {error}")));
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        fail("building the CUDA tests failed");
    }
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_test = message["profile"]["test"].as_bool() == Some(true);
        if let (true, Some(executable)) = (is_test, message["executable"].as_str()) {
            binaries.push(PathBuf::from(executable));
        }
    }
    run(
        "cargo",
        &[
            "build",
            "--release",
            "--features",
            "cuda",
            "--example",
            "noisy-digits",
        ],
    );
    binaries.push(target_dir().join("release/examples/noisy-digits"));
    for binary in &binaries {
        let name = binary.file_name().expect("a file name");
        std::fs::copy(binary, bundle.join(name))
            .unwrap_or_else(|error| fail(&format!("cannot copy {}: {error}", binary.display())));
    }
    std::fs::copy("examples/data/digits.csv.gz", bundle.join("digits.csv.gz"))
        .unwrap_or_else(|error| fail(&format!("cannot copy the data set: {error}")));

    println!("\nBuilt in {}:", bundle.display());
    for binary in &binaries {
        println!("  {}", binary.file_name().unwrap().to_string_lossy());
    }
    println!("\nCopy that folder to the GPU host (it needs the NVIDIA driver, nothing else) and run there:");
    for binary in &binaries[..binaries.len() - 1] {
        println!("  ./{}", binary.file_name().unwrap().to_string_lossy());
    }
    for flags in EXAMPLE_RUNS {
        println!("  ./noisy-digits --data digits.csv.gz {flags}");
    }
}

/// The suite on LibTorch from the `torch` Python package, f32 and f64.
pub fn test_tch() {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, torch; print(os.path.dirname(torch.__file__))",
        ])
        .output();
    let torch = match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        _ => fail(
            "python3 cannot import torch: `pip install torch==2.9.0` (burn-tch 0.21 uses tch 0.22)",
        ),
    };
    let library_path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(path) if !path.is_empty() => format!("{torch}/lib:{path}"),
        _ => format!("{torch}/lib"),
    };
    let env = [
        ("LIBTORCH_USE_PYTORCH", "1".to_string()),
        ("LD_LIBRARY_PATH", library_path),
    ];
    run_with(
        "cargo",
        &[
            "test",
            "--features",
            "tch",
            "--test",
            "tch_f32",
            "--test",
            "tch_f64",
        ],
        &env,
    );
}
