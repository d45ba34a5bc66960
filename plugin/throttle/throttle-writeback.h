/* nbdkit-throttle filter: write-behind (throttle-mode=writeback).
 *
 * A write is charged as in writethrough, copied into buffers of a
 * locked, prefaulted pool, queued on its export and acknowledged at
 * once; the export's writer threads put it on the backend through
 * backend contexts of their own and credit its units then.  See
 * "WRITEBACK MODE" in nbdkit-throttle-design(1) for what a client can
 * rely on.
 *
 * When each hook is called, and why then: throttle-lifecycle.h.
 *
 * The writers need throttle-guards.c: each calls
 * throttle_guards_thread_enter at its start, and the pools are locked
 * unless throttle_guards_lock_pools () says otherwise.
 */

#ifndef THROTTLE_WRITEBACK_H
#define THROTTLE_WRITEBACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nbdkit-filter.h>

#include "throttle-export.h"

struct throttle_wb;             /* per export, in struct throttle_export */

/* Per connection: which background write failures this connection has
 * already been told about.  Lives in the filter's handle.
 */
struct throttle_wb_conn {
  struct throttle_export *exp;  /* NULL in writethrough mode */
  uint64_t seen_errors;
};

/* 1 if key is ours and its value good, 0 if not ours, -1 after the
 * one error line of a bad value (throttle-parse.h).
 */
extern int throttle_writeback_config (const char *key, const char *value);
extern int throttle_writeback_config_complete (void);
extern bool throttle_writeback_enabled (void);
/* Refuses writeback over a backend whose thread model forbids a write
 * from a thread that is not serving the connection.
 */
extern int throttle_writeback_get_ready (int thread_model);

/* Creates the export's queue, pool and writers on the first writable
 * open of an export.  context is the one given to .open.  Returns -1
 * after nbdkit_error.
 */
extern int throttle_writeback_open (struct throttle_export *exp,
                                    nbdkit_context *context, int readonly,
                                    const char *exportname,
                                    struct throttle_wb_conn *c);
/* A clean disconnect waits until every write acknowledged on the
 * export before it is on the backend.
 */
extern int throttle_writeback_finalize (struct throttle_wb_conn *c);

/* Takes ownership of 'charged' units: they are credited to exp's
 * budget when the write is on the backend (or has failed), also when
 * this returns -1.
 */
extern int throttle_writeback_pwrite (struct throttle_wb_conn *c,
                                      struct throttle_export *exp,
                                      nbdkit_next *next, const void *buf,
                                      uint32_t count, uint64_t offset,
                                      uint32_t flags, uint64_t charged,
                                      int *err);
extern int throttle_writeback_pread (struct throttle_wb_conn *c,
                                     nbdkit_next *next, void *buf,
                                     uint32_t count, uint64_t offset,
                                     uint32_t flags, int *err);
/* zero and trim: the caller charges and credits as in writethrough. */
extern int throttle_writeback_zero (struct throttle_wb_conn *c,
                                    nbdkit_next *next, uint32_t count,
                                    uint64_t offset, uint32_t flags, int *err);
extern int throttle_writeback_trim (struct throttle_wb_conn *c,
                                    nbdkit_next *next, uint32_t count,
                                    uint64_t offset, uint32_t flags, int *err);
extern int throttle_writeback_extents (struct throttle_wb_conn *c,
                                       nbdkit_next *next, uint32_t count,
                                       uint64_t offset, uint32_t flags,
                                       struct nbdkit_extents *extents,
                                       int *err);
extern int throttle_writeback_flush (struct throttle_wb_conn *c,
                                     nbdkit_next *next, uint32_t flags,
                                     int *err);

/* Drain every export, stop the writers, close their contexts and free
 * the exports' writeback state.
 */
extern void throttle_writeback_cleanup (void);

/* JSON members for the control socket (throttle_control_extra_stats_fn):
 *   "writeback":{"pending_writes":N,"pending_bytes":N,
 *   "peak_pending_bytes":N,"pool_used":N,"pool_size":N,"written":N,
 *   "direct":N,"failed":N,"error":"EIO"|null}
 * Nothing for exp == NULL or an export in writethrough.
 */
extern void throttle_writeback_stats_json (struct throttle_export *exp,
                                           char *buf, size_t len);

#define throttle_writeback_config_help \
  "throttle-mode=writethrough|writeback\n" \
  "                            Acknowledge writes once the backend has\n" \
  "                            them, or once copied (default writethrough).\n" \
  "throttle-writeback-pool=SIZE  Bytes of payload the writeback pool holds\n" \
  "                            per export (default: the capacity).\n" \
  "throttle-writeback-threads=N  Writer threads per export (default 16,\n" \
  "                            4 under serialize_requests)."

#endif /* THROTTLE_WRITEBACK_H */
