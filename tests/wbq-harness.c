/* SPDX-License-Identifier: BSD-3-Clause */
/* The write-behind queue's unit tests' harness (wbq-harness.h). */

#include <config.h>

#include <check.h>
#include <stdatomic.h>

#include "wbq-harness.h"

atomic_ulong nr_retired, units_retired;

static void
on_retired (void *opaque, uint64_t charged)
{
  atomic_fetch_add (&nr_retired, 1);
  atomic_fetch_add (&units_retired, charged);
}

void
for_each_piece (struct throttle_wbq *q, size_t w,
                const struct throttle_wbq_job *job,
                void (*fn) (const void *buf, uint32_t n, uint64_t offset,
                            void *opaque),
                void *opaque)
{
  uint32_t done, n;
  const void *buf;

  for (done = 0; done < job->count; done += n) {
    buf = throttle_wbq_piece (q, w, job, done, &n);
    ck_assert_uint_gt (n, 0);
    ck_assert (n <= TEST_BOUNCE || n == job->count);
    fn (buf, n, job->offset + done, opaque);
  }
}

struct throttle_wbq *
make_queue (size_t nr, size_t nr_writers)
{
  struct throttle_wbq *q;

  atomic_store (&nr_retired, 0);
  atomic_store (&units_retired, 0);
  q = throttle_wbq_create (nr, nr_writers, TEST_BOUNCE, false, on_retired,
                           NULL);
  ck_assert_ptr_nonnull (q);
  return q;
}

struct throttle_wbq_stats
stats_of (struct throttle_wbq *q)
{
  struct throttle_wbq_stats s;

  throttle_wbq_get_stats (q, &s);
  return s;
}
