/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the features' per-thread door.  See
 * throttle-feature.h.
 */

#include <config.h>

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "throttle-feature.h"

/* Per-thread settings (throttle-feature.h).  initial-exec: in a
 * dlopen'ed object the default TLS model reaches a variable through
 * __tls_get_addr, which on a thread's first access mallocs the
 * thread's slot: an allocation on the writeout path, before the
 * guards are on.  One word fits glibc's static TLS surplus.  The
 * generation starts at 1: 0 is a thread that never entered.
 */
atomic_uint throttle_thread_generation = 1;
__thread unsigned throttle_thread_seen
  __attribute__ ((tls_model ("initial-exec")));

void
throttle_thread_enter_slow (unsigned gen)
{
  const struct throttle_feature *const *f;
  bool first = throttle_thread_seen == 0;

  for (f = throttle_features; *f; f++)
    if ((*f)->thread_enter)
      (*f)->thread_enter (first);
  throttle_thread_seen = gen;
}

/* A generation that wraps to 0 is skipped: 0 means never entered. */
void
throttle_threads_renew (void)
{
  if (atomic_fetch_add (&throttle_thread_generation, 1) == UINT_MAX)
    atomic_fetch_add (&throttle_thread_generation, 1);
}
