//! Temporary files (and staging folders) of writes in progress: listed while they live,
//! so that a signal handler can delete them before the process exits, and named with the
//! writer's process id, so that a later bake can sweep the ones a killed process left
//! behind.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// The temporary files this process has open now, each with whether it is a folder.
static LIVE: Mutex<Vec<(PathBuf, bool)>> = Mutex::new(Vec::new());

/// Where processes cannot be looked up (no `/proc`), a temporary file this old is stale.
pub const STALE_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// A temporary file of this process: listed for [`remove_all`] while it lives, deleted on
/// drop unless [`TempPath::keep`] says it was renamed into place.
#[derive(Debug)]
pub struct TempPath {
    path: PathBuf,
    armed: bool,
    folder: bool,
}

impl TempPath {
    /// Lists `path` (not yet created, or just created) as a live temporary file.
    pub fn new(path: PathBuf) -> Self {
        LIVE.lock().unwrap_or_else(PoisonError::into_inner).push((path.clone(), false));
        Self { path, armed: true, folder: false }
    }

    /// Lists the folder `path` (not yet made, or just made) as a live temporary folder:
    /// deleted with everything in it on drop and by [`remove_all`].
    pub fn new_folder(path: PathBuf) -> Self {
        LIVE.lock().unwrap_or_else(PoisonError::into_inner).push((path.clone(), true));
        Self { path, armed: true, folder: true }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file was renamed into place (or already removed): forget it without deleting.
    pub fn keep(&mut self) {
        if self.armed {
            self.armed = false;
            unlist(&self.path);
        }
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if self.armed {
            let _ = remove(&self.path, self.folder);
            unlist(&self.path);
        }
    }
}

fn unlist(path: &Path) {
    let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(i) = live.iter().rposition(|(p, _)| p == path) {
        live.swap_remove(i);
    }
}

fn remove(path: &Path, folder: bool) -> std::io::Result<()> {
    if folder { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) }
}

/// Deletes every temporary file and folder this process has open now; returns how many
/// were deleted. For a signal handler about to exit the process: the writers still
/// holding these files will fail or never finish.
pub fn remove_all() -> usize {
    let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(PoisonError::into_inner));
    // Files first: a folder's removal takes its listed files with it.
    let (folders, files): (Vec<_>, Vec<_>) = live.into_iter().partition(|(_, folder)| *folder);
    files.into_iter().chain(folders).filter(|(p, folder)| remove(p, *folder).is_ok()).count()
}

/// How many temporary files this process has open now.
pub fn live_count() -> usize {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner).len()
}

/// The name of this process's temporary file with `prefix` and `suffix`:
/// `{prefix}{pid}{suffix}.tmp`, the form [`sweep`] recognises. `suffix` must be empty or
/// start with `-` or `.`.
pub fn temp_name(prefix: &str, suffix: &str) -> String {
    format!("{prefix}{}{suffix}.tmp", std::process::id())
}

/// Deletes the temporary files in `dir` named `{prefix}{pid}….tmp` (see [`temp_name`])
/// whose process is gone: on Linux, no `/proc/{pid}`; elsewhere, unchanged for
/// [`STALE_AGE`]. Files of this process and of live processes stay. Returns how many
/// files were deleted; a folder that cannot be listed deletes nothing.
pub fn sweep(dir: &Path, prefix: &str) -> usize {
    sweep_kind(dir, prefix, false)
}

/// [`sweep`] for temporary folders ([`TempPath::new_folder`]): each one of a process
/// that is gone is deleted with everything in it. A symbolic link is never followed.
pub fn sweep_folders(dir: &Path, prefix: &str) -> usize {
    sweep_kind(dir, prefix, true)
}

fn sweep_kind(dir: &Path, prefix: &str, folders: bool) -> usize {
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| left_by_gone_process(n, prefix, &entry.path())) else {
            continue;
        };
        if entry.file_type().is_ok_and(|t| t.is_dir()) != folders {
            continue;
        }
        if remove(&entry.path(), folders).is_ok() {
            tracing::info!("removed {}, left by process {pid}", entry.path().display());
            removed += 1;
        }
    }
    removed
}

/// The process id in `name`, when it is a temporary file name `{prefix}{pid}[-.…].tmp`
/// (at `path`) of a process that is gone (not this one).
pub(crate) fn left_by_gone_process(name: &str, prefix: &str, path: &Path) -> Option<u32> {
    let pid = temp_pid(name, prefix)?;
    (pid != std::process::id() && is_stale(pid, path)).then_some(pid)
}

/// The process id in a temporary file name `{prefix}{pid}[-.…].tmp`.
fn temp_pid(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?.strip_suffix(".tmp")?;
    let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    let (pid, tail) = rest.split_at(digits);
    if !(tail.is_empty() || tail.starts_with(['-', '.'])) {
        return None;
    }
    pid.parse().ok()
}

/// Whether a temporary file of process `pid` was left behind.
fn is_stale(pid: u32, path: &Path) -> bool {
    if Path::new("/proc/self").exists() {
        return !Path::new("/proc").join(pid.to_string()).exists();
    }
    let modified = std::fs::symlink_metadata(path).and_then(|m| m.modified());
    modified.is_ok_and(|t| SystemTime::now().duration_since(t).is_ok_and(|age| age > STALE_AGE))
}

/// A process id that no live process has: a child that has exited and been reaped.
#[cfg(test)]
pub(crate) fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait");
    pid
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs processes")]
    fn names_parse_back_to_their_pid() {
        assert_eq!(temp_pid(".a.tsa.123.tmp", ".a.tsa."), Some(123));
        assert_eq!(temp_pid(".tessera-level-77-4x4-0.tmp", ".tessera-level-"), Some(77));
        assert_eq!(temp_pid(".a.tsa.bake.123.tmp", ".a.tsa."), None);
        assert_eq!(temp_pid(".a.tsa.123x.tmp", ".a.tsa."), None);
        assert_eq!(temp_pid(".b.tsa.123.tmp", ".a.tsa."), None);
        let own = temp_name(".x.", "-1");
        assert_eq!(temp_pid(&own, ".x."), Some(std::process::id()));
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn sweep_removes_dead_processes_files_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let dead = dir.path().join(format!(".a.tsa.{}.tmp", dead_pid()));
        let own = dir.path().join(temp_name(".a.tsa.", ""));
        let other = dir.path().join(format!(".b.tsa.{}.tmp", dead_pid()));
        for p in [&dead, &own, &other] {
            std::fs::write(p, b"x").expect("write");
        }
        assert_eq!(sweep(dir.path(), ".a.tsa."), 1);
        assert!(!dead.exists() && own.exists() && other.exists());
        // Folders are swept by sweep_folders only, with what they hold.
        let stage = dir.path().join(format!("stage-{}-0-of-2.tmp", dead_pid()));
        std::fs::create_dir(&stage).expect("mkdir");
        std::fs::write(stage.join("spool"), b"x").expect("write");
        assert_eq!(sweep(dir.path(), "stage-"), 0);
        assert_eq!(sweep_folders(dir.path(), "stage-"), 1);
        assert!(!stage.exists());
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs files")]
    fn a_temp_path_is_deleted_unless_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (a, b) = (dir.path().join("a.tmp"), dir.path().join("b.tmp"));
        std::fs::write(&a, b"x").expect("write");
        std::fs::write(&b, b"x").expect("write");
        drop(TempPath::new(a.clone()));
        let mut kept = TempPath::new(b.clone());
        kept.keep();
        drop(kept);
        assert!(!a.exists() && b.exists());
        let folder = dir.path().join("stage");
        std::fs::create_dir(&folder).expect("mkdir");
        std::fs::write(folder.join("spool"), b"x").expect("write");
        drop(TempPath::new_folder(folder.clone()));
        assert!(!folder.exists());
        // remove_all() is exercised by the CLI's SIGTERM test: here it would delete the
        // temporary files of tests running in parallel.
    }
}
