/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: monotonic time helpers shared by lib/. */

#ifndef THROTTLE_CLOCK_H
#define THROTTLE_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t
throttle_now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Absolute CLOCK_MONOTONIC deadline 'ms' from now, for
 * pthread_cond_timedwait on a condvar using CLOCK_MONOTONIC.
 */
static inline struct timespec
throttle_deadline_ms (unsigned ms)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long) (ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  return ts;
}

/* Initialize a condvar whose timed waits take throttle_deadline_ms's
 * deadlines: on CLOCK_MONOTONIC, so that a change of the wall clock
 * neither cuts a wait short nor stretches it.
 */
static inline void
throttle_cond_init_monotonic (pthread_cond_t *cond)
{
  pthread_condattr_t attr;

  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (cond, &attr);
  pthread_condattr_destroy (&attr);
}

#endif /* THROTTLE_CLOCK_H */
