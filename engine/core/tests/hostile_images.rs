//! Hostile bake inputs of issue 41 (KTX2 level lengths, a Zstandard bomb, forged header
//! offsets, a tiled LZW TIFF libtiff reads): their regression files under
//! `tests/fuzz/image/` are refused or read, and every structured KTX2 field mutation the
//! `image` fuzz target makes is an error, never a crash.

#![allow(clippy::unwrap_used)] // Tests fail loudly by design.

use std::path::{Path, PathBuf};

use tessera_core::bake::open::open_image;
use tessera_core::fuzz::{Target, ktx2_fields, seeds};

fn test_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(rel)
}

fn ktx2_seed(name: &str) -> Vec<u8> {
    let seeds = seeds::seeds(Target::Image).unwrap();
    seeds.into_iter().find(|(n, _)| n == name).map(|(_, b)| b).unwrap()
}

/// Reads every row of the image at `path` through the bake's source for its format.
fn texels(path: &Path) -> Result<(u32, u32, Vec<u8>), String> {
    let src = open_image(path).map_err(|e| e.to_string())?;
    let (w, h) = src.size();
    let mut out = vec![0u8; (w * h * 4) as usize];
    src.read_rows(0, &mut out).map_err(|e| e.to_string())?;
    Ok((w, h, out))
}

/// A UASTC + Zstandard seed whose 8×8 level (64 bytes) is a frame of 512 RLE blocks of
/// 128 KiB: 64 MiB from 2 KiB.
fn zstd_bomb() -> Vec<u8> {
    let seed = ktx2_seed("uastc-zstd.ktx2");
    let at = u64::from_le_bytes(seed[80..88].try_into().unwrap()) as usize;
    let mut bomb = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x58];
    for i in 0..512u32 {
        let header = u32::from(i == 511) | 1 << 1 | (128 << 10) << 3;
        bomb.extend_from_slice(&header.to_le_bytes()[..3]);
        bomb.push(0x33);
    }
    let mut f = seed[..at].to_vec();
    f[88..96].copy_from_slice(&(bomb.len() as u64).to_le_bytes());
    f.extend_from_slice(&bomb);
    f
}

/// The KTX2 regression files: name, how they are made from the seeds, and where the
/// forged field lies.
fn ktx2_regressions() -> Vec<(&'static str, Vec<u8>, usize)> {
    let forge = |seed: &str, at: usize, value: u64| {
        let mut f = ktx2_seed(seed);
        f[at..at + 8].copy_from_slice(&value.to_le_bytes());
        f
    };
    vec![
        // Case 1: level 0's uncompressedByteLength of 5 GiB, then 2^64 - 1.
        ("ktx2-zstd-level-length-5gib", forge("uastc-zstd.ktx2", 96, 5 << 30), 96),
        ("ktx2-zstd-level-length-max", forge("uastc-zstd.ktx2", 96, u64::MAX), 96),
        // Case 2: a Zstandard bomb (its level length).
        ("ktx2-zstd-bomb-64mib", zstd_bomb(), 88),
        // Case 3: sgdByteOffset = 2^64 - 1 in an ETC1S file.
        ("ktx2-etc1s-sgd-offset-max", forge("etc1s.ktx2", 64, u64::MAX), 64),
    ]
}

/// Issue 41, hostile cases 1 to 3: each regression file is what its forging makes (set
/// `TESSERA_UPDATE_GOLDEN=1` to write them), is refused by the bake's reader with an
/// error naming what is wrong, and replays through the fuzz target.
#[test]
fn hostile_ktx2_regression_files_are_refused() {
    let update = std::env::var_os("TESSERA_UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let dir = tempfile::tempdir().unwrap();
    for (name, forged, at) in ktx2_regressions() {
        let committed = test_file(&format!("fuzz/image/{name}"));
        if update {
            std::fs::write(&committed, &forged).unwrap();
        }
        let bytes = std::fs::read(&committed).unwrap_or_else(|e| {
            panic!("{}: {e}; write it with TESSERA_UPDATE_GOLDEN=1", committed.display())
        });
        // The hostile field is what the forging puts there (the seeds' other bytes may vary).
        assert_eq!(bytes[at..at + 8], forged[at..at + 8], "{name}: the forged field");
        let path = dir.path().join(format!("{name}.ktx2"));
        std::fs::write(&path, &bytes).unwrap();
        let e = texels(&path).unwrap_err();
        let names_it = match name {
            "ktx2-zstd-bomb-64mib" => "past the level's 64 bytes",
            "ktx2-etc1s-sgd-offset-max" => "sgdByteOffset 18446744073709551615",
            _ => "uncompressedByteLength",
        };
        assert!(e.contains(&*path.to_string_lossy()) && e.contains(names_it), "{name}: {e}");
        let summary = Target::Image.run(&bytes);
        assert!(summary.failed > 0, "{name}: {summary:?}");
    }
}

/// Every structured mutation of every KTX2 seed (each header and level-index field set to
/// each value the fuzz target tries) is read or refused: no panic, no abort, no
/// allocation of what a forged length says. The forgings of hostile cases 1 and 3 are
/// among them and refused.
#[test]
fn every_ktx2_field_mutation_of_the_seeds_is_an_error_or_reads() {
    let seeds = seeds::seeds(Target::Image).unwrap();
    let ktx2: Vec<_> = seeds.iter().filter(|(n, _)| n.ends_with(".ktx2")).collect();
    assert!(ktx2.len() >= 4, "{} KTX2 seeds", ktx2.len());
    let (mut runs, mut refused) = (0, 0);
    let mut hostile_cases = 0;
    for (name, file) in ktx2 {
        for field in ktx2_fields::fields(file) {
            for value in ktx2_fields::values(file, &field) {
                let forged = ktx2_fields::set(file, &field, value);
                let s = Target::Image.run(&forged);
                runs += 1;
                if s.failed > 0 {
                    refused += 1;
                }
                let case_1 =
                    field.name == "uncompressedByteLength" && field.level == Some(0) && value >= 5 << 30;
                let case_3 = field.name == "sgdByteOffset" && value == u64::MAX;
                if (case_1 && name.contains("zstd")) || (case_3 && name.contains("etc1s")) {
                    hostile_cases += 1;
                    assert!(s.failed > 0 && !s.accepted, "{name}: {} = {value}: {s:?}", field.name);
                }
            }
        }
    }
    eprintln!("{runs} forged KTX2 files, {refused} refused");
    assert!(hostile_cases >= 3, "the mutations include hostile cases 1 and 3 ({hostile_cases})");
    assert!(refused * 2 > runs, "most forgeries are refused: {refused} of {runs}");
}

/// Issue 41, hostile case 10: a tiled LZW TIFF written by GDAL 3.6 (45×40 RGB, 16×16
/// tiles, horizontal predictor) whose right-edge tile 2 failed with "no lzw end code
/// found" in the `tiff` crate, while libtiff reads it. It reads as its uncompressed twin.
#[test]
fn gdal_lzw_tiles_with_partial_edge_tiles_read_like_their_uncompressed_twin() {
    let lzw = test_file("data/lzw-edge-tiles.tif");
    let (w, h, got) = texels(&lzw).unwrap();
    let (pw, ph, want) = texels(&test_file("data/lzw-edge-tiles-plain.tif")).unwrap();
    assert_eq!((w, h), (45, 40));
    assert_eq!((w, h), (pw, ph));
    assert!(got == want, "the LZW tiles decode to the uncompressed texels");
    // Through the fuzz target too: accepted and every band read.
    let s = Target::Image.run(&std::fs::read(&lzw).unwrap());
    assert!(s.accepted && s.failed == 0, "{s:?}");
}
