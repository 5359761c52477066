//! Runtime virtual textures that read other virtual textures (issue 43): a producer may
//! sample a streamed layer (a baked satellite base under decals drawn at run time).
//! A tile drawn while that input was still blurry there waits for the input's tile
//! of its mip and is drawn again once that tile is resident:
//! [`VirtualTextures::invalidate_arrivals`] each frame, and
//! [`VirtualTextures::input_requests`] to keep asking the input for those tiles.

use tessera_core::format::tile::{TextureLayout, TileId};

use super::VirtualTextures;

impl VirtualTextures {
    /// The tiles the last frame made resident (uploaded, or drawn by a producer, new or
    /// again), in no particular order.
    pub fn arrived(&self) -> &[TileId] {
        &self.arrived
    }

    /// A runtime virtual texture whose producer samples `input` (another
    /// [`VirtualTextures`], bound with [`crate::shaders::vt_module`]; its first layer,
    /// or its stack): each tile of `layer` drawn last frame while `input`'s tile of the
    /// same mip there was not resident (so from a coarser fallback) waits for that tile;
    /// once it is resident, the tiles of `layer` over it at its mip and finer are drawn
    /// again in place ([`VirtualTextures::invalidate`]). Call it once a frame, after
    /// `input`'s frame began and before this one's; returns the tiles marked.
    ///
    /// The producer's samples request `input`'s tiles through `input`'s feedback when
    /// they fall inside `input`'s frame: begin `input`'s frame in an encoder that is
    /// submitted before this one begins (its producer's pass is submitted from
    /// `begin`), and finish it after. Requests of tiles a producer drew once are not
    /// renewed by any view: pass [`VirtualTextures::input_requests`] to `input`'s
    /// `prefetch_region` each frame until they arrive.
    pub fn invalidate_arrivals(&mut self, layer: u16, input: &VirtualTextures) -> usize {
        let Some(own) = self.atlas.layers().get(usize::from(layer)).map(|l| l.layout) else { return 0 };
        let Some(from) = input.atlas.layers().first().map(|l| l.layout) else { return 0 };
        self.input_layout = Some(from);
        let res = input.residency();
        // Input tiles that came in with the input's frame just begun: a tile drawn last
        // frame could not see them yet.
        let just_in: std::collections::HashSet<TileId> =
            input.arrived().iter().map(|t| TileId { layer: 0, ..*t }).collect();
        let mut ready = Vec::new();
        for p in self.arrived_pending(layer) {
            for q in input_tiles(p, &own, &from) {
                if !res.is_resident(q) {
                    self.waiting.insert((layer, q));
                } else if just_in.contains(&q) {
                    ready.push((layer, q));
                }
            }
        }
        // Those waited on that have come in since.
        ready.extend(self.waiting.iter().copied().filter(|&(_, q)| res.is_resident(q)));
        self.waiting.retain(|&(_, q)| !res.is_resident(q));
        ready.sort_unstable_by_key(|&(l, q)| (l, q.pack()));
        ready.dedup();
        let mut marked = 0;
        for (layer, q) in ready {
            let (rect, mip) = rect_in(q, &from, &own);
            marked += self.streamer.invalidate_mips(layer, rect, mip);
        }
        marked
    }

    /// The tiles of `input` that tiles of this runtime virtual texture wait for (see
    /// [`VirtualTextures::invalidate_arrivals`]), as `prefetch_region` arguments of
    /// `input`'s first layer: rectangle in mip-0 texels and mip.
    pub fn input_requests(&self) -> Vec<([u32; 4], u8)> {
        let Some(from) = self.input_layout else { return Vec::new() };
        self.waiting.iter().map(|&(_, q)| (tile_rect(q, &from), q.mip)).collect()
    }

    /// Tiles of `layer` drawn last frame.
    fn arrived_pending(&self, layer: u16) -> Vec<TileId> {
        let owner = if self.stacked { 0 } else { layer };
        self.arrived.iter().copied().filter(|t| t.layer == owner).collect()
    }
}

/// The tiles of a layer laid out as `from` that the tile `p` of a layer laid out as
/// `own` reads (its slot, border included, scaled over), at the mip of the same texel
/// size.
fn input_tiles(p: TileId, own: &TextureLayout, from: &TextureLayout) -> Vec<TileId> {
    let (sx, sy) = (
        f64::from(from.width()) / f64::from(own.width()),
        f64::from(from.height()) / f64::from(own.height()),
    );
    let mip = (f64::from(p.mip) + sx.min(sy).log2()).round().clamp(0.0, f64::from(from.coarsest_mip())) as u8;
    let scale = f64::from(1u32 << p.mip.min(31));
    let (span, pad) = (f64::from(own.tile_size()) * scale, f64::from(own.border()) * scale);
    let x0 = ((f64::from(p.x) * span - pad) * sx).max(0.0);
    let y0 = ((f64::from(p.y) * span - pad) * sy).max(0.0);
    let x1 = (f64::from(p.x + 1) * span + pad) * sx;
    let y1 = (f64::from(p.y + 1) * span + pad) * sy;
    let in_span = f64::from(from.tile_size()) * f64::from(1u32 << mip.min(31));
    let (cols, rows) = from.tiles_at(u32::from(mip));
    let last = |v: f64, n: u32| ((v / in_span).ceil() as u32).min(n);
    let (tx0, ty0) = (((x0 / in_span) as u32).min(cols), ((y0 / in_span) as u32).min(rows));
    let (tx1, ty1) = (last(x1, cols), last(y1, rows));
    (ty0..ty1).flat_map(|y| (tx0..tx1).map(move |x| TileId { layer: 0, mip, x, y })).collect()
}

/// Tile `q`'s rectangle in mip-0 texels of its layer (laid out as `layout`).
fn tile_rect(q: TileId, layout: &TextureLayout) -> [u32; 4] {
    let span = u64::from(layout.tile_size()) << q.mip.min(31);
    let (x0, y0) = (u64::from(q.x) * span, u64::from(q.y) * span);
    let (x1, y1) = ((x0 + span).min(u64::from(layout.width())), (y0 + span).min(u64::from(layout.height())));
    [x0 as u32, y0 as u32, (x1 - x0) as u32, (y1 - y0) as u32]
}

/// Input tile `q` (of a layer laid out as `from`) as a rectangle of a layer laid out as
/// `own`, and the finest mip there that reads it.
fn rect_in(q: TileId, from: &TextureLayout, own: &TextureLayout) -> ([u32; 4], u8) {
    let (sx, sy) = (
        f64::from(own.width()) / f64::from(from.width()),
        f64::from(own.height()) / f64::from(from.height()),
    );
    let [x, y, w, h] = tile_rect(q, from).map(f64::from);
    let (x0, y0) = ((x * sx).floor(), (y * sy).floor());
    let (x1, y1) = (((x + w) * sx).ceil(), ((y + h) * sy).ceil());
    let mip = (f64::from(q.mip) + sx.max(sy).log2()).round().clamp(0.0, 255.0) as u8;
    ([x0 as u32, y0 as u32, (x1 - x0) as u32, (y1 - y0) as u32], mip)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn layout(side: u32) -> TextureLayout {
        TextureLayout::new(side, side, 128, 4).unwrap()
    }

    #[test]
    fn a_tile_reads_the_input_tiles_under_its_slot_border_included() {
        let same = layout(2048);
        // Tile (2, 3) with its 4-texel border spans texels 252..388 and 380..516: input
        // tiles 1..=3 across and 2..=4 down.
        let tiles = input_tiles(TileId { layer: 0, mip: 0, x: 2, y: 3 }, &same, &same);
        assert_eq!(tiles.len(), 9);
        assert!(tiles.iter().all(|t| t.mip == 0 && (1..=3).contains(&t.x) && (2..=4).contains(&t.y)));
        // At the corner the border falls outside the texture: 2 × 2.
        assert_eq!(input_tiles(TileId { layer: 0, mip: 0, x: 0, y: 0 }, &same, &same).len(), 4);
        // An input twice as large: one mip finer there, the slot scaled over.
        let tiles = input_tiles(TileId { layer: 0, mip: 0, x: 0, y: 0 }, &same, &layout(4096));
        assert!(tiles.iter().all(|t| t.mip == 1) && tiles.len() == 4, "{tiles:?}");
        // Half as large: mip 0 there too (nothing finer), one tile.
        let tiles = input_tiles(TileId { layer: 0, mip: 0, x: 0, y: 0 }, &same, &layout(1024));
        assert_eq!(tiles, vec![TileId { layer: 0, mip: 0, x: 0, y: 0 }]);
        // A coarse tile reads a coarse input tile.
        let tiles = input_tiles(TileId { layer: 0, mip: 4, x: 0, y: 0 }, &same, &same);
        assert_eq!(tiles, vec![TileId { layer: 0, mip: 4, x: 0, y: 0 }]);
    }

    #[test]
    fn an_input_tile_maps_to_its_rectangle_and_mip_here() {
        let q = TileId { layer: 0, mip: 1, x: 1, y: 0 };
        assert_eq!(tile_rect(q, &layout(4096)), [256, 0, 256, 256]);
        // From an input twice as large: half the rectangle, one mip coarser there is
        // mip 0 here.
        assert_eq!(rect_in(q, &layout(4096), &layout(2048)), ([128, 0, 128, 128], 0));
        assert_eq!(rect_in(q, &layout(2048), &layout(2048)), ([256, 0, 256, 256], 1));
        assert_eq!(rect_in(q, &layout(1024), &layout(2048)), ([512, 0, 512, 512], 2));
        // Clipped at the layer's edge.
        let edge = TileId { layer: 0, mip: 0, x: 15, y: 15 };
        assert_eq!(tile_rect(edge, &TextureLayout::new(2000, 2000, 128, 4).unwrap()), [1920, 1920, 80, 80]);
    }
}
