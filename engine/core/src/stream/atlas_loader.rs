//! The loader that the loader pool runs for a real atlas: host-cache lookup, then
//! memory-mapped read, CRC check and decode or transcode to the pool's texel format,
//! then host-cache insert.

use std::sync::Arc;

use crate::format::atlas::Atlas;
use crate::format::codec::{TargetFormat, transcode_verified};
use crate::format::tile::TileId;
use crate::stream::host_cache::HostCache;
use crate::stream::loader::{LoadError, TileLoader};

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
        let blob = self.atlas.read_tile(tile).map_err(|e| match e {
            crate::format::atlas::AtlasError::Unavailable { .. } => {
                LoadError::Unavailable { tile, reason: e.to_string() }
            }
            other => fail(&other),
        })?;
        let entry = self.atlas.entry(tile).map_err(|e| fail(&e))?;
        // The entry exists, so the layer does.
        let side =
            self.atlas.layers().get(usize::from(tile.layer)).map_or(0, |l| l.layout.padded_tile_size());
        // read_tile checked the blob's CRC-32, so Basis's own data CRC-16 is redundant.
        transcode_verified(entry.codec, &blob, entry.raw_length as usize, side, self.target)
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

/// Loads the tiles of a stacked atlas (all layers share layer 0's tile ids): one
/// request for a layer-0 tile reads, checks and transcodes that tile of every layer,
/// each to its own format, and hands out the concatenation, layer 0 first. A tile is
/// delivered for all layers or fails as a whole, so the pools never disagree. The
/// cache holds the concatenations under the layer-0 id.
pub struct StackedLoader {
    layers: Vec<AtlasLoader>,
    cache: Arc<HostCache>,
}

impl StackedLoader {
    /// A loader over `atlas` handing out layer `i` in `targets[i]`; `targets` has one
    /// format per layer.
    pub fn new(atlas: Arc<Atlas>, cache: Arc<HostCache>, targets: &[TargetFormat]) -> Self {
        let layers =
            targets.iter().map(|&t| AtlasLoader::with_target(atlas.clone(), cache.clone(), t)).collect();
        Self { layers, cache }
    }
}

impl TileLoader for StackedLoader {
    fn load(&self, tile: TileId) -> Result<Arc<[u8]>, LoadError> {
        if let Some(bytes) = self.cache.get(tile) {
            return Ok(bytes);
        }
        let mut all = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            let part = l.transcode_tile(TileId::new(i as u16, tile.mip, tile.x, tile.y))?;
            if all.is_empty() {
                all.reserve(part.len() * self.layers.len());
            }
            all.extend_from_slice(&part);
        }
        let bytes: Arc<[u8]> = all.into();
        self.cache.insert(tile, bytes.clone());
        Ok(bytes)
    }
}
