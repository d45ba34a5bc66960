/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: write-behind's writer threads, per export.
 *
 * Writeback serves the default export "" alone (other names are
 * refused at open and left out of the export list).  Its first
 * writable open makes its queue, its locked, prefaulted pool and its
 * writer threads; each writer takes the queue's next job and puts it
 * on the backend through a backend context of its own, crediting the
 * write's units then.  Cleanup drains every export and stops its
 * writers.
 *
 * When each hook is called, and why then: throttle-features.c.
 *
 * The writers need throttle-guards.c: each calls
 * throttle_thread_enter at its start, and the pools are locked
 * unless throttle_guards_lock_pools () says otherwise.
 */

#ifndef THROTTLE_WRITEBACK_WRITERS_H
#define THROTTLE_WRITEBACK_WRITERS_H

#include <stdint.h>

#include <nbdkit-filter.h>

#include "throttle-export.h"

/* Per connection: which background write failures this connection has
 * already been told about.  Lives in the filter's handle; written by
 * throttle_writeback_open and the connection's own flushes.
 */
struct throttle_wb_conn {
  struct throttle_export *exp;  /* NULL in writethrough */
  uint64_t seen_errors;
};

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

/* Fills c for a connection to exp (given to .open as exportname, which
 * throttle_writeback_preopen accepted: the caller's duty) and, on
 * the first writable open in writeback mode, creates the export's
 * queue, pool and writers.  context is the one given to .open.
 * Returns -1 after nbdkit_error.
 */
extern int throttle_writeback_open (struct throttle_export *exp,
                                    nbdkit_context *context, int readonly,
                                    const char *exportname,
                                    struct throttle_wb_conn *c);
/* A clean disconnect waits until every write acknowledged on the
 * export before it is on the backend.
 */
extern int throttle_writeback_finalize (struct throttle_wb_conn *c);

/* Drain every export, stop the writers, close their contexts and free
 * the exports' writeback state.  After the last connection.
 */
extern void throttle_writeback_cleanup (void);

#endif /* THROTTLE_WRITEBACK_WRITERS_H */
