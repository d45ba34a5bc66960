/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: an export's write-behind state.
 *
 * Made by the first writable open of the export and freed at cleanup
 * (throttle-writeback-writers.c); read by the request hooks
 * (throttle-writeback.c) and the stats (throttle-writeback-stats.c)
 * through throttle_wb_of.  The ordering engine, with locks of its own,
 * is the queue q (lib/throttle-wbq.h).
 */

#ifndef THROTTLE_WRITEBACK_STATE_H
#define THROTTLE_WRITEBACK_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <nbdkit-filter.h>

#include "throttle-export.h"
#include "throttle-wbq.h"

/* One writer thread and the backend context it writes through. */
struct throttle_wb_writer {
  struct throttle_wb *wb;
  size_t idx;                    /* its number in the queue */
  pthread_t thread;
  bool started;
  nbdkit_next *ctx;
  bool dirty;                    /* wrote since its last flush; own thread */
};

struct throttle_wb {
  /* The list of every export's state, for cleanup: under
   * throttle-writeback-writers.c's all_lock.
   */
  struct throttle_wb *next_all;
  struct throttle_export *exp;
  struct throttle_wbq *q;
  /* Set before the writers start, read-only afterwards. */
  bool multi_conn;               /* a flush on any context covers all */
  bool writer_flush;             /* writers' contexts can flush */
  bool started_all;
  size_t nr_writers;
  struct throttle_wb_writer writers[];
};

/* exp's write-behind state, once a writable connection made it; NULL
 * for exp == NULL, in writethrough, or before.  The acquire pairs with
 * the release that publishes a new state (throttle_writeback_open).
 */
static inline struct throttle_wb *
throttle_wb_of (struct throttle_export *exp)
{
  return exp ? __atomic_load_n (&exp->wb, __ATOMIC_ACQUIRE) : NULL;
}

#endif /* THROTTLE_WRITEBACK_STATE_H */
