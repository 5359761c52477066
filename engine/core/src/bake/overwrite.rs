//! The rule that a bake never writes over one of its own inputs: outputs are compared
//! with inputs as files (same device and inode, so hard links and symlinks count) and as
//! canonical paths (for files that do not exist yet); and the rule that an output is a
//! regular file or nothing yet, never a device, FIFO, socket or folder.

use std::path::{Path, PathBuf};

/// A bake output that is also one of its inputs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[error(
    "refusing to write {output}: it is the input {input}{link}; choose another output path",
    link = if output == input { "" } else { " (the same file)" }
)]
pub struct OverwriteError {
    /// The output path as given.
    pub output: PathBuf,
    /// The input path as given.
    pub input: PathBuf,
}

/// Fails when any of `outputs` is the same file as any of `inputs` (see the module
/// documentation). Paths that cannot be resolved are compared as they are.
pub fn check_outputs<I, O>(inputs: I, outputs: O) -> Result<(), OverwriteError>
where
    I: IntoIterator,
    I::Item: AsRef<Path>,
    O: IntoIterator,
    O::Item: AsRef<Path>,
{
    let inputs: Vec<(PathBuf, Identity)> =
        inputs.into_iter().map(|p| (p.as_ref().to_path_buf(), Identity::of(p.as_ref()))).collect();
    for output in outputs {
        let out = Identity::of(output.as_ref());
        if let Some((input, _)) = inputs.iter().find(|(_, id)| id.same(&out)) {
            return Err(OverwriteError { output: output.as_ref().to_path_buf(), input: input.clone() });
        }
    }
    Ok(())
}

/// A bake output path that exists and is not a regular file: writing the atlas beside it
/// and renaming it over the path would replace a device node, a FIFO or a socket.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[error("refusing to write {path}: it is {kind}, not a regular file; give the path of a file to write")]
pub struct NotAFileError {
    /// The output path as given.
    pub path: PathBuf,
    /// What it is ("a character device", "a FIFO (named pipe)", "a directory").
    pub kind: &'static str,
}

/// Fails when `output` exists and is not a regular file (a symbolic link counts as what
/// it points to). Only metadata is read: nothing is opened. A path that cannot be looked
/// up is left to the write to report.
pub fn check_output_file(output: &Path) -> Result<(), NotAFileError> {
    let kind = crate::bake::input_file::target_metadata(output)
        .ok()
        .and_then(|m| crate::bake::input_file::special_kind(m.file_type()));
    match kind {
        Some(kind) => Err(NotAFileError { path: output.to_path_buf(), kind }),
        None => Ok(()),
    }
}

/// What makes two paths the same file.
struct Identity {
    /// Device and inode, where the file exists.
    file: Option<(u64, u64)>,
    /// The absolute path with every symlink of its folder resolved.
    canonical: PathBuf,
}

impl Identity {
    fn of(path: &Path) -> Self {
        let file = std::fs::metadata(path).ok().map(|m| crate::local_file::file_identity(&m));
        let canonical = path.canonicalize().unwrap_or_else(|_| {
            // A file not yet written: resolve its folder, keep its name.
            let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
            match (absolute.parent().and_then(|d| d.canonicalize().ok()), absolute.file_name()) {
                (Some(dir), Some(name)) => dir.join(name),
                _ => absolute,
            }
        });
        Self { file, canonical }
    }

    fn same(&self, other: &Self) -> bool {
        match (self.file, other.file) {
            (Some(a), Some(b)) => a == b,
            _ => self.canonical == other.canonical,
        }
    }
}

// Files, links and FIFOs: wasm32 has no file system (scripts/web-core-tests).
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[test]
    fn an_input_is_never_an_output() {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let img = d.join("x.png");
        std::fs::write(&img, b"png").expect("write");
        std::fs::create_dir(d.join("sub")).expect("mkdir");
        std::fs::hard_link(&img, d.join("link.png")).expect("hard link");
        std::os::unix::fs::symlink(&img, d.join("sym.png")).expect("symlink");
        for same in [img.clone(), d.join("sub/../x.png"), d.join("link.png"), d.join("sym.png")] {
            let err = check_outputs([&img], [d.join("out.tsa"), same.clone()]).expect_err("same file");
            assert!(err.to_string().contains("x.png"), "{err}");
            assert_eq!(err.output, same);
        }
        assert!(check_outputs([&img], [d.join("x.tsa"), d.join("x.tsa.bake")]).is_ok());
        // Neither exists: the canonical paths decide.
        let err = check_outputs([d.join("new.png")], [d.join("sub/../new.png")]).expect_err("same path");
        assert!(err.to_string().contains("new.png"), "{err}");
    }

    #[test]
    fn an_output_is_a_regular_file_or_nothing_yet() {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        std::fs::write(d.join("old.tsa"), b"atlas").expect("write");
        std::os::unix::fs::symlink(d.join("old.tsa"), d.join("link.tsa")).expect("symlink");
        std::os::unix::fs::symlink(d.join("none.tsa"), d.join("dangling.tsa")).expect("symlink");
        for ok in ["old.tsa", "link.tsa", "new.tsa", "dangling.tsa"] {
            assert!(check_output_file(&d.join(ok)).is_ok(), "{ok}");
        }
        let fifo = d.join("pipe.tsa");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
        for (bad, kind) in [(fifo, "FIFO"), (d.to_path_buf(), "directory"), ("/dev/null".into(), "device")] {
            let err = check_output_file(&bad).expect_err("not a file");
            let text = err.to_string();
            assert!(text.contains(&*bad.to_string_lossy()) && text.contains(kind), "{text}");
        }
    }
}
