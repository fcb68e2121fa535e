//! The suite on the backends a plain `cargo test` does not run: CUDA, Vulkan, LibTorch.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{fail, run, run_with};

pub fn target_dir() -> PathBuf {
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

/// The suite on Vulkan, f32 and f16, and data-parallel SAM over two device handles: `cargo`
/// arguments.
pub const VULKAN_TEST: [&str; 9] = [
    "test",
    "--features",
    "vulkan",
    "--test",
    "vulkan",
    "--test",
    "vulkan_f16",
    "--test",
    "data_parallel_vulkan",
];

/// The suite on Vulkan, f32 and f16, with Burn's defaults for its GPU backends (`fusion`,
/// `autotune`): the `Fusion<CubeBackend<..>>` a user who keeps Burn's default features trains
/// on; and that steps after the first compile and tune nothing. Not the data-parallel tests: Burn 0.21's fusion loses track of a tensor when the
/// Learner's checkpointer thread reads it while training goes on ("Should have handle for
/// tensor", tracel-ai/burn#4347, reported there with Burn's own training loop), which aborted
/// 2 of 4 runs of that file here.
pub const VULKAN_FUSION_TEST: [&str; 11] = [
    "test",
    "--features",
    "vulkan,fusion,autotune",
    "--test",
    "vulkan",
    "--test",
    "vulkan_f16",
    "--test",
    "vulkan_fused_kernels",
    "--test",
    "vulkan_fused_launches",
];

/// Whether this machine has an NVIDIA driver: its device node and its user-space library.
fn cuda_driver() -> bool {
    let library = Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("libcuda.so"));
    library && Path::new("/dev/nvidiactl").exists()
}

/// The cargo profile of the GPU check: release, stripped.
const GPU_PROFILE: &str = "gpu-bundle";

/// Builds the GPU check (`examples/gpu-check`) for CUDA with Burn's `fusion` and, with
/// `autotune` false, without its `autotune`: on a cold H200, autotune compiled and timed 6-10
/// candidate matmul kernels per new shape, and the f16 example's first epoch took 223 s with it
/// against 18.5 s without (the guide's GPU chapter), more than the whole check's limits allow. The
/// build with it times two models only (the check's `bench-autotune` stage), from a target
/// folder of its own, so that neither build undoes the other's.
fn build_gpu_check(autotune: bool) -> PathBuf {
    let (features, target) = match autotune {
        false => ("cuda,fusion", target_dir()),
        true => ("cuda,fusion,autotune", target_dir().join("autotune")),
    };
    run_with(
        "cargo",
        &[
            "build",
            "--profile",
            GPU_PROFILE,
            "--features",
            features,
            "--example",
            "gpu-check",
        ],
        &[("CARGO_TARGET_DIR", target.to_string_lossy().into_owned())],
    );
    target.join(GPU_PROFILE).join("examples/gpu-check")
}

/// The autotuned build's name beside the check (`AUTOTUNE_BINARY` in
/// `examples/gpu-check/report.rs`).
const AUTOTUNE_BINARY: &str = "gpu-check-autotune";

/// Both builds of the GPU check, the autotuned one beside the other as the check expects it;
/// the path of the check.
fn build_gpu_checks() -> PathBuf {
    let autotuned = build_gpu_check(true);
    let binary = build_gpu_check(false);
    let beside = binary.with_file_name(AUTOTUNE_BINARY);
    std::fs::copy(&autotuned, &beside).unwrap_or_else(|error| {
        fail(&format!(
            "cannot copy {} to {}: {error}",
            autotuned.display(),
            beside.display()
        ))
    });
    binary
}

/// The GPU check on this machine's GPU.
pub fn test_gpu() {
    if !cuda_driver() {
        fail(
            "no CUDA driver here (libcuda.so and /dev/nvidiactl): run this on a machine with an \
             NVIDIA GPU, or `cargo xtask gpu-bundle` to build the check for one",
        );
    }
    let binary = build_gpu_checks();
    let out = target_dir().join("gpu-report.json");
    let logs = target_dir().join("gpu-logs");
    let (out, logs) = (out.to_string_lossy(), logs.to_string_lossy());
    let data = "--data=examples/data/digits.csv.gz";
    let args = ["all", "--out", out.as_ref(), "--logs", logs.as_ref(), data];
    run(binary.to_str().expect("a UTF-8 path"), &args);
    match gpu_count() {
        // Without fusion: see `VULKAN_FUSION_TEST`.
        count if count >= 2 => run(
            "cargo",
            &["test", "--features", "cuda", "--test", "data_parallel_cuda"],
        ),
        count => eprintln!(
            "{count} GPU here: the data-parallel tests need two (they run on lavapipe's two \
             device handles in `cargo xtask test-vulkan`)"
        ),
    }
}

/// The GPUs `nvidia-smi -L` lists (0 without it).
fn gpu_count() -> usize {
    Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .map(|out| {
            let listed = String::from_utf8_lossy(&out.stdout);
            listed
                .lines()
                .filter(|line| line.starts_with("GPU "))
                .count()
        })
        .unwrap_or(0)
}

/// The bundle's size limit.
const BUNDLE_LIMIT_BYTES: u64 = 60 << 20;

/// Builds the GPU check into `<target>/gpu-check/`: its two builds (gzipped), the data set and
/// `run.sh`, for a GPU host with the NVIDIA driver and no Rust toolchain.
pub fn gpu_bundle() {
    let binary = build_gpu_checks();
    let bundle = target_dir().join("gpu-check");
    let _ = std::fs::remove_dir_all(&bundle);
    std::fs::create_dir_all(&bundle).expect("bundle folder");
    let copy = |from: &Path, name: &str| {
        std::fs::copy(from, bundle.join(name))
            .unwrap_or_else(|error| fail(&format!("cannot copy {}: {error}", from.display())));
    };
    copy(&binary, "gpu-check");
    copy(&binary.with_file_name(AUTOTUNE_BINARY), AUTOTUNE_BINARY);
    copy(Path::new("examples/gpu-check/run.sh"), "run.sh");
    copy(Path::new("examples/data/digits.csv.gz"), "digits.csv.gz");
    // run.sh unpacks them.
    for name in ["gpu-check", AUTOTUNE_BINARY] {
        run(
            "gzip",
            &["-9", "-n", bundle.join(name).to_str().expect("UTF-8")],
        );
    }
    let mut total = 0;
    println!("\nBuilt {}:", bundle.display());
    for entry in std::fs::read_dir(&bundle).expect("bundle folder").flatten() {
        let size = entry.metadata().expect("metadata").len();
        total += size;
        println!(
            "  {:<16} {:>6.1} MiB",
            entry.file_name().to_string_lossy(),
            mib(size)
        );
    }
    println!("  {:<16} {:>6.1} MiB", "total", mib(total));
    if total > BUNDLE_LIMIT_BYTES {
        fail(&format!(
            "the bundle is {:.1} MiB, over its {:.0} MiB limit",
            mib(total),
            mib(BUNDLE_LIMIT_BYTES)
        ));
    }
    println!(
        "\nCopy the folder to the GPU host (NVIDIA driver and NVRTC, nothing else) and run \
         `./run.sh` there: it writes gpu-report.json and prints a table."
    );
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The environment that builds and runs burn-tch against the `torch` Python package's
/// LibTorch, or why there is none.
pub fn torch_env() -> Result<[(&'static str, String); 2], String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, torch; print(os.path.dirname(torch.__file__))",
        ])
        .output();
    let torch = match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        _ => {
            return Err(
                "python3 cannot import torch: `pip install torch==2.9.0` (burn-tch 0.21 \
                        uses tch 0.22)"
                    .into(),
            )
        }
    };
    let library_path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(path) if !path.is_empty() => format!("{torch}/lib:{path}"),
        _ => format!("{torch}/lib"),
    };
    Ok([
        ("LIBTORCH_USE_PYTORCH", "1".to_string()),
        ("LD_LIBRARY_PATH", library_path),
    ])
}

/// The suite on LibTorch from the `torch` Python package, f32 and f64.
pub fn test_tch() {
    let env = torch_env().unwrap_or_else(|why| fail(&why));
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
