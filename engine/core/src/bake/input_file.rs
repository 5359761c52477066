//! The rule that a bake reads regular files only, and never more of one than the memory
//! limit allows: a FIFO, socket, device or folder given as an input is refused from its
//! metadata, before anything opens it (opening a FIFO blocks until a writer comes).

use std::fs::{FileType, Metadata};
use std::io::Read as _;
use std::path::Path;

use crate::bake::source::SourceError;

/// What a file of type `file_type` is, in words ("a FIFO (named pipe)", "a character
/// device"), when it is not a regular file; `None` for a regular file. Symbolic links are
/// not followed here: pass the type of what a link points to.
pub fn special_kind(file_type: FileType) -> Option<&'static str> {
    if file_type.is_file() {
        return None;
    }
    Some(if file_type.is_dir() {
        "a directory"
    } else if let Some(kind) = crate::local_file::unix_file_kind(file_type) {
        kind
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    })
}

/// The metadata of what `path` names, following a symbolic link (so a link to a regular
/// file counts as one). Nothing is opened.
pub fn target_metadata(path: &Path) -> std::io::Result<Metadata> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() { std::fs::metadata(path) } else { Ok(meta) }
}

/// Checks, from its metadata alone, that `path` is a regular file (or a link to one) a
/// bake may open, and returns that metadata. A missing path, a URL that names no local
/// file, a folder and any other kind of file (FIFO, socket, device) are errors naming the
/// path.
pub fn check_input(path: &Path) -> Result<Metadata, SourceError> {
    let p = path.to_path_buf();
    let meta = target_metadata(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound if crate::format::atlas::is_remote_location(path) => {
            SourceError::Url { path: p.clone() }
        }
        std::io::ErrorKind::NotFound => SourceError::Missing { path: p.clone() },
        _ => SourceError::Io { path: p.clone(), source },
    })?;
    match special_kind(meta.file_type()) {
        None => Ok(meta),
        Some(_) if meta.is_dir() => Err(SourceError::Directory { path: p }),
        Some(kind) => Err(SourceError::NotRegular { path: p, kind }),
    }
}

/// Reads the whole regular file at `path` ([`check_input`] first), refusing one of more
/// than `limit` bytes: by its length before reading, and by reading at most `limit + 1`
/// bytes, so a file that grows meanwhile cannot make the read unbounded.
pub fn read_input(path: &Path, limit: u64) -> Result<Vec<u8>, SourceError> {
    let meta = check_input(path)?;
    let too_long = |bytes| SourceError::FileOverMemory { path: path.to_path_buf(), bytes, limit };
    if meta.len() > limit {
        return Err(too_long(meta.len()));
    }
    let io = |source| SourceError::Io { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    // The name may have been replaced between the check and the open.
    let opened = file.metadata().map_err(io)?;
    if let Some(kind) = special_kind(opened.file_type()) {
        return Err(SourceError::NotRegular { path: path.to_path_buf(), kind });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(opened.len().min(limit)).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(too_long(bytes.len() as u64));
    }
    Ok(bytes)
}

// Files, links and FIFOs: wasm32 has no file system (scripts/web-core-tests).
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    /// A FIFO made with `mkfifo`.
    fn fifo(path: &Path) {
        let made = std::process::Command::new("mkfifo").arg(path).status().expect("run mkfifo");
        assert!(made.success(), "mkfifo {}", path.display());
    }

    #[test]
    fn only_regular_files_and_links_to_them_are_inputs() {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let file = d.join("a.png");
        std::fs::write(&file, b"12345").expect("write");
        std::os::unix::fs::symlink(&file, d.join("link.png")).expect("symlink");
        assert!(check_input(&file).is_ok());
        assert_eq!(read_input(&d.join("link.png"), 5).expect("read through a link"), b"12345");
        let pipe = d.join("pipe.png");
        fifo(&pipe);
        std::os::unix::fs::symlink(&pipe, d.join("to-pipe.png")).expect("symlink");
        // Refused from metadata: were the FIFO opened, these would block forever.
        for p in [pipe, d.join("to-pipe.png")] {
            let err = read_input(&p, 1 << 20).expect_err("a FIFO is no input");
            assert!(matches!(err, SourceError::NotRegular { .. }), "{err}");
            let text = err.to_string();
            assert!(text.contains(&*p.to_string_lossy()) && text.contains("FIFO"), "{text}");
        }
        for (dev, kind) in [("/dev/null", "character device"), ("/dev/zero", "character device")] {
            let err = check_input(Path::new(dev)).expect_err("a device is no input");
            assert!(err.to_string().contains(dev) && err.to_string().contains(kind), "{err}");
        }
        assert!(matches!(check_input(d), Err(SourceError::Directory { .. })));
        assert!(matches!(check_input(&d.join("none.png")), Err(SourceError::Missing { .. })));
        std::os::unix::fs::symlink(d.join("none.png"), d.join("dangling.png")).expect("symlink");
        assert!(matches!(check_input(&d.join("dangling.png")), Err(SourceError::Missing { .. })));
        // Issue 44: a URL was "no such file".
        for url in ["s3://bucket/x.tif", "gs://b/x.tif", "az://c/x.tif", "HTTPS://h/x.png", "http://h/x.png"]
        {
            let err = check_input(Path::new(url)).expect_err("a URL is no input");
            assert!(matches!(err, SourceError::Url { .. }), "{err}");
            assert!(err.to_string().starts_with(&format!("{url}: URL inputs are not read by bake")), "{err}");
        }
    }

    #[test]
    fn reads_are_bounded_by_the_limit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("big.bin");
        std::fs::write(&file, [7u8; 100]).expect("write");
        assert_eq!(read_input(&file, 100).expect("at the limit").len(), 100);
        let err = read_input(&file, 99).expect_err("over the limit");
        assert!(matches!(err, SourceError::FileOverMemory { bytes: 100, limit: 99, .. }), "{err}");
        assert!(err.to_string().contains("big.bin"), "{err}");
    }
}
