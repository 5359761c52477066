//! Progress reporting for long jobs (bakes, atlas checks) without tying the core to a
//! terminal library: callers pass a [`Progress`], apps adapt it to their own display.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
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
