/* nbdkit-throttle filter: server shutdown, told apart from a client
 * that is done, and a closing connection's error replies kept apart.
 *
 * In a request thread nbdkit_nanosleep fails when the server is
 * shutting down, but equally when the client has sent NBD_CMD_DISC,
 * shut down its write side, or vanished.  The first two mean "finish
 * what I sent" (the NBD protocol requires the server to), and in the
 * third nbdkit itself would still run what it has read.  So the
 * client's state never ends a wait for credit or buffers: a request
 * that reached the filter is served.  Only a server shutdown ends a
 * wait, and a thread with no connection sees that alone: for it
 * nbdkit_nanosleep fails only when nbdkit quits.
 *
 * nbdkit before 1.33.10 (fixed upstream by commit 9d82aa4f) aborts
 * when one thread of a connection fails to send a reply and closes the
 * socket while another thread of the same connection has already
 * decided to send its own: raw_send_socket asserts.  Error replies of a
 * closing connection tend to come together (a shutdown ends all of a
 * connection's waits at once; a backend that sleeps with
 * nbdkit_nanosleep fails every request of a vanished client at once,
 * and each failure credits the units the next waiter is granted).  So
 * such errors leave the filter one at a time, THROTTLE_PACE_MS apart:
 * by the time the next one reaches nbdkit, a failed send before it has
 * marked the connection dead, and nbdkit then sends nothing more.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include <nbdkit-filter.h>

#include "throttle-clock.h"
#include "throttle-parse.h"
#include "throttle-quit.h"

static bool quitting;           /* atomic: set once, never cleared */
static pthread_t watcher;
static bool watcher_started;    /* only touched by after_fork, cleanup */

bool
throttle_quitting (void)
{
  return __atomic_load_n (&quitting, __ATOMIC_ACQUIRE);
}

/* The race this closes: at a signal, a backend request sleeping with
 * nbdkit_nanosleep fails at once and credits its units, the waiter
 * granted them asks whether to abandon its wait, and the answer must
 * not depend on whether the watcher thread has been scheduled yet (on
 * a busy machine every waiter of the chain was granted and run before
 * it was: test-shutdown.sh).  This thread's own nbdkit_nanosleep
 * already knows that something is closing; the watcher says what.
 */
bool
throttle_quit_confirm (void)
{
  const struct timespec ms = { .tv_sec = 0, .tv_nsec = 1000000 };
  int i;

  if (throttle_quitting ())
    return true;
  if (nbdkit_nanosleep (0, 1) == 0)
    return false;
  for (i = 0; i < THROTTLE_QUIT_CONFIRM_MS; ++i) {
    nanosleep (&ms, NULL);
    if (throttle_quitting ())
      return true;
  }
  return false;                 /* the client is done: serve its requests */
}

static void *
watch (void *arg)
{
  /* No connection belongs to this thread, so only nbdkit's quit pipe
   * ends the sleep early.
   */
  while (nbdkit_nanosleep (3600, 0) == 0)
    ;
  __atomic_store_n (&quitting, true, __ATOMIC_RELEASE);
  return NULL;
}

int
throttle_quit_start (void)
{
  int err = pthread_create (&watcher, NULL, watch, NULL);

  if (err != 0) {
    nbdkit_error ("throttle: cannot start the shutdown watcher: "
                  "pthread_create: %s", throttle_errtext (err));
    return -1;
  }
  watcher_started = true;
  return 0;
}

void
throttle_quit_stop (void)
{
  if (!watcher_started)
    return;
  /* nbdkit calls .cleanup once it has stopped serving; in single
   * connection modes (-s, --vsock with one client) that happens without
   * a quit, so ask for one: nothing is left for it to stop, and the
   * watcher must not outlive the filter's code.
   */
  if (!throttle_quitting ())
    nbdkit_shutdown ();
  pthread_join (watcher, NULL);
  watcher_started = false;
}

void
throttle_pace_init (struct throttle_pace *p)
{
  pthread_mutex_init (&p->lock, NULL);
  p->last_ns = 0;
}

void
throttle_pace_destroy (struct throttle_pace *p)
{
  pthread_mutex_destroy (&p->lock);
}

void
throttle_pace_error (struct throttle_pace *p)
{
  const uint64_t gap = THROTTLE_PACE_MS * UINT64_C (1000000);
  uint64_t now;

  /* A live connection's errors go out as they come; only one that is
   * closing risks the abort.  (The probe costs a system call, paid on
   * errors only.)
   */
  if (!throttle_quitting () && nbdkit_nanosleep (0, 1) == 0)
    return;

  /* The first error waits too: the client's going is seen by the
   * errors and, at the same instant, by a thread of the connection
   * blocked reading its next request, which on ECONNRESET closes the
   * socket without nbdkit's write lock.  Let that happen first.
   */
  pthread_mutex_lock (&p->lock);
  now = throttle_now_ns ();
  if (p->last_ns == 0)
    p->last_ns = now;
  if (now < p->last_ns + gap) {
    uint64_t ns = p->last_ns + gap - now;
    struct timespec ts = { .tv_sec = ns / 1000000000,
                           .tv_nsec = ns % 1000000000 };

    /* Not nbdkit_nanosleep: it would return at once, now. */
    while (nanosleep (&ts, &ts) == -1 && errno == EINTR)
      ;
    now = throttle_now_ns ();
  }
  p->last_ns = now;
  pthread_mutex_unlock (&p->lock);
}
