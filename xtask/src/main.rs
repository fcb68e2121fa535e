//! Project tasks: `cargo xtask <task>`.
//!
//! - `ci`: formatting, clippy and the tests, as `.ci/run` checks them.
//! - `reference`: regenerates the PyTorch reference fixtures (needs `python3` with `torch`).
//! - `bench`: runs the benchmarks and prints the ratios.

use std::process::{exit, Command};

fn run(program: &str, args: &[&str]) {
    eprintln!("$ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .status()
        .unwrap_or_else(|error| panic!("cannot start {program}: {error}"));
    if !status.success() {
        eprintln!("`{program} {}` failed: {status}", args.join(" "));
        exit(status.code().unwrap_or(1));
    }
}

fn main() {
    let task = std::env::args().nth(1).unwrap_or_default();
    match task.as_str() {
        "ci" => {
            run("cargo", &["fmt", "--all", "--", "--check"]);
            run(
                "cargo",
                &[
                    "clippy",
                    "--workspace",
                    "--all-targets",
                    "--",
                    "-D",
                    "warnings",
                ],
            );
            run("cargo", &["test", "--workspace"]);
        }
        "reference" => run("python3", &["reference/sam_reference.py"]),
        "bench" => run("cargo", &["bench", "--bench", "sam_step"]),
        _ => {
            eprintln!("usage: cargo xtask <ci | reference | bench>");
            exit(2);
        }
    }
}
