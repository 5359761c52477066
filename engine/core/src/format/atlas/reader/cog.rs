//! A Cloud Optimized GeoTIFF opened as an atlas ([`crate::format::cog`]): one layer of raw
//! RGBA8 tiles assembled from the TIFF's internal tiles when they are read, so that the
//! loaders, the host cache, the renderer, `capture` and the viewer stream it like a baked
//! atlas, from a local path or a URL.

use super::*;
use crate::bake::tiff::bytes::{TiffBytes, is_unavailable};
use crate::format::cog::Cog;

/// The bytes of a TIFF opened as an atlas, as the COG reader reads them.
enum CogBytes {
    File(File, u64),
    #[cfg(feature = "remote")]
    Remote(Arc<crate::format::atlas::remote::RemoteObject>),
}

impl TiffBytes for CogBytes {
    fn len(&self) -> u64 {
        match self {
            Self::File(_, len) => *len,
            #[cfg(feature = "remote")]
            Self::Remote(r) => r.size(),
        }
    }

    fn read_chunk_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.read_at(buf, offset)?;
        #[cfg(feature = "remote")]
        if let Self::Remote(r) = self {
            r.count_blob(buf.len() as u64);
        }
        Ok(())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        match self {
            Self::File(f, _) => f.read_exact_at(buf, offset),
            #[cfg(feature = "remote")]
            Self::Remote(r) => r.read_exact_at(buf, offset).map_err(|e| match e {
                crate::format::atlas::remote::RemoteError::Unavailable(reason) => {
                    std::io::Error::other(crate::bake::tiff::bytes::Unavailable(reason))
                }
                other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
            }),
        }
    }
}

/// Loader threads that may decode one level of a COG at the same time.
fn readers_per_level() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 8)
}

impl Atlas {
    /// Opens the TIFF in `file` (shown as `path`, `len` bytes) as a one-layer atlas of
    /// raw tiles, or says why it cannot be streamed unbaked.
    pub(super) fn from_cog(file: Store, path: PathBuf, len: u64) -> Result<Self, AtlasError> {
        let bytes: Arc<dyn TiffBytes> = match &file {
            Store::File(f) => {
                let f = f.try_clone().map_err(|source| AtlasError::Io { path: path.clone(), source })?;
                Arc::new(CogBytes::File(f, len))
            }
            #[cfg(feature = "remote")]
            Store::Remote(r) => Arc::new(CogBytes::Remote(r.clone())),
            Store::Empty => {
                return Err(AtlasError::Invalid { path, what: "TIFF: a produced atlas has no bytes".into() });
            }
            Store::Ranged(_) => {
                return Err(AtlasError::Cog(crate::format::cog::CogError {
                    path,
                    reason: "TIFFs are streamed unbaked by the native engine only; for the browser, bake it \
                             (tessera bake)"
                        .into(),
                }));
            }
        };
        let cog = Cog::open(&path, bytes, readers_per_level()).map_err(AtlasError::Cog)?;
        let layout = cog.layout();
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "cog".into());
        let layers = vec![LayerInfo {
            name: crate::format::atlas::truncate_name(&name).to_string(),
            layout,
            codec: Codec::Raw,
            wrap: Wrap::Clamp,
            color: cog.color(),
            first_tile: 0,
        }];
        Ok(Atlas {
            path,
            file,
            len,
            meta: Vec::new(),
            info: AtlasMeta { layers: vec![cog.layer_meta().clone()], ..AtlasMeta::default() },
            layers,
            index_offset: 0,
            tile_count: layout.tile_count(),
            data_offset: 0,
            stored_bytes: len,
            flags: 0,
            version: 0,
            paged: None,
            data: Vec::new(),
            data_end: len,
            cog: Some(Arc::new(cog)),
        })
    }

    /// The TIFF this atlas streams unbaked, if it is one (then [`Atlas::version`] is 0,
    /// and its one layer's tiles are raw RGBA8 read from the TIFF's internal tiles).
    pub fn cog(&self) -> Option<&Arc<Cog>> {
        self.cog.as_ref()
    }

    /// The entry of a streamed TIFF's tile: raw RGBA8, as long as a padded tile, at no
    /// offset (the bytes come from the TIFF's internal tiles) and without a checksum.
    pub(super) fn cog_entry(&self, tile: TileId) -> Result<TileEntry, AtlasError> {
        let layer = self.layers.get(usize::from(tile.layer)).filter(|l| l.layout.contains(tile));
        let layer = layer.ok_or_else(|| AtlasError::NoSuchTile { path: self.path.clone(), tile })?;
        let side = layer.layout.padded_tile_size();
        let length = side * side * 4;
        Ok(TileEntry { offset: 0, length, raw_length: length, crc32: 0, codec: Codec::Raw })
    }

    /// A streamed TIFF's tile assembled from its internal tiles: a network failure is
    /// [`AtlasError::Unavailable`] (asked for again later), anything else
    /// [`AtlasError::CogTile`].
    pub(super) fn cog_tile(&self, cog: &Cog, tile: TileId) -> Result<Vec<u8>, AtlasError> {
        self.cog_entry(tile)?;
        cog.tile(tile).map_err(|e| {
            let reason = e.to_string();
            if is_unavailable(&e) {
                AtlasError::Unavailable { path: self.path.clone(), tile, reason }
            } else {
                AtlasError::CogTile { path: self.path.clone(), tile, reason }
            }
        })
    }
}
