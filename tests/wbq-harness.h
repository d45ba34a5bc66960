/* SPDX-License-Identifier: BSD-3-Clause */
/* What the write-behind queue's unit tests (test-wbq.c, the
 * single-threaded tests; test-wbq-hammer.c, many threads) share: a
 * queue whose hooks count what they see, and the writer's side of a
 * write job.
 */

#ifndef THROTTLE_WBQ_HARNESS_H
#define THROTTLE_WBQ_HARNESS_H

#include <stdatomic.h>

#include "throttle-wbq.h"

/* The bounce buffer of every queue make_queue creates: the smallest,
 * so that every write spanning two buffers reaches the 'backend' in
 * pieces (throttle_wbq_piece).
 */
#define TEST_BOUNCE THROTTLE_WBQ_ELEM

/* What the retired hook of the queue make_queue last created saw:
 * writes retired and the units those charged.  Zeroed by make_queue;
 * read them with atomic_load, as writer threads add to them.
 */
extern atomic_ulong nr_retired, units_retired;

/* Writer w's pieces of a write job, in order, to fn (which gets the
 * piece's absolute offset); each piece at most TEST_BOUNCE bytes
 * unless the write has a single buffer.  The caller has taken the job
 * with throttle_wbq_next as writer w and not yet called
 * throttle_wbq_write_done; it fails the test on an empty piece.
 */
void for_each_piece (struct throttle_wbq *q, size_t w,
                     const struct throttle_wbq_job *job,
                     void (*fn) (const void *buf, uint32_t n,
                                 uint64_t offset, void *opaque),
                     void *opaque);

/* A queue of nr pool buffers for nr_writers writers, bounce buffers of
 * TEST_BOUNCE, its retired hook counting into the counters above (which it
 * zeroes: one queue at a time).  Never NULL (the test fails instead);
 * the caller destroys it with throttle_wbq_destroy.
 */
struct throttle_wbq *make_queue (size_t nr, size_t nr_writers);

/* q's statistics now, by value (for one field in an assertion). */
struct throttle_wbq_stats stats_of (struct throttle_wbq *q);

#endif /* THROTTLE_WBQ_HARNESS_H */
