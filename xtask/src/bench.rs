//! `cargo xtask bench`: runs `benches/sam_cost.rs` on every backend this machine has (Flex
//! and NdArray always, LibTorch when the `torch` Python package is installed, Vulkan with
//! Burn's `fusion` when Mesa's lavapipe is) and, with `torch`, `reference/bench_torch.py`; prints the ratios users
//! care about, per backend.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::backends::{lavapipe_installed, torch_env};
use crate::run_with;

const MODELS: [&str; 5] = ["mlp_100k", "mlp_2m", "cnn", "resnet18", "encoder"];

/// Whether `backend` keeps its tensors in Rust's heap, which the bench's allocator counts
/// (LibTorch and the GPU drivers allocate outside it).
fn heap_counted(backend: &str) -> bool {
    matches!(backend, "flex" | "ndarray")
}

/// Criterion's mean estimate, in milliseconds, for `group/function`.
fn mean_ms(criterion: &Path, group: &str, function: &str) -> f64 {
    let path = criterion
        .join(group)
        .join(function)
        .join("new/estimates.json");
    let estimates = read_json(&path);
    estimates["mean"]["point_estimate"]
        .as_f64()
        .expect("mean.point_estimate")
        / 1e6
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    serde_json::from_str(&text).expect("JSON")
}

/// PyTorch's timings of the same shapes, or why there are none.
fn torch_timings() -> Result<Value, String> {
    eprintln!("$ python3 reference/bench_torch.py");
    let out = Command::new("python3")
        .arg("reference/bench_torch.py")
        .output()
        .map_err(|error| format!("python3 did not start: {error}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("").to_string();
        return Err(format!(
            "reference/bench_torch.py failed ({last}); `pip install torch`"
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|error| format!("bad JSON from torch: {error}"))
}

/// A backend's name in the tables, its cargo feature, and the environment it runs with.
type BenchBackend = (&'static str, &'static str, Vec<(&'static str, String)>);

/// The backends this machine can run.
fn available_backends() -> Vec<BenchBackend> {
    let mut backends = vec![
        ("flex", "flex", Vec::new()),
        ("ndarray", "ndarray", Vec::new()),
    ];
    match torch_env() {
        Ok(torch) => backends.push(("libtorch", "tch", torch.into())),
        Err(why) => eprintln!("No LibTorch: {why}"),
    }
    if lavapipe_installed() {
        // With Burn's `fusion`, as a user's `burn = { features = ["vulkan"] }` trains and as
        // the GPU check times CUDA (without `autotune`, like the GPU check).
        backends.push(("vulkan", "vulkan,fusion", Vec::new()));
    } else {
        eprintln!("No Vulkan: `apt-get install -y mesa-vulkan-drivers` runs it on the CPU");
    }
    backends
}

/// Runs the benchmarks on `only` (every available backend when empty) and prints the tables.
pub fn bench(only: &[&str]) {
    let available = available_backends();
    for name in only {
        if !available.iter().any(|(backend, ..)| backend == name) {
            let names: Vec<_> = available.iter().map(|(backend, ..)| *backend).collect();
            crate::fail(&format!(
                "`--backends`: {name} is not available here; available: {}",
                names.join(", ")
            ));
        }
    }
    let chosen: Vec<_> = available
        .into_iter()
        .filter(|(backend, ..)| only.is_empty() || only.contains(backend))
        .collect();
    let backends: Vec<&str> = chosen.iter().map(|(backend, ..)| *backend).collect();
    let features: Vec<&str> = chosen.iter().map(|(_, feature, _)| *feature).collect();
    let env: Vec<(&str, String)> = chosen.into_iter().flat_map(|(.., env)| env).collect();
    let features = features.join(",");
    run_with(
        "cargo",
        &[
            "bench",
            "--bench",
            "sam_cost",
            "--no-default-features",
            "--features",
            &features,
        ],
        &env,
    );
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let criterion = PathBuf::from(target).join("criterion");
    let torch = torch_timings();
    // (backend, model): every table has one row per backend and model.
    let rows: Vec<(&str, &str)> = backends
        .iter()
        .flat_map(|backend| MODELS.iter().map(move |model| (*backend, *model)))
        .collect();
    let group = |backend: &str, model: &str| format!("{backend}-{model}");
    let ms = |(backend, model): (&str, &str), function: &str| {
        mean_ms(&criterion, &group(backend, model), function)
    };
    let facts: Vec<Value> = rows
        .iter()
        .map(|(backend, model)| {
            read_json(&criterion.join(format!("{}.json", group(backend, model))))
        })
        .collect();
    // Ratios come from the paired (interleaved) medians, times from criterion's means.
    let ratio = |facts: &Value, top: &str, bottom: &str| {
        let paired = |function: &str| {
            facts["paired_ms"][function]
                .as_f64()
                .unwrap_or_else(|| panic!("no paired timing of {function}: run without a filter"))
        };
        paired(top) / paired(bottom)
    };

    println!("\nSAM's cost per backend (batch 128, SGD base). Two passes: two forward/backward passes and one");
    println!("base step, SAM's floor; the limit of sam_over_base is about 2.0. Times: criterion's means;");
    println!("ratios: medians of 15 interleaved rounds (one step of each function per round):\n");
    println!("| backend | model | params | base step | two passes | SAM step | sam_over_base | sam_over_two_passes | ASAM step | asam_over_base | host waits per SAM step | PyTorch base | PyTorch two passes | PyTorch SAM | PyTorch sam_over_base | PyTorch sam_over_two_passes |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (&(backend, model), facts) in rows.iter().zip(&facts) {
        let row = (backend, model);
        let (base, sam, asam) = (
            ms(row, "base_step"),
            ms(row, "sam_step"),
            ms(row, "asam_step"),
        );
        let two_passes = ms(row, "two_passes_step");
        let torch_cells = match &torch {
            Ok(torch) => {
                let value = |key: &str| torch[model][key].as_f64().unwrap_or(f64::NAN);
                format!(
                    "{:.2} ms | {:.2} ms | {:.2} ms | {:.3} | {:.3}",
                    value("base_ms"),
                    value("two_passes_ms"),
                    value("sam_ms"),
                    value("sam_over_base"),
                    value("sam_over_two_passes"),
                )
            }
            Err(_) => "- | - | - | - | -".to_string(),
        };
        println!(
            "| {backend} | {model} | {} | {base:.2} ms | {two_passes:.2} ms | {sam:.2} ms | {:.3} | {:.3} | {asam:.2} ms | {:.3} | {} | {torch_cells} |",
            facts["params"],
            ratio(facts, "sam_step", "base_step"),
            ratio(facts, "sam_step", "two_passes_step"),
            ratio(facts, "asam_step", "base_step"),
            facts["sam_step_host_waits"],
        );
    }
    match &torch {
        Ok(torch) => println!(
            "\nPyTorch {} on the CPU with {} threads (davda54/sam's algorithm).",
            torch["torch"].as_str().unwrap_or("?"),
            torch["threads"]
        ),
        Err(why) => println!("\nNo PyTorch comparison: {why}"),
    }

    println!("\nThe SAM family (defaults; LookSAM k = 10). LookSAM's ratio is of criterion's means, its cost");
    println!(
        "per step averaged over its cycle (one full step in 10); the others are paired medians:\n"
    );
    println!("| backend | model | SAM step | GSAM step | LookSAM step | Friendly-SAM step | gsam_over_sam | looksam_over_base | friendly_sam_over_sam | host waits per step (GSAM, LookSAM, Friendly-SAM) |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (&(backend, model), facts) in rows.iter().zip(&facts) {
        let row = (backend, model);
        let (sam, gsam, looksam, friendly) = (
            ms(row, "sam_step"),
            ms(row, "gsam_step"),
            ms(row, "looksam_step"),
            ms(row, "friendly_sam_step"),
        );
        println!(
            "| {backend} | {model} | {sam:.2} ms | {gsam:.2} ms | {looksam:.2} ms | {friendly:.2} ms | {:.3} | {:.3} | {:.3} | {}, {}, {} |",
            ratio(facts, "gsam_step", "sam_step"),
            looksam / ms(row, "base_step"),
            ratio(facts, "friendly_sam_step", "sam_step"),
            facts["gsam_step_host_waits"],
            facts["looksam_step_host_waits"],
            facts["friendly_sam_step_host_waits"],
        );
    }

    println!("\nA schedule's base step inside SAM (`SamSchedule::From` that never comes; `Adaptive` that never");
    println!("fires: its decision reads the first gradient's norm) against the base optimizer's own step:\n");
    println!("| backend | model | base step | base step inside SAM | base_in_sam_over_base | adaptive base step | adaptive_base_over_base | host waits (inside SAM, adaptive) |");
    println!("|---|---|---|---|---|---|---|---|");
    for (&(backend, model), facts) in rows.iter().zip(&facts) {
        let row = (backend, model);
        println!(
            "| {backend} | {model} | {:.2} ms | {:.2} ms | {:.3} | {:.2} ms | {:.3} | {}, {} |",
            ms(row, "base_step"),
            ms(row, "base_in_sam_step"),
            ratio(facts, "base_in_sam_step", "base_step"),
            ms(row, "adaptive_base_in_sam_step"),
            ratio(facts, "adaptive_base_in_sam_step", "base_step"),
            facts["base_in_sam_step_host_waits"],
            facts["adaptive_base_in_sam_step_host_waits"],
        );
    }

    println!("\nf16 parameters (real f16 arithmetic, f32 master weights in both):\n");
    println!("| backend | model | unscaled f16 SAM | scaled f16 SAM | scaled_over_unscaled_f16 | host waits per scaled step |");
    println!("|---|---|---|---|---|---|");
    for (&(backend, model), facts) in rows.iter().zip(&facts) {
        if facts["paired_ms"].get("scaled_f16_sam_step").is_none() {
            continue; // no f16 on this backend
        }
        let (unscaled, scaled) = (
            ms((backend, model), "unscaled_f16_sam_step"),
            ms((backend, model), "scaled_f16_sam_step"),
        );
        println!(
            "| {backend} | {model} | {unscaled:.2} ms | {scaled:.2} ms | {:.3} | {} |",
            ratio(facts, "scaled_f16_sam_step", "unscaled_f16_sam_step"),
            facts["scaled_f16_sam_step_host_waits"]
        );
    }

    println!("\nMomentum-SAM (mu 0.9) over SGD with momentum 0.9 (no dampening), its base, against SAM over");
    println!(
        "plain SGD. A pass: one element-wise operation over every parameter into a new buffer"
    );
    println!("(`param_pass`). Extra passes: Momentum-SAM's time over its base's in passes (measured) and");
    println!(
        "the buffers the size of the largest parameter that its step allocates beyond its base's"
    );
    println!("(counted by the allocator; in-place operations not counted). Peak heap: the step's peak with");
    println!("its model copy and optimizer state; extra buffers: over its base, in parameter-sized buffers");
    println!("(on models of many small tensors they also count a few kilobytes of bookkeeping per tensor).");
    println!("Memory is counted in Rust's heap, where Flex and NdArray keep tensors (\"-\" for the others):\n");
    println!("| backend | model | momentum SGD step | Momentum-SAM step | msam_over_base | one pass | extra passes, by time | extra buffers written | peak heap: SGD, momentum SGD, SAM, Momentum-SAM | extra buffers held: SAM, Momentum-SAM |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (&(backend, model), facts) in rows.iter().zip(&facts) {
        let row = (backend, model);
        let (base, msam, pass) = (
            ms(row, "momentum_step"),
            ms(row, "msam_step"),
            ms(row, "param_pass"),
        );
        let paired = |function: &str| facts["paired_ms"][function].as_f64().unwrap_or(f64::NAN);
        let count = |key: &str| facts[key].as_f64().expect(key);
        let allocations = |function: &str| count(&format!("{function}_param_allocations"));
        let peak = |function: &str| count(&format!("{function}_peak_with_state_bytes"));
        let mib = |function: &str| peak(function) / (1024.0 * 1024.0);
        let param_bytes = 4.0 * count("params");
        let buffers = |top: &str, bottom: &str| (peak(top) - peak(bottom)) / param_bytes;
        let memory = match heap_counted(backend) {
            true => format!(
                "{} | {:.1}, {:.1}, {:.1}, {:.1} MiB | {:.2}, {:.2}",
                allocations("msam_step") - allocations("momentum_step"),
                mib("base_step"),
                mib("momentum_step"),
                mib("sam_step"),
                mib("msam_step"),
                buffers("sam_step", "base_step"),
                buffers("msam_step", "momentum_step"),
            ),
            false => "- | - | -".into(),
        };
        println!(
            "| {backend} | {model} | {base:.2} ms | {msam:.2} ms | {:.3} | {pass:.3} ms | {:.1} | {memory} |",
            ratio(facts, "msam_step", "momentum_step"),
            (paired("msam_step") - paired("momentum_step")) / paired("param_pass"),
        );
    }

    println!(
        "\nGradient accumulation, k = 4 micro-batches of 128 against one batch of 512 (SGD):\n"
    );
    println!("Window passes: the 4 forward/backward passes and one base step without weighting or summing,");
    println!("accumulation's floor.\n");
    println!("| backend | model | large batch | window passes | accum4 | accum4_over_large_batch | window_passes_over_large_batch | accum4_over_window_passes | peak heap, large batch | peak heap, accum4 | memory ratio |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (&(backend, model), facts) in rows.iter().zip(&facts) {
        let row = (backend, model);
        let (large, accum) = (ms(row, "large_batch_step"), ms(row, "accum4_step"));
        let passes = ms(row, "window_passes_step");
        let mib = |key: &str| facts[key].as_f64().expect("peak bytes") / (1024.0 * 1024.0);
        let (large_mib, accum_mib) = (
            mib("large_batch_step_peak_bytes"),
            mib("accum4_step_peak_bytes"),
        );
        let memory = match heap_counted(backend) {
            true => format!(
                "{large_mib:.1} MiB | {accum_mib:.1} MiB | {:.2}",
                accum_mib / large_mib
            ),
            false => "- | - | -".into(),
        };
        println!(
            "| {backend} | {model} | {large:.2} ms | {passes:.2} ms | {accum:.2} ms | {:.3} | {:.3} | {:.3} | {memory} |",
            ratio(facts, "accum4_step", "large_batch_step"),
            ratio(facts, "window_passes_step", "large_batch_step"),
            ratio(facts, "accum4_step", "window_passes_step"),
        );
    }
    if lavapipe_installed() && (only.is_empty() || only.contains(&"vulkan")) {
        fused_launches();
    }
}

/// Kernel launches and host waits per step on the fused path (`tests/vulkan_fused_launches.rs`
/// on lavapipe with Burn's `fusion`), printed as a table.
fn fused_launches() {
    let args = [
        "test",
        "--features",
        "vulkan,fusion,autotune",
        "--test",
        "vulkan_fused_launches",
        "--",
        "--nocapture",
    ];
    eprintln!("$ cargo {}", args.join(" "));
    let out = Command::new("cargo")
        .args(args)
        .output()
        .unwrap_or_else(|error| crate::fail(&format!("cannot start cargo: {error}")));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!(
        "\nKernel launches and host waits per step, Vulkan (lavapipe) with Burn's fusion, batch 8,"
    );
    println!("an MLP with 4 parameter tensors and one with 62; \"over floor\": launches the step adds to");
    println!("its floor (two passes; Momentum-SAM: the momentum SGD step):\n");
    for (i, line) in stdout
        .lines()
        .filter_map(|line| line.strip_prefix("launches |"))
        .enumerate()
    {
        println!("|{line} |");
        if i == 0 {
            println!("|---|---|---|---|---|---|---|---|---|");
        }
    }
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        crate::fail("tests/vulkan_fused_launches.rs failed");
    }
}
