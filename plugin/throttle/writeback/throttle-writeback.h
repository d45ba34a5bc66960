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
 * Three files, each with a header for the others:
 * throttle-writeback-config.c, the parameters and sizes (fixed before
 * the first connection: whoever reads them later needs no lock);
 * throttle-writeback.c, a connection's requests (this header);
 * throttle-writeback-writers.c, the queue, its writer threads and its
 * statistics.  When each hook is called, and why then:
 * throttle-features.c.  In writethrough no connection has
 * write-behind's ops: the core calls the plugin itself (named exports
 * are writethrough's alone: writeback refuses them,
 * throttle_writeback_preopen).
 */

#ifndef THROTTLE_WRITEBACK_H
#define THROTTLE_WRITEBACK_H

#include <nbdkit-filter.h>

struct throttle_conn;

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

#endif /* THROTTLE_WRITEBACK_H */
