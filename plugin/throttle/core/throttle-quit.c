/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: server shutdown, told apart from a client
 * that is done.
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
 * Every nbdkit_nanosleep that fails also logs an error line ("aborting
 * sleep because of server shut down").  So no thread of the filter
 * sleeps in it across an ordinary shutdown: the prober, the thread
 * with no connection, only makes a zero-length call when a request
 * thread asks, and a request thread asks only while it waits.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include <nbdkit-filter.h>

#include "throttle-clock.h"
#include "throttle-lock.h"
#include "throttle-parse.h"
#include "throttle-quit.h"

bool throttle_quit_known;       /* atomic: set once, never cleared */

/* Lock rule: lock guards asked, answered and stop; cond is broadcast
 * whenever one of them changes.
 */
static pthread_mutex_t lock = THROTTLE_LOCK_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static uint64_t asked, answered;
static bool stop;
static pthread_t prober;
/* Set by .after_fork before any request thread exists, never cleared:
 * after .cleanup has set stop, no question waits.
 */
static bool prober_started;

/* Set in a request thread once the prober has said that the server is
 * not quitting while the thread's own nbdkit_nanosleep failed: its
 * connection is closing, for good (nbdkit's worker threads belong to
 * one connection), and its own probe would only log an error line
 * each time.  initial-exec: see throttle_thread_seen in throttle.c.
 */
static __thread bool conn_closing __attribute__ ((tls_model ("initial-exec")));

/* Whether this thread's connection or the server is closing: one
 * system call, and an error line from nbdkit if so, unless this thread
 * already knows its connection is.  A zero sleep, which only polls: a
 * nanosecond armed a timer and slept the thread's timer slack, and a
 * waiter asks right after its grant, with its units idle meanwhile.
 */
static bool
closing (void)
{
  return conn_closing || nbdkit_nanosleep (0, 0) == -1;
}

/* The prober's answer to a question asked after this call began: the
 * signal handler (or nbdkit_shutdown) has written nbdkit's quit pipe
 * before the caller's own probe could fail because of it, so the
 * answer is exact, whoever is scheduled first.
 */
static bool
ask_prober (void)
{
  uint64_t mine;

  if (!prober_started)
    return true;
  throttle_lock (&lock);
  mine = ++asked;
  pthread_cond_broadcast (&cond);
  while (answered < mine && !stop)
    pthread_cond_wait (&cond, &lock);
  throttle_unlock (&lock);
  return throttle_quitting ();
}

bool
throttle_quit_cancelled (void *opaque)
{
  if (throttle_quitting ())
    return true;
  if (!closing ())
    return false;
  if (ask_prober ())
    return true;
  conn_closing = true;          /* the client is done: serve its requests */
  return false;
}

static void *
probe (void *arg)
{
  uint64_t question;

  throttle_lock (&lock);
  for (;;) {
    while (!stop && answered == asked)
      pthread_cond_wait (&cond, &lock);
    if (stop)
      break;
    question = asked;
    throttle_unlock (&lock);
    /* No connection belongs to this thread: only nbdkit's quit pipe
     * makes this fail.
     */
    if (nbdkit_nanosleep (0, 0) == -1)
      __atomic_store_n (&throttle_quit_known, true, __ATOMIC_RELEASE);
    throttle_lock (&lock);
    answered = question;
    pthread_cond_broadcast (&cond);
  }
  throttle_unlock (&lock);
  return NULL;
}

int
throttle_quit_start (void)
{
  int err = pthread_create (&prober, NULL, probe, NULL);

  if (err != 0) {
    nbdkit_error ("throttle: cannot start the shutdown prober: "
                  "pthread_create: %s", throttle_errtext (err));
    return -1;
  }
  prober_started = true;
  return 0;
}

void
throttle_quit_stop (void)
{
  if (!prober_started)
    return;
  throttle_lock (&lock);
  stop = true;
  pthread_cond_broadcast (&cond);
  throttle_unlock (&lock);
  pthread_join (prober, NULL);
}
