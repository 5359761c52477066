//! Where an atlas' bytes come from: positioned reads of a local file, or range requests
//! to an object store, with one error type for both.

use super::*;

/// Where an atlas' bytes come from: a local file, or an object on a server.
pub(super) enum Store {
    File(File),
    #[cfg(feature = "remote")]
    Remote(Box<crate::format::atlas::remote::RemoteObject>),
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
}

impl Store {
    pub(super) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), ReadError> {
        match self {
            Self::File(f) => f.read_exact_at(buf, offset).map_err(ReadError::Io),
            #[cfg(feature = "remote")]
            Self::Remote(r) => r.read_exact_at(buf, offset).map_err(ReadError::from_remote),
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
        }
    }
}
