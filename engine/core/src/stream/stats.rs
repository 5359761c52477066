//! One serialisable snapshot of every tier's occupancy and counters, for HUDs and reports.

use serde::{Deserialize, Serialize};

use crate::format::atlas::Atlas;
use crate::stream::host_cache::{HostCache, HostCacheCounters};
use crate::stream::loader::{LoaderCounters, LoaderPool};

/// Occupancy of one storage tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierStats {
    /// Tiles held by the tier.
    pub tiles: u64,
    /// Bytes those tiles take.
    pub bytes: u64,
}

/// Counters of the GPU tile pool, filled in by the renderer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VramCounters {
    /// Tiles uploaded to the GPU so far.
    pub uploads: u64,
    /// Tiles evicted from the GPU pool so far.
    pub evictions: u64,
    /// Physical slots currently holding a tile.
    pub slots_used: u64,
    /// Physical slots in the pool.
    pub slots_total: u64,
}

/// Statistics of every tier at one moment: GPU memory, host cache, disk, loader.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatsSnapshot {
    /// Tiles resident in GPU memory.
    pub vram: TierStats,
    /// Tiles resident in the host cache.
    pub host: TierStats,
    /// Tiles stored in the atlas on disk.
    pub disk: TierStats,
    /// Host cache counters.
    pub host_cache: HostCacheCounters,
    /// Loader pool counters.
    pub loader: LoaderCounters,
    /// GPU pool counters.
    pub vram_counters: VramCounters,
    /// A remote atlas' network and disk-cache tiers (`None` for a local file).
    #[serde(default)]
    pub network: Option<crate::format::atlas::NetworkStats>,
}

impl StatsSnapshot {
    /// The host and disk tiers and the loader counters, read from the parts that
    /// own them; the VRAM tier is left for the renderer to fill in.
    pub fn gather(atlas: &Atlas, cache: &HostCache, loader: Option<&LoaderPool>) -> Self {
        let host_cache = cache.counters();
        Self {
            host: TierStats { tiles: host_cache.tiles, bytes: host_cache.bytes },
            disk: TierStats { tiles: atlas.tile_count(), bytes: atlas.stored_bytes() },
            host_cache,
            loader: loader.map(LoaderPool::counters).unwrap_or_default(),
            network: atlas.network_stats(),
            ..Self::default()
        }
    }

    /// Fraction of host cache lookups that hit, or 0 when there was no lookup.
    pub fn host_hit_rate(&self) -> f64 {
        self.host_cache.hit_rate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn json_round_trip_and_hit_rate() {
        let s = StatsSnapshot {
            vram: TierStats { tiles: 10, bytes: 10 << 16 },
            host: TierStats { tiles: 30, bytes: 30 << 16 },
            disk: TierStats { tiles: 5000, bytes: 1 << 30 },
            host_cache: HostCacheCounters {
                hits: 3,
                misses: 1,
                inserts: 4,
                evictions: 0,
                bytes: 30 << 16,
                tiles: 30,
                budget_bytes: 1 << 26,
            },
            loader: LoaderCounters { requested: 9, completed: 6, failed: 1, cancelled: 2 },
            vram_counters: VramCounters { uploads: 12, evictions: 2, slots_used: 10, slots_total: 64 },
            network: None,
        };
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"slots_total\":64"), "{json}");
        let back: StatsSnapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.host_hit_rate(), 0.75);
        assert_eq!(StatsSnapshot::default().host_hit_rate(), 0.0);
    }
}

/// What streaming did in one frame.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamFrame {
    /// Distinct tiles (with ancestors) the newest feedback asked for.
    pub tiles_needed: usize,
    /// Of those, tiles not resident in VRAM.
    pub misses: usize,
    /// Tiles uploaded this frame.
    pub uploads: usize,
    /// Of those, tiles copied straight from staging memory a loader thread wrote
    /// (the rest were copied into staging by the render thread).
    pub uploads_staged: usize,
    /// Copy commands the renderer recorded for this frame's uploads, all pools
    /// together: one per run of tiles bound for slots one below the other whose bytes
    /// follow each other in staging memory, and a block pool's level-1 copies (one per
    /// parent quadrant copied on the GPU, one per run of quadrants staged from the
    /// parents' bytes); 0 where no renderer counts them.
    pub upload_copies: usize,
    /// Tiles evicted from the pool this frame (with a produced atlas, also those that
    /// invalidations evicted since the previous frame).
    pub evictions: usize,
    /// Tiles resident in the pool.
    pub resident_vram: usize,
    /// Tiles resident in the host cache (the streamer's own partition of a shared one).
    pub resident_host: usize,
    /// Requests handed to the loader this frame.
    pub requests: usize,
    /// Frame whose feedback was used (none when no readback arrived).
    pub feedback_frame: Option<u64>,
    /// Frames between the one that drew the feedback used and this one (1: read back
    /// for the very next frame, as fast as a readback can be); none when no readback
    /// arrived.
    pub feedback_age: Option<u64>,
    /// CPU time spent decoding feedback and planning, milliseconds.
    pub feedback_ms: f64,
    /// CPU time spent issuing uploads and page-table writes, milliseconds.
    pub upload_ms: f64,
    /// Request-to-resident latency of the tiles uploaded this frame (from the frame
    /// whose feedback asked for them to the upload), milliseconds: mean and maximum
    /// (0 when nothing that was requested arrived).
    pub latency_ms_mean: f64,
    /// See [`StreamFrame::latency_ms_mean`].
    pub latency_ms_max: f64,
    /// The same latency in frames (upload frame − feedback frame): mean.
    pub latency_frames_mean: f64,
    /// Fraction (0 to 1) of the tiles the view wants (the latest feedback window, each
    /// tile at the mip its pixels asked for) that are resident themselves rather than
    /// shown through a coarser fallback, after this frame's uploads. 1 when nothing is
    /// wanted.
    pub resident_fraction: f64,
    /// True on the frame where `resident_fraction` reaches 1 after something was missing
    /// (the fraction was below 1, or this frame's feedback missed tiles that arrived
    /// within the frame): the "fully resident" event (everything visible is at its
    /// wanted resolution).
    pub became_fully_resident: bool,
    /// The automatic mip bias in effect for this frame (0 without oversubscription).
    pub auto_mip_bias: f32,
    /// The upload budget (tiles) for this frame, the burst slice included.
    pub upload_budget: usize,
    /// The cap a burst slice put on this frame's uploads
    /// ([`crate::stream::streamer::StreamerConfig::upload_slice_ms`]), once priced.
    pub upload_slice_tiles: Option<usize>,
    /// Prefetch requests (neighbours, regions) handed to the loader this frame.
    pub prefetches: usize,
    /// Requests for a predicted view's tiles (`FrameInput::predicted`) handed to the
    /// loader this frame.
    pub predicted: usize,
    /// Tiles a remote atlas could not deliver for now (network or server failure),
    /// shown through their ancestors and waiting to be asked for again.
    pub tiles_unavailable: usize,
    /// Share (0 to 1) of the pixels the newest feedback read (one per feedback block)
    /// that were shown through a coarser tile than the one they wanted: how blurry the
    /// view recorded at [`StreamFrame::coarse_pixel_frame`] was. Measured by the
    /// feedback target's resolve pass; `None` with feedback through the storage bitset,
    /// when no feedback arrived this frame, or when no pixel of it sampled a texture.
    pub coarse_pixel_share: Option<f64>,
    /// The frame whose pixels [`StreamFrame::coarse_pixel_share`] counts.
    pub coarse_pixel_frame: Option<u64>,
    /// Complete page table: rectangles of entries rewritten on the GPU this frame.
    pub table_jobs: usize,
    /// Complete page table: entries those rectangles cover (what the GPU pass reads).
    pub table_entries: u64,
    /// A remote atlas' request counters so far (`None` for a local file).
    pub network: Option<crate::format::atlas::NetworkStats>,
    /// The same counters for this frame alone (since the previous frame's snapshot; in
    /// flight, latencies and bytes held as now).
    #[serde(default)]
    pub network_frame: Option<crate::format::atlas::NetworkStats>,
    /// A produced atlas ([`crate::stream::produce`]): tiles produced into new slots
    /// this frame (`FramePlan::produce` entries with `refresh: false`; they are not
    /// counted in `uploads`).
    pub produced: usize,
    /// A produced atlas: invalidated tiles produced again in place this frame.
    pub refreshed: usize,
    /// A produced atlas: resident tiles invalidated and not yet produced again, after
    /// this frame's plan.
    pub stale_tiles: usize,
    /// A produced atlas: frames since the oldest of those was invalidated (0 without one).
    pub oldest_stale_frames: u64,
    /// A produced atlas: the most tiles this frame could produce, new and refreshed
    /// together (0 for an atlas read from a file).
    pub production_budget: usize,
}
