//! The scratch folder the harnesses write their inputs to (the atlas reader and the glTF
//! import read files): one per thread, reused for every input, and swept once its
//! process is gone. It lies in `/dev/shm` where there is one: rewriting a file on a disk
//! file system (ext4 with `discard`) costs milliseconds, on tmpfs microseconds.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

/// Prefix of the scratch folders in the system temporary folder: `{PREFIX}{pid}-{n}`.
const PREFIX: &str = "tessera-fuzz-";

/// A named set of files that inputs may refer to, and the function that writes them.
pub(super) type Shared = (&'static str, fn(&Path) -> std::io::Result<()>);

/// A scratch folder and the sets of shared files already written to it.
struct Scratch {
    dir: PathBuf,
    prepared: Vec<&'static str>,
}

thread_local! {
    /// This thread's scratch folder, created on first use.
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

/// Writes `bytes` to the file `name` of this thread's scratch folder (replacing what
/// was there) and returns its path. `shared` names a set of files that inputs may refer
/// to and the function that writes them; it runs once per folder.
pub(super) fn write(name: &str, bytes: &[u8], shared: Option<Shared>) -> Option<PathBuf> {
    SCRATCH.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = create().map(|dir| Scratch { dir, prepared: Vec::new() });
        }
        let scratch = cell.as_mut()?;
        if let Some((key, prepare)) = shared
            && !scratch.prepared.contains(&key)
        {
            prepare(&scratch.dir).ok()?;
            scratch.prepared.push(key);
        }
        let path = scratch.dir.join(name);
        std::fs::write(&path, bytes).ok()?;
        Some(path)
    })
}

/// Creates a fresh scratch folder for this thread, after deleting those whose process
/// has exited (a fuzzer kills its targets, so nothing else would).
fn create() -> Option<PathBuf> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    sweep(&tmp);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = tmp.join(format!("{PREFIX}{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// Deletes the scratch folders in `tmp` of processes that no longer run (Linux only:
/// elsewhere nothing is deleted).
fn sweep(tmp: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(tmp) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else { continue };
        let Some(Ok(pid)) = rest.split('-').next().map(str::parse::<u32>) else { continue };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
