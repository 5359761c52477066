//! End-to-end streaming throughput, disk → VRAM: loader threads read, CRC-check and
//! transcode tiles of an atlas (host cache cold) while the calling thread uploads the
//! finished tiles in batches, each into its own slot of a tile pool, until every
//! requested tile is resident.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tessera_core::format::codec::TargetFormat;
use tessera_core::stream::loader::{LoadOutcome, LoaderConfig, LoaderPool};
use tessera_core::stream::page_table::SlotCoord;
use tessera_core::stream::staging::{StagedTile, StagingLayout};
use tessera_core::{Atlas, AtlasLoader, HostCache, TileId};

use tessera::GpuContext;
use tessera::RenderError;
use tessera::pool::{TilePool, format_support};
use tessera::staging::GpuStaging;
use tessera::wgpu;

/// Tiles per upload batch (one staging copy and one submission each).
const SUBMIT_EVERY: usize = 64;

/// What to stream.
#[derive(Clone, Debug)]
pub(crate) struct StreamBenchConfig {
    /// The tiles to make resident (duplicates are streamed once).
    pub tiles: Vec<TileId>,
    /// Loader threads (0 = one per core).
    pub threads: usize,
    /// Force the pool's format (default: the best the adapter and the atlas allow).
    pub pool_format: Option<TargetFormat>,
    /// Rounds (each with an emptied host cache) are repeated until this much time has passed.
    pub min_duration: Duration,
    /// MiB of staging memory the loader threads write tiles into (0: the bench thread
    /// copies every tile into staging, as before zero-copy staging).
    pub staging_mib: u32,
}

impl Default for StreamBenchConfig {
    fn default() -> Self {
        Self {
            tiles: Vec::new(),
            threads: 0,
            pool_format: None,
            min_duration: Duration::from_millis(500),
            staging_mib: tessera::staging::DEFAULT_STAGING_MIB,
        }
    }
}

/// What a streaming run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct StreamReport {
    /// The adapter.
    pub adapter: String,
    /// The pool's texel format (what the loaders transcoded to).
    pub target: TargetFormat,
    /// Loader threads.
    pub threads: usize,
    /// Distinct tiles made resident per round.
    pub tiles_per_round: usize,
    /// Rounds run.
    pub rounds: u32,
    /// Tiles streamed over all rounds.
    pub tiles: u64,
    /// Wall time of all rounds, from the first request to the GPU being idle after the last upload.
    pub seconds: f64,
    /// `tiles / seconds`.
    pub tiles_per_s: f64,
    /// Bytes uploaded per second, MiB.
    pub upload_mib_per_s: f64,
    /// Slots of the pool (tiles beyond them reuse slots).
    pub pool_slots: u32,
    /// Tiles copied from staging memory a loader thread wrote (the rest were copied
    /// into staging by the bench thread).
    #[serde(default)]
    pub staged: u64,
    /// GPU bytes of the pool.
    pub pool_bytes: u64,
}

/// The smallest pool size in MiB whose slot grid ([`TilePool::new`]'s arithmetic) holds at
/// least `slots` slots of `slot_bytes`, or as many as `max_side × max_side` allows.
pub(crate) fn pool_mib_for(slots: u64, slot_bytes: u64, max_side: u32) -> u32 {
    let fits = |mib: u64| {
        let (sx, sy) = tessera::pool::slot_grid(mib.min(u64::from(u32::MAX)) as u32, slot_bytes, max_side);
        let n = u64::from(sx) * u64::from(sy);
        n >= slots.max(2) || n >= u64::from(max_side).pow(2)
    };
    let mut mib = (slots.max(2) * slot_bytes).div_ceil(1 << 20).max(1);
    while !fits(mib) && mib < u64::from(u32::MAX) {
        mib += 1;
    }
    mib.min(u64::from(u32::MAX)) as u32
}

/// Streams `cfg.tiles` of `atlas` from disk into a new pool on `ctx`, in rounds, and
/// reports the rate. Every round empties the host cache, requests every tile from the
/// loader pool, uploads each result as it arrives and waits for the GPU.
pub(crate) fn stream(
    ctx: &GpuContext,
    atlas: Arc<Atlas>,
    cfg: &StreamBenchConfig,
) -> Result<StreamReport, RenderError> {
    let mut tiles = cfg.tiles.clone();
    tiles.sort_unstable();
    tiles.dedup();
    let layers = atlas.layers();
    let slot = layers.first().map(|l| l.layout.padded_tile_size()).unwrap_or(0);
    if tiles.is_empty() || slot == 0 {
        return Err(RenderError::Config("nothing to stream: no tiles given".into()));
    }
    let codecs: Vec<_> = layers.iter().map(|l| l.codec).collect();
    let target = tessera_core::format::pool_format::select(&codecs, format_support(ctx), cfg.pool_format)
        .map_err(|e| RenderError::Config(format!("{}: {e}", atlas.path().display())))?;
    let slot_bytes = target.bytes_per_tile(slot) as u64;
    let max_side = ctx.device.limits().max_texture_dimension_2d / slot;
    let mib = pool_mib_for(tiles.len() as u64, slot_bytes, max_side);
    let pool = TilePool::new(&ctx.device, &ctx.queue, mib, slot, target)?;
    ctx.wait_idle()?;
    let threads = if cfg.threads == 0 {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    } else {
        cfg.threads
    };
    let cache = Arc::new(HostCache::new(u64::MAX / 4));
    let loader = LoaderPool::new(
        Arc::new(AtlasLoader::with_target(atlas.clone(), cache.clone(), target)),
        threads,
        LoaderConfig::default(),
    )
    .map_err(|e| RenderError::Config(format!("starting loader threads: {e}")))?;
    let mut staging = (cfg.staging_mib > 0).then(|| {
        let layout = StagingLayout::with_margins(&[pool.staged_rows()], wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        GpuStaging::new(&ctx.device, layout, cfg.staging_mib)
    });
    loader.set_staging(staging.as_ref().map(|s| Arc::clone(s.ring())));
    let (mut rounds, mut streamed, mut busy, mut staged) = (0u32, 0u64, Duration::ZERO, 0u64);
    while rounds == 0 || busy < cfg.min_duration {
        cache.clear();
        let start = Instant::now();
        let (n, s) = stream_round(ctx, &loader, &pool, staging.as_mut(), &tiles)?;
        streamed += n;
        staged += s;
        busy += start.elapsed();
        rounds += 1;
    }
    drop(loader);
    let seconds = busy.as_secs_f64();
    Ok(StreamReport {
        adapter: ctx.describe(),
        target,
        threads,
        tiles_per_round: tiles.len(),
        rounds,
        tiles: streamed,
        seconds,
        tiles_per_s: streamed as f64 / seconds,
        upload_mib_per_s: (streamed * slot_bytes) as f64 / seconds / f64::from(1 << 20),
        pool_slots: pool.slot_count(),
        staged,
        pool_bytes: pool.bytes(),
    })
}

/// One round: request every tile, upload each as it arrives, wait for the GPU. Returns
/// the tiles streamed and how many of them were copied from staging.
fn stream_round(
    ctx: &GpuContext,
    loader: &LoaderPool,
    pool: &TilePool,
    mut staging: Option<&mut GpuStaging>,
    tiles: &[TileId],
) -> Result<(u64, u64), RenderError> {
    let queued = tiles.iter().filter(|&&t| loader.request(t, 0, 0)).count();
    let (sx, slots) = (pool.slots_x() as usize, pool.slot_count() as usize);
    let mut staged_total = 0u64;
    // Tiles go up in batches (one submission per batch), as the renderer's per-frame
    // uploads do: staged tiles straight from the loader threads' staging memory.
    type Batch = Vec<(SlotCoord, Arc<[u8]>, Option<StagedTile>)>;
    let mut batch: Batch = Vec::with_capacity(SUBMIT_EVERY);
    let mut flush = |batch: &mut Batch, staging: Option<&mut GpuStaging>| {
        let items: Vec<(SlotCoord, &[u8])> =
            batch.iter().filter(|(_, _, t)| t.is_none()).map(|(s, b, _)| (*s, &b[..])).collect();
        match staging {
            Some(staging) => {
                staging.maintain();
                let staged: Vec<(SlotCoord, &StagedTile)> =
                    batch.iter().filter_map(|(s, _, t)| Some((*s, t.as_ref()?))).collect();
                let copies = staging.copies(0, &staged);
                pool.upload_mixed(&ctx.device, &ctx.queue, &items, &copies);
                drop(copies);
                staged_total += staged.len() as u64;
                staging.retire(&ctx.queue, staged.into_iter().map(|(_, t)| t.clone()).collect());
                let _ = ctx.device.poll(wgpu::PollType::Poll);
            }
            None => pool.upload_batch(&ctx.device, &ctx.queue, &items),
        }
        batch.clear();
    };
    for i in 0..queued {
        let result =
            loader.results().recv().map_err(|e| RenderError::Config(format!("loader pool stopped: {e}")))?;
        let bytes = match result.outcome {
            LoadOutcome::Ready(bytes) => bytes,
            LoadOutcome::Failed(e) => return Err(RenderError::Config(format!("loading a tile: {e}"))),
            LoadOutcome::Cancelled => {
                return Err(RenderError::Config(format!("loading {} was cancelled", result.tile)));
            }
        };
        let s = i % slots;
        batch.push((SlotCoord { x: (s % sx) as u16, y: (s / sx) as u16 }, bytes, result.staged));
        if batch.len() == SUBMIT_EVERY {
            flush(&mut batch, staging.as_deref_mut());
        }
    }
    flush(&mut batch, staging.as_deref_mut());
    ctx.wait_idle()?;
    if let Some(staging) = staging {
        staging.maintain();
    }
    Ok((queued as u64, staged_total))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mirrors the slot grid [`TilePool::new`] makes of `mib`.
    fn slots(mib: u32, slot_bytes: u64, max_side: u32) -> u64 {
        let (sx, sy) = tessera::pool::slot_grid(mib, slot_bytes, max_side);
        u64::from(sx) * u64::from(sy)
    }

    #[test]
    fn pool_size_holds_every_tile() {
        let rgba = TargetFormat::Rgba8.bytes_per_tile(136) as u64;
        let bc7 = TargetFormat::Bc7.bytes_per_tile(136) as u64;
        for n in [1u64, 2, 3, 64, 255, 256, 257, 1000, 3655] {
            for b in [rgba, bc7] {
                let mib = pool_mib_for(n, b, 120);
                assert!(slots(mib, b, 120) >= n, "{n} tiles of {b} bytes: {mib} MiB");
                assert!(mib == 1 || slots(mib - 1, b, 120) < n.max(2), "{n} tiles of {b} bytes: {mib} MiB");
            }
        }
        // More tiles than the largest texture holds: the largest pool, slots are reused.
        let mib = pool_mib_for(20_000, bc7, 120);
        assert_eq!(slots(mib, bc7, 120), 120 * 120);
    }
}
