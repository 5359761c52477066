//! The `.tsa` atlas file, version 1: a memory-mapped, validated reader and an
//! atomic streaming writer. The byte layout is specified in `docs/atlas-format.md`.

mod error;
mod header;
mod reader;
#[cfg(feature = "remote")]
pub mod remote;
mod summary;
mod writer;

use serde::{Deserialize, Serialize};

use crate::format::codec::Codec;
pub use crate::format::color::ColorSpace;
use crate::format::tile::TextureLayout;

pub use error::AtlasError;
pub use header::{
    BLOB_ALIGN, ENTRY_BYTES, FLAG_STACKED, HEADER_BYTES, KNOWN_FLAGS, LAYER_BYTES, MAGIC, MAX_NAME_BYTES,
    VERSION, truncate_name,
};
pub use reader::Atlas;
pub use summary::{AtlasSummary, LayerSummary, MipSummary};
pub use writer::AtlasWriter;

/// Counters of a remote atlas' range requests ([`Atlas::network_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkStats {
    /// Range requests made (each may have been retried inside the client).
    pub requests: u64,
    /// Requests that failed after their retries.
    pub failures: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Requests in flight now.
    pub in_flight: u64,
    /// Median latency of the last 1024 requests, ms.
    pub latency_p50_ms: f64,
    /// 95th percentile of the same, ms.
    pub latency_p95_ms: f64,
}

/// How texels outside a texture are found when building borders (and sampling).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum Wrap {
    /// Repeat the edge texel.
    Clamp = 0,
    /// Continue from the opposite edge.
    Repeat = 1,
}

/// One layer (independent virtual texture) of an atlas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerInfo {
    /// Name given at bake time (usually the input file's stem).
    pub name: String,
    /// Size, tiles and mips.
    pub layout: TextureLayout,
    /// The codec tiles were baked with (a tile may still be stored raw when that is smaller).
    pub codec: Codec,
    /// Border and sampling behaviour at the edges.
    pub wrap: Wrap,
    /// How texels are encoded.
    pub color: ColorSpace,
    /// Index of this layer's first entry in the atlas tile index.
    pub first_tile: u64,
}

/// Where one tile is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileEntry {
    /// Byte offset of the blob in the file.
    pub offset: u64,
    /// Blob length in bytes.
    pub length: u32,
    /// Decoded length in bytes.
    pub raw_length: u32,
    /// CRC-32 (IEEE) of the blob.
    pub crc32: u32,
    /// Codec the blob is stored with.
    pub codec: Codec,
}

/// Why a set of layers cannot be stacked: the first layer whose layout differs from layer 0's.
fn stacked_mismatch(layers: &[LayerInfo]) -> Option<String> {
    let first = layers.first()?;
    layers.iter().enumerate().skip(1).find(|(_, l)| l.layout != first.layout).map(|(i, l)| {
        let d = |l: &LayerInfo| {
            let y = l.layout;
            format!(
                "{}x{} tile {} border {} mips {}",
                y.width(),
                y.height(),
                y.tile_size(),
                y.border(),
                y.mip_count()
            )
        };
        format!(
            "stacked layers: layer {i} '{}' is {}, layer 0 '{}' is {} (stacked layers share one layout)",
            l.name,
            d(l),
            first.name,
            d(first)
        )
    })
}
