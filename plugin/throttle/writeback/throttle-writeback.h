/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: write-behind (throttle-mode=writeback).
 *
 * A write is charged as in writethrough, copied into buffers of a
 * locked, prefaulted pool, queued on its export and acknowledged at
 * once; the export's writer threads put it on the backend through
 * backend contexts of their own and credit its units then.  See
 * "WRITEBACK MODE" in nbdkit-throttle-design(1) for what a client can
 * rely on.
 *
 * The filter includes this header alone: it declares the request
 * hooks (throttle-writeback.c) and brings the parameters
 * (throttle-writeback-config.h) and the writers' lifecycle
 * (throttle-writeback-writers.h).  The state they share is
 * throttle-writeback-state.h, the stats throttle-writeback-stats.h.
 *
 * When each hook is called, and why then: throttle-features.c.  In
 * writethrough no connection has write-behind's ops: the core calls
 * the plugin itself (named exports are writethrough's alone: writeback
 * refuses them, throttle_writeback_preopen).
 */

#ifndef THROTTLE_WRITEBACK_H
#define THROTTLE_WRITEBACK_H

#include <stdint.h>

#include <nbdkit-filter.h>

#include "throttle-export.h"
#include "throttle-writeback-config.h"
#include "throttle-writeback-writers.h"

struct throttle_conn;

/* The feature's connection hooks (throttle-feature.h): in writeback
 * mode, .open puts the connection's requests through write-behind's
 * ops (struct throttle_conn_ops) and keeps its state in *state.
 */
extern int throttle_writeback_conn_open (struct throttle_conn *conn,
                                         nbdkit_context *nxdata,
                                         int readonly, void **state);
extern int throttle_writeback_conn_finalize (void *state);
extern void throttle_writeback_conn_close (void *state);

#endif /* THROTTLE_WRITEBACK_H */
