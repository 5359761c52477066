//! Progress reporting for long jobs (bakes, atlas checks) without tying the core to a
//! terminal library: callers pass a [`Progress`], apps adapt it to their own display.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Receives the progress of a long job: how many steps there are, how many are done and
/// which stage it is in. Called from worker threads, hence `Send + Sync`.
pub trait Progress: Send + Sync {
    /// Sets the number of steps the job will take (may be called again as it learns more).
    fn set_length(&self, n: u64);
    /// Records `n` more steps done.
    fn inc(&self, n: u64);
    /// Names the stage the job is in (e.g. a layer and mip); empty when there is none.
    fn set_message(&self, _message: &str) {}
    /// Marks the job as done.
    fn finish(&self) {}
}

/// Progress that nobody watches.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn set_length(&self, _n: u64) {}
    fn inc(&self, _n: u64) {}
}

/// Progress kept in atomic counters, for a job on one thread watched from another (for
/// example a window drawing a bake's progress every frame).
#[derive(Debug, Default)]
pub struct ProgressCounter {
    position: AtomicU64,
    length: AtomicU64,
    finished: AtomicBool,
    message: Mutex<String>,
}

impl ProgressCounter {
    /// A counter at 0 of 0 steps.
    pub fn new() -> Self {
        Self::default()
    }

    /// Steps done so far.
    pub fn position(&self) -> u64 {
        self.position.load(Ordering::Relaxed)
    }

    /// Steps the job announced (0 before it announced any).
    pub fn length(&self) -> u64 {
        self.length.load(Ordering::Relaxed)
    }

    /// The stage last named by the job.
    pub fn message(&self) -> String {
        self.message.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Whether the job called [`Progress::finish`].
    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Relaxed)
    }
}

impl Progress for ProgressCounter {
    fn set_length(&self, n: u64) {
        self.length.store(n, Ordering::Relaxed);
    }

    fn inc(&self, n: u64) {
        self.position.fetch_add(n, Ordering::Relaxed);
    }

    fn set_message(&self, message: &str) {
        if let Ok(mut m) = self.message.lock() {
            message.clone_into(&mut m);
        }
    }

    fn finish(&self) {
        self.finished.store(true, Ordering::Relaxed);
    }
}

/// How often [`LogProgress`] writes a line unless told otherwise.
pub const DEFAULT_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Progress written as a line of text every few seconds ([`DEFAULT_LOG_INTERVAL`]) and
/// once more when every step is done, through `tracing::info!` unless
/// [`LogProgress::with_sink`] sends it elsewhere: for a long job whose output goes to a
/// log, where a progress bar would show nothing for minutes. A line reads
/// `bake: 1234/5678 tiles (21.7%), 312.4 tiles/s, ETA 14 s [layer mip 2]` (see
/// [`progress_line`]; the ETA comes once its rate, measured from the first step, means
/// something); the counts it prints never go down. [`Progress::inc`] stays cheap
/// enough for every tile: an atomic add and one read of the clock, a line formatted only
/// when one is due.
pub struct LogProgress {
    job: String,
    interval_ns: u64,
    start: Instant,
    done: AtomicU64,
    total: AtomicU64,
    /// Nanoseconds after `start` when the next line is due.
    next_due_ns: AtomicU64,
    /// Nanoseconds after `start` when the first step was done (`u64::MAX` before): the
    /// ETA's rate is measured from there, not from a start spent on work that counts no
    /// steps (a shard reading and filtering up to its own tiles).
    first_step_ns: AtomicU64,
    /// Set once the line at 100% is out: no line follows it.
    complete: AtomicBool,
    stage: Mutex<String>,
    /// What a step is: a tile, a byte (shown in MiB) or a part.
    unit: Unit,
    /// The steps done that the last line said; held while a line is written.
    printed: Mutex<u64>,
    sink: Box<dyn Fn(&str) + Send + Sync>,
}

impl LogProgress {
    /// Progress of `job` (the line's first word, e.g. `bake`), a line every
    /// [`DEFAULT_LOG_INTERVAL`] through `tracing::info!`.
    pub fn new(job: impl Into<String>) -> Self {
        Self {
            job: job.into(),
            interval_ns: DEFAULT_LOG_INTERVAL.as_nanos() as u64,
            start: Instant::now(),
            done: AtomicU64::new(0),
            total: AtomicU64::new(0),
            next_due_ns: AtomicU64::new(DEFAULT_LOG_INTERVAL.as_nanos() as u64),
            first_step_ns: AtomicU64::new(u64::MAX),
            complete: AtomicBool::new(false),
            stage: Mutex::new(String::new()),
            unit: Unit::Tiles,
            printed: Mutex::new(0),
            sink: Box::new(|line| tracing::info!("{line}")),
        }
    }

    /// A line every `interval` instead (zero: one at every step).
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval_ns = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
        *self.next_due_ns.get_mut() = self.interval_ns;
        self
    }

    /// Steps counted in `unit` (tiles by default; bytes for uploads and downloads, parts
    /// for a split merge).
    pub fn with_unit(mut self, unit: Unit) -> Self {
        self.unit = unit;
        self
    }

    /// Sends each line to `sink` instead of `tracing::info!` (e.g. straight to stderr).
    pub fn with_sink(mut self, sink: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.sink = Box::new(sink);
        self
    }

    /// Writes a line now (unless the line at 100% is already out), saying at least as many
    /// steps done as the line before it.
    fn emit(&self) {
        let mut printed = self.printed.lock().unwrap_or_else(PoisonError::into_inner);
        if self.complete.load(Ordering::Relaxed) {
            return;
        }
        let done = self.done.load(Ordering::Relaxed).max(*printed);
        let total = self.total.load(Ordering::Relaxed);
        if total > 0 && done >= total {
            self.complete.store(true, Ordering::Relaxed);
        }
        *printed = done;
        let stage = self.stage.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let elapsed = self.start.elapsed();
        let first =
            Duration::from_nanos(self.first_step_ns.load(Ordering::Relaxed).min(elapsed.as_nanos() as u64));
        let line = line_at(self.unit, &self.job, done, total, (elapsed, elapsed - first), &stage);
        (self.sink)(&line);
    }
}

impl std::fmt::Debug for LogProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogProgress")
            .field("job", &self.job)
            .field("interval_ns", &self.interval_ns)
            .field("done", &self.done)
            .field("total", &self.total)
            .finish_non_exhaustive()
    }
}

impl Progress for LogProgress {
    fn set_length(&self, n: u64) {
        self.total.store(n, Ordering::Relaxed);
    }

    fn inc(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        if self.complete.load(Ordering::Relaxed) {
            return;
        }
        let total = self.total.load(Ordering::Relaxed);
        let now = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if n > 0 && self.first_step_ns.load(Ordering::Relaxed) == u64::MAX {
            let _ = self.first_step_ns.compare_exchange(u64::MAX, now, Ordering::Relaxed, Ordering::Relaxed);
        }
        let due = self.next_due_ns.load(Ordering::Relaxed);
        let last = total > 0 && done >= total;
        // One thread wins the due line; the others carry on.
        if last
            || (now >= due
                && self
                    .next_due_ns
                    .compare_exchange(
                        due,
                        now.saturating_add(self.interval_ns),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok())
        {
            self.emit();
        }
    }

    fn set_message(&self, message: &str) {
        message.clone_into(&mut self.stage.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// Writes the last line, unless the line at 100% is already out or no step was done
    /// (a job that found nothing to do).
    fn finish(&self) {
        if self.done.load(Ordering::Relaxed) > 0 {
            self.emit();
        }
    }
}

/// A line of progress of `job`: `bake: 1234/5678 tiles (21.7%), 312.4 tiles/s, ETA 14 s
/// [layer mip 2]`; at the end `… (100.0%), 312.4 tiles/s, done in 18 s`; without a length
/// (`total` 0) only the count and the rate. The percentage is rounded down, so it says
/// 100% only when every tile is done; the stage in brackets only when there is one.
pub fn progress_line(job: &str, done: u64, total: u64, elapsed: Duration, stage: &str) -> String {
    line_in(Unit::Tiles, job, done, total, elapsed, stage)
}

/// [`progress_line`] or [`byte_progress_line`], by `unit`.
fn line_in(unit: Unit, job: &str, done: u64, total: u64, elapsed: Duration, stage: &str) -> String {
    line_at(unit, job, done, total, (elapsed, elapsed), stage)
}

/// Before an ETA is given, at least this share of the steps is done (1/100)…
const ETA_MIN_SHARE: u64 = 100;
/// …or steps have been done for this long; and at least for [`ETA_MIN_STEPPING`].
const ETA_SETTLED: Duration = Duration::from_secs(30);
/// The shortest time of doing steps whose rate an ETA is drawn from.
const ETA_MIN_STEPPING: Duration = Duration::from_secs(1);

/// [`line_in`] with `elapsed` as (since the job started, since its first step): the rate
/// shown is over the whole job, the ETA's over the time steps were done, and there is
/// an ETA only once that rate means something ([`ETA_MIN_SHARE`], [`ETA_SETTLED`]): a
/// shard's first line said "ETA 166 h" from its first few tiles (issue 44).
fn line_at(
    unit: Unit,
    job: &str,
    done: u64,
    total: u64,
    elapsed: (Duration, Duration),
    stage: &str,
) -> String {
    let (elapsed, stepping) = elapsed;
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    let mib = |b: f64| b / f64::from(1u32 << 20);
    let (count, of, per) = match unit {
        Unit::Tiles | Unit::Parts => {
            let word = unit.word();
            (done.to_string(), format!("{total} {word}"), format!("{rate:.1} {word}/s"))
        }
        Unit::Bytes => (
            format!("{:.1}", mib(done as f64)),
            format!("{:.1} MiB", mib(total as f64)),
            format!("{:.1} MiB/s", mib(rate)),
        ),
    };
    let mut line = if total == 0 {
        format!("{job}: {count} {}, {per}", unit.word())
    } else {
        let tenths = u128::from(done.min(total)) * 1000 / u128::from(total);
        let mut line = format!("{job}: {count}/{of} ({}.{}%), {per}", tenths / 10, tenths % 10);
        if done >= total {
            line.push_str(&format!(", done in {}", short_duration(secs)));
        } else if done > 0
            && stepping >= ETA_MIN_STEPPING
            && (done.saturating_mul(ETA_MIN_SHARE) >= total || stepping >= ETA_SETTLED)
        {
            let rate = done as f64 / stepping.as_secs_f64();
            line.push_str(&format!(", ETA {}", short_duration((total - done) as f64 / rate)));
        }
        line
    };
    if !stage.is_empty() {
        line.push_str(&format!(" [{stage}]"));
    }
    line
}

/// What the steps of a [`LogProgress`] count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unit {
    /// Tiles (`1234/5678 tiles`).
    #[default]
    Tiles,
    /// Bytes, shown in MiB (`12.0/48.0 MiB`).
    Bytes,
    /// Files, such as the shard parts a split merge indexes (`3/16 parts`).
    Parts,
}

impl Unit {
    /// The word a line counts in: `tiles`, `MiB` or `parts`.
    pub fn word(self) -> &'static str {
        match self {
            Self::Tiles => "tiles",
            Self::Bytes => "MiB",
            Self::Parts => "parts",
        }
    }
}

/// Like [`progress_line`] for a job counted in bytes: `publish: 12.0/48.0 MiB (25.0%),
/// 6.0 MiB/s, ETA 6 s [uploading]`.
pub fn byte_progress_line(job: &str, done: u64, total: u64, elapsed: Duration, stage: &str) -> String {
    line_in(Unit::Bytes, job, done, total, elapsed, stage)
}

/// `secs` as `14 s`, `3 min 05 s` or `2 h 07 min`.
fn short_duration(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn a_progress_line_says_count_rate_eta_and_stage() {
        let t = Duration::from_secs(4);
        assert_eq!(
            progress_line("bake", 1234, 5678, t, "layer mip 2"),
            "bake: 1234/5678 tiles (21.7%), 308.5 tiles/s, ETA 14 s [layer mip 2]"
        );
        assert_eq!(
            progress_line("bake", 5678, 5678, t, ""),
            "bake: 5678/5678 tiles (100.0%), 1419.5 tiles/s, done in 4 s"
        );
        // Rounded down: 100% only at the end.
        assert!(progress_line("verify", 9999, 10000, t, "").contains("(99.9%)"));
        assert_eq!(progress_line("bake", 12, 0, t, ""), "bake: 12 tiles, 3.0 tiles/s");
        assert_eq!(
            byte_progress_line("publish", 12 << 20, 48 << 20, t, "uploading"),
            "publish: 12.0/48.0 MiB (25.0%), 3.0 MiB/s, ETA 12 s [uploading]"
        );
        assert_eq!(
            byte_progress_line("publish", 48 << 20, 48 << 20, t, ""),
            "publish: 48.0/48.0 MiB (100.0%), 12.0 MiB/s, done in 4 s"
        );
        assert_eq!(progress_line("bake", 0, 10, Duration::ZERO, ""), "bake: 0/10 tiles (0.0%), 0.0 tiles/s");
        // Issue 44: a split merge counted its parts as tiles.
        assert_eq!(
            line_in(Unit::Parts, "merge", 4, 4, t, "indexing shard parts"),
            "merge: 4/4 parts (100.0%), 1.0 parts/s, done in 4 s [indexing shard parts]"
        );
        assert_eq!(line_in(Unit::Parts, "merge", 3, 0, t, ""), "merge: 3 parts, 0.8 parts/s");
        // Issue 44: no ETA from a shard's first few tiles, and the rate an ETA is drawn
        // from starts at the first step.
        let hours = Duration::from_secs(3600);
        assert_eq!(progress_line("bake", 3, 120_000, t, ""), "bake: 3/120000 tiles (0.0%), 0.8 tiles/s");
        assert_eq!(
            line_at(Unit::Tiles, "bake", 3000, 120_000, (hours, Duration::from_secs(60)), ""),
            "bake: 3000/120000 tiles (2.5%), 0.8 tiles/s, ETA 39 min 00 s"
        );
        assert!(
            !line_at(Unit::Tiles, "bake", 50, 10_000, (t, Duration::from_millis(500)), "").contains("ETA")
        );
        assert!(
            line_at(Unit::Tiles, "bake", 50, 10_000, (hours, ETA_SETTLED), "").contains("ETA 1 h 39 min")
        );
        assert_eq!(short_duration(185.0), "3 min 05 s");
        assert_eq!(short_duration(7620.0), "2 h 07 min");
    }

    /// Parses the steps done out of a line.
    fn done_in(line: &str) -> u64 {
        let count = line.split(": ").nth(1).and_then(|r| r.split([' ', '/']).next());
        count.and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no count in {line:?}"))
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs a clock")]
    fn log_lines_are_monotone_and_end_at_100_percent() {
        let lines = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = lines.clone();
        let p = LogProgress::new("bake")
            .with_interval(Duration::ZERO)
            .with_sink(move |l| sink.lock().unwrap().push(l.to_owned()));
        p.set_length(4000);
        p.set_message("g mip 0");
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..1000).for_each(|_| p.inc(1)));
            }
        });
        p.finish();
        let lines = lines.lock().unwrap();
        assert!(lines.len() > 1, "{lines:?}");
        let counts: Vec<u64> = lines.iter().map(|l| done_in(l)).collect();
        assert!(counts.windows(2).all(|w| w[0] <= w[1]), "not monotone: {counts:?}");
        let last = lines.last().unwrap();
        assert!(last.contains("4000/4000 tiles (100.0%)") && last.ends_with("[g mip 0]"), "{last}");
        assert_eq!(lines.iter().filter(|l| l.contains("100.0%")).count(), 1, "one final line");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs a clock")]
    fn log_lines_wait_for_their_interval() {
        let lines = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = lines.clone();
        let p = LogProgress::new("verify")
            .with_interval(Duration::from_secs(3600))
            .with_sink(move |l| sink.lock().unwrap().push(l.to_owned()));
        p.set_length(10);
        (0..9).for_each(|_| p.inc(1));
        assert!(lines.lock().unwrap().is_empty(), "no line before the interval");
        p.inc(1);
        p.finish();
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with("verify: 10/10 tiles (100.0%)"), "{lines:?}");
    }

    #[test]
    #[cfg_attr(target_arch = "wasm32", ignore = "needs threads")]
    fn counter_counts_across_threads() {
        let counter = ProgressCounter::new();
        let p: &dyn Progress = &counter;
        p.set_length(400);
        p.set_message("layer mip 0");
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..100).for_each(|_| p.inc(1)));
            }
        });
        assert_eq!((counter.position(), counter.length()), (400, 400));
        assert_eq!(counter.message(), "layer mip 0");
        assert!(!counter.is_finished());
        p.finish();
        assert!(counter.is_finished());
        NoProgress.inc(1);
    }
}
