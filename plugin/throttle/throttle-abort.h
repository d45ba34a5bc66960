/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: writes acknowledged by writeback survive an
 * abort of nbdkit.
 *
 * When each hook is called, and why then: throttle-lifecycle.h.
 */

#ifndef THROTTLE_ABORT_H
#define THROTTLE_ABORT_H

/* Returns -1 after nbdkit_error. */
extern int throttle_abort_install (void);
extern void throttle_abort_uninstall (void);
/* Called from the write-behind modules (throttle-writeback*.c)
 * whenever an acknowledged write is queued (+1) or is on the backend
 * or has failed (-1).
 */
extern void throttle_abort_pending (long delta);
/* Called before a write is acknowledged into the pool: once an abort
 * is draining the pool, never returns (the process is about to die,
 * and the write is not acknowledged).
 */
extern void throttle_abort_hold (void);
/* Called at the start of each writer thread: the drain waits for the
 * writers, so it must not run on one (a SIGABRT sent to the process is
 * then handled by another thread).
 */
extern void throttle_abort_writer_thread (void);

/* How long an abort waits for the writers at most. */
#define THROTTLE_ABORT_DRAIN_SECS 10

#endif /* THROTTLE_ABORT_H */
