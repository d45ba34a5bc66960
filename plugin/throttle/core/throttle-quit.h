/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: server shutdown, told apart from a client
 * that is done.
 *
 * When each hook is called, and why then: throttle-features.c.
 */

#ifndef THROTTLE_QUIT_H
#define THROTTLE_QUIT_H

#include <stdbool.h>

/* Starts the prober thread; -1 after nbdkit_error if it cannot. */
extern int throttle_quit_start (void);
/* Wakes and joins it; no request may be waiting. */
extern void throttle_quit_stop (void);

/* What throttle_quitting reads: learnt by a request thread that asked
 * (a signal, or the end of --run), never because of what a client
 * did.  Set once, never cleared, only by throttle-quit.c.
 */
extern bool throttle_quit_known;

/* True once nbdkit is known to be shutting down: one atomic load, no
 * system call (what throttle_quit_cancelled starts with).  Inline: every
 * reply asks, built against nbdkit before 1.33.10 (throttle-compat.h).
 */
static inline bool
throttle_quitting (void)
{
  return __atomic_load_n (&throttle_quit_known, __ATOMIC_ACQUIRE);
}

/* The throttle_cancel_fn of every wait: true if nbdkit is shutting
 * down.  Only a server shutdown ends a wait: a client that sent
 * NBD_CMD_DISC or shut down its write side still reads the replies of
 * what it sent.  Asked by waiters every poll period and once more
 * after a grant.  Costs a system call; when this thread's own
 * nbdkit_nanosleep fails (a shutdown, or its client is done) also a
 * round trip to the thread that tells which, as it does every time
 * once the client is done.  Logs nbdkit's error line ("aborting sleep
 * ...") only when the server is shutting down, or once in a thread
 * whose client is done.
 */
extern bool throttle_quit_cancelled (void *opaque);

#endif /* THROTTLE_QUIT_H */
