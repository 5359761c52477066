//! Cloud Optimized GeoTIFFs streamed without a bake, through the whole renderer on
//! lavapipe (issue 44 item 4): GDAL writes a Deflate and a JPEG COG of a 1000×700 crop of
//! the Blue Marble, nginx serves them on loopback with range requests, and `capture`
//! streams each by URL until fully resident and compares it with the same file baked.
//!
//! Needs GDAL's tools (`apt-get install gdal-bin`), nginx and the Blue Marble
//! (`assets/fetch-data.sh`), which `scripts/test` installs and fetches; without them these
//! tests fail saying so.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera::VtConfig;
use tessera_core::bake::tiff::TiffSource;
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::format::atlas::RemoteOptions;
use tessera_core::scene::camera::CameraPath;
use tessera_core::{Atlas, NoProgress};
use tessera_tests::{Nginx, gpu, real_jpeg, write_failure};
use tessera_tools::capture::{CaptureConfig, CaptureReport, capture};

/// `gdal_translate -q ARGS… from to`, failing with the install instruction without GDAL.
fn translate(from: &Path, to: &Path, args: &[&str]) {
    let out =
        Command::new("gdal_translate").arg("-q").args(args).arg(from).arg(to).output().unwrap_or_else(|e| {
            panic!("cannot run gdal_translate ({e}): these tests need GDAL: apt-get install gdal-bin")
        });
    assert!(out.status.success(), "gdal_translate {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A COG of a 1000×700 crop of the Blue Marble (internal tiles 256², GDAL's averaged
/// overviews) compressed with `compress`, and the same file baked (LZ4, default tiles).
fn cog_and_bake(dir: &Path, compress: &str) -> (PathBuf, PathBuf) {
    let crop = dir.join("crop.tif");
    if !crop.exists() {
        translate(&real_jpeg(), &crop, &["-srcwin", "2400", "400", "1000", "700"]);
    }
    let name = compress.to_ascii_lowercase();
    let cog = dir.join(format!("{name}.tif"));
    let co = format!("COMPRESS={compress}");
    let args = ["-of", "COG", "-co", &co, "-co", "BLOCKSIZE=256", "-co", "OVERVIEW_RESAMPLING=AVERAGE"];
    translate(&crop, &cog, &args);
    let baked = dir.join(format!("{name}.tsa"));
    let input = BakeInput::new(&name, TiffSource::open(&cog).unwrap());
    bake(vec![input], &baked, &BakeOptions::default(), &NoProgress).unwrap();
    (cog, baked)
}

/// The static view of `atlas` (a URL), `frames` frames at `size`, against the reference
/// of `reference_atlas` (or its own).
fn run(atlas: &str, reference_atlas: Option<&Path>, frames: u32, size: (u32, u32)) -> CaptureReport {
    let cfg = CaptureConfig {
        atlas: PathBuf::from(atlas),
        camera: CameraPath::preset("static").unwrap(),
        frames,
        size,
        every: 0,
        out: None,
        reference: true,
        reference_atlas: reference_atlas.map(Path::to_path_buf),
        vt: VtConfig::default(),
        scene: None,
        prefetch: 0,
        flush_vram_before: Vec::new(),
        remote: RemoteOptions::without_disk_cache(),
        frame_interval: None,
        wait_resident: None,
        predict: 0,
    };
    let report = capture(gpu(), &cfg).unwrap_or_else(|e| panic!("{atlas}: {e}"));
    for f in &report.frames {
        assert_eq!(f.unwritten_pixels, 0, "frame {} shows unwritten pool texels", f.frame);
    }
    report
}

/// The last frame's PSNR against its reference, once fully resident (writes the frames
/// as PNGs under target/test-output when under `min`).
fn converged(test: &str, r: &CaptureReport, size: (u32, u32), min: f64) -> f64 {
    let last = r.frames.last().unwrap();
    assert!(last.stream.resident_fraction >= 1.0, "{test}: not fully resident: {last:?}");
    let db = last.psnr_db.unwrap();
    if db < min
        && let Some(reference) = &r.last_reference
    {
        write_failure(test, size, &r.last_frame, reference);
    }
    assert!(db >= min, "{test}: {db:.2} dB against the reference, at least {min} wanted");
    db
}

#[test]
fn a_deflate_cog_streams_over_http_like_its_bake() {
    let dir = tempfile::tempdir().unwrap();
    let (cog, baked) = cog_and_bake(dir.path(), "DEFLATE");
    let server = Nginx::serve(dir.path(), "");
    let url = server.url("deflate.tif");
    // Against its own texels: the streaming path (borders, overviews, built mips).
    let small = (480, 270);
    let own = run(&url, None, 12, small);
    let db = converged("cog-deflate-own", &own, small, 55.0);
    eprintln!("deflate COG against its own reference: {db:.2} dB");
    let net = own.frames.last().and_then(|f| f.network).expect("network figures of a URL");
    // 4×3 + 2×2 + 1 internal tiles of 256² and the directories: each read once.
    assert!(net.requests >= 3 && net.requests <= 30 && net.failures == 0, "{net:?}");
    eprintln!(
        "requests: {}, {} bytes (the file is {} bytes)",
        net.requests,
        net.bytes,
        std::fs::metadata(&cog).unwrap().len()
    );
    // Against the baked atlas of the same file, where mip 0 dominates (1080p of a
    // 1000-texel-wide image): mip 0 is tile for tile the bake's (engine/core/tests/cog.rs);
    // the overviews are GDAL's, averaged in sRGB values (the bake filters in linear light).
    let large = (1920, 1080);
    let r = run(&url, Some(&baked), 6, large);
    let db = converged("cog-deflate-baked", &r, large, 55.0);
    eprintln!("deflate COG against its bake at 1080p: {db:.2} dB");
    assert_eq!(
        Atlas::open(&baked).unwrap().layers()[0].layout,
        Atlas::open(&cog).unwrap().layers()[0].layout
    );
}

#[test]
fn a_jpeg_cog_streams_over_http_within_its_codec() {
    let dir = tempfile::tempdir().unwrap();
    let (_, baked) = cog_and_bake(dir.path(), "JPEG");
    let server = Nginx::serve(dir.path(), "");
    let url = server.url("jpeg.tif");
    let small = (480, 270);
    let own = run(&url, None, 12, small);
    let db = converged("cog-jpeg-own", &own, small, 55.0);
    eprintln!("JPEG COG against its own reference: {db:.2} dB");
    // Against the JPEG file baked: its overviews are JPEG-compressed apart from the image
    // (measured 46.9 dB at 1080p, quality 75).
    let large = (1920, 1080);
    let r = run(&url, Some(&baked), 6, large);
    let db = converged("cog-jpeg-baked", &r, large, 45.0);
    eprintln!("JPEG COG against its bake at 1080p: {db:.2} dB");
}
