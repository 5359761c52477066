//! Runtime virtual textures that read other virtual textures (issue 43): a producer may
//! sample a streamed layer (a baked satellite base under decals drawn at run time).
//! A tile it draws while that input is still blurry is drawn again once the input's
//! finer tiles arrive: [`VirtualTextures::invalidate_arrivals`] after each frame.

use tessera_core::format::tile::TileId;

use super::VirtualTextures;

impl VirtualTextures {
    /// The tiles the last frame made resident (uploaded, or drawn by a producer, new or
    /// again), in no particular order.
    pub fn arrived(&self) -> &[TileId] {
        &self.arrived
    }

    /// A runtime virtual texture whose producer samples `input` (another
    /// [`VirtualTextures`], bound with [`crate::shaders::vt_module`]): invalidates, in
    /// `layer`, what `input`'s last frame brought in. Each tile that arrived there
    /// covers a rectangle (scaled from `input`'s layer to this one); the tiles of
    /// `layer` over it that could have read it, those at its mip and finer, were drawn
    /// from a coarser fallback and are drawn again in place
    /// ([`VirtualTextures::invalidate`]). Call it once a frame, after `input`'s frame
    /// began; returns the tiles marked. The producer's samples request `input`'s tiles
    /// through `input`'s feedback when they fall inside `input`'s frame: begin
    /// `input`'s frame in an encoder that is submitted before this one begins (its
    /// producer's pass is submitted from `begin`), and finish it after.
    pub fn invalidate_arrivals(&mut self, layer: u16, input: &VirtualTextures) -> usize {
        let Some(own) = self.atlas.layers().get(usize::from(layer)).map(|l| l.layout) else { return 0 };
        let mut marked = 0;
        for t in input.arrived() {
            let Some(from) = input.atlas.layers().get(usize::from(t.layer)).map(|l| l.layout) else {
                continue;
            };
            let (sx, sy) = (
                f64::from(own.width()) / f64::from(from.width()),
                f64::from(own.height()) / f64::from(from.height()),
            );
            let span = f64::from(from.tile_size()) * f64::from(1u32 << t.mip.min(31));
            let (x0, y0) = ((f64::from(t.x) * span * sx).floor(), (f64::from(t.y) * span * sy).floor());
            let (x1, y1) = ((f64::from(t.x + 1) * span * sx).ceil(), (f64::from(t.y + 1) * span * sy).ceil());
            let rect = [x0 as u32, y0 as u32, (x1 - x0) as u32, (y1 - y0) as u32];
            // This layer's mip that reads `input`'s mip t.mip, and every finer one.
            let mip = (f64::from(t.mip) + sx.max(sy).log2()).round().clamp(0.0, 255.0) as u8;
            marked += self.streamer.invalidate_mips(layer, rect, mip);
        }
        marked
    }
}
