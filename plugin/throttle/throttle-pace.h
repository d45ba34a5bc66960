/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the replies of a closing connection, one at
 * a time, for nbdkit before 1.33.10.
 *
 * When each hook is called, and why then: throttle-lifecycle.h.
 */

#ifndef THROTTLE_PACE_H
#define THROTTLE_PACE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <nbdkit-filter.h>

#include "throttle-clock.h"
#include "throttle-quit.h"

/* Replies of a closing connection are gated only for nbdkit before
 * 1.33.10, which aborts when they race (raw_send_socket's assertion;
 * fixed upstream by commit 9d82aa4f): see throttle-pace.c.
 * -DTHROTTLE_PACE_ERRORS=1 forces it on, to measure what it costs.
 */
#ifndef THROTTLE_PACE_ERRORS
#if NBDKIT_VERSION_MAJOR == 1 && \
  (NBDKIT_VERSION_MINOR < 33 || \
   (NBDKIT_VERSION_MINOR == 33 && NBDKIT_VERSION_MICRO < 10))
#define THROTTLE_PACE_ERRORS 1
#else
#define THROTTLE_PACE_ERRORS 0
#endif
#endif

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

#if THROTTLE_PACE_ERRORS
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
 * touch it.  initial-exec: see thread_gen in throttle-guards.c.
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
#else
struct throttle_pace {
  char unused;
};

static inline void throttle_pace_init (struct throttle_pace *p) { }
static inline void throttle_pace_destroy (struct throttle_pace *p) { }
static inline void throttle_pace_enter (void) { }
static inline void throttle_pace_reply (struct throttle_pace *p, int r) { }
#endif

#endif /* THROTTLE_PACE_H */
