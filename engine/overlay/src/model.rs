//! The overlay's data model: what each panel shows, computed from a
//! [`StatsSnapshot`], the residency sets and a rolling history of frame samples, plus
//! the progress of a bake running in the background.

use std::collections::{HashSet, VecDeque};

use tessera_core::format::tile::TextureLayout;
use tessera_core::stream::host_cache::HostCache;
use tessera_core::stream::residency::Residency;
use tessera_core::stream::stats::StatsSnapshot;
use tessera_core::{Atlas, TileId};

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

/// Which layer's residency maps to show: `wanted` when the atlas has that many layers,
/// else its last layer (a newly opened atlas may have fewer layers than the last one).
/// Stacked layers share layer 0's tile ids, so only layer 0 has maps of its own.
pub fn shown_layer(wanted: u16, layer_count: usize, stacked: bool) -> u16 {
    if stacked {
        return 0;
    }
    let last = u16::try_from(layer_count.saturating_sub(1)).unwrap_or(u16::MAX);
    wanted.min(last)
}

/// The note shown instead of the layer selector for stacked atlases.
pub const STACKED_NOTE: &str = "stacked: layers share residency";

/// Request-to-resident latency of the tiles that reached VRAM in one frame: from the
/// frame whose feedback asked for them to their upload.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// Mean over the tiles that arrived, milliseconds.
    pub mean_ms: f64,
    /// The slowest tile that arrived, milliseconds.
    pub max_ms: f64,
    /// Mean in frames (upload frame − feedback frame).
    pub mean_frames: f64,
}

impl Latency {
    /// The latency of a frame from the engine's figures, which are all 0 when nothing
    /// requested arrived that frame: `None` then (and for non-finite figures), so such
    /// frames are left out of the plot instead of drawing as 0.
    pub fn from_frame(mean_ms: f64, max_ms: f64, mean_frames: f64) -> Option<Self> {
        let finite = mean_ms.is_finite() && max_ms.is_finite() && mean_frames.is_finite();
        let arrived = mean_ms > 0.0 || max_ms > 0.0 || mean_frames > 0.0;
        (finite && arrived).then_some(Self { mean_ms, max_ms: max_ms.max(mean_ms), mean_frames })
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
    /// Request-to-resident latency of the tiles that arrived this frame; `None` when
    /// none did.
    pub latency: Option<Latency>,
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
    pub fn samples(&self) -> impl DoubleEndedIterator<Item = &FrameSample> + ExactSizeIterator {
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
    /// A remote atlas' network and disk-cache tiers (`None` for a local file).
    pub network: Option<tessera_core::format::atlas::NetworkStats>,
    /// Per-mip residency maps of the layer shown.
    pub residency: ResidencySnapshot,
    /// Names of the atlas' layers, for the layer selector of the residency maps.
    pub layer_names: Vec<String>,
    /// The atlas' layers are stacked (they share layer 0's tile ids and residency).
    pub stacked: bool,
    /// The atlas is a TIFF (a Cloud Optimized GeoTIFF) streamed without a bake.
    pub unbaked_tiff: bool,
    /// A produced atlas (runtime virtual textures): its tiles are drawn on the GPU, and
    /// this tier replaces the host cache and the disk.
    pub produced: Option<tessera_core::stream::produce::ProductionStats>,
    /// Rolling series, oldest first: frame ms, uploads, misses, host hit rate (%).
    pub frame_ms: Vec<f64>,
    /// Uploads per frame.
    pub uploads: Vec<f64>,
    /// Misses per frame.
    pub misses: Vec<f64>,
    /// Host hit rate per frame, percent.
    pub hit_rate_pct: Vec<f64>,
    /// Mean request-to-resident latency, ms, as `[frame index, ms]` points on the same
    /// frame axis as the other series; frames where nothing arrived are left out.
    pub latency_mean_ms: Vec<[f64; 2]>,
    /// Largest request-to-resident latency per frame, ms, like `latency_mean_ms`.
    pub latency_max_ms: Vec<[f64; 2]>,
    /// The latency of the newest frame in the history where tiles arrived.
    pub latency_last: Option<Latency>,
}

/// Most tiles in a residency map drawn every frame; finer mips are left out.
pub const MAX_MAP_TILES: u64 = 8192;

impl OverlayModel {
    /// The model of a streamed atlas' frame, with the residency maps of layer `wanted`
    /// (or the atlas' last layer when it has fewer): tiles in VRAM and in flight from
    /// `residency`, in host RAM from `host`, at most [`MAX_MAP_TILES`] a map. What the
    /// native viewer and the web page both show.
    pub fn of_streaming(
        atlas: &Atlas,
        residency: &Residency,
        host: &HostCache,
        stats: &StatsSnapshot,
        history: &History,
        wanted: u16,
    ) -> Self {
        let (layers, stacked) = (atlas.layers(), atlas.is_stacked());
        let layer = shown_layer(wanted, layers.len(), stacked);
        let snapshot = match layers.get(usize::from(layer)) {
            Some(info) => ResidencySnapshot::build(
                &info.layout,
                layer,
                residency.resident_tiles().map(|(t, _)| t),
                residency.requested_tiles(),
                host.resident_tiles(),
                MAX_MAP_TILES,
            ),
            None => ResidencySnapshot::default(),
        };
        let mut model = Self::from_stats(stats, snapshot, history)
            .with_layers(layers.iter().map(|l| l.name.clone()), stacked);
        model.unbaked_tiff = atlas.cog().is_some();
        model
    }

    /// The model for the newest `stats`, the residency maps and the rolling `history`.
    pub fn from_stats(stats: &StatsSnapshot, residency: ResidencySnapshot, history: &History) -> Self {
        let series = |f: fn(&FrameSample) -> f64| history.samples().map(f).collect::<Vec<_>>();
        let latency = |f: fn(&Latency) -> f64| {
            history
                .samples()
                .enumerate()
                .filter_map(|(i, s)| s.latency.as_ref().map(|l| [i as f64, f(l)]))
                .collect::<Vec<_>>()
        };
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
            network: stats.network,
            residency,
            layer_names: Vec::new(),
            stacked: false,
            unbaked_tiff: false,
            produced: None,
            frame_ms: series(|s| s.frame_ms),
            uploads: series(|s| s.uploads as f64),
            misses: series(|s| s.misses as f64),
            hit_rate_pct: series(|s| 100.0 * s.host_hit_rate),
            latency_mean_ms: latency(|l| l.mean_ms),
            latency_max_ms: latency(|l| l.max_ms),
            latency_last: history.samples().rev().find_map(|s| s.latency),
        }
    }

    /// The same model with the atlas' layer names, for the residency layer selector,
    /// and whether its layers are stacked.
    pub fn with_layers(mut self, names: impl IntoIterator<Item = impl Into<String>>, stacked: bool) -> Self {
        self.layer_names = names.into_iter().map(Into::into).collect();
        self.stacked = stacked;
        self
    }

    /// The same model with a produced atlas' production tier
    /// (`Streamer::production_stats`; `None` for an atlas read from a file).
    pub fn with_production(
        mut self,
        production: Option<tessera_core::stream::produce::ProductionStats>,
    ) -> Self {
        self.produced = production;
        self
    }

    /// Layers the selector offers: all of them, or only layer 0 when they are stacked.
    pub fn selectable_layers(&self) -> u16 {
        let count = u16::try_from(self.layer_names.len()).unwrap_or(u16::MAX);
        if self.stacked { count.min(1) } else { count }
    }

    /// Why only layer 0's maps are shown, for stacked atlases.
    pub fn residency_note(&self) -> Option<&'static str> {
        self.stacked.then_some(STACKED_NOTE)
    }

    /// How the selector names layer `i`: its index and its name.
    pub fn layer_label(&self, i: u16) -> String {
        match self.layer_names.get(usize::from(i)) {
            Some(name) if !name.is_empty() => format!("{i}: {name}"),
            _ => format!("{i}"),
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

/// How far a bake running in the background has got, for a progress panel.
///
/// Feed it the baker's tile counter with [`BakeProgress::update`]; the time left is
/// estimated from the tile rate since the baker first knew how many tiles there are
/// (before that it is reading the image).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BakeProgress {
    /// The file being baked, as shown to the user.
    pub name: String,
    /// What the baker says it is doing (for example "photo mip 2"); may be empty.
    pub stage: String,
    /// Tiles written so far.
    pub done: u64,
    /// Tiles in all; 0 while the baker does not know yet.
    pub total: u64,
    /// Seconds since the bake started.
    pub elapsed_s: f64,
    /// When the tile count became known, seconds since the start.
    counting_since_s: Option<f64>,
}

impl BakeProgress {
    /// A bake of `name` that has not started writing tiles.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), ..Self::default() }
    }

    /// Records the baker's counters `t_s` seconds after the bake started.
    pub fn update(&mut self, t_s: f64, done: u64, total: u64, stage: impl Into<String>) {
        self.elapsed_s = t_s.max(self.elapsed_s);
        self.total = total;
        self.done = done.min(total);
        self.stage = stage.into();
        if total > 0 && self.counting_since_s.is_none() {
            self.counting_since_s = Some(self.elapsed_s);
        }
    }

    /// Fraction of the tiles written, `0..=1` (0 while the total is unknown).
    pub fn fraction(&self) -> f64 {
        ratio(self.done, self.total).min(1.0)
    }

    /// Estimated seconds left; `None` until there is a rate to go by.
    pub fn eta_s(&self) -> Option<f64> {
        let since = self.counting_since_s?;
        let spent = self.elapsed_s - since;
        if self.done == 0 || spent < 0.25 {
            return None;
        }
        Some(spent * (self.total - self.done) as f64 / self.done as f64)
    }

    /// The progress bar's text: tiles written of the total, or what happens before.
    pub fn tiles_text(&self) -> String {
        if self.total == 0 {
            "reading the image".to_owned()
        } else {
            format!("{:.0}%, {} / {} tiles", 100.0 * self.fraction(), self.done, self.total)
        }
    }

    /// The time left in words.
    pub fn eta_text(&self) -> String {
        if self.total > 0 && self.done >= self.total {
            return "writing the atlas".to_owned();
        }
        match self.eta_s() {
            Some(s) => format!("about {} left ({} so far)", duration_text(s), duration_text(self.elapsed_s)),
            None => format!("estimating the time left ({} so far)", duration_text(self.elapsed_s)),
        }
    }
}

/// A duration in seconds as "8 s", "2 min 05 s" or "1 h 04 min".
pub fn duration_text(s: f64) -> String {
    let s = if s.is_finite() { s.max(0.0).round() as u64 } else { 0 };
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::stream::stats::{TierStats, VramCounters};

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
            FrameSample { frame_ms: 16.0, uploads: 5, misses: 7, host_hit_rate: 0.5, latency: None },
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

    #[test]
    fn latency_skips_frames_where_nothing_arrived_and_stays_bounded() {
        assert_eq!(Latency::from_frame(0.0, 0.0, 0.0), None, "all zero: nothing arrived");
        assert_eq!(Latency::from_frame(f64::NAN, 3.0, 1.0), None);
        let l = Latency::from_frame(12.0, 30.0, 2.5).expect("arrivals");
        assert_eq!((l.mean_ms, l.max_ms, l.mean_frames), (12.0, 30.0, 2.5));

        let mut h = History::new(4, 1.0);
        let latencies = [(10.0, 20.0), (0.0, 0.0), (30.0, 50.0), (0.0, 0.0), (0.0, 0.0), (5.0, 8.0)];
        for (i, (mean, max)) in latencies.into_iter().enumerate() {
            let frames = if max > 0.0 { 1.0 } else { 0.0 };
            let sample =
                FrameSample { latency: Latency::from_frame(mean, max, frames), ..FrameSample::default() };
            h.push(i as f64, &StatsSnapshot::default(), sample);
        }
        let m = OverlayModel::from_stats(&StatsSnapshot::default(), ResidencySnapshot::default(), &h);
        // Four frames are kept (2..=5); of those, frames 2 and 5 had arrivals, at
        // positions 0 and 3 of the window, and nothing is drawn as 0 in between.
        assert_eq!(m.frame_ms.len(), 4);
        assert_eq!(m.latency_mean_ms, vec![[0.0, 30.0], [3.0, 5.0]]);
        assert_eq!(m.latency_max_ms, vec![[0.0, 50.0], [3.0, 8.0]]);
        assert_eq!(m.latency_last.map(|l| l.max_ms), Some(8.0));

        // Many frames later the series never grows past the history's capacity.
        for i in 0..100 {
            let sample =
                FrameSample { latency: Latency::from_frame(1.0, 2.0, 1.0), ..FrameSample::default() };
            h.push(10.0 + f64::from(i), &StatsSnapshot::default(), sample);
        }
        let m = OverlayModel::from_stats(&StatsSnapshot::default(), ResidencySnapshot::default(), &h);
        assert_eq!(m.latency_mean_ms.len(), 4);
        assert_eq!(m.latency_max_ms.iter().map(|p| p[0]).collect::<Vec<_>>(), vec![0.0, 1.0, 2.0, 3.0]);
        // No arrivals at all: empty series and no last value.
        let empty = OverlayModel::from_stats(
            &StatsSnapshot::default(),
            ResidencySnapshot::default(),
            &History::default(),
        );
        assert!(empty.latency_mean_ms.is_empty() && empty.latency_last.is_none());
    }

    #[test]
    fn residency_maps_of_each_layer_of_a_two_layer_atlas() {
        // Layer 0: 512² (2×2, 1×1 tiles); layer 1: 1024×256 (4×1, 2×1, 1×1 tiles).
        let layouts = [
            TextureLayout::new(512, 512, 256, 4).expect("layout 0"),
            TextureLayout::new(1024, 256, 256, 4).expect("layout 1"),
        ];
        let vram = [TileId::new(0, 0, 1, 1), TileId::new(1, 0, 3, 0), TileId::new(1, 2, 0, 0)];
        let flight = [TileId::new(1, 1, 0, 0)];
        let host = [TileId::new(0, 1, 0, 0), TileId::new(1, 0, 0, 0)];
        let names = ["albedo", "height"];
        let snaps: Vec<ResidencySnapshot> = (0..2u16)
            .map(|layer| {
                let layout = &layouts[usize::from(shown_layer(layer, names.len(), false))];
                ResidencySnapshot::build(layout, layer, vram, flight, host, 1 << 20)
            })
            .collect();
        let [l0, l1] = [&snaps[0], &snaps[1]];
        assert_eq!(l0.layer, 0);
        assert_eq!(l0.mips.iter().map(|m| (m.tiles_x, m.tiles_y)).collect::<Vec<_>>(), vec![(2, 2), (1, 1)]);
        assert_eq!(
            l0.mips[0].states,
            vec![TileState::Disk, TileState::Disk, TileState::Disk, TileState::Vram]
        );
        assert_eq!(l0.mips[1].states, vec![TileState::Host]);
        assert_eq!(l1.layer, 1);
        assert_eq!(
            l1.mips.iter().map(|m| (m.tiles_x, m.tiles_y)).collect::<Vec<_>>(),
            vec![(4, 1), (2, 1), (1, 1)]
        );
        assert_eq!(
            l1.mips[0].states,
            vec![TileState::Host, TileState::Disk, TileState::Disk, TileState::Vram]
        );
        assert_eq!(l1.mips[1].states, vec![TileState::InFlight, TileState::Disk]);
        assert_eq!(l1.mips[2].states, vec![TileState::Vram]);

        let m = OverlayModel::from_stats(&StatsSnapshot::default(), l1.clone(), &History::default())
            .with_layers(names, false);
        assert_eq!(m.layer_names, vec!["albedo", "height"]);
        assert_eq!((m.selectable_layers(), m.residency_note()), (2, None));
        assert_eq!(
            (m.layer_label(0), m.layer_label(1), m.layer_label(7)),
            ("0: albedo".into(), "1: height".into(), "7".into())
        );
        // A selection past the last layer (after opening a smaller atlas) shows the last one.
        assert_eq!(
            (
                shown_layer(1, 2, false),
                shown_layer(5, 2, false),
                shown_layer(3, 1, false),
                shown_layer(0, 0, false)
            ),
            (1, 1, 0, 0)
        );
        // Stacked layers share layer 0's tile ids: only its maps, with a note.
        assert_eq!(shown_layer(1, 2, true), 0);
        let stacked = OverlayModel::from_stats(&StatsSnapshot::default(), l0.clone(), &History::default())
            .with_layers(names, true);
        assert_eq!((stacked.selectable_layers(), stacked.residency_note()), (1, Some(STACKED_NOTE)));
    }

    #[test]
    fn bake_progress_reports_fraction_tiles_and_time_left() {
        let mut p = BakeProgress::new("photo.jpg");
        assert_eq!((p.fraction(), p.eta_s()), (0.0, None));
        // Reading the image: no total yet.
        p.update(2.0, 0, 0, "");
        assert_eq!(p.tiles_text(), "reading the image");
        assert_eq!(p.eta_text(), "estimating the time left (2 s so far)");
        // The count starts at 4 s; the rate is measured from there.
        p.update(4.0, 0, 1000, "photo mip 0");
        assert_eq!(p.eta_s(), None, "no tile done yet");
        p.update(4.1, 10, 1000, "photo mip 0");
        assert_eq!(p.eta_s(), None, "too early for a rate");
        p.update(14.0, 250, 1000, "photo mip 0");
        assert_eq!(p.fraction(), 0.25);
        assert_eq!(p.tiles_text(), "25%, 250 / 1000 tiles");
        assert_eq!(p.eta_s(), Some(30.0));
        assert_eq!(p.eta_text(), "about 30 s left (14 s so far)");
        assert_eq!(p.stage, "photo mip 0");
        // Time never runs backwards and the count never passes the total.
        p.update(5.0, 2000, 1000, "photo mip 5");
        assert_eq!((p.elapsed_s, p.done, p.fraction()), (14.0, 1000, 1.0));
        assert_eq!(p.eta_text(), "writing the atlas");
        assert_eq!(
            [0.4, 59.4, 60.0, 125.0, 3600.0, 3900.0, f64::NAN].map(duration_text),
            ["0 s", "59 s", "1 min 00 s", "2 min 05 s", "1 h 00 min", "1 h 05 min", "0 s"]
        );
    }
}
