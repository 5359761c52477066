//! The progress of long CLI jobs behind the core's `Progress`: an indicatif bar on a
//! terminal, else a line every few seconds, so a job whose stderr goes to a log still
//! says how far it is.

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tessera_core::progress::Unit;
use tessera_core::{LogProgress, Progress};

/// The environment variable that sets the seconds between progress lines when stderr is
/// not a terminal (default 5).
const SECONDS_VAR: &str = "TESSERA_PROGRESS_SECONDS";

/// Progress of a job on stderr that core jobs drive: a bar on a terminal, lines otherwise.
pub(crate) enum Bar {
    /// Stderr is a terminal.
    Terminal(ProgressBar),
    /// Stderr is a file or a pipe: a line every few seconds and one at 100%.
    Lines(LogProgress),
}

impl Bar {
    /// Progress of `job` (e.g. `bake`) over `len` tiles (0 until the job announces its length).
    pub(crate) fn new(job: &str, len: u64) -> Self {
        Self::counting(job, len, Unit::Tiles)
    }

    /// Progress of `job` counted in bytes (uploads): a bar in bytes on a terminal, lines
    /// in MiB otherwise.
    pub(crate) fn bytes(job: &str) -> Self {
        Self::counting(job, 0, Unit::Bytes)
    }

    /// Progress of `job` counted in parts (a split merge indexes parts, not tiles).
    pub(crate) fn parts(job: &str) -> Self {
        Self::counting(job, 0, Unit::Parts)
    }

    fn counting(job: &str, len: u64, unit: Unit) -> Self {
        if !std::io::stderr().is_terminal() {
            let lines = LogProgress::new(job).with_unit(unit).with_interval(interval()).with_sink(|line| {
                // A closed stderr must not stop the job.
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            });
            lines.set_length(len);
            return Self::Lines(lines);
        }
        let counts = match unit {
            Unit::Tiles => "{pos}/{len} tiles ({per_sec}",
            Unit::Parts => "{pos}/{len} parts ({per_sec}",
            Unit::Bytes => "{bytes}/{total_bytes} ({bytes_per_sec}",
        };
        let pb = ProgressBar::new(len);
        pb.set_style(
            ProgressStyle::with_template(&format!(
                "{{spinner}} {{msg:24}} [{{bar:40}}] {counts}, ETA {{eta}})"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        Self::Terminal(pb)
    }

    /// Ends the job's progress: removes the bar from the terminal, or writes the last line.
    pub(crate) fn clear(&self) {
        match self {
            Self::Terminal(pb) => pb.finish_and_clear(),
            Self::Lines(lines) => lines.finish(),
        }
    }
}

/// The seconds between progress lines: `$TESSERA_PROGRESS_SECONDS`, else 5.
fn interval() -> Duration {
    let Some(value) = std::env::var_os(SECONDS_VAR) else {
        return tessera_core::progress::DEFAULT_LOG_INTERVAL;
    };
    match value
        .to_str()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
    {
        Some(d) => d,
        None => {
            eprintln!("tessera: warning: {SECONDS_VAR}={value:?} is not a number of seconds; using 5");
            tessera_core::progress::DEFAULT_LOG_INTERVAL
        }
    }
}

impl Progress for Bar {
    fn set_length(&self, n: u64) {
        match self {
            Self::Terminal(pb) => pb.set_length(n),
            Self::Lines(lines) => lines.set_length(n),
        }
    }

    fn inc(&self, n: u64) {
        match self {
            Self::Terminal(pb) => pb.inc(n),
            Self::Lines(lines) => lines.inc(n),
        }
    }

    fn set_message(&self, message: &str) {
        match self {
            Self::Terminal(pb) => pb.set_message(message.to_owned()),
            Self::Lines(lines) => lines.set_message(message),
        }
    }

    fn finish(&self) {
        self.clear();
    }
}
