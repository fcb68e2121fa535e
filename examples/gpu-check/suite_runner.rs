//! Runs the suite's cases in this process, one after another, without libtest: a panic fails
//! its case and the run goes on. The JSON is rewritten after every case, so that a crash (an
//! abort in a driver) leaves the results so far.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Value};

use crate::report::write_json;
use crate::Dtype;

pub fn run(dtype: Dtype, json: &Path) -> Result<(), String> {
    let cases = match dtype {
        // f16 parameters cast on an f32-default device run in the f32 process.
        Dtype::F32 => [crate::suite_f32::cases(), crate::suite_f16_params::cases()].concat(),
        Dtype::F16 => crate::suite_f16::cases(),
    };
    let panics = capture_panic_messages();
    let mut results = Vec::new();
    let report = |results: &[Value]| {
        let failed = results.iter().filter(|r| r["passed"] == false).count();
        json!({
            "backend": crate::BACKEND,
            "total": cases.len(),
            "passed": results.len() - failed,
            "failed": failed,
            "cases": results,
        })
    };
    write_json(json, &report(&results))?;
    for &(name, case) in &cases {
        eprintln!("case {name} ...");
        let start = Instant::now();
        panics.lock().unwrap().clear();
        crate::suite::util::take_max_deviation();
        let outcome = catch_unwind(AssertUnwindSafe(case));
        let seconds = start.elapsed().as_secs_f64();
        // Every panic of the case, in order: the cause may be on another thread (a device
        // thread of the backend), and a case may catch panics of its own (the misuse tests).
        let message = match &outcome {
            Ok(()) => Value::Null,
            Err(_) => panics.lock().unwrap().join(" | then: ").into(),
        };
        // How far from the f64 reference the case came (0 for cases without one).
        let deviation = crate::suite::util::take_max_deviation();
        eprintln!(
            "case {name} {} ({seconds:.2} s, largest relative deviation {deviation:.2e})",
            if outcome.is_ok() { "ok" } else { "FAILED" }
        );
        results.push(json!({
            "name": name,
            "passed": outcome.is_ok(),
            "seconds": seconds,
            "max_relative_deviation": deviation,
            "message": message,
        }));
        write_json(json, &report(&results))?;
    }
    let failed = report(&results)["failed"].as_u64().unwrap_or(0);
    if failed > 0 {
        return Err(format!("{failed} of {} cases failed", cases.len()));
    }
    Ok(())
}

/// Longest message kept of one panic, in characters.
const MESSAGE_CHARS: usize = 600;

/// Keeps printing panics as usual, and collects each one's message and place, from every
/// thread.
fn capture_panic_messages() -> Arc<Mutex<Vec<String>>> {
    let panics = Arc::new(Mutex::new(Vec::new()));
    let default_hook = std::panic::take_hook();
    let keep = Arc::clone(&panics);
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(a panic without a message)".into());
        let place = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message: String = message.chars().take(MESSAGE_CHARS).collect();
        if let Ok(mut panics) = keep.lock() {
            panics.push(format!("{message} at {place}"));
        }
        default_hook(info);
    }));
    panics
}
