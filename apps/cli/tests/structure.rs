//! The shape of the code, checked: no module of an engine crate imports another in a
//! circle, no source file's non-test code passes 800 lines, and the published crates
//! hide no public module without a written reason.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The lines of a file before its inline test module (a `#[cfg(test)]` followed by a
/// `mod`; the attribute on anything else does not end the code).
fn before_tests(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines[i + 1..].iter().find(|l| !l.trim().is_empty()).is_some_and(|l| {
                    let l = l.trim_start();
                    l.starts_with("mod ") || l.starts_with("pub mod ") || l.starts_with("pub(crate) mod ")
                })
        })
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

/// A file's code before its inline tests, comments dropped.
fn code_before_tests(text: &str) -> Vec<&str> {
    before_tests(text).into_iter().map(|l| l.split("//").next().unwrap_or_default()).collect()
}

/// The top-level module a file of `src` belongs to (`vt/frame.rs` is `vt`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_owned()
}

/// Which top-level modules of the crate at `src` each one names through `crate::`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(src) {
        let name = module_of(src, &file);
        if name == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let deps = graph.entry(name.clone()).or_default();
        for line in code_before_tests(&text) {
            for (i, _) in line.match_indices("crate::") {
                let rest = &line[i + "crate::".len()..];
                let dep: String =
                    rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if !dep.is_empty() && dep != name {
                    deps.insert(dep);
                }
            }
        }
    }
    // `crate::item` for an item of the crate root (a re-export, a function there) is an
    // edge to the root, `lib`.
    let names: BTreeSet<String> = graph.keys().cloned().collect();
    for (name, deps) in graph.iter_mut() {
        let root_items = deps.iter().any(|d| !names.contains(d));
        deps.retain(|d| names.contains(d));
        if root_items && name != "lib" {
            deps.insert("lib".into());
        }
    }
    graph
}

/// A circle through `graph`, if there is one.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut circle = path[i..].to_vec();
            circle.push(n.to_owned());
            return Some(circle);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for d in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_imports_another_in_a_circle() {
    for krate in ["engine/render/src", "engine/tools/src"] {
        let graph = module_graph(&root().join(krate));
        assert!(graph.len() > 5, "{krate}: too few modules found: {graph:?}");
        let edges: usize = graph.values().map(BTreeSet::len).sum();
        assert!(edges > 5, "{krate}: too few imports found: {graph:?}");
        if let Some(circle) = find_circle(&graph) {
            panic!("{krate}: modules import each other in a circle: {}", circle.join(" -> "));
        }
    }
    // The check sees a circle where there is one.
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(find_circle(&g).unwrap(), ["a", "b", "c", "a"]);
}

#[test]
fn no_source_file_has_more_than_800_lines_before_its_tests() {
    let mut long = Vec::new();
    for dir in [
        "engine/core/src",
        "engine/render/src",
        "engine/tools/src",
        "engine/overlay/src",
        "apps",
        "engine/bevy_tessera/src",
    ] {
        for file in rust_files(&root().join(dir)) {
            let text = std::fs::read_to_string(&file).unwrap();
            let lines = before_tests(&text).len();
            let rel = file.strip_prefix(root()).unwrap_or(&file).display().to_string();
            if lines > 800 && !rel.contains("/tests/") {
                long.push(format!("{rel}: {lines}"));
            }
        }
    }
    assert!(long.is_empty(), "split these by concern:\n{}", long.join("\n"));
}

#[test]
fn published_crates_hide_no_public_module_without_a_reason() {
    for krate in ["engine/core/src", "engine/render/src", "engine/overlay/src"] {
        for file in rust_files(&root().join(krate)) {
            let text = std::fs::read_to_string(&file).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                if line.trim() != "#[doc(hidden)]"
                    || !lines.get(i + 1).is_some_and(|l| l.contains("pub mod "))
                {
                    continue;
                }
                // The reason: a comment right above the attribute.
                let reason = i > 0 && lines[i - 1].trim_start().starts_with("//");
                assert!(
                    reason,
                    "{}:{}: a hidden public module without a comment saying why",
                    file.display(),
                    i + 1
                );
            }
        }
    }
}
