//! The loader that the loader pool runs for a real atlas: host-cache lookup, then
//! memory-mapped read, CRC check and decode or transcode to the pool's texel format,
//! then host-cache insert.

use std::sync::Arc;

use crate::atlas::Atlas;
use crate::codec::{TargetFormat, transcode_verified};
use crate::host_cache::HostCache;
use crate::loader::{LoadError, TileLoader};
use crate::tile::TileId;

/// Loads GPU-ready tiles from an [`Atlas`] through a [`HostCache`], in one
/// [`TargetFormat`]; the cache holds the transcoded bytes.
pub struct AtlasLoader {
    atlas: Arc<Atlas>,
    cache: Arc<HostCache>,
    target: TargetFormat,
}

impl AtlasLoader {
    /// A loader over `atlas` that fills and reads `cache` with RGBA8 tiles.
    pub fn new(atlas: Arc<Atlas>, cache: Arc<HostCache>) -> Self {
        Self::with_target(atlas, cache, TargetFormat::Rgba8)
    }

    /// A loader that hands out tiles in `target`: Basis tiles transcode to any target,
    /// raw and LZ4 tiles only to [`TargetFormat::Rgba8`] (others fail to load). The
    /// cache must hold only this loader's format: give each format its own cache.
    pub fn with_target(atlas: Arc<Atlas>, cache: Arc<HostCache>, target: TargetFormat) -> Self {
        Self { atlas, cache, target }
    }

    /// The atlas read from.
    pub fn atlas(&self) -> &Arc<Atlas> {
        &self.atlas
    }

    /// The host cache filled.
    pub fn cache(&self) -> &Arc<HostCache> {
        &self.cache
    }

    /// The texel format of the tiles handed out (and cached).
    pub fn target(&self) -> TargetFormat {
        self.target
    }

    /// Reads, CRC-checks and transcodes `tile` to the target format, bypassing the cache.
    pub fn transcode_tile(&self, tile: TileId) -> Result<Vec<u8>, LoadError> {
        let fail = |e: &dyn std::fmt::Display| LoadError::failed(tile, e.to_string());
        let blob = self.atlas.read_tile(tile).map_err(|e| fail(&e))?;
        let entry = self.atlas.entry(tile).map_err(|e| fail(&e))?;
        // The entry exists, so the layer does.
        let side =
            self.atlas.layers().get(usize::from(tile.layer)).map_or(0, |l| l.layout.padded_tile_size());
        // read_tile checked the blob's CRC-32, so Basis's own data CRC-16 is redundant.
        transcode_verified(entry.codec, blob, entry.raw_length as usize, side, self.target)
            .map_err(|e| fail(&format_args!("{}: {tile}: {e}", self.atlas.path().display())))
    }
}

impl TileLoader for AtlasLoader {
    fn load(&self, tile: TileId) -> Result<Arc<[u8]>, LoadError> {
        if let Some(bytes) = self.cache.get(tile) {
            return Ok(bytes);
        }
        let bytes: Arc<[u8]> = self.transcode_tile(tile)?.into();
        self.cache.insert(tile, bytes.clone());
        Ok(bytes)
    }
}
