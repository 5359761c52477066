//! Where an atlas' bytes come from: positioned reads of a local file, range requests
//! to an object store, or the byte ranges a driver fetched, with one error type for all.

use super::*;

/// Where an atlas' bytes come from: a local file, an object on a server, or the
/// ranges of one that an embedder fetched.
pub(super) enum Store {
    File(File),
    #[cfg(feature = "remote")]
    Remote(Arc<crate::format::atlas::remote::RemoteObject>),
    Ranged(Arc<RangedBytes>),
    /// No bytes at all: a produced atlas ([`Atlas::produced`]), whose tiles the
    /// renderer draws.
    Empty,
}

/// Why a positioned read failed: an I/O error, or a remote read that may work later.
pub(super) enum ReadError {
    Io(std::io::Error),
    /// Network or server failure (after retries).
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    Unavailable(String),
    /// A remote atlas was replaced on the server since it was opened.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    Replaced,
    /// A ranged store does not hold these bytes yet (`offset`, `len`).
    Missing(u64, u64),
}

impl Store {
    pub(super) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), ReadError> {
        match self {
            Self::File(f) => f.read_exact_at(buf, offset).map_err(ReadError::Io),
            #[cfg(feature = "remote")]
            Self::Remote(r) => r.read_exact_at(buf, offset).map_err(ReadError::from_remote),
            Self::Ranged(r) => {
                r.read_into(buf, offset).map_err(|m| ReadError::Missing(m.start, m.end - m.start))
            }
            Self::Empty => Err(ReadError::Io(std::io::Error::other(format!(
                "a produced atlas stores no bytes ({} asked for at {offset})",
                buf.len()
            )))),
        }
    }

    /// A tile blob (the remote store goes through its disk cache).
    pub(super) fn read_blob(&self, offset: u64, len: u32, crc: u32) -> Result<Vec<u8>, ReadError> {
        match self {
            #[cfg(feature = "remote")]
            Self::Remote(r) => r.read_blob(offset, len, crc).map_err(ReadError::from_remote),
            _ => {
                let _ = crc;
                let mut blob = vec![0u8; len as usize];
                self.read_exact_at(&mut blob, offset)?;
                Ok(blob)
            }
        }
    }

    /// A version-2 index page (the remote store serves it from the bytes read at open
    /// when they cover it, else like a blob).
    pub(super) fn read_page(&self, offset: u64, len: u32, crc: u32) -> Result<Vec<u8>, ReadError> {
        match self {
            #[cfg(feature = "remote")]
            Self::Remote(r) => r.read_page(offset, len, crc).map_err(ReadError::from_remote),
            _ => self.read_blob(offset, len, crc),
        }
    }

    pub(super) fn len(&self) -> std::io::Result<u64> {
        match self {
            Self::File(f) => Ok(f.metadata()?.len()),
            #[cfg(feature = "remote")]
            Self::Remote(r) => Ok(r.size()),
            Self::Ranged(r) => Ok(r.object_len()),
            Self::Empty => Ok(0),
        }
    }

    /// Drops bytes that failed their checksum from a ranged store, so that a later
    /// read fetches them again (other stores hold nothing to drop).
    pub(super) fn forget(&self, offset: u64, len: u64) {
        if let Self::Ranged(r) = self {
            r.forget(offset..offset.saturating_add(len));
        }
    }
}

impl ReadError {
    #[cfg(feature = "remote")]
    pub(super) fn from_remote(e: crate::format::atlas::remote::RemoteError) -> Self {
        if e.is_transient() {
            Self::Unavailable(e.to_string())
        } else if matches!(e, crate::format::atlas::remote::RemoteError::Replaced) {
            Self::Replaced
        } else {
            Self::Io(std::io::Error::other(e.to_string()))
        }
    }

    pub(super) fn into_io(self) -> std::io::Error {
        match self {
            Self::Io(e) => e,
            Self::Unavailable(m) => std::io::Error::other(m),
            Self::Replaced => {
                std::io::Error::other("the atlas was replaced on the server since it was opened")
            }
            Self::Missing(offset, len) => std::io::Error::other(format!(
                "bytes {offset}..{} are not fetched yet",
                offset.saturating_add(len)
            )),
        }
    }

    /// The error of a read at open: I/O, or bytes a ranged store does not hold yet.
    pub(super) fn at_open(self, path: &Path) -> AtlasError {
        match self {
            Self::Missing(offset, len) => AtlasError::NeedBytes { path: path.to_path_buf(), offset, len },
            other => AtlasError::Io { path: path.to_path_buf(), source: other.into_io() },
        }
    }

    /// The error of a read for `tile` (its blob or its index page).
    pub(super) fn for_tile(self, path: &Path, tile: TileId) -> AtlasError {
        let path = path.to_path_buf();
        match self {
            Self::Io(source) => AtlasError::Changed { path, tile, source },
            Self::Unavailable(reason) => AtlasError::Unavailable { path, tile, reason },
            Self::Replaced => AtlasError::Replaced { path, tile },
            Self::Missing(offset, len) => AtlasError::NeedBytes { path, offset, len },
        }
    }
}
