//! The pure-Rust Basis transcoder (`format::basis_rust`) against the C++ one on real
//! tiles: the same bytes for every mode and pool format, and clean errors on damage.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use tessera_core::bake::source::{ImageSource, RowSource};
use tessera_core::format::atlas::ColorSpace;
use tessera_core::format::basis::{self, BasisMode, DataCheck};
use tessera_core::format::basis_rust;
use tessera_core::format::codec::{EncodeOptions, TargetFormat};

const SIDE: u32 = 136;

/// `n` tiles of 136² spread over the real image `name` fetched by `assets/fetch-data.sh`.
fn real_tiles(name: &str, n: u32) -> Vec<Vec<u8>> {
    let path = tessera_core::bake::source::data_dir().join(name);
    assert!(path.exists(), "{} is missing: run assets/fetch-data.sh (scripts/test does)", path.display());
    let img = ImageSource::open(&path).unwrap();
    let (w, h) = img.size();
    (0..n)
        .map(|i| {
            // A diagonal walk with a stride that is not a multiple of the tile side.
            let x0 = (u64::from(i) * 1_237 % u64::from(w - SIDE)) as usize;
            let y0 = (u64::from(i) * 611 % u64::from(h - SIDE)) as usize;
            (y0..y0 + SIDE as usize)
                .flat_map(|y| {
                    let start = (y * w as usize + x0) * 4;
                    img.texels()[start..start + SIDE as usize * 4].to_vec()
                })
                .collect()
        })
        .collect()
}

#[test]
fn rust_and_cpp_transcoders_give_the_same_bytes_on_real_tiles() {
    let mut tiles = real_tiles("bmng.jpg", 12);
    tiles.extend(real_tiles("shadedrelief.jpg", 12));
    // Alpha: a tile whose left half is transparent.
    let mut alpha = tiles[0].clone();
    alpha
        .chunks_exact_mut(4)
        .enumerate()
        .filter(|(i, _)| i % (SIDE as usize) < SIDE as usize / 2)
        .for_each(|(_, px)| px[3] = 0);
    tiles.push(alpha);
    let mut compared = 0;
    let mut etc1s_bc1_diff = 0;
    for mode in [BasisMode::Etc1s, BasisMode::Uastc] {
        for (i, tile) in tiles.iter().enumerate() {
            let opts = EncodeOptions {
                color: if i % 2 == 0 { ColorSpace::Srgb } else { ColorSpace::Linear },
                ..EncodeOptions::default()
            };
            let blob = basis::encode(tile, SIDE, mode, &opts).unwrap();
            for target in TargetFormat::ALL {
                for check in [DataCheck::Crc16, DataCheck::AlreadyVerified] {
                    let cpp = basis::transcode(&blob, mode, SIDE, target, check).unwrap();
                    let rust = basis_rust::transcode(&blob, mode, SIDE, target, check)
                        .unwrap_or_else(|e| panic!("{mode:?} tile {i} to {target}: {e}"));
                    let diff = cpp.iter().zip(&rust).filter(|(a, b)| a != b).count();
                    if (mode, target) == (BasisMode::Etc1s, TargetFormat::Bc1) {
                        // Known: basisu 0.1.0 differs from the vendored C++ on a few ETC1S to
                        // BC1 blocks (2 of these 25 tiles, 73 bytes in all); bounded here so
                        // that it cannot grow unseen.
                        etc1s_bc1_diff += diff;
                    } else {
                        assert_eq!(
                            diff, 0,
                            "{mode:?} tile {i} to {target}: the Rust transcoder's bytes differ"
                        );
                    }
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 2 * 25 * TargetFormat::ALL.len() * 2);
    eprintln!("ETC1S to BC1: {etc1s_bc1_diff} bytes differ over 25 tiles, both checks");
    assert!(etc1s_bc1_diff <= 2 * 100, "ETC1S to BC1: {etc1s_bc1_diff} bytes differ");
}

#[test]
fn damaged_tiles_are_errors_of_both_transcoders() {
    let tile = &real_tiles("bmng.jpg", 1)[0];
    for mode in [BasisMode::Etc1s, BasisMode::Uastc] {
        let blob = basis::encode(tile, SIDE, mode, &EncodeOptions::default()).unwrap();
        // Truncated, a flipped data byte (caught by the data CRC), and the wrong mode or size.
        let mut flipped = blob.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x40;
        let other = if mode == BasisMode::Etc1s { BasisMode::Uastc } else { BasisMode::Etc1s };
        let cases: [(&str, &[u8], BasisMode, u32); 4] = [
            ("truncated", &blob[..blob.len() / 2], mode, SIDE),
            ("flipped", &flipped, mode, SIDE),
            ("other mode", &blob, other, SIDE),
            ("other size", &blob, mode, 128),
        ];
        for (what, bytes, m, side) in cases {
            for target in TargetFormat::ALL {
                let e = basis_rust::transcode(bytes, m, side, target, DataCheck::Crc16)
                    .expect_err(&format!("{mode:?} {what} to {target} must fail"));
                assert!(e.to_string().contains("tile"), "{what}: {e}");
                assert!(
                    basis::transcode(bytes, m, side, target, DataCheck::Crc16).is_err(),
                    "{what}: C++ accepts it"
                );
            }
        }
        // A wrong-size output buffer is refused before anything is read.
        let mut small = vec![0u8; 16];
        assert!(
            basis_rust::transcode_into(&blob, mode, SIDE, TargetFormat::Bc7, DataCheck::Crc16, &mut small)
                .is_err()
        );
    }
}

#[test]
fn the_process_wide_choice_sends_atlas_tiles_through_the_rust_transcoder() {
    use tessera_core::format::codec::{
        BasisTranscoder, Codec, basis_transcoder, set_basis_transcoder, transcode,
    };
    let tile = &real_tiles("bmng.jpg", 1)[0];
    let blob = basis::encode(tile, SIDE, BasisMode::Etc1s, &EncodeOptions::default()).unwrap();
    let raw_len = (SIDE * SIDE * 4) as usize;
    // This test binary's other tests call the transcoders directly, so the choice made
    // here affects no other test.
    set_basis_transcoder(BasisTranscoder::Rust);
    assert_eq!(basis_transcoder(), BasisTranscoder::Rust);
    let through_codec = transcode(Codec::Etc1s, &blob, raw_len, SIDE, TargetFormat::Bc7).unwrap();
    let direct =
        basis_rust::transcode(&blob, BasisMode::Etc1s, SIDE, TargetFormat::Bc7, DataCheck::Crc16).unwrap();
    assert_eq!(through_codec, direct);
    // A damaged tile is a codec error through this path too.
    assert!(transcode(Codec::Etc1s, &blob[..blob.len() - 9], raw_len, SIDE, TargetFormat::Bc7).is_err());
    set_basis_transcoder(BasisTranscoder::Cpp);
    assert_eq!(basis_transcoder(), BasisTranscoder::Cpp);
}
