/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: writes acknowledged by writeback survive an
 * abort of nbdkit before 1.33.10 (see throttle-compat.h).
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
 * instead (throttle_abort_hold), or the pool would never empty.  Only
 * async-signal-safe calls are made: getpid, an atomic load, nanosleep,
 * write, sigaction, signal, raise.
 *
 * If the abort comes from a thread holding a lock the writers need
 * (our own abort on a broken invariant), they cannot progress and the
 * wait ends at its time limit: the abort is delayed, never prevented.
 *
 * SIGABRT ignored when nbdkit started (ignored signals survive exec)
 * means a SIGABRT sent by another process must leave nbdkit as it was:
 * the handler then returns at once, before it holds any write, and the
 * process goes on working.  abort() inside the process ends it whatever
 * the disposition (glibc resets SIGABRT to the default and raises it
 * again once a handler returns), so a SIGABRT from the process itself
 * still drains, then dies of the default action.  The sender is told
 * apart by si_pid, which kill, sigqueue, tgkill and raise all fill.
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

#include "throttle-compat.h"
#include "throttle-parse.h"

static long pending;                    /* atomic */
static bool aborting;                   /* atomic */
static __thread bool writer __attribute__ ((tls_model ("initial-exec")));
static struct sigaction old_action;
static bool installed;
static bool inherited_ignore;           /* SIG_IGN when installed */

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
drain_then_die (int sig, siginfo_t *info, void *context)
{
  const struct timespec tick = { .tv_sec = 0, .tv_nsec = 10000000 };
  long left = THROTTLE_ABORT_DRAIN_SECS * 100;

  if (inherited_ignore && info->si_code <= 0 && info->si_pid != getpid ())
    return;
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
  /* Die of the same signal, with nbdkit's original disposition, or the
   * default one where that was to ignore it: writes are held from now
   * on, so the process must not go on.
   */
  if (inherited_ignore)
    signal (SIGABRT, SIG_DFL);
  else
    sigaction (SIGABRT, &old_action, NULL);
  raise (sig);
}

int
throttle_abort_install (void)
{
  struct sigaction sa;

  memset (&sa, 0, sizeof sa);
  sa.sa_sigaction = drain_then_die;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset (&sa.sa_mask);
  if (sigaction (SIGABRT, NULL, &old_action) == -1) {
    nbdkit_error ("throttle: sigaction SIGABRT: %s", throttle_errtext (errno));
    return -1;
  }
  /* Set before the handler can run. */
  inherited_ignore = !(old_action.sa_flags & SA_SIGINFO) &&
    old_action.sa_handler == SIG_IGN;
  if (inherited_ignore)
    nbdkit_debug ("throttle: SIGABRT is ignored: a SIGABRT from another "
                  "process stays ignored; an abort inside nbdkit still "
                  "waits for the writers");
  if (sigaction (SIGABRT, &sa, NULL) == -1) {
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
