//! The loader that the loader pool runs for a real atlas: host-cache lookup, then
//! memory-mapped read, CRC check and decode or transcode to the pool's texel format,
//! then host-cache insert.

use std::sync::Arc;

use crate::format::atlas::ranged::FetchRange;
use crate::format::atlas::{Atlas, AtlasError};
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
        self.transcode_blob(tile, self.atlas.read_tile(tile))
    }

    /// Transcodes a blob read for `tile` (read errors become load errors: a network
    /// failure, or bytes a ranged atlas' driver has not fetched, is
    /// [`LoadError::Unavailable`], asked for again later).
    fn transcode_blob(&self, tile: TileId, blob: Result<Vec<u8>, AtlasError>) -> Result<Vec<u8>, LoadError> {
        let fail = |e: &dyn std::fmt::Display| LoadError::failed(tile, e.to_string());
        let blob = blob.map_err(|e| load_error(tile, e))?;
        let entry = self.atlas.entry(tile).map_err(|e| load_error(tile, e))?;
        // The entry exists, so the layer does.
        let side =
            self.atlas.layers().get(usize::from(tile.layer)).map_or(0, |l| l.layout.padded_tile_size());
        // read_tile checked the blob's CRC-32, so Basis's own data CRC-16 is redundant.
        transcode_verified(entry.codec, &blob, entry.raw_length as usize, side, self.target)
            .map_err(|e| fail(&format_args!("{}: {tile}: {e}", self.atlas.path().display())))
    }
}

/// `e`, met reading `tile`, as a load error: [`LoadError::Unavailable`] when a later try
/// may succeed (a network failure, bytes not fetched yet).
fn load_error(tile: TileId, e: AtlasError) -> LoadError {
    match e {
        AtlasError::Unavailable { .. } | AtlasError::NeedBytes { .. } => {
            LoadError::Unavailable { tile, reason: e.to_string() }
        }
        other => LoadError::failed(tile, other.to_string()),
    }
}

/// The ranges of `atlas`' ranged store to fetch before `tiles` can be read.
fn fetch_ranges_of(atlas: &Atlas, tiles: &[TileId]) -> Vec<FetchRange> {
    let Some(store) = atlas.ranged_bytes() else { return Vec::new() };
    let ranges = if tiles.is_empty() { Vec::new() } else { atlas.ranges_to_fetch(tiles) };
    ranges.into_iter().map(|range| FetchRange { store: store.clone(), range }).collect()
}

/// Tiles a loader thread takes at once from a remote atlas: their blobs are read with
/// a few coalesced range requests instead of one round trip each.
pub const REMOTE_BATCH: usize = 64;

/// Reads `tiles` of `atlas` as one batch ([`Atlas::read_tiles`]); `None` for those
/// given up because `wanted` said so, else the blob or its error.
fn read_batch(
    atlas: &Atlas,
    tiles: &[TileId],
    wanted: &dyn Fn(TileId) -> bool,
) -> Vec<Option<Result<Vec<u8>, AtlasError>>> {
    atlas
        .read_tiles(tiles, &|i| wanted(tiles[i]))
        .into_iter()
        .map(|r| match r {
            Err(AtlasError::Cancelled { .. }) => None,
            other => Some(other),
        })
        .collect()
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

    fn batch_size(&self) -> usize {
        if self.atlas.is_remote() { REMOTE_BATCH } else { 1 }
    }

    /// A ranged atlas' index pages and blobs of the tiles not in the host cache.
    fn fetch_ranges(&self, tiles: &[TileId]) -> Vec<FetchRange> {
        let todo: Vec<TileId> = tiles.iter().copied().filter(|&t| !self.cache.contains(t)).collect();
        fetch_ranges_of(&self.atlas, &todo)
    }

    /// Host-cache hits, and tiles whose blobs the disk cache holds (transcoded now).
    fn ready_now(&self, tiles: &[TileId]) -> Vec<Option<Result<Arc<[u8]>, LoadError>>> {
        let mut out: Vec<Option<Result<Arc<[u8]>, LoadError>>> =
            tiles.iter().map(|&t| self.cache.get(t).map(Ok)).collect();
        let todo: Vec<usize> = (0..tiles.len()).filter(|&i| out[i].is_none()).collect();
        let ids: Vec<TileId> = todo.iter().map(|&i| tiles[i]).collect();
        for (i, blob) in todo.into_iter().zip(self.atlas.read_tiles_cached(&ids)) {
            out[i] = blob.map(|b| {
                let bytes: Arc<[u8]> = self.transcode_blob(tiles[i], Ok(b))?.into();
                self.cache.insert(tiles[i], bytes.clone());
                Ok(bytes)
            });
        }
        out
    }

    /// Host-cache hits first; the other tiles' blobs in one coalesced read, then
    /// transcoded in parallel.
    fn load_batch(
        &self,
        tiles: &[TileId],
        wanted: &dyn Fn(TileId) -> bool,
    ) -> Vec<Option<Result<Arc<[u8]>, LoadError>>> {
        use rayon::prelude::*;
        let mut out: Vec<Option<Result<Arc<[u8]>, LoadError>>> =
            tiles.iter().map(|&t| self.cache.get(t).map(Ok)).collect();
        let todo: Vec<usize> = (0..tiles.len()).filter(|&i| out[i].is_none()).collect();
        let ids: Vec<TileId> = todo.iter().map(|&i| tiles[i]).collect();
        let blobs = read_batch(&self.atlas, &ids, wanted);
        let done: Vec<Option<Result<Arc<[u8]>, LoadError>>> = ids
            .par_iter()
            .zip(blobs.into_par_iter())
            .map(|(&tile, blob)| {
                blob.map(|b| {
                    let bytes: Arc<[u8]> = self.transcode_blob(tile, b)?.into();
                    self.cache.insert(tile, bytes.clone());
                    Ok(bytes)
                })
            })
            .collect();
        for (i, r) in todo.into_iter().zip(done) {
            out[i] = r;
        }
        out
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

    fn batch_size(&self) -> usize {
        self.layers.first().map_or(1, TileLoader::batch_size)
    }

    /// A ranged atlas' index pages and blobs of every layer of the tiles not in the
    /// host cache.
    fn fetch_ranges(&self, tiles: &[TileId]) -> Vec<FetchRange> {
        let Some(first) = self.layers.first() else { return Vec::new() };
        let n = self.layers.len();
        let todo: Vec<TileId> = tiles
            .iter()
            .filter(|&&t| !self.cache.contains(t))
            .flat_map(|t| (0..n).map(move |l| TileId::new(l as u16, t.mip, t.x, t.y)))
            .collect();
        fetch_ranges_of(&first.atlas, &todo)
    }

    /// Host-cache hits (every layer of a stacked tile is cached together).
    fn ready_now(&self, tiles: &[TileId]) -> Vec<Option<Result<Arc<[u8]>, LoadError>>> {
        tiles.iter().map(|&t| self.cache.get(t).map(Ok)).collect()
    }

    /// Host-cache hits first; every layer of the other tiles in one coalesced read
    /// (a version-2 atlas stores a stacked tile's layers together), then transcoded in
    /// parallel. A tile fails as a whole when any layer fails, and is given up when
    /// any layer was (all layers of a tile share its wish).
    fn load_batch(
        &self,
        tiles: &[TileId],
        wanted: &dyn Fn(TileId) -> bool,
    ) -> Vec<Option<Result<Arc<[u8]>, LoadError>>> {
        use rayon::prelude::*;
        let Some(first) = self.layers.first() else {
            return tiles.iter().map(|&t| Some(self.load(t))).collect();
        };
        let n = self.layers.len();
        let mut out: Vec<Option<Result<Arc<[u8]>, LoadError>>> =
            tiles.iter().map(|&t| self.cache.get(t).map(Ok)).collect();
        let todo: Vec<usize> = (0..tiles.len()).filter(|&i| out[i].is_none()).collect();
        let ids: Vec<TileId> = todo
            .iter()
            .flat_map(|&i| (0..n).map(move |l| TileId::new(l as u16, tiles[i].mip, tiles[i].x, tiles[i].y)))
            .collect();
        let layer0 = |t: TileId| TileId::new(0, t.mip, t.x, t.y);
        let blobs = read_batch(&first.atlas, &ids, &|t| wanted(layer0(t)));
        let parts: Vec<Option<Result<Vec<u8>, LoadError>>> = ids
            .par_iter()
            .zip(blobs.into_par_iter())
            .map(|(&tile, blob)| blob.map(|b| self.layers[usize::from(tile.layer)].transcode_blob(tile, b)))
            .collect();
        for (k, i) in todo.into_iter().enumerate() {
            let mine = &parts[k * n..(k + 1) * n];
            out[i] = if mine.iter().any(Option::is_none) {
                None
            } else {
                let joined: Result<Vec<u8>, LoadError> =
                    mine.iter().flatten().try_fold(Vec::new(), |mut all, p| {
                        all.extend_from_slice(p.as_ref().map_err(Clone::clone)?);
                        Ok(all)
                    });
                Some(joined.map(|all| {
                    let bytes: Arc<[u8]> = all.into();
                    self.cache.insert(tiles[i], bytes.clone());
                    bytes
                }))
            };
        }
        out
    }
}
