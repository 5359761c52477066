//! Standard output that may be a pipe its reader closes early (`tessera inspect --tiles
//! big.tsa | head -1`): the command stops there quietly and exits 0, as writers into
//! `head` conventionally do, instead of panicking in `println!` with exit status 101.

use std::any::Any;
use std::io::{self, BufWriter, ErrorKind, StdoutLock, Write};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::process::ExitCode;

/// The error of a write to standard output after its reader went away: not a failure of
/// the command, which ends with success.
#[derive(Debug)]
pub(crate) struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Standard output, locked and buffered, for commands that print long listings: use it
/// with `writeln!(out, ..)?`; a closed pipe is a [`StdoutClosed`] error.
pub(crate) struct Out(BufWriter<StdoutLock<'static>>);

impl Out {
    /// Locks standard output for this command.
    pub(crate) fn new() -> Self {
        Self(BufWriter::new(io::stdout().lock()))
    }

    /// Writes formatted text (what `write!` and `writeln!` call).
    pub(crate) fn write_fmt(&mut self, args: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
        self.0.write_fmt(args).map_err(closed_or)
    }

    /// Writes what is buffered.
    pub(crate) fn flush(&mut self) -> anyhow::Result<()> {
        self.0.flush().map_err(closed_or)
    }
}

fn closed_or(e: io::Error) -> anyhow::Error {
    if e.kind() == ErrorKind::BrokenPipe {
        StdoutClosed.into()
    } else {
        anyhow::Error::new(e).context("cannot write to standard output")
    }
}

/// Runs a command and turns standard output closed under it into [`StdoutClosed`]:
/// its own writes through [`Out`], and a `println!` anywhere else, whose panic is caught
/// here (after the unwinding has run every cleanup) and whose message is not printed.
pub(crate) fn guard(command: impl FnOnce() -> anyhow::Result<ExitCode>) -> anyhow::Result<ExitCode> {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_stdout_closed(info.payload()) {
            default(info);
        }
    }));
    match catch_unwind(AssertUnwindSafe(command)) {
        Ok(result) => result,
        Err(payload) if is_stdout_closed(payload.as_ref()) => Err(StdoutClosed.into()),
        Err(payload) => resume_unwind(payload),
    }
}

/// Whether a panic is `println!`'s on a closed standard output.
fn is_stdout_closed(payload: &(dyn Any + Send)) -> bool {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied());
    text.is_some_and(|t| t.starts_with("failed printing to stdout") && t.contains("Broken pipe"))
}

/// Whether a command's error `e` is only that its standard output was closed: it ends
/// with success.
pub(crate) fn is_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<StdoutClosed>())
}
