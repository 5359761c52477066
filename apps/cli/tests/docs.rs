//! The README and the guide in docs/ against the code: every `tessera` command they show
//! names a subcommand and flags the binary has (`tessera SUBCOMMAND --help`), every
//! script, example and guide file they point to exists, and the README's Rust blocks are
//! copies of the guide's, which `tessera` and `bevy_tessera` compile as doctests.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every docs/*.md, with their text.
fn documents() -> Vec<(String, String)> {
    let mut files = vec![root().join("README.md")];
    let mut guide: Vec<_> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guide.sort();
    files.extend(guide);
    files
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(root()).unwrap_or(&p).display().to_string();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// A fenced code block: its info string (`sh`, `rust,no_run`…) and its text.
struct Block {
    info: String,
    text: String,
}

/// The fenced code blocks of a Markdown text.
fn blocks(md: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for line in md.lines() {
        match (&mut open, line.trim_start().strip_prefix("```")) {
            (None, Some(info)) => open = Some(Block { info: info.trim().to_owned(), text: String::new() }),
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some(b), None) => {
                b.text.push_str(line);
                b.text.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// The command lines of a shell block: continuation lines joined, comments dropped.
fn command_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for raw in text.lines() {
        let line = match raw.find(" #") {
            Some(i) => &raw[..i],
            None if raw.trim_start().starts_with('#') => "",
            None => raw,
        };
        let (line, continued) = match line.trim_end().strip_suffix('\\') {
            Some(l) => (l, true),
            None => (line, false),
        };
        current.push_str(line);
        current.push(' ');
        if !continued {
            if !current.trim().is_empty() {
                lines.push(current.trim().to_owned());
            }
            current.clear();
        }
    }
    lines
}

/// A `tessera` invocation in a command line: its subcommand and the long flags it
/// passes (environment assignments and `exec` / `time` before it skipped).
fn tessera_call(line: &str) -> Option<(String, Vec<String>)> {
    // Environment assignments and command prefixes (`exec`, `time`) before it.
    let mut words = line
        .split_whitespace()
        .skip_while(|w| (w.contains('=') && !w.starts_with('-')) || matches!(*w, "exec" | "time" | "nice"));
    if words.next()? != "tessera" {
        return None;
    }
    let sub = words.next()?.to_owned();
    let flags = words
        .filter_map(|w| w.strip_prefix("--"))
        .map(|f| {
            f.split('=').next().unwrap_or(f).trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-')
        })
        .filter(|f| !f.is_empty())
        .map(|f| format!("--{f}"))
        .collect();
    Some((sub, flags))
}

/// Whether `help` lists `flag` as a flag of its own (not a prefix of a longer one).
fn lists_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        let next = help[i + flag.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

#[test]
fn every_tessera_command_in_the_readme_and_guide_parses() {
    let mut calls: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    for (file, md) in documents() {
        for b in blocks(&md).iter().filter(|b| b.info == "sh" || b.info.is_empty()) {
            for line in command_lines(&b.text) {
                if let Some((sub, flags)) = tessera_call(&line) {
                    let entry = calls.entry(sub).or_default();
                    entry.insert((String::new(), file.clone()));
                    entry.extend(flags.into_iter().map(|f| (f, file.clone())));
                }
            }
        }
    }
    for sub in ["bake", "capture", "bench", "demo", "inspect", "verify", "publish", "soak"] {
        assert!(calls.contains_key(sub), "the docs show no `tessera {sub}` command");
    }
    let mut wrong = Vec::new();
    for (sub, flags) in &calls {
        let out =
            Command::new(env!("CARGO_BIN_EXE_tessera")).args([sub.as_str(), "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        for (flag, file) in flags {
            if !out.status.success() {
                wrong.push(format!("{file}: `tessera {sub}` is no subcommand"));
                break;
            }
            if !flag.is_empty() && !lists_flag(&help, flag) {
                wrong.push(format!("{file}: `tessera {sub}` has no {flag}"));
            }
        }
    }
    assert!(wrong.is_empty(), "commands in the docs that no longer parse:\n{}", wrong.join("\n"));
}

#[test]
fn scripts_examples_and_guide_files_named_in_the_docs_exist() {
    let examples = [
        "engine/render/examples",
        "engine/bevy_tessera/examples",
        "apps/viewer/examples",
        "apps/cli/examples",
    ];
    let mut missing = Vec::new();
    for (file, md) in documents() {
        for b in blocks(&md).iter().filter(|b| b.info == "sh") {
            for line in command_lines(&b.text) {
                for w in line.split_whitespace() {
                    if (w.starts_with("scripts/") || w.starts_with("assets/")) && !root().join(w).exists() {
                        missing.push(format!("{file}: {w}"));
                    }
                }
                let words: Vec<_> = line.split_whitespace().collect();
                for pair in words.windows(2).filter(|p| p[0] == "--example") {
                    let found =
                        examples.iter().any(|d| root().join(d).join(format!("{}.rs", pair[1])).exists());
                    if !found {
                        missing.push(format!("{file}: example {}", pair[1]));
                    }
                }
            }
        }
        for (i, _) in md.match_indices("](") {
            let target = md[i + 2..].split(')').next().unwrap_or_default();
            if target.starts_with("http") || target.starts_with('#') {
                continue;
            }
            let base = if file.starts_with("docs/") { root().join("docs") } else { root() };
            let path = target.split('#').next().unwrap_or(target);
            if !base.join(path).exists() {
                missing.push(format!("{file}: link {target}"));
            }
        }
    }
    assert!(missing.is_empty(), "named in the docs but missing:\n{}", missing.join("\n"));
}

#[test]
fn the_readme_rust_blocks_are_the_guides_doctested_ones() {
    let docs = documents();
    let guide: Vec<Block> =
        docs.iter().filter(|(f, _)| f.starts_with("docs/")).flat_map(|(_, md)| blocks(md)).collect();
    let readme = &docs[0].1;
    let rust: Vec<Block> = blocks(readme).into_iter().filter(|b| b.info.starts_with("rust")).collect();
    assert!(rust.len() >= 2, "the README shows the embedding loop and the Bevy snippet");
    for b in rust {
        let same = guide.iter().any(|g| g.info == b.info && g.text == b.text);
        assert!(same, "a README Rust block is not a copy of a guide block (which is doctested):\n{}", b.text);
    }
    // The guide files whose Rust blocks the crates include as doctests.
    let included = [
        ("engine/render/src/lib.rs", "docs/embedding.md"),
        ("engine/render/src/lib.rs", "docs/baking.md"),
        ("engine/render/src/lib.rs", "docs/runtime-vt.md"),
        ("engine/bevy_tessera/src/lib.rs", "docs/bevy.md"),
    ];
    for (file, md) in docs.iter().filter(|(f, _)| f.starts_with("docs/")) {
        if blocks(md).iter().any(|b| b.info.starts_with("rust")) {
            let (src, _) = included
                .iter()
                .find(|(_, g)| g == file)
                .unwrap_or_else(|| panic!("{file} has Rust blocks that no crate compiles as doctests"));
            let text = std::fs::read_to_string(root().join(src)).unwrap();
            assert!(text.contains(&format!("../../../{file}")), "{src} does not include {file}");
        }
    }
}

#[test]
fn the_readme_fits_on_a_screen_and_starts_with_its_two_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 150, "README.md has {lines} lines; move detail into docs/");
    let first = blocks(&readme).into_iter().next().unwrap();
    let commands = command_lines(&first.text);
    assert_eq!(commands, ["scripts/demo", "scripts/test"], "the README's first block");
    assert!(root().join(".ci/run").exists());
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.contains("scripts/test"), ".ci/run runs the README's test command");
}
