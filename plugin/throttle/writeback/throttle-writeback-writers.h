/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: an export's write-behind state, its writers
 * and its statistics (throttle-writeback-writers.c; see
 * throttle-writeback.h).
 */

#ifndef THROTTLE_WRITEBACK_WRITERS_H
#define THROTTLE_WRITEBACK_WRITERS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <nbdkit-filter.h>

struct throttle_export;

/* One writer thread and the backend context it writes through. */
struct throttle_wb_writer {
  struct throttle_wb *wb;
  size_t idx;                    /* its number in the queue */
  pthread_t thread;
  bool started;
  nbdkit_next *ctx;
  bool dirty;                    /* wrote since its last flush; own thread */
};

/* An export's write-behind state, made by its first writable open and
 * freed at cleanup.
 */
struct throttle_wb {
  struct throttle_export *exp;
  struct throttle_wbq *q;
  /* Set before the writers start, read-only afterwards. */
  bool multi_conn;               /* a flush on any context covers all */
  bool writer_flush;             /* writers' contexts can flush */
  bool started_all;
  size_t nr_writers;
  struct throttle_wb_writer writers[];
};

/* The write-behind state, the default export's (the one name
 * writeback serves, throttle_writeback_preopen), once a writable
 * connection made it; NULL in writethrough, or before.  Read it with
 * throttle_wb_get: the acquire pairs with the release that publishes
 * it (throttle_writeback_make).
 */
extern struct throttle_wb *throttle_wb_made;

static inline struct throttle_wb *
throttle_wb_get (void)
{
  return __atomic_load_n (&throttle_wb_made, __ATOMIC_ACQUIRE);
}

/* On a writable open of exp in writeback mode (context is the one
 * given to .open), makes the export's queue, pool and writers if it
 * has none yet.  0 also when the backend takes no writes (then it has
 * none), -1 after nbdkit_error.
 */
extern int throttle_writeback_make (struct throttle_export *exp,
                                    nbdkit_context *context);


/* The feature's hooks (throttle-features.c). */
/* Drain every export, stop the writers, close their contexts and free
 * the exports' writeback state.  After the last connection.
 */
extern void throttle_writeback_cleanup (void);
/* In writeback mode, refuses every export name but "" (the name given
 * to .open, after nbdkit put the plugin's default export name for a
 * client's ""): -1 after nbdkit_error.  0 in writethrough.
 */
extern int throttle_writeback_preopen (const char *exportname, void **state);
/* The filter's .list_exports: in writeback mode the plugin's list
 * less the names throttle_writeback_preopen refuses; in
 * writethrough the plugin's list as it is.
 */
extern int throttle_writeback_list_exports (nbdkit_next_list_exports *next,
                                            nbdkit_backend *nxdata,
                                            int readonly,
                                            struct nbdkit_exports *exports);
/* The member for the control socket (a report's json,
 * throttle-metrics.h):
 *   ,"writeback":{"pending_writes":N,"pending_bytes":N,
 *   "peak_pending_bytes":N,"pool_used":N,"pool_size":N,"written":N,
 *   "direct":N,"failed":N,"error":"EIO"|null}
 * Nothing for exp == NULL or an export in writethrough.  exp must stay
 * valid for the call; any thread.
 */
extern void throttle_writeback_stats_json (FILE *fp,
                                           struct throttle_export *exp);
/* The same numbers as metrics (a report's metrics): in writeback
 * mode the families nbdkit_throttle_writeback_*, each with one sample
 * per export in writeback (the default export alone, once a writable
 * connection made its queue; none before).  The control thread's.
 */
extern void throttle_writeback_metrics (FILE *fp);

#endif /* THROTTLE_WRITEBACK_WRITERS_H */
