//! Runtime virtual textures, GPU-free: tiles that are not read from an atlas file but
//! produced on the GPU by the application when the feedback asks for them (terrain
//! layers, splat maps, decals). The streamer schedules them as it schedules loads:
//! coarse first, within a per-frame production budget, through the same residency, LRU
//! and page table; a [`FramePlan`](crate::stream::streamer::FramePlan) lists the tiles
//! to produce this frame and the renderer has its producer draw them into their slots
//! before level 1 and the page table are made.

use crate::format::tile::TileId;
use crate::stream::page_table::SlotCoord;

/// One tile to produce this frame, into its pool slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProduceJob {
    /// The tile (layer, mip, x, y).
    pub tile: TileId,
    /// The slot it is drawn into (with its border; the same slot in every pool of a
    /// stack).
    pub slot: SlotCoord,
    /// Whether the tile is already resident there and is produced again after an
    /// invalidation (its page-table entry does not change: the stale texels show
    /// until the new ones are drawn).
    pub refresh: bool,
}
