/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: mutexes whose rules are checked in checking builds.
 * See throttle-lock.h.
 *
 * The checking versions are built whatever the configuration, so that
 * tests/test-lock.c proves them in every build; lib/ calls them only
 * when built with THROTTLE_LOCK_CHECKS.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "throttle-lock.h"

int
throttle_lock_init (pthread_mutex_t *m)
{
#ifdef THROTTLE_LOCK_CHECKS
  pthread_mutexattr_t attr;
  int err;

  pthread_mutexattr_init (&attr);
  pthread_mutexattr_settype (&attr, PTHREAD_MUTEX_ERRORCHECK);
  err = pthread_mutex_init (m, &attr);
  pthread_mutexattr_destroy (&attr);
  return err;
#else
  return pthread_mutex_init (m, NULL);
#endif
}

/* stdio, not nbdkit_error: lib/ knows no nbdkit, and the process is
 * about to die anyway.
 */
static void
broken (const char *file, int line, pthread_mutex_t *m, const char *rule,
        int err)
{
  fprintf (stderr, "nbdkit-throttle: %s:%d: lock %p: %s%s%s\n",
           file, line, (void *) m, rule, err ? ": " : "",
           err ? strerror (err) : "");
  abort ();
}

void
throttle_lock_checked (pthread_mutex_t *m, const char *file, int line)
{
  int err = pthread_mutex_lock (m);

  if (err == EDEADLK)
    broken (file, line, m, "taken again by the thread that holds it "
            "(a call made under the lock that takes it: HACKING.md, "
            "\"Locks\")", 0);
  if (err != 0)
    broken (file, line, m, "pthread_mutex_lock", err);
}

void
throttle_unlock_checked (pthread_mutex_t *m, const char *file, int line)
{
  int err = pthread_mutex_unlock (m);

  if (err == EPERM)
    broken (file, line, m, "released by a thread that does not hold it", 0);
  if (err != 0)
    broken (file, line, m, "pthread_mutex_unlock", err);
}

void
throttle_lock_held_checked (pthread_mutex_t *m, const char *file, int line)
{
  /* A deadline already past: an error-checking mutex says EDEADLK at
   * once to the thread holding it, and never makes another wait.
   * (pthread_mutex_trylock says EBUSY whoever holds it.)
   */
  static const struct timespec past = { 0, 0 };
  int err = pthread_mutex_timedlock (m, &past);

  switch (err) {
  case EDEADLK:
    return;
  case 0:
    pthread_mutex_unlock (m);
    broken (file, line, m, "called without the lock it needs "
            "(nobody held it)", 0);
    break;
  case ETIMEDOUT:
    broken (file, line, m, "called without the lock it needs "
            "(another thread held it)", 0);
    break;
  default:
    broken (file, line, m, "pthread_mutex_timedlock", err);
  }
}
