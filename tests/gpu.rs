//! Headless GPU tests on lavapipe (or any Vulkan driver): golden images, convergence
//! to the fully resident reference, seams, a tiny pool, a corrupted tile, and that no
//! frame ever shows an unwritten pool texel.

#![allow(clippy::unwrap_used)] // Tests fail loudly by design.

use glam::{Vec3, Vec4};
use tessera::VtConfig;
use tessera_core::Atlas;
use tessera_core::bake::source::{Generated, ImageSource};
use tessera_core::compare::compare;
use tessera_core::format::atlas::RemoteOptions;
use tessera_core::format::tile::TileId;
use tessera_core::scene::camera::{Camera, CameraPath};
use tessera_core::stream::pool_layout::Trilinear;
use tessera_tests::{bake_source, check_golden, gpu, real_jpeg, write_failure};
use tessera_tools::capture::{CaptureConfig, CaptureReport, capture};

fn run(
    atlas: &std::path::Path,
    camera: CameraPath,
    frames: u32,
    size: (u32, u32),
    vt: VtConfig,
) -> CaptureReport {
    run_with(atlas, camera, frames, size, vt, true)
}

fn run_with(
    atlas: &std::path::Path,
    camera: CameraPath,
    frames: u32,
    size: (u32, u32),
    vt: VtConfig,
    reference: bool,
) -> CaptureReport {
    // Tests never use the user's disk cache (remote atlases set their own).
    run_remote(atlas, camera, frames, size, vt, reference, RemoteOptions::without_disk_cache())
}

fn run_remote(
    atlas: &std::path::Path,
    camera: CameraPath,
    frames: u32,
    size: (u32, u32),
    vt: VtConfig,
    reference: bool,
    remote: RemoteOptions,
) -> CaptureReport {
    run_paced(atlas, camera, frames, size, vt, reference, remote, None)
}

#[allow(clippy::too_many_arguments)]
fn run_paced(
    atlas: &std::path::Path,
    camera: CameraPath,
    frames: u32,
    size: (u32, u32),
    vt: VtConfig,
    reference: bool,
    remote: RemoteOptions,
    frame_interval: Option<std::time::Duration>,
) -> CaptureReport {
    let cfg = CaptureConfig {
        atlas: atlas.to_path_buf(),
        camera,
        frames,
        size,
        every: 0,
        out: None,
        reference,
        reference_atlas: None,
        vt,
        scene: None,
        prefetch: 0,
        flush_vram_before: Vec::new(),
        remote,
        frame_interval,
        wait_resident: None,
        predict: 0,
        terrain: None,
    };
    let report = capture(gpu(), &cfg).unwrap();
    for f in &report.frames {
        assert_eq!(f.unwritten_pixels, 0, "frame {} shows unwritten pool texels", f.frame);
    }
    report
}

fn psnrs(r: &CaptureReport) -> Vec<f64> {
    r.frames.iter().map(|f| f.psnr_db.unwrap()).collect()
}

#[test]
fn golden_views_of_the_builtin_scene() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_source(dir.path(), "golden", Generated::new(2048, 1024));
    let size = (256, 144);
    for (preset, frame) in [("static", 8), ("orbit", 30), ("cut", 40)] {
        let path = CameraPath::preset(preset).unwrap();
        let r = run(&atlas, path, frame + 1, size, VtConfig::default());
        check_golden(&format!("{preset}-{frame}"), size, &r.last_frame, 40.0);
    }
    // The shallow page tables, a storage buffer written from the CPU and an R32Uint
    // texture (one textureLoad per lookup), draw the same goldens as the complete table
    // (the default), renamed modules and all (the drawers rewrite the shader with
    // `shaders::with_page_table`).
    for storage in [tessera::PageTableStorage::Buffer, tessera::PageTableStorage::Texture] {
        for (preset, frame) in [("orbit", 30), ("cut", 40)] {
            let vt = VtConfig { page_table: storage, ..VtConfig::default() };
            let r = run(&atlas, CameraPath::preset(preset).unwrap(), frame + 1, size, vt);
            check_golden(&format!("{preset}-{frame}"), size, &r.last_frame, 40.0);
        }
    }
}

/// The complete page table's update pass on a real device: random residency changes
/// over many frames (slots reused, tiles moved, inserted and evicted in one frame, two
/// layers, a deep mip chain; two frames' encoders submitted together), the buffer read
/// back after each submission equals the CPU model
/// of the pass (`apply_jobs`, itself checked against brute force in tessera-vt-core)
/// and names, for every entry, the tile itself or its nearest resident ancestor.
#[test]
fn the_complete_page_table_updated_on_the_gpu_names_each_tiles_nearest_resident_tile() {
    use tessera::page_table::{PageTableBuffer, PageTableStorage};
    use tessera::page_table_update::TableUpdater;
    use tessera_core::format::tile::TextureLayout;
    use tessera_core::stream::complete_table::{UNMAPPED, apply_jobs};
    use tessera_core::stream::feedback::FeedbackLayout;
    use tessera_core::stream::page_table::{PageTable, SlotCoord};
    let ctx = gpu();
    let layouts =
        [TextureLayout::new(8192, 4096, 128, 4).unwrap(), TextureLayout::new(1000, 600, 128, 4).unwrap()];
    let layout = FeedbackLayout::new(&layouts);
    let n = layout.total_tiles();
    let table = PageTableBuffer::new(&ctx.device, n, PageTableStorage::Complete, 16384).unwrap();
    let updater = TableUpdater::new(&ctx.device, table.buffer().unwrap(), n);
    let mut cpu = PageTable::complete(layout.clone());
    let mut model = vec![UNMAPPED; n];
    let read = || {
        let out = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: (n * 4) as u64,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(table.buffer().unwrap(), 0, &out, 0, (n * 4) as u64);
        ctx.queue.submit([enc.finish()]);
        out.map_async(wgpu::MapMode::Read, .., |r| r.unwrap());
        ctx.device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        let view = out.get_mapped_range(..).unwrap();
        bytemuck::cast_slice::<u8, u32>(&view).to_vec()
    };
    assert!(read().iter().all(|&e| e == UNMAPPED), "a new complete table is all unmapped");
    // A small deterministic generator: the same changes on every run.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |m: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % m as u64) as usize
    };
    let mut slots: Vec<Option<TileId>> = vec![None; 48];
    let mut held = Vec::new();
    for frame in 0..40 {
        for _ in 0..next(30) {
            let s = next(slots.len());
            let tile = layout.tile_at(next(n)).unwrap();
            // Coarse tiles more often than their share, so deep subtrees change too.
            let tile = if next(3) == 0 {
                let up = layout.coarsest_mip(tile.layer).unwrap() - tile.mip;
                let k = next(usize::from(up) + 1) as u8;
                TileId::new(tile.layer, tile.mip + k, tile.x >> k, tile.y >> k)
            } else {
                tile
            };
            if next(4) == 0 {
                if let Some(old) = slots[s].take() {
                    cpu.set_evicted(old);
                }
            } else {
                if let Some(old) = slots[s].take().filter(|&o| o != tile) {
                    cpu.set_evicted(old);
                }
                if let Some(moved) = slots.iter_mut().find(|t| **t == Some(tile)) {
                    *moved = None;
                }
                cpu.set_resident(tile, SlotCoord::new(s as u16, 1));
                slots[s] = Some(tile);
            }
        }
        let jobs = cpu.take_jobs();
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        updater.record(&ctx.device, &mut enc, &jobs, None);
        apply_jobs(&mut model, &jobs);
        // Every other frame's encoder waits and goes in one submission with the next
        // one's: each recording keeps its own jobs.
        held.push(enc.finish());
        if frame % 2 == 0 {
            continue;
        }
        ctx.queue.submit(std::mem::take(&mut held));
        let got = read();
        for g in 0..n {
            let want = match cpu.lookup(layout.tile_at(g).unwrap()) {
                0 => UNMAPPED,
                e => e,
            };
            assert_eq!((got[g], model[g]), (want, want), "frame {frame}, entry {g}: {:?}", layout.tile_at(g));
        }
    }
}

#[test]
fn static_camera_converges_on_a_real_photograph() {
    // Both sampling paths: hardware trilinear inside a slot (the default) and the
    // software blend of two lookups (forced), each at 50 dB or more once converged.
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_source(dir.path(), "earth", ImageSource::open(&real_jpeg()).unwrap());
    for trilinear in [Trilinear::Hardware, Trilinear::Software] {
        let vt = VtConfig { trilinear, ..VtConfig::default() };
        let r = run(&atlas, CameraPath::preset("static").unwrap(), 30, (480, 270), vt);
        let p = psnrs(&r);
        let first = p.iter().position(|&v| v >= 50.0);
        if first.is_none() {
            write_failure(
                &format!("converge-static-{}", trilinear.name()),
                r.size,
                &r.last_frame,
                r.last_reference.as_ref().unwrap(),
            );
        }
        assert!(first.is_some_and(|f| f < 30), "{trilinear:?}: never reached 50 dB within 30 frames: {p:?}");
        let tail: usize = r.frames[20..].iter().map(|f| f.uploads).sum();
        assert_eq!(tail, 0, "{trilinear:?}: steady state must upload nothing");
        eprintln!("{trilinear:?}: {:.2} dB at the last frame", p[29]);
    }
}

#[test]
fn camera_cut_recovers_within_five_frames() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_source(dir.path(), "cut", Generated::new(4096, 2048));
    let r = run(&atlas, CameraPath::preset("cut").unwrap(), 45, (320, 180), VtConfig::default());
    let p = psnrs(&r);
    // The preset cuts at frame 30; feedback of the new view arrives a frame later.
    let recovered = (30..45).find(|&f| p[f] >= 40.0);
    assert!(
        recovered.is_some_and(|f| f <= 35),
        "no recovery to 40 dB by frame 35 after the cut: {:?}",
        &p[28..]
    );
}

/// The "fully resident" signal: after the cut preset's hard cut (frame 30) everything the
/// new view wants is resident within 6 frames (stated bound; from disk, LZ4, lavapipe),
/// the event fires on that frame, and with prefetch along the path the view is resident
/// before it is shown.
#[test]
fn camera_cut_reaches_full_residency_and_signals_it() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_source(dir.path(), "cut-resident", Generated::new(4096, 2048));
    let r = run(&atlas, CameraPath::preset("cut").unwrap(), 45, (320, 180), VtConfig::default());
    let n = r.frames_to_resident_after(30);
    let fractions: Vec<(f64, Option<u64>, usize, usize)> = r.frames[28..]
        .iter()
        .map(|f| (f.resident_fraction, f.feedback_frame, f.tiles_needed, f.uploads))
        .collect();
    assert!(n.is_some_and(|n| n <= 6), "not fully resident within 6 frames of the cut: {fractions:?}");
    // The view after the cut was not resident: its feedback missed tiles (a fast loader
    // can deliver them within that same frame, so the fraction itself may stay at 1).
    let below = r.frames[30..].iter().any(|f| f.misses > 0 || f.resident_fraction < 1.0);
    let fractions: Vec<_> =
        fractions.iter().map(|f| format!("{:.2}/{:?}/{}/{}", f.0, f.1, f.2, f.3)).collect();
    assert!(below, "the cut must first show a view that is not resident: {fractions:?}");
    let at = 30 + n.unwrap() as usize;
    assert!(
        r.frames[30..=at].iter().any(|f| f.became_fully_resident),
        "the fully-resident event did not fire by frame {at}: {fractions:?}"
    );
    // With prefetch 8 frames ahead along the path, the close-up streams in before the cut.
    let cfg = CaptureConfig {
        atlas: atlas.clone(),
        camera: CameraPath::preset("cut").unwrap(),
        frames: 45,
        size: (320, 180),
        every: 0,
        out: None,
        reference: false,
        reference_atlas: None,
        vt: VtConfig::default(),
        scene: None,
        prefetch: 8,
        flush_vram_before: Vec::new(),
        remote: Default::default(),
        frame_interval: None,
        wait_resident: None,
        predict: 0,
        terrain: None,
    };
    let p = capture(gpu(), &cfg).unwrap();
    assert_eq!(
        p.frames_to_resident_after(30),
        Some(1),
        "prefetched: resident as soon as its feedback arrives"
    );
    let cut_uploads: usize = p.frames[30..].iter().map(|f| f.uploads).sum();
    let before: usize = p.frames[22..30].iter().map(|f| f.uploads).sum();
    assert!(before > 0 && cut_uploads < before, "uploads before the cut {before}, after {cut_uploads}");
}

/// Texture coordinates of the ground plane at each pixel (None off the plane).
fn ground_uv(camera: &Camera, size: (u32, u32), half: (f32, f32)) -> Vec<Option<(f32, f32)>> {
    let inv = camera.view_projection(size.0 as f32 / size.1 as f32).inverse();
    let mut out = Vec::with_capacity((size.0 * size.1) as usize);
    for y in 0..size.1 {
        for x in 0..size.0 {
            let nx = (x as f32 + 0.5) / size.0 as f32 * 2.0 - 1.0;
            let ny = 1.0 - (y as f32 + 0.5) / size.1 as f32 * 2.0;
            let a: Vec4 = inv * Vec4::new(nx, ny, 0.0, 1.0);
            let b: Vec4 = inv * Vec4::new(nx, ny, 1.0, 1.0);
            let (a, b) = (a.truncate() / a.w, b.truncate() / b.w);
            let t = a.y / (a.y - b.y);
            let p = a + (b - a) * t;
            let inside = (0.0..=1.0).contains(&t) && p.x.abs() < half.0 && p.z.abs() < half.1;
            out.push(inside.then(|| ((p.x + half.0) / (2.0 * half.0), (p.z + half.1) / (2.0 * half.1))));
        }
    }
    out
}

/// Mean error at pixels on tile edges against pixels on the pattern's other edges.
fn seam_errors(
    actual: &[u8],
    reference: &[u8],
    uv: &[Option<(f32, f32)>],
    w: usize,
    tex: (f32, f32),
) -> (f64, f64) {
    let (mut tile, mut inner) = ((0.0, 0usize), (0.0, 0usize));
    for i in 0..uv.len() {
        let (Some((u, v)), Some(Some((u2, _)))) = (uv[i], uv.get(i + 1)) else { continue };
        let (tx, ty) = (u * tex.0, v * tex.1);
        let step = ((u2 - u) * tex.0).abs().max(0.5) * 2.0;
        let near = |c: f32, period: f32| {
            let d = c % period;
            d.min(period - d) < step
        };
        let err =
            (0..3).map(|k| f64::from(actual[i * 4 + k].abs_diff(reference[i * 4 + k]))).sum::<f64>() / 3.0;
        if near(tx, 128.0) || near(ty, 128.0) {
            tile = (tile.0 + err, tile.1 + 1);
        } else if near(tx, 16.0) || near(ty, 16.0) {
            inner = (inner.0 + err, inner.1 + 1);
        }
        let _ = w;
    }
    assert!(tile.1 > 100 && inner.1 > 100, "too few edge pixels: {} {}", tile.1, inner.1);
    (tile.0 / tile.1 as f64, inner.0 / inner.1 as f64)
}

/// A black-and-white checker of 16-texel cells: a sharp edge at every tile edge and
/// at seven more places inside each tile, along both axes.
fn checker(w: u32, h: u32) -> ImageSource {
    let texels = (0..w * h)
        .flat_map(|i| {
            let (x, y) = (i % w, i / w);
            let v = if ((x / 16) + (y / 16)).is_multiple_of(2) { 230 } else { 20 };
            [v, v / 2 + 60, 255 - v, 255]
        })
        .collect();
    ImageSource::from_rgba(w, h, texels)
}

#[test]
fn no_seams_at_tile_edges_under_bilinear_trilinear_and_anisotropic_filtering() {
    let dir = tempfile::tempdir().unwrap();
    let tex = (1024.0, 512.0);
    let atlas = bake_source(dir.path(), "checker", checker(1024, 512));
    let size = (320, 180);
    let half = (1.0, 0.5);
    let top_down = |h: f32| Camera {
        up: Vec3::NEG_Z,
        ..Camera::look_at(Vec3::new(0.03, h, 0.02), Vec3::new(0.03, 0.0, 0.02))
    };
    let views = [
        ("bilinear", top_down(0.3), 1),
        ("trilinear", top_down(0.75), 1),
        ("anisotropic", Camera::look_at(Vec3::new(-0.2, 0.18, 0.45), Vec3::new(0.3, 0.0, -0.1)), 4),
    ];
    // Both sampling paths: with hardware trilinear the trilinear and anisotropic views
    // read level 1 of the slots on both sides of each tile edge.
    for (trilinear, (name, camera, aniso)) in
        [Trilinear::Hardware, Trilinear::Software].into_iter().flat_map(|t| views.map(|v| (t, v)))
    {
        let name = format!("{name}-{}", trilinear.name());
        let vt = VtConfig { max_anisotropy: aniso, trilinear, ..VtConfig::default() };
        let r = run(&atlas, CameraPath::fixed(camera), 6, size, vt);
        let reference = r.last_reference.as_ref().unwrap();
        let uv = ground_uv(&camera, size, half);
        let (at_tiles, inside) = seam_errors(&r.last_frame, reference, &uv, size.0 as usize, tex);
        if at_tiles > inside * 1.25 + 1.0 {
            write_failure(&format!("seams-{name}"), size, &r.last_frame, reference);
        }
        assert!(
            at_tiles <= inside * 1.25 + 1.0,
            "{name}: mean error {at_tiles:.2} at tile edges vs {inside:.2} at the pattern's other edges"
        );
        if aniso == 1 {
            let p = compare(&r.last_frame, reference).psnr_db;
            assert!(p >= 40.0, "{name}: PSNR {p:.2} dB against the reference");
        }
    }
}

#[test]
fn tiny_pool_settles_at_a_coarser_mip_without_thrashing() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_source(dir.path(), "tiny", Generated::new(4096, 2048));
    // 1 MiB holds 11 slots of 136² RGBA8 with their 68² level-1 copies, laid out as a
    // 4 x 2 grid.
    let vt = VtConfig { pool_mib: 1, ..VtConfig::default() };
    let r = run(&atlas, CameraPath::preset("static").unwrap(), 45, (640, 360), vt);
    assert_eq!(r.pool_slots, 8);
    // The oversubscription bias rises with hysteresis (a few frames per step, each
    // waiting for the feedback window to reflect the last step), then holds.
    let tail: Vec<usize> = r.frames[30..].iter().map(|f| f.uploads).collect();
    assert!(tail.iter().all(|&u| u == 0), "uploads keep happening: {tail:?}");
    let bias: Vec<f32> = r.frames.iter().map(|f| f.auto_mip_bias).collect();
    assert!(bias[44] > 0.0, "the automatic mip bias never rose: {bias:?}");
    assert!(bias[30..].windows(2).all(|w| w[0] == w[1]), "the bias still moves: {bias:?}");
    assert!(bias.windows(2).all(|w| w[1] >= w[0]), "the bias oscillated: {bias:?}");
    // Without the automatic bias the same view needs more tiles than the pool holds.
    let fixed = VtConfig {
        pool_mib: 1,
        streaming: tessera::StreamerConfig { auto_mip_bias: false, ..tessera::StreamerConfig::default() },
        ..VtConfig::default()
    };
    let plain = run(&atlas, CameraPath::preset("static").unwrap(), 20, (640, 360), fixed);
    assert!(
        plain.frames.last().unwrap().tiles_needed > 8,
        "the view should need more tiles than the pool holds"
    );
    // A sensible, blurrier picture: not uniform, and still close to the reference.
    let p = compare(&r.last_frame, r.last_reference.as_ref().unwrap()).psnr_db;
    assert!(p > 18.0, "PSNR {p:.2} dB: the coarse picture is not the scene");
    let first = &r.last_frame[..4];
    assert!(r.last_frame.chunks(4).any(|px| px != first), "uniform frame");
}

#[test]
fn corrupted_tile_is_reported_once_and_replaced_by_its_ancestor() {
    let dir = tempfile::tempdir().unwrap();
    // The labelled texture: every tile differs, so no two tiles share a blob in the atlas
    // (identical tiles, like a checker's, would share one and all fail together).
    let path = bake_source(dir.path(), "corrupt", Generated::new(1024, 512));
    // The close-up looks at mip 0 around the centre; break tile (3, 1) there.
    let bad = TileId::new(0, 0, 3, 1);
    let e = Atlas::open(&path).unwrap().entry(bad).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[e.offset as usize + 100] ^= 0xff;
    let broken = dir.path().join("broken.tsa");
    std::fs::write(&broken, bytes).unwrap();
    let camera = Camera {
        up: Vec3::NEG_Z,
        ..Camera::look_at(Vec3::new(-0.15, 0.35, -0.1), Vec3::new(-0.15, 0.0, -0.1))
    };
    let good = run(&path, CameraPath::fixed(camera), 20, (320, 180), VtConfig::default());
    let r = run_with(&broken, CameraPath::fixed(camera), 20, (320, 180), VtConfig::default(), false);
    let s = &r.final_stats;
    assert_eq!(s.loader.failed, 1, "the corrupted tile is requested (and reported) once: {:?}", s.loader);
    let p = compare(&r.last_frame, &good.last_frame).psnr_db;
    assert!(p.is_finite() && p > 12.0 && p < 40.0, "the ancestor shows where the tile failed: PSNR {p:.2}");
    assert!(r.frames.iter().skip(5).all(|f| f.uploads == 0), "the failed tile must not loop");
}

/// A short soak through the renderer: 240 frames of random cuts (a new view every 6
/// frames, from far away to grazing close-ups) through a 12-slot pool. The pool never
/// holds more than its slots, the host cache stays within its budget, no frame shows an
/// unwritten texel, and the last frames stream as much as the first (nothing stalls).
#[test]
fn random_cuts_through_a_tiny_pool_keep_streaming() {
    // The short version of `tessera soak` (its 10⁵-frame run is in BENCHMARKS.md): 240
    // frames, a cut every 6, every frame read back and checked for unwritten texels.
    let dir = tempfile::tempdir().unwrap();
    let atlas = bake_source(dir.path(), "soak", Generated::new(4096, 2048));
    let cfg = tessera_tools::soak::SoakConfig {
        atlas,
        scene: None,
        frames: 240,
        cut_every: 6,
        seed: 0x9e37_79b9_7f4a_7c15,
        size: (160, 90),
        sample_every: 20,
        check_every: 1,
        vt: VtConfig {
            pool_mib: 1,
            streaming: tessera::StreamerConfig { host_cache_mib: 4, ..tessera::StreamerConfig::default() },
            ..VtConfig::default()
        },
    };
    let r = tessera_tools::soak::soak(gpu(), &cfg, |_| {}).unwrap();
    assert_eq!((r.frames, r.cuts, r.points.len()), (240, 39, 12));
    assert_eq!(r.points.iter().map(|p| p.checked_frames).sum::<u64>(), 240, "every frame was checked");
    for p in &r.points {
        assert!(p.pool_resident <= p.pool_slots as usize, "{p:?}");
        assert!(p.host_mib <= 4.0, "host cache over budget: {p:?}");
    }
    let uploads = |ps: &[tessera_tools::soak::SoakPoint]| ps.iter().map(|p| p.uploads).sum::<u64>();
    assert!(uploads(&r.points[..3]) > 0 && uploads(&r.points[9..]) > 0, "streaming stopped: {:?}", r.points);
    assert!(r.points.iter().all(|p| p.evictions > 0), "a 1 MiB pool must churn: {:?}", r.points);
}

/// Atlases read over HTTP from a real nginx on 127.0.0.1 (range requests, ETags).
mod remote {
    use super::*;
    use std::time::{Duration, Instant};
    use tessera_core::format::atlas::AtlasError;
    use tessera_tests::Nginx;

    fn name(p: &std::path::Path) -> String {
        p.file_name().unwrap().to_string_lossy().into_owned()
    }

    /// `tessera capture` through `http://` converges like the local file: the same
    /// quality against the reference, the same final image, and the requests counted.
    #[test]
    fn capture_over_http_converges_like_the_local_file() {
        let dir = tempfile::tempdir().unwrap();
        let atlas = bake_source(dir.path(), "served", Generated::new(2048, 1024));
        let server = Nginx::serve(dir.path(), "");
        let url = server.url(&name(&atlas));
        let size = (320, 180);
        let path = || CameraPath::preset("static").unwrap();
        let local = run(&atlas, path(), 24, size, VtConfig::default());
        let remote = run(std::path::Path::new(&url), path(), 24, size, VtConfig::default());
        // (run_with: no disk cache, so every tile came over the network.)
        let (pl, pr) = (psnrs(&local), psnrs(&remote));
        assert!(pl[23] >= 40.0 && pr[23] >= pl[23] - 0.5, "local {pl:?}\nremote {pr:?}");
        let same = compare(&remote.last_frame, &local.last_frame);
        if same.psnr_db < 60.0 {
            write_failure("remote-http", size, &remote.last_frame, &local.last_frame);
        }
        assert!(same.psnr_db >= 60.0, "the remote frame differs from the local one: {same:?}");
        let net = remote.frames.last().and_then(|f| f.network).expect("network stats of a remote atlas");
        assert!(net.requests > 0 && net.bytes > 0 && net.failures == 0, "{net:?}");
        assert!(net.latency_p95_ms >= net.latency_p50_ms && net.latency_p50_ms > 0.0, "{net:?}");
        assert!(local.frames.last().unwrap().network.is_none());
        // Per frame: each frame's own figures are the growth of the running totals.
        let frames: Vec<_> = remote.frames.iter().filter_map(|f| f.network.zip(f.network_frame)).collect();
        assert_eq!(frames.len(), remote.frames.len());
        for w in frames.windows(2) {
            let ((before, _), (now, this)) = (w[0], w[1]);
            assert_eq!(this.requests, now.requests - before.requests, "{this:?}");
            assert_eq!(this.bytes, now.bytes - before.bytes, "{this:?}");
        }
        assert!(frames.iter().any(|(_, f)| f.requests == 0), "quiet frames show as quiet");
    }

    /// The harness' own range server (for the GPU machine's benchmarks, which has no
    /// nginx) serves what nginx serves, and refuses a replaced file.
    #[test]
    fn the_benchmark_range_server_serves_like_nginx() {
        let dir = tempfile::tempdir().unwrap();
        let atlas = bake_source(dir.path(), "served", Generated::new(1024, 512));
        let server = tessera_tests::RangeServer::serve(dir.path());
        let local = Atlas::open(&atlas).unwrap();
        let remote =
            Atlas::open_with(server.url(&name(&atlas)), &RemoteOptions::without_disk_cache()).unwrap();
        let tiles: Vec<TileId> = local.layers()[0].layout.tiles(0).collect();
        for (t, got) in tiles.iter().zip(remote.read_tiles(&tiles, &|_| true)) {
            assert_eq!(got.unwrap(), local.read_tile(*t).unwrap(), "{t}");
        }
        std::thread::sleep(Duration::from_millis(1100));
        bake_source(dir.path(), "served", Generated::new(1024, 256));
        let e = remote.read_tile(tiles[0]).unwrap_err().to_string();
        assert!(e.contains("replaced"), "{e}");
    }

    /// The generated `w × h` texture baked (LZ4) in format version 1 and version 2, as
    /// `{prefix}1.tsa` and `{prefix}2.tsa` in `dir`.
    fn bake_both_versions(dir: &std::path::Path, prefix: &str, w: u32, h: u32) -> Vec<std::path::PathBuf> {
        use tessera_core::bake::{BakeInput, BakeOptions, bake};
        [1, 2]
            .into_iter()
            .map(|version| {
                let path = dir.join(format!("{prefix}{version}.tsa"));
                let opts = BakeOptions { format_version: version, ..BakeOptions::default() };
                let input = BakeInput::new("generated", Generated::new(w, h));
                bake(vec![input], &path, &opts, &tessera_core::NoProgress).unwrap();
                path
            })
            .collect()
    }

    /// A `WxH` size from the environment variable `name`.
    fn env_size(name: &str) -> Option<(u32, u32)> {
        let v = std::env::var(name).ok()?;
        let (w, h) = v.split_once('x')?;
        Some((w.parse().ok()?, h.parse().ok()?))
    }

    /// The number of range requests a remote atlas has made so far.
    fn requests(a: &Atlas) -> u64 {
        a.network_stats().map_or(0, |n| n.requests)
    }

    /// Version 2 over HTTP: opening is one request (header, root directory and the
    /// first index page); every tile of the three coarsest mips (what a first frame
    /// needs) is one more; a 4×4 block of mip-0 neighbours is one or two coalesced
    /// ranges, where the row-ordered version 1 needs a request per row.
    #[test]
    fn version_2_reads_coarse_mips_and_neighbours_in_few_requests() {
        let dir = tempfile::tempdir().unwrap();
        let paths = bake_both_versions(dir.path(), "v", 2048, 2048);
        let server = Nginx::serve(dir.path(), "");
        let open = |p: &std::path::Path| {
            Atlas::open_with(server.url(&name(p)), &RemoteOptions::without_disk_cache()).unwrap()
        };
        let (v1, v2) = (open(&paths[0]), open(&paths[1]));
        assert_eq!((v1.version(), v2.version()), (1, 2));
        assert_eq!(requests(&v2), 1, "opening is one request");
        let layout = v2.layers()[0].layout;
        let c = layout.coarsest_mip();
        let coarse: Vec<TileId> = layout.tiles(0).filter(|t| t.mip + 2 >= c).collect();
        assert_eq!(coarse.len(), 1 + 4 + 16);
        let keep = |_: usize| true;
        assert!(v2.read_tiles(&coarse, &keep).iter().all(Result::is_ok));
        assert_eq!(requests(&v2), 2, "the coarse mips are one range");
        let block: Vec<TileId> = (0..16).map(|i| TileId::new(0, 0, 4 + i % 4, 8 + i / 4)).collect();
        let before = (requests(&v1), requests(&v2));
        let (b1, b2) = (v1.read_tiles(&block, &keep), v2.read_tiles(&block, &keep));
        for (a, b) in b1.into_iter().zip(b2) {
            assert_eq!(a.unwrap(), b.unwrap(), "both versions give the same bytes");
        }
        let (r1, r2) = (requests(&v1) - before.0, requests(&v2) - before.1);
        assert!(r2 <= 2 && r1 >= 4, "a 4x4 block: version 2 {r2} requests, version 1 {r1}");
        let net = v2.network_stats().unwrap();
        assert!(net.blobs >= 37 && net.blob_bytes <= net.bytes, "{net:?}");
    }

    /// An index that does not fit in the opening bytes (here 2,731 tiles, 66 KB) is read
    /// ahead in one background request, from the first page the opening bytes do not
    /// hold whole: tiles of the last page then cost their blob's request only.
    #[test]
    fn a_small_paged_index_is_read_ahead_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let atlas = bake_source(dir.path(), "wide", Generated::new(8192, 4096));
        let server = Nginx::serve(dir.path(), "");
        let url = server.url(&name(&atlas));
        let options = RemoteOptions::with_disk_cache(cache.path(), 256);
        let a = Atlas::open_with(&url, &options).unwrap();
        assert_eq!(a.version(), 2);
        // Mip 0's last tile on the curve is stored last: its entry is in the last page.
        // Read at once, while the read-ahead is (likely) still in flight: the page read
        // waits for it instead of asking for the page a second time.
        let last = TileId::new(0, 0, 63, 31);
        let local = Atlas::open(&atlas).unwrap();
        assert_eq!(a.read_tile(last).unwrap(), local.read_tile(last).unwrap());
        assert_eq!(requests(&a), 3, "the opening request, the read-ahead and the blob");
        drop(a);
        // The next run finds the pages (and that blob) in the disk cache: no read-ahead.
        let b = Atlas::open_with(&url, &options).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(b.read_tile(last).unwrap(), local.read_tile(last).unwrap());
        let other = TileId::new(0, 0, 62, 31);
        assert_eq!(b.read_tile(other).unwrap(), local.read_tile(other).unwrap());
        assert_eq!(requests(&b), 2, "the opening request and the one blob not cached");
    }

    /// A range whose tiles are no longer wanted is abandoned in flight (the slow link
    /// here would take seconds): the tiles come back cancelled, quickly, and counted.
    #[test]
    fn reads_no_longer_wanted_are_abandoned_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let atlas = bake_source(dir.path(), "slow", Generated::new(1024, 1024));
        let server = Nginx::serve(dir.path(), "");
        let proxy = tessera_tests::DelayProxy::start(server.port(), Duration::from_millis(1500));
        let url = format!("http://127.0.0.1:{}/{}", proxy.port(), name(&atlas));
        let a = Atlas::open_with(&url, &RemoteOptions::without_disk_cache()).unwrap();
        let tiles: Vec<TileId> = (0..4).map(|x| TileId::new(0, 0, x, 0)).collect();
        let start = Instant::now();
        let got = a.read_tiles(&tiles, &|_| start.elapsed() < Duration::from_millis(100));
        let took = start.elapsed();
        assert!(got.iter().all(|r| matches!(r, Err(AtlasError::Cancelled { .. }))), "{got:?}");
        assert!(took < Duration::from_millis(2000), "abandoned after {took:?}, the round trip is 3 s");
        let net = a.network_stats().unwrap();
        assert!(net.cancelled >= 1 && net.in_flight == 0, "{net:?}");
        // Tiles not wanted before their request are not asked for at all.
        let before = net.requests;
        let got = a.read_tiles(&tiles, &|_| false);
        assert!(got.iter().all(|r| matches!(r, Err(AtlasError::Cancelled { .. }))));
        assert_eq!(a.network_stats().unwrap().requests, before);
    }

    /// A stopped server makes tiles unavailable for now (not failed, not garbage) within
    /// the retry window, and reads work again once it is back; an atlas replaced on the
    /// server is refused for every later read; a missing object or a dead server fails
    /// to open with a clear error instead of hanging.
    #[test]
    fn remote_reads_survive_a_stopped_server_and_refuse_a_replaced_atlas() {
        let dir = tempfile::tempdir().unwrap();
        let atlas = bake_source(dir.path(), "served", Generated::new(1024, 512));
        let mut server = Nginx::serve(dir.path(), "");
        let url = server.url(&name(&atlas));
        let local = Atlas::open(&atlas).unwrap();
        let remote = Atlas::open_with(&url, &RemoteOptions::without_disk_cache()).unwrap();
        assert!(remote.is_remote() && !local.is_remote());
        assert_eq!(remote.tile_count(), local.tile_count());
        let (a, b) = (TileId::new(0, 0, 0, 0), TileId::new(0, 0, 1, 0));
        assert_eq!(remote.read_tile(a).unwrap(), local.read_tile(a).unwrap());

        server.stop();
        let t0 = Instant::now();
        let down = remote.read_tile(b).unwrap_err();
        assert!(matches!(down, AtlasError::Unavailable { .. }), "{down}");
        assert!(t0.elapsed() < Duration::from_secs(12), "gave up after {:?}", t0.elapsed());
        server.start();
        // After a failed connection the object asks again only after a pause.
        std::thread::sleep(tessera_core::format::atlas::remote::UNREACHABLE_PAUSE);
        assert_eq!(remote.read_tile(b).unwrap(), local.read_tile(b).unwrap());

        // Replaced by renaming a different atlas over it (another size, so another ETag).
        let other = bake_source(dir.path(), "other", Generated::new(512, 512));
        std::fs::rename(&other, &atlas).unwrap();
        let replaced = remote.read_tile(a).unwrap_err();
        assert!(replaced.to_string().contains("replaced on the server"), "{replaced}");
        assert!(!matches!(replaced, AtlasError::Unavailable { .. }), "a replaced atlas is not retried");
        let stats = remote.network_stats().unwrap();
        assert!(stats.failures >= 2 && stats.in_flight == 0, "{stats:?}");

        let none = RemoteOptions::without_disk_cache();
        let missing = Atlas::open_with(server.url("missing.tsa"), &none).unwrap_err().to_string();
        assert!(missing.contains("missing.tsa") && missing.contains("not found"), "{missing}");
        let dead = format!("http://127.0.0.1:{}/x.tsa", {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        });
        let t0 = Instant::now();
        let e = Atlas::open_with(&dead, &none).unwrap_err().to_string();
        assert!(e.contains("x.tsa"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(12), "opening a dead server took {:?}", t0.elapsed());
    }

    /// The disk cache tier: a first capture over HTTP fills it; with the server down, a
    /// second run opens the atlas from the cache and converges to the same frame with
    /// no request answered; once a tile entry is damaged, that tile is rejected (not
    /// shown) and counted.
    #[test]
    fn with_the_server_down_a_second_run_renders_from_the_disk_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let atlas = bake_source(dir.path(), "served", Generated::new(2048, 1024));
        let mut server = Nginx::serve(dir.path(), "");
        let url = server.url(&name(&atlas));
        let opts = || RemoteOptions::with_disk_cache(cache.path(), 256);
        let size = (320, 180);
        let path = || CameraPath::preset("static").unwrap();
        let first =
            run_remote(std::path::Path::new(&url), path(), 24, size, VtConfig::default(), true, opts());
        let net = first.frames.last().and_then(|f| f.network).unwrap();
        let disk = net.disk_cache.unwrap();
        assert!(disk.writes > 0 && disk.bytes > 0 && !net.offline, "{net:?}");

        server.stop();
        let second =
            run_remote(std::path::Path::new(&url), path(), 24, size, VtConfig::default(), false, opts());
        let net2 = second.frames.last().and_then(|f| f.network).unwrap();
        assert!(net2.offline, "opened from the cache while the server is down: {net2:?}");
        let disk2 = net2.disk_cache.unwrap();
        assert!(disk2.hits > 0 && disk2.rejected == 0, "{disk2:?}");
        let same = compare(&second.last_frame, &first.last_frame);
        if same.psnr_db < 60.0 {
            write_failure("remote-disk-cache", size, &second.last_frame, &first.last_frame);
        }
        assert!(same.psnr_db >= 60.0, "the cached run differs from the first: {same:?}");
    }

    /// The BENCHMARKS table of remote atlases: a local file against HTTP from nginx
    /// directly and through a 20 ms round trip (a delaying proxy), format v1 against v2
    /// without a disk cache, then v2 with a cold disk cache and again with the disk
    /// cache the cold run filled. `cut` preset (a hard cut at frame 30), LZ4 8192×4096
    /// atlas, 640×360 on whatever adapter runs it, frames paced at 60 Hz.
    /// `cargo test --release --test gpu remote_latency_table -- --ignored --nocapture`;
    /// `TESSERA_BENCH_SIZE=1920x1080` sets the frame size, `TESSERA_BENCH_TEXTURE=WxH` the
    /// generated texture's, `TESSERA_BENCH_SERVER=builtin`
    /// serves with the harness' range server instead of nginx, `TESSERA_BENCH_CLOUDS=1`
    /// adds S3, GCS and Azure through their emulators on loopback.
    #[test]
    #[ignore = "a benchmark: prints the table for BENCHMARKS.md"]
    fn remote_latency_table() {
        let dir = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let (tw, th) = env_size("TESSERA_BENCH_TEXTURE").unwrap_or((8192, 4096));
        let atlases = bake_both_versions(dir.path(), "bench-v", tw, th);
        // nginx, or where there is none (the GPU machine) the harness's own range server.
        let builtin = std::env::var("TESSERA_BENCH_SERVER").is_ok_and(|v| v == "builtin");
        let nginx = (!builtin).then(|| Nginx::serve(dir.path(), ""));
        let simple = builtin.then(|| tessera_tests::RangeServer::serve(dir.path()));
        let port = match (&nginx, &simple) {
            (Some(n), _) => n.port(),
            (_, Some(s)) => s.port(),
            _ => unreachable!("one server runs"),
        };
        let direct = |p: &std::path::Path| format!("http://127.0.0.1:{port}/{}", name(p));
        let proxy = tessera_tests::DelayProxy::start(port, Duration::from_millis(10));
        let far = |p: &std::path::Path| format!("http://127.0.0.1:{}/{}", proxy.port(), name(p));
        let size = env_size("TESSERA_BENCH_SIZE").unwrap_or((640, 360));
        println!(
            "{}, {tw}x{th} atlas, at {}x{}",
            if builtin { "built-in range server" } else { "nginx" },
            size.0,
            size.1
        );
        let cached = || RemoteOptions::with_disk_cache(cache.path(), 1024);
        let none = RemoteOptions::without_disk_cache;
        let (v1, v2) = (&atlases[0], &atlases[1]);
        let mut runs: Vec<(&str, String, RemoteOptions)> = vec![
            ("v2, local file", v2.display().to_string(), none()),
            ("v1, HTTP loopback, no disk cache", direct(v1), none()),
            ("v2, HTTP loopback, no disk cache", direct(v2), none()),
            ("v1, HTTP +20 ms RTT, no disk cache", far(v1), none()),
            ("v2, HTTP +20 ms RTT, no disk cache", far(v2), none()),
            ("v2, HTTP +20 ms RTT, cold disk cache", far(v2), cached()),
            ("v2, HTTP +20 ms RTT, warm disk cache", far(v2), cached()),
        ];
        // TESSERA_BENCH_CLOUDS=1: the object stores' emulators on loopback too (moto,
        // fake-gcs-server, Azurite; not on the GPU machine, which has none of them).
        let clouds = std::env::var("TESSERA_BENCH_CLOUDS").is_ok_and(|v| v == "1");
        let moto = clouds.then(tessera_tests::Moto::start);
        let gcs = clouds.then(tessera_tests::FakeGcs::start);
        let azure = clouds.then(tessera_tests::Azurite::start);
        if let (Some(moto), Some(gcs), Some(azure)) = (&moto, &gcs, &azure) {
            moto.put("bench", "v2.tsa", v2);
            gcs.put("bench", "v2.tsa", v2);
            azure.create_container("bench");
            let settings: Vec<_> =
                moto.settings().into_iter().chain(gcs.settings()).chain(azure.settings()).collect();
            let none_s = RemoteOptions { s3: settings.clone(), ..RemoteOptions::without_disk_cache() };
            tessera_core::format::atlas::publish::publish(
                v2,
                "az://bench/v2.tsa",
                true,
                &settings,
                &tessera_core::NoProgress,
            )
            .unwrap();
            runs.push(("v2, S3 (moto) loopback, no disk cache", "s3://bench/v2.tsa".into(), none_s.clone()));
            runs.push((
                "v2, GCS (fake-gcs-server) loopback, no disk cache",
                "gs://bench/v2.tsa".into(),
                none_s.clone(),
            ));
            runs.push(("v2, Azure (Azurite) loopback, no disk cache", "az://bench/v2.tsa".into(), none_s));
        }
        println!(
            "| source | open ms | first frame: ms, requests | cut → 100% resident: frames, ms | requests | requests/frame (max) | blobs/request | KiB/request | KiB/tile | disk-cache hits |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for (label, location, opts) in runs {
            let t0 = Instant::now();
            drop(Atlas::open_with(&location, &opts).unwrap());
            let open_ms = t0.elapsed().as_secs_f64() * 1e3;
            // Paced at 60 Hz like a display: a round trip is then about one frame.
            let r = run_paced(
                std::path::Path::new(&location),
                CameraPath::preset("cut").unwrap(),
                60,
                size,
                VtConfig::default(),
                false,
                opts,
                Some(Duration::from_micros(16_667)),
            );
            let cut = 30usize;
            // The cut's feedback arrives a frame later: the first fully-resident event
            // after the cut closes it (ms: wall time from the end of the frame before
            // the cut).
            let settled = (cut + 1..r.frames.len()).find(|&f| r.frames[f].became_fully_resident);
            let (frames, ms) = settled.map_or(("never".into(), "n/a".into()), |f| {
                let ms = r.frames[f].at_ms - r.frames[cut - 1].at_ms;
                (format!("{}", f - cut), format!("{ms:.0}"))
            });
            let nets: Vec<_> = r.frames.iter().map(|f| f.network.unwrap_or_default()).collect();
            let last = nets.last().copied().unwrap_or_default();
            // Requests of the first frame, beyond the one that opened the atlas.
            let first = nets.first().map_or(0, |n| n.requests.saturating_sub(1));
            let per_frame = nets.windows(2).map(|w| w[1].requests - w[0].requests).max().unwrap_or(0);
            let per = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
            let hits = last.disk_cache.map_or(0, |d| d.hits);
            println!(
                "| {label} | {open_ms:.1} | {:.1}, {first} | {frames}, {ms} | {} | {per_frame} | {:.1} | {:.1} | {:.1} | {hits} |",
                r.frames[0].frame_ms,
                last.requests,
                per(last.blobs, last.requests),
                per(last.bytes, last.requests) / 1024.0,
                per(last.bytes, last.blobs) / 1024.0,
            );
        }
    }

    /// A real S3-compatible server (moto, started as a process) holding the atlas in a
    /// bucket: the same capture through `s3://` as through the local file.
    #[test]
    fn capture_through_s3_matches_the_local_file() {
        let dir = tempfile::tempdir().unwrap();
        let atlas = bake_source(dir.path(), "served", Generated::new(2048, 1024));
        let moto = tessera_tests::Moto::start();
        moto.put("textures", "earth/served.tsa", &atlas);
        let opts = RemoteOptions { s3: moto.settings(), ..RemoteOptions::without_disk_cache() };
        let local = run(&atlas, CameraPath::preset("static").unwrap(), 24, (320, 180), VtConfig::default());
        let remote = capture_matches_local("s3://textures/earth/served.tsa", &opts, &local);
        assert!(psnrs(&remote)[23] >= 40.0, "{:?}", psnrs(&remote));
    }

    /// Captures `url` like `local` (the static preset, 24 frames at 320×180, against
    /// the reference) and checks the last frames agree (≥ 60 dB), that the network
    /// answered without failures, and that a missing key beside it is "not found".
    fn capture_matches_local(url: &str, opts: &RemoteOptions, local: &CaptureReport) -> CaptureReport {
        let path = CameraPath::preset("static").unwrap();
        let remote = run_remote(
            std::path::Path::new(url),
            path,
            24,
            local.size,
            VtConfig::default(),
            true,
            opts.clone(),
        );
        let same = compare(&remote.last_frame, &local.last_frame);
        if same.psnr_db < 60.0 {
            let label = format!("remote-{}", url.split(':').next().unwrap_or("url"));
            write_failure(&label, local.size, &remote.last_frame, &local.last_frame);
        }
        assert!(same.psnr_db >= 60.0, "the {url} frame differs from the local one: {same:?}");
        let net = remote.frames.last().and_then(|f| f.network).unwrap();
        assert!(net.requests > 0 && net.failures == 0, "{url}: {net:?}");
        let missing = url.replace("served", "none");
        let e = Atlas::open_with(&missing, opts).unwrap_err().to_string();
        assert!(e.contains("not found"), "{missing}: {e}");
        remote
    }

    /// Google Cloud Storage and Azure Blob Storage through their emulators on loopback
    /// (fake-gcs-server and Azurite, real processes): `gs://` and `az://` captures equal
    /// the local file's, the Azure copy uploaded by `tessera publish`, and a missing
    /// object or container is named as such.
    #[test]
    fn captures_through_gcs_and_azure_match_the_local_file() {
        use tessera_core::format::atlas::publish::publish;
        let dir = tempfile::tempdir().unwrap();
        let atlas = bake_source(dir.path(), "served", Generated::new(2048, 1024));
        let gcs = tessera_tests::FakeGcs::start();
        gcs.put("textures", "earth/served.tsa", &atlas);
        let azure = tessera_tests::Azurite::start();
        azure.create_container("textures");
        // Both stores' settings in one list: each takes its own.
        let settings: Vec<_> = gcs.settings().into_iter().chain(azure.settings()).collect();
        let report =
            publish(&atlas, "az://textures/earth/served.tsa", false, &settings, &tessera_core::NoProgress)
                .unwrap();
        assert!(report.blobs_checked > 0 && report.uploaded.len() == 1, "{report:?}");
        let opts = RemoteOptions { s3: settings, ..RemoteOptions::without_disk_cache() };
        let local = run(&atlas, CameraPath::preset("static").unwrap(), 24, (320, 180), VtConfig::default());
        for url in ["gs://textures/earth/served.tsa", "az://textures/earth/served.tsa"] {
            capture_matches_local(url, &opts, &local);
        }
        let e = Atlas::open_with("az://nocontainer/served.tsa", &opts).unwrap_err().to_string();
        assert!(e.contains("container does not exist"), "{e}");
    }

    /// `wait_resident` (`capture --wait-resident`): over a slow server (nginx
    /// `limit_rate`) every recorded frame of a flyover is fully resident, though without
    /// waiting the first ones are not, and two captures agree frame for frame (within
    /// trilinear rounding), whatever the network's timing.
    #[test]
    fn waiting_for_residency_makes_remote_captures_repeatable() {
        let dir = tempfile::tempdir().unwrap();
        let atlas = bake_source(dir.path(), "served", Generated::new(4096, 2048));
        let server = Nginx::serve(dir.path(), "limit_rate 512k;");
        let url = std::path::PathBuf::from(server.url(&name(&atlas)));
        let capture_once = |wait: Option<std::time::Duration>| {
            let cfg = CaptureConfig {
                atlas: url.clone(),
                camera: CameraPath::preset("flyover").unwrap(),
                frames: 8,
                size: (320, 180),
                every: 0,
                out: None,
                reference: false,
                reference_atlas: None,
                vt: VtConfig::default(),
                scene: None,
                prefetch: 0,
                flush_vram_before: Vec::new(),
                remote: RemoteOptions::without_disk_cache(),
                frame_interval: None,
                wait_resident: wait,
                predict: 0,
                terrain: None,
            };
            capture(gpu(), &cfg).unwrap()
        };
        let hurried = capture_once(None);
        let short = hurried.frames.iter().filter(|f| f.resident_fraction < 1.0).count();
        assert!(short > 0, "the server is not slow enough to test this");
        let wait = Some(std::time::Duration::from_secs(30));
        let (a, b) = (capture_once(wait), capture_once(wait));
        for r in [&a, &b] {
            for f in &r.frames {
                assert!(!f.settle_timed_out && f.resident_fraction >= 1.0, "frame {}: {f:?}", f.frame);
            }
        }
        assert!(a.frames[0].settle_renders > 0, "{:?}", a.frames[0]);
        let same = compare(&a.last_frame, &b.last_frame);
        if same.psnr_db < 60.0 {
            write_failure("wait-resident", (320, 180), &a.last_frame, &b.last_frame);
        }
        assert!(same.psnr_db >= 60.0 && same.max_error <= 2, "two waited captures differ: {same:?}");
    }

    /// A bake sharded into S3 (a real moto server on loopback): four shards upload
    /// their parts, the merge writes only the split atlas' index object, and the atlas
    /// opened over S3 captures like the single-process bake of the same input read from
    /// disk, tile for tile and frame for frame.
    #[test]
    fn shards_baked_into_s3_merge_into_a_split_atlas_that_captures_like_the_local_bake() {
        use tessera_core::bake::shard::{MergeForm, Shard, merge_shards_with};
        use tessera_core::bake::{BakeInput, BakeOptions, bake};
        use tessera_core::format::codec::Codec;
        let dir = tempfile::tempdir().unwrap();
        let local = bake_source(dir.path(), "farm", Generated::new(2048, 1024));
        let moto = tessera_tests::Moto::start();
        // The bucket (and nothing else in it that the merge could take for a part).
        moto.put("bakes", "README", &local);
        let url = std::path::PathBuf::from("s3://bakes/sharded/farm.tsa");
        for i in 0..4 {
            let o = BakeOptions {
                codec: Codec::Lz4,
                shard: Shard::new(i, 4),
                s3: moto.settings(),
                scratch_dir: Some(dir.path().to_path_buf()),
                ..BakeOptions::default()
            };
            let input = BakeInput::new("farm", Generated::new(2048, 1024));
            bake(vec![input], &url, &o, &tessera_core::NoProgress).unwrap();
        }
        let err = tessera_core::bake::shard::merge_shards_with(
            std::path::Path::new("s3://bakes/elsewhere/farm.tsa"),
            MergeForm::Split,
            &moto.settings(),
            &tessera_core::NoProgress,
        )
        .unwrap_err();
        assert!(err.to_string().contains("no shard parts"), "{err}");
        let report =
            merge_shards_with(&url, MergeForm::Split, &moto.settings(), &tessera_core::NoProgress).unwrap();
        assert!(report.split && report.blob_bytes == 0, "{report:?}");
        let moved = report.record_bytes + report.file_bytes;
        assert!(moved * 50 < report.data_bytes, "the merge moved {moved} of {} bytes", report.data_bytes);
        let opts = RemoteOptions { s3: moto.settings(), ..RemoteOptions::without_disk_cache() };
        let (a, b) = (Atlas::open(&local).unwrap(), Atlas::open_with(&url, &opts).unwrap());
        assert!(b.is_split() && b.data_objects().len() == 4);
        for t in a.layers()[0].layout.tiles(0) {
            let (ea, eb) = (a.entry(t).unwrap(), b.entry(t).unwrap());
            assert_eq!((ea.codec, ea.length, ea.crc32), (eb.codec, eb.length, eb.crc32), "{t}");
        }
        let size = (320, 180);
        let path = || CameraPath::preset("static").unwrap();
        let here = run(&local, path(), 24, size, VtConfig::default());
        let there = run_remote(&url, path(), 24, size, VtConfig::default(), true, opts.clone());
        let same = compare(&there.last_frame, &here.last_frame);
        if same.psnr_db < 60.0 {
            write_failure("sharded-s3", size, &there.last_frame, &here.last_frame);
        }
        assert!(same.psnr_db >= 60.0, "the split s3:// frame differs from the local bake's: {same:?}");
        let net = there.frames.last().and_then(|f| f.network).unwrap();
        assert!(net.requests > 4 && net.failures == 0, "{net:?}");
    }

    /// HTTP 500s on one tile's range: that tile is unavailable (after the client's
    /// retries), never garbage, while the others load; once the server answers it, it
    /// loads. A slow server (nginx `limit_rate`) delays tiles, not frames: the render
    /// thread never waits on the network, and ancestors show meanwhile.
    #[test]
    fn server_errors_and_a_slow_server_delay_tiles_not_frames() {
        let dir = tempfile::tempdir().unwrap();
        let atlas = bake_source(dir.path(), "served", Generated::new(2048, 1024));
        let local = Atlas::open(&atlas).unwrap();
        let (bad, good) = (TileId::new(0, 0, 2, 1), TileId::new(0, 0, 3, 1));
        let e = local.entry(bad).unwrap();
        let range = format!("bytes={}-{}", e.offset, e.offset + u64::from(e.length) - 1);
        let rule = format!("location / {{ if ($http_range = \"{range}\") {{ return 500; }} }}");
        let mut server = Nginx::serve(dir.path(), &rule);
        let url = server.url(&name(&atlas));
        let remote = Atlas::open_with(&url, &RemoteOptions::without_disk_cache()).unwrap();
        assert_eq!(remote.read_tile(good).unwrap(), local.read_tile(good).unwrap());
        let err = remote.read_tile(bad).unwrap_err();
        assert!(matches!(err, AtlasError::Unavailable { .. }), "{err}");
        assert!(err.to_string().contains("500"), "{err}");
        server.stop();
        let mut server = Nginx::serve(dir.path(), "");
        let fixed = server.url(&name(&atlas));
        let remote = Atlas::open_with(&fixed, &RemoteOptions::without_disk_cache()).unwrap();
        assert_eq!(remote.read_tile(bad).unwrap(), local.read_tile(bad).unwrap());
        server.stop();

        // About 20 KiB a tile at 16 KiB/s per connection: each tile takes over a second.
        let slow = Nginx::serve(dir.path(), "limit_rate 16k;");
        let url = slow.url(&name(&atlas));
        let t0 = Instant::now();
        let r = run_remote(
            std::path::Path::new(&url),
            CameraPath::preset("static").unwrap(),
            12,
            (320, 180),
            VtConfig::default(),
            false,
            RemoteOptions::without_disk_cache(),
        );
        let wall = t0.elapsed();
        let worst = r.frames.iter().map(|f| f.frame_ms).fold(0.0, f64::max);
        // A frame that waited on even one tile would take over a second.
        assert!(worst < 1000.0, "a frame waited on the network: {worst:.0} ms");
        let last = r.frames.last().unwrap();
        assert!(last.resident_fraction < 1.0, "tiles cannot all have arrived yet: {:?}", last.stream);
        assert!(last.network.unwrap().in_flight > 0, "requests still in flight: {:?}", last.network);
        eprintln!("slow server: 12 frames in {wall:?}, worst frame {worst:.0} ms");
    }

    /// Truncated bodies (every third connection cut mid-answer) and a body damaged in
    /// transit (one flipped bit): every tile read is either the right bytes or
    /// unavailable for now (retried by the streamer), never wrong bytes, and a second
    /// try gets the right ones. A damaged body is never put in the disk cache.
    #[test]
    fn truncated_and_damaged_bodies_are_retried_never_shown() {
        use tessera_tests::{DelayProxy, Fault};
        let dir = tempfile::tempdir().unwrap();
        let atlas = bake_source(dir.path(), "served", Generated::new(2048, 1024));
        let local = Atlas::open(&atlas).unwrap();
        let server = Nginx::serve(dir.path(), "");
        let tiles: Vec<TileId> = local.layers()[0].layout.tiles(0).collect();
        for fault in [Fault::Cut { n: 3, bytes: 30_000 }, Fault::Flip { at: 120_000 }] {
            let proxy = DelayProxy::with_fault(server.port(), Duration::ZERO, fault);
            let url = format!("http://127.0.0.1:{}/{}", proxy.port(), name(&atlas));
            let cache = tempfile::tempdir().unwrap();
            let remote = Atlas::open_with(&url, &RemoteOptions::with_disk_cache(cache.path(), 64)).unwrap();
            let mut unavailable = 0;
            for &t in &tiles {
                let want = local.read_tile(t).unwrap();
                let mut got = remote.read_tile(t);
                for _ in 0..4 {
                    match &got {
                        Err(AtlasError::Unavailable { .. }) => {
                            unavailable += 1;
                            got = remote.read_tile(t);
                        }
                        _ => break,
                    }
                }
                assert_eq!(got.unwrap_or_else(|e| panic!("{fault:?}: {t}: {e}")), want, "{fault:?}: {t}");
            }
            let net = remote.network_stats().unwrap();
            assert_eq!(net.disk_cache.unwrap().rejected, 0, "{fault:?}: nothing damaged was cached");
            eprintln!("{fault:?}: {} tiles, {unavailable} unavailable at first, {net:?}", tiles.len());
            match fault {
                Fault::Flip { .. } => assert!(unavailable >= 1, "the flipped bit was caught in a tile body"),
                // Each cut connection was replaced by a new one (the client retried).
                _ => assert!(proxy.connections() >= 2, "no connection was cut: {}", proxy.connections()),
            }
        }
    }
}

/// Cloud Optimized GeoTIFFs streamed without a bake, through the whole renderer on
/// lavapipe (issue 44 item 4): GDAL writes a Deflate and a JPEG COG of a 1000×700 crop of
/// the Blue Marble, nginx serves them on loopback with range requests, and `capture`
/// streams each by URL until fully resident and compares it with the same file baked.
///
/// Needs GDAL's tools (`apt-get install gdal-bin`), nginx and the Blue Marble
/// (`assets/fetch-data.sh`), which `scripts/test` installs and fetches; without them these
/// tests fail saying so.
mod cog_stream {
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
            Command::new("gdal_translate").arg("-q").args(args).arg(from).arg(to).output().unwrap_or_else(
                |e| {
                    panic!("cannot run gdal_translate ({e}): these tests need GDAL: apt-get install gdal-bin")
                },
            );
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
            terrain: None,
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

    /// Streams the COG of `compress` over nginx: fully resident against its own texels
    /// (at least 55 dB, the streaming path: borders, overviews, built mips) at 480×270,
    /// then against the bake of the same file at 1080p (at least `min_baked`, where mip 0
    /// dominates a 1000-texel-wide image). Returns the first run and the COG's length.
    fn stream_against_own_and_bake(compress: &str, min_baked: f64) -> (CaptureReport, u64) {
        let dir = tempfile::tempdir().unwrap();
        let (cog, baked) = cog_and_bake(dir.path(), compress);
        assert_eq!(
            Atlas::open(&baked).unwrap().layers()[0].layout,
            Atlas::open(&cog).unwrap().layers()[0].layout
        );
        let name = compress.to_ascii_lowercase();
        let server = Nginx::serve(dir.path(), "");
        let url = server.url(&format!("{name}.tif"));
        let small = (480, 270);
        let own = run(&url, None, 12, small);
        let db = converged(&format!("cog-{name}-own"), &own, small, 55.0);
        eprintln!("{compress} COG against its own reference: {db:.2} dB");
        let large = (1920, 1080);
        let r = run(&url, Some(&baked), 6, large);
        let db = converged(&format!("cog-{name}-baked"), &r, large, min_baked);
        eprintln!("{compress} COG against its bake at 1080p: {db:.2} dB");
        (own, std::fs::metadata(&cog).unwrap().len())
    }

    /// Mip 0 is tile for tile the bake's (engine/core/tests/gdal_tiff.rs, module cog); the
    /// overviews are GDAL's, averaged in sRGB values (the bake filters in linear light).
    #[test]
    fn a_deflate_cog_streams_over_http_like_its_bake() {
        let (own, file_bytes) = stream_against_own_and_bake("DEFLATE", 55.0);
        let net = own.frames.last().and_then(|f| f.network).expect("network figures of a URL");
        // 4×3 + 2×2 + 1 internal tiles of 256² and the directories: each read once.
        assert!(net.requests >= 3 && net.requests <= 30 && net.failures == 0, "{net:?}");
        // Each internal tile read counts as a blob: the 12 of mip 0 and 4 of mip 1 at least.
        assert!(net.blobs >= 16 && net.blob_bytes <= net.bytes, "{net:?}");
        eprintln!("requests: {}, {} bytes (the file is {file_bytes} bytes)", net.requests, net.bytes);
    }

    /// Against the JPEG file baked: its overviews are JPEG-compressed apart from the image
    /// (measured 46.9 dB at 1080p, quality 75).
    #[test]
    fn a_jpeg_cog_streams_over_http_within_its_codec() {
        stream_against_own_and_bake("JPEG", 45.0);
    }
}
