//! `gpu-check launches`: kernel launches and host waits per step on this GPU, counted from
//! CubeCL's launch log as `tests/vulkan_fused_launches.rs` counts them on lavapipe
//! (`burn_sam_suite::launches`); the process's CubeCL configuration counts launches
//! (`main`).

use std::path::Path;

use serde_json::{json, Value};

use crate::report::write_json;

/// Measures on a GPU backend; on Flex, which launches no kernels, says so.
pub fn run(log: &Path, json: &Path) -> Result<(), String> {
    if !cfg!(feature = "cuda") {
        return write_json(json, &json!({ "skipped": "no kernels on Flex (CPU)" }));
    }
    let rows = burn_sam_suite::launches::growth::<crate::B>(log);
    let (few, many) = burn_sam_suite::launches::TENSORS;
    let rows: Vec<Value> = rows
        .iter()
        .map(|row| {
            json!({
                "step": row.name,
                "floor": row.floor,
                "launches": [row.few.launches, row.many.launches],
                "over_floor": [row.over_few, row.over_many],
                "per_tensor_added": row.per_tensor,
                "host_waits": row.many.waits,
            })
        })
        .collect();
    write_json(json, &json!({ "tensors": [few, many], "rows": rows }))
}

/// The stage's result as a table.
pub fn print_table(result: &Value) {
    let Some(rows) = result["rows"].as_array() else {
        return;
    };
    let tensors = &result["tensors"];
    println!(
        "\nKernel launches per step over the floor, on MLPs of {} and {} parameter tensors:\n",
        tensors[0], tensors[1]
    );
    println!("| step | floor | over floor | over floor | per tensor added | host waits |");
    println!("|---|---|---|---|---|---|");
    for row in rows {
        println!(
            "| {} | {} | {} | {} | {:.2} | {} |",
            row["step"].as_str().unwrap_or("?"),
            row["floor"].as_str().unwrap_or("?"),
            row["over_floor"][0],
            row["over_floor"][1],
            row["per_tensor_added"].as_f64().unwrap_or(f64::NAN),
            row["host_waits"],
        );
    }
}
