//! The 64K² stress scene of the catalog, baked from the real images (ignored by default:
//! it needs `assets/fetch-data.sh` and about a minute of a release build).
//! Run: `TESSERA_CACHE=/tmp/c STRESS_CODEC=lz4 cargo test --release -p tessera-vt-core --test stress -- --ignored --nocapture`.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use tessera_core::Codec;
use tessera_core::NoProgress;
use tessera_core::bake::mosaic::{Mosaic, STRESS_CELL, STRESS_CROPS, crop_at};
use tessera_core::bake::source::RowSource;
use tessera_core::scene::catalog;

#[test]
#[ignore = "needs the real images and a release build; run explicitly"]
fn stress_scene_bakes_and_dedups() {
    let codec = match std::env::var("STRESS_CODEC").as_deref() {
        Ok("etc1s") => Codec::Etc1s,
        Ok("raw") => Codec::Raw,
        _ => Codec::Lz4,
    };
    let cache = tempfile::tempdir().unwrap();
    let cache_path = std::env::var_os("TESSERA_CACHE").map_or(cache.path().to_path_buf(), Into::into);
    let data = tessera_core::bake::source::data_dir();
    let start = std::time::Instant::now();
    let prepared = catalog::prepare("stress", &data, &cache_path, codec, true, &NoProgress).unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert!(prepared.scene.is_none());
    let atlas = tessera_core::Atlas::open(&prepared.atlas).unwrap();
    let s = atlas.summary();
    let l = &s.layers[0];
    assert_eq!((l.width, l.height), (65536, 65536));
    eprintln!(
        "stress {codec}: {:.1} s, {:.1} MiB, {} tiles, {} unique, {} shared",
        secs,
        s.file_bytes as f64 / (1 << 20) as f64,
        l.tiles,
        l.tiles - l.shared_tiles,
        l.shared_tiles
    );
    assert!(l.shared_tiles > l.tiles * 9 / 10, "most tiles are shared");
    let start = std::time::Instant::now();
    assert!(atlas.verify(&NoProgress).is_empty());
    eprintln!("verified in {:.1} s", start.elapsed().as_secs_f64());
}

/// Mosaic rows at a few cells are the crops' texels, read straight from the images.
#[test]
#[ignore = "needs the real images and a release build; run explicitly"]
fn stress_mosaic_rows_are_the_crop_texels() {
    let data = tessera_core::bake::source::data_dir();
    let mosaic = Mosaic::stress(&data).unwrap();
    assert_eq!(mosaic.size(), (65536, 65536));
    let row_bytes = 65536 * 4;
    let mut row = vec![0u8; row_bytes];
    for (file, cx0, cy0, side, scale) in STRESS_CROPS.iter().copied() {
        let img = image::open(data.join(file)).unwrap().into_rgba8();
        for (cx, cy) in [(0u32, 0u32), (2, 0), (4, 0), (5, 3), (15, 15), (7, 12)] {
            let c = crop_at(cx, cy, STRESS_CROPS.len());
            if STRESS_CROPS[c] != (file, cx0, cy0, side, scale) {
                continue;
            }
            for ly in [0, 1, 2049, STRESS_CELL - 1] {
                let y = cy * STRESS_CELL + ly;
                mosaic.read_rows(y, &mut row).unwrap();
                for lx in [0, 3, 1000, STRESS_CELL - 1] {
                    let x = cx * STRESS_CELL + lx;
                    let want = img.get_pixel(cx0 + lx / scale, cy0 + ly / scale).0;
                    let at = x as usize * 4;
                    assert_eq!(&row[at..at + 4], &want, "{file}: texel ({x}, {y})");
                }
            }
        }
    }
}
