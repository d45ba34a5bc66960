/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: write-behind (throttle-mode=writeback).
 *
 * A write is charged as in writethrough, copied into buffers of a
 * locked, prefaulted pool, queued on its export and acknowledged at
 * once; the export's writer threads put it on the backend through
 * backend contexts of their own and credit its units then.  See
 * "WRITEBACK MODE" in nbdkit-throttle-design(1) for what a client can
 * rely on.  The ordering engine, with its own lock, is the queue
 * (lib/throttle-wbq.h).
 *
 * Three files: throttle-writeback-config.c, the parameters and sizes
 * (fixed before the first connection: whoever reads them later needs
 * no lock); throttle-writeback.c, a connection's requests;
 * throttle-writeback-writers.c, an export's queue, its writer threads
 * and its statistics.  When each hook is called, and why then:
 * throttle-features.c.  In writethrough no connection has
 * write-behind's ops: the core calls the plugin itself (named exports
 * are writethrough's alone: writeback refuses them,
 * throttle_writeback_preopen).
 */

#ifndef THROTTLE_WRITEBACK_H
#define THROTTLE_WRITEBACK_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <nbdkit-filter.h>

#include "throttle-export.h"
#include "throttle-params.h"
#include "throttle-wbq.h"

struct throttle_conn;

/* --- the feature's hooks (throttle-features.c) --- */

extern const struct throttle_param throttle_writeback_param_table[];
/* After the metric, the capacities and the server's budget are known
 * (throttle_config): sizes the pool, refusing one RAM cannot hold.
 */
extern int throttle_writeback_config_complete (void);
/* Refuses writeback over a backend whose thread model forbids a write
 * from a thread that is not serving the connection; otherwise decides
 * the writers per export.
 */
extern int throttle_writeback_get_ready (int thread_model);
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
/* The connection's hooks: in writeback mode, .open puts the
 * connection's requests through write-behind's ops (struct
 * throttle_conn_ops) and keeps its state in *state; a clean disconnect
 * (.finalize) waits until every write acknowledged on the export
 * before it is on the backend.
 */
extern int throttle_writeback_conn_open (struct throttle_conn *conn,
                                         nbdkit_context *nxdata,
                                         int readonly, void **state);
extern int throttle_writeback_conn_finalize (void *state);
extern void throttle_writeback_conn_close (void *state);

#define throttle_writeback_config_help \
  "throttle-mode=writethrough|writeback\n" \
  "                            Acknowledge writes once the backend has\n" \
  "                            them, or once copied (default writethrough).\n" \
  "throttle-writeback-pool=SIZE  Bytes of payload the writeback pool holds\n" \
  "                            per export (default: the capacity).\n" \
  "throttle-writeback-threads=N  Writer threads per export (default 16,\n" \
  "                            4 under serialize_requests)."

/* --- between the feature's files --- */

extern bool throttle_writeback_enabled (void);

/* The sizes of each export's write-behind state: its pool's bytes (a
 * multiple of THROTTLE_WBQ_ELEM; set by config_complete), its writer
 * threads (set by get_ready) and each writer's bounce buffer (the
 * writers' together stay within 8 MiB, whatever their number).  Only
 * after get_ready.
 */
extern uint64_t throttle_writeback_pool_bytes (void);
extern unsigned throttle_writeback_writers (void);
extern size_t throttle_writeback_bounce_size (void);

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

/* exp's write-behind state, once a writable connection made it; NULL
 * for exp == NULL, in writethrough, or before.  The acquire pairs with
 * the release that publishes a new state (throttle_writeback_make).
 */
static inline struct throttle_wb *
throttle_wb_of (struct throttle_export *exp)
{
  return exp ? __atomic_load_n (&exp->wb, __ATOMIC_ACQUIRE) : NULL;
}

/* On a writable open of exp in writeback mode (context is the one
 * given to .open), makes the export's queue, pool and writers if it
 * has none yet.  0 also when the backend takes no writes (then it has
 * none), -1 after nbdkit_error.
 */
extern int throttle_writeback_make (struct throttle_export *exp,
                                    nbdkit_context *context);

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

#endif /* THROTTLE_WRITEBACK_H */
