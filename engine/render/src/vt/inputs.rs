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
            let Some(q) = input_tile(p, &own, &from) else { continue };
            if !res.is_resident(q) {
                if !self.waiting.contains(&(layer, q)) {
                    self.waiting.push((layer, q));
                }
            } else if just_in.contains(&q) {
                ready.push((layer, q));
            }
        }
        let (now, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.waiting).into_iter().partition(|&(_, q)| res.is_resident(q));
        self.waiting = waiting;
        ready.extend(now);
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

/// The tile of a layer laid out as `from` that the tile `p` of a layer laid out as
/// `own` reads at its centre, at the mip of the same texel size.
fn input_tile(p: TileId, own: &TextureLayout, from: &TextureLayout) -> Option<TileId> {
    let (sx, sy) = (
        f64::from(from.width()) / f64::from(own.width()),
        f64::from(from.height()) / f64::from(own.height()),
    );
    let mip = (f64::from(p.mip) + sx.min(sy).log2()).round().clamp(0.0, f64::from(from.coarsest_mip())) as u8;
    let span = f64::from(own.tile_size()) * f64::from(1u32 << p.mip.min(31));
    let (cx, cy) = ((f64::from(p.x) + 0.5) * span * sx, (f64::from(p.y) + 0.5) * span * sy);
    let in_span = f64::from(from.tile_size()) * f64::from(1u32 << mip.min(31));
    let (x, y) = ((cx / in_span) as u32, (cy / in_span) as u32);
    let (cols, rows) = from.tiles_at(u32::from(mip));
    (x < cols && y < rows).then_some(TileId { layer: 0, mip, x, y })
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
