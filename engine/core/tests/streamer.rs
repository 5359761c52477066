//! The streaming loop without a GPU: the `Streamer` driven by scripted feedback (a
//! camera cut, an oversubscribed pool settling through the mip bias, corrupted and
//! malformed tiles, prefetch before a cut, stride and budget changes), with real
//! loader threads delivering synthetic tiles. The lavapipe tests check the same
//! scenarios through the renderer; these run in milliseconds.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tessera_core::format::atlas::{Atlas, ColorSpace};
use tessera_core::format::codec::TargetFormat;
use tessera_core::stream::feedback::{FeedbackLayout, compact};
use tessera_core::stream::level_one::LevelOneSource;
use tessera_core::stream::loader::LoadError;
use tessera_core::stream::page_table::decode_entry;
use tessera_core::stream::pool_layout::{PoolLayout, Trilinear};
use tessera_core::stream::produce::{ProduceJob, ProductionConfig};
use tessera_core::stream::staging::{StagingLayout, StagingRing};
use tessera_core::stream::streamer::{
    FrameInput, FramePlan, SparseFeedback, Streamer, StreamerConfig, StreamerError,
};
use tessera_core::{HostCache, TextureLayout, TileId};

/// A 1024² texture of 128² tiles: mips of 8×8, 4×4, 2×2 and 1×1 tiles.
fn texture() -> TextureLayout {
    TextureLayout::new(1024, 1024, 128, 4).unwrap()
}

fn pool(layouts: Vec<TextureLayout>, slots: (u32, u32), targets: Vec<TargetFormat>) -> PoolLayout {
    PoolLayout::from_parts(targets, layouts, slots, false, Trilinear::Hardware)
}

/// A loader of synthetic tiles of `len` bytes; `bad` tiles fail and `short` tiles come
/// back one byte short.
type Load = Arc<dyn Fn(TileId) -> Result<Arc<[u8]>, LoadError> + Send + Sync>;

fn loader(len: usize, bad: Vec<TileId>, short: Vec<TileId>) -> Load {
    Arc::new(move |t: TileId| {
        if bad.contains(&t) {
            return Err(LoadError::failed(t, "CRC mismatch"));
        }
        let n = if short.contains(&t) { len - 1 } else { len };
        Ok(Arc::from(vec![t.mip; n]))
    })
}

/// A streamer and the frame counter of the application driving it.
struct Sim {
    streamer: Streamer,
    layout: FeedbackLayout,
    frame: u64,
    /// The upload time the next step reports for the last frame.
    upload_ms: f64,
    /// The GPU time of an earlier frame's uploads the next step reports.
    upload_gpu: Option<(f64, usize)>,
}

impl Sim {
    fn new(pool: &PoolLayout, config: StreamerConfig, bad: Vec<TileId>, short: Vec<TileId>) -> Self {
        let load = loader(pool.tile_bytes(), bad, short);
        let streamer = Streamer::with_loader(
            pool,
            config,
            Arc::new(HostCache::new(64 << 20)),
            Arc::new(move |t| load(t)),
        )
        .unwrap();
        let layout = FeedbackLayout::new(&pool.owners);
        let mut sim = Self { streamer, layout, frame: 0, upload_ms: 0.0, upload_gpu: None };
        sim.step(None, None);
        sim
    }

    /// A streamer of a produced atlas of `layers` layers of `layout` (not stacked),
    /// whose first frame has not run yet; feedback of one readback (stride 1), no
    /// automatic bias and no neighbour prefetch, so that each step's view is the needed set.
    fn produced(
        layers: usize,
        layout: TextureLayout,
        slots: (u32, u32),
        production: ProductionConfig,
    ) -> Self {
        let config = StreamerConfig {
            feedback_stride: 1,
            auto_mip_bias: false,
            prefetch_neighbours: false,
            production,
            ..Default::default()
        };
        Self::produced_with(layers, layout, slots, config)
    }

    /// [`Sim::produced`] with settings of the caller's.
    fn produced_with(
        layers: usize,
        layout: TextureLayout,
        slots: (u32, u32),
        config: StreamerConfig,
    ) -> Self {
        let names: Vec<(String, ColorSpace)> =
            (0..layers).map(|i| (format!("l{i}"), ColorSpace::Srgb)).collect();
        let atlas = Arc::new(Atlas::produced("test", &names, layout, false).unwrap());
        let p = pool(vec![layout; layers], slots, vec![TargetFormat::Rgba8]);
        let streamer = Streamer::new(atlas, &p, config).unwrap();
        let layout = FeedbackLayout::new(&p.owners);
        Self { streamer, layout, frame: 0, upload_ms: 0.0, upload_gpu: None }
    }

    /// One frame whose read-back feedback (of the previous frame) asked for `view`.
    fn step(&mut self, view: Option<&[TileId]>, frame_ms: Option<f64>) -> FramePlan {
        self.step_predicting(view, None, frame_ms)
    }

    /// [`Sim::step`] whose last frame spent `upload_ms` of its time uploading.
    fn step_timed(&mut self, view: &[TileId], frame_ms: f64, upload_ms: f64) -> FramePlan {
        self.upload_ms = upload_ms;
        let plan = self.step(Some(view), Some(frame_ms));
        self.upload_ms = 0.0;
        plan
    }

    /// [`Sim::step`] with the feedback of a predicted view too.
    fn step_predicting(
        &mut self,
        view: Option<&[TileId]>,
        predicted: Option<&[TileId]>,
        frame_ms: Option<f64>,
    ) -> FramePlan {
        let sparse = |tiles: &[TileId]| {
            let mut words = vec![0u32; self.layout.words()];
            for &t in tiles {
                self.layout.mark_tile(&mut words, t);
            }
            SparseFeedback { frame: self.frame.saturating_sub(1), pairs: compact(&words) }
        };
        let feedback = view.map(sparse);
        let predicted = predicted.map(sparse);
        let plan = self.streamer.frame(FrameInput {
            frame: self.frame,
            feedback: feedback.as_ref(),
            last_frame_ms: frame_ms,
            last_upload_ms: self.upload_ms,
            upload_gpu: self.upload_gpu.take(),
            predicted: predicted.as_ref(),
        });
        self.frame += 1;
        // Loader threads deliver between frames.
        std::thread::sleep(Duration::from_millis(1));
        plan
    }

    /// Runs frames of `view` until it is fully resident (at most `max` frames); returns
    /// the frames it took.
    fn settle(&mut self, view: &[TileId], max: u32) -> u32 {
        for i in 1..=max {
            self.step(Some(view), None);
            if self.streamer.fully_resident() {
                return i;
            }
        }
        panic!("not fully resident after {max} frames: {:?}", self.streamer);
    }

    /// Reports a frame's `n` uploads to the next step as 2 µs a tile of CPU and 3 µs
    /// of GPU, for the burst slice's price.
    fn report_uploads(&mut self, n: usize) {
        self.upload_ms = 0.002 * n as f64;
        self.upload_gpu = (n > 0).then_some((0.003 * n as f64, n));
    }

    /// Runs frames of `view` (their uploads reported) until it is fully resident, then
    /// flushes the pool: the view's tiles all wait in the host cache, as after `tessera
    /// bench --flush-every`, and arrive in one burst.
    fn resident_then_flushed(&mut self, view: &[TileId]) {
        for frame in 0.. {
            let n = self.step(Some(view), None).uploads.len();
            self.report_uploads(n);
            if frame > 2 && self.streamer.fully_resident() {
                break;
            }
            assert!(frame < 300, "the view never became resident before the flush");
        }
        self.streamer.flush_vram();
    }
}

/// The tiles of a `w × h` block at `(x, y)` of `mip`.
fn block(mip: u8, x: u32, y: u32, w: u32, h: u32) -> Vec<TileId> {
    (y..y + h).flat_map(|ty| (x..x + w).map(move |tx| TileId::new(0, mip, tx, ty))).collect()
}

/// Every page-table entry points at the tile itself when resident, else at its nearest
/// resident ancestor (brute force over the whole table).
fn assert_page_table_consistent(s: &Streamer) {
    let res = s.residency();
    let layout = s.layout();
    let coarsest = layout.coarsest_mip(0).unwrap();
    for g in 0..layout.total_tiles() {
        let tile = layout.tile_at(g).unwrap();
        let mut cur = Some(tile);
        let want = loop {
            match cur {
                Some(c) if res.is_resident(c) => break Some((res.slot_of(c).unwrap(), c.mip)),
                Some(c) => cur = c.parent(coarsest),
                None => break None,
            }
        };
        assert_eq!(decode_entry(res.page_table().lookup(tile)), want, "entry of {tile}");
    }
}

#[test]
fn the_coarsest_tile_is_uploaded_by_the_first_frame() {
    let p = pool(vec![texture()], (8, 8), vec![TargetFormat::Rgba8]);
    let sim = Sim::new(&p, StreamerConfig::default(), vec![], vec![]);
    assert!(sim.streamer.residency().is_resident(TileId::new(0, 3, 0, 0)));
    assert!(!sim.streamer.fully_resident(), "no feedback yet: nothing is known to be visible");
    assert_eq!(sim.streamer.resident_fraction(), None, "no feedback yet: no fraction either");
}

#[test]
fn a_camera_cut_streams_the_new_view_and_then_uploads_nothing() {
    let p = pool(vec![texture()], (8, 8), vec![TargetFormat::Rgba8]);
    let mut sim =
        Sim::new(&p, StreamerConfig { prefetch_neighbours: false, ..Default::default() }, vec![], vec![]);
    let a = block(0, 0, 0, 3, 3);
    let b = block(0, 5, 5, 3, 3);
    sim.settle(&a, 200);
    let frames = sim.settle(&b, 200);
    assert!(frames < 200);
    // Steady state: the same view uploads and requests nothing more.
    for _ in 0..10 {
        let plan = sim.step(Some(&b), None);
        assert_eq!((plan.stats.uploads, plan.stats.requests), (0, 0), "{:?}", plan.stats);
        assert_eq!(plan.stats.resident_fraction, 1.0);
    }
    // The first view is still there (room in the pool): a cut back costs nothing.
    assert!(a.iter().all(|&t| sim.streamer.residency().is_resident(t)));
    assert_page_table_consistent(&sim.streamer);
}

#[test]
fn an_oversubscribed_pool_settles_through_the_mip_bias() {
    // 20 slots: the view at mip 0 needs 64 + 21 tiles and at mip 1 needs 21; at mip 2, 5 fit.
    let p = pool(vec![texture()], (4, 5), vec![TargetFormat::Rgba8]);
    let mut sim =
        Sim::new(&p, StreamerConfig { prefetch_neighbours: false, ..Default::default() }, vec![], vec![]);
    let view_at = |bias: f32| {
        let mip = (bias.round() as u8).min(3);
        let n = 8 >> mip;
        block(mip, 0, 0, n, n)
    };
    let mut history = Vec::new();
    for _ in 0..300 {
        let bias = sim.streamer.mip_bias();
        let plan = sim.step(Some(&view_at(bias)), None);
        history.push((plan.stats.auto_mip_bias, plan.stats.uploads));
    }
    let tail = &history[history.len() - 40..];
    let settled = tail[0].0;
    assert!(settled >= 1.5, "the bias rose to a level whose view fits: {settled}");
    assert!(tail.iter().all(|&(b, _)| b == settled), "the bias oscillates: {tail:?}");
    assert!(tail.iter().all(|&(_, u)| u == 0), "uploads in steady state: {tail:?}");
    assert!(sim.streamer.fully_resident());
    assert_page_table_consistent(&sim.streamer);
}

#[test]
fn a_corrupted_tile_is_reported_once_and_shows_its_ancestor() {
    let bad = TileId::new(0, 0, 1, 1);
    let p = pool(vec![texture()], (8, 8), vec![TargetFormat::Rgba8]);
    let mut sim = Sim::new(&p, StreamerConfig::default(), vec![bad], vec![]);
    let view = block(0, 0, 0, 2, 2);
    for _ in 0..40 {
        sim.step(Some(&view), None);
    }
    let res = sim.streamer.residency();
    assert!(!res.is_resident(bad));
    assert_eq!(res.failed_count(), 1);
    assert!(view.iter().filter(|&&t| t != bad).all(|&t| res.is_resident(t)));
    // Not requested again, and the loop keeps running.
    let plan = sim.step(Some(&view), None);
    assert_eq!(plan.stats.requests, 0);
    assert_eq!(sim.streamer.residency().counters().failed, 1);
    let parent = bad.parent(3).unwrap();
    let entry = decode_entry(sim.streamer.residency().page_table().lookup(bad)).unwrap();
    assert_eq!(entry.1, parent.mip, "the failed tile shows its parent");
    assert!(sim.streamer.resident_fraction().is_some_and(|f| f < 1.0));
}

/// A remote atlas whose server is down for a while: the tiles it cannot deliver are
/// unavailable for now (not failed), show their ancestors, are asked for again with a
/// growing wait, and arrive once the server is back; nothing is reported as failed.
#[test]
fn unavailable_tiles_are_retried_with_backoff_and_arrive_when_the_server_is_back() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let p = pool(vec![texture()], (8, 8), vec![TargetFormat::Rgba8]);
    let len = p.tile_bytes();
    let down = Arc::new(AtomicBool::new(true));
    let attempts = Arc::new(AtomicUsize::new(0));
    let (d, a) = (down.clone(), attempts.clone());
    let streamer = Streamer::with_loader(
        &p,
        StreamerConfig { prefetch_neighbours: false, ..Default::default() },
        Arc::new(HostCache::new(64 << 20)),
        Arc::new(move |t: TileId| {
            if t.mip < 3 && d.load(Ordering::SeqCst) {
                a.fetch_add(1, Ordering::SeqCst);
                return Err(LoadError::Unavailable { tile: t, reason: "connection refused".into() });
            }
            Ok(Arc::from(vec![t.mip; len]))
        }),
    )
    .unwrap();
    let layout = FeedbackLayout::new(&p.owners);
    let mut sim = Sim { streamer, layout, frame: 0, upload_ms: 0.0, upload_gpu: None };
    sim.step(None, None);
    let view = block(0, 0, 0, 2, 2);
    let mut unavailable = 0;
    for _ in 0..120 {
        let plan = sim.step(Some(&view), None);
        unavailable = unavailable.max(plan.stats.tiles_unavailable);
        assert!(plan.stats.resident_fraction < 1.0);
    }
    let res = sim.streamer.residency();
    assert!(view.iter().all(|&t| !res.is_resident(t)), "nothing fine arrives while the server is down");
    assert!(res.is_resident(TileId::new(0, 3, 0, 0)), "the coarsest tile shows meanwhile");
    assert_eq!(unavailable, 4 + 1 + 1, "the view and its two ancestors wait for a retry");
    // 8, 16, 32, 64 frames of waiting: at most 5 attempts per tile in 120 frames, not 120.
    let tries = attempts.load(Ordering::SeqCst);
    assert!((6..=6 * 5).contains(&tries), "{tries} attempts for 6 tiles in 120 frames");
    down.store(false, Ordering::SeqCst);
    let frames = sim.settle(&view, 400);
    assert!(frames <= 240 + 20, "back within the longest wait: {frames} frames");
    let plan = sim.step(Some(&view), None);
    assert_eq!(plan.stats.tiles_unavailable, 0);
    assert_eq!(sim.streamer.residency().failed_count(), 0, "unavailable is not failed");
    assert_page_table_consistent(&sim.streamer);
}

#[test]
fn a_tile_of_the_wrong_length_fails_instead_of_half_filling_a_stack() {
    // Two stacked pools: a tile one byte short would leave the second pool unwritten.
    let short = TileId::new(0, 0, 0, 0);
    let mut p = pool(vec![texture()], (8, 8), vec![TargetFormat::Rgba8, TargetFormat::Rgba8]);
    p.stacked = true;
    let mut sim = Sim::new(&p, StreamerConfig::default(), vec![], vec![short]);
    let view = block(0, 0, 0, 2, 1);
    let mut uploaded = HashSet::new();
    for _ in 0..40 {
        let plan = sim.step(Some(&view), None);
        for u in &plan.uploads {
            assert_eq!(u.bytes.len(), p.tile_bytes(), "{} uploaded with a wrong length", u.tile);
            uploaded.insert(u.tile);
        }
    }
    assert!(!uploaded.contains(&short));
    assert!(!sim.streamer.residency().is_resident(short));
    assert!(sim.streamer.residency().is_resident(TileId::new(0, 0, 1, 0)));
    assert_eq!(sim.streamer.residency().failed_count(), 1);
}

#[test]
fn a_prefetched_region_is_resident_when_the_cut_arrives() {
    let p = pool(vec![texture()], (8, 8), vec![TargetFormat::Rgba8]);
    let mut sim =
        Sim::new(&p, StreamerConfig { prefetch_neighbours: false, ..Default::default() }, vec![], vec![]);
    let here = block(0, 0, 0, 2, 2);
    sim.settle(&here, 200);
    // The destination: texels [768, 768, 256, 256] at mip 0 = tiles (6..8, 6..8).
    let requested = sim.streamer.prefetch_region(0, [768, 768, 256, 256], 0);
    assert!(requested >= 4, "{requested}");
    for _ in 0..30 {
        sim.step(Some(&here), None);
    }
    let there = block(0, 6, 6, 2, 2);
    let plan = sim.step(Some(&there), None);
    assert_eq!(plan.stats.requests, 0, "everything was prefetched");
    assert_eq!(plan.stats.resident_fraction, 1.0);
    assert!(plan.stats.became_fully_resident || sim.streamer.fully_resident());
}

#[test]
fn changing_the_stride_moves_the_bias_settle_window() {
    let p = pool(vec![texture()], (8, 8), vec![TargetFormat::Rgba8]);
    let mut sim = Sim::new(&p, StreamerConfig::default(), vec![], vec![]);
    assert_eq!(sim.streamer.bias().config().settle_frames, 2 * 2 + 2);
    sim.streamer.set_feedback_stride(8).unwrap();
    assert_eq!(sim.streamer.bias().config().settle_frames, 8 * 8 + 2);
    assert_eq!(sim.streamer.shader_params(0).feedback_mask, 7);
    // 64 frames cycle through every pixel of an 8×8 block once.
    let phases: HashSet<u32> = (0..64).map(|f| sim.streamer.shader_params(f).feedback_phase).collect();
    assert_eq!(phases.len(), 64);
    assert!(matches!(sim.streamer.set_feedback_stride(3), Err(StreamerError::Config(_))));
    assert_eq!(sim.streamer.config().feedback_stride, 8, "a refused stride changes nothing");
}

#[test]
fn the_upload_budget_setting_caps_the_adaptive_budget() {
    let p = pool(vec![texture()], (8, 8), vec![TargetFormat::Rgba8]);
    let config =
        StreamerConfig { target_frame_ms: Some(16.6), prefetch_neighbours: false, ..Default::default() };
    let mut sim = Sim::new(&p, config, vec![], vec![]);
    sim.streamer.set_upload_budget(4);
    assert!(sim.streamer.upload_budget() <= 4);
    let view = block(0, 0, 0, 8, 4);
    for _ in 0..60 {
        // Fast frames: the adaptive budget wants to grow, but not past the setting.
        let plan = sim.step(Some(&view), Some(2.0));
        assert!(plan.uploads.len() <= 4 && plan.stats.upload_budget <= 4, "{:?}", plan.stats);
    }
    sim.streamer.set_upload_budget(1000);
    assert!(sim.streamer.upload_budget() <= 1000);
}

/// A burst (a view of 256 tiles and their ancestors back from the host cache after the
/// pool was flushed) is spread over frames
/// once uploads are priced: CPU 2 µs and GPU 3 µs a tile, each side held to a slice of
/// 0.1 ms, cap a frame at about 33 tiles (the floor, 32, is close), the coarse ones
/// first, and the view still gets there.
#[test]
fn a_burst_is_sliced_at_the_measured_price_of_a_tile() {
    let big = TextureLayout::new(4096, 4096, 128, 4).unwrap();
    let p = pool(vec![big], (32, 32), vec![TargetFormat::Rgba8]);
    let config = StreamerConfig {
        upload_slice_ms: Some(0.1),
        max_uploads_per_frame: 1024,
        prefetch_neighbours: false,
        ..Default::default()
    };
    let mut sim = Sim::new(&p, config, vec![], vec![]);
    let view = block(0, 16, 16, 16, 16);
    sim.resident_then_flushed(&view);
    let (mut frames, mut uploads) = (0, Vec::new());
    let mut sliced = 0;
    while frames < 300 {
        let plan = sim.step(Some(&view), None);
        if frames > 2 && sim.streamer.fully_resident() {
            break;
        }
        let n = plan.uploads.len();
        // A slice holds the coarsest missing tiles first.
        assert!(plan.uploads.windows(2).all(|w| w[0].tile.mip >= w[1].tile.mip), "coarse first");
        // Priced once frames of different sizes were seen: about 33 tiles in 0.1 ms
        // at the GPU's 3 µs, and never more uploads than the cap.
        if let Some(cap) = plan.stats.upload_slice_tiles {
            assert!((16..=80).contains(&cap), "frame {frames}: cap {cap}");
            assert!(n <= cap, "frame {frames}: {n} uploads over the {cap} a 0.1 ms slice holds");
            sliced += usize::from(n == cap);
        }
        sim.report_uploads(n);
        uploads.push(n);
        frames += 1;
    }
    assert!(sim.streamer.fully_resident(), "the view never became resident: {uploads:?}");
    assert!(uploads.iter().sum::<usize>() >= 256, "{uploads:?}");
    assert!(sliced >= 2, "the burst was not sliced: {uploads:?}");
    assert_page_table_consistent(&sim.streamer);
}

/// While a slice spreads a burst over frames, its tiles keep the staging records the
/// loader threads wrote them into until their turn comes, so the render thread only
/// records copies. Released after two frames of waiting, as without a slice, most of a
/// sliced burst would be copied from its bytes on the render thread instead (about
/// 15 µs more a tile on an H100), and the slice's price would rise with it.
#[test]
fn a_sliced_burst_keeps_its_staging_until_each_tile_is_uploaded() {
    let big = TextureLayout::new(2048, 2048, 64, 4).unwrap();
    let p = pool(vec![big], (32, 32), vec![TargetFormat::Rgba8]);
    let config = StreamerConfig {
        upload_slice_ms: Some(0.1),
        max_uploads_per_frame: 1024,
        prefetch_neighbours: false,
        ..Default::default()
    };
    // The renderer's mapped staging memory: room for the view twice over (the first
    // load and the burst), never recycled in this test.
    let ring = StagingRing::new(StagingLayout::new(&[(p.tile_bytes() as u32, 1)], 1), 4, 4 << 20);
    let mut memory: Vec<Box<[u8]>> =
        (0..ring.chunk_count()).map(|_| vec![0u8; ring.chunk_bytes() as usize].into_boxed_slice()).collect();
    for (c, m) in memory.iter_mut().enumerate() {
        // SAFETY: `memory` outlives every writer: the ring is closed and the streamer
        // (with its loader threads) dropped before it, at the end of the test.
        assert!(unsafe { ring.attach(c, m.as_mut_ptr()) });
    }
    let mut sim = Sim::new(&p, config, vec![], vec![]);
    sim.streamer.set_staging(Some(Arc::clone(&ring)));
    let view = block(0, 8, 8, 16, 16);
    // Priced as 2 µs a tile of CPU and 3 µs of GPU: a 0.1 ms slice holds about 33 tiles.
    sim.resident_then_flushed(&view);
    let (mut frames, mut uploads, mut staged, mut sliced) = (0, 0, 0, 0);
    while !(frames > 2 && sim.streamer.fully_resident()) {
        assert!(frames < 300, "the view never became resident after the flush");
        let plan = sim.step(Some(&view), None);
        let n = plan.uploads.len();
        sliced += usize::from(plan.stats.upload_slice_tiles == Some(n));
        uploads += n;
        staged += plan.uploads.iter().filter(|u| u.staged.is_some()).count();
        sim.report_uploads(n);
        frames += 1;
    }
    assert!(sliced >= 4 && uploads >= 256, "not a sliced burst: {uploads} uploads in {frames} frames");
    assert!(
        staged * 10 >= uploads * 9,
        "only {staged} of {uploads} uploads in {frames} frames kept their staging ({:?})",
        ring.counters()
    );
    ring.close();
    drop(sim);
    drop(memory);
}

/// A loop paced by vsync: every frame takes the display's 16.7 ms, so a target of 16.6
/// ms sees no room and holds the budget at its floor; switched to the fixed budget, the
/// frame takes the whole setting again, and back on, it adapts again.
#[test]
fn the_target_frame_time_can_be_turned_off_and_on() {
    let p = pool(vec![texture()], (8, 8), vec![TargetFormat::Rgba8]);
    let config = StreamerConfig {
        target_frame_ms: Some(16.6),
        max_uploads_per_frame: 64,
        prefetch_neighbours: false,
        ..Default::default()
    };
    let mut sim = Sim::new(&p, config, vec![], vec![]);
    let view = block(0, 0, 0, 8, 4);
    for _ in 0..10 {
        // Uploads priced at 0.1 ms for the whole frame: 15.6 − (16.7 − 0.1) leaves no room.
        sim.step_timed(&view, 16.7, 0.1);
    }
    assert!(
        sim.streamer.upload_budget() < 64,
        "paced frames leave no room: {}",
        sim.streamer.upload_budget()
    );
    sim.streamer.set_target_frame_ms(None).unwrap();
    assert_eq!(sim.streamer.upload_budget(), 64);
    assert_eq!(sim.streamer.config().target_frame_ms, None);
    let plan = sim.step(Some(&view), Some(16.7));
    assert_eq!(plan.stats.upload_budget, 64, "{:?}", plan.stats);
    assert!(sim.streamer.set_target_frame_ms(Some(-1.0)).is_err(), "a negative target is refused");
    assert_eq!(sim.streamer.config().target_frame_ms, None, "a refused target changes nothing");
    sim.streamer.set_target_frame_ms(Some(8.0)).unwrap();
    assert_eq!(sim.streamer.config().target_frame_ms, Some(8.0));
}

#[test]
fn a_loader_thread_that_cannot_start_is_an_error_not_a_panic() {
    let p = pool(vec![texture()], (8, 8), vec![TargetFormat::Rgba8]);
    // A petabyte of stack per thread: the operating system refuses the thread.
    let config =
        StreamerConfig { loader_threads: 1, loader_stack_bytes: Some(1 << 50), ..Default::default() };
    let load = loader(p.tile_bytes(), vec![], vec![]);
    let r = Streamer::with_loader(&p, config, Arc::new(HostCache::new(0)), Arc::new(move |t| load(t)));
    assert!(matches!(r, Err(StreamerError::LoaderThreads(_))), "{r:?}");
}

#[test]
fn an_unreadable_coarsest_tile_is_an_error() {
    let p = pool(vec![texture()], (8, 8), vec![TargetFormat::Rgba8]);
    let load = loader(p.tile_bytes(), vec![TileId::new(0, 3, 0, 0)], vec![]);
    let r = Streamer::with_loader(
        &p,
        StreamerConfig::default(),
        Arc::new(HostCache::new(0)),
        Arc::new(move |t| load(t)),
    );
    assert!(matches!(r, Err(StreamerError::CoarsestTile { .. })), "{r:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever sequence of views arrives, the page table always points every tile at
    /// itself or its nearest resident ancestor, the pool never holds more tiles than
    /// slots, and every upload has the slot's length.
    #[test]
    fn random_views_keep_the_page_table_consistent(
        views in prop::collection::vec((0u8..4, 0u32..8, 0u32..8, 1u32..4), 1..6),
        slots in 3u32..12,
    ) {
        let p = pool(vec![texture()], (slots, 2), vec![TargetFormat::Rgba8]);
        let mut sim = Sim::new(&p, StreamerConfig::default(), vec![], vec![]);
        for (mip, x, y, n) in views {
            let side = 8u32 >> mip;
            let (x, y) = (x % side, y % side);
            let view = block(mip, x, y, n.min(side - x), n.min(side - y));
            for _ in 0..6 {
                let plan = sim.step(Some(&view), None);
                prop_assert!(plan.uploads.iter().all(|u| u.bytes.len() == p.tile_bytes()));
                prop_assert!(sim.streamer.residency().resident_count() <= (slots * 2) as usize);
            }
            assert_page_table_consistent(&sim.streamer);
        }
    }
}

/// A predicted view (`FrameInput::predicted`, the next stretch of a known camera path)
/// streams before the camera gets there: once the camera arrives, its first feedback
/// finds every tile resident, where without the prediction it misses them.
#[test]
fn a_predicted_view_is_resident_before_the_camera_gets_there() {
    let p = pool(vec![texture()], (8, 8), vec![TargetFormat::Rgba8]);
    let config = StreamerConfig { prefetch_neighbours: false, ..Default::default() };
    let (here, there) = (block(0, 0, 0, 2, 2), block(0, 6, 6, 2, 2));
    let mut misses = Vec::new();
    for predict in [false, true] {
        let mut sim = Sim::new(&p, config.clone(), vec![], vec![]);
        sim.settle(&here, 50);
        let mut requested = 0;
        for _ in 0..20 {
            requested +=
                sim.step_predicting(Some(&here), predict.then_some(&there[..]), None).stats.predicted;
        }
        assert_eq!(requested > 0, predict);
        misses.push(sim.step(Some(&there), None).stats.misses);
        assert!(there.iter().all(|&t| sim.streamer.residency().is_resident(t)) == predict);
    }
    assert!(misses[0] > 0 && misses[1] == 0, "misses without and with the prediction: {misses:?}");
}

/// A prediction never takes a slot the current view needs: with a pool that holds the
/// view and one tile more, the view stays resident however long the prediction asks.
#[test]
fn a_prediction_never_evicts_what_the_view_needs() {
    // 7 slots: the view (4 tiles of mip 0 and their 3 ancestors), nothing to spare.
    let p = pool(vec![texture()], (7, 1), vec![TargetFormat::Rgba8]);
    let config = StreamerConfig { prefetch_neighbours: false, auto_mip_bias: false, ..Default::default() };
    let mut sim = Sim::new(&p, config, vec![], vec![]);
    let (here, there) = (block(0, 0, 0, 2, 2), block(0, 6, 6, 2, 2));
    sim.settle(&here, 50);
    for _ in 0..40 {
        sim.step_predicting(Some(&here), Some(&there), None);
        for &t in &here {
            assert!(sim.streamer.residency().is_resident(t), "{t} was evicted for a prediction");
        }
    }
    assert!(!there.iter().any(|&t| sim.streamer.residency().is_resident(t)));
    assert!(sim.streamer.fully_resident());
}

/// A prediction that went wrong (asked for a while, then no more) is dropped after the
/// prefetch lifetime: its loaded tiles are forgotten, nothing of it stays pending.
#[test]
fn a_prediction_that_went_wrong_is_dropped() {
    let p = pool(vec![texture()], (7, 1), vec![TargetFormat::Rgba8]);
    let staleness = tessera_core::stream::streamer::Staleness { request_frames: 8, prefetch_frames: 6 };
    let config =
        StreamerConfig { prefetch_neighbours: false, auto_mip_bias: false, staleness, ..Default::default() };
    let mut sim = Sim::new(&p, config, vec![], vec![]);
    let (here, there) = (block(0, 0, 0, 2, 2), block(0, 6, 6, 2, 2));
    sim.settle(&here, 50);
    for _ in 0..5 {
        sim.step_predicting(Some(&here), Some(&there), None);
    }
    assert!(sim.streamer.residency().prefetched_count() > 0, "the prediction is pending (no free slot)");
    for _ in 0..8 {
        sim.step(Some(&here), None);
    }
    assert_eq!(sim.streamer.residency().prefetched_count(), 0, "the prediction was not dropped");
    assert!(here.iter().all(|&t| sim.streamer.residency().is_resident(t)));
}

// Runtime virtual textures (issue 43): a produced atlas' tiles are scheduled like loads
// and listed in `FramePlan::produce` for the renderer to draw.

/// Checks one plan of a produced atlas against the residency before it (`before`: tile
/// to slot): no uploads; new tiles were not resident and are now, in their slot; refreshed
/// tiles keep their slot and entry; every written slot has its level-1 job; new plus
/// refreshed within the budget. Not for the first plan, which draws the coarsest tiles
/// placed before it whatever the budget.
fn check_produce_plan(
    s: &Streamer,
    before: &std::collections::HashMap<TileId, tessera_core::stream::page_table::SlotCoord>,
    plan: &FramePlan,
) {
    assert!(plan.uploads.is_empty(), "a produced atlas uploads nothing");
    assert_eq!(plan.stats.uploads, 0);
    let res = s.residency();
    let new = plan.produce.iter().filter(|j| !j.refresh).count();
    assert_eq!((plan.stats.produced, plan.stats.refreshed), (new, plan.produce.len() - new));
    assert!(
        plan.produce.len() <= plan.stats.production_budget,
        "{} jobs over a budget of {}",
        plan.produce.len(),
        plan.stats.production_budget
    );
    let mut slots = HashSet::new();
    for j in &plan.produce {
        assert!(slots.insert(j.slot), "slot {:?} written twice", j.slot);
        assert_eq!(res.slot_of(j.tile), Some(j.slot), "{} is not resident in its slot", j.tile);
        if j.refresh {
            assert_eq!(before.get(&j.tile), Some(&j.slot), "{} refreshed out of place", j.tile);
        } else {
            assert!(!before.contains_key(&j.tile), "{} produced again while resident", j.tile);
        }
        assert!(plan.level_ones.iter().any(|l| l.slot == j.slot), "no level 1 for {}", j.tile);
    }
    if plan.stats.produced == 0 && plan.stats.evictions == 0 {
        assert!(
            plan.page_table_writes.is_empty() && plan.page_table_jobs.is_empty(),
            "refreshes change no entry"
        );
    }
    // The renderer draws these tiles, nothing enters the host cache.
    assert_eq!(s.host_cache().len(), 0);
}

fn resident(s: &Streamer) -> std::collections::HashMap<TileId, tessera_core::stream::page_table::SlotCoord> {
    s.residency().resident_tiles().collect()
}

/// One frame of `view`, checked.
fn produce_step(sim: &mut Sim, view: &[TileId]) -> FramePlan {
    let before = resident(&sim.streamer);
    let plan = sim.step(Some(view), None);
    check_produce_plan(&sim.streamer, &before, &plan);
    plan
}

#[test]
fn a_produced_atlas_produces_its_coarsest_tiles_in_the_first_plan() {
    let production = ProductionConfig { max_tiles_per_frame: 1, ..Default::default() };
    let mut sim = Sim::produced(3, texture(), (8, 8), production);
    assert!(sim.streamer.is_producing());
    assert_eq!(sim.streamer.loader().threads(), 0, "no loader thread for a produced atlas");
    let plan = sim.step(None, None);
    let roots: Vec<TileId> = (0..3).map(|l| TileId::new(l, 3, 0, 0)).collect();
    let mut got: Vec<TileId> = plan.produce.iter().map(|j| j.tile).collect();
    got.sort();
    assert_eq!(got, roots, "every layer's coarsest tile, over a budget of 1");
    assert!(plan.produce.iter().all(|j| !j.refresh));
    assert!(plan.uploads.is_empty());
    assert!(!plan.page_table_writes.is_empty(), "the roots' entries are written with them");
    assert_eq!(plan.level_ones.len(), 3);
    assert!(plan.level_ones.iter().all(|l| l.source == LevelOneSource::Downsample));
    assert!(roots.iter().all(|&t| sim.streamer.residency().is_pinned(t)));
    assert_page_table_consistent(&sim.streamer);
    // Nothing is produced twice; the next frames have nothing to do without feedback.
    for _ in 0..3 {
        assert!(sim.step(None, None).produce.is_empty());
    }
    let stats = sim.streamer.production_stats().unwrap();
    assert_eq!((stats.produced, stats.refreshed, stats.budget), (3, 0, 1));
    assert_eq!(sim.streamer.stats(0).disk.tiles, 0);
}

#[test]
fn production_stays_within_the_budget_coarse_first_and_never_twice() {
    let production = ProductionConfig { max_tiles_per_frame: 3, ..Default::default() };
    let mut sim = Sim::produced(1, texture(), (8, 8), production);
    sim.step(None, None);
    let view = block(0, 2, 2, 4, 4);
    let mut order: Vec<TileId> = Vec::new();
    let mut frames = 0;
    while !sim.streamer.fully_resident() {
        let plan = produce_step(&mut sim, &view);
        assert!(plan.produce.len() <= 3 && plan.stats.production_budget == 3);
        // A tile's parent is resident before it is drawn (coarse first).
        for j in &plan.produce {
            if let Some(p) = j.tile.parent(3) {
                assert!(sim.streamer.residency().is_resident(p));
            }
        }
        order.extend(plan.produce.iter().map(|j| j.tile));
        frames += 1;
        assert!(frames < 50, "not fully resident");
    }
    assert!(order.windows(2).all(|w| w[0].mip >= w[1].mip), "coarse first: {order:?}");
    // 16 mip-0 tiles (2..6 across and down), 4 of mip 1 (1..3), 4 of mip 2 (0..2): 24
    // at 3 a frame.
    assert_eq!(order.len(), 24);
    assert_eq!(frames, 8);
    for _ in 0..5 {
        assert!(produce_step(&mut sim, &view).produce.is_empty(), "resident tiles are not produced again");
    }
    assert_page_table_consistent(&sim.streamer);
}

#[test]
fn invalidation_marks_every_mip_and_refreshes_needed_tiles_in_place() {
    let production = ProductionConfig { max_tiles_per_frame: 8, max_stale_frames: 4 };
    let mut sim = Sim::produced(1, texture(), (8, 8), production);
    sim.step(None, None);
    let view = block(0, 0, 0, 4, 4);
    while !sim.streamer.fully_resident() {
        produce_step(&mut sim, &view);
    }
    let entries = sim.streamer.residency().page_table().entries().to_vec();
    // A decal inside tile (1, 1) of mip 0, 2 texels from its left edge: that tile, the
    // border of tile (0, 1) (its 4 texels past x = 128 repeat the decal's), and their 3
    // ancestors.
    assert_eq!(sim.streamer.invalidate(0, [130, 140, 20, 20]), 5);
    let stats = sim.streamer.production_stats().unwrap();
    assert_eq!(stats.stale, 5);
    let plan = produce_step(&mut sim, &view);
    let mut refreshed: Vec<TileId> = plan.produce.iter().filter(|j| j.refresh).map(|j| j.tile).collect();
    refreshed.sort();
    assert_eq!(
        refreshed,
        vec![
            TileId::new(0, 3, 0, 0),
            TileId::new(0, 2, 0, 0),
            TileId::new(0, 1, 0, 0),
            TileId::new(0, 0, 0, 1),
            TileId::new(0, 0, 1, 1)
        ]
    );
    assert!(plan.page_table_writes.is_empty(), "refreshing changes no entry");
    assert_eq!(sim.streamer.residency().page_table().entries(), &entries[..]);
    // The mip-1 parent came back: its resident children copy their quadrant of it again.
    let res = sim.streamer.residency();
    let parent = res.slot_of(TileId::new(0, 1, 0, 0)).unwrap();
    for (x, y) in [(0, 0), (1, 0), (0, 1)] {
        let child = res.slot_of(TileId::new(0, 0, x, y)).unwrap();
        let job = plan.level_ones.iter().find(|l| l.slot == child).expect("level 1 of a child");
        assert_eq!(
            job.source,
            LevelOneSource::Parent {
                tile: TileId::new(0, 1, 0, 0),
                slot: parent,
                quadrant: (x as u8, y as u8)
            }
        );
    }
    assert_eq!(plan.stats.stale_tiles, 0);
    assert_eq!(sim.streamer.production_stats().unwrap().refreshed, 5);
    // Nothing more to do; an empty or outside rectangle touches nothing.
    assert!(produce_step(&mut sim, &view).produce.is_empty());
    assert_eq!(sim.streamer.invalidate(0, [2000, 0, 10, 10]), 0);
    assert_eq!(sim.streamer.invalidate(0, [0, 0, 0, 10]), 0);
    assert_eq!(sim.streamer.invalidate(7, [0, 0, 10, 10]), 0);
    assert_page_table_consistent(&sim.streamer);
}

/// An input's tile of mip 1 arriving (`invalidate_mips`, as `invalidate_arrivals`
/// calls it) marks the produced tiles at mips 0 and 1 over it, not the coarser ones.
#[test]
fn invalidating_up_to_a_mip_leaves_the_coarser_tiles() {
    let production = ProductionConfig { max_tiles_per_frame: 8, max_stale_frames: 4 };
    let mut sim = Sim::produced(1, texture(), (8, 8), production);
    sim.step(None, None);
    let view = block(0, 0, 0, 4, 4);
    while !sim.streamer.fully_resident() {
        produce_step(&mut sim, &view);
    }
    // Mip-1 tile (0, 0) covers texels 0..256. With their borders (4 texels at mip 0, 8
    // at mip 1) that reaches mip-0 tiles 0..=2 across and down (9) and mip-1 tiles
    // 0..=1 (4); the mip-2 and mip-3 tiles stand.
    assert_eq!(sim.streamer.invalidate_mips(0, [0, 0, 256, 256], 1), 13);
    let mut refreshed = Vec::new();
    for _ in 0..4 {
        let plan = produce_step(&mut sim, &view);
        refreshed.extend(plan.produce.iter().filter(|j| j.refresh).map(|j| j.tile));
    }
    assert_eq!(refreshed.len(), 13, "{refreshed:?}");
    assert!(refreshed.iter().all(|t| t.mip <= 1), "{refreshed:?}");
    assert_eq!(sim.streamer.invalidate_mips(0, [0, 0, 256, 256], 0), 9, "mip 0 only");
    assert_page_table_consistent(&sim.streamer);
}

#[test]
fn unneeded_stale_tiles_are_evicted_and_produced_again_on_a_later_miss() {
    let mut sim = Sim::produced(1, texture(), (8, 8), ProductionConfig::default());
    sim.step(None, None);
    let a = block(0, 0, 0, 2, 2);
    let b = block(0, 6, 6, 2, 2);
    while !sim.streamer.fully_resident() {
        produce_step(&mut sim, &a);
    }
    produce_step(&mut sim, &b);
    while !sim.streamer.fully_resident() {
        produce_step(&mut sim, &b);
    }
    assert!(
        a.iter().all(|&t| sim.streamer.residency().is_resident(t)),
        "the pool keeps what it has room for"
    );
    // A's tiles and their parents at mips 1 and 2 are not needed: evicted now. The
    // coarsest is needed by B (and pinned): stale, refreshed.
    assert_eq!(sim.streamer.invalidate(0, [0, 0, 256, 256]), 7);
    assert!(a.iter().all(|&t| !sim.streamer.residency().is_resident(t)));
    assert!(!sim.streamer.residency().is_resident(TileId::new(0, 1, 0, 0)));
    assert!(!sim.streamer.residency().is_resident(TileId::new(0, 2, 0, 0)));
    assert_page_table_consistent(&sim.streamer);
    let plan = produce_step(&mut sim, &b);
    assert_eq!(
        plan.produce,
        vec![ProduceJob {
            tile: TileId::new(0, 3, 0, 0),
            slot: sim.streamer.residency().slot_of(TileId::new(0, 3, 0, 0)).unwrap(),
            refresh: true
        }]
    );
    assert!(!plan.page_table_writes.is_empty(), "the evictions' entries go with the next plan");
    // Back to A: produced afresh, as new tiles.
    let mut again = Vec::new();
    for _ in 0..4 {
        let plan = produce_step(&mut sim, &a);
        assert!(plan.produce.iter().all(|j| !j.refresh));
        again.extend(plan.produce.iter().map(|j| j.tile));
    }
    again.sort();
    let mut want = a.clone();
    want.extend([TileId::new(0, 1, 0, 0), TileId::new(0, 2, 0, 0)]);
    want.sort();
    assert_eq!(again, want);
    assert_page_table_consistent(&sim.streamer);
}

#[test]
fn stale_tiles_are_refreshed_within_the_bound_while_new_tiles_keep_coming() {
    let k = 4;
    let production = ProductionConfig { max_tiles_per_frame: 4, max_stale_frames: k };
    let mut sim = Sim::produced(1, texture(), (10, 10), production);
    sim.step(None, None);
    let first = block(0, 0, 0, 4, 2);
    while !sim.streamer.fully_resident() {
        produce_step(&mut sim, &first);
    }
    // 8 of mip 0, 2 of mip 1, 1 each of mips 2 and 3: 12 stale, no more than k × 4.
    let stale: Vec<TileId> = resident(&sim.streamer).into_keys().collect();
    assert_eq!(stale.len(), 12);
    let at = sim.frame;
    assert_eq!(sim.streamer.invalidate(0, [0, 0, 1024, 1024]), 12);
    // The view grows: 32 more tiles (and their parents) come in the same frames.
    let wider = block(0, 0, 0, 8, 5);
    let mut refreshed = HashSet::new();
    let mut new_during = 0;
    for _ in 0..k {
        let plan = produce_step(&mut sim, &wider);
        assert!(plan.stats.oldest_stale_frames <= u64::from(k));
        refreshed.extend(plan.produce.iter().filter(|j| j.refresh).map(|j| j.tile));
        new_during += plan.stats.produced;
    }
    assert_eq!(sim.frame - at, u64::from(k));
    assert_eq!(refreshed.len(), 12, "every stale tile within {k} frames");
    assert!(new_during >= 4, "new tiles still came: {new_during}");
    assert_eq!(sim.streamer.production_stats().unwrap().stale, 0);
    while !sim.streamer.fully_resident() {
        produce_step(&mut sim, &wider);
    }
    assert_page_table_consistent(&sim.streamer);
}

#[test]
fn production_requests_the_view_stops_wanting_are_cancelled_like_loads() {
    let production = ProductionConfig { max_tiles_per_frame: 1, ..Default::default() };
    let mut sim = Sim::produced(1, texture(), (10, 10), production);
    sim.step(None, None);
    // 64 + 16 + 4 tiles under the root.
    let wide = block(0, 0, 0, 8, 8);
    for _ in 0..3 {
        produce_step(&mut sim, &wide);
    }
    assert_eq!(sim.streamer.production_stats().unwrap().queued, 81);
    // Feedback stops: nothing renews the queue, which is cancelled after the loads'
    // staleness (production goes on meanwhile, one a frame).
    let after = sim.streamer.config().staleness.request_frames;
    for _ in 0..after + 2 {
        let before = resident(&sim.streamer);
        let plan = sim.step(None, None);
        check_produce_plan(&sim.streamer, &before, &plan);
    }
    assert_eq!(sim.streamer.production_stats().unwrap().queued, 0);
    assert_eq!(sim.streamer.residency().requested_count() + sim.streamer.residency().ready_count(), 0);
    let have = resident(&sim.streamer).len() - 1;
    assert!(have > 3 && have < 84, "{have}");
    let plan = produce_step(&mut sim, &wide);
    assert_eq!(plan.stats.requests, 84 - have, "asked for again, less the resident ones");
    assert_eq!(plan.produce.len(), 1);
    // The view moves to a tile already resident: the queue is dropped, not drawn.
    let here = vec![TileId::new(0, 2, 0, 0)];
    assert!(sim.streamer.residency().is_resident(here[0]));
    let plan = produce_step(&mut sim, &here);
    assert!(plan.produce.is_empty());
    assert_eq!(sim.streamer.production_stats().unwrap().queued, 0);
    assert_eq!(sim.streamer.residency().requested_count(), 0);
}

#[test]
fn a_stacked_produced_atlas_shares_each_slot_and_invalidates_the_whole_stack() {
    let names: Vec<(String, ColorSpace)> =
        ["albedo", "normal", "roughness"].iter().map(|n| (n.to_string(), ColorSpace::Linear)).collect();
    let atlas = Arc::new(Atlas::produced("stack", &names, texture(), true).unwrap());
    let p = PoolLayout::from_parts(
        vec![TargetFormat::Rgba8; 3],
        vec![texture()],
        (8, 8),
        true,
        Trilinear::Hardware,
    );
    let config = StreamerConfig {
        feedback_stride: 1,
        auto_mip_bias: false,
        prefetch_neighbours: false,
        ..Default::default()
    };
    // On shared streaming too, and without a thread: nothing is loaded.
    let shared = tessera_core::stream::streamer::SharedStreaming::external(16);
    let streamer = Streamer::new_shared(atlas, &p, config, &shared).unwrap();
    assert!(streamer.is_producing());
    let layout = FeedbackLayout::new(&p.owners);
    let mut sim = Sim { streamer, layout, frame: 0, upload_ms: 0.0, upload_gpu: None };
    let first = sim.step(None, None);
    assert_eq!(first.produce.iter().map(|j| j.tile).collect::<Vec<_>>(), vec![TileId::new(0, 3, 0, 0)]);
    let view = block(0, 0, 0, 2, 2);
    while !sim.streamer.fully_resident() {
        produce_step(&mut sim, &view);
    }
    // Any layer of the stack stands for all: its slots hold every layer's texels.
    assert_eq!(sim.streamer.invalidate(2, [0, 0, 10, 10]), 4);
    let plan = produce_step(&mut sim, &view);
    assert_eq!((plan.stats.refreshed, plan.stats.produced), (4, 0));
    assert_page_table_consistent(&sim.streamer);
}

#[test]
fn a_flushed_pool_produces_its_tiles_again() {
    let mut sim = Sim::produced(1, texture(), (8, 8), ProductionConfig::default());
    sim.step(None, None);
    let view = block(0, 3, 3, 2, 2);
    while !sim.streamer.fully_resident() {
        produce_step(&mut sim, &view);
    }
    sim.streamer.invalidate(0, [0, 0, 1024, 1024]);
    sim.streamer.flush_vram();
    let plan = produce_step(&mut sim, &view);
    // The pinned root is refreshed in place; the rest is drawn anew.
    assert_eq!(
        plan.produce.iter().filter(|j| j.refresh).map(|j| j.tile).collect::<Vec<_>>(),
        vec![TileId::new(0, 3, 0, 0)]
    );
    assert!(plan.produce.iter().filter(|j| !j.refresh).count() >= 4);
    assert_eq!(plan.stats.stale_tiles, 0);
    assert_page_table_consistent(&sim.streamer);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random views, invalidations and budgets on a small pool: every plan is within
    /// the budget, never draws a resident tile anew nor refreshes out of place, the
    /// page table stays consistent, and a held view ends with nothing stale.
    #[test]
    fn random_views_and_invalidations_keep_production_consistent(
        steps in prop::collection::vec(
            ((0u8..4, 0u32..8, 0u32..8, 1u32..4), prop::option::of((0u32..1024, 0u32..1024, 1u32..400, 1u32..400))),
            1..12,
        ),
        slots in 4u32..12,
        budget in 1usize..6,
        k in 1u32..6,
        complete in any::<bool>(),
    ) {
        let production = ProductionConfig { max_tiles_per_frame: budget, max_stale_frames: k };
        let config = StreamerConfig {
            feedback_stride: 1,
            auto_mip_bias: false,
            prefetch_neighbours: false,
            complete_page_table: complete,
            production,
            ..Default::default()
        };
        let mut sim = Sim::produced_with(1, texture(), (slots, 2), config);
        sim.step(None, None);
        for ((mip, x, y, n), rect) in steps {
            let side = 8u32 >> mip;
            let (x, y) = (x % side, y % side);
            let view = block(mip, x, y, n.min(side - x), n.min(side - y));
            if let Some((rx, ry, rw, rh)) = rect {
                sim.streamer.invalidate(0, [rx, ry, rw, rh]);
                let stats = sim.streamer.production_stats().unwrap();
                prop_assert!(sim.streamer.residency().resident_count() >= stats.stale);
            }
            for _ in 0..3 {
                let plan = produce_step(&mut sim, &view);
                prop_assert!(plan.produce.len() <= budget);
            }
            assert_page_table_consistent(&sim.streamer);
        }
        // Held, every stale tile is refreshed in time (or evicted), and it settles.
        let view = block(0, 0, 0, 2, 2);
        let mut jobs: Vec<ProduceJob> = Vec::new();
        for _ in 0..(2 * slots * 2 / budget as u32 + k + 8) {
            jobs = produce_step(&mut sim, &view).produce;
        }
        prop_assert!(jobs.is_empty(), "still producing: {jobs:?}");
        prop_assert_eq!(sim.streamer.production_stats().unwrap().stale, 0);
        assert_page_table_consistent(&sim.streamer);
    }
}
