/*
 * Tessera's guard around the vendored Basis Universal transcoder (Linux / glibc only).
 *
 * The transcoder is compiled with assertions on; glibc's assert() calls __assert_fail,
 * which prints a message and aborts the process. This file defines __assert_fail with
 * hidden visibility: the transcoder's objects are linked statically into the same
 * executable, so the linker binds their calls to this definition rather than to
 * libc.so's, while shared libraries (loaded at start or by dlopen) keep glibc's own.
 *
 * Outside a guarded call the hook does what glibc does: the same message on stderr,
 * then abort(). Inside tessera_basis_guarded it records the assertion and longjmps back
 * to the guard, which returns TESSERA_GUARD_ASSERTED. What the jump skips (the C++
 * frames of the transcoder and the Rust callback's frame) is never resumed: the caller
 * must not own anything with a destructor in those frames, and must not use the C++
 * object the callback was working on again, except to delete it.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

/* Return codes of tessera_basis_guarded; mirrored in format/basis/guard.rs. */
#define TESSERA_GUARD_RETURNED 0
#define TESSERA_GUARD_ASSERTED 1
#define TESSERA_GUARD_NESTED 2

/* Per thread: where to jump, whether a guarded call is running, and the last message. */
static _Thread_local sigjmp_buf guard_env;
static _Thread_local int guard_active;
static _Thread_local char guard_message[512];

__attribute__((visibility("hidden"), noreturn)) void
__assert_fail(const char *expr, const char *file, unsigned int line, const char *func)
{
    if (guard_active) {
        guard_active = 0;
        snprintf(guard_message, sizeof guard_message, "%s:%u: %s%sAssertion '%s' failed",
                 file ? file : "?", line, func ? func : "", func ? ": " : "", expr ? expr : "?");
        /* The mask argument of sigsetjmp below is 0: nothing to restore, no syscall. */
        siglongjmp(guard_env, 1);
    }
    /* glibc's format, so an unguarded assertion reads as it always did. */
    fprintf(stderr, "%s%s%s:%u: %s%sAssertion `%s' failed.\n", program_invocation_short_name,
            program_invocation_short_name[0] ? ": " : "", file ? file : "?", line, func ? func : "",
            func ? ": " : "", expr ? expr : "?");
    fflush(stderr);
    abort();
}

/*
 * Calls fn(ctx) on this thread with assertions guarded. Returns TESSERA_GUARD_RETURNED
 * and stores fn's result in *result when fn returns; TESSERA_GUARD_ASSERTED when an
 * assertion failed inside it (tessera_basis_guard_message then says which); and
 * TESSERA_GUARD_NESTED, without calling fn, when called from inside a guarded call.
 */
int tessera_basis_guarded(int (*fn)(void *), void *ctx, int *result)
{
    if (guard_active)
        return TESSERA_GUARD_NESTED;
    if (sigsetjmp(guard_env, 0) != 0)
        return TESSERA_GUARD_ASSERTED;
    guard_active = 1;
    int r = fn(ctx);
    guard_active = 0;
    *result = r;
    return TESSERA_GUARD_RETURNED;
}

/* The last guarded assertion's "file:line: function: Assertion 'expr' failed", on this thread. */
const char *tessera_basis_guard_message(void)
{
    return guard_message;
}
