//! The fuzz harnesses without a fuzzer: every committed crasher and interesting input
//! under `tests/fuzz/<target>/` is replayed through its entry point, and every generated
//! seed must be accepted and decode fully (so the seeds start the fuzzer deep).

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::path::{Path, PathBuf};

use tessera_core::fuzz::{Summary, Target, seeds};

fn regression_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz").join(name)
}

/// The files of `tests/fuzz/<name>/`, sorted (none when the folder does not exist).
fn regression_files(name: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(regression_dir(name)) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

fn replay(target: Target) -> usize {
    let files = regression_files(target.name());
    for file in &files {
        eprintln!("{}: {}", target.name(), file.display());
        let summary = target.run(&std::fs::read(file).unwrap());
        eprintln!("  {summary:?}");
    }
    files.len()
}

#[test]
fn atlas_regressions() {
    replay(Target::Atlas);
}

#[test]
fn basis_regressions() {
    replay(Target::Basis);
}

#[test]
fn gltf_regressions() {
    replay(Target::Gltf);
}

#[test]
fn camera_regressions() {
    replay(Target::Camera);
}

#[test]
fn image_regressions() {
    replay(Target::Image);
}

/// Basis tiles with valid structure and repaired checksums whose compressed contents trip
/// an assertion inside the C++ transcoder (which aborted the process): the run-time Rust
/// transcoder refuses the ETC1S one and writes a harmless block for the UASTC one
/// (`tests/basis_rust.rs`).
#[test]
fn basis_abort_regressions() {
    for file in regression_files("basis-abort") {
        eprintln!("basis-abort: {}", file.display());
        Target::Basis.run(&std::fs::read(file).unwrap());
    }
}

/// Every seed is valid: accepted, with every part decoded.
#[test]
fn seeds_are_accepted_and_decode_fully() {
    for target in Target::ALL {
        let seeds = seeds::seeds(target).unwrap();
        assert!(seeds.len() >= 4, "{}: {} seeds", target.name(), seeds.len());
        for (name, bytes) in &seeds {
            assert!(bytes.len() < 20_000, "{}/{name}: {} bytes", target.name(), bytes.len());
            let summary = target.run(bytes);
            eprintln!("{}/{name}: {} bytes, {summary:?}", target.name(), bytes.len());
            assert!(summary.accepted, "{}/{name} was refused: {summary:?}", target.name());
            assert_eq!(summary.failed, 0, "{}/{name}: {summary:?}", target.name());
            assert!(summary.ok > 0, "{}/{name}: {summary:?}", target.name());
        }
    }
}

/// The seeds' damaged copies (every 97th byte flipped, truncated halves) are errors or
/// decode, never crash: a cheap stand-in for a fuzzer in every `cargo test`.
#[test]
fn damaged_seeds_never_crash() {
    for target in Target::ALL {
        for (name, bytes) in seeds::seeds(target).unwrap() {
            let mut flipped = bytes.clone();
            for (i, b) in flipped.iter_mut().enumerate().skip(1) {
                if i % 97 == 0 {
                    *b ^= 0x5a;
                }
            }
            let half = &bytes[..bytes.len() / 2];
            let runs: [(&str, &[u8]); 3] = [("flipped", &flipped), ("half", half), ("empty", &[])];
            for (what, input) in runs {
                let s: Summary = target.run(input);
                eprintln!("{}/{name} {what}: {s:?}", target.name());
            }
        }
    }
}
