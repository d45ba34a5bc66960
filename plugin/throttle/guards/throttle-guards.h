/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the thread and process guards.
 *
 * What keeps nbdkit itself from deadlocking when it serves a device
 * the same machine swaps to: PR_SET_IO_FLUSHER on the threads that
 * serve requests, SCHED_FIFO for them (the allocator's real-time
 * reserve), memory locking, OOM-killer protection, and a pre-grown,
 * locked, never-trimmed heap reserve for nbdkit's own per-thread
 * request buffers.  See "WHICH GUARD PREVENTS WHICH DEADLOCK" in
 * nbdkit-throttle-design(1).
 *
 * When each hook is called, and why then: throttle-features.c.
 */

#ifndef THROTTLE_GUARDS_H
#define THROTTLE_GUARDS_H

#include <stdbool.h>

/* Their parameters: throttle-guards-config.h; the real-time switch:
 * throttle-realtime.h; memory locking and the heap reserve:
 * throttle-memlock.h.
 */

/* Tries PR_SET_IO_FLUSHER, SCHED_FIFO and oom_score_adj and undoes
 * them (nbdkit forks the --run command from this thread), checks
 * mlock limits and sizes the heap reserve.  Fails for an "on" guard
 * the kernel refuses, while errors and warnings still reach the user's
 * terminal, before nbdkit daemonizes.
 */
extern int throttle_guards_get_ready (int thread_model);
/* ... and then sets throttle_max_request (throttle-serve.h), and has
 * reads charged if the request threads are or may become real-time.
 */

/* Sets the guards on the main thread (fork and clone copy task flags,
 * policy and oom_score_adj, so every thread created later inherits
 * them), a fork handler that takes them away from child processes,
 * mlockall(MCL_ONFAULT) (locks are not inherited across fork) and the
 * heap reserve.  Call in the main thread before any connection thread
 * exists.
 */
extern int throttle_guards_after_fork (void);

/* Applies the per-thread guards to the calling thread ('first': its
 * first time).  Only through throttle_thread_enter (throttle-feature.h),
 * which calls it once a thread, and again after the process switched
 * real-time on or off.
 */
extern void throttle_guards_thread_enter (bool first);

extern void throttle_guards_unload (void);

/* True if the request-serving threads run SCHED_FIFO or may come to
 * (throttle-rt=auto): the filter must then charge reads too, so the
 * replies in flight (the allocator's real-time reserve is what they
 * draw on) stay bounded.  Valid from throttle_guards_get_ready on; it
 * can only turn false in after_fork (-u dropped CAP_SYS_NICE), and
 * charging reads then is harmless.
 */
extern bool throttle_guards_rt_active (void);

#endif /* THROTTLE_GUARDS_H */
