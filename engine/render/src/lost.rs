//! Device loss: what the device-lost callback and the uncaptured-error handler record
//! instead of panicking, and the error every long-running path returns once the GPU
//! device is gone (driver reset, GPU removed, out of memory, `Device::destroy`).
//!
//! Validation errors are not losses: they are bugs (in Tessera or in an embedder's
//! passes) and still panic, as wgpu's default handler does, so tests fail at the call
//! that made them. Only once the device is known to be lost are they expected (every
//! resource of a lost device is invalid) and logged at debug level instead.

use std::cell::RefCell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};

/// Why the device was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostCause {
    /// `Device::destroy` was called.
    Destroyed,
    /// The driver or the system took the device away (reset, removal, hang).
    Driver,
    /// wgpu reported an out-of-memory error.
    OutOfMemory,
    /// wgpu reported an internal error.
    Internal,
}

impl fmt::Display for LostCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Destroyed => "destroyed",
            Self::Driver => "driver reset or GPU removed",
            Self::OutOfMemory => "out of GPU memory",
            Self::Internal => "internal GPU error",
        })
    }
}

/// The GPU device is gone: nothing submitted to it runs any more and every resource made
/// on it is invalid. Recreate the context (and everything made with it), or exit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the GPU device was lost ({cause}): {message} — restart the application; if this repeats, \
     update the GPU driver"
)]
pub struct DeviceLost {
    /// Why.
    pub cause: LostCause,
    /// What wgpu or the driver said (may be empty for a destroyed device).
    pub message: String,
}

/// The first fatal condition of one device, shared with its callbacks.
#[derive(Debug, Default)]
pub(crate) struct LostState {
    lost: AtomicBool,
    first: Mutex<Option<DeviceLost>>,
}

impl LostState {
    /// Installs the device-lost callback and the uncaptured-error handler on `device`.
    pub(crate) fn install(device: &wgpu::Device) -> Arc<Self> {
        install_panic_filter();
        let state = Arc::new(Self::default());
        let on_lost = state.clone();
        device.set_device_lost_callback(move |reason, message| {
            let cause = match reason {
                wgpu::DeviceLostReason::Destroyed => LostCause::Destroyed,
                wgpu::DeviceLostReason::Unknown => LostCause::Driver,
            };
            let message = match (message.is_empty(), cause) {
                (false, _) => message,
                (true, LostCause::Destroyed) => "Device::destroy was called".to_owned(),
                (true, _) => "no details from the driver".to_owned(),
            };
            on_lost.record(DeviceLost { cause, message });
        });
        let on_error = state.clone();
        device.on_uncaptured_error(Arc::new(move |error: wgpu::Error| on_error.uncaptured(error)));
        state
    }

    /// Keeps the first loss; later ones are consequences of it.
    pub(crate) fn record(&self, lost: DeviceLost) {
        let mut first = self.first.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if first.is_none() {
            tracing::debug!("{lost}");
            *first = Some(lost);
        }
        self.lost.store(true, Ordering::Release);
    }

    /// The first loss recorded, if any.
    pub(crate) fn get(&self) -> Option<DeviceLost> {
        if !self.lost.load(Ordering::Acquire) {
            return None;
        }
        self.first.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn uncaptured(&self, error: wgpu::Error) {
        match error {
            wgpu::Error::OutOfMemory { .. } => {
                self.record(DeviceLost { cause: LostCause::OutOfMemory, message: error.to_string() });
            }
            wgpu::Error::Internal { description, .. } => {
                self.record(DeviceLost { cause: LostCause::Internal, message: description });
            }
            wgpu::Error::Validation { description, .. } => {
                if self.lost.load(Ordering::Acquire) {
                    tracing::debug!("after the device was lost: {description}");
                } else if description.contains(" is invalid") {
                    // A resource made invalid by a device being destroyed or lost, before
                    // the device-lost callback has run (it waits for the queue to drain):
                    // the loss itself is recorded when the callback comes. (A resource
                    // whose creation failed validation already panicked above.)
                    tracing::debug!("a resource of a device being lost: {description}");
                } else {
                    // A bug, not a runtime condition: fail where it happened, as wgpu does.
                    panic!("wgpu validation error: {description}");
                }
            }
        }
    }
}

thread_local! {
    /// The device whose poll this thread is inside (see [`poll`]).
    static POLLING: RefCell<Option<Arc<LostState>>> = const { RefCell::new(None) };
}

/// Polls `device`. wgpu panics when a poll finds the device lost by the driver (after
/// calling the device-lost callback); that panic becomes `Err` here, without a message
/// on stderr. Any other panic goes on as before.
pub(crate) fn poll(
    device: &wgpu::Device,
    state: &Arc<LostState>,
    poll_type: wgpu::PollType,
) -> Result<wgpu::PollStatus, PollFailure> {
    let previous = POLLING.with(|p| p.replace(Some(state.clone())));
    let result = catch_unwind(AssertUnwindSafe(|| device.poll(poll_type)));
    POLLING.with(|p| p.replace(previous));
    match result {
        Ok(Ok(status)) => Ok(status),
        Ok(Err(e)) => Err(PollFailure::Poll(e)),
        Err(panic) => match state.get() {
            Some(lost) => Err(PollFailure::Lost(lost)),
            None => resume_unwind(panic),
        },
    }
}

/// Why [`poll`] failed.
#[derive(Debug)]
pub(crate) enum PollFailure {
    /// The device was lost.
    Lost(DeviceLost),
    /// A timeout or a wrong submission index.
    Poll(wgpu::PollError),
}

/// Chains a panic hook that stays silent for the panic wgpu raises inside [`poll`] when
/// the device polled is recorded lost; every other panic reaches the previous hook.
fn install_panic_filter() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let quiet = POLLING
                .try_with(|p| p.try_borrow().is_ok_and(|s| s.as_ref().is_some_and(|s| s.get().is_some())))
                .unwrap_or(false);
            if !quiet {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_loss_is_kept_and_reads_clearly() {
        let state = LostState::default();
        assert_eq!(state.get(), None);
        state.record(DeviceLost { cause: LostCause::Driver, message: "VK_ERROR_DEVICE_LOST".into() });
        state.record(DeviceLost { cause: LostCause::Destroyed, message: String::new() });
        let lost = state.get().expect("recorded");
        assert_eq!(lost.cause, LostCause::Driver);
        let text = lost.to_string();
        assert!(
            text.starts_with(
                "the GPU device was lost (driver reset or GPU removed): VK_ERROR_DEVICE_LOST — restart"
            ),
            "{text}"
        );
    }
}
