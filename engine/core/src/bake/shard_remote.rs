//! Shard parts and split-atlas indexes in object storage (`s3://bucket/prefix/…`): a
//! shard uploads its part as `publish` does (a multipart upload aborted on failure and
//! on interruption), a merge lists the parts, reads their
//! records with range requests and puts the index object. Same settings as remote
//! reading ([`crate::format::atlas::remote`]): the `AWS_*` environment, plus
//! [`RemoteOptions::s3`](crate::format::atlas::RemoteOptions::s3).

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::format::atlas::remote::{RemoteError, map_error as map, store_for};

/// An object of a store, for a few blocking calls.
pub(crate) struct Remote {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    runtime: tokio::runtime::Runtime,
    /// The location and settings it was opened with, for [`Remote::upload`].
    location: String,
    settings: Vec<(String, String)>,
}

impl Remote {
    /// The object at `location` (`s3://…`; `http(s)://` only for reading).
    pub(crate) fn new(location: &Path, s3: &[(String, String)]) -> Result<Self, RemoteError> {
        let text = location.to_str().ok_or_else(|| RemoteError::Config("location is not UTF-8".into()))?;
        let (store, path) = store_for(text, s3)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| RemoteError::Config(format!("starting the network runtime: {e}")))?;
        Ok(Self { store, path, runtime, location: text.to_owned(), settings: s3.to_vec() })
    }

    /// The object's size, or `None` when there is no such object.
    pub(crate) fn size_if_any(&self) -> Result<Option<u64>, RemoteError> {
        match self.runtime.block_on(self.store.head(&self.path)) {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(map(e)),
        }
    }

    /// The object's size.
    pub(crate) fn size(&self) -> Result<u64, RemoteError> {
        let meta = self.runtime.block_on(self.store.head(&self.path)).map_err(map)?;
        Ok(meta.size)
    }

    /// Bytes `range` of the object.
    pub(crate) fn read(&self, range: Range<u64>) -> Result<Vec<u8>, RemoteError> {
        let want = range.end - range.start;
        let bytes = self.runtime.block_on(self.store.get_range(&self.path, range.clone())).map_err(map)?;
        if bytes.len() as u64 != want {
            return Err(RemoteError::Short { offset: range.start, want, got: bytes.len() as u64 });
        }
        Ok(bytes.to_vec())
    }

    /// Replaces the object with `bytes` (one PUT: atomic on S3).
    pub(crate) fn put(&self, bytes: Vec<u8>) -> Result<(), RemoteError> {
        self.runtime.block_on(self.store.put(&self.path, bytes.into())).map_err(map)?;
        Ok(())
    }

    /// Replaces the object with the file `local` through publish's uploader
    /// ([`crate::format::atlas::remote::upload::upload_file`]): one PUT when it fits in
    /// one part, else a multipart upload (either way the object appears whole, or not
    /// at all) that is aborted when it fails or the process is interrupted, after
    /// unfinished uploads to the same key (a killed shard's) are aborted. Returns the
    /// bytes sent.
    pub(crate) fn upload(&self, local: &Path, progress: &dyn crate::Progress) -> Result<u64, std::io::Error> {
        crate::format::atlas::remote::upload::upload_file(&self.location, &self.settings, local, progress)
            .map_err(std::io::Error::other)
    }

    /// Names and sizes of the objects directly below this "folder" (the object path as
    /// a prefix).
    pub(crate) fn list(&self) -> Result<Vec<(String, u64)>, RemoteError> {
        self.runtime.block_on(async {
            let mut out = Vec::new();
            let mut listing = self.store.list(Some(&self.path));
            while let Some(meta) = listing.next().await {
                let meta = meta.map_err(map)?;
                if let Some(name) = meta.location.filename() {
                    out.push((name.to_string(), meta.size));
                }
            }
            Ok(out)
        })
    }
}
