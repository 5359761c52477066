//! SIGINT, SIGTERM, SIGHUP and SIGQUIT: delete this process's temporary files and folders
//! (a shard baking into `s3://` stages its part in one), then exit with the conventional
//! status (128 + the signal's number), so an interrupted bake leaves nothing. (SIGPIPE is
//! ignored, as in every Rust program: a write to a closed pipe is an error that unwinds
//! normally, and dropping the writers deletes their files. SIGKILL cannot be caught:
//! spilled levels have no name to leave, the next bake beside the same output sweeps the
//! atlas's temporary file, and the next shard or merge into `s3://` the staging folders of
//! killed shards.)

use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::Signals;

/// Starts the thread that waits for SIGINT, SIGTERM, SIGHUP and SIGQUIT. Without it (when the handler
/// cannot be installed) the signals keep their default action; a later bake still sweeps
/// what the killed one left.
pub(crate) fn install() {
    let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT]) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(
                "cannot handle SIGINT/SIGTERM/SIGHUP/SIGQUIT ({e}); an interrupted bake may leave temporary files"
            );
            return;
        }
    };
    let spawned = std::thread::Builder::new().name("tessera signals".into()).spawn(move || {
        if let Some(signal) = signals.forever().next() {
            let removed = tessera_core::temp_files::remove_all();
            if removed > 0 {
                eprintln!("tessera: interrupted; removed {removed} temporary file(s)");
            }
            // An interrupted publish: its multipart uploads would stay (and be billed).
            let aborted = tessera_core::format::atlas::publish::abort_uploads_in_flight();
            if aborted > 0 {
                eprintln!("tessera: interrupted; aborted {aborted} unfinished upload(s)");
            }
            std::process::exit(128 + signal);
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the signal thread ({e}); an interrupted bake may leave temporary files");
    }
}
