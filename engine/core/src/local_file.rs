//! Opening local files that a reader did not write (atlases, split atlases' data objects,
//! shard parts): regular files only, opened without ever blocking on a FIFO, and, where a
//! folder's files are read on its say-so, paths confined to that folder (symbolic links
//! leading out of it refused). The glTF importer follows the same confinement rule.
//!
//! Also the platform edge of local files: Unix's positioned reads, non-blocking opens and
//! file identities natively; on wasm32 (the browser build), where no file can be opened,
//! stand-ins that let the code reading files compile and fail as unsupported.

use std::fs::File;
use std::io::{Error, ErrorKind};
use std::path::Path;

pub(crate) use platform::{FileExt, file_identity, unix_file_kind};

/// Opens `path` for reading when it is a regular file (or a symbolic link to one). The
/// file is opened non-blocking and checked on the open handle, so a FIFO, socket or
/// device swapped in at any moment is refused at once instead of blocking the read; the
/// error says what it is (its message does not repeat the path: callers name it).
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    let file = platform::open_nonblocking(path)?;
    let meta = file.metadata()?;
    if let Some(kind) = crate::bake::input_file::special_kind(meta.file_type()) {
        return Err(Error::new(ErrorKind::InvalidInput, format!("it is {kind}, not a regular file")));
    }
    // O_NONBLOCK stays set: reads of a regular file never block and ignore it.
    Ok(file)
}

/// Whether `file`, if it exists, really lies inside `folder`, symbolic links followed on
/// both sides (a folder that is itself a link is fine; a file, or a folder of it, that
/// links out is not). A file that does not exist passes: opening it will say so. A folder
/// that cannot be resolved contains nothing.
pub fn lies_in(folder: &Path, file: &Path) -> bool {
    let Ok(real) = file.canonicalize() else { return true };
    let folder = if folder.as_os_str().is_empty() { Path::new(".") } else { folder };
    folder.canonicalize().is_ok_and(|f| real.starts_with(f))
}

/// [`open_regular`] for a file that must lie in `folder` ([`lies_in`]): a symbolic link
/// leading out of it is refused before anything is opened (an error of kind
/// `PermissionDenied` naming the folder, never the link's target or its size), and the
/// file opened is checked to be the one resolved, so a link changed meanwhile is refused
/// too.
pub fn open_confined(folder: &Path, path: &Path) -> std::io::Result<File> {
    let outside = || {
        Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "a symbolic link leads out of {}: refused (files outside it are not read)",
                folder.display()
            ),
        )
    };
    if !lies_in(folder, path) {
        return Err(outside());
    }
    let file = open_regular(path)?;
    let opened = file.metadata()?;
    let real = path.canonicalize()?;
    let resolved = std::fs::metadata(&real)?;
    if file_identity(&opened) != file_identity(&resolved) || !lies_in(folder, &real) {
        return Err(outside());
    }
    Ok(file)
}

/// The folder of a file path: its parent, or `.` for a bare name.
pub fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Unix: what the standard library's Unix extensions give.
#[cfg(not(target_arch = "wasm32"))]
mod platform {
    use std::fs::{File, FileType, Metadata};
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _};
    use std::path::Path;

    /// Positioned reads (`pread`) of a file, shared by any number of threads.
    pub(crate) use std::os::unix::fs::FileExt;

    /// Opens `path` for reading with `O_NONBLOCK`: opening a FIFO never waits for a writer.
    pub(super) fn open_nonblocking(path: &Path) -> std::io::Result<File> {
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)
    }

    /// What makes two open files the same file: device and inode.
    pub(crate) fn file_identity(meta: &Metadata) -> (u64, u64) {
        (meta.dev(), meta.ino())
    }

    /// A FIFO, socket or device, in words; `None` for any other type.
    pub(crate) fn unix_file_kind(file_type: FileType) -> Option<&'static str> {
        if file_type.is_fifo() {
            Some("a FIFO (named pipe)")
        } else if file_type.is_socket() {
            Some("a socket")
        } else if file_type.is_char_device() {
            Some("a character device")
        } else if file_type.is_block_device() {
            Some("a block device")
        } else {
            None
        }
    }
}

/// wasm32: the standard library opens no file there (every open fails as unsupported), so
/// no `File`, `Metadata` or `FileType` ever exists and these are never reached.
#[cfg(target_arch = "wasm32")]
mod platform {
    use std::fs::{File, FileType, Metadata};
    use std::io::{Error, ErrorKind};
    use std::path::Path;

    /// The one method of Unix's `FileExt` the crate uses.
    pub(crate) trait FileExt {
        /// Reads exactly `buf.len()` bytes at `offset`.
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
    }

    impl FileExt for File {
        fn read_exact_at(&self, _buf: &mut [u8], _offset: u64) -> std::io::Result<()> {
            Err(Error::new(ErrorKind::Unsupported, "no local files on wasm32"))
        }
    }

    pub(super) fn open_nonblocking(path: &Path) -> std::io::Result<File> {
        File::open(path)
    }

    pub(crate) fn file_identity(_meta: &Metadata) -> (u64, u64) {
        (0, 0)
    }

    pub(crate) fn unix_file_kind(_file_type: FileType) -> Option<&'static str> {
        None
    }
}

// Files, links and FIFOs: wasm32 has no file system (scripts/web-core-tests).
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::io::Read as _;

    fn mkfifo(path: &Path) {
        assert!(std::process::Command::new("mkfifo").arg(path).status().unwrap().success());
    }

    #[test]
    fn only_regular_files_open_and_a_fifo_never_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a"), b"abc").unwrap();
        std::os::unix::fs::symlink(d.join("a"), d.join("link")).unwrap();
        mkfifo(&d.join("fifo"));
        std::os::unix::fs::symlink(d.join("fifo"), d.join("to-fifo")).unwrap();
        let mut text = String::new();
        open_regular(&d.join("link")).unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text, "abc");
        let start = std::time::Instant::now();
        for (bad, kind) in [("fifo", "FIFO"), ("to-fifo", "FIFO"), ("", "directory")] {
            let e = open_regular(&d.join(bad)).unwrap_err();
            assert!(e.to_string().contains(kind), "{bad}: {e}");
        }
        let e = open_regular(Path::new("/dev/null")).unwrap_err();
        assert!(e.to_string().contains("device"), "{e}");
        assert!(start.elapsed().as_secs() < 5, "an open blocked");
    }

    #[test]
    fn links_out_of_the_folder_are_refused_links_inside_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let (inside, outside) = (dir.path().join("in"), dir.path().join("out"));
        std::fs::create_dir_all(inside.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(inside.join("sub/p"), b"part").unwrap();
        std::fs::write(outside.join("secret"), b"not yours").unwrap();
        std::os::unix::fs::symlink(inside.join("sub/p"), inside.join("near")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), inside.join("far")).unwrap();
        std::os::unix::fs::symlink(&outside, inside.join("dir")).unwrap();
        for ok in ["sub/p", "near", "missing"] {
            assert!(lies_in(&inside, &inside.join(ok)), "{ok}");
        }
        open_confined(&inside, &inside.join("near")).unwrap();
        for bad in ["far", "dir/secret"] {
            assert!(!lies_in(&inside, &inside.join(bad)), "{bad}");
            let e = open_confined(&inside, &inside.join(bad)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{bad}");
            assert!(e.to_string().contains("symbolic link") && !e.to_string().contains("secret"), "{e}");
        }
        // A folder that is itself a link holds what is in it.
        std::os::unix::fs::symlink(&inside, dir.path().join("alias")).unwrap();
        open_confined(&dir.path().join("alias"), &dir.path().join("alias/sub/p")).unwrap();
        assert_eq!(folder_of(Path::new("a.tsa")), Path::new("."));
        assert_eq!(folder_of(Path::new("/d/a.tsa")), Path::new("/d"));
    }
}
