//! What `tessera inspect` reports about an atlas: sizes, tile counts and bytes per
//! layer and mip, read from the index alone.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::meta::DataScale;
use super::{Atlas, ColorSpace, GeoSummary, Wrap};
use crate::format::codec::{Codec, TargetFormat};

/// What `tessera inspect` reports about an atlas.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AtlasSummary {
    /// The atlas path.
    pub path: PathBuf,
    /// Format version.
    pub version: u32,
    /// Whether the layers are stacked (header flag [`FLAG_STACKED`](super::FLAG_STACKED)).
    #[serde(default)]
    pub stacked: bool,
    /// File size in bytes.
    pub file_bytes: u64,
    /// Tiles over all layers.
    pub tiles: u64,
    /// One entry per layer.
    pub layers: Vec<LayerSummary>,
    /// A split atlas' data objects, as named in its index object, with their sizes
    /// (empty for a single file; `file_bytes` is then the index object's size).
    #[serde(default)]
    pub data_objects: Vec<(String, u64)>,
    /// Tiles whose index entries could not be read (a damaged index page, or one a
    /// remote server did not deliver): their bytes are missing from the sums above.
    #[serde(default)]
    pub unreadable_entries: u64,
    /// The first of those errors.
    #[serde(default)]
    pub first_error: Option<String>,
    /// For a TIFF streamed unbaked (version 0): its levels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cog: Option<crate::format::cog::CogSummary>,
}

/// One layer in an [`AtlasSummary`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LayerSummary {
    /// Layer index (the tile id's `layer`).
    pub index: u16,
    /// Layer name.
    pub name: String,
    /// Mip-0 width.
    pub width: u32,
    /// Mip-0 height.
    pub height: u32,
    /// Tile payload side.
    pub tile_size: u32,
    /// Border texels per side.
    pub border: u32,
    /// Mip levels.
    pub mip_count: u32,
    /// Codec the layer was baked with.
    pub codec: Codec,
    /// Edge rule.
    pub wrap: Wrap,
    /// Texel encoding.
    pub color: ColorSpace,
    /// Tiles over all mips.
    pub tiles: u64,
    /// Tiles whose blob is shared with an earlier tile of the atlas (tile order), so
    /// they take no bytes of their own on disk.
    #[serde(default)]
    pub shared_tiles: u64,
    /// Bytes of tile data on disk (a shared blob counts once, for its first tile).
    pub stored_bytes: u64,
    /// Bytes of the tiles decoded.
    pub raw_bytes: u64,
    /// `raw_bytes / stored_bytes`.
    pub compression_ratio: f64,
    /// Bits per stored texel on disk (tile borders included).
    pub bits_per_texel: f64,
    /// GPU bytes per tile for each pool format this layer can be loaded into.
    pub vram_bytes_per_tile: Vec<(TargetFormat, usize)>,
    /// Per mip, finest first.
    pub mips: Vec<MipSummary>,
    /// Where the layer lies on Earth (a GeoTIFF's georeference, from the metadata record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geo: Option<GeoSummary>,
    /// How a data raster's values map onto the layer's texels (from the metadata record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataScale>,
}

/// One mip level in a [`LayerSummary`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MipSummary {
    /// Mip level.
    pub mip: u32,
    /// Size in texels.
    pub width: u32,
    /// Size in texels.
    pub height: u32,
    /// Tiles across.
    pub tiles_x: u32,
    /// Tiles down.
    pub tiles_y: u32,
    /// Tiles whose blob is shared with an earlier tile (see [`LayerSummary::shared_tiles`]).
    #[serde(default)]
    pub shared_tiles: u64,
    /// Bytes of tile data on disk (a shared blob counts once, for its first tile).
    pub stored_bytes: u64,
    /// Bytes decoded.
    pub raw_bytes: u64,
}

impl Atlas {
    /// Sizes, tile counts and bytes per layer and mip (reads only the index).
    pub fn summary(&self) -> AtlasSummary {
        let cog = self.cog().map(|c| c.summary());
        let mut seen = std::collections::HashSet::new();
        let (mut unreadable, mut first_error) = (0u64, None);
        let layers = self
            .layers()
            .iter()
            .enumerate()
            .map(|(li, l)| {
                let lay = l.layout;
                let mips: Vec<MipSummary> = (0..lay.mip_count())
                    .map(|m| {
                        let (w, h) = lay.mip_size(m);
                        let (tx, ty) = lay.tiles_at(m);
                        let first = l.first_tile + lay.mip_tile_offset(m);
                        let (mut stored, mut raw, mut shared) = (0u64, 0u64, 0u64);
                        if let Some(cog) = &cog {
                            // A TIFF's level: its compressed internal tiles (built mips: none).
                            stored = cog.level_bytes.get(m as usize).copied().unwrap_or(0);
                            raw = lay.tile_count_at(m) * (lay.padded_tile_size() as u64).pow(2) * 4;
                        }
                        for i in (first..first + lay.tile_count_at(m)).filter(|_| cog.is_none()) {
                            match self.entry_at(i) {
                                Ok(e) => {
                                    if seen.insert((e.offset, e.length)) {
                                        stored += u64::from(e.length);
                                    } else {
                                        shared += 1;
                                    }
                                    raw += u64::from(e.raw_length);
                                }
                                Err(e) => {
                                    unreadable += 1;
                                    first_error.get_or_insert_with(|| e.to_string());
                                }
                            }
                        }
                        MipSummary {
                            mip: m,
                            width: w,
                            height: h,
                            tiles_x: tx,
                            tiles_y: ty,
                            shared_tiles: shared,
                            stored_bytes: stored,
                            raw_bytes: raw,
                        }
                    })
                    .collect();
                let stored_bytes = mips.iter().map(|m| m.stored_bytes).sum::<u64>();
                let raw_bytes = mips.iter().map(|m| m.raw_bytes).sum::<u64>();
                LayerSummary {
                    index: li as u16,
                    name: l.name.clone(),
                    width: lay.width(),
                    height: lay.height(),
                    tile_size: lay.tile_size(),
                    border: lay.border(),
                    mip_count: lay.mip_count(),
                    codec: l.codec,
                    wrap: l.wrap,
                    color: l.color,
                    tiles: lay.tile_count(),
                    shared_tiles: mips.iter().map(|m| m.shared_tiles).sum(),
                    stored_bytes,
                    raw_bytes,
                    compression_ratio: raw_bytes as f64 / stored_bytes.max(1) as f64,
                    bits_per_texel: stored_bytes as f64 * 8.0 / (raw_bytes.max(1) as f64 / 4.0),
                    vram_bytes_per_tile: TargetFormat::ALL
                        .into_iter()
                        .filter(|t| l.codec.is_basis() || !t.is_block_compressed())
                        .map(|t| (t, t.bytes_per_tile(lay.padded_tile_size())))
                        .collect(),
                    mips,
                    geo: self
                        .metadata()
                        .layers
                        .get(li)
                        .and_then(|m| m.geo.as_ref())
                        .map(|g| g.summary(lay.width(), lay.height())),
                    data: self.metadata().layers.get(li).and_then(|m| m.data.clone()),
                }
            })
            .collect();
        AtlasSummary {
            path: self.path().to_path_buf(),
            version: self.version(),
            stacked: self.is_stacked(),
            file_bytes: self.file_size(),
            tiles: self.tile_count(),
            layers,
            data_objects: self.data_objects().into_iter().map(|(o, _)| (o.name, o.size)).collect(),
            unreadable_entries: unreadable,
            first_error: first_error.or_else(|| cog.as_ref().and_then(|c| c.error.clone())),
            cog,
        }
    }
}
