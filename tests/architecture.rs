//! ARCHITECTURE.md's answers to a newcomer's four questions point at the code they name: each
//! `file:line` it gives is that line of `crates/burn-sam/src`, holding what it says.

/// Each place ARCHITECTURE.md names, and what that line holds.
const PLACES: [(&str, &str); 6] = [
    ("perturb.rs:48", "let factor"),
    ("perturb.rs:179", "factor.times"),
    ("sam/phases.rs:302", "fn put_back"),
    ("mixed_precision/base_step.rs:149", "fn step_if_finite"),
    ("mixed_precision/base_step.rs:162", "!grad_norm.is_finite()"),
    ("sam/phases.rs:319", "fn finish"),
];

#[test]
fn the_newcomers_answers_point_at_their_code() {
    let architecture = std::fs::read_to_string("ARCHITECTURE.md").expect("ARCHITECTURE.md");
    for (place, holds) in PLACES {
        assert!(
            architecture.contains(&format!("`{place}`")),
            "ARCHITECTURE.md no longer names `{place}`: update PLACES"
        );
        let (file, line) = place.split_once(':').expect("file:line");
        let source = std::fs::read_to_string(format!("crates/burn-sam/src/{file}"))
            .unwrap_or_else(|error| panic!("{file}: {error}"));
        let line: usize = line.parse().expect("a line number");
        let text = source.lines().nth(line - 1).unwrap_or_default();
        assert!(
            text.contains(holds),
            "ARCHITECTURE.md's `{place}` is `{}`, not the line with `{holds}`: update both",
            text.trim()
        );
    }
}
