//! The terminal progress bar of the CLI: an indicatif bar behind the core's `Progress`.

use indicatif::{ProgressBar, ProgressStyle};
use tessera_core::Progress;

/// A progress bar on stderr (hidden when stderr is not a terminal) that core jobs drive.
pub(crate) struct Bar(ProgressBar);

impl Bar {
    /// A bar of `len` tiles (0 until the job announces its length).
    pub(crate) fn new(len: u64) -> Self {
        let pb = ProgressBar::new(len);
        pb.set_style(
            ProgressStyle::with_template(
                "{spinner} {msg:24} [{bar:40}] {pos}/{len} tiles ({per_sec}, ETA {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        Self(pb)
    }

    /// Removes the bar from the terminal.
    pub(crate) fn clear(&self) {
        self.0.finish_and_clear();
    }
}

impl Progress for Bar {
    fn set_length(&self, n: u64) {
        self.0.set_length(n);
    }

    fn inc(&self, n: u64) {
        self.0.inc(n);
    }

    fn set_message(&self, message: &str) {
        self.0.set_message(message.to_owned());
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}
