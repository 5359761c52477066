//! Hostile inputs and outputs of issue 41 through the `tessera` binary: a listing piped
//! into a reader that stops early ends quietly (hostile case 9), and refused KTX2 inputs
//! (a forged level length, a Zstandard bomb under `--max-memory`) fail with one error
//! line and leave no temporary file beside the output.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use tessera_core::format::basis::BasisMode;
use tessera_core::format::codec::EncodeOptions;

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("run tessera")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Bakes a generated texture of `side`² texels into `atlas`.
fn bake_generated(atlas: &Path, side: u32) {
    let size = format!("{side}x{side}");
    let o = tessera(&["bake", "--generate", &size, "-o", atlas.to_str().unwrap()]);
    assert!(o.status.success(), "bake: {}", text(&o.stderr));
}

/// Runs `tessera args` with standard output a pipe whose reader reads `lines` lines and
/// then closes it (`| head -n lines`); returns the exit status and standard error.
fn piped_into_head(args: &[&str], lines: usize) -> (std::process::ExitStatus, String, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tessera");
    let mut read = Vec::new();
    {
        let mut out = BufReader::new(child.stdout.take().unwrap());
        for _ in 0..lines {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap() == 0 {
                break;
            }
            read.push(line);
        }
        // Dropped here: the pipe's only reader goes away.
    }
    let o = child.wait_with_output().unwrap();
    (o.status, text(&o.stderr), read)
}

/// Hostile case 9: `tessera inspect --tiles big.tsa | head -1` panicked with "failed
/// printing to stdout: Broken pipe" and exit status 101.
#[test]
fn listings_piped_into_a_reader_that_stops_end_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = dir.path().join("big.tsa");
    // 8192²: some 5,000 tile lines, more than a pipe's 64 KiB buffer holds, so the child
    // is still writing when the reader of one line goes away.
    bake_generated(&atlas, 8192);
    let a = atlas.to_str().unwrap();
    let full = tessera(&["inspect", "--tiles", a]);
    assert!(full.status.success(), "{}", text(&full.stderr));
    let all = text(&full.stdout);
    assert!(all.len() > 64 << 10, "the listing ({} bytes) outgrows a pipe buffer", all.len());
    for (args, lines) in [
        (vec!["inspect", "--tiles", a], 1),
        (vec!["inspect", "--tiles", a], 0),
        (vec!["inspect", a], 0),
        (vec!["inspect", "--json", a], 0),
    ] {
        let (status, err, read) = piped_into_head(&args, lines);
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
        assert_ne!(status.code(), Some(101), "{args:?}: {err}");
        assert!(status.success(), "{args:?}: {status:?} {err}");
        assert!(err.trim().is_empty(), "{args:?}: quiet, but said: {err}");
        assert_eq!(read.len(), lines, "{args:?}");
        if lines == 1 {
            assert_eq!(read[0], all.lines().next().unwrap().to_string() + "\n");
        }
    }
}

/// A UASTC KTX2 of a 64×64 noise image (one level of 4096 bytes at the offset its level
/// index gives).
fn uastc_ktx2() -> Vec<u8> {
    let texels: Vec<u8> = (0..64 * 64 * 4u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    tessera_core::bake::ktx2::encode_ktx2(&texels, 64, 64, BasisMode::Uastc, &EncodeOptions::default())
        .unwrap()
}

fn put64(f: &mut [u8], at: usize, v: u64) {
    f[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Files in `dir` other than `keep`.
fn leftovers(dir: &Path, keep: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != keep)
        .collect()
}

/// Hostile cases 1 and 2 end to end: a level 0 `uncompressedByteLength` of 5 GiB aborted
/// the bake (SIGABRT) and left `.o.tsa.PID.tmp`; a 64×64 Zstandard level that inflates to
/// 1 GiB baked under `--max-memory 64MiB` at a 2.1 GB peak. Both are one-line errors now,
/// and nothing is left beside the output.
#[test]
fn refused_ktx2_inputs_fail_cleanly_and_leave_no_temporary_file() {
    let plain = uastc_ktx2();
    let level_at = u64::from_le_bytes(plain[80..88].try_into().unwrap()) as usize;
    let mut forged = plain.clone();
    put64(&mut forged, 96, 5 << 30);
    // The same level in Zstandard supercompression, whose frame is 8192 RLE blocks of
    // 128 KiB (1 GiB), its declared uncompressed length the 4096 bytes the level holds.
    let mut bomb = plain[..level_at].to_vec();
    bomb[44..48].copy_from_slice(&2u32.to_le_bytes());
    let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x58];
    for i in 0..8192u32 {
        let header = u32::from(i == 8191) | 1 << 1 | (128 << 10) << 3;
        frame.extend_from_slice(&header.to_le_bytes()[..3]);
        frame.push(0x21);
    }
    put64(&mut bomb, 88, frame.len() as u64);
    bomb.extend_from_slice(&frame);
    for (name, file, says) in [
        ("level-5gib.ktx2", &forged, "uncompressedbytelength 5368709120"),
        ("bomb.ktx2", &bomb, "inflates past the level's 4096 bytes"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join(name);
        std::fs::write(&input, file).unwrap();
        let out = dir.path().join("o.tsa");
        let o =
            tessera(&["bake", input.to_str().unwrap(), "-o", out.to_str().unwrap(), "--max-memory", "64MiB"]);
        let err = text(&o.stderr);
        assert!(!o.status.success() && !err.contains("panicked"), "{name}: {err}");
        assert_eq!(o.status.code(), Some(1), "{name}: an error, not a signal: {err}");
        assert!(err.contains(name) && err.to_lowercase().contains(says), "{name}: {err}");
        assert_eq!(leftovers(dir.path(), name), Vec::<String>::new(), "{name}: left beside the output");
    }
}

/// `--max-memory` counts what a Zstandard level inflates to: a valid 64×64 UASTC +
/// Zstandard KTX2 (a file of 4,272 bytes, 4,096 inflated, 16,384 of texels) bakes under
/// 1 MiB and is refused, before anything is inflated, under 22 KiB, which the file and its
/// texels alone would fit.
#[test]
fn max_memory_counts_the_inflated_level() {
    let plain = uastc_ktx2();
    let level_at = u64::from_le_bytes(plain[80..88].try_into().unwrap()) as usize;
    let level = &plain[level_at..level_at + 4096];
    // One raw Zstandard block, the content size declared.
    let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0xE0];
    frame.extend_from_slice(&4096u64.to_le_bytes());
    frame.extend_from_slice(&(1u32 | 4096 << 3).to_le_bytes()[..3]);
    frame.extend_from_slice(level);
    let mut zstd = plain[..level_at].to_vec();
    zstd[44..48].copy_from_slice(&2u32.to_le_bytes());
    put64(&mut zstd, 88, frame.len() as u64);
    zstd.extend_from_slice(&frame);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("zstd.ktx2");
    std::fs::write(&input, &zstd).unwrap();
    let out = dir.path().join("o.tsa");
    let bake = |limit: &str| {
        tessera(&["bake", input.to_str().unwrap(), "-o", out.to_str().unwrap(), "--max-memory", limit])
    };
    let o = bake("1MiB");
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::remove_file(&out).unwrap();
    let o = bake("22KiB");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("zstd.ktx2")
            && err.contains("needs 24752 bytes")
            && err.contains("limit of 22528 bytes"),
        "{err}"
    );
}
