//! Runs calls into the Basis Universal C++ transcoder so that an assertion failing inside
//! them becomes an error instead of an abort (Linux with glibc; elsewhere a plain call).
//!
//! The vendored transcoder is compiled with assertions on, and some fire on malformed
//! compressed contents that no structural check can rule out. `csrc/basis_guard.c`
//! defines glibc's assertion hook `__assert_fail` for the statically linked transcoder:
//! inside [`call`] it jumps back to the guard with the assertion's text; outside it
//! prints glibc's message and aborts, as before.

use std::ffi::{c_int, c_void};

/// An assertion that failed inside a guarded call: `file:line: function: Assertion
/// 'expression' failed`, as the transcoder's `assert()` reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AssertionFailed(pub(crate) String);

/// Whether this build turns assertion failures into errors. Elsewhere (macOS, Windows,
/// musl) an assertion in the transcoder still aborts the process.
pub(crate) const ACTIVE: bool = cfg!(all(target_os = "linux", target_env = "gnu"));

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod ffi {
    use std::ffi::{c_char, c_int, c_void};

    /// `f` returned; its result is in `*result`.
    pub(super) const RETURNED: c_int = 0;
    /// An assertion failed inside `f`; [`tessera_basis_guard_message`] says which.
    pub(super) const ASSERTED: c_int = 1;
    /// Called from inside a guarded call; `f` did not run.
    pub(super) const NESTED: c_int = 2;

    unsafe extern "C" {
        pub(super) fn tessera_basis_guarded(
            f: extern "C" fn(*mut c_void) -> c_int,
            ctx: *mut c_void,
            result: *mut c_int,
        ) -> c_int;
        pub(super) fn tessera_basis_guard_message() -> *const c_char;
    }
}

#[cfg(test)]
thread_local! {
    /// Tests only: call without the guard, to show that the assertion aborts.
    pub(crate) static UNGUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Calls `f(ctx)` on this thread; `Err` when an assertion failed inside it.
///
/// # Safety
///
/// `f(ctx)` must be sound to call. When an assertion fails, control jumps from the
/// assertion straight back here: nothing in the frames in between, `f`'s included, is
/// dropped or resumed. So those frames must own nothing with a destructor (no `Vec`, no
/// `Box`, no lock guard; raw pointers into buffers owned outside `f` instead), must not
/// be inside another guarded call (that is an `Err`), and after an `Err` the C++ object
/// that `f` was using may be half-way through an update: it must only be deleted.
pub(crate) unsafe fn call(
    f: extern "C" fn(*mut c_void) -> c_int,
    ctx: *mut c_void,
) -> Result<c_int, AssertionFailed> {
    #[cfg(test)]
    if UNGUARDED.get() {
        return Ok(f(ctx));
    }
    // SAFETY: the caller upholds the contract, which `guarded` shares.
    unsafe { guarded(f, ctx) }
}

/// [`call`] through the C guard.
///
/// # Safety
///
/// As for [`call`].
#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe fn guarded(
    f: extern "C" fn(*mut c_void) -> c_int,
    ctx: *mut c_void,
) -> Result<c_int, AssertionFailed> {
    let mut result: c_int = 0;
    // SAFETY: the caller upholds `f`'s contract (see `call`); the C guard takes the jump
    // target with sigsetjmp in its own frame, which outlives `f`.
    match unsafe { ffi::tessera_basis_guarded(f, ctx, &mut result) } {
        ffi::RETURNED => Ok(result),
        ffi::ASSERTED => {
            // SAFETY: the message buffer is this thread's, NUL-terminated (snprintf), and
            // nothing writes it until the next guarded assertion on this thread.
            let text = unsafe { std::ffi::CStr::from_ptr(ffi::tessera_basis_guard_message()) };
            Err(AssertionFailed(text.to_string_lossy().into_owned()))
        }
        ffi::NESTED => Err(AssertionFailed("a guarded call made inside another one".into())),
        other => Err(AssertionFailed(format!("the guard returned unknown code {other}"))),
    }
}

/// [`call`] without a guard: an assertion aborts the process.
///
/// # Safety
///
/// `f(ctx)` must be sound to call.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
unsafe fn guarded(
    f: extern "C" fn(*mut c_void) -> c_int,
    ctx: *mut c_void,
) -> Result<c_int, AssertionFailed> {
    Ok(f(ctx))
}

#[cfg(test)]
mod tests {
    use std::ffi::{c_int, c_void};

    use super::*;

    extern "C" fn forty_two(_: *mut c_void) -> c_int {
        42
    }

    /// Tries a guarded call from inside one; stores what it returned in `*ctx`.
    extern "C" fn nest(ctx: *mut c_void) -> c_int {
        // SAFETY: `forty_two` owns nothing and cannot assert, so no frame is ever skipped.
        let inner = unsafe { call(forty_two, std::ptr::null_mut()) };
        // SAFETY: `ctx` is the test's live `Option<Result<..>>`.
        unsafe { *ctx.cast::<Option<Result<c_int, AssertionFailed>>>() = Some(inner) };
        7
    }

    #[test]
    fn guarded_calls_return_and_do_not_nest() {
        // SAFETY: `forty_two` ignores its context.
        assert_eq!(unsafe { call(forty_two, std::ptr::null_mut()) }, Ok(42));
        let mut inner: Option<Result<c_int, AssertionFailed>> = None;
        // SAFETY: `nest` writes `inner`, which outlives the call; nothing in it asserts.
        assert_eq!(unsafe { call(nest, (&raw mut inner).cast()) }, Ok(7));
        if ACTIVE {
            let err = inner.unwrap().unwrap_err();
            assert!(err.0.contains("inside another"), "{err:?}");
        } else {
            assert_eq!(inner, Some(Ok(42)));
        }
        // SAFETY: as above.
        assert_eq!(unsafe { call(forty_two, std::ptr::null_mut()) }, Ok(42), "the guard is usable again");
    }
}
