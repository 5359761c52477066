//! The overlay's data model: what each panel shows, computed from a
//! [`StatsSnapshot`], the residency sets and a rolling history of frame samples.

use std::collections::{HashSet, VecDeque};

use tessera_core::TileId;
use tessera_core::stats::StatsSnapshot;
use tessera_core::tile::TextureLayout;

/// Where a tile lives, from the fastest tier that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileState {
    /// In the GPU pool.
    Vram,
    /// Requested from the loader or loaded and waiting for a slot.
    InFlight,
    /// In the host cache only.
    Host,
    /// Only in the atlas on disk.
    Disk,
}

impl TileState {
    /// The colour the residency maps use (RGBA, sRGB).
    pub fn color(self) -> [u8; 4] {
        match self {
            Self::Vram => [64, 200, 96, 255],
            Self::InFlight => [240, 190, 40, 255],
            Self::Host => [60, 130, 230, 255],
            Self::Disk => [48, 48, 56, 255],
        }
    }

    /// Short name for legends.
    pub fn label(self) -> &'static str {
        match self {
            Self::Vram => "VRAM",
            Self::InFlight => "requested / in flight",
            Self::Host => "host only",
            Self::Disk => "disk only",
        }
    }

    /// Every state, in legend order.
    pub const ALL: [Self; 4] = [Self::Vram, Self::InFlight, Self::Host, Self::Disk];
}

/// The residency of one mip of one layer: a `tiles_x × tiles_y` grid, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct MipMap {
    /// Mip level (0 = finest).
    pub mip: u32,
    /// Tiles across.
    pub tiles_x: u32,
    /// Tiles down.
    pub tiles_y: u32,
    /// One state per tile, row-major.
    pub states: Vec<TileState>,
}

impl MipMap {
    /// How many tiles are in `state`.
    pub fn count(&self, state: TileState) -> usize {
        self.states.iter().filter(|&&s| s == state).count()
    }

    /// The map as RGBA8 pixels, one per tile, row-major (for an image widget).
    pub fn rgba(&self) -> Vec<u8> {
        self.states.iter().flat_map(|s| s.color()).collect()
    }
}

/// Per-mip residency maps of one layer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResidencySnapshot {
    /// The layer shown.
    pub layer: u16,
    /// One map per mip, finest first; mips with more than `max_tiles` tiles are left out.
    pub mips: Vec<MipMap>,
}

impl ResidencySnapshot {
    /// Classifies every tile of `layer` (laid out as `layout`) by the fastest tier
    /// holding it. Mips with more than `max_tiles` tiles are skipped (too big to draw
    /// every frame). Tiles of other layers in the inputs are ignored.
    pub fn build(
        layout: &TextureLayout,
        layer: u16,
        vram: impl IntoIterator<Item = TileId>,
        in_flight: impl IntoIterator<Item = TileId>,
        host: impl IntoIterator<Item = TileId>,
        max_tiles: u64,
    ) -> Self {
        let set = |it: &mut dyn Iterator<Item = TileId>| -> HashSet<TileId> {
            it.filter(|t| t.layer == layer).collect()
        };
        let vram = set(&mut vram.into_iter());
        let in_flight = set(&mut in_flight.into_iter());
        let host = set(&mut host.into_iter());
        let mips = (0..layout.mip_count())
            .filter(|&m| layout.tile_count_at(m) <= max_tiles)
            .map(|m| {
                let (tx, ty) = layout.tiles_at(m);
                let states = (0..ty)
                    .flat_map(|y| (0..tx).map(move |x| TileId::new(layer, m as u8, x, y)))
                    .map(|t| {
                        if vram.contains(&t) {
                            TileState::Vram
                        } else if in_flight.contains(&t) {
                            TileState::InFlight
                        } else if host.contains(&t) {
                            TileState::Host
                        } else {
                            TileState::Disk
                        }
                    })
                    .collect();
                MipMap { mip: m, tiles_x: tx, tiles_y: ty, states }
            })
            .collect();
        Self { layer, mips }
    }
}

/// What one frame did, for the rolling plots.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FrameSample {
    /// Frame time, milliseconds.
    pub frame_ms: f64,
    /// Tiles uploaded this frame.
    pub uploads: usize,
    /// Needed tiles missing from VRAM this frame.
    pub misses: usize,
    /// Host cache hit rate so far, `0..=1`.
    pub host_hit_rate: f64,
}

/// A rolling window of frame samples and timed statistics, from which rates come.
#[derive(Clone, Debug)]
pub struct History {
    capacity: usize,
    samples: VecDeque<FrameSample>,
    stats: VecDeque<(f64, StatsSnapshot)>,
    rate_window_s: f64,
}

impl Default for History {
    fn default() -> Self {
        Self::new(240, 1.0)
    }
}

impl History {
    /// Keeps the last `capacity` frames; rates are averaged over about `rate_window_s` seconds.
    pub fn new(capacity: usize, rate_window_s: f64) -> Self {
        Self {
            capacity: capacity.max(2),
            samples: VecDeque::new(),
            stats: VecDeque::new(),
            rate_window_s: rate_window_s.max(1e-3),
        }
    }

    /// Records a frame at time `t_s` (seconds, monotonic).
    pub fn push(&mut self, t_s: f64, stats: &StatsSnapshot, sample: FrameSample) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        self.stats.push_back((t_s, stats.clone()));
        // Keep one snapshot older than the window so the rate spans the whole window.
        while self.stats.len() > 2 && t_s - self.stats[1].0 >= self.rate_window_s {
            self.stats.pop_front();
        }
    }

    /// The frame samples, oldest first.
    pub fn samples(&self) -> impl ExactSizeIterator<Item = &FrameSample> {
        self.samples.iter()
    }

    /// Per-second rate of the counter `f` between the oldest and newest snapshots.
    fn rate(&self, f: impl Fn(&StatsSnapshot) -> u64) -> f64 {
        match (self.stats.front(), self.stats.back()) {
            (Some((t0, a)), Some((t1, b))) if t1 > t0 => f(b).saturating_sub(f(a)) as f64 / (t1 - t0),
            _ => 0.0,
        }
    }
}

/// Everything the overlay's panels show.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OverlayModel {
    /// VRAM pool slots holding a tile.
    pub vram_slots_used: u64,
    /// VRAM pool slots in all.
    pub vram_slots_total: u64,
    /// Bytes of the resident tiles.
    pub vram_bytes: u64,
    /// Evictions from the pool per second.
    pub evictions_per_s: f64,
    /// Uploads to the pool per second.
    pub uploads_per_s: f64,
    /// Tiles in the host cache.
    pub host_tiles: u64,
    /// Bytes in the host cache.
    pub host_bytes: u64,
    /// Host cache budget in bytes.
    pub host_budget_bytes: u64,
    /// Host cache hit rate so far, `0..=1`.
    pub host_hit_rate: f64,
    /// Tiles in the atlas on disk.
    pub disk_tiles: u64,
    /// Bytes of those tiles.
    pub disk_bytes: u64,
    /// Tiles read by the loader per second.
    pub reads_per_s: f64,
    /// Loads that failed so far.
    pub failed_loads: u64,
    /// Per-mip residency maps.
    pub residency: ResidencySnapshot,
    /// Rolling series, oldest first: frame ms, uploads, misses, host hit rate (%).
    pub frame_ms: Vec<f64>,
    /// Uploads per frame.
    pub uploads: Vec<f64>,
    /// Misses per frame.
    pub misses: Vec<f64>,
    /// Host hit rate per frame, percent.
    pub hit_rate_pct: Vec<f64>,
}

impl OverlayModel {
    /// The model for the newest `stats`, the residency maps and the rolling `history`.
    pub fn from_stats(stats: &StatsSnapshot, residency: ResidencySnapshot, history: &History) -> Self {
        let series = |f: fn(&FrameSample) -> f64| history.samples().map(f).collect::<Vec<_>>();
        Self {
            vram_slots_used: stats.vram_counters.slots_used,
            vram_slots_total: stats.vram_counters.slots_total,
            vram_bytes: stats.vram.bytes,
            evictions_per_s: history.rate(|s| s.vram_counters.evictions),
            uploads_per_s: history.rate(|s| s.vram_counters.uploads),
            host_tiles: stats.host.tiles,
            host_bytes: stats.host.bytes,
            host_budget_bytes: stats.host_cache.budget_bytes,
            host_hit_rate: stats.host_hit_rate(),
            disk_tiles: stats.disk.tiles,
            disk_bytes: stats.disk.bytes,
            reads_per_s: history.rate(|s| s.loader.completed),
            failed_loads: stats.loader.failed,
            residency,
            frame_ms: series(|s| s.frame_ms),
            uploads: series(|s| s.uploads as f64),
            misses: series(|s| s.misses as f64),
            hit_rate_pct: series(|s| 100.0 * s.host_hit_rate),
        }
    }

    /// Fraction of the VRAM pool in use, `0..=1`.
    pub fn vram_fill(&self) -> f64 {
        ratio(self.vram_slots_used, self.vram_slots_total)
    }

    /// Fraction of the host budget in use, `0..=1` (more when over budget).
    pub fn host_fill(&self) -> f64 {
        ratio(self.host_bytes, self.host_budget_bytes)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::stats::{TierStats, VramCounters};

    fn stats(evictions: u64, uploads: u64, reads: u64) -> StatsSnapshot {
        let mut s = StatsSnapshot {
            vram: TierStats { tiles: 10, bytes: 10 << 16 },
            host: TierStats { tiles: 30, bytes: 30 << 16 },
            disk: TierStats { tiles: 5000, bytes: 1 << 30 },
            vram_counters: VramCounters { uploads, evictions, slots_used: 10, slots_total: 40 },
            ..StatsSnapshot::default()
        };
        s.host_cache.hits = 3;
        s.host_cache.misses = 1;
        s.host_cache.budget_bytes = 60 << 16;
        s.loader.completed = reads;
        s
    }

    #[test]
    fn panels_show_tiers_and_rates_from_counter_deltas() {
        let mut h = History::new(100, 1.0);
        h.push(
            0.0,
            &stats(0, 0, 0),
            FrameSample { frame_ms: 16.0, uploads: 5, misses: 7, host_hit_rate: 0.5 },
        );
        h.push(0.5, &stats(10, 40, 20), FrameSample::default());
        h.push(2.0, &stats(40, 100, 80), FrameSample { frame_ms: 20.0, ..FrameSample::default() });
        let m = OverlayModel::from_stats(&stats(40, 100, 80), ResidencySnapshot::default(), &h);
        assert_eq!((m.vram_slots_used, m.vram_slots_total, m.vram_bytes), (10, 40, 10 << 16));
        assert_eq!(m.vram_fill(), 0.25);
        assert_eq!((m.host_tiles, m.host_bytes, m.host_budget_bytes), (30, 30 << 16, 60 << 16));
        assert_eq!(m.host_fill(), 0.5);
        assert_eq!(m.host_hit_rate, 0.75);
        assert_eq!((m.disk_tiles, m.disk_bytes), (5000, 1 << 30));
        // The snapshot at 0.0 fell out of the 1 s window; rates span 0.5 .. 2.0.
        assert_eq!(m.evictions_per_s, 20.0);
        assert_eq!(m.uploads_per_s, 40.0);
        assert_eq!(m.reads_per_s, 40.0);
        assert_eq!(m.frame_ms, vec![16.0, 0.0, 20.0]);
        assert_eq!(m.uploads, vec![5.0, 0.0, 0.0]);
        assert_eq!(m.misses, vec![7.0, 0.0, 0.0]);
        assert_eq!(m.hit_rate_pct, vec![50.0, 0.0, 0.0]);
    }

    #[test]
    fn rates_are_zero_without_elapsed_time_and_history_is_bounded() {
        let mut h = History::new(3, 1.0);
        let m = OverlayModel::from_stats(&StatsSnapshot::default(), ResidencySnapshot::default(), &h);
        assert_eq!((m.evictions_per_s, m.reads_per_s, m.vram_fill(), m.host_fill()), (0.0, 0.0, 0.0, 0.0));
        for i in 0..10 {
            h.push(0.0, &stats(i, i, i), FrameSample { uploads: i as usize, ..FrameSample::default() });
        }
        let m = OverlayModel::from_stats(&stats(9, 9, 9), ResidencySnapshot::default(), &h);
        assert_eq!(m.uploads, vec![7.0, 8.0, 9.0]);
        assert_eq!(m.evictions_per_s, 0.0);
    }

    #[test]
    fn residency_map_colours_each_tile_by_its_fastest_tier() {
        // 1024² with 256² tiles: mips of 4×4, 2×2, 1×1 tiles.
        let layout = TextureLayout::new(1024, 1024, 256, 4).expect("layout");
        assert_eq!(layout.mip_count(), 3);
        let vram = [TileId::new(0, 2, 0, 0), TileId::new(0, 0, 1, 0), TileId::new(1, 0, 3, 3)];
        let flight = [TileId::new(0, 0, 2, 0), TileId::new(0, 0, 1, 0)];
        let host = [TileId::new(0, 0, 2, 0), TileId::new(0, 1, 1, 1), TileId::new(0, 0, 0, 3)];
        let snap = ResidencySnapshot::build(&layout, 0, vram, flight, host, 1 << 20);
        assert_eq!(snap.mips.len(), 3);
        let m0 = &snap.mips[0];
        assert_eq!((m0.mip, m0.tiles_x, m0.tiles_y, m0.states.len()), (0, 4, 4, 16));
        assert_eq!(m0.states[1], TileState::Vram, "VRAM wins over in flight");
        assert_eq!(m0.states[2], TileState::InFlight, "in flight wins over host");
        assert_eq!(m0.states[12], TileState::Host);
        assert_eq!(m0.states[15], TileState::Disk, "other layers are ignored");
        assert_eq!(
            [TileState::Vram, TileState::InFlight, TileState::Host, TileState::Disk].map(|s| m0.count(s)),
            [1, 1, 1, 13]
        );
        assert_eq!(snap.mips[1].states[3], TileState::Host);
        assert_eq!(snap.mips[2].states, vec![TileState::Vram]);
        let rgba = m0.rgba();
        assert_eq!(rgba.len(), 16 * 4);
        assert_eq!(rgba[4..8], TileState::Vram.color());
        // Large mips are left out.
        let small = ResidencySnapshot::build(&layout, 0, [], [], [], 4);
        assert_eq!(small.mips.iter().map(|m| m.mip).collect::<Vec<_>>(), vec![1, 2]);
    }
}
