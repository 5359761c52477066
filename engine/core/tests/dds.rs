//! DDS inputs baked like any image: BC7 and BC1 files made from a real photograph bake to
//! the texels of that photograph within the codec's loss (issue 28, inputs users have).

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use tessera_core::NoProgress;
use tessera_core::bake::source::{ImageSource, RowSource};
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::compare::compare;
use tessera_core::format::atlas::{Atlas, ColorSpace};
use tessera_core::format::basis::{self, BasisMode, DataCheck};
use tessera_core::format::codec::{Codec, EncodeOptions, TargetFormat};

const SIDE: u32 = 256;

/// A 256² crop of the Blue Marble fetched by `assets/fetch-data.sh`.
fn crop() -> Vec<u8> {
    let path = tessera_core::bake::source::data_dir().join("bmng.jpg");
    assert!(path.exists(), "{} is missing: run assets/fetch-data.sh (scripts/test does)", path.display());
    let img = ImageSource::open(&path).unwrap();
    let w = img.size().0 as usize;
    (600..600 + SIDE as usize)
        .flat_map(|y| img.texels()[(y * w + 2650) * 4..(y * w + 2650 + SIDE as usize) * 4].to_vec())
        .collect()
}

/// A DX10 DDS of `side²` with DXGI format `dxgi` holding `data`.
fn dds(side: u32, dxgi: u32, data: &[u8]) -> Vec<u8> {
    let mut f = b"DDS ".to_vec();
    let mut put = |v: u32| f.extend_from_slice(&v.to_le_bytes());
    for v in [124, 0x1 | 0x2 | 0x4 | 0x1000, side, side, 0, 1, 1] {
        put(v);
    }
    for _ in 0..11 {
        put(0);
    }
    put(32);
    put(0x4);
    f.extend_from_slice(b"DX10");
    f.extend_from_slice(&[0u8; 20]);
    let mut put = |v: u32| f.extend_from_slice(&v.to_le_bytes());
    for v in [0x1000, 0, 0, 0, 0, dxgi, 3, 0, 1, 0] {
        put(v);
    }
    f.extend_from_slice(data);
    f
}

fn bake_mip0(dir: &std::path::Path, name: &str, input: BakeInput) -> Vec<u8> {
    let out = dir.join(format!("{name}.tsa"));
    let opts = BakeOptions { tile_size: 64, codec: Codec::Lz4, ..BakeOptions::default() };
    bake(vec![input], &out, &opts, &NoProgress).unwrap();
    Atlas::open(&out).unwrap().read_texels(0, 0, [0, 0, SIDE, SIDE]).unwrap()
}

#[test]
fn bc7_and_bc1_dds_bake_to_the_photograph_within_the_codec_loss() {
    let dir = tempfile::tempdir().unwrap();
    let source = crop();
    let reference = bake_mip0(
        dir.path(),
        "png",
        BakeInput::new("src", ImageSource::from_rgba(SIDE, SIDE, source.clone())),
    );
    assert_eq!(reference, source, "a lossless bake keeps mip 0");
    // Blocks from the Basis encoder: UASTC to BC7 (near-lossless), ETC1S to BC1.
    for (what, mode, target, dxgi, floor_db) in [
        ("bc7", BasisMode::Uastc, TargetFormat::Bc7, 99, 40.0),
        ("bc1", BasisMode::Etc1s, TargetFormat::Bc1, 72, 28.0),
    ] {
        let opts = EncodeOptions { color: ColorSpace::Srgb, ..EncodeOptions::default() };
        let blob = basis::encode(&source, SIDE, mode, &opts).unwrap();
        let blocks = basis::transcode(&blob, mode, SIDE, target, DataCheck::Crc16).unwrap();
        let path = dir.path().join(format!("{what}.dds"));
        std::fs::write(&path, dds(SIDE, dxgi, &blocks)).unwrap();
        let baked = bake_mip0(dir.path(), what, BakeInput::from_image(&path).unwrap());
        let d = compare(&baked, &source);
        eprintln!("{what} DDS baked against the photograph: {:.2} dB (max error {})", d.psnr_db, d.max_error);
        assert!(d.psnr_db >= floor_db, "{what}: {:.2} dB under {floor_db}", d.psnr_db);
    }
}
