/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: serving one data request, part after part.
 *
 * A read, write, zero or trim is charged by the metric, admitted to its
 * export's budget and the server's (lib/throttle-admit.h), whole or a
 * first part at a time, and passed down: straight to the plugin, or
 * through write-behind's hooks (throttle-writeback.h) which order it
 * among the pending writes or queue it.  A part's units are credited
 * once the plugin has returned, or, for a write written behind, once
 * it is on the backend.  The parts of a request are served one after
 * another in the request's own thread, the one nbdkit called the
 * filter in: the plugin sees each as it would see the request.
 */

#ifndef THROTTLE_SERVE_H
#define THROTTLE_SERVE_H

#include <stdbool.h>
#include <stdint.h>

#include <nbdkit-filter.h>

#include "throttle-admit.h"
#include "throttle-export.h"
#include "throttle-metric.h"
#include "throttle-writeback.h"

/* What serving needs of a connection.  Lives in the filter's handle;
 * the connection's own, so no lock.
 */
struct throttle_serve_conn {
  struct throttle_export *exp;  /* from throttle_export_open */
  struct throttle_wb_conn wb;   /* from throttle_writeback_open */
  /* The connection's admission policy, made once: throttle-config's
   * metric and split, and split_max (throttle_admit_split_max of the
   * layers below), 0, nothing split, until .prepare sets it.
   */
  struct throttle_admit_policy policy;
};

/* Serve one request of the connection c: charged (if 'charge') and
 * passed down part after part until all of count is served or a part
 * fails; returns once every part has.  Returns 0, or -1 with *err set
 * (ESHUTDOWN: abandoned while waiting for credit, the server shutting
 * down).  Called by the request's own thread, after the checks it
 * needs (size, guards); buf is count bytes (NULL for zero and trim),
 * only read for a write.
 */
extern int throttle_serve (struct throttle_serve_conn *c, nbdkit_next *next,
                           enum throttle_op op, bool charge, void *buf,
                           uint32_t count, uint64_t offset, uint32_t flags,
                           int *err);

#endif /* THROTTLE_SERVE_H */
