//! A produced atlas: layers laid out like a baked atlas' but with no stored tile, whose
//! tiles the renderer draws at run time when the view needs them (runtime virtual
//! textures, [`crate::stream::produce`]). Residency, the page table and the pool treat
//! it as any atlas; only its tiles' bytes do not exist.

use super::*;

impl Atlas {
    /// An atlas named `produced:NAME` with one layer per `(name, colour space)` of
    /// `layers`, each of `layout`, and no tile data: codec [`Codec::Raw`] (the pool
    /// holds RGBA8), wrap [`Wrap::Clamp`], [`FLAG_STACKED`] when `stacked` and there
    /// are several layers (one slot per tile id for all of them).
    ///
    /// Nothing is allocated per tile, so the largest layouts
    /// ([`MAX_VIRTUAL_SIDE`](crate::format::tile::MAX_VIRTUAL_SIDE) per side) are as
    /// cheap as small ones. Reading a tile of it is [`AtlasError::Produced`].
    pub fn produced(
        name: &str,
        layers: &[(String, ColorSpace)],
        layout: TextureLayout,
        stacked: bool,
    ) -> Result<Self, AtlasError> {
        let path = PathBuf::from(format!("produced:{name}"));
        let invalid = |what: String| AtlasError::Invalid { path: path.clone(), what };
        if layers.is_empty() {
            return Err(invalid("layer list: a produced atlas needs at least one layer".into()));
        }
        if layers.len() > MAX_LAYERS as usize {
            return Err(invalid(format!("layer count {} (at most {MAX_LAYERS})", layers.len())));
        }
        let mut first_tile = 0u64;
        let layers: Vec<LayerInfo> = layers
            .iter()
            .map(|(layer_name, color)| {
                let info = LayerInfo {
                    name: crate::format::atlas::truncate_name(layer_name).to_string(),
                    layout,
                    codec: Codec::Raw,
                    wrap: Wrap::Clamp,
                    color: *color,
                    first_tile,
                };
                first_tile += layout.tile_count();
                info
            })
            .collect();
        let flags = if stacked && layers.len() > 1 { FLAG_STACKED } else { 0 };
        Ok(Atlas {
            path,
            file: Store::Empty,
            len: 0,
            meta: Vec::new(),
            info: AtlasMeta::default(),
            layers,
            index_offset: 0,
            tile_count: first_tile,
            data_offset: 0,
            stored_bytes: 0,
            flags,
            version: 0,
            paged: None,
            data: Vec::new(),
            data_end: 0,
            cog: None,
        })
    }

    /// Whether this atlas is produced at run time ([`Atlas::produced`]): it stores no
    /// tile, and a streamer over it schedules production instead of loads.
    pub fn is_produced(&self) -> bool {
        matches!(self.file, Store::Empty)
    }

    /// The error of reading `tile` of a produced atlas.
    pub(super) fn produced_tile(&self, tile: TileId) -> AtlasError {
        AtlasError::Produced { path: self.path.clone(), tile }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn layers(n: usize) -> Vec<(String, ColorSpace)> {
        (0..n).map(|i| (format!("layer{i}"), ColorSpace::Srgb)).collect()
    }

    #[test]
    fn a_produced_atlas_has_layouts_and_no_tiles() {
        let layout = TextureLayout::new(1024, 512, 128, 4).unwrap();
        let a = Atlas::produced("terrain", &layers(3), layout, true).unwrap();
        assert!(a.is_produced() && a.is_stacked() && !a.is_remote());
        assert_eq!(a.path(), Path::new("produced:terrain"));
        assert_eq!(a.layers().len(), 3);
        let per = layout.tile_count();
        assert_eq!(a.tile_count(), 3 * per);
        assert_eq!(a.layers().iter().map(|l| l.first_tile).collect::<Vec<_>>(), vec![0, per, 2 * per]);
        assert!(a.layers().iter().all(|l| l.codec == Codec::Raw && l.wrap == Wrap::Clamp));
        assert_eq!((a.stored_bytes(), a.file_size(), a.version()), (0, 0, 0));
        let tile = TileId::new(1, 0, 2, 1);
        for e in
            [a.read_tile(tile).unwrap_err(), a.decode_tile(tile).unwrap_err(), a.entry(tile).unwrap_err()]
        {
            assert!(matches!(e, AtlasError::Produced { tile: t, .. } if t == tile), "{e}");
            assert!(
                e.to_string().contains("produced:terrain") && e.to_string().contains("produced at run time")
            );
        }
        let got = a.read_tiles(&[tile], &|_| true);
        assert!(matches!(got[0], Err(AtlasError::Produced { .. })));
        assert_eq!(a.read_tiles_cached(&[tile]), vec![None]);
        assert!(a.read_texels(0, 0, [0, 0, 4, 4]).is_err());
        assert!(a.verify(&crate::progress::NoProgress).is_empty());
        assert!(a.network_stats().is_none());
        // One layer is never stacked; no layer is an error.
        assert!(!Atlas::produced("one", &layers(1), layout, true).unwrap().is_stacked());
        assert!(Atlas::produced("none", &[], layout, false).is_err());
    }

    #[test]
    fn the_largest_layouts_cost_nothing_per_tile() {
        // An Earth-sized 2:1 terrain: 8192 × 4096 tiles at mip 0, ~45 M tiles over its mips.
        let layout = TextureLayout::new(1 << 20, 1 << 19, 128, 4).unwrap();
        let a = Atlas::produced("earth", &layers(2), layout, false).unwrap();
        assert!(a.tile_count() > 89_000_000, "{}", a.tile_count());
        assert_eq!(a.layers()[1].first_tile, layout.tile_count());
        let last = TileId::new(1, 0, 8191, 4095);
        assert!(matches!(a.read_tile(last), Err(AtlasError::Produced { .. })));
    }
}
