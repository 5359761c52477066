//! The loader that the loader pool runs for a real atlas: host-cache lookup, then
//! memory-mapped read, CRC check and decode, then host-cache insert.

use std::sync::Arc;

use crate::atlas::Atlas;
use crate::host_cache::HostCache;
use crate::loader::{LoadError, TileLoader};
use crate::tile::TileId;

/// Loads GPU-ready tiles from an [`Atlas`] through a [`HostCache`].
pub struct AtlasLoader {
    atlas: Arc<Atlas>,
    cache: Arc<HostCache>,
}

impl AtlasLoader {
    /// A loader over `atlas` that fills and reads `cache`.
    pub fn new(atlas: Arc<Atlas>, cache: Arc<HostCache>) -> Self {
        Self { atlas, cache }
    }

    /// The atlas read from.
    pub fn atlas(&self) -> &Arc<Atlas> {
        &self.atlas
    }

    /// The host cache filled.
    pub fn cache(&self) -> &Arc<HostCache> {
        &self.cache
    }
}

impl TileLoader for AtlasLoader {
    fn load(&self, tile: TileId) -> Result<Arc<[u8]>, LoadError> {
        if let Some(bytes) = self.cache.get(tile) {
            return Ok(bytes);
        }
        let bytes: Arc<[u8]> =
            self.atlas.decode_tile(tile).map_err(|e| LoadError::failed(tile, e.to_string()))?.into();
        self.cache.insert(tile, bytes.clone());
        Ok(bytes)
    }
}
