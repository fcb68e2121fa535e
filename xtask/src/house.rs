//! `cargo xtask house`: the house rules of the crates' sources, checked. No source file over
//! [`MAX_FILE_LINES`] lines, no function over [`MAX_FN_LINES`], every module on a floor of
//! ARCHITECTURE.md, no import that runs up to a higher floor, no circle of imports, and no
//! import from behind a face (a folder whose `mod.rs` is the only way in).
//!
//! Sources are read as text: comments, strings and character literals are blanked first,
//! so that braces and paths are only the code's. Imports are `use` trees and inline
//! `crate::`/`super::`/`self::` paths, resolved to the module files they name; a test module
//! (from `#[cfg(test)]` to the end of its file) may import what it tests from anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub const MAX_FILE_LINES: usize = 450;
pub const MAX_FN_LINES: usize = 60;

/// Checks every crate of ARCHITECTURE.md; returns the broken rules, one line each.
pub fn check(root: &Path) -> Vec<String> {
    let architecture = match std::fs::read_to_string(root.join("ARCHITECTURE.md")) {
        Ok(text) => text,
        Err(error) => return vec![format!("ARCHITECTURE.md: {error}")],
    };
    let plans = floor_plans(&architecture);
    if plans.is_empty() {
        return vec!["ARCHITECTURE.md has no `<!-- floors: DIR -->` table".into()];
    }
    let faces = faces(&architecture);
    plans
        .iter()
        .flat_map(|(dir, floors)| {
            let faces: Vec<&str> = faces
                .iter()
                .filter(|(of, _)| of == dir)
                .map(|(_, folder)| folder.as_str())
                .collect();
            check_crate(&root.join(dir), dir, floors, &faces)
        })
        .collect()
}

/// Each `<!-- face: DIR FOLDER/ -->` marker: the crate's source folder and the folder whose
/// `mod.rs` is its face.
fn faces(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let rest = line
                .trim()
                .strip_prefix("<!-- face: ")?
                .strip_suffix(" -->")?;
            let (dir, folder) = rest.split_once(' ')?;
            Some((dir.to_string(), folder.trim().to_string()))
        })
        .collect()
}

/// Each `<!-- floors: DIR -->` marker's table: entry (a file, or a folder ending in `/`,
/// relative to DIR) to floor number.
fn floor_plans(text: &str) -> Vec<(String, BTreeMap<String, u32>)> {
    let mut plans = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(dir) = line
            .trim()
            .strip_prefix("<!-- floors: ")
            .and_then(|rest| rest.strip_suffix(" -->"))
        else {
            continue;
        };
        let mut floors = BTreeMap::new();
        for row in lines.by_ref().skip_while(|row| !row.starts_with('|')) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            if !row.starts_with('|') || cells.len() < 4 {
                break;
            }
            let Ok(floor) = cells[1].parse::<u32>() else {
                continue; // the header and its rule
            };
            for entry in cells[3].split('`').skip(1).step_by(2) {
                floors.insert(entry.to_string(), floor);
            }
        }
        plans.push((dir.to_string(), floors));
    }
    plans
}

/// One module file: its path under `src`, module path, and code with comments and literals
/// blanked.
struct Source {
    path: String,
    module: Vec<String>,
    code: String,
    lines: usize,
}

/// The crate's modules: module path to file, and the names each module's `use`s bring in
/// (so that `super::Name` and `crate::Name` resolve through a re-export to where `Name` is).
struct Modules {
    files: BTreeMap<Vec<String>, String>,
    uses: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
}

fn check_crate(
    src: &Path,
    dir: &str,
    floors: &BTreeMap<String, u32>,
    faces: &[&str],
) -> Vec<String> {
    let sources = read_sources(src);
    let modules = Modules {
        files: sources
            .iter()
            .map(|source| (source.module.clone(), source.path.clone()))
            .collect(),
        uses: sources
            .iter()
            .map(|source| {
                let names = use_trees(without_tests(&source.code))
                    .into_iter()
                    .filter(|(_, name)| name != "*" && name != "self")
                    .map(|(path, name)| (name, path))
                    .collect();
                (source.module.clone(), names)
            })
            .collect(),
    };
    let mut broken = Vec::new();
    let mut entry_of = BTreeMap::new();
    for source in &sources {
        let where_ = format!("{dir}/{}", source.path);
        if source.lines > MAX_FILE_LINES {
            broken.push(format!(
                "{where_}: {} lines (at most {MAX_FILE_LINES})",
                source.lines
            ));
        }
        for (name, line, length) in functions(&source.code) {
            if length > MAX_FN_LINES {
                broken.push(format!(
                    "{where_}:{line}: fn {name} is {length} lines (at most {MAX_FN_LINES})"
                ));
            }
        }
        match entry(floors, &source.path) {
            Some(entry) => {
                entry_of.insert(source.path.clone(), entry);
            }
            None => broken.push(format!(
                "{where_}: on no floor of ARCHITECTURE.md's `{dir}` table"
            )),
        }
    }
    let mut edges: BTreeSet<(String, String)> = BTreeSet::new();
    for source in &sources {
        let Some(from) = entry_of.get(&source.path) else {
            continue;
        };
        for path in imported_paths(without_tests(&source.code)) {
            let Some(target) = modules.resolve(&source.module, &path, 0) else {
                continue;
            };
            let Some(to) = entry_of.get(&target) else {
                continue;
            };
            if to == from {
                continue;
            }
            let (up, down) = (floors[to], floors[from]);
            if up > down {
                broken.push(format!(
                    "{dir}/{}: imports `{}` of `{to}` on floor {up}, above its own floor {down}",
                    source.path,
                    path.join("::")
                ));
            }
            edges.insert((from.clone(), to.clone()));
        }
    }
    if let Some(circle) = find_circle(&edges) {
        broken.push(format!(
            "{dir}: imports run in a circle: {}",
            circle.join(" -> ")
        ));
    }
    for face in faces {
        broken.extend(behind_face(&sources, &modules, dir, face));
    }
    broken
}

/// Imports from outside `folder` that name a file behind its face: anything in the folder
/// but its `mod.rs` and the modules that `mod.rs` makes `pub`. Paths are read as written, not
/// through re-exports: `crate::device::GlobalSum` is the face's, `crate::device::reduce::x`
/// is behind it.
fn behind_face(sources: &[Source], modules: &Modules, dir: &str, folder: &str) -> Vec<String> {
    let face = format!("{folder}mod.rs");
    let public: Vec<String> = sources
        .iter()
        .filter(|source| source.path == face)
        .flat_map(|source| public_modules(&source.code))
        .map(|name| format!("{folder}{name}"))
        .collect();
    let mut broken = Vec::new();
    for source in sources.iter().filter(|s| !s.path.starts_with(folder)) {
        for path in imported_paths(without_tests(&source.code)) {
            // Depth at its limit: the path's own modules, no re-export followed.
            let Some(target) = modules.resolve(&source.module, &path, 8) else {
                continue;
            };
            let inside = target.starts_with(folder) && target != face;
            let opened = public.iter().any(|module| {
                target == format!("{module}.rs") || target == format!("{module}/mod.rs")
            });
            if inside && !opened {
                broken.push(format!(
                    "{dir}/{}: imports `{}` from behind the face of `{folder}`: import it \
                     from the folder itself (its `mod.rs`)",
                    source.path,
                    path.join("::")
                ));
            }
        }
    }
    broken
}

/// The names of the `pub mod NAME;` declarations in `code`.
fn public_modules(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|line| line.trim().strip_prefix("pub mod ")?.strip_suffix(';'))
        .map(|name| name.trim().to_string())
        .collect()
}

/// The floor table's entry for the file at `path`: the file itself, or its nearest folder.
fn entry(floors: &BTreeMap<String, u32>, path: &str) -> Option<String> {
    if floors.contains_key(path) {
        return Some(path.to_string());
    }
    let mut folder = Path::new(path).parent();
    while let Some(dir) = folder.filter(|dir| !dir.as_os_str().is_empty()) {
        let key = format!("{}/", dir.display());
        if floors.contains_key(&key) {
            return Some(key);
        }
        folder = dir.parent();
    }
    None
}

fn read_sources(src: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    collect_rs(src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let path = file
                .strip_prefix(src)
                .expect("under src")
                .display()
                .to_string();
            Source {
                module: module_path(&path),
                lines: text.lines().count(),
                code: blank_non_code(&text),
                path,
            }
        })
        .collect()
}

fn collect_rs(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rs(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// `lib.rs` is the crate root, `a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`.
fn module_path(path: &str) -> Vec<String> {
    let mut parts: Vec<String> = path
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code before its test module (`#[cfg(test)]` to the end of the file).
fn without_tests(code: &str) -> &str {
    code.find("#[cfg(test)]")
        .map_or(code, |tests| &code[..tests])
}

impl Modules {
    /// The file where what `path`, written in `module`, names is defined, if it is of this
    /// crate: the deepest module along it, or, through a `use` of that module, the module
    /// the `use` names.
    fn resolve(&self, module: &[String], path: &[String], depth: usize) -> Option<String> {
        let mut base: Vec<String> = module.to_vec();
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            // A child module, or a name the module's own `use`s bring in; anything else is
            // another crate's.
            Some(first) => {
                let child = [module, &[first.to_string()]].concat();
                let used = self.uses.get(module).and_then(|uses| uses.get(first));
                if !self.files.contains_key(&child) && used.is_none() {
                    return None;
                }
            }
            None => return None,
        }
        let mut target = base.clone();
        for (index, segment) in rest.iter().enumerate() {
            target.push(segment.clone());
            if self.files.contains_key(&target) {
                base = target.clone();
                continue;
            }
            let used = self.uses.get(&base).and_then(|uses| uses.get(segment));
            if let (Some(used), true) = (used, depth < 8) {
                let full = [used.as_slice(), &rest[index + 1..]].concat();
                if let Some(file) = self.resolve(&base, &full, depth + 1) {
                    return Some(file);
                }
            }
            break;
        }
        self.files.get(&base).cloned()
    }
}

/// Every path a `use` tree or an inline `crate::`/`super::`/`self::` path names, split at
/// `::` (a group `{a, b::c}` gives one path per leaf).
fn imported_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths: Vec<Vec<String>> = use_trees(code).into_iter().map(|(path, _)| path).collect();
    let bytes = code.as_bytes();
    let mut index = 0;
    while let Some(offset) = code[index..].find(|c: char| c.is_alphabetic() || c == '_') {
        let start = index + offset;
        let end = start
            + code[start..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(code.len() - start);
        let word = &code[start..end];
        let after_path = start > 0 && bytes[start - 1] == b':';
        if word == "use" {
            // Its tree is among `use_trees`' leaves: only its end matters here.
            index = code[end..].find(';').map_or(code.len(), |at| end + at);
            continue;
        }
        if !after_path && matches!(word, "crate" | "super" | "self") {
            let stop = code[start..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |at| start + at);
            let path: Vec<String> = code[start..stop]
                .split("::")
                .filter(|part| !part.is_empty())
                .map(String::from)
                .collect();
            if path.len() > 1 {
                paths.push(path);
            }
            index = stop;
            continue;
        }
        index = end;
    }
    paths
}

/// Every leaf of the `use` statements in `code`: its path and the name it is known by.
fn use_trees(code: &str) -> Vec<(Vec<String>, String)> {
    let mut leaves = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let word_start = at == 0
            || !rest.as_bytes()[at - 1].is_ascii_alphanumeric() && rest.as_bytes()[at - 1] != b'_';
        let after = &rest[at + 4..];
        let stop = after.find(';').unwrap_or(after.len());
        if word_start {
            expand_tree(&[], &after[..stop], &mut leaves);
        }
        rest = &after[stop.min(after.len())..];
    }
    leaves
}

/// The leaves of the use tree `tree` below `prefix`, each with the name it is known by.
fn expand_tree(prefix: &[String], tree: &str, paths: &mut Vec<(Vec<String>, String)>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let mut path = prefix.to_vec();
        let mut parts = tree.split(" as ");
        let leaf = parts.next().unwrap_or(tree);
        path.extend(
            leaf.split("::")
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(String::from),
        );
        let name = parts.next().map(str::trim).map(String::from);
        if let Some(name) = name.or_else(|| path.last().cloned()) {
            paths.push((path, name));
        }
        return;
    };
    let mut path = prefix.to_vec();
    path.extend(
        tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from),
    );
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut depth, mut from) = (0, 0);
    for (at, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand_tree(&path, &inner[from..at], paths);
                from = at + 1;
            }
            _ => {}
        }
    }
    expand_tree(&path, &inner[from..], paths);
}

/// Each function with a body: its name, first line (from 1) and length in lines, from the
/// `fn` to its closing brace.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut search = 0;
    while let Some(offset) = code[search..].find("fn ") {
        let at = search + offset;
        search = at + 3;
        let word_start =
            at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        let name: String = code[at + 3..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !word_start || name.is_empty() {
            continue;
        }
        let Some(body) = code[at..].find(['{', ';']).map(|found| at + found) else {
            continue;
        };
        if bytes[body] == b';' {
            continue;
        }
        let mut depth = 0;
        let mut end = body;
        for (index, byte) in bytes.iter().enumerate().skip(body) {
            match byte {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = index;
                        break;
                    }
                }
                _ => {}
            }
        }
        let line = code[..at].matches('\n').count() + 1;
        let length = code[at..=end].matches('\n').count() + 1;
        found.push((name, line, length));
    }
    found
}

/// `text` with comments, string literals and character literals turned into spaces (newlines
/// kept), so that only the code's braces and paths remain.
fn blank_non_code(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut index = 0;
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    while index < chars.len() {
        let c = chars[index];
        let next = chars.get(index + 1).copied();
        if c == '/' && next == Some('/') {
            while index < chars.len() && chars[index] != '\n' {
                blank(&mut out, chars[index]);
                index += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while index < chars.len() {
                let pair = (chars[index], chars.get(index + 1).copied());
                if pair == ('/', Some('*')) {
                    depth += 1;
                } else if pair == ('*', Some('/')) {
                    depth -= 1;
                }
                blank(&mut out, chars[index]);
                index += 1;
                if depth == 0 && pair == ('*', Some('/')) {
                    blank(&mut out, chars[index]);
                    index += 1;
                    break;
                }
            }
        } else if c == 'r' && matches!(next, Some('#' | '"')) && !ident_before(&chars, index) {
            let hashes = chars[index + 1..].iter().take_while(|&&c| c == '#').count();
            if chars.get(index + 1 + hashes) != Some(&'"') {
                out.push(c);
                index += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body_start = index + 2 + hashes;
            let rest: String = chars[body_start..].iter().collect();
            let length = rest
                .find(&close)
                .map_or(rest.len(), |at| rest[..at].chars().count());
            for &c in &chars[index..(body_start + length + close.len()).min(chars.len())] {
                blank(&mut out, c);
            }
            index = body_start + length + close.len();
        } else if c == '"' {
            blank(&mut out, c);
            index += 1;
            while index < chars.len() && chars[index] != '"' {
                let escaped = chars[index] == '\\';
                blank(&mut out, chars[index]);
                index += 1;
                if escaped && index < chars.len() {
                    blank(&mut out, chars[index]);
                    index += 1;
                }
            }
            if index < chars.len() {
                blank(&mut out, chars[index]);
                index += 1;
            }
        } else if c == '\'' && is_char_literal(&chars, index) {
            let length = if next == Some('\\') {
                chars[index + 2..]
                    .iter()
                    .position(|&c| c == '\'')
                    .map_or(2, |at| at + 3)
            } else {
                3
            };
            for &c in &chars[index..(index + length).min(chars.len())] {
                blank(&mut out, c);
            }
            index += length;
        } else {
            out.push(c);
            index += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], index: usize) -> bool {
    index > 0 && (chars[index - 1].is_alphanumeric() || chars[index - 1] == '_')
}

/// A `'` that opens a character literal (`'a'`, `'\n'`), not a lifetime (`'a`).
fn is_char_literal(chars: &[char], index: usize) -> bool {
    match chars.get(index + 1) {
        Some('\\') => true,
        Some(_) => chars.get(index + 2) == Some(&'\''),
        None => false,
    }
}

/// A circle in the import graph, if there is one, as the entries along it.
fn find_circle(edges: &BTreeSet<(String, String)>) -> Option<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges {
        next.entry(from).or_default().push(to);
    }
    fn visit<'a>(
        node: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|&on| on == node) {
            let mut circle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
            circle.push(node.to_string());
            return Some(circle);
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for &to in next.get(node).into_iter().flatten() {
            if let Some(circle) = visit(to, next, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    let nodes: Vec<&str> = next.keys().copied().collect();
    nodes
        .into_iter()
        .find_map(|node| visit(node, &next, &mut Vec::new(), &mut done))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_strings_and_chars_are_blanked() {
        let code =
            blank_non_code("let a = \"{ crate::x }\"; // crate::y {\nlet b = '{'; 'a: loop {}");
        assert!(!code.contains("crate::"), "{code}");
        assert_eq!(code.matches('{').count(), 1, "{code}");
        assert!(code.contains("'a: loop"), "a lifetime is code: {code}");
    }

    #[test]
    fn use_trees_expand_to_their_leaves() {
        let paths =
            imported_paths("use crate::{a::B, c::{d, e::F as G}};\nfn f() { super::h::i(); }");
        let joined: Vec<String> = paths.iter().map(|path| path.join("::")).collect();
        assert_eq!(
            joined,
            [
                "crate::a::B",
                "crate::c::d",
                "crate::c::e::F",
                "super::h::i"
            ]
        );
    }

    #[test]
    fn paths_resolve_to_module_files_through_reexports() {
        let files: BTreeMap<Vec<String>, String> = [
            (vec![], "lib.rs"),
            (vec!["a".into()], "a.rs"),
            (vec!["t".into()], "t/mod.rs"),
            (vec!["t".into(), "u".into()], "t/u.rs"),
        ]
        .into_iter()
        .map(|(module, file)| (module, file.to_string()))
        .collect();
        let path = |text: &str| text.split("::").map(String::from).collect::<Vec<_>>();
        let uses = [(vec![], [("F".to_string(), path("a::F"))].into())].into();
        let modules = Modules { files, uses };
        let in_u = ["t".to_string(), "u".to_string()];
        let resolve = |module: &[String], text| modules.resolve(module, &path(text), 0);
        assert_eq!(resolve(&in_u, "super::Item"), Some("t/mod.rs".into()));
        assert_eq!(resolve(&in_u, "crate::a::f"), Some("a.rs".into()));
        assert_eq!(
            resolve(&in_u, "crate::F"),
            Some("a.rs".into()),
            "a re-export"
        );
        assert_eq!(resolve(&["t".into()], "u::X"), Some("t/u.rs".into()));
        assert_eq!(resolve(&in_u, "burn::tensor::Tensor"), None);
    }

    #[test]
    fn a_long_function_and_a_circle_are_found() {
        let body = "    x();\n".repeat(MAX_FN_LINES);
        let code = format!("fn short() {{}}\nfn long() {{\n{body}}}\ntrait T {{ fn decl(); }}\n");
        let lengths: Vec<(String, usize)> = functions(&code)
            .into_iter()
            .map(|(name, _, length)| (name, length))
            .collect();
        assert_eq!(
            lengths,
            [("short".into(), 1), ("long".into(), MAX_FN_LINES + 2)]
        );
        let edge = |a: &str, b: &str| (a.to_string(), b.to_string());
        let edges: BTreeSet<_> = [edge("a", "b"), edge("b", "c"), edge("c", "a")].into();
        assert_eq!(find_circle(&edges).map(|c| c.len()), Some(4));
        assert_eq!(find_circle(&[edge("a", "b")].into()), None);
    }

    #[test]
    fn an_import_from_behind_a_face_is_found() {
        let source = |path: &str, code: &str| Source {
            path: path.into(),
            module: module_path(path),
            code: code.into(),
            lines: 1,
        };
        let sources = vec![
            source("lib.rs", "mod device;\nmod maths;\npub use device::open;"),
            source(
                "device/mod.rs",
                "mod quirk;\npub mod open;\npub(crate) use quirk::fast;",
            ),
            source("device/quirk.rs", "pub fn fast() {}"),
            source("device/open.rs", "pub fn count() {}"),
            source(
                "maths.rs",
                "use crate::device::fast;\nuse crate::device::open::count;\nuse crate::device::quirk::fast as planted;",
            ),
        ];
        let modules = Modules {
            files: sources
                .iter()
                .map(|s| (s.module.clone(), s.path.clone()))
                .collect(),
            uses: sources
                .iter()
                .map(|s| {
                    let names = use_trees(&s.code)
                        .into_iter()
                        .map(|(p, n)| (n, p))
                        .collect();
                    (s.module.clone(), names)
                })
                .collect(),
        };
        let broken = behind_face(&sources, &modules, "src", "device/");
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert!(broken[0].starts_with("src/maths.rs: imports `crate::device::quirk::fast`"));
        assert_eq!(
            faces("<!-- face: src device/ -->"),
            [("src".into(), "device/".into())]
        );
    }

    #[test]
    fn floor_tables_are_read() {
        let text = "<!-- floors: crates/x/src -->\n\n| floor | what | modules |\n|---|---|---|\n| 2 | top | `lib.rs`, `sam/` |\n| 1 | ground | `error.rs` |\n\nafter";
        let plans = floor_plans(text);
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].1.get("sam/"), Some(&2));
        assert_eq!(plans[0].1.get("error.rs"), Some(&1));
        assert_eq!(entry(&plans[0].1, "sam/phases.rs"), Some("sam/".into()));
    }
}
