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
        Dtype::F32 => crate::suite_f32::cases(),
        Dtype::F16 => crate::suite_f16::cases(),
    };
    let last_panic = capture_panic_messages();
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
        // A case may catch panics of its own (misuse tests): only the last one before a
        // failure is the failure's.
        last_panic.lock().unwrap().clear();
        let outcome = catch_unwind(AssertUnwindSafe(case));
        let seconds = start.elapsed().as_secs_f64();
        let message = match &outcome {
            Ok(()) => Value::Null,
            Err(_) => last_panic.lock().unwrap().clone().into(),
        };
        eprintln!(
            "case {name} {} ({seconds:.2} s)",
            if outcome.is_ok() { "ok" } else { "FAILED" }
        );
        results.push(json!({
            "name": name,
            "passed": outcome.is_ok(),
            "seconds": seconds,
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

/// Keeps printing panics as usual, and keeps the last one's message and place.
fn capture_panic_messages() -> Arc<Mutex<String>> {
    let last = Arc::new(Mutex::new(String::new()));
    let default_hook = std::panic::take_hook();
    let keep = Arc::clone(&last);
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
        if let Ok(mut last) = keep.lock() {
            *last = format!("{message} at {place}");
        }
        default_hook(info);
    }));
    last
}
