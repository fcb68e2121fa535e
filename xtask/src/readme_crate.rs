//! README's dependency lines, built as a user's crate outside the workspace: a
//! `Cargo.toml` whose `[dependencies]` are README's CPU block as shown (its paths pointed at
//! this checkout) and `readme-crate/main.rs`, run with a fresh dependency resolution.

use std::path::{Path, PathBuf};

use crate::{backends, fail};

/// README's marker line above the block.
const MARKER: &str = "<!-- dependencies: cpu -->";

/// The `[dependencies]` block under [`MARKER`], with `../burn-sam/` replaced by `checkout`.
fn dependencies(readme: &str, checkout: &Path) -> Result<String, String> {
    let after = readme
        .split_once(MARKER)
        .ok_or_else(|| format!("README has no `{MARKER}` line"))?
        .1;
    let body = after
        .trim_start()
        .strip_prefix("```toml\n")
        .ok_or("README's dependency block does not open with ```toml")?;
    let block = body
        .split_once("\n```")
        .ok_or("README's dependency block does not end")?
        .0;
    if !block.starts_with("[dependencies]") {
        return Err("README's dependency block does not start with [dependencies]".into());
    }
    let checkout = format!("{}/", checkout.display());
    Ok(block.replace("\"../burn-sam/", &format!("\"{checkout}")))
}

/// Writes the crate under the target folder; its manifest's path and the target folder to
/// build it in (its own: a fresh resolution builds other versions than the workspace's).
pub fn write() -> (String, String) {
    let checkout = std::env::current_dir().unwrap_or_else(|e| fail(&format!("cwd: {e}")));
    let readme = std::fs::read_to_string("README.md")
        .unwrap_or_else(|error| fail(&format!("cannot read README.md: {error}")));
    let dependencies = dependencies(&readme, &checkout).unwrap_or_else(|why| fail(&why));
    let dir = backends::target_dir().join("readme-crate");
    let dir = match dir.is_absolute() {
        true => dir,
        false => checkout.join(dir),
    };
    let write = |path: &Path, text: &str| {
        std::fs::create_dir_all(path.parent().expect("a folder"))
            .and_then(|()| std::fs::write(path, text))
            .unwrap_or_else(|error| fail(&format!("cannot write {}: {error}", path.display())));
    };
    // Its own workspace, so that the checkout's does not claim it.
    let manifest = format!(
        "[package]\nname = \"readme-crate\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\n\n[workspace]\n\n{dependencies}\n"
    );
    write(&dir.join("Cargo.toml"), &manifest);
    write(
        &dir.join("src/main.rs"),
        include_str!("../readme-crate/main.rs"),
    );
    let path = |path: PathBuf| path.to_str().expect("a UTF-8 path").to_string();
    (path(dir.join("Cargo.toml")), path(dir.join("target")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_under_the_marker_with_paths_into_the_checkout() {
        let readme = "text\n<!-- dependencies: cpu -->\n```toml\n[dependencies]\n\
                      a = { path = \"../burn-sam/crates/a\" }\nb = \"1\"\n```\nmore\n";
        let block = dependencies(readme, Path::new("/src/x")).unwrap();
        assert_eq!(
            block,
            "[dependencies]\na = { path = \"/src/x/crates/a\" }\nb = \"1\""
        );
        assert!(dependencies("no marker", Path::new("/")).is_err());
    }
}
