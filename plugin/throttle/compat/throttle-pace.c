/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the replies of a closing connection, one at
 * a time, for nbdkit before 1.33.10 (see throttle-compat.h).
 */

#include <config.h>

#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include <nbdkit-filter.h>

#include "throttle-clock.h"
#include "throttle-lock.h"
#include "throttle-compat.h"
#include "throttle-quit.h"

/* nbdkit before 1.33.10 (fixed upstream by commit 9d82aa4f) aborts
 * when a thread of a connection that has decided to send a reply (it
 * checked that the connection is not dead) finds the socket closed by
 * another thread of the same connection: a send that failed, under
 * nbdkit's write lock, or a read that failed, without it.  When a
 * client vanishes, replies of its connection come together (a backend
 * that sleeps with nbdkit_nanosleep fails every request of a vanished
 * client at once, and each failure credits the units the next waiter
 * is granted).
 *
 * So once the connection is closing its replies leave the filter one
 * at a time, and the next only when nbdkit is done with the one
 * before: the thread that carried it out is back in a data callback
 * (it has sent that reply and read a new request) or has exited (its
 * destructor runs after nbdkit's worker loop saw the connection
 * ending).  A failed send before marks the connection dead, and nbdkit
 * then sends nothing more.  A timing is left for threads that never
 * entered the filter: one blocked reading when the client vanished
 * closes the socket on its error at once, so the connection's first
 * reply waits THROTTLE_PACE_FIRST_MS for that.  No reply waits more
 * than THROTTLE_PACE_MAX_MS for the one before it, so a thread that
 * went on reading from a live client cannot hold the others.
 */

/* The gate this thread last passed, until it is back or exits: the
 * key's destructor opens it when the thread exits, and
 * throttle_pace_out_gate, the same pointer, is what every data
 * callback looks at, without pthread_getspecific.
 */
static pthread_key_t pace_key;
__thread struct throttle_pace *throttle_pace_out_gate
  __attribute__ ((tls_model ("initial-exec")));
static pthread_once_t pace_once = PTHREAD_ONCE_INIT;

static void
pace_back (void *v)
{
  struct throttle_pace *p = v;

  throttle_lock (&p->lock);
  p->out = false;
  pthread_cond_broadcast (&p->cond);
  throttle_unlock (&p->lock);
}

static void
pace_key_create (void)
{
  /* Without the key no gate opens early: replies then wait their
   * THROTTLE_PACE_MAX_MS each, slower but still apart.
   */
  if (pthread_key_create (&pace_key, pace_back) != 0)
    nbdkit_debug ("throttle: pthread_key_create failed: replies of closing "
                  "connections wait %d ms each", THROTTLE_PACE_MAX_MS);
}

void
throttle_pace_init (struct throttle_pace *p)
{
  pthread_once (&pace_once, pace_key_create);
  throttle_lock_init (&p->lock);
  throttle_cond_init_monotonic (&p->cond);
  p->first_done = false;
  p->out = false;
  /* Not 0, which says closing: the first successful reply asks. */
  atomic_init (&p->next_probe_ns, 1);
}

void
throttle_pace_destroy (struct throttle_pace *p)
{
  /* Serial connections are closed by the thread that served them,
   * which then exits: its destructor must not find the freed gate.
   */
  if (throttle_pace_out_gate == p) {
    throttle_pace_out_gate = NULL;
    pthread_setspecific (pace_key, NULL);
  }
  pthread_cond_destroy (&p->cond);
  pthread_mutex_destroy (&p->lock);
}

void
throttle_pace_back (void)
{
  struct throttle_pace *p = throttle_pace_out_gate;

  throttle_pace_out_gate = NULL;
  pthread_setspecific (pace_key, NULL);
  pace_back (p);
}

/* Whether the connection is closing, as nbdkit sees it.  Asking is a
 * system call (nbdkit_nanosleep polls the client's socket), too dear
 * for every reply of a live connection: a successful reply asks only
 * when no reply of the connection asked in the last
 * THROTTLE_PACE_PROBE_US.  That leaves ungated the successful replies
 * of a connection in its first such interval after the client left;
 * the replies already queued on nbdkit's write lock when it left are
 * past any filter anyway.  Error replies ask every time: they are how
 * a vanished client's requests come back together (see above).  The
 * answer "closing" is kept (next_probe_ns stays 0): asking again would
 * log an error line each time.
 */
static bool
pace_closing (struct throttle_pace *p, int r, uint64_t now)
{
  uint64_t next = atomic_load_explicit (&p->next_probe_ns,
                                        memory_order_relaxed);

  if (next == 0 || throttle_quitting ())
    return true;
  /* One thread per interval asks; the others go on.  A thread that
   * read next before it became 0 fails its exchange: 0 is kept.
   */
  if (r == 0 &&
      (now < next ||
       !atomic_compare_exchange_strong_explicit (&p->next_probe_ns, &next,
                                                 now + THROTTLE_PACE_PROBE_US
                                                 * 1000,
                                                 memory_order_relaxed,
                                                 memory_order_relaxed)))
    return false;
  /* A zero sleep: nbdkit polls and returns without waiting. */
  if (nbdkit_nanosleep (0, 0) == 0)
    return false;
  atomic_store_explicit (&p->next_probe_ns, 0, memory_order_relaxed);
  return true;
}

void
throttle_pace_gate (struct throttle_pace *p, int r, uint64_t now)
{
  struct timespec until;

  if (!pace_closing (p, r, now))
    return;

  throttle_lock (&p->lock);
  if (!p->first_done) {
    struct timespec ts = { .tv_sec = 0,
                           .tv_nsec = THROTTLE_PACE_FIRST_MS * 1000000L };

    /* Not nbdkit_nanosleep: it would return at once, now.  The lock
     * is held: the connection's other replies wait behind this one.
     */
    while (nanosleep (&ts, &ts) == -1 && errno == EINTR)
      ;
    p->first_done = true;
  }
  until = throttle_deadline_ms (THROTTLE_PACE_MAX_MS);
  while (p->out) {
    if (pthread_cond_timedwait (&p->cond, &p->lock, &until) == ETIMEDOUT) {
      nbdkit_debug ("throttle: a reply of a closing connection waited "
                    "%d ms for the one before it: sent anyway",
                    THROTTLE_PACE_MAX_MS);
      break;
    }
  }
  p->out = true;
  throttle_unlock (&p->lock);
  throttle_pace_out_gate = p;
  pthread_setspecific (pace_key, p);
}
