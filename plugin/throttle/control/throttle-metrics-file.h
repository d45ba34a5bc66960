/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the metrics file (throttle-metrics-file=PATH,
 * throttle-metrics-interval=SECS), for whoever runs no control client:
 * the text of the control command "metrics" (throttle-metrics.h),
 * rewritten every interval by the control thread's loop, and a last
 * time at unload with the final numbers.
 *
 * Each write replaces the file whole: a temporary file in the same
 * directory (.NAME.XXXXXX, which node_exporter's textfile collector,
 * reading *.prom, passes over), renamed over PATH, so that a reader
 * sees the old text or the new, never a part.  No fsync: after a crash
 * of the machine the file may be empty, and nbdkit rewrites it at its
 * next start.
 *
 * When each hook is called: throttle-features.c.
 */

#ifndef THROTTLE_METRICS_FILE_H
#define THROTTLE_METRICS_FILE_H

#include "throttle-params.h"

extern const struct throttle_param throttle_metrics_file_param_table[];
/* Writes the file a first time, so that a path that cannot be written
 * (no such directory, no permission, a directory at PATH) stops the
 * server before nbdkit forks.  -1 after nbdkit_error.  Needs the
 * registry (throttle_export_init).
 */
extern int throttle_metrics_file_config_complete (void);
/* Seconds between writes; 0 without a file. */
extern double throttle_metrics_file_interval (void);
/* Write the file now, from the control thread.  A failure is logged
 * once (nbdkit_error), when it first happens or its reason changes, and
 * the file keeps its last text; the next interval tries again.
 */
extern void throttle_metrics_file_update (void);
/* The last write, without the features' families (their state is
 * gone), then free everything: at unload, after the control thread is
 * stopped and before the budgets are freed.
 */
extern void throttle_metrics_file_unload (void);

#define throttle_metrics_file_config_help \
  "throttle-metrics-file=PATH  Write the metrics (OpenMetrics text)\n" \
  "                            to PATH, replaced whole at each write.\n" \
  "throttle-metrics-interval=SECS\n" \
  "                            Rewrite it every SECS seconds (default 10)."

#endif /* THROTTLE_METRICS_FILE_H */
