//! Waiting for the GPU: native threads may block (until the adapter answers, until a
//! buffer is mapped); a browser's thread (wasm32) may not, so there the blocking helpers
//! fail with [`RenderError::WouldBlock`] naming their `async` twin, and callbacks reach
//! `async` code through a one-shot channel.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::error::RenderError;

/// Whether this target lets a thread block until the GPU answers: everywhere but in
/// a browser, where the answer comes from the event loop that a blocked thread holds up.
pub const MAY_BLOCK: bool = cfg!(not(target_arch = "wasm32"));

/// Ok where [`MAY_BLOCK`]; else the error that sends the caller of `call` to `instead`.
pub(crate) fn may_block(call: &'static str, instead: &'static str) -> Result<(), RenderError> {
    if MAY_BLOCK { Ok(()) } else { Err(RenderError::WouldBlock { call, instead }) }
}

/// Runs `future` to completion on this thread, for the synchronous constructors.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn block_on<T>(
    _call: &'static str,
    _instead: &'static str,
    future: impl Future<Output = Result<T, RenderError>>,
) -> Result<T, RenderError> {
    pollster::block_on(future)
}

/// In a browser, the error of [`may_block`]: the future needs the event loop that
/// blocking here would hold up.
#[cfg(target_arch = "wasm32")]
pub(crate) fn block_on<T>(
    call: &'static str,
    instead: &'static str,
    _future: impl Future<Output = Result<T, RenderError>>,
) -> Result<T, RenderError> {
    Err(RenderError::WouldBlock { call, instead })
}

/// A value handed from a callback (wgpu's `map_async`, `on_submitted_work_done`) to the
/// future that awaits it; the future yields `None` if the callback is dropped unsent.
pub(crate) fn oneshot<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Mutex::new(Slot { value: None, sent: false, closed: false, waker: None }));
    (Sender { shared: Some(shared.clone()) }, Receiver { shared })
}

struct Slot<T> {
    value: Option<T>,
    sent: bool,
    closed: bool,
    waker: Option<Waker>,
}

/// The callback's end of [`oneshot`].
pub(crate) struct Sender<T> {
    shared: Option<Arc<Mutex<Slot<T>>>>,
}

impl<T> Sender<T> {
    /// Hands `value` to the receiver and wakes it.
    pub(crate) fn send(mut self, value: T) {
        if let Some(shared) = self.shared.take() {
            let waker = {
                let mut slot = shared.lock().unwrap_or_else(PoisonError::into_inner);
                slot.value = Some(value);
                slot.sent = true;
                slot.waker.take()
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            let waker = {
                let mut slot = shared.lock().unwrap_or_else(PoisonError::into_inner);
                slot.closed = true;
                slot.waker.take()
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

/// The awaiting end of [`oneshot`].
pub(crate) struct Receiver<T> {
    shared: Arc<Mutex<Slot<T>>>,
}

impl<T> Future for Receiver<T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut slot = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.sent {
            return Poll::Ready(slot.value.take());
        }
        if slot.closed {
            return Poll::Ready(None);
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sent_value_arrives_and_a_dropped_sender_ends_the_wait() {
        let (tx, rx) = oneshot();
        let waiting = std::thread::spawn(move || pollster::block_on(rx));
        std::thread::sleep(std::time::Duration::from_millis(20));
        tx.send(7);
        assert_eq!(waiting.join().ok(), Some(Some(7)));

        let (tx, rx) = oneshot::<u32>();
        drop(tx);
        assert_eq!(pollster::block_on(rx), None);
    }

    #[test]
    fn native_threads_may_block() {
        const { assert!(MAY_BLOCK) };
        assert!(may_block("a", "b").is_ok());
        assert_eq!(block_on("a", "b", async { Ok(3) }).ok(), Some(3));
    }
}
