//! GPU feedback compaction and batched tile uploads, on lavapipe.
//!
//! The feedback tests write known bits into the bitset (as the shaders would), run the
//! compaction pass and the readback, and compare what arrives with the known set,
//! including frames whose non-zero words overflow the list or the copy window.

#![allow(clippy::unwrap_used)] // Tests fail loudly by design.

use std::collections::BTreeMap;
use std::time::Instant;

use tessera::GpuContext;
use tessera::feedback::{Feedback, FeedbackFrame};
use tessera::pool::TilePool;
use tessera_core::TextureLayout;
use tessera_core::format::atlas::ColorSpace;
use tessera_core::format::codec::TargetFormat;
use tessera_core::stream::feedback::{FeedbackLayout, compact};
use tessera_core::stream::page_table::SlotCoord;
use tessera_tests::{gpu, read_pool, read_pool_level, without_margins};

/// The layout of a 65536² texture of 128² tiles: 349,525 tiles, 10,923 bitset words.
fn big_layout() -> FeedbackLayout {
    FeedbackLayout::new(&[TextureLayout::new(65536, 65536, 128, 4).unwrap()])
}

/// A bitset of `words` words with `n` non-zero words spread over it (a few bits each).
fn scattered(words: usize, n: usize, seed: u32) -> Vec<u32> {
    let mut w = vec![0u32; words];
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    let mut set = 0;
    while set < n {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let i = x as usize % words;
        if w[i] == 0 {
            set += 1;
        }
        w[i] |= 1 << (x % 32) | 1 << ((x >> 8) % 32);
    }
    w
}

/// Runs one frame whose passes set exactly `words` in the bitset, then waits until
/// its readback arrives.
fn frame(ctx: &GpuContext, fb: &mut Feedback, n: u64, words: &[u32]) -> FeedbackFrame {
    let mut enc = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    fb.begin(&mut enc);
    ctx.queue.submit([enc.finish()]);
    // Stands in for the scene passes: queued writes land before the next submission.
    ctx.queue.write_buffer(fb.bitset(), 0, &word_bytes(words));
    let mut enc = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    fb.end(&mut enc, n, None);
    ctx.queue.submit([enc.finish()]);
    fb.after_submit();
    for _ in 0..1000 {
        ctx.device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        if let Some(f) = fb.poll(&ctx.device) {
            assert_eq!(f.frame, n);
            return f;
        }
    }
    panic!("the readback of frame {n} never arrived");
}

/// The bitset as the bytes the GPU holds (little-endian words).
fn word_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn compacted_feedback_equals_the_written_bits() {
    let ctx = gpu();
    let layout = big_layout();
    assert_eq!((layout.total_tiles(), layout.words()), (349_525, 10_923));
    let mut fb = Feedback::new(&ctx.device, layout.words(), 3);
    assert_eq!(fb.bitset_bytes(), 43_692);
    // A typical view: a few hundred non-zero words, including the first and the last.
    let mut words = scattered(layout.words(), 300, 7);
    words[0] |= 1;
    let last = layout.total_tiles() - 1; // the last tile of the atlas
    words[last / 32] |= 1 << (last % 32);
    let got = frame(ctx, &mut fb, 1, &words);
    assert!(got.complete);
    assert_eq!(got.sparse, compact(&words));
    let tiles = layout.decode_sparse(&got.sparse);
    assert_eq!(tiles, layout.decode(&words));
    assert_eq!(tiles.last(), layout.tile_at(last).as_ref());
    // The readback is the counter and the copy window, far below the bitset.
    println!(
        "65536² atlas: bitset {} B, sparse readback {} B for {} non-zero words",
        fb.bitset_bytes(),
        fb.bytes(),
        got.sparse.len()
    );
    assert!(fb.bytes() < fb.bitset_bytes() / 4, "{} bytes", fb.bytes());
    // An empty frame and a frame after it: nothing left over from the previous one.
    let empty = frame(ctx, &mut fb, 2, &vec![0; layout.words()]);
    assert!(empty.complete && empty.sparse.is_empty());
    let again = frame(ctx, &mut fb, 3, &words);
    assert_eq!(again.sparse, compact(&words));
    assert_eq!(fb.full_frames(), 0);
}

#[test]
fn overflowing_feedback_falls_back_to_the_full_bitset_within_two_frames() {
    let ctx = gpu();
    let layout = big_layout();
    // A list of 64 pairs, so 500 non-zero words overflow it on the GPU.
    let mut fb = Feedback::with_capacity(&ctx.device, layout.words(), 3, 64);
    let words = scattered(layout.words(), 500, 11);
    let want = compact(&words);
    let first = frame(ctx, &mut fb, 1, &words);
    assert!(!first.complete, "500 words cannot fit 64 pairs");
    assert_eq!(first.sparse.len(), 64);
    // What did arrive is true.
    assert!(first.sparse.iter().all(|p| want.binary_search(p).is_ok()));
    // The next frame reads the whole bitset: every request arrives.
    let second = frame(ctx, &mut fb, 2, &words);
    assert!(second.complete);
    assert_eq!(second.sparse, want);
    assert_eq!(layout.decode_sparse(&second.sparse), layout.decode(&words));
    assert_eq!(fb.bytes(), fb.bitset_bytes());
    // Still too many for the list: full readbacks continue.
    let third = frame(ctx, &mut fb, 3, &words);
    assert!(third.complete && third.sparse == want);
    // Once the view needs fewer words, one full frame shows it, then back to sparse.
    let few = scattered(layout.words(), 20, 3);
    let fourth = frame(ctx, &mut fb, 4, &few);
    assert!(fourth.complete && fourth.sparse == compact(&few));
    assert_eq!(fb.full_frames(), 3);
    let fifth = frame(ctx, &mut fb, 5, &few);
    assert!(fifth.complete && fifth.sparse == compact(&few));
    assert_eq!(fb.full_frames(), 3);
    assert!(fb.bytes() < fb.bitset_bytes());
    assert_eq!(fb.incomplete_frames(), 1);
}

#[test]
fn copy_window_grows_after_a_frame_larger_than_it() {
    let ctx = gpu();
    let layout = big_layout();
    let mut fb = Feedback::new(&ctx.device, layout.words(), 3);
    let small = fb.bytes();
    // 2000 words fit the GPU list (8192) but not the initial copy window (1024).
    let words = scattered(layout.words(), 2000, 5);
    let first = frame(ctx, &mut fb, 1, &words);
    assert!(!first.complete);
    let second = frame(ctx, &mut fb, 2, &words);
    assert!(second.complete && second.sparse == compact(&words));
    // From now on the window (4096 pairs, 32 KiB) holds them: sparse and complete.
    let third = frame(ctx, &mut fb, 3, &words);
    assert!(third.complete && third.sparse == compact(&words));
    assert!(fb.bytes() > small && fb.bytes() < fb.bitset_bytes(), "{} bytes", fb.bytes());
    assert_eq!(fb.full_frames(), 1);
}

#[test]
fn small_bitsets_are_read_back_whole() {
    let ctx = gpu();
    // 300 words (1,200 bytes) are fewer bytes than the smallest sparse readback (16 +
    // 256 pairs × 8): the bitset is copied whole, with no compaction pass.
    let mut fb = Feedback::new(&ctx.device, 300, 2);
    let words = scattered(300, 40, 9);
    let got = frame(ctx, &mut fb, 1, &words);
    assert!(got.complete);
    assert_eq!(got.sparse, compact(&words));
    assert_eq!(fb.bytes(), 1200);
}

/// Distinct, position-dependent bytes for a tile.
fn tile_bytes(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_mul(31).wrapping_add(seed.wrapping_mul(97)) >> 2) as u8).collect()
}

fn batched_matches_single(target: TargetFormat) {
    let ctx = gpu();
    let make = || {
        TilePool::with_grid(&ctx.device, &ctx.queue, (5, 3), (136, 0), target, &[ColorSpace::Srgb], 1)
            .unwrap()
    };
    let (single, batched) = (make(), make());
    let len = single.slot_bytes() as usize;
    let tiles: Vec<Vec<u8>> = (0..12).map(|i| tile_bytes(len, i)).collect();
    // Twelve of fifteen slots, slot (1, 1) twice (the later tile wins), out of order.
    let slots: Vec<SlotCoord> =
        [(4, 2), (0, 0), (1, 1), (3, 0), (2, 2), (1, 1), (0, 2), (4, 0), (2, 1), (3, 2), (0, 1), (3, 1)]
            .iter()
            .map(|&(x, y)| SlotCoord { x, y })
            .collect();
    for (slot, t) in slots.iter().zip(&tiles) {
        single.upload(&ctx.queue, *slot, t);
    }
    let mut items: Vec<(SlotCoord, &[u8])> =
        slots.iter().copied().zip(tiles.iter().map(Vec::as_slice)).collect();
    // Skipped with a warning: wrong length, outside the grid.
    items.push((SlotCoord { x: 2, y: 0 }, &tiles[0][..len - 4]));
    items.push((SlotCoord { x: 5, y: 0 }, &tiles[0]));
    batched.upload_batch(&ctx.device, &ctx.queue, &items);
    let (a, b) = (read_pool(ctx, &single), read_pool(ctx, &batched));
    assert_eq!(a.len(), b.len());
    assert!(a == b, "{}: batched upload differs from per-tile upload", target.name());
    // And both hold the tiles where they belong (slot (1, 1): the later one).
    let pool_row = a.len() / 3; // bytes of one row of slots
    let tile_row = len / (if target.is_block_compressed() { 34 } else { 136 });
    let at = |x: usize, y: usize, r: usize| y * pool_row + r * 5 * tile_row + x * tile_row;
    for r in [0, 7, 33] {
        assert_eq!(&a[at(1, 1, r)..at(1, 1, r) + tile_row], &tiles[5][r * tile_row..(r + 1) * tile_row]);
        assert_eq!(&a[at(4, 2, r)..at(4, 2, r) + tile_row], &tiles[0][r * tile_row..(r + 1) * tile_row]);
    }
}

/// A batch large enough to be staged by several threads (60 tiles, 12 slots named
/// twice) leaves the pool exactly as per-tile uploads in the same order do.
fn many_batched_match_single(target: TargetFormat) {
    let ctx = gpu();
    let make = || {
        TilePool::with_grid(&ctx.device, &ctx.queue, (8, 6), (136, 0), target, &[ColorSpace::Srgb], 1)
            .unwrap()
    };
    let (single, batched) = (make(), make());
    let len = single.slot_bytes() as usize;
    let tiles: Vec<Vec<u8>> = (0..60).map(|i| tile_bytes(len, 1000 + i)).collect();
    let slot = |i: usize| SlotCoord { x: ((i * 5) % 48 % 8) as u16, y: ((i * 5) % 48 / 8) as u16 };
    for (i, t) in tiles.iter().enumerate() {
        single.upload(&ctx.queue, slot(i), t);
    }
    let items: Vec<(SlotCoord, &[u8])> =
        tiles.iter().enumerate().map(|(i, t)| (slot(i), t.as_slice())).collect();
    batched.upload_batch(&ctx.device, &ctx.queue, &items);
    let (a, b) = (read_pool(ctx, &single), read_pool(ctx, &batched));
    assert!(a == b, "{}: a 60-tile batch differs from per-tile uploads", target.name());
}

#[test]
fn many_batched_uploads_match_single_rgba8_bc1_bc7() {
    many_batched_match_single(TargetFormat::Rgba8);
    if gpu().device.features().contains(wgpu::Features::TEXTURE_COMPRESSION_BC) {
        many_batched_match_single(TargetFormat::Bc1);
        many_batched_match_single(TargetFormat::Bc7);
    }
}

/// Hardware trilinear: level 1 of every uploaded slot is the 2× downsample of its tile,
/// border included, averaged in linear light for an sRGB pool (as the baker makes
/// mips) and as stored for a linear one; slots never uploaded keep the unwritten colour.
#[test]
fn level_one_of_each_uploaded_slot_is_its_tiles_downsample() {
    use tessera_core::bake::{linear_to_srgb, srgb_to_linear};
    let ctx = gpu();
    for color in [ColorSpace::Srgb, ColorSpace::Linear] {
        let pool =
            TilePool::with_grid(&ctx.device, &ctx.queue, (5, 3), (136, 0), TargetFormat::Rgba8, &[color], 2)
                .unwrap();
        assert_eq!(pool.levels(), 2);
        assert_eq!(pool.slot_bytes(), (136 * 136 + 68 * 68) * 4);
        let len = pool.tile_bytes() as usize;
        let tiles: Vec<Vec<u8>> = (0..4).map(|i| tile_bytes(len, i * 7 + 1)).collect();
        let slots = [(4u16, 2u16), (0, 0), (2, 1), (1, 2)].map(|(x, y)| SlotCoord { x, y });
        let items: Vec<(SlotCoord, &[u8])> =
            slots.iter().copied().zip(tiles.iter().map(Vec::as_slice)).collect();
        // Two batches, as two frames would upload them.
        pool.upload_batch(&ctx.device, &ctx.queue, &items[..1]);
        pool.upload_batch(&ctx.device, &ctx.queue, &items[1..]);
        let level1 = read_pool_level(ctx, &pool, 1);
        let row = 5 * 68 * 4;
        let texel = |sx: usize, sy: usize, x: usize, y: usize| {
            let at = (sy * 68 + y) * row + (sx * 68 + x) * 4;
            &level1[at..at + 4]
        };
        type Conversions = (fn(u8) -> f32, fn(f32) -> u8);
        let (to_lin, from_lin): Conversions = match color {
            ColorSpace::Srgb => (srgb_to_linear, linear_to_srgb),
            ColorSpace::Linear => (|c| f32::from(c) / 255.0, |l| (l * 255.0 + 0.5).clamp(0.0, 255.0) as u8),
        };
        let mut worst = 0u8;
        for (slot, tile) in slots.iter().zip(&tiles) {
            for y in 0..68 {
                for x in 0..68 {
                    let got = texel(usize::from(slot.x), usize::from(slot.y), x, y);
                    for c in 0..4 {
                        let at = |dx: usize, dy: usize| tile[((2 * y + dy) * 136 + 2 * x + dx) * 4 + c];
                        let want = if c == 3 {
                            ((u32::from(at(0, 0))
                                + u32::from(at(1, 0))
                                + u32::from(at(0, 1))
                                + u32::from(at(1, 1))
                                + 2)
                                / 4) as u8
                        } else {
                            from_lin(
                                (to_lin(at(0, 0)) + to_lin(at(1, 0)) + to_lin(at(0, 1)) + to_lin(at(1, 1)))
                                    / 4.0,
                            )
                        };
                        worst = worst.max(got[c].abs_diff(want));
                    }
                }
            }
        }
        assert!(worst <= 2, "{color:?}: level 1 differs from the tile's downsample by up to {worst}");
        // A slot never uploaded still shows the unwritten colour at level 1.
        assert_eq!(texel(3, 0, 30, 30), tessera::pool::UNWRITTEN);
    }
}

#[test]
fn batched_upload_writes_the_same_texels_as_single_uploads() {
    batched_matches_single(TargetFormat::Rgba8);
    if gpu().device.features().contains(wgpu::Features::TEXTURE_COMPRESSION_BC) {
        batched_matches_single(TargetFormat::Bc1);
        batched_matches_single(TargetFormat::Bc7);
    }
}

/// Upload throughput of single and batched uploads (prints the rates). It checks that every
/// round was timed with a positive, finite rate and that the tiles of the last frame are in
/// their slots afterwards; it asserts nothing about speed. Run with
/// `cargo test -p tessera-tests --test feedback -- --ignored --nocapture`.
#[test]
#[ignore = "timing printout"]
fn upload_timing() {
    let ctx = gpu();
    for target in [TargetFormat::Rgba8, TargetFormat::Bc7] {
        if target.is_block_compressed()
            && !ctx.device.features().contains(wgpu::Features::TEXTURE_COMPRESSION_BC)
        {
            continue;
        }
        let pool =
            TilePool::with_grid(&ctx.device, &ctx.queue, (32, 16), (136, 0), target, &[ColorSpace::Srgb], 1)
                .unwrap();
        let len = pool.slot_bytes() as usize;
        let tiles: Vec<Vec<u8>> = (0..256).map(|i| tile_bytes(len, i)).collect();
        let slots: Vec<SlotCoord> = (0..512u16).map(|i| SlotCoord { x: i % 32, y: i / 32 }).collect();
        let mut results = BTreeMap::new();
        for round in 0..9 {
            for batched in [false, true] {
                ctx.device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
                let t = Instant::now();
                // 4 frames of 256 tiles each.
                for f in 0..4usize {
                    let frame_slots = &slots[(f % 2) * 256..(f % 2) * 256 + 256];
                    if batched {
                        let items: Vec<(SlotCoord, &[u8])> =
                            frame_slots.iter().copied().zip(tiles.iter().map(Vec::as_slice)).collect();
                        pool.upload_batch(&ctx.device, &ctx.queue, &items);
                    } else {
                        for (s, t) in frame_slots.iter().zip(&tiles) {
                            pool.upload(&ctx.queue, *s, t);
                        }
                    }
                    ctx.queue.submit([]);
                    // As a frame loop does (the feedback poll): finished work is reclaimed.
                    ctx.device.poll(wgpu::PollType::Poll).unwrap();
                }
                ctx.device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
                let rate = 1024.0 / t.elapsed().as_secs_f64();
                if round > 0 {
                    results.entry(batched).or_insert_with(Vec::new).push(rate);
                }
            }
        }
        assert_eq!(results.keys().copied().collect::<Vec<_>>(), [false, true], "{}", target.name());
        // Slots 0..256 got tiles 0..256 in frames 0 and 2, slots 256..512 in frames 1 and 3.
        let texels = read_pool(ctx, &pool);
        let tile_rows = if target.is_block_compressed() { 34 } else { 136 };
        let tile_row = len / tile_rows;
        let pool_row = texels.len() / pool.slots_y() as usize;
        for (i, slot) in slots.iter().enumerate().step_by(37) {
            let (x, y) = (usize::from(slot.x), usize::from(slot.y));
            for r in [0, tile_rows / 2, tile_rows - 1] {
                let at = y * pool_row + r * pool.slots_x() as usize * tile_row + x * tile_row;
                assert!(
                    texels[at..at + tile_row] == tiles[i % 256][r * tile_row..(r + 1) * tile_row],
                    "{}: slot ({x}, {y}) row {r} does not hold tile {}",
                    target.name(),
                    i % 256
                );
            }
        }
        for (batched, rates) in results {
            let mut rates = rates;
            assert_eq!(rates.len(), 8, "one rate per timed round");
            assert!(rates.iter().all(|r| r.is_finite() && *r > 0.0), "{}: rates {rates:?}", target.name());
            rates.sort_by(f64::total_cmp);
            let median = rates[rates.len() / 2];
            println!(
                "{}: {} median {:.0} tiles/s ({:.0} MiB/s), best {:.0}",
                target.name(),
                if batched { "upload_batch" } else { "upload      " },
                median,
                median * len as f64 / f64::from(1 << 20),
                rates[rates.len() - 1]
            );
        }
    }
}

/// Tiles a loader thread wrote into the staging ring are copied straight from there:
/// half staged, half through the render thread's belt, in one batch, the pool ends up
/// exactly as per-tile uploads leave it (RGBA8, BC1, BC7).
fn staged_copies_match_single(target: TargetFormat) {
    use tessera::staging::GpuStaging;
    use tessera_core::stream::staging::StagingLayout;
    let ctx = gpu();
    let make = || {
        TilePool::with_grid(&ctx.device, &ctx.queue, (8, 6), (136, 0), target, &[ColorSpace::Srgb], 1)
            .unwrap()
    };
    let (single, mixed) = (make(), make());
    let len = single.slot_bytes() as usize;
    let layout = StagingLayout::new(&[mixed.tile_rows()], wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
    assert_eq!(layout.tile_bytes(), len);
    let mut staging = GpuStaging::new(&ctx.device, layout, 4);
    let tiles: Vec<Vec<u8>> = (0..40).map(|i| tile_bytes(len, 7000 + i)).collect();
    let slot = |i: usize| SlotCoord { x: (i % 8) as u16, y: (i / 8) as u16 };
    for (i, t) in tiles.iter().enumerate() {
        single.upload(&ctx.queue, slot(i), t);
    }
    // Even tiles staged as a loader thread would, odd ones handed over as bytes.
    let staged: Vec<_> =
        tiles.iter().step_by(2).map(|t| staging.ring().stage(t).expect("room in 4 MiB")).collect();
    let to_slots: Vec<(SlotCoord, &_)> = staged.iter().enumerate().map(|(k, t)| (slot(2 * k), t)).collect();
    let copies = staging.copies(0, &to_slots);
    let items: Vec<(SlotCoord, &[u8])> =
        tiles.iter().enumerate().skip(1).step_by(2).map(|(i, t)| (slot(i), t.as_slice())).collect();
    mixed.upload_mixed(&ctx.device, &ctx.queue, &items, &copies);
    drop((copies, to_slots));
    staging.retire(&ctx.queue, staged);
    let (a, b) = (read_pool(ctx, &single), read_pool(ctx, &mixed));
    assert!(a == b, "{}: staged copies differ from per-tile uploads", target.name());
    // Once the GPU is done the records are released and the chunk is mapped again.
    ctx.wait_idle().unwrap();
    staging.maintain();
    ctx.wait_idle().unwrap();
    staging.maintain();
    assert_eq!(staging.in_flight(), 0);
    assert!(staging.ring().counters().attached > 1, "{:?}", staging.ring().counters());
    assert!(staging.ring().stage(&tiles[0]).is_some(), "staging usable again after the remap");
}

#[test]
fn staged_copies_match_single_uploads_rgba8_bc1_bc7() {
    staged_copies_match_single(TargetFormat::Rgba8);
    if gpu().device.features().contains(wgpu::Features::TEXTURE_COMPRESSION_BC) {
        staged_copies_match_single(TargetFormat::Bc1);
        staged_copies_match_single(TargetFormat::Bc7);
    }
}

/// Tiles bound for slots one below the other whose bytes follow each other go in one
/// copy: a flood with runs down columns and scattered slots, half staged by a loader
/// thread and half through the render thread's belt, leaves the pool exactly as one
/// copy per tile does, in 11 copies instead of 26 (RGBA8, BC1, BC7), in slots with no
/// margin and in slots with a margin of 4 texels (a block pool's, whose copies carry
/// the zeros of the margin between tiles).
fn merged_copies_match_per_tile(target: TargetFormat, margin: u32) {
    use tessera::staging::GpuStaging;
    use tessera_core::stream::staging::StagingLayout;
    let ctx = gpu();
    let make = |merged: bool| {
        let mut pool = TilePool::with_grid(
            &ctx.device,
            &ctx.queue,
            (8, 8),
            (136, margin),
            target,
            &[ColorSpace::Srgb],
            1,
        )
        .unwrap();
        pool.set_merged_copies(merged);
        pool
    };
    let (single, merged, per_tile) = (make(false), make(true), make(false));
    let len = single.tile_bytes() as usize;
    let column = |x: u16, ys: std::ops::Range<u16>| ys.map(move |y| SlotCoord::new(x, y));
    // Staged in this order (consecutive records): runs of 6, 3 and 3, three lone slots.
    let staged_slots: Vec<SlotCoord> = column(0, 0..6)
        .chain(column(1, 0..3))
        .chain([SlotCoord::new(5, 2), SlotCoord::new(3, 5), SlotCoord::new(6, 0)])
        .chain(column(2, 1..4))
        .collect();
    // Through the belt: a run of 6, three lone slots (one above the last), a run of 2.
    let item_slots: Vec<SlotCoord> = column(4, 0..6)
        .chain([SlotCoord::new(7, 3), SlotCoord::new(7, 1), SlotCoord::new(6, 4)])
        .chain(column(7, 4..6))
        .collect();
    let tiles: Vec<Vec<u8>> =
        (0..staged_slots.len() + item_slots.len()).map(|i| tile_bytes(len, 900 + i as u32)).collect();
    let (staged_tiles, item_tiles) = tiles.split_at(staged_slots.len());
    for (slot, t) in staged_slots.iter().chain(&item_slots).zip(&tiles) {
        single.upload(&ctx.queue, *slot, t);
    }
    let items: Vec<(SlotCoord, &[u8])> =
        item_slots.iter().copied().zip(item_tiles.iter().map(Vec::as_slice)).collect();
    let mut commands = Vec::new();
    for pool in [&merged, &per_tile] {
        let layout = StagingLayout::with_margins(&[pool.staged_rows()], wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let mut staging = GpuStaging::new(&ctx.device, layout, 4);
        let staged: Vec<_> =
            staged_tiles.iter().map(|t| staging.ring().stage(t).expect("room in 4 MiB")).collect();
        let to_slots: Vec<(SlotCoord, &_)> = staged_slots.iter().copied().zip(&staged).collect();
        let copies = staging.copies(0, &to_slots);
        commands.push(pool.upload_mixed(&ctx.device, &ctx.queue, &items, &copies));
        drop((copies, to_slots));
        staging.retire(&ctx.queue, staged);
        ctx.wait_idle().unwrap();
    }
    let name = format!("{} with a margin of {margin}", target.name());
    assert_eq!(commands, [11, 26], "{name}: copy commands merged / per tile");
    // Batch copies write zeros into the margins around their tiles, where the pool's
    // fill (an RGBA8 pool is cleared to magenta) may have left other texels.
    let read = |pool: &TilePool| without_margins(pool, read_pool(ctx, pool));
    let want = read(&single);
    assert!(read(&per_tile) == want, "{name}: per-tile copies differ from single uploads");
    assert!(read(&merged) == want, "{name}: merged copies differ from per-tile uploads");
}

#[test]
fn merged_copies_match_per_tile_rgba8_bc1_bc7() {
    for margin in [0, 4] {
        merged_copies_match_per_tile(TargetFormat::Rgba8, margin);
        if gpu().device.features().contains(wgpu::Features::TEXTURE_COMPRESSION_BC) {
            merged_copies_match_per_tile(TargetFormat::Bc1, margin);
            merged_copies_match_per_tile(TargetFormat::Bc7, margin);
        }
    }
}

/// A flood of uploads through staging memory too small for it (two chunks of 4 MiB,
/// a 4 MiB pool, a camera cut every 4 frames over a 8192² texture): tiles go through
/// the ring, its chunks are sealed and mapped again many times, tiles that find it full
/// take the render thread's path, and at the end every resident slot holds exactly its
/// tile's texels (RGBA8 from LZ4, and BC7 transcoded from UASTC where BC is supported).
#[test]
fn flooded_staging_keeps_every_slot_equal_to_its_tile() {
    use std::sync::Arc;
    use tessera::{VirtualTextures, VtConfig};
    use tessera_core::bake::source::Generated;
    use tessera_core::bake::{BakeInput, BakeOptions, bake};
    use tessera_core::format::codec::Codec;
    use tessera_core::scene::camera::CameraPath;
    use tessera_core::stream::atlas_loader::AtlasLoader;
    use tessera_core::{Atlas, HostCache, NoProgress};
    use tessera_tools::drawer_for;
    use tessera_tools::scene::OffscreenTarget;
    let ctx = gpu();
    let dir = tempfile::tempdir().unwrap();
    let bc = ctx.device.features().contains(wgpu::Features::TEXTURE_COMPRESSION_BC);
    // UASTC encoding is slow on a CI core: the BC7 run uses a smaller texture. So is a BC7
    // frame on lavapipe (level 1 encoded and BC7 sampled in software, about 0.6 s against
    // 13 ms for RGBA8): it runs 32 frames (8 cuts) instead of 96.
    let runs: Vec<(Codec, TargetFormat, u32, u32)> = if bc {
        vec![(Codec::Lz4, TargetFormat::Rgba8, 8192, 96), (Codec::Uastc, TargetFormat::Bc7, 2048, 32)]
    } else {
        vec![(Codec::Lz4, TargetFormat::Rgba8, 8192, 96)]
    };
    for (codec, target, side, frames) in runs {
        let path = dir.path().join(format!("flood-{}.tsa", codec.name()));
        let input = BakeInput::new("flood", Generated::new(side, side));
        bake(vec![input], &path, &BakeOptions { codec, ..BakeOptions::default() }, &NoProgress).unwrap();
        let atlas = Arc::new(Atlas::open(&path).unwrap());
        let config = VtConfig {
            pool_mib: 4,
            staging_mib: 8,
            pool_format: Some(target),
            streaming: tessera::StreamerConfig {
                max_uploads_per_frame: 512,
                ..tessera::StreamerConfig::default()
            },
            ..VtConfig::default()
        };
        let mut vt = VirtualTextures::new(ctx, atlas.clone(), config).unwrap();
        let scene = drawer_for(ctx, &vt, None).unwrap();
        let (w, h) = (320, 180);
        let out = OffscreenTarget::new(&ctx.device, w, h);
        let path = CameraPath::random_cuts(
            0x5eed,
            frames / 4,
            4,
            glam::Vec3::new(-1.0, 0.0, -0.5),
            glam::Vec3::new(1.0, 0.0, 0.5),
        );
        let (mut uploads, mut staged) = (0usize, 0usize);
        for f in 0..frames {
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            let frame = vt.begin(ctx, &mut encoder);
            scene.set_camera(&ctx.queue, &path.camera_at(f), w as f32 / h as f32);
            scene.draw_vt(&mut encoder, &out.color_view, &out.depth_view, frame.vt(), None);
            let stats = frame.finish(ctx, encoder).unwrap();
            uploads += stats.uploads;
            staged += stats.uploads_staged;
            ctx.wait_idle().unwrap();
            if std::env::var_os("DEBUG_STAGING").is_some() {
                eprintln!(
                    "frame {f}: uploads {} staged {} waiting {} ready {} counters {:?}",
                    stats.uploads,
                    stats.uploads_staged,
                    vt.streamer().staged_waiting(),
                    vt.residency().ready_count(),
                    vt.staging_counters()
                );
            }
        }
        let counters = vt.staging_counters().expect("staging is on");
        let name = target.name();
        assert!(
            staged * 2 > uploads && staged <= uploads,
            "{name}: {staged} of {uploads} uploads staged: {counters:?}"
        );
        // Chunks are sealed and attached again many times over (24 sealed in 96 RGBA8
        // frames, 7 in 32 BC7 frames, measured).
        assert!(
            counters.sealed > u64::from(frames / 6) && counters.attached > counters.sealed / 2,
            "{name}: {counters:?}"
        );
        if target == TargetFormat::Rgba8 {
            // 40 RGBA8 records per chunk: bursts after cuts find both chunks busy, and
            // those tiles take the render thread's path.
            assert!(
                counters.exhausted > 0 && staged < uploads,
                "{name}: two chunks should run out: {counters:?}"
            );
        }
        // Every resident tile's slot holds exactly the tile.
        let loader = AtlasLoader::with_target(atlas.clone(), Arc::new(HostCache::new(0)), target);
        let pool = vt.pool();
        let texels = read_pool(ctx, pool);
        let (row, rows) = pool.tile_rows();
        // In rows of texels (blocks): a slot is `pitch` of them, its tile `margin` in.
        let unit = if target.is_block_compressed() { 4 } else { 1 };
        let (pitch, margin) = ((pool.pitch() / unit) as usize, (pool.margin() / unit) as usize);
        let per_unit = row as usize / rows as usize;
        let pool_row = per_unit * pitch * pool.slots_x() as usize;
        let mut checked = 0;
        for (tile, slot) in vt.residency().resident_tiles() {
            let want = loader.transcode_tile(tile).unwrap();
            for r in 0..rows as usize {
                let at = (usize::from(slot.y) * pitch + margin + r) * pool_row
                    + (usize::from(slot.x) * pitch + margin) * per_unit;
                let (got, want) =
                    (&texels[at..at + row as usize], &want[r * row as usize..(r + 1) * row as usize]);
                assert!(got == want, "{name}: slot {slot:?} of {tile} differs from the tile at row {r}");
            }
            checked += 1;
        }
        assert!(checked > 20, "{name}: only {checked} resident tiles");
    }
}

/// An 8192² generated texture baked (LZ4) into `dir`, opened.
fn generated_atlas(dir: &std::path::Path, name: &str) -> std::sync::Arc<tessera_core::Atlas> {
    use tessera_core::bake::source::Generated;
    use tessera_core::bake::{BakeInput, BakeOptions, bake};
    let path = dir.join(format!("{name}.tsa"));
    let input = BakeInput::new(name, Generated::new(8192, 8192));
    bake(vec![input], &path, &BakeOptions::default(), &tessera_core::NoProgress).unwrap();
    std::sync::Arc::new(tessera_core::Atlas::open(&path).unwrap())
}

/// The tiles each frame's feedback requested, by the frame that recorded it, for the
/// built-in scene seen from frame 60 of the `flyover` preset (grazing: many mips and
/// the globe and cube over the ground), with feedback written to the colour
/// target or to the storage bitset.
fn requested_tiles(
    ctx: &GpuContext,
    atlas: &std::sync::Arc<tessera_core::Atlas>,
    feedback_target: bool,
    stride: u32,
) -> BTreeMap<u64, Vec<tessera_core::format::tile::TileId>> {
    let config = tessera::VtConfig {
        feedback_target,
        pool_mib: 64,
        streaming: tessera::StreamerConfig {
            feedback_stride: stride,
            auto_mip_bias: false,
            ..tessera::StreamerConfig::default()
        },
        ..tessera::VtConfig::default()
    };
    let mut vt = tessera::VirtualTextures::new(ctx, atlas.clone(), config).unwrap();
    let scene = tessera_tools::drawer_for(ctx, &vt, None).unwrap();
    let (w, h) = (960, 540);
    let out = tessera_tools::scene::OffscreenTarget::new(&ctx.device, w, h);
    let camera = tessera_core::scene::camera::CameraPath::preset("flyover").unwrap().camera_at(60);
    let mut seen = BTreeMap::new();
    for _ in 0..(stride * stride + 4) {
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let frame = vt.begin(ctx, &mut encoder);
        scene.set_camera(&ctx.queue, &camera, w as f32 / h as f32);
        scene.draw_vt(&mut encoder, &out.color_view, &out.depth_view, frame.vt(), None);
        frame.finish(ctx, encoder).unwrap();
        ctx.wait_idle().unwrap();
        if let Some(fb) = vt.last_feedback() {
            seen.insert(fb.frame, vt.streamer().layout().decode_sparse(&fb.pairs));
        }
    }
    seen
}

/// On a fixed view, the feedback target (each pixel's request written to an R32Uint
/// attachment, one pixel per block read by the resolve pass) requests the tiles the
/// storage path's atomics request, frame by frame and phase by phase.
#[test]
fn the_feedback_target_requests_what_the_storage_path_requests() {
    let ctx = gpu();
    let dir = tempfile::tempdir().unwrap();
    let atlas = generated_atlas(dir.path(), "fixed");
    for stride in [1, 4] {
        let storage = requested_tiles(ctx, &atlas, false, stride);
        let target = requested_tiles(ctx, &atlas, true, stride);
        let mut compared = 0;
        for (frame, tiles) in &target {
            let Some(expected) = storage.get(frame) else { continue };
            let only_target: Vec<_> = tiles.iter().filter(|t| !expected.contains(t)).collect();
            let only_storage: Vec<_> = expected.iter().filter(|t| !tiles.contains(t)).collect();
            assert!(
                only_target.is_empty() && only_storage.is_empty(),
                "stride {stride} frame {frame}: of {} tiles, {only_target:?} only through the target, \
                 {only_storage:?} only through storage",
                tiles.len()
            );
            assert!(tiles.len() >= 20, "stride {stride} frame {frame}: only {} tiles on screen", tiles.len());
            compared += 1;
        }
        assert!(compared >= 3, "stride {stride}: only {compared} frames arrived through both paths");
    }
}

/// With feedback through the colour target, each frame's statistics say which share of
/// the pixels was shown through a coarser tile than wanted: most of them on the first
/// frames (only the coarsest mip is resident), none once everything the view wants is
/// resident. Through the storage bitset nothing is measured.
#[test]
fn the_feedback_target_counts_the_pixels_shown_coarser() {
    let ctx = gpu();
    let dir = tempfile::tempdir().unwrap();
    let atlas = generated_atlas(dir.path(), "coarse");
    let camera = tessera_core::scene::camera::CameraPath::preset("flyover").unwrap().camera_at(60);
    let (w, h) = (640, 360);
    let out = tessera_tools::scene::OffscreenTarget::new(&ctx.device, w, h);
    for feedback_target in [true, false] {
        let config = tessera::VtConfig { feedback_target, pool_mib: 64, ..tessera::VtConfig::default() };
        let mut vt = tessera::VirtualTextures::new(ctx, atlas.clone(), config).unwrap();
        let scene = tessera_tools::drawer_for(ctx, &vt, None).unwrap();
        let mut shares = Vec::new();
        let mut settled = false;
        for _ in 0..200 {
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            let frame = vt.begin(ctx, &mut encoder);
            scene.set_camera(&ctx.queue, &camera, w as f32 / h as f32);
            scene.draw_vt(&mut encoder, &out.color_view, &out.depth_view, frame.vt(), None);
            let stats = frame.finish(ctx, encoder).unwrap();
            ctx.wait_idle().unwrap();
            if let Some(share) = stats.coarse_pixel_share {
                assert!((0.0..=1.0).contains(&share), "{share}");
                assert!(stats.coarse_pixel_frame <= stats.feedback_frame, "{stats:?}");
                shares.push(share);
                // Settled: this feedback found everything resident, and so did its pixels.
                if stats.resident_fraction >= 1.0 && stats.misses == 0 && share == 0.0 {
                    settled = true;
                    break;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        if !feedback_target {
            assert!(shares.is_empty(), "the storage path measured {shares:?}");
            continue;
        }
        assert!(
            shares.first().is_some_and(|&s| s > 0.5),
            "the first frames show mostly coarse tiles: {shares:?}"
        );
        assert!(settled, "never all pixels at their wanted mip: {shares:?}");
    }
}

/// A predicted view streams its tiles before the camera gets there: the camera holds a
/// wide view while the prediction shows a close-up of a ground corner; when the camera
/// cuts to the close-up, the first feedback of it finds everything resident. Without
/// the prediction the same cut finds the close-up's fine tiles missing.
#[test]
fn a_predicted_view_is_resident_before_the_camera_gets_there() {
    use tessera_core::scene::camera::CameraPath;
    let ctx = gpu();
    let dir = tempfile::tempdir().unwrap();
    let atlas = generated_atlas(dir.path(), "predicted");
    let wide = CameraPath::preset("static").unwrap().camera_at(0);
    let close = CameraPath::preset("cut").unwrap().camera_at(100);
    let (w, h) = (640, 360);
    let aspect = w as f32 / h as f32;
    let out = tessera_tools::scene::OffscreenTarget::new(&ctx.device, w, h);
    for prediction in [true, false] {
        let config = tessera::VtConfig {
            prediction,
            pool_mib: 64,
            streaming: tessera::StreamerConfig { auto_mip_bias: false, ..tessera::StreamerConfig::default() },
            ..tessera::VtConfig::default()
        };
        let mut vt = tessera::VirtualTextures::new(ctx, atlas.clone(), config).unwrap();
        let scene = tessera_tools::drawer_for(ctx, &vt, None).unwrap();
        let render = |vt: &mut tessera::VirtualTextures, camera, predicted: Option<_>| {
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            let frame = vt.begin(ctx, &mut encoder);
            if let Some(p) = predicted {
                scene.set_predicted_camera(&ctx.queue, p, aspect);
                scene.draw_predicted(&mut encoder, frame.vt(), (w / 2, h / 2));
            }
            scene.set_camera(&ctx.queue, camera, aspect);
            scene.draw_vt(&mut encoder, &out.color_view, &out.depth_view, frame.vt(), None);
            let number = frame.number();
            let stats = frame.finish(ctx, encoder).unwrap();
            ctx.wait_idle().unwrap();
            // The loader threads get time to read what was asked for.
            std::thread::sleep(std::time::Duration::from_millis(5));
            (number, stats)
        };
        let mut predicted_requests = 0;
        for _ in 0..40 {
            let (_, stats) = render(&mut vt, &wide, prediction.then_some(&close));
            predicted_requests += stats.predicted;
        }
        let (cut, _) = render(&mut vt, &close, None);
        let first = (0..20)
            .map(|_| render(&mut vt, &close, None).1)
            .find(|s| s.feedback_frame.is_some_and(|f| f >= cut))
            .expect("feedback of the close-up arrives");
        if prediction {
            assert!(predicted_requests > 10, "only {predicted_requests} predicted requests");
            assert!(
                first.resident_fraction >= 0.95 && first.coarse_pixel_share.is_some_and(|s| s < 0.05),
                "predicted: the close-up's first feedback found {:.1}% resident, {:?} of its pixels coarse",
                100.0 * first.resident_fraction,
                first.coarse_pixel_share
            );
        } else {
            assert_eq!(predicted_requests, 0);
            // The share of the cut frame's pixels shown coarser than they want: the
            // resident fraction alone is not a steady measure here, as it counts the
            // union of the last stride² readbacks, most of them the wide view's (all
            // resident), and on a loaded machine the loads of the cut's own requests may
            // land in the frame that reports them (60.8% idle, 100% under load on
            // lavapipe; 82% of the pixels coarse either way).
            assert!(
                first.coarse_pixel_share.is_some_and(|s| s > 0.3),
                "without prediction the close-up's first feedback found {:.1}% resident, {:?} of its pixels coarse",
                100.0 * first.resident_fraction,
                first.coarse_pixel_share
            );
        }
    }
}

/// A solid BC7 block (mode 6, both endpoints `rgba`, every index 0); each channel of
/// `rgba` even, so the p-bits are 0 and the block decodes to exactly `rgba`.
fn bc7_solid(rgba: [u8; 4]) -> [u8; 16] {
    let mut bits: u128 = 1 << 6; // mode 6
    let mut pos = 7;
    for c in rgba {
        let v = u128::from(c >> 1);
        bits |= (v | v << 7) << pos;
        pos += 14;
    }
    bits.to_le_bytes()
}

/// A solid BC1 block of the RGB565 colour `c` (both endpoints, every index 0).
fn bc1_solid(c: u16) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0..2].copy_from_slice(&c.to_le_bytes());
    b[2..4].copy_from_slice(&c.to_le_bytes());
    b
}

/// The RGBA8 texels of a decoded 4×4 block (texture2ddecoder writes BGRA in a u32).
fn decoded(block: &[u8], bc1: bool) -> [[u8; 4]; 16] {
    let mut out = [0u32; 16];
    if bc1 {
        texture2ddecoder::decode_bc1_block(block, &mut out);
    } else {
        texture2ddecoder::decode_bc7_block(block, &mut out);
    }
    out.map(|p| {
        let [b, g, r, a] = p.to_le_bytes();
        [r, g, b, a]
    })
}

/// Level 1 of a BC7 and a BC1 pool (hardware trilinear) holds each uploaded slot's 2×
/// downsample, encoded on the GPU: decoded on the CPU (an independent decoder), it is
/// within a few levels of the exact downsample of the tile's decoded texels, in linear
/// light for sRGB; slots never uploaded keep the unwritten colour.
#[test]
fn level_one_of_each_uploaded_bc_slot_is_its_tiles_downsample() {
    use tessera_core::bake::{linear_to_srgb, srgb_to_linear};
    let ctx = gpu();
    assert!(
        ctx.device.features().contains(wgpu::Features::TEXTURE_COMPRESSION_BC),
        "lavapipe samples BC textures; this adapter cannot ({})",
        ctx.describe()
    );
    for (target, color) in [
        (TargetFormat::Bc7, ColorSpace::Srgb),
        (TargetFormat::Bc7, ColorSpace::Linear),
        (TargetFormat::Bc1, ColorSpace::Srgb),
    ] {
        let bc1 = target == TargetFormat::Bc1;
        let pool =
            TilePool::with_grid(&ctx.device, &ctx.queue, (5, 3), (136, 0), target, &[color], 2).unwrap();
        assert_eq!(pool.levels(), 2, "{target:?}");
        let blocks = 34usize;
        // A gradient of solid blocks, different in every slot.
        let tile = |seed: usize| -> Vec<u8> {
            (0..blocks * blocks)
                .flat_map(|b| {
                    let (bx, by) = (b % blocks, b / blocks);
                    let r = ((bx * 3 + seed * 17) % 128) as u8 * 2;
                    let g = ((by * 3 + seed * 5) % 128) as u8 * 2;
                    let bl = ((bx + by + seed * 11) % 128) as u8 * 2;
                    if bc1 {
                        let c565 = (u16::from(r >> 3) << 11) | (u16::from(g >> 2) << 5) | u16::from(bl >> 3);
                        bc1_solid(c565).to_vec()
                    } else {
                        bc7_solid([r, g, bl, 254 - 2 * (bx % 8) as u8]).to_vec()
                    }
                })
                .collect()
        };
        let tiles: Vec<Vec<u8>> = (0..4).map(tile).collect();
        assert_eq!(tiles[0].len() as u64, pool.tile_bytes());
        let slots = [(4u16, 2u16), (0, 0), (2, 1), (1, 2)].map(|(x, y)| SlotCoord { x, y });
        let items: Vec<(SlotCoord, &[u8])> =
            slots.iter().copied().zip(tiles.iter().map(Vec::as_slice)).collect();
        pool.upload_batch(&ctx.device, &ctx.queue, &items[..1]);
        pool.upload_batch(&ctx.device, &ctx.queue, &items[1..]);
        let level1 = read_pool_level(ctx, &pool, 1);
        let block_bytes = if bc1 { 8 } else { 16 };
        let row = 5 * 17 * block_bytes;
        // Texel (x, y) of level 1 of slot (sx, sy), decoded.
        let texel = |sx: usize, sy: usize, x: usize, y: usize| {
            let (bx, by) = (sx * 17 + x / 4, sy * 17 + y / 4);
            let at = by * row + bx * block_bytes;
            decoded(&level1[at..at + block_bytes], bc1)[(y % 4) * 4 + x % 4]
        };
        type Conversions = (fn(u8) -> f32, fn(f32) -> u8);
        let (to_lin, from_lin): Conversions = match color {
            ColorSpace::Srgb => (srgb_to_linear, linear_to_srgb),
            ColorSpace::Linear => (|c| f32::from(c) / 255.0, |l| (l * 255.0 + 0.5).clamp(0.0, 255.0) as u8),
        };
        let (mut worst, mut squared, mut count) = (0u8, 0f64, 0f64);
        for (slot, tile) in slots.iter().zip(&tiles) {
            // Level 0 decoded: solid blocks, one colour per 4×4.
            let level0 = |x: usize, y: usize| {
                let b = (y / 4) * blocks + x / 4;
                decoded(&tile[b * block_bytes..(b + 1) * block_bytes], bc1)[0]
            };
            for y in 0..68 {
                for x in 0..68 {
                    let got = texel(usize::from(slot.x), usize::from(slot.y), x, y);
                    let four = [
                        level0(2 * x, 2 * y),
                        level0(2 * x + 1, 2 * y),
                        level0(2 * x, 2 * y + 1),
                        level0(2 * x + 1, 2 * y + 1),
                    ];
                    for c in 0..4 {
                        let want = if c == 3 {
                            ((four.iter().map(|t| u32::from(t[3])).sum::<u32>() + 2) / 4) as u8
                        } else {
                            from_lin(four.iter().map(|t| to_lin(t[c])).sum::<f32>() / 4.0)
                        };
                        let d = got[c].abs_diff(want);
                        worst = worst.max(d);
                        squared += f64::from(d) * f64::from(d);
                        count += 1.0;
                    }
                }
            }
        }
        let psnr = 10.0 * (255.0f64 * 255.0 / (squared / count).max(1e-9)).log10();
        eprintln!(
            "{target:?} {color:?}: level 1 against the exact downsample: {psnr:.1} dB, max error {worst}"
        );
        let (floor, max) = if bc1 { (38.0, 10) } else { (40.0, 6) };
        assert!(psnr >= floor && worst <= max, "{target:?} {color:?}: {psnr:.1} dB, max error {worst}");
        // A slot never uploaded still shows the unwritten colour at level 1.
        let unwritten = texel(3, 0, 30, 30);
        for c in 0..3 {
            assert!(unwritten[c].abs_diff(tessera::pool::UNWRITTEN[c]) <= 8, "{target:?}: {unwritten:?}");
        }
    }
}

/// With a parent resident, level 1 of a slot is its parent tile's quadrant, bit for bit:
/// in an RGBA8 pool copied at any offset, in a BC7 pool with the margin that puts the
/// quadrant on whole blocks (`pool_layout::slot_margin`), block for block. A slot whose
/// parent is out downsamples itself (its level 1 is then not the parent's texels).
/// A BC7 pool given the parent's bytes (as the host cache holds them) cuts the
/// quadrants on the CPU instead, and copies the level 1 of two slots one below the
/// other in one command: the same level 1, block for block.
#[test]
fn level_one_copies_the_parents_quadrant_exactly() {
    use tessera::pool::LevelOnes;
    use tessera_core::format::tile::TileId;
    use tessera_core::stream::level_one::{LevelOne, LevelOneSource};
    let ctx = gpu();
    let mut gpu_copied = None;
    for (target, margin, cut_on_cpu) in
        [(TargetFormat::Rgba8, 0u32, false), (TargetFormat::Bc7, 4, false), (TargetFormat::Bc7, 4, true)]
    {
        let pool = TilePool::with_grid(
            &ctx.device,
            &ctx.queue,
            (4, 2),
            (136, margin),
            target,
            &[ColorSpace::Srgb],
            2,
        )
        .unwrap();
        assert_eq!(pool.pitch(), 136 + 2 * margin);
        // Tiles of distinct bytes (BC7: every block a different solid colour).
        let tile = |seed: u32| -> Vec<u8> {
            match target {
                TargetFormat::Rgba8 => {
                    (0..136 * 136 * 4u32).map(|i| ((i * 7 + seed * 31) % 251) as u8).collect()
                }
                _ => (0..34 * 34u32)
                    .flat_map(|b| {
                        let v = |k: u32| (((b * k + seed * 13) % 127) * 2) as u8;
                        bc7_solid([v(3), v(5), v(7), 254])
                    })
                    .collect(),
            }
        };
        let (parent, child, orphan, sibling) = (tile(1), tile(2), tile(3), tile(4));
        let slots = [
            SlotCoord { x: 3, y: 1 },
            SlotCoord { x: 0, y: 0 },
            SlotCoord { x: 1, y: 1 },
            SlotCoord { x: 0, y: 1 },
        ];
        let up = TileId::new(0, 1, 0, 0);
        let from_parent = |quadrant| LevelOneSource::Parent { tile: up, slot: slots[0], quadrant };
        let ones = [
            LevelOne { slot: slots[0], source: LevelOneSource::Downsample },
            LevelOne { slot: slots[1], source: from_parent((1, 0)) },
            LevelOne { slot: slots[2], source: LevelOneSource::Downsample },
            LevelOne { slot: slots[3], source: from_parent((1, 1)) },
        ];
        let items: Vec<(SlotCoord, &[u8])> = [0, 1, 3, 2]
            .into_iter()
            .zip([&parent, &child, &sibling, &orphan].map(Vec::as_slice))
            .map(|(i, t)| (slots[i], t))
            .collect();
        let parent_bytes: std::sync::Arc<[u8]> = parent.clone().into();
        let bytes_of = |t: TileId| (t == up).then(|| parent_bytes.clone());
        let mut level_ones = LevelOnes::new(&ones, 4);
        if cut_on_cpu {
            level_ones.parents = Some((&bytes_of, 0));
        }
        // Level 0: the child and its sibling below it in one copy, the others one each.
        // Level 1 of those two: an RGBA8 pool draws it; a BC7 pool copies each quadrant
        // on the GPU, or both cut on the CPU in one copy.
        let commands = pool.upload_frame(&ctx.device, &ctx.queue, &items, &[], Some(level_ones));
        let level_one_copies = match (target, cut_on_cpu) {
            (TargetFormat::Rgba8, _) => 0,
            (_, false) => 2,
            (_, true) => 1,
        };
        assert_eq!(commands, 3 + level_one_copies, "{target:?}: copy commands");
        let level0 = read_pool_level(ctx, &pool, 0);
        let level1 = read_pool_level(ctx, &pool, 1);
        // Bytes of the texel (or block) row `y`, columns x..x + n (in texels), of a level.
        let (w0, _) = pool.texels();
        let unit = if target == TargetFormat::Rgba8 { 1 } else { 4 };
        let bytes = if target == TargetFormat::Rgba8 { 4 } else { 16 };
        let span = |level: &[u8], width: u32, x: u32, y: u32, n: u32| {
            let row = (width / unit * bytes) as usize;
            let at = (y / unit) as usize * row + (x / unit * bytes) as usize;
            level[at..at + (n / unit * bytes) as usize].to_vec()
        };
        let half = pool.pitch() / 2;
        let (px, py) = (3 * pool.pitch(), pool.pitch());
        // Quadrant (1, 0): from the parent's slot texel margin + border + 64 − (margin + border) / 2.
        let off = margin + 4 + 64 - (margin + 4) / 2;
        for y in (0..half).step_by(unit as usize) {
            assert_eq!(
                span(&level1, w0 / 2, 0, y, half),
                span(&level0, w0, px + off, py + (margin + 4) - (margin + 4) / 2 + y, half),
                "{target:?}: level-1 row {y} of the child is not the parent's quadrant"
            );
        }
        // The orphan's level 1 is its own downsample: not a copy of its level-0 texels.
        let (ox, oy) = (pool.pitch(), pool.pitch());
        assert_ne!(
            span(&level1, w0 / 2, half, half + 8, half),
            span(&level0, w0, ox, oy + 8, half),
            "{target:?}"
        );
        if target == TargetFormat::Bc7 {
            match gpu_copied.take() {
                None => gpu_copied = Some(level1),
                Some(copied) => {
                    assert!(copied == level1, "level 1 cut on the CPU differs from the GPU's copies")
                }
            }
        }
    }
}
