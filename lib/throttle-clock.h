/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: monotonic time helpers shared by lib/. */

#ifndef THROTTLE_CLOCK_H
#define THROTTLE_CLOCK_H

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

#endif /* THROTTLE_CLOCK_H */
