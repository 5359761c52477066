//! GPU-free simulations of the real [`Streamer`]: the per-frame CPU cost against the
//! virtual size ([`cpu_scaling`]), and a soak of many frames of random camera cuts whose
//! queues, caches and memory must stay flat ([`soak`]). Synthetic feedback goes in, the
//! plan comes out, with loader threads delivering synthetic tiles.

use std::sync::Arc;
use web_time::Instant;

use serde::Serialize;

use crate::format::codec::TargetFormat;
use crate::format::tile::{TextureLayout, TileId};
use crate::stream::feedback::{FeedbackLayout, compact};
use crate::stream::host_cache::HostCache;
use crate::stream::loader::LoadError;
use crate::stream::pool_layout::{PoolLayout, Trilinear};
use crate::stream::streamer::{FrameInput, SparseFeedback, Streamer, StreamerConfig, StreamerError};

/// One virtual size of [`cpu_scaling`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuScalingRow {
    /// Side of the square virtual texture in texels.
    pub size: u32,
    /// Tiles over the whole mip chain (page-table entries).
    pub tiles: u64,
    /// `u32` words of the feedback bitset.
    pub words: usize,
    /// Median CPU time of one [`Streamer::frame`] call, in milliseconds.
    pub median_ms: f64,
    /// 95th percentile of the same, in milliseconds.
    pub p95_ms: f64,
    /// Median time of copying the read-back (word, bits) pairs, in milliseconds (the
    /// decode itself is inside [`Streamer::frame`]).
    pub copy_median_ms: f64,
    /// Mean size of the needed set, ancestors included.
    pub needed_mean: f64,
    /// Tiles uploaded over the run (the loader threads kept up when this is close to
    /// the number of distinct tiles the view passed over).
    pub uploads: u64,
}

/// Mip-0 tiles of the simulated view (about a 1920×1080 view of 128-texel tiles).
const VIEW_TILES: (u32, u32) = (16, 9);
/// Coarser mips of the simulated view's far band, and the band's size at each.
const BAND_MIPS: u8 = 3;
const BAND_TILES: (u32, u32) = (16, 3);
/// Slots of the simulated pool.
const POOL_SLOTS: (u32, u32) = (64, 32);

/// Measures the per-frame CPU cost of streaming for square virtual textures of each
/// side in `sizes` (tile 128, border 4; sizes a layout rejects are skipped, with a
/// warning): a moving view of roughly constant size over `frames` frames, through a
/// 2048-slot pool, with the renderer's default settings (feedback stride 2, neighbour
/// prefetch, automatic mip bias) and two loader threads delivering synthetic tiles.
///
/// Each frame the GPU's part is done on the CPU and not timed: the view's tiles are
/// marked in a bitset and compacted ([`compact`], the twin of the GPU pass). What is
/// timed is what the renderer's CPU does: copying the pairs and one
/// [`Streamer::frame`] (decode, needed set, residency, loader requests, renewal,
/// cancellation, results, upload plan, page-table ranges).
pub fn cpu_scaling(sizes: &[u32], frames: u32) -> Result<Vec<CpuScalingRow>, StreamerError> {
    cpu_scaling_with(sizes, frames, false)
}

/// [`cpu_scaling`] with the page table of the renderer's choice: `complete` (every
/// entry valid at any depth; the CPU only lists rectangles for the GPU to rewrite,
/// [`StreamerConfig::complete_page_table`]) or the shallow one (entries rewritten on the
/// CPU, fallbacks a few mips deep, dirty ranges copied for upload).
pub fn cpu_scaling_with(
    sizes: &[u32],
    frames: u32,
    complete: bool,
) -> Result<Vec<CpuScalingRow>, StreamerError> {
    let mut rows = Vec::new();
    for &size in sizes {
        match TextureLayout::new(size, size, 128, 4) {
            Ok(tl) => rows.push(scaling_row(tl, frames, complete, 2)?),
            Err(e) => tracing::warn!("cpu_scaling: size {size} skipped: {e}"),
        }
    }
    Ok(rows)
}

/// [`cpu_scaling`]'s view of a 65536² texture, the complete page table, at each feedback
/// stride of `strides` (the streamer keeping the union of the last stride² readbacks):
/// one row per stride. Every readback holds the whole view, as a real one does when
/// tiles cover many pixels, so the figure shows what the window itself costs.
pub fn feedback_cpu_by_stride(strides: &[u32], frames: u32) -> Result<Vec<CpuScalingRow>, StreamerError> {
    let tl = TextureLayout::new(65_536, 65_536, 128, 4)
        .map_err(|e| StreamerError::Config(format!("feedback_cpu_by_stride: {e}")))?;
    strides.iter().map(|&s| scaling_row(tl, frames, true, s)).collect()
}

fn scaling_row(
    tl: TextureLayout,
    frames: u32,
    complete: bool,
    stride: u32,
) -> Result<CpuScalingRow, StreamerError> {
    let pool =
        PoolLayout::from_parts(vec![TargetFormat::Rgba8], vec![tl], POOL_SLOTS, false, Trilinear::Hardware);
    let tile: Arc<[u8]> = Arc::from(vec![0u8; pool.tile_bytes()]);
    let loader = move |_: TileId| -> Result<Arc<[u8]>, LoadError> { Ok(tile.clone()) };
    let config = StreamerConfig {
        loader_threads: 2,
        host_cache_mib: 0,
        complete_page_table: complete,
        feedback_stride: stride,
        ..StreamerConfig::default()
    };
    let mut streamer = Streamer::with_loader(&pool, config, Arc::new(HostCache::new(0)), Arc::new(loader))?;
    let layout = FeedbackLayout::new(&[tl]);
    let mut words = vec![0u32; layout.words()];
    let (mut total, mut copy) = (Vec::new(), Vec::new());
    let (mut needed_sum, mut uploads) = (0usize, 0u64);
    for f in 0..frames {
        words.fill(0);
        for t in view_tiles(&tl, f) {
            layout.mark_tile(&mut words, t);
        }
        let pairs = compact(&words);
        let frame = u64::from(f) + 1;
        let t0 = Instant::now();
        // The readback of frame f − 1 arrives now, as with a real GPU's latency.
        let feedback = SparseFeedback { frame: frame - 1, pairs: pairs.clone() };
        let t1 = Instant::now();
        let plan = streamer.frame(FrameInput {
            frame,
            feedback: Some(&feedback),
            last_frame_ms: None,
            last_upload_ms: 0.0,
            upload_gpu: None,
            predicted: None,
        });
        let t2 = Instant::now();
        std::hint::black_box(&plan);
        needed_sum += plan.stats.tiles_needed;
        uploads += plan.uploads.len() as u64;
        total.push((t2 - t0).as_secs_f64() * 1e3);
        copy.push((t1 - t0).as_secs_f64() * 1e3);
    }
    let (median_ms, p95_ms) = (percentile(&mut total, 0.5), percentile(&mut total, 0.95));
    Ok(CpuScalingRow {
        size: tl.width(),
        tiles: tl.tile_count(),
        words: layout.words(),
        median_ms,
        p95_ms,
        copy_median_ms: percentile(&mut copy, 0.5),
        needed_mean: if frames == 0 { 0.0 } else { needed_sum as f64 / f64::from(frames) },
        uploads,
    })
}

/// Settings of a [`soak`] run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoakConfig {
    /// Side of the square virtual texture in texels (tile 128, border 4).
    pub size: u32,
    /// Slots of the pool (across, down).
    pub slots: (u32, u32),
    /// Frames to run.
    pub frames: u64,
    /// A camera cut (a new random view) every this many frames.
    pub cut_every: u64,
    /// A sample of the series every this many frames.
    pub sample_every: u64,
    /// Seed of the random views.
    pub seed: u64,
}

impl Default for SoakConfig {
    fn default() -> Self {
        Self { size: 65_536, slots: (16, 16), frames: 100_000, cut_every: 7, sample_every: 1000, seed: 1 }
    }
}

/// One point of a [`soak`] series.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SoakSample {
    /// The frame sampled.
    pub frame: u64,
    /// Tiles in the pool.
    pub resident: usize,
    /// Requests with the loader (queued and being loaded).
    pub loader_queue: usize,
    /// Loaded tiles waiting for a slot.
    pub ready: usize,
    /// Prefetches pending.
    pub prefetched: usize,
    /// Bytes in the host cache.
    pub host_bytes: u64,
    /// Resident set size of the process in bytes (0 where it cannot be read).
    pub rss_bytes: u64,
    /// Uploads since the previous sample.
    pub uploads: u64,
    /// Median `Streamer::frame` time since the previous sample, ms.
    pub median_ms: f64,
}

/// Runs the real [`Streamer`] for `config.frames` frames of random camera cuts over a
/// large virtual texture through a small pool (with the renderer's defaults: neighbour
/// prefetch, automatic mip bias, stride 2), two loader threads delivering synthetic
/// tiles, and returns a sample of its queues, caches and memory every
/// `config.sample_every` frames. A streamer that leaks shows a rising series.
pub fn soak(config: SoakConfig) -> Result<Vec<SoakSample>, StreamerError> {
    let tl = TextureLayout::new(config.size, config.size, 128, 4)
        .map_err(|e| StreamerError::Config(format!("soak: size {}: {e}", config.size)))?;
    let pool =
        PoolLayout::from_parts(vec![TargetFormat::Rgba8], vec![tl], config.slots, false, Trilinear::Hardware);
    let tile: Arc<[u8]> = Arc::from(vec![0u8; pool.tile_bytes()]);
    let loader = move |_: TileId| -> Result<Arc<[u8]>, LoadError> { Ok(tile.clone()) };
    let streamer_config =
        StreamerConfig { loader_threads: 2, host_cache_mib: 16, ..StreamerConfig::default() };
    let cache = Arc::new(HostCache::new(16 << 20));
    let mut streamer = Streamer::with_loader(&pool, streamer_config, cache, Arc::new(loader))?;
    let layout = FeedbackLayout::new(&[tl]);
    let mut words = vec![0u32; layout.words()];
    let mut rng = config.seed | 1;
    let mut view = Vec::new();
    let (mut samples, mut times, mut uploads) = (Vec::new(), Vec::new(), 0u64);
    for frame in 1..=config.frames {
        if frame % config.cut_every.max(1) == 1 || view.is_empty() {
            view = random_view(&tl, &mut rng);
        }
        words.fill(0);
        for &t in &view {
            layout.mark_tile(&mut words, t);
        }
        let feedback = SparseFeedback { frame: frame - 1, pairs: compact(&words) };
        let t0 = Instant::now();
        let plan = streamer.frame(FrameInput {
            frame,
            feedback: Some(&feedback),
            last_frame_ms: None,
            last_upload_ms: 0.0,
            upload_gpu: None,
            predicted: None,
        });
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        uploads += plan.uploads.len() as u64;
        if frame % config.sample_every.max(1) == 0 {
            let res = streamer.residency();
            samples.push(SoakSample {
                frame,
                resident: res.resident_count(),
                loader_queue: streamer.loader().pending() + streamer.loader().in_flight(),
                ready: res.ready_count(),
                prefetched: res.prefetched_count(),
                host_bytes: streamer.host_cache().bytes(),
                rss_bytes: rss_bytes(),
                uploads: std::mem::take(&mut uploads),
                median_ms: percentile(&mut times, 0.5),
            });
            times.clear();
        }
    }
    Ok(samples)
}

/// A view of a random place and mip: a 12×7 block of tiles and its far band one mip up.
fn random_view(l: &TextureLayout, rng: &mut u64) -> Vec<TileId> {
    let mut next = || {
        // xorshift64: deterministic views for a given seed.
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    let mip = (next() % u64::from(l.coarsest_mip().max(1))) as u8;
    let (gx, gy) = l.tiles_at(u32::from(mip));
    let x = (next() % u64::from(gx)) as u32;
    let y = (next() % u64::from(gy)) as u32;
    let mut out = rect(l, mip, x, y, (12, 7));
    if mip < l.coarsest_mip() {
        out.extend(rect(l, mip + 1, x / 2, (y + 7) / 2, (12, 2)));
    }
    out
}

/// The resident set size of this process, from `/proc/self/statm` (0 elsewhere).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// The tiles the simulated view samples in frame `f`: a 16×9 window at mip 0 moving
/// two tiles a frame across and one every third frame down, and a far band at each of
/// mips 1..=3, all clipped to the grid.
fn view_tiles(l: &TextureLayout, f: u32) -> Vec<TileId> {
    let (gx, gy) = l.tiles_at(0);
    let x0 = (2 * f) % gx.saturating_sub(VIEW_TILES.0).max(1);
    let y0 = (f / 3) % gy.saturating_sub(VIEW_TILES.1).max(1);
    let mut out = rect(l, 0, x0, y0, VIEW_TILES);
    for m in 1..=BAND_MIPS.min(l.coarsest_mip()) {
        let (mx, my) = l.tiles_at(u32::from(m));
        let bx = (x0 >> m).min(mx.saturating_sub(BAND_TILES.0));
        let by = ((y0 + VIEW_TILES.1) >> m).min(my.saturating_sub(BAND_TILES.1));
        out.extend(rect(l, m, bx, by, BAND_TILES));
    }
    out
}

/// The tiles of a `size` rectangle at `(x, y)` of mip `mip`, clipped to the grid.
fn rect(l: &TextureLayout, mip: u8, x: u32, y: u32, size: (u32, u32)) -> Vec<TileId> {
    let (gx, gy) = l.tiles_at(u32::from(mip));
    let (x1, y1) = ((x + size.0).min(gx), (y + size.1).min(gy));
    (y..y1).flat_map(|ty| (x..x1).map(move |tx| TileId::new(0, mip, tx, ty))).collect()
}

/// The `q` quantile (nearest rank) of `v`, 0 for an empty slice.
pub fn percentile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable_by(f64::total_cmp);
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn percentile_nearest_rank() {
        let mut v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&mut v, 0.5), 3.0);
        assert_eq!(percentile(&mut v, 0.95), 5.0);
        assert_eq!(percentile(&mut [], 0.5), 0.0);
    }

    #[test]
    fn simulated_view_is_the_same_size_at_every_virtual_size() {
        for size in [16_384, 65_536, 262_144] {
            let l = TextureLayout::new(size, size, 128, 4).unwrap();
            for f in [0, 7, 500] {
                let tiles = view_tiles(&l, f);
                assert_eq!(tiles.len(), 16 * 9 + 3 * 16 * 3, "size {size} frame {f}");
                assert!(tiles.iter().all(|&t| l.contains(t)));
            }
        }
    }
}
