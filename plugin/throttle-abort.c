/* nbdkit-throttle filter: writes acknowledged by writeback survive an
 * abort of nbdkit.
 *
 * In writeback mode a write is acknowledged once it is in the pool; if
 * the process dies before a writer has put it on the backend, it is
 * lost.  A clean stop drains the pool (.cleanup), but an abort skips
 * every cleanup, and nbdkit 1.32 can abort on its own (raw_send_socket's
 * assertion when replies race after a client hangs up, which a client
 * can provoke at will).  So SIGABRT first waits, up to
 * THROTTLE_ABORT_DRAIN_SECS, for the writer threads, which go on
 * running while the aborting thread waits here, to empty the pool; then
 * it dies as it would have.  Meanwhile the connections' threads go on
 * too: a write that would be acknowledged into the pool is held
 * instead (throttle_abort_hold), or the pool would never empty.  Only async-signal-safe calls are made: an
 * atomic load, nanosleep, write, sigaction, raise.
 *
 * If the abort comes from a thread holding a lock the writers need
 * (our own abort on a broken invariant), they cannot progress and the
 * wait ends at its time limit: the abort is delayed, never prevented.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nbdkit-filter.h>

#include "throttle-abort.h"
#include "throttle-parse.h"

static long pending;                    /* atomic */
static bool aborting;                   /* atomic */
static __thread bool writer __attribute__ ((tls_model ("initial-exec")));
static struct sigaction old_action;
static bool installed;

void
throttle_abort_pending (long delta)
{
  __atomic_add_fetch (&pending, delta, __ATOMIC_RELEASE);
}

void
throttle_abort_hold (void)
{
  if (__atomic_load_n (&aborting, __ATOMIC_ACQUIRE))
    for (;;)
      pause ();
}

void
throttle_abort_writer_thread (void)
{
  sigset_t set;

  writer = true;
  sigemptyset (&set);
  sigaddset (&set, SIGABRT);
  pthread_sigmask (SIG_BLOCK, &set, NULL);
}

static void
say (const char *msg)
{
  ssize_t r = write (STDERR_FILENO, msg, strlen (msg));
  (void) r;
}

static void
drain_then_die (int sig)
{
  const struct timespec tick = { .tv_sec = 0, .tv_nsec = 10000000 };
  long left = THROTTLE_ABORT_DRAIN_SECS * 100;

  __atomic_store_n (&aborting, true, __ATOMIC_RELEASE);
  /* A writer that aborts (abort() unblocks the signal) cannot wait for
   * itself.
   */
  if (!writer && __atomic_load_n (&pending, __ATOMIC_ACQUIRE) > 0) {
    say ("nbdkit-throttle: abort: waiting for the writers to put the "
         "acknowledged writes on the backend\n");
    while (__atomic_load_n (&pending, __ATOMIC_ACQUIRE) > 0 && left-- > 0)
      nanosleep (&tick, NULL);
    say (__atomic_load_n (&pending, __ATOMIC_ACQUIRE) > 0
         ? "nbdkit-throttle: abort: acknowledged writes are still pending: "
           "they are lost\n"
         : "nbdkit-throttle: abort: every acknowledged write is on the "
           "backend\n");
  }
  /* Die of the same signal, with nbdkit's original disposition. */
  sigaction (SIGABRT, &old_action, NULL);
  raise (sig);
}

int
throttle_abort_install (void)
{
  struct sigaction sa;

  memset (&sa, 0, sizeof sa);
  sa.sa_handler = drain_then_die;
  sigemptyset (&sa.sa_mask);
  if (sigaction (SIGABRT, &sa, &old_action) == -1) {
    nbdkit_error ("throttle: sigaction SIGABRT: %s", throttle_errtext (errno));
    return -1;
  }
  installed = true;
  return 0;
}

/* The handler's code goes with the filter at unload. */
void
throttle_abort_uninstall (void)
{
  if (installed) {
    sigaction (SIGABRT, &old_action, NULL);
    installed = false;
  }
}
