//! `cargo xtask bench`: runs the criterion benchmarks and prints the ratios users care about.

use std::path::{Path, PathBuf};

use crate::run;

/// Criterion's mean estimate, in milliseconds, for `group/function`.
fn mean_ms(group: &Path, function: &str) -> f64 {
    let path = group.join(function).join("new/estimates.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    let estimates: serde_json::Value = serde_json::from_str(&text).expect("criterion estimates");
    estimates["mean"]["point_estimate"]
        .as_f64()
        .expect("mean.point_estimate")
        / 1e6
}

pub fn bench() {
    run(
        "cargo",
        &[
            "bench",
            "--bench",
            "sam_step",
            "--bench",
            "sam_step_f16",
            "--bench",
            "accumulation",
        ],
    );
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let criterion = PathBuf::from(target).join("criterion");
    let groups = std::fs::read_dir(&criterion).expect("criterion output");
    println!("\n| model | base step (ms) | SAM step (ms) | ASAM step (ms) | sam_over_base | asam_over_base |");
    println!("|---|---|---|---|---|---|");
    for group in groups.flatten().map(|entry| entry.path()) {
        let name = group.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("mlp_") {
            continue;
        }
        let base = mean_ms(&group, "base_step");
        let sam = mean_ms(&group, "sam_step");
        let asam = mean_ms(&group, "asam_step");
        println!(
            "| {name} | {base:.2} | {sam:.2} | {asam:.2} | {:.3} | {:.3} |",
            sam / (2.0 * base),
            asam / (2.0 * base)
        );
    }
    println!("\nsam_over_base = SAM step / (2 x base step); SAM's physical limit is 1.0 here.");
    println!(
        "\n| model | unscaled f16 SAM (ms) | scaled f16 SAM (ms) | scaled_over_unscaled_f16 |"
    );
    println!("|---|---|---|---|");
    for group in std::fs::read_dir(&criterion)
        .expect("criterion output")
        .flatten()
    {
        let group = group.path();
        let name = group.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("f16_mlp_") {
            continue;
        }
        let unscaled = mean_ms(&group, "unscaled");
        let scaled = mean_ms(&group, "scaled");
        println!(
            "| {name} | {unscaled:.2} | {scaled:.2} | {:.3} |",
            scaled / unscaled
        );
    }
    accumulation_table(&criterion);
}

/// k = 4 micro-batches against one batch of 4b: time and peak heap memory per step.
fn accumulation_table(criterion: &Path) {
    let path = criterion.join("accumulation_peak_bytes.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    let peaks: serde_json::Value = serde_json::from_str(&text).expect("peak bytes");
    let mib = |name: &str| peaks[name].as_f64().expect("peak bytes") / (1024.0 * 1024.0);
    println!("\n| group | optimizer | large batch (ms, MiB) | accum4 (ms, MiB) | accum4_over_large_batch time | memory |");
    println!("|---|---|---|---|---|---|");
    for group in std::fs::read_dir(criterion)
        .expect("criterion output")
        .flatten()
    {
        let group = group.path();
        let name = group.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("accumulation_") || group.is_file() {
            continue;
        }
        for optimizer in ["sgd", "sam"] {
            let large = format!("{optimizer}_large_batch");
            let accum = format!("{optimizer}_accum4");
            let (large_ms, accum_ms) = (mean_ms(&group, &large), mean_ms(&group, &accum));
            println!(
                "| {name} | {optimizer} | {large_ms:.1}, {:.1} | {accum_ms:.1}, {:.1} | {:.3} | {:.3} |",
                mib(&large),
                mib(&accum),
                accum_ms / large_ms,
                mib(&accum) / mib(&large),
            );
        }
    }
}
