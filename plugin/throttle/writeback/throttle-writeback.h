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
 * When each hook is called, and why then: throttle-lifecycle.h.  Each
 * takes the connection's struct throttle_wb_conn, filled by
 * throttle_writeback_open; in writethrough the hooks pass the request
 * straight down (named exports are writethrough's alone: writeback
 * refuses them, throttle_writeback_check_name).
 */

#ifndef THROTTLE_WRITEBACK_H
#define THROTTLE_WRITEBACK_H

#include <stdint.h>

#include <nbdkit-filter.h>

#include "throttle-export.h"
#include "throttle-writeback-config.h"
#include "throttle-writeback-writers.h"

/* Only in writeback mode (throttle_writeback_enabled).  Takes
 * ownership of 'charged' units: they are credited to exp's budget when
 * the write is on the backend (or has failed), also when this returns
 * -1.
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

#endif /* THROTTLE_WRITEBACK_H */
