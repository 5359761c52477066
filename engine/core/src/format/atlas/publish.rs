//! `tessera publish`: an atlas uploaded to object storage (`s3://`, `gs://`, `az://`), checked there
//! against the local file, without ever replacing a different atlas by accident, and
//! without leaving unfinished multipart uploads behind when it fails or is interrupted.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Atlas, AtlasError, RemoteOptions};
use crate::Progress;
use crate::bake::shard_remote::Remote;
use crate::format::tile::TileId;

/// Aborts the uploads this process has in progress (S3 and Azure multipart uploads, GCS
/// resumable sessions) and refuses new ones; returns how many were aborted. For a
/// SIGINT or SIGTERM handler about to exit the process, so that an interrupted publish
/// leaves no unfinished upload (which S3 keeps, and bills, until it is aborted).
pub fn abort_uploads_in_flight() -> usize {
    super::remote::upload::abort_in_flight()
}

/// Tiles whose blobs are read back from the server and compared, spread over the atlas
/// (every index entry is compared in any case).
pub const CHECKED_BLOBS: usize = 256;

/// What [`publish`] did.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PublishReport {
    /// The URL to open.
    pub url: String,
    /// Objects uploaded (a split atlas: its data objects, then its index).
    pub uploaded: Vec<String>,
    /// Data objects of a split atlas found already there, equal to the local ones (an
    /// earlier, interrupted publish), and not uploaded again.
    #[serde(default)]
    pub kept: Vec<String>,
    /// Bytes uploaded.
    pub bytes: u64,
    /// The server already held this very atlas: nothing was uploaded.
    pub already_there: bool,
    /// Index entries compared with the local file's.
    pub entries_checked: u64,
    /// Blobs read back and compared.
    pub blobs_checked: u64,
}

/// Why a publish failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The local atlas is not valid.
    #[error(transparent)]
    Atlas(#[from] AtlasError),
    /// The destination is not an object store URL.
    #[error(
        "{0}: publish uploads to object storage: give an s3://bucket/key, gs://bucket/key or az://container/key URL"
    )]
    NotObjectStore(String),
    /// Another atlas (or another object) is at the destination.
    #[error("{url}: {what} is already there; give --force to replace it")]
    Exists {
        /// The destination.
        url: String,
        /// What is there.
        what: String,
    },
    /// Uploading failed.
    #[error("{url}: upload failed: {reason}")]
    Upload {
        /// The object.
        url: String,
        /// Why.
        reason: String,
    },
    /// The uploaded copy differs from the local atlas.
    #[error("{url}: the uploaded copy differs from {local}: {what}")]
    Mismatch {
        /// The destination.
        url: String,
        /// The local atlas.
        local: PathBuf,
        /// What differs.
        what: String,
    },
}

/// Uploads the atlas `local` to `url` (`s3://bucket/key`, `gs://bucket/key`,
/// `az://container/key`; a split atlas' data objects go
/// to the keys its index names, beside it), in multipart uploads of 16 MiB parts (aborted
/// on failure; unfinished ones an earlier, killed run left at the same S3 key are aborted
/// first; `progress` counts bytes the server acknowledged), then
/// opens the remote copy and checks it against the local one: the same layers, every
/// index entry equal, and [`CHECKED_BLOBS`] blobs read back equal. An object already at
/// `url` is replaced only with `force`, unless it is this very atlas (then nothing is
/// uploaded, and the copy is checked all the same).
pub fn publish(
    local: &Path,
    url: &str,
    force: bool,
    s3: &[(String, String)],
    progress: &dyn Progress,
) -> Result<PublishReport, PublishError> {
    // The remote schemes but plain web servers, which take no uploads.
    let lower = url.to_ascii_lowercase();
    if !super::REMOTE_SCHEMES.iter().any(|s| !s.starts_with("http") && lower.starts_with(s)) {
        return Err(PublishError::NotObjectStore(url.to_owned()));
    }
    let atlas = Atlas::open(local)?;
    let upload_err = |url: &str, reason: String| PublishError::Upload { url: url.to_owned(), reason };
    let target = Remote::new(Path::new(url), s3).map_err(|e| upload_err(url, e.to_string()))?;
    let remote_opts = RemoteOptions { s3: s3.to_vec(), ..RemoteOptions::without_disk_cache() };
    let mut already_there = false;
    if target.size_if_any().map_err(|e| upload_err(url, e.to_string()))?.is_some() {
        match Atlas::open_with(url, &remote_opts) {
            Ok(there) if same_atlas(&atlas, &there) => already_there = true,
            Ok(_) if !force => {
                return Err(PublishError::Exists { url: url.to_owned(), what: "another atlas".into() });
            }
            Err(e) if !force => {
                return Err(PublishError::Exists {
                    url: url.to_owned(),
                    what: format!("an object that is not this atlas ({e})"),
                });
            }
            _ => {}
        }
    }
    let mut uploaded = Vec::new();
    let mut kept = Vec::new();
    let mut bytes = 0;
    if !already_there {
        // Data objects first: the index names them, so it goes last.
        let mut files: Vec<(PathBuf, String)> = atlas
            .data_objects()
            .into_iter()
            .map(|(o, path)| {
                (path, super::split::resolve(Path::new(url), &o.name).to_string_lossy().into_owned())
            })
            .collect();
        files.push((local.to_path_buf(), url.to_owned()));
        let total: u64 = files.iter().filter_map(|(p, _)| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
        progress.set_length(total);
        progress.set_message("uploading");
        let index = files.len() - 1;
        for (i, (path, to)) in files.iter().enumerate() {
            let remote = Remote::new(Path::new(to), s3).map_err(|e| upload_err(to, e.to_string()))?;
            // A rerun after an interrupted publish keeps the data objects that made it
            // (the index, naming them, always goes again, last).
            if i < index && same_object(&remote, path) {
                progress.inc(std::fs::metadata(path).map_or(0, |m| m.len()));
                kept.push(to.clone());
                continue;
            }
            bytes += super::remote::upload::upload_file(to, s3, path, progress)
                .map_err(|e| upload_err(to, e.to_string()))?;
            uploaded.push(to.clone());
        }
    }
    let there = Atlas::open_with(url, &remote_opts).map_err(|e| PublishError::Mismatch {
        url: url.to_owned(),
        local: local.to_path_buf(),
        what: format!("it does not open: {e}"),
    })?;
    let (entries_checked, blobs_checked) = check_copy(&atlas, &there, url, local)?;
    Ok(PublishReport {
        url: url.to_owned(),
        uploaded,
        kept,
        bytes,
        already_there,
        entries_checked,
        blobs_checked,
    })
}

/// Bytes compared at each end of a data object found already uploaded.
const ENDS_COMPARED: u64 = 64 << 10;

/// Whether the object at `remote` is already the file `local`: the same size, and the
/// same first and last [`ENDS_COMPARED`] bytes (a shard part's header and its index
/// pages, which name every blob's CRC). What follows the upload checks every index
/// entry and [`CHECKED_BLOBS`] blobs of the copy in any case.
fn same_object(remote: &Remote, local: &Path) -> bool {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let Ok(mut file) = std::fs::File::open(local) else { return false };
    let Ok(len) = file.metadata().map(|m| m.len()) else { return false };
    if !matches!(remote.size_if_any(), Ok(Some(n)) if n == len) {
        return false;
    }
    let head = 0..len.min(ENDS_COMPARED);
    let tail = len.saturating_sub(ENDS_COMPARED)..len;
    [head, tail].into_iter().all(|r| {
        let mut here = vec![0u8; (r.end - r.start) as usize];
        let read = file.seek(SeekFrom::Start(r.start)).and_then(|_| file.read_exact(&mut here));
        read.is_ok() && remote.read(r).is_ok_and(|there| there == here)
    })
}

/// Whether two opened atlases are the same file: layers, flags, sizes and, through the
/// root directory's page checksums, the index.
fn same_atlas(a: &Atlas, b: &Atlas) -> bool {
    a.layers() == b.layers()
        && a.flags() == b.flags()
        && a.version() == b.version()
        && a.file_size() == b.file_size()
        && a.stored_bytes() == b.stored_bytes()
        && a.meta_bytes() == b.meta_bytes()
}

/// Compares every index entry of `there` with `here`'s, and [`CHECKED_BLOBS`] blobs.
fn check_copy(here: &Atlas, there: &Atlas, url: &str, local: &Path) -> Result<(u64, u64), PublishError> {
    let differ =
        |what: String| PublishError::Mismatch { url: url.to_owned(), local: local.to_path_buf(), what };
    if !same_atlas(here, there) {
        return Err(differ("its header, layers or index pages differ".into()));
    }
    let tiles: Vec<TileId> =
        here.layers().iter().enumerate().flat_map(|(i, l)| l.layout.tiles(i as u16)).collect();
    let step = (tiles.len() / CHECKED_BLOBS).max(1);
    let mut sample = Vec::new();
    for (i, &t) in tiles.iter().enumerate() {
        let (a, b) = (here.entry(t)?, there.entry(t).map_err(|e| differ(e.to_string()))?);
        if a != b {
            return Err(differ(format!("the index entry of {t}")));
        }
        if i % step == 0 {
            sample.push(t);
        }
    }
    for (t, got) in sample.iter().zip(there.read_tiles(&sample, &|_| true)) {
        let got = got.map_err(|e| differ(e.to_string()))?;
        if got != here.read_tile(*t)? {
            return Err(differ(format!("the blob of {t}")));
        }
    }
    Ok((tiles.len() as u64, sample.len() as u64))
}
