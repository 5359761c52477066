//! Scheduling controllers and prefetch helpers: the mip-bias hysteresis against a model
//! of an oversubscribed view, the adaptive upload budget against a synthetic cost
//! model, neighbour and region tiles against brute force, and the CPU-scaling run.

use tessera_core::TextureLayout;
use tessera_core::stream::feedback::FeedbackLayout;
use tessera_core::stream::simulate::{CpuScalingRow, cpu_scaling, cpu_scaling_with};

/// The figures for the "CPU time per frame flat from 16K² to 256K²" target (and 512K²,
/// the 524288² scale of issue 13). A
/// benchmark, not a timed test: run it in release and read the table.
/// `cargo test --release -p tessera-vt-core --test schedule cpu_scaling_table -- --ignored --nocapture`
#[test]
#[ignore = "benchmark: run in release with --ignored --nocapture"]
fn cpu_scaling_table() {
    let frames = std::env::var("TESSERA_SCALING_FRAMES").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let sizes = [16_384, 32_768, 65_536, 131_072, 262_144, 524_288];
    // The complete page table (the renderer's default) and the shallow one.
    for complete in [true, false] {
        let rows = cpu_scaling_with(&sizes, frames, complete).unwrap();
        check_rows(&rows, &sizes);
        println!("page table: {}", if complete { "complete" } else { "shallow" });
        println!("| size | tiles | words | needed | uploads | median ms | p95 ms | copy median ms |");
        println!("|---|---|---|---|---|---|---|---|");
        for &CpuScalingRow { size, tiles, words, median_ms, p95_ms, copy_median_ms, needed_mean, uploads } in
            rows.iter()
        {
            println!(
                "| {size} | {tiles} | {words} | {needed_mean:.0} | {uploads} | {median_ms:.4} | {p95_ms:.4} | {copy_median_ms:.4} |"
            );
        }
    }
    assert_eq!(cpu_scaling(&sizes[..1], 4).unwrap().len(), 1);
}

/// Issue 45 item 2: the streamer's per-frame CPU at feedback strides 1 to 8 (a window of
/// stride² readbacks): it must not grow with the stride. Run with
/// `cargo test --release -p tessera-vt-core --test schedule feedback_cpu_by_stride -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: prints a table"]
fn feedback_cpu_by_stride() {
    let frames = std::env::var("TESSERA_SCALING_FRAMES").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let rows = tessera_core::stream::simulate::feedback_cpu_by_stride(&[1, 2, 4, 8], frames).unwrap();
    println!("| stride | window (readbacks) | needed | median ms | p95 ms |");
    println!("|---|---|---|---|---|");
    for (s, r) in [1u32, 2, 4, 8].iter().zip(&rows) {
        println!("| {s} | {} | {:.0} | {:.4} | {:.4} |", s * s, r.needed_mean, r.median_ms, r.p95_ms);
    }
}

fn check_rows(rows: &[CpuScalingRow], sizes: &[u32]) {
    // The table only compares like with like when every size ran the same view.
    assert_eq!(rows.iter().map(|r| r.size).collect::<Vec<_>>(), sizes);
    let first = rows[0].needed_mean;
    for r in rows {
        assert!(r.median_ms.is_finite() && r.p95_ms >= r.median_ms, "{r:?}");
        assert!(r.uploads > 0, "size {}: nothing streamed", r.size);
        assert!(
            (r.needed_mean - first).abs() <= 0.1 * first,
            "size {}: the view changed size: {r:?}",
            r.size
        );
    }
}

mod bias {
    use proptest::prelude::*;
    use tessera_core::stream::schedule::{BiasConfig, BiasInput, MipBiasController};

    /// Tiles a view of `n0` tiles at bias 0 needs at `bias`: ×4 fewer per level.
    fn needed_at(n0: usize, bias: f32) -> usize {
        (n0 as f64 / 4f64.powf(f64::from(bias))).ceil() as usize
    }

    /// The model pool: full when the view does not fit, missing what does not fit.
    fn input(needed: usize, capacity: usize) -> BiasInput {
        BiasInput { needed, capacity, pool_full: needed > capacity, misses: needed.saturating_sub(capacity) }
    }

    /// Runs `frames` frames in which the feedback describes the bias of `latency`
    /// frames ago; returns the bias after each frame.
    fn run(
        c: &mut MipBiasController,
        history: &mut Vec<f32>,
        n0: usize,
        cap: usize,
        frames: usize,
        latency: usize,
    ) {
        for _ in 0..frames {
            let seen = history.len().checked_sub(latency + 1).map_or(0.0, |i| history[i]);
            let b = c.update(input(needed_at(n0, seen), cap));
            history.push(b);
        }
    }

    /// The bias changes in `h[from..]` as (frame, +1 raise / -1 lower).
    fn changes(h: &[f32], from: usize) -> Vec<(usize, i32)> {
        (from.max(1)..h.len())
            .filter(|&i| h[i] != h[i - 1])
            .map(|i| (i, if h[i] > h[i - 1] { 1 } else { -1 }))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// An oversubscribed view raises the bias to the finest level that fits and
        /// stays there; a larger pool brings it back down; never raise → lower → raise.
        #[test]
        fn model_settles_without_oscillating(
            cap in 16usize..20_000,
            over in 1.05f64..200.0,
            grow in 1.5f64..100.0,
            latency in 0usize..=6,
        ) {
            let cfg = BiasConfig::default();
            let n0 = (cap as f64 * over) as usize;
            let mut c = MipBiasController::new(cfg);
            let mut h = Vec::new();
            run(&mut c, &mut h, n0, cap, 1000, latency);
            let up = changes(&h, 0);
            prop_assert!(up.iter().all(|&(_, d)| d == 1), "lowered under a constant pool: {:?}", up);
            let steps = (cfg.max_bias / cfg.step) as usize;
            let bound = steps * (cfg.settle_frames + cfg.raise_after) as usize + latency + 1;
            prop_assert!(up.last().is_none_or(|&(f, _)| f <= bound), "settled late: {:?}", up);
            // Settled at the finest level that fits (or the maximum).
            let b = c.bias();
            prop_assert!(needed_at(n0, b) <= cap || b == cfg.max_bias);
            prop_assert!(b == 0.0 || needed_at(n0, b - cfg.step) > cap);

            let cap2 = (cap as f64 * grow) as usize;
            run(&mut c, &mut h, n0, cap2, 1000, latency);
            let down = changes(&h, 1000);
            prop_assert!(down.iter().all(|&(_, d)| d == -1), "raised after a pool grew: {:?}", down);
            let b2 = c.bias();
            prop_assert!(b2 <= b);
            prop_assert!(needed_at(n0, b2) <= cap2);
            // Lowered as far as the low-water mark allows.
            let finer = needed_at(n0, b2) as f64 * 4f64.powf(f64::from(cfg.step));
            prop_assert!(b2 == 0.0 || finer > f64::from(cfg.low_water) * cap2 as f64);
            if b2 < b {
                let lb = steps * (cfg.settle_frames + cfg.lower_after) as usize + latency + 1;
                prop_assert!(down.last().is_none_or(|&(f, _)| f - 1000 <= lb), "settled late: {:?}", down);
            }
        }
    }

    #[test]
    fn raises_only_after_sustained_oversubscription() {
        let mut c = MipBiasController::new(BiasConfig::default());
        let full = BiasInput { needed: 1200, capacity: 1000, pool_full: true, misses: 200 };
        let fits = BiasInput { needed: 500, capacity: 1000, pool_full: false, misses: 0 };
        // Two full frames, then room: no raise.
        for s in [full, full, fits, full, full, fits] {
            assert_eq!(c.update(s), 0.0);
        }
        assert_eq!(c.update(full), 0.0);
        assert_eq!(c.update(full), 0.0);
        assert_eq!(c.update(full), 0.5);
        // Settling: the lagging inputs do not count.
        for _ in 0..c.config().settle_frames {
            assert_eq!(c.update(full), 0.5);
        }
        for _ in 0..2 {
            assert_eq!(c.update(full), 0.5);
        }
        assert_eq!(c.update(full), 1.0);
    }

    #[test]
    fn high_water_counts_only_while_tiles_are_missing() {
        let mut c = MipBiasController::new(BiasConfig::default());
        let near_full = BiasInput { needed: 970, capacity: 1000, pool_full: false, misses: 0 };
        for _ in 0..100 {
            assert_eq!(c.update(near_full), 0.0);
        }
        let streaming = BiasInput { misses: 30, ..near_full };
        assert_eq!((c.update(streaming), c.update(streaming), c.update(streaming)), (0.0, 0.0, 0.5));
    }

    #[test]
    fn lowers_only_with_predicted_room_and_clamps() {
        let cfg = BiasConfig { max_bias: 1.0, settle_frames: 0, ..BiasConfig::default() };
        let mut c = MipBiasController::new(cfg);
        let full = BiasInput { needed: 5000, capacity: 1000, pool_full: true, misses: 4000 };
        for _ in 0..100 {
            c.update(full);
        }
        assert_eq!(c.bias(), 1.0);
        // 400 tiles: one step finer needs ~800 > 0.6 · 1000, so the bias stays.
        let s = BiasInput { needed: 400, capacity: 1000, pool_full: false, misses: 0 };
        for _ in 0..200 {
            assert_eq!(c.update(s), 1.0);
        }
        // 250 tiles: ~500 fit under 600; lowered after 30 frames of room.
        let s = BiasInput { needed: 250, ..s };
        for _ in 0..29 {
            assert_eq!(c.update(s), 1.0);
        }
        assert_eq!(c.update(s), 0.5);
    }

    #[test]
    fn a_pool_that_filled_early_is_remembered() {
        let cfg = BiasConfig { settle_frames: 0, ..BiasConfig::default() };
        let mut c = MipBiasController::new(cfg);
        // Pinned tiles of other layers: the pool filled with 700 needed tiles of 1000.
        let full = BiasInput { needed: 700, capacity: 1000, pool_full: true, misses: 10 };
        for _ in 0..3 {
            c.update(full);
        }
        assert_eq!(c.bias(), 0.5);
        // 350 would predict 700 finer: under 0.6 · 1000 but not under 0.6 · 700.
        let s = BiasInput { needed: 350, capacity: 1000, pool_full: false, misses: 0 };
        for _ in 0..100 {
            assert_eq!(c.update(s), 0.5);
        }
        // A new pool size forgets it.
        let s = BiasInput { capacity: 1200, ..s };
        for _ in 0..30 {
            c.update(s);
        }
        assert_eq!(c.bias(), 0.0);
    }
}

mod budget {
    use proptest::prelude::*;
    use tessera_core::stream::schedule::{Budget, BudgetConfig, UploadBudgetController};

    /// A frame of `base` ms plus `cost` ms per upload, uploading the whole budget.
    fn frame(c: &mut UploadBudgetController, base: f64, cost: f64) -> (f64, f64, usize, Budget) {
        let n = c.budget().tiles;
        let up = n as f64 * cost;
        let b = c.update(base + up, up, n);
        (base + up, up, n, b)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Under a fixed cost model the budget settles where the uploads fill the room
        /// the frame has below the band (capped by max_tiles) and stays there.
        #[test]
        fn converges_under_a_cost_model(base in 2.0f64..16.0, cost in 0.0005f64..0.1) {
            let cfg = BudgetConfig::default();
            let mut c = UploadBudgetController::new(cfg);
            let mut hist = Vec::new();
            for _ in 0..60 {
                hist.push(frame(&mut c, base, cost).3.tiles);
            }
            let room = (cfg.target_frame_ms - cfg.margin_ms - base).max(0.0);
            let ideal = ((room / cost).floor() as usize).clamp(cfg.min_tiles, cfg.max_tiles);
            let last = &hist[40..];
            prop_assert!(last.iter().all(|&t| t == last[0]), "not settled: {:?}", hist);
            // Never above the ideal; within one growth step of it, unless the frame
            // already sits in the band around the target where growth stops.
            let frame_ms = base + last[0] as f64 * cost;
            prop_assert!(last[0] <= ideal);
            prop_assert!(last[0] as f64 >= ideal as f64 / 1.25 - 1.0
                || frame_ms >= cfg.target_frame_ms - cfg.margin_ms,
                "settled at {} for ideal {}: {:?}", last[0], ideal, hist);
            // No frame over the target because of uploads.
            prop_assert!(frame_ms <= cfg.target_frame_ms - cfg.margin_ms + 1e-9 || last[0] == cfg.min_tiles);
        }

        /// Whatever the measurements, the returned budget never predicts more upload
        /// time than the measured frame leaves (unless at the floor).
        #[test]
        fn never_predicts_over_headroom(
            frames in proptest::collection::vec((0.0f64..40.0, 0.0f64..5.0, 0usize..2000), 1..80),
        ) {
            let cfg = BudgetConfig::default();
            let mut c = UploadBudgetController::new(cfg);
            for (other, up, n) in frames {
                let b = c.update(other + up, up, n);
                prop_assert!(b.tiles >= cfg.min_tiles && b.tiles <= cfg.max_tiles);
                prop_assert_eq!(b.bytes, b.tiles as u64 * cfg.bytes_per_tile);
                if let Some(cost) = c.cost_per_tile_ms().filter(|&x| x > 0.0) {
                    let room = c.headroom_ms(other + up, up);
                    prop_assert!(b.tiles == cfg.min_tiles || b.tiles as f64 * cost <= room + 1e-9,
                        "{} tiles at {} ms over {} ms", b.tiles, cost, room);
                }
            }
        }
    }

    #[test]
    fn reacts_to_a_spike_within_one_frame_and_recovers() {
        let cfg = BudgetConfig::default();
        let mut c = UploadBudgetController::new(cfg);
        for _ in 0..40 {
            frame(&mut c, 8.0, 0.002);
        }
        // Room below the band: 16.6 − 1 − 8 = 7.6 ms, 3,800 tiles at 0.002 ms: max_tiles.
        let steady = c.budget().tiles;
        assert_eq!(steady, 1024);
        // A hitch elsewhere in the frame: the very next budget is cut.
        let b = c.update(30.0, 1.0, steady);
        assert!(b.tiles <= steady / 2, "{b:?}");
        let mut back = None;
        for i in 0..30 {
            if frame(&mut c, 8.0, 0.002).3.tiles == steady {
                back = Some(i);
                break;
            }
        }
        assert!(back.is_some_and(|i| i <= 20), "recovered after {back:?} frames");
        // The tiles got dearer and the uploads pushed the frame over: cut at once too.
        let b = c.update(8.0 + 10.0, 10.0, steady);
        assert!(b.tiles <= steady / 2);
    }

    #[test]
    fn grows_before_anything_is_priced_and_fills_the_room_once_it_is() {
        let cfg = BudgetConfig { start_tiles: 64, ..BudgetConfig::default() };
        let mut c = UploadBudgetController::new(cfg);
        // Nothing uploaded, nothing priced: the budget grows only when it was used.
        assert_eq!(c.update(5.0, 0.0, 0).tiles, 64);
        // Priced at 0.1 ms a tile (a frame of 11.4 ms, 6.4 of them uploads): the room
        // below the band, 16.6 − 1 − 5 = 10.6 ms, holds 106 tiles.
        assert_eq!(c.update(11.4, 6.4, 64).tiles, 106);
        // Quiet frames (nothing to upload) keep the room's budget, so the next burst
        // starts at full width instead of growing into it.
        assert_eq!(c.update(5.0, 0.0, 0).tiles, 106);
        assert_eq!(c.update(9.0, 0.0, 0).tiles, 66);
        // A frame over the target leaves no room (the floor) and sets a ceiling of half
        // the budget: room comes back, but the budget grows back into it (×1.25 a frame
        // that used it) rather than jumping to the room that overran.
        assert_eq!(c.update(18.0, 0.0, 0).tiles, cfg.min_tiles);
        assert_eq!(c.update(5.0, 0.0, 0).tiles, 33);
        assert_eq!(c.update(5.0, 0.0, 0).tiles, 33, "a frame that did not use it does not grow it");
        assert_eq!(c.update(8.3, 3.3, 33).tiles, 41);
        let mut last = 41;
        for _ in 0..8 {
            let n = c.budget().tiles;
            last = c.update(5.0 + n as f64 * 0.1, n as f64 * 0.1, n).tiles;
        }
        assert_eq!(last, 106, "back at the room's budget");
        // Non-finite input leaves it alone.
        assert_eq!(c.update(f64::NAN, 0.1, 10).tiles, 106);
        assert_eq!(c.update(-1.0, 0.1, 10).tiles, 106);
    }

    /// A paced camera cut after quiet frames: the first frame that sees the cut's
    /// misses already has the room's budget (the H100 run of issue 31 grew 16, 24, 32,
    /// 40, 50 here and needed 5 frames).
    #[test]
    fn a_cut_after_quiet_frames_gets_the_whole_room_at_once() {
        let cfg = BudgetConfig { target_frame_ms: 8.0, start_tiles: 16, ..BudgetConfig::default() };
        let mut c = UploadBudgetController::new(cfg);
        // Start-up: a few tiles at 0.05 ms each, then quiet 1.2 ms frames.
        c.update(1.4, 0.2, 4);
        for _ in 0..20 {
            c.update(1.2, 0.01, 0);
        }
        // Room 8 − 1 − 1.19 = 5.81 ms at 0.05 ms a tile: 116 tiles.
        assert_eq!(c.budget().tiles, 116);
    }
}

mod prefetch {
    use std::collections::HashSet;

    use super::*;
    use proptest::prelude::*;
    use tessera_core::TileId;
    use tessera_core::stream::schedule::{neighbours, region_tiles};

    #[test]
    fn neighbours_stay_inside_the_grid() {
        let f = FeedbackLayout::new(&[TextureLayout::new(1024, 512, 128, 4).unwrap()]);
        assert_eq!(neighbours(&f, TileId::new(0, 0, 0, 0)).count(), 3);
        assert_eq!(neighbours(&f, TileId::new(0, 0, 3, 0)).count(), 5);
        assert_eq!(neighbours(&f, TileId::new(0, 0, 3, 2)).count(), 8);
        assert_eq!(neighbours(&f, TileId::new(0, 3, 0, 0)).count(), 0);
        assert_eq!(neighbours(&f, TileId::new(0, 0, 8, 0)).count(), 0);
        assert_eq!(neighbours(&f, TileId::new(1, 0, 0, 0)).count(), 0);
        let n: Vec<TileId> = neighbours(&f, TileId::new(0, 1, 3, 1)).collect();
        assert_eq!(n, vec![TileId::new(0, 1, 2, 0), TileId::new(0, 1, 3, 0), TileId::new(0, 1, 2, 1)]);
    }

    proptest! {
        #[test]
        fn neighbours_match_brute_force(w in 1u32..2000, h in 1u32..2000, pick in any::<usize>()) {
            let f = FeedbackLayout::new(&[TextureLayout::new(w, h, 64, 4).unwrap()]);
            let t = f.tile_at(pick % f.total_tiles()).unwrap();
            let got: HashSet<TileId> = neighbours(&f, t).collect();
            let (tx, ty) = f.tiles_at(0, t.mip).unwrap();
            let mut want = HashSet::new();
            for y in 0..ty {
                for x in 0..tx {
                    if (x, y) != (t.x, t.y) && x.abs_diff(t.x) <= 1 && y.abs_diff(t.y) <= 1 {
                        want.insert(TileId::new(0, t.mip, x, y));
                    }
                }
            }
            prop_assert_eq!(got, want);
        }

        /// The tiles of a rectangle are exactly those at the mip whose texels meet it,
        /// plus their ancestors.
        #[test]
        fn region_tiles_match_brute_force(
            w in 1u32..3000, h in 1u32..3000,
            rect in (0u32..3500, 0u32..3500, 0u32..2000, 0u32..2000),
            mip in 0u8..8,
        ) {
            let l = TextureLayout::new(w, h, 64, 4).unwrap();
            let f = FeedbackLayout::new(&[TextureLayout::new(8, 8, 64, 4).unwrap(), l]);
            let got = region_tiles(&f, 1, [rect.0, rect.1, rect.2, rect.3], mip);
            let m = mip.min(l.coarsest_mip());
            let span = 64u64 << m;
            let (x1, y1) = (u64::from(rect.0) + u64::from(rect.2), u64::from(rect.1) + u64::from(rect.3));
            let (x1, y1) = (x1.min(u64::from(w)), y1.min(u64::from(h)));
            let mut base = Vec::new();
            let (tx, ty) = l.tiles_at(u32::from(m));
            for y in 0..ty {
                for x in 0..tx {
                    let (ox, oy) = (u64::from(x) * span, u64::from(y) * span);
                    let (rx, ry) = (u64::from(rect.0), u64::from(rect.1));
                    if rx < x1 && ry < y1 && ox < x1 && ox + span > rx && oy < y1 && oy + span > ry {
                        base.push(TileId::new(1, m, x, y));
                    }
                }
            }
            prop_assert_eq!(got, f.with_ancestors(&base));
        }
    }

    #[test]
    fn region_tiles_of_nothing() {
        let f = FeedbackLayout::new(&[TextureLayout::new(1024, 1024, 128, 4).unwrap()]);
        assert!(region_tiles(&f, 0, [10, 10, 0, 5], 0).is_empty());
        assert!(region_tiles(&f, 0, [2000, 0, 5, 5], 0).is_empty());
        assert!(region_tiles(&f, 3, [0, 0, 5, 5], 0).is_empty());
        // One texel: its tile and the ancestors; a mip past the end is the root.
        assert_eq!(region_tiles(&f, 0, [300, 0, 1, 1], 0).len(), 4);
        assert_eq!(region_tiles(&f, 0, [0, 0, u32::MAX, u32::MAX], 9), vec![TileId::new(0, 3, 0, 0)]);
    }
}

#[test]
fn cpu_scaling_runs_on_small_sizes() {
    let rows = cpu_scaling(&[1024, 4096, 0, 20_000], 6).unwrap();
    // Size 0 is not a layout and is skipped.
    assert_eq!(rows.iter().map(|r| r.size).collect::<Vec<_>>(), vec![1024, 4096, 20_000]);
    for r in &rows {
        let l = TextureLayout::new(r.size, r.size, 128, 4).unwrap();
        assert_eq!(r.tiles, l.tile_count());
        assert_eq!(r.words, FeedbackLayout::new(&[l]).words());
        assert!(r.median_ms.is_finite() && r.median_ms >= 0.0 && r.p95_ms >= r.median_ms);
        assert!(r.copy_median_ms >= 0.0 && r.needed_mean > 0.0);
    }
    assert!(cpu_scaling(&[2048], 0).unwrap().iter().all(|r| r.median_ms == 0.0 && r.uploads == 0));
}

// The CPU cost of a burst: the whole view's tiles missing at once (after a VRAM flush
// or a camera cut) with every tile at hand in the loader, as `tessera bench
// --flush-every` provokes on a GPU. A benchmark, not a timed test: run it in release.
// `cargo test --release -p tessera-vt-core --test schedule burst_table -- --ignored --nocapture`
mod burst {
    #![allow(clippy::unwrap_used)] // A benchmark: fails loudly.

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
            let plan =
                streamer.frame(FrameInput { frame: *frame, feedback: Some(&fb), ..FrameInput::default() });
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
            println!(
                "| {} | {budget} | {uploads} | {per_tile:.2} | {worst:.3} | {per_miss:.2} |",
                side * side
            );
        }
    }
}

/// A coarsest tile that is unavailable for now (a remote server briefly failing) is
/// asked for again within the patience, not an error at its first failure; past the
/// patience it is the streamer's error.
#[test]
fn a_briefly_unavailable_coarsest_tile_is_asked_for_again() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tessera_core::format::codec::TargetFormat;
    use tessera_core::stream::loader::LoadError;
    use tessera_core::stream::pool_layout::{PoolLayout, Trilinear};
    use tessera_core::stream::streamer::{Streamer, StreamerConfig, StreamerError};
    use tessera_core::{HostCache, TileId};
    let tl = TextureLayout::new(512, 512, 128, 4).unwrap();
    let pool =
        PoolLayout::from_parts(vec![TargetFormat::Rgba8], vec![tl], (8, 8), false, Trilinear::Hardware);
    let tile: Arc<[u8]> = Arc::from(vec![1u8; pool.tile_bytes()]);
    let make = |failures: usize| {
        let calls = Arc::new(AtomicUsize::new(0));
        let (c, tile) = (calls.clone(), tile.clone());
        let loader = move |t: TileId| -> Result<Arc<[u8]>, LoadError> {
            if c.fetch_add(1, Ordering::SeqCst) < failures {
                return Err(LoadError::Unavailable { tile: t, reason: "connection refused".into() });
            }
            Ok(tile.clone())
        };
        (calls, loader)
    };
    let config = |patience_s: u64| StreamerConfig {
        loader_threads: 1,
        host_cache_mib: 0,
        coarsest_patience: std::time::Duration::from_secs(patience_s),
        ..StreamerConfig::default()
    };
    let (calls, loader) = make(2);
    let s = Streamer::with_loader(&pool, config(10), Arc::new(HostCache::new(0)), Arc::new(loader));
    assert!(s.is_ok(), "{:?}", s.err());
    assert_eq!(calls.load(Ordering::SeqCst), 3, "two failures, then the tile");
    let (_, loader) = make(usize::MAX);
    let e = Streamer::with_loader(&pool, config(0), Arc::new(HostCache::new(0)), Arc::new(loader)).err();
    assert!(matches!(e, Some(StreamerError::CoarsestTile { .. })), "{e:?}");
}
