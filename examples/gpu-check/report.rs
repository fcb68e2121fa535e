//! `gpu-check all`: each stage in a child process with a time limit, its output in a log
//! file, its result in a JSON part; then one `gpu-report.json` and a table.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use burn_sam_suite::kernels::KernelCounts;
use serde_json::{json, Value};

/// The autotuned build of this check, beside it in the bundle (`cargo xtask gpu-bundle`).
pub const AUTOTUNE_BINARY: &str = "gpu-check-autotune";

/// One stage: a subcommand of this binary (or of its autotuned build), its time limit, and the
/// JSON it writes.
struct Stage {
    name: &'static str,
    args: Vec<String>,
    /// Run by [`AUTOTUNE_BINARY`], with a kernel cache of its own: its cold run tunes from
    /// nothing, as a user's first run with Burn's `autotune` does.
    autotune: bool,
    /// Cold: an empty kernel cache for the first stage, the earlier stages' for the others.
    limit_s: f64,
    /// With every kernel compiled and tuned by the cold pass.
    warm_limit_s: f64,
    result: PathBuf,
}

/// Writes `value` to `path` as pretty JSON.
pub fn write_json(path: &Path, value: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).expect("JSON");
    std::fs::write(path, text).map_err(|error| format!("cannot write {}: {error}", path.display()))
}

/// The stages; each writes its result to `<logs>/<name>.json`.
fn stages(logs: &Path, data: &Path) -> Vec<Stage> {
    let data = format!("--data={}", data.display());
    let stage = |name: &'static str, args: &[&str], limit_s, warm_limit_s| -> Stage {
        let result = logs.join(format!("{name}.json"));
        let mut args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        // Before the examples' own flags, which take the rest of the line.
        args.insert(1, format!("--json={}", result.display()));
        Stage {
            name,
            args,
            autotune: false,
            limit_s,
            warm_limit_s,
            result,
        }
    };
    let plot = format!("--plot={}", logs.join("noisy-digits.svg").display());
    let artifacts = format!("--artifacts={}", logs.join("learner-digits").display());
    vec![
        // Limits about 2.5 times a cold and a warm run on an H200 (2026-12-04; cold: 22, 25,
        // 18, 11 and 43 s; warm: 2, 10, 2, 3 and 9 s), most of the cold time compiling
        // kernels with NVRTC on the host's CPU.
        stage("suite-f32", &["suite", "f32"], 60.0, 30.0),
        stage("suite-f16", &["suite", "f16"], 60.0, 30.0),
        stage(
            "noisy-digits-f16",
            &[
                "noisy-digits",
                "--epochs=3",
                "--seeds=1",
                "--methods=sgd,sam",
                "--dtype=f16",
                &data,
                &plot,
            ],
            45.0,
            20.0,
        ),
        stage(
            "learner-digits-f16",
            &[
                "learner-digits",
                "--method=sam",
                "--dtype=f16",
                "--window=2",
                "--epochs=3",
                &data,
                &artifacts,
            ],
            45.0,
            20.0,
        ),
        stage("bench", &["bench"], 180.0, 90.0),
        // 4 steps of each of 10 step functions on two MLPs, batch 8: lavapipe takes 2
        // minutes on 2 CPU cores, a GPU far less once its kernels are compiled.
        stage("launches", &["launches"], 120.0, 60.0),
        // The two models with users' tensor counts with Burn's `autotune`: what tuning costs
        // once (cold against warm) and what it gains per step (against `bench`'s rows).
        Stage {
            autotune: true,
            ..stage(
                "bench-autotune",
                &["bench", "--models=resnet18,encoder"],
                240.0,
                90.0,
            )
        },
    ]
}

/// What `gpu-check all` was asked.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// The report to write.
    #[arg(long, default_value = "gpu-report.json")]
    pub out: PathBuf,
    /// Where each stage's output and result go.
    #[arg(long, default_value = "gpu-logs")]
    pub logs: PathBuf,
    /// The data set (gzipped CSV).
    #[arg(long, default_value = "digits.csv.gz")]
    pub data: PathBuf,
    /// Multiplies every stage's time limit (a slow host, a CPU dry run), in (0, 100].
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// The kernel cache the stages share; emptied first unless `--keep-cache`.
    #[arg(long, default_value = "kernel-cache")]
    pub cache: PathBuf,
    /// Start from the kernels and autotune results of an earlier run (a warm start).
    #[arg(long)]
    pub keep_cache: bool,
    /// Skip the second, warm run of the stages that splits each stage's time into
    /// compilation and autotuning, and running.
    #[arg(long)]
    pub no_warm_pass: bool,
}

/// One run of a stage: how it ended, its time, and what it compiled and tuned.
struct Outcome {
    status: String,
    seconds: f64,
    log: PathBuf,
    kernels: KernelCounts,
}

impl Outcome {
    fn json(&self) -> Value {
        json!({
            "status": self.status,
            "seconds": self.seconds,
            "log": self.log.to_string_lossy(),
            "kernels_compiled": self.kernels.compiled,
            "autotune_runs": self.kernels.tuned,
        })
    }
}

/// Runs every stage cold (each with the kernels and autotune results of the stages before
/// it), then again warm, writes the report, prints the table; an error when a stage did not
/// pass.
pub fn all(options: &Options) -> Result<(), String> {
    let Options {
        out,
        logs,
        data,
        time_scale,
        cache,
        ..
    } = options;
    if !(*time_scale > 0.0 && *time_scale <= 100.0) {
        return Err(format!(
            "--time-scale = {time_scale}: allowed 0 < time-scale <= 100"
        ));
    }
    if !data.is_file() {
        return Err(format!(
            "the data set {} is missing (--data)",
            data.display()
        ));
    }
    let autotune_cache = PathBuf::from(format!("{}-autotune", cache.display()));
    for cache in [cache, &autotune_cache] {
        if !options.keep_cache && cache.exists() {
            std::fs::remove_dir_all(cache)
                .map_err(|error| format!("cannot empty {}: {error}", cache.display()))?;
        }
    }
    std::fs::create_dir_all(logs)
        .map_err(|error| format!("cannot create {}: {error}", logs.display()))?;
    let gpu = gpu_description();
    println!("burn-sam GPU check on {}: {gpu}", crate::BACKEND);
    println!(
        "kernel cache: {} ({})",
        cache.display(),
        if options.keep_cache { "kept" } else { "empty" }
    );
    let exe = std::env::current_exe().map_err(|error| format!("own path: {error}"))?;
    let autotune_exe = exe.with_file_name(AUTOTUNE_BINARY);
    let stages = stages(logs, data);
    let run = |stage: &Stage, pass: &str, limit_s: f64| -> Result<Outcome, String> {
        let limit = Duration::from_secs_f64(limit_s * time_scale);
        let log = logs.join(format!("{}{pass}.log", stage.name));
        let kernel_log = logs.join(format!("{}{pass}.kernels.log", stage.name));
        print!(
            "{:<26} (limit {:>4.0} s) ... ",
            format!("{}{pass}", stage.name),
            limit.as_secs_f64()
        );
        std::io::stdout()
            .flush()
            .map_err(|error| error.to_string())?;
        let _ = std::fs::remove_file(&stage.result); // a crash must not leave an old result
        let _ = std::fs::remove_file(&kernel_log);
        let (exe, cache) = match stage.autotune {
            true => (&autotune_exe, &autotune_cache),
            false => (&exe, cache),
        };
        if !exe.is_file() {
            let status = format!(
                "skipped: no {AUTOTUNE_BINARY} beside this binary (`cargo xtask gpu-bundle` \
                 builds it)"
            );
            println!("{status}");
            return Ok(Outcome {
                status,
                seconds: 0.0,
                log,
                kernels: KernelCounts::default(),
            });
        }
        let mut args = vec![
            format!("--kernel-cache={}", cache.display()),
            format!("--kernel-log={}", kernel_log.display()),
        ];
        args.extend(stage.args.iter().cloned());
        let start = Instant::now();
        let status = run_with_limit(exe, &args, &log, limit)?;
        let seconds = start.elapsed().as_secs_f64();
        let kernels = KernelCounts::read(&kernel_log);
        println!(
            "{status} in {seconds:.1} s ({} kernels compiled, {} autotune runs)",
            kernels.compiled, kernels.tuned
        );
        Ok(Outcome {
            status,
            seconds,
            log,
            kernels,
        })
    };
    // Written after every stage, so that a run cut short leaves what it did.
    let report = |results: &[Value]| {
        json!({
            "backend": crate::BACKEND,
            "gpu": gpu,
            "burn_sam_version": env!("CARGO_PKG_VERSION"),
            "kernel_cache": cache.to_string_lossy(),
            "stages": results,
        })
    };
    let mut results = Vec::new();
    // The autotuned build's stages last, cold then warm: whatever cuts the run short, the
    // check's own stages have both passes.
    let (autotuned, own): (Vec<Stage>, Vec<Stage>) =
        stages.into_iter().partition(|stage| stage.autotune);
    for group in [own, autotuned] {
        let first = results.len();
        for stage in &group {
            let cold = run(stage, "", stage.limit_s)?;
            let part = std::fs::read_to_string(&stage.result)
                .ok()
                .and_then(|text| serde_json::from_str::<Value>(&text).ok())
                .unwrap_or(Value::Null);
            results.push(json!({
                "name": stage.name,
                "command": format!("gpu-check {}", stage.args.join(" ")),
                "status": cold.status,
                "seconds": cold.seconds,
                "limit_s": stage.limit_s * time_scale,
                "log": cold.log.to_string_lossy(),
                "cold": cold.json(),
                "result": part,
            }));
            write_json(out, &report(&results))?;
        }
        if options.no_warm_pass || group.is_empty() {
            continue;
        }
        println!("\nagain, with the kernels and autotune results of the run above:");
        for (index, stage) in group.iter().enumerate() {
            let warm = run(stage, "-warm", stage.warm_limit_s)?;
            let result = &mut results[first + index];
            let cold_s = result["seconds"].as_f64().unwrap_or(f64::NAN);
            result["warm"] = warm.json();
            // What the cold run spent compiling and tuning; the warm run's time is running
            // (and loading the compiled kernels).
            result["compile_and_tune_s"] = json!((cold_s - warm.seconds).max(0.0));
            result["run_s"] = json!(warm.seconds);
            write_json(out, &report(&results))?;
        }
    }
    let report = report(&results);
    write_json(out, &report)?;
    print_table(&report);
    println!("\nreport: {}; logs: {}", out.display(), logs.display());
    let passed = |status: &Value| {
        status
            .as_str()
            .is_some_and(|status| status == "passed" || status.starts_with("skipped"))
    };
    let failed: Vec<&str> = results
        .iter()
        .filter(|stage| {
            !passed(&stage["status"])
                || (!options.no_warm_pass && !passed(&stage["warm"]["status"]))
        })
        .filter_map(|stage| stage["name"].as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("stages that did not pass: {}", failed.join(", ")))
    }
}

/// Runs `exe args` with its output in `log`, killed after `limit`; what became of it.
fn run_with_limit(
    exe: &Path,
    args: &[String],
    log: &Path,
    limit: Duration,
) -> Result<String, String> {
    let file =
        File::create(log).map_err(|error| format!("cannot create {}: {error}", log.display()))?;
    let err = file.try_clone().map_err(|error| error.to_string())?;
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|error| format!("cannot start {}: {error}", exe.display()))?;
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|error| error.to_string())? {
            return Ok(match status.code() {
                Some(0) => "passed".into(),
                Some(code) => format!("failed (exit {code})"),
                None => "crashed (killed by a signal)".into(),
            });
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(format!("timed out after {:.0} s", limit.as_secs_f64()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The GPU's name, driver and memory from `nvidia-smi`, or why there are none.
fn gpu_description() -> String {
    let query = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,driver_version,memory.total",
            "--format=csv,noheader",
        ])
        .output();
    match query {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let gpus: Vec<&str> = text.lines().map(str::trim).collect();
            gpus.join("; ")
        }
        Ok(out) => format!(
            "nvidia-smi failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(error) => format!("no nvidia-smi ({error})"),
    }
}

fn percent(value: &Value) -> String {
    value
        .as_f64()
        .map_or("-".into(), |v| format!("{:.1}%", 100.0 * v))
}

/// What a stage's result says in one cell.
fn summary(name: &str, result: &Value) -> String {
    if result.is_null() {
        return "no result (see the log)".into();
    }
    match name {
        "suite-f32" | "suite-f16" => {
            let failed: Vec<String> = result["cases"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|case| case["passed"] == false)
                .map(|case| {
                    let text = |key: &str| case[key].as_str().unwrap_or("?").to_string();
                    format!("{}: {}", text("name"), text("message"))
                })
                .collect();
            let mut cell = format!("{} of {} cases passed", result["passed"], result["total"]);
            if !failed.is_empty() {
                cell += &format!("; failed: {}", failed.join("; "));
            }
            cell
        }
        "noisy-digits-f16" => result
            .as_object()
            .into_iter()
            .flatten()
            .map(|(method, run)| {
                format!(
                    "{method} {} ({:.3} s/epoch)",
                    percent(&run["mean"]),
                    run["epoch_seconds"].as_f64().unwrap_or(f64::NAN)
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        "learner-digits-f16" => format!("test accuracy {}", percent(&result["test_accuracy"])),
        _ => "below".into(),
    }
}

fn print_table(report: &Value) {
    let stages = report["stages"].as_array().cloned().unwrap_or_default();
    let seconds = |value: &Value| value.as_f64().map_or("-".into(), |s| format!("{s:.1} s"));
    println!("\n| stage | status | cold | compile and tune | run (warm) | kernels compiled | autotune runs | result |");
    println!("|---|---|---|---|---|---|---|---|");
    for stage in &stages {
        let name = stage["name"].as_str().unwrap_or("?");
        let status = match stage["warm"]["status"].as_str() {
            Some(warm) if warm != "passed" && stage["status"] != warm => {
                format!("{}; warm: {warm}", stage["status"].as_str().unwrap_or("?"))
            }
            _ => stage["status"].as_str().unwrap_or("?").to_string(),
        };
        println!(
            "| {name} | {status} | {} | {} | {} | {} | {} | {} |",
            seconds(&stage["seconds"]),
            seconds(&stage["compile_and_tune_s"]),
            seconds(&stage["run_s"]),
            stage["cold"]["kernels_compiled"],
            stage["cold"]["autotune_runs"],
            summary(name, &stage["result"]),
        );
    }
    let launches = stages.iter().find(|stage| stage["name"] == "launches");
    if let Some(launches) = launches {
        crate::launches::print_table(&launches["result"]);
    }
    for (name, build) in [("bench", "this build"), ("bench-autotune", AUTOTUNE_BINARY)] {
        let bench = stages
            .iter()
            .find(|stage| stage["name"] == name)
            .map(|stage| &stage["result"])
            .filter(|result| !result.is_null());
        if let Some(bench) = bench {
            print_bench(build, bench);
        }
    }
}

/// The tables of a `bench` stage's result, run by `build`.
fn print_bench(build: &str, bench: &Value) {
    println!(
        "\nSAM's cost ({build}: {}), SGD base, batch {}, medians of {} interleaved rounds:\n",
        bench["backend"].as_str().unwrap_or("?"),
        bench["batch"],
        bench["rounds"]
    );
    println!("| model | params | dtype | base step | two passes | SAM step | sam_over_base | sam_over_two_passes | loss-scaled SAM | scaled_over_unscaled |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (model, facts) in bench["models"].as_object().into_iter().flatten() {
        for dtype in ["f32", "f16"] {
            let ms = |name: &str| {
                facts["ms"][format!("{name}_{dtype}")]
                    .as_f64()
                    .map_or("-".into(), |ms| format!("{ms:.2} ms"))
            };
            let ratio = |name: &str| {
                facts["ratios"][name]
                    .as_f64()
                    .map_or("-".into(), |r| format!("{r:.3}"))
            };
            println!(
                "| {model} | {} | {dtype} | {} | {} | {} | {} | {} | {} | {} |",
                facts["params"],
                ms("base"),
                ms("two_passes"),
                ms("sam"),
                ratio(&format!("sam_over_base_{dtype}")),
                ratio(&format!("sam_over_two_passes_{dtype}")),
                ms("scaled_sam"),
                ratio(&format!("scaled_over_unscaled_{dtype}")),
            );
        }
    }
    println!(
        "\nBursts of back-to-back f32 steps, one sync per burst (as in training), per step:\n"
    );
    println!("| model | two passes | SAM step | sam_over_two_passes | SAM without its closing | closing launch | closing sync | momentum SGD | Momentum-SAM | msam_over_base |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (model, facts) in bench["models"].as_object().into_iter().flatten() {
        let bursts = &facts["bursts"];
        let ms = |value: &Value| {
            value
                .as_f64()
                .map_or("-".into(), |ms| format!("{ms:.2} ms"))
        };
        let ratio = |name: &str| {
            bursts["ratios"][name]
                .as_f64()
                .map_or("-".into(), |r| format!("{r:.3}"))
        };
        println!(
            "| {model} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            ms(&bursts["ms"]["two_passes"]),
            ms(&bursts["ms"]["sam"]),
            ratio("sam_over_two_passes"),
            ms(&bursts["ms"]["sam_no_closing_sync"]),
            ms(&bursts["closing_launch_ms"]),
            ms(&bursts["closing_sync_ms"]),
            ms(&bursts["ms"]["momentum"]),
            ms(&bursts["ms"]["msam"]),
            ratio("msam_over_base"),
        );
    }
}
