//! Frame-to-frame scheduling decisions, GPU-free: the global mip bias under
//! oversubscription, the adaptive per-frame upload budget and prefetch candidates.
//!
//! The renderer feeds these controllers what it measured on the previous frame and
//! applies what they return on the next one; every decision is made and tested here.

use crate::format::tile::TileId;
use crate::stream::feedback::FeedbackLayout;

/// Tuning of a [`MipBiasController`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BiasConfig {
    /// Bias change of one raise or lower, in mip levels (0.5: each step roughly halves
    /// or doubles the number of tiles a 2D view needs).
    pub step: f32,
    /// Largest bias ever returned.
    pub max_bias: f32,
    /// Consecutive oversubscribed frames before the bias rises by one step.
    pub raise_after: u32,
    /// Consecutive frames with room for one step finer before the bias falls by one step.
    pub lower_after: u32,
    /// `needed / capacity` above which the pool counts as oversubscribed.
    pub high_water: f32,
    /// `needed / capacity` that the view one step finer must stay under for the bias
    /// to fall.
    pub low_water: f32,
    /// Frames after a change during which the inputs still describe the old bias (the
    /// feedback window plus the readback latency) and are not counted towards the
    /// next change; without it a lagging needed set raises the bias twice.
    pub settle_frames: u32,
}

impl Default for BiasConfig {
    fn default() -> Self {
        Self {
            step: 0.5,
            max_bias: 4.0,
            raise_after: 3,
            lower_after: 30,
            high_water: 0.95,
            low_water: 0.6,
            settle_frames: 6,
        }
    }
}

/// What the renderer measured in one frame, for [`MipBiasController::update`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BiasInput {
    /// Tiles the view needs, ancestors included ([`Residency::needed_count`](crate::stream::residency::Residency::needed_count)).
    pub needed: usize,
    /// Slots in the pool ([`Residency::slot_count`](crate::stream::residency::Residency::slot_count)).
    pub capacity: usize,
    /// Whether residency could not place a needed tile this frame
    /// ([`crate::stream::residency::UploadPlan::pool_full`]).
    pub pool_full: bool,
    /// Needed tiles that were not resident this frame. The high-water rule only
    /// counts while tiles are missing: a nearly full pool that holds everything the
    /// view needs is left alone.
    pub misses: usize,
}

/// Chooses the global mip bias (positive = blurrier, fewer tiles) so that the visible
/// set fits the pool, with hysteresis so that it settles instead of oscillating.
///
/// The bias rises by one step after [`BiasConfig::raise_after`] consecutive frames in
/// which the pool is full or the needed set exceeds the high-water mark (while tiles
/// are missing). It falls by one step only after [`BiasConfig::lower_after`]
/// consecutive frames in which the needed set *one step finer*, predicted as
/// `needed · 4^step` (tiles of a 2D view scale with the square of the resolution),
/// would fit under the low-water mark, so lowering never immediately triggers a raise.
/// When the pool filled up with fewer needed tiles than it has slots (pinned tiles,
/// other layers), that smaller count is used as the capacity for lowering until the
/// capacity changes.
#[derive(Clone, Debug)]
pub struct MipBiasController {
    config: BiasConfig,
    bias: f32,
    /// Consecutive oversubscribed frames counted towards a raise.
    over: u32,
    /// Consecutive frames with room counted towards a lower.
    room: u32,
    /// Frames still to ignore after the latest change.
    settle: u32,
    /// Smallest needed count seen with a full pool at the current capacity.
    full_needed: Option<usize>,
    capacity: usize,
}

impl MipBiasController {
    /// A controller at bias 0.
    pub fn new(config: BiasConfig) -> Self {
        Self { config, bias: 0.0, over: 0, room: 0, settle: 0, full_needed: None, capacity: 0 }
    }

    /// The tuning in use.
    pub fn config(&self) -> BiasConfig {
        self.config
    }

    /// Changes the settle window (see [`BiasConfig::settle_frames`]), e.g. when the
    /// feedback window changes with the feedback stride. A settle in progress is
    /// shortened to the new window, never lengthened.
    pub fn set_settle_frames(&mut self, frames: u32) {
        self.config.settle_frames = frames;
        self.settle = self.settle.min(frames);
    }

    /// The bias returned by the latest [`MipBiasController::update`] (0 before any).
    pub fn bias(&self) -> f32 {
        self.bias
    }

    /// Takes in one frame's measurements and returns the bias to use next frame.
    pub fn update(&mut self, s: BiasInput) -> f32 {
        let c = self.config;
        let step = if c.step.is_finite() && c.step > 0.0 { c.step } else { 0.5 };
        let max_bias = if c.max_bias.is_finite() { c.max_bias.max(0.0) } else { 0.0 };
        if s.capacity != self.capacity {
            self.capacity = s.capacity;
            self.full_needed = None;
        }
        if s.pool_full {
            self.full_needed = Some(self.full_needed.map_or(s.needed, |n| n.min(s.needed)));
        }
        if self.settle > 0 {
            self.settle -= 1;
            return self.bias;
        }
        let capacity = s.capacity as f64;
        let oversubscribed =
            s.pool_full || (s.needed as f64 > f64::from(c.high_water) * capacity && s.misses > 0);
        if oversubscribed {
            self.room = 0;
            self.over += 1;
            if self.over >= c.raise_after && self.bias < max_bias {
                self.change((self.bias + step).min(max_bias));
            }
        } else {
            self.over = 0;
            let room_for = self.full_needed.map_or(capacity, |n| capacity.min(n as f64));
            let finer = s.needed as f64 * 4f64.powf(f64::from(step));
            if self.bias > 0.0 && finer <= f64::from(c.low_water) * room_for {
                self.room += 1;
                if self.room >= c.lower_after {
                    self.change((self.bias - step).max(0.0));
                }
            } else {
                self.room = 0;
            }
        }
        self.bias
    }

    fn change(&mut self, bias: f32) {
        self.bias = bias;
        self.over = 0;
        self.room = 0;
        self.settle = self.config.settle_frames;
    }
}

/// Tuning of an [`UploadBudgetController`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetConfig {
    /// The frame time to stay under, in milliseconds.
    pub target_frame_ms: f64,
    /// Safety band around the target, in milliseconds: uploads fill a frame up to
    /// `target − margin`, and a frame over `target + margin` halves the budget.
    pub margin_ms: f64,
    /// Fewest tiles per frame, whatever the frame time: streaming always progresses.
    pub min_tiles: usize,
    /// Most tiles per frame.
    pub max_tiles: usize,
    /// Budget before anything was measured.
    pub start_tiles: usize,
    /// Bytes of one tile in the pool (over every stacked pool), for the byte budget.
    pub bytes_per_tile: u64,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            target_frame_ms: 16.6,
            margin_ms: 1.0,
            min_tiles: 8,
            max_tiles: 1024,
            start_tiles: 256,
            bytes_per_tile: 136 * 136 * 4,
        }
    }
}

/// A per-frame upload budget ([`Residency::set_upload_budget`](crate::stream::residency::Residency::set_upload_budget)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Most tiles to upload next frame.
    pub tiles: usize,
    /// Most bytes to upload next frame: `tiles · bytes_per_tile`.
    pub bytes: u64,
}

/// Control of the per-frame upload budget from measured frame and upload times.
///
/// Once an upload was measured, the cost of one upload is estimated (an average that
/// follows increases quickly and decreases slowly) and the budget is the number of
/// uploads that fit the room the last frame left below the band,
/// `target − margin − (frame − upload)`, at once: a burst (a camera cut) fills short
/// frames from its first frame, also after quiet frames that uploaded nothing, and no
/// frame goes over the target because of uploads. A frame over `target + margin`
/// halves the budget, and the budget then grows back (×1.25 a frame that had room and
/// used it) instead of jumping to the room at once: the upload time measured is the
/// CPU's, and copies that slow the GPU show only in the frame time. Before any upload
/// was measured the budget grows (×1.25, at least by `min_tiles`) while frames finish
/// under `target − margin` and used the whole budget, and halves after a frame over the
/// target. The budget never drops below `min_tiles`, so streaming always progresses.
#[derive(Clone, Debug)]
pub struct UploadBudgetController {
    config: BudgetConfig,
    tiles: usize,
    cost_ms: Option<f64>,
    /// After a frame over the target: the most tiles a frame may take until the budget
    /// has grown back (×1.25 a frame that had room and used its budget). The measured
    /// upload time is the CPU's; a GPU slowed by the copies shows only in the frame
    /// time, so the room alone would jump straight back to the budget that overran.
    ceiling: Option<f64>,
}

/// Weight of a new per-tile cost sample above the estimate.
const COST_UP: f64 = 0.5;
/// Weight of a new per-tile cost sample below the estimate.
const COST_DOWN: f64 = 0.125;
/// Growth factor of a frame with room.
const GROW: f64 = 1.25;
/// Cut factor of a frame over the target.
const CUT: f64 = 0.5;

impl UploadBudgetController {
    /// A controller at `start_tiles` (clamped to `min_tiles..=max_tiles`).
    pub fn new(cfg: BudgetConfig) -> Self {
        let max = cfg.max_tiles.max(cfg.min_tiles);
        Self { config: cfg, tiles: cfg.start_tiles.clamp(cfg.min_tiles, max), cost_ms: None, ceiling: None }
    }

    /// The tuning in use.
    pub fn config(&self) -> BudgetConfig {
        self.config
    }

    /// The budget returned by the latest update (the start budget before any).
    pub fn budget(&self) -> Budget {
        Budget { tiles: self.tiles, bytes: (self.tiles as u64).saturating_mul(self.config.bytes_per_tile) }
    }

    /// Changes the most tiles per frame (at least 1): the budget adapts below this
    /// ceiling, and drops to it at once when it is above. A ceiling under `min_tiles`
    /// lowers `min_tiles` with it.
    pub fn set_max_tiles(&mut self, tiles: usize) {
        let tiles = tiles.max(1);
        self.config.max_tiles = tiles;
        self.config.min_tiles = self.config.min_tiles.min(tiles);
        self.tiles = self.tiles.min(tiles);
    }

    /// The estimated cost of one upload in milliseconds, once an upload was measured.
    pub fn cost_per_tile_ms(&self) -> Option<f64> {
        self.cost_ms
    }

    /// The upload time the next frame has room for after a frame of `frame_ms` of
    /// which `upload_ms` were uploads: `target − margin − (frame − upload)`.
    pub fn headroom_ms(&self, frame_ms: f64, upload_ms: f64) -> f64 {
        let c = &self.config;
        c.target_frame_ms - c.margin_ms - (frame_ms - upload_ms)
    }

    /// One growth step from `tiles`: ×1.25, and at least `min_tiles` more.
    fn grown(&self, tiles: f64) -> f64 {
        (tiles * GROW).max(tiles + self.config.min_tiles.max(1) as f64)
    }

    /// Takes in the last frame's time, the part of it spent uploading and the number of
    /// tiles uploaded, and returns the budget for the next frame. Non-finite or
    /// negative times are ignored (the budget is unchanged).
    pub fn update(&mut self, frame_ms: f64, upload_ms: f64, uploads: usize) -> Budget {
        if !(frame_ms.is_finite() && upload_ms.is_finite() && frame_ms >= 0.0 && upload_ms >= 0.0) {
            return self.budget();
        }
        let c = self.config;
        let max = c.max_tiles.max(c.min_tiles);
        if uploads > 0 {
            let sample = upload_ms / uploads as f64;
            self.cost_ms = Some(match self.cost_ms {
                None => sample,
                Some(old) => {
                    let w = if sample > old { COST_UP } else { COST_DOWN };
                    old + w * (sample - old)
                }
            });
        }
        let over = frame_ms > c.target_frame_ms + c.margin_ms;
        let room = frame_ms < c.target_frame_ms - c.margin_ms;
        let mut tiles = self.tiles as f64;
        match self.cost_ms.filter(|&x| x > 0.0) {
            // Priced: fill the room the frame leaves, at once, below the ceiling a frame
            // over the target set (half its budget), which then grows back.
            Some(cost) => {
                let fits = (self.headroom_ms(frame_ms, upload_ms).max(0.0) / cost).floor();
                if over {
                    self.ceiling = Some((tiles * CUT).max(c.min_tiles as f64));
                } else if let Some(ceiling) = self.ceiling.filter(|_| room && uploads >= self.tiles) {
                    let grown = self.grown(ceiling);
                    self.ceiling = (grown < max as f64).then_some(grown);
                }
                tiles = self.ceiling.map_or(fits, |ceiling| fits.min(ceiling));
            }
            // Not priced yet: grow while frames have room and use their budget.
            None if over => tiles *= CUT,
            None if room && uploads >= self.tiles => tiles = self.grown(tiles),
            None => {}
        }
        // `tiles` is finite and non-negative here; the cast saturates at usize::MAX.
        self.tiles = (tiles as usize).clamp(c.min_tiles, max);
        self.budget()
    }
}

/// The up to 8 tiles around `tile` at its own mip and layer that lie inside the grid
/// (none when `tile` is outside `layout`): candidates for prefetching while the view
/// moves.
pub fn neighbours(layout: &FeedbackLayout, tile: TileId) -> impl Iterator<Item = TileId> + use<> {
    let grid = layout.global_index(tile).and_then(|_| layout.tiles_at(tile.layer, tile.mip));
    let (tx, ty) = grid.unwrap_or((0, 0));
    let (x, y) = (i64::from(tile.x), i64::from(tile.y));
    (-1i64..=1).flat_map(|dy| (-1i64..=1).map(move |dx| (dx, dy))).filter(|&d| d != (0, 0)).filter_map(
        move |(dx, dy)| {
            let (nx, ny) = (x + dx, y + dy);
            (nx >= 0 && ny >= 0 && nx < i64::from(tx) && ny < i64::from(ty))
                .then(|| TileId::new(tile.layer, tile.mip, nx as u32, ny as u32))
        },
    )
}

/// The tiles of `layer` at `mip` that cover the rectangle `rect_texels` =
/// `[x, y, width, height]` in mip-0 texels, plus all their ancestors, coarse first:
/// what `prefetch_region` asks for. The rectangle is clipped to the layer; a `mip`
/// past the coarsest is clamped to it. Empty for an empty rectangle or unknown layer.
pub fn region_tiles(layout: &FeedbackLayout, layer: u16, rect_texels: [u32; 4], mip: u8) -> Vec<TileId> {
    let Some(l) = layout.layout(layer) else { return Vec::new() };
    let mip = mip.min(l.coarsest_mip());
    let [x, y, w, h] = rect_texels.map(u64::from);
    let x1 = (x + w).min(u64::from(l.width()));
    let y1 = (y + h).min(u64::from(l.height()));
    if x >= x1 || y >= y1 {
        return Vec::new();
    }
    let span = u64::from(l.tile_size()) << mip;
    let (tx0, ty0, tx1, ty1) = (x / span, y / span, (x1 - 1) / span, (y1 - 1) / span);
    // Clipped to the texture, so every index is inside the grid and fits in u32.
    let tiles: Vec<TileId> = (ty0..=ty1)
        .flat_map(|ty| (tx0..=tx1).map(move |tx| TileId::new(layer, mip, tx as u32, ty as u32)))
        .collect();
    layout.with_ancestors(&tiles)
}
