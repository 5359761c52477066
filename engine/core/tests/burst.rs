//! The CPU cost of a burst: the whole view's tiles missing at once (after a VRAM flush
//! or a camera cut) with every tile at hand in the loader, as `tessera bench
//! --flush-every` provokes on a GPU. A benchmark, not a timed test: run it in release.
//! `cargo test --release -p tessera-vt-core --test burst -- --ignored --nocapture`

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Instant;

use tessera_core::format::codec::TargetFormat;
use tessera_core::stream::feedback::{FeedbackLayout, compact};
use tessera_core::stream::loader::LoadError;
use tessera_core::stream::pool_layout::{PoolLayout, Trilinear};
use tessera_core::stream::streamer::{FrameInput, SparseFeedback, Streamer, StreamerConfig};
use tessera_core::{HostCache, TextureLayout, TileId};

/// A 16384² texture, a 2048-slot pool, a view of `side²` mip-0 tiles with ancestors,
/// all resident; then the pool is flushed and the frames until the view is resident
/// again are timed (`Streamer::frame` only). Prints µs per missing tile.
fn burst(side: u32, budget: usize) -> (f64, usize, f64, f64) {
    let tl = TextureLayout::new(16_384, 16_384, 128, 4).unwrap();
    let pool =
        PoolLayout::from_parts(vec![TargetFormat::Bc7], vec![tl], (64, 32), false, Trilinear::Software);
    let tile: Arc<[u8]> = Arc::from(vec![7u8; pool.tile_bytes()]);
    let loader = move |_: TileId| -> Result<Arc<[u8]>, LoadError> { Ok(tile.clone()) };
    let config = StreamerConfig {
        loader_threads: 2,
        host_cache_mib: 0,
        max_uploads_per_frame: budget,
        prefetch_neighbours: false,
        auto_mip_bias: false,
        ..StreamerConfig::default()
    };
    let mut streamer =
        Streamer::with_loader(&pool, config, Arc::new(HostCache::new(0)), Arc::new(loader)).unwrap();
    let layout = FeedbackLayout::new(&[tl]);
    let mut words = vec![0u32; layout.words()];
    for y in 0..side {
        for x in 0..side {
            layout.mark_tile(&mut words, TileId::new(0, 0, x + 20, y + 20));
        }
    }
    let pairs = compact(&words);
    let mut frame = 1;
    let run = |streamer: &mut Streamer, frame: &mut u64| {
        let fb = SparseFeedback { frame: *frame - 1, pairs: pairs.clone() };
        let t0 = Instant::now();
        let plan = streamer.frame(FrameInput { frame: *frame, feedback: Some(&fb), ..FrameInput::default() });
        let dt = t0.elapsed().as_secs_f64();
        *frame += 1;
        (dt, plan)
    };
    // Warm up to full residency.
    for _ in 0..400 {
        let (_, _) = run(&mut streamer, &mut frame);
        if streamer.fully_resident() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(streamer.fully_resident(), "never resident before the flush");
    streamer.flush_vram();
    let (mut total, mut worst, mut uploads) = (0.0, 0.0f64, 0usize);
    // The first frame after the flush finds every needed tile missing.
    let mut first_per_miss = None;
    for _ in 0..400 {
        let (dt, plan) = run(&mut streamer, &mut frame);
        total += dt;
        worst = worst.max(dt);
        if first_per_miss.is_none() && plan.stats.misses > 0 {
            first_per_miss = Some(dt * 1e6 / plan.stats.misses as f64);
        }
        uploads += plan.uploads.len();
        if streamer.fully_resident() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(streamer.fully_resident(), "never resident after the flush");
    (total * 1e6 / uploads.max(1) as f64, uploads, worst * 1e3, first_per_miss.unwrap_or(f64::NAN))
}

#[test]
#[ignore = "benchmark: run in release with --ignored --nocapture"]
fn burst_table() {
    println!("Medians of TESSERA_BURST_RUNS (15) runs.");
    println!(
        "| view tiles | budget | uploads after the flush | µs per uploaded tile (frame() total / uploads) | worst frame() ms | µs per miss, first frame after the flush |"
    );
    println!("|---|---|---|---|---|---|");
    let runs: usize = std::env::var("TESSERA_BURST_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(15);
    for (side, budget) in [(16, 256), (32, 1024), (32, 256)] {
        let mut results: Vec<(f64, usize, f64, f64)> =
            (0..runs.max(1)).map(|_| burst(side, budget)).collect();
        let uploads = results[0].1;
        let mut median = |key: fn(&(f64, usize, f64, f64)) -> f64| {
            results.sort_by(|a, b| key(a).total_cmp(&key(b)));
            key(&results[results.len() / 2])
        };
        let (per_tile, worst, per_miss) = (median(|r| r.0), median(|r| r.2), median(|r| r.3));
        println!("| {} | {budget} | {uploads} | {per_tile:.2} | {worst:.3} | {per_miss:.2} |", side * side);
    }
}
