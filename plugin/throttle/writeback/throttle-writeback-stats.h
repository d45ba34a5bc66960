/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: write-behind's members of the control
 * socket's stats, and its metrics.
 */

#ifndef THROTTLE_WRITEBACK_STATS_H
#define THROTTLE_WRITEBACK_STATS_H

#include <stddef.h>
#include <stdio.h>

#include "throttle-export.h"

/* The member for the control socket (throttle_report_json_fn):
 *   ,"writeback":{"pending_writes":N,"pending_bytes":N,
 *   "peak_pending_bytes":N,"pool_used":N,"pool_size":N,"written":N,
 *   "direct":N,"failed":N,"error":"EIO"|null}
 * Nothing for exp == NULL or an export in writethrough.  exp must stay
 * valid for the call; any thread.
 */
extern void throttle_writeback_stats_json (FILE *fp,
                                           struct throttle_export *exp);

/* The same numbers as metrics (a throttle_report_metrics_fn): the families
 * nbdkit_throttle_writeback_*, each with one sample per export in
 * writeback (the default export alone, once a writable connection made
 * its queue; none before).  The control thread's.
 */
extern void throttle_writeback_metrics (FILE *fp);

#endif /* THROTTLE_WRITEBACK_STATS_H */
