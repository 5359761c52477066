//! Game-asset textures made by other tools (issue 28), fetched by
//! `assets/fetch-data.sh --basisu`: opengl-basisu's KTX2 fixtures, written by Basis
//! Universal 2.50 (ETC1S with mips, UASTC with Zstandard supercompression, an odd size,
//! a cube map and an HDR texture), and allegro5's photograph in BC1, BC2 and BC3 DDS.

#![allow(clippy::unwrap_used)] // Tests fail loudly by design.

use std::path::PathBuf;

use tessera_core::NoProgress;
use tessera_core::bake::open::open_image;
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::compare::compare;
use tessera_core::format::atlas::{Atlas, ColorSpace};
use tessera_core::format::codec::Codec;

fn data(name: &str) -> PathBuf {
    let p = tessera_core::bake::source::data_dir().join(name);
    assert!(p.exists(), "{} is missing: run assets/fetch-data.sh --basisu (scripts/test does)", p.display());
    p
}

fn texels(path: &std::path::Path) -> (u32, u32, Vec<u8>) {
    let src = open_image(path).unwrap();
    let (w, h) = src.size();
    let mut out = vec![0u8; (w * h * 4) as usize];
    src.read_rows(0, &mut out).unwrap();
    (w, h, out)
}

#[test]
fn basis_universal_ktx2_files_decode_to_their_stated_colours() {
    let colours: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data("basisu/colours.json")).unwrap()).unwrap();
    let quadrants: Vec<Vec<i32>> = serde_json::from_value(colours["quadrants"].clone()).unwrap();
    let translucent: Vec<i32> = serde_json::from_value(colours["translucent"].clone()).unwrap();
    // ETC1S (BasisLZ, 5 mips): red, green, blue, white quadrants; UASTC + Zstandard: the
    // same with a translucent white one.
    for (file, tolerance, color) in [
        ("basisu/etc1s_srgb_mips.ktx2", 12, ColorSpace::Srgb),
        ("basisu/uastc_rgba.ktx2", 3, ColorSpace::Linear),
    ] {
        let mut quadrants = quadrants.clone();
        if file.contains("rgba") {
            quadrants[3] = translucent.clone();
        }
        let path = data(file);
        let (w, h, t) = texels(&path);
        assert_eq!((w, h), (16, 16), "{file}");
        for (q, want) in quadrants.iter().enumerate() {
            let (x, y) = (4 + 8 * (q as u32 % 2), 4 + 8 * (q as u32 / 2));
            let at = ((y * w + x) * 4) as usize;
            let got: Vec<i32> = t[at..at + 4].iter().map(|&v| i32::from(v)).collect();
            let off = got.iter().zip(want).map(|(a, b)| (a - b).abs()).max().unwrap();
            assert!(off <= tolerance, "{file}: quadrant {q} is {got:?}, stated {want:?}");
        }
        // The colour space from the data format descriptor's transfer function.
        assert_eq!(open_image(&path).unwrap().color_space(), Some(color), "{file}");
    }
    // 6×5: not whole 4×4 blocks; green throughout.
    let (w, h, t) = texels(&data("basisu/uastc_odd.ktx2"));
    assert_eq!((w, h, t.len()), (6, 5, 6 * 5 * 4));
    assert!(
        t.chunks_exact(4)
            .all(|px| px.iter().zip(&quadrants[1]).all(|(&a, &b)| (i32::from(a) - b).abs() <= 3))
    );
    // A cube map and an HDR texture are refused by name, not misread.
    let e = open_image(&data("basisu/etc1s_cube.ktx2")).err().unwrap().to_string();
    assert!(e.contains("etc1s_cube.ktx2") && e.contains("6 faces"), "{e}");
    let e = open_image(&data("basisu/uastc_hdr.ktx2")).err().unwrap().to_string();
    assert!(e.contains("uastc_hdr.ktx2") && e.contains("vkFormat"), "{e}");
}

#[test]
fn one_photograph_in_bc1_bc2_and_bc3_dds_bakes_alike() {
    let dir = tempfile::tempdir().unwrap();
    let mut baked = Vec::new();
    for n in [1, 3, 5] {
        let path = data(&format!("dds/mysha_dxt{n}.dds"));
        let input = BakeInput::from_image(&path).unwrap();
        assert_eq!(input.color, ColorSpace::Srgb, "a legacy DDS does not tag: sRGB colour");
        let out = dir.path().join(format!("dxt{n}.tsa"));
        let opts = BakeOptions { tile_size: 64, codec: Codec::Lz4, ..BakeOptions::default() };
        bake(vec![input], &out, &opts, &NoProgress).unwrap();
        let atlas = Atlas::open(&out).unwrap();
        assert_eq!((atlas.layers()[0].layout.width(), atlas.layers()[0].layout.height()), (320, 200));
        baked.push(atlas.read_texels(0, 0, [0, 0, 320, 200]).unwrap());
    }
    // The same photograph through three block codecs: BC1's colour differs a little from
    // that of BC2 and BC3 (which share one colour block encoding; their alpha differs).
    for (a, b) in [(0, 1), (0, 2)] {
        let d = compare(&baked[a], &baked[b]);
        eprintln!("DXT{} vs DXT{}: {:.1} dB", [1, 3, 5][a], [1, 3, 5][b], d.psnr_db);
        assert!(d.psnr_db > 40.0 && d.psnr_db.is_finite(), "{a} vs {b}: {:.1} dB", d.psnr_db);
    }
    assert!(compare(&baked[1], &baked[2]).psnr_db > 40.0);
}
