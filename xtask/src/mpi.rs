//! `cargo xtask test-mpi`: `tests/mpi_ranks.rs` under `mpirun` on this machine's loopback,
//! every scenario with the outcome it must have (the failures must fail, fast, saying why);
//! then the troubleshooting chapter against `RanksError`, which only the `mpi` feature builds.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::fail;

/// Whether Open MPI's launcher and compiler wrapper (which the `mpi` crate builds with) are
/// installed.
pub fn installed() -> bool {
    ["mpirun", "mpicc"].iter().all(|tool| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    })
}

pub fn require() {
    if !installed() {
        fail("Open MPI is not installed: `apt-get install -y openmpi-bin libopenmpi-dev libclang-dev`");
    }
}

/// Builds the test program and returns its path.
fn build() -> PathBuf {
    let args = [
        "test",
        "--features",
        "mpi",
        "--test",
        "mpi_ranks",
        "--no-run",
        "--message-format=json",
    ];
    eprintln!("$ cargo {}", args.join(" "));
    let output = Command::new("cargo")
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|error| fail(&format!("cannot start cargo: {error}")));
    if !output.status.success() {
        fail("building tests/mpi_ranks.rs failed");
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find_map(|message| {
            let executable = message["executable"].as_str()?;
            let target = message["target"]["name"].as_str()?;
            (target == "mpi_ranks").then(|| PathBuf::from(executable))
        })
        .unwrap_or_else(|| fail("cargo built no mpi_ranks test program"))
}

/// `mpirun -np ranks program args`: its status, combined output and time.
fn mpirun(ranks: usize, program: &PathBuf, args: &[&str]) -> (bool, String, Duration) {
    let ranks = ranks.to_string();
    let mut command = Command::new("mpirun");
    // Loopback on one host, as root in CI containers, more ranks than cores.
    command
        .args(["--oversubscribe", "-np", &ranks])
        .arg(program)
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl", "self,tcp")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .env("OMPI_MCA_oob_tcp_if_include", "lo");
    eprintln!(
        "$ mpirun --oversubscribe -np {ranks} mpi_ranks {}",
        args.join(" ")
    );
    let start = Instant::now();
    let output = command
        .output()
        .unwrap_or_else(|error| fail(&format!("cannot start mpirun: {error}")));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text, start.elapsed())
}

pub fn test_mpi() {
    require();
    let program = build();
    for ranks in [2, 3, 4] {
        let (ok, output, time) = mpirun(ranks, &program, &["ranks"]);
        eprintln!("{output}");
        if !ok {
            fail(&format!("{ranks} ranks: the runs across ranks failed"));
        }
        eprintln!(
            "{ranks} ranks: bitwise one process's, in {:.0} s",
            time.as_secs_f64()
        );
    }

    let (ok, output, _) = mpirun(2, &program, &["mismatch"]);
    if ok || !output.contains("different configurations: rank 1 has window 2, rank 0 window 1") {
        eprintln!("{output}");
        fail("ranks started with different windows were not refused with the difference named");
    }
    eprintln!(
        "mismatched ranks refused: {}",
        first_line(&output, "different configurations")
    );

    let dir = std::env::temp_dir().join(format!("burn-sam-mpi-die-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).expect("checkpoint folder");
    let dir = dir.display().to_string();
    let (ok, output, time) = mpirun(2, &program, &["die", &dir]);
    let named = output.contains("noticed that process rank 1");
    if ok || !named || time > Duration::from_secs(30) {
        eprintln!("{output}");
        fail(&format!(
            "a dying rank 1: the job must end within 30 s naming it (ended: {}, named: {named}, {:.0} s)",
            !ok,
            time.as_secs_f64()
        ));
    }
    eprintln!(
        "rank 1 died; the job ended in {:.1} s: {}",
        time.as_secs_f64(),
        first_line(&output, "noticed that process rank 1")
    );
    let (ok, output, _) = mpirun(2, &program, &["resume", &dir]);
    eprintln!("{output}");
    if !ok {
        fail("resuming after rank 1 died did not end with the uninterrupted run's weights");
    }
    std::fs::remove_dir_all(&dir).ok();

    // `RanksError`'s entries in the troubleshooting chapter are checked with the feature on.
    let args = ["test", "--features", "mpi", "--test", "troubleshooting"];
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new("cargo")
        .args(args)
        .status()
        .unwrap_or_else(|error| fail(&format!("cannot start cargo: {error}")));
    if !status.success() {
        fail("the troubleshooting chapter does not match the library built with `mpi`");
    }
}

fn first_line<'a>(output: &'a str, containing: &str) -> &'a str {
    output
        .lines()
        .find(|line| line.contains(containing))
        .unwrap_or("")
        .trim()
}
