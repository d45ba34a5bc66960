/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the shims for nbdkit before 1.33.10, behind
 * one seam.
 *
 * nbdkit from 1.32.4 up to 1.33.9 (Debian 12's 1.32.5) aborts
 * (raw_send_socket's assertion; fixed upstream by commit 9d82aa4f)
 * when replies of one connection race after its client has gone, which
 * a client can provoke at will.  Two shims answer it:
 *
 * - the reply gate (throttle-pace.c): the filter's own replies of a
 *   closing connection leave it one at a time;
 * - the abort drain (throttle-abort.c): in writeback mode a SIGABRT
 *   waits for the writers to put every acknowledged write on the
 *   plugin before the process dies.
 *
 * configure defines THROTTLE_NBDKIT_OLD when nbdkit's headers are
 * older than 1.33.10 and only then builds those two files.  Against a
 * later nbdkit every hook below is a static inline that does nothing,
 * and no code of theirs is in the filter (tests/test-compat-seam.sh
 * checks the .so): there an abort is a bug, and loses what a write-
 * behind cache holds, as SIGSEGV and SIGKILL do.
 *
 * Not a shim: the shutdown prober (throttle-quit.c).  In every nbdkit
 * up to at least 1.44.1 nbdkit_nanosleep fails alike when the server
 * shuts down and when the client is done, and only the first may end
 * a wait.
 *
 * When each hook is called, and why then: throttle-features.c.
 * Include <config.h> first: it says which half of this header holds.
 */

#ifndef THROTTLE_COMPAT_H
#define THROTTLE_COMPAT_H

#ifndef PACKAGE_NAME
#error "include <config.h> before throttle-compat.h"
#endif

#ifdef THROTTLE_NBDKIT_OLD

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <nbdkit-filter.h>

#include "throttle-clock.h"
#include "throttle-quit.h"

/* --- the reply gate (throttle-pace.c) -------------------------------- */

/* How long the first reply of a closing connection waits for nbdkit's
 * threads blocked reading to see the close, and the longest a reply
 * waits for the one before it.
 */
#define THROTTLE_PACE_FIRST_MS 100
#define THROTTLE_PACE_MAX_MS 1000

/* A connection's successful replies ask nbdkit whether it is closing
 * at most once per this long (its error replies ask every time).
 */
#define THROTTLE_PACE_PROBE_US 1000

/* Per connection: the gate its replies pass one at a time once it is
 * closing.  Lock rule: lock guards out and first_done; cond is
 * broadcast when out is cleared.  next_probe_ns is atomic, read by
 * every reply without the lock: 0 once nbdkit said the connection is
 * closing (so that every reply after takes the gate without a look at
 * another field), else the time before which no successful reply asks.
 */
struct throttle_pace {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool first_done;              /* the first reply has waited */
  bool out;                     /* a reply passed, its thread not yet back */
  _Atomic uint64_t next_probe_ns;
};

/* Call in .open and .close (in .close no thread of the connection is
 * in the filter, and nbdkit has joined its worker threads).
 */
extern void throttle_pace_init (struct throttle_pace *p);
extern void throttle_pace_destroy (struct throttle_pace *p);

/* The gate this thread last passed, until it is back in a data
 * callback or exits; only throttle-pace.c and throttle_pace_enter
 * touch it.  initial-exec: see throttle_thread_seen in throttle.c.
 */
extern __thread struct throttle_pace *throttle_pace_out_gate
  __attribute__ ((tls_model ("initial-exec")));
extern void throttle_pace_back (void);

/* Call at the start of every data callback: this thread has finished
 * sending the reply it last carried out of the filter, if any.
 */
static inline void
throttle_pace_enter (void)
{
  if (throttle_pace_out_gate != NULL)
    throttle_pace_back ();
}

/* The rest of throttle_pace_reply: whether to ask nbdkit, and the gate. */
extern void throttle_pace_gate (struct throttle_pace *p, int r, uint64_t now);

/* Call in a request thread just before a data callback returns, with
 * what it returns (r: 0 or -1).  Returns at once unless the connection
 * is closing or the server is shutting down; then it returns once the
 * thread that carried the connection's previous reply out of the
 * filter is back in it or has exited (so nbdkit has sent or dropped
 * that reply), or after THROTTLE_PACE_MAX_MS.
 *
 * Inline, for the reply of every request: a successful reply of a live
 * connection that another asked about less than THROTTLE_PACE_PROBE_US
 * ago costs a clock read and two loads.
 */
static inline void
throttle_pace_reply (struct throttle_pace *p, int r)
{
  uint64_t now = 0;

  if (r == 0) {
    now = throttle_now_ns ();
    if (now < atomic_load_explicit (&p->next_probe_ns, memory_order_relaxed) &&
        !throttle_quitting ())
      return;
  }
  throttle_pace_gate (p, r, now);
}

/* --- the abort drain (throttle-abort.c) ------------------------------ */

/* Call in .get_ready in writeback mode; returns -1 after nbdkit_error. */
extern int throttle_abort_install (void);
/* Call in .unload. */
extern void throttle_abort_uninstall (void);
/* Called from the write-behind modules (throttle-writeback*.c) before
 * a write is queued (+1; -1 if it is not), and when it is on the
 * backend or has failed (-1).
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

#else /* nbdkit 1.33.10 or later: the same hooks, doing nothing */

struct throttle_pace {
  char unused;
};

static inline void throttle_pace_init (struct throttle_pace *p) { }
static inline void throttle_pace_destroy (struct throttle_pace *p) { }
static inline void throttle_pace_enter (void) { }
static inline void throttle_pace_reply (struct throttle_pace *p, int r) { }

static inline int throttle_abort_install (void) { return 0; }
static inline void throttle_abort_uninstall (void) { }
static inline void throttle_abort_pending (long delta) { }
static inline void throttle_abort_hold (void) { }
static inline void throttle_abort_writer_thread (void) { }

#endif /* THROTTLE_NBDKIT_OLD */

#endif /* THROTTLE_COMPAT_H */
