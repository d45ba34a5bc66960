/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the control socket (throttle-control=SOCKET),
 * the metrics file (throttle-metrics-file=PATH) and the commands that
 * change a capacity.
 *
 * All are served by one thread of their own running a libev loop, so
 * that no operator, however slow or broken his client, can stall the
 * data path: the loop takes only locks that no thread holds across a
 * plugin call or a wait, and each briefly (which: HACKING.md, "Locks").
 *
 * When each hook is called, and why then: throttle-features.c.
 */

#ifndef THROTTLE_CONTROL_H
#define THROTTLE_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "throttle-export.h"
#include "throttle-params.h"

/* --- the control socket (throttle-control.c) ---------------------------- */

extern const struct throttle_param throttle_control_param_table[];
/* Binds the socket, so that a bad path stops the server before nbdkit
 * forks.
 */
extern int throttle_control_config_complete (void);
extern int throttle_control_after_fork (void);
/* Stops the thread, closes the clients and removes the socket: the
 * hook of both .cleanup and .unload (a server that stops before it
 * serves has no .cleanup); the second call finds nothing left to do.
 */
extern void throttle_control_cleanup (void);

#define throttle_control_config_help \
  "throttle-control=SOCKET     Serve stats and runtime changes on this\n" \
  "                            Unix socket (mode 0600)."

/* --- the metrics file (throttle-metrics-file.c) ------------------------- */

/* For whoever runs no control client: the text of the control command
 * "metrics" (throttle-metrics.h), rewritten every interval by the
 * control thread's loop, and a last time at unload with the final
 * numbers.
 *
 * Each write replaces the file whole: a temporary file in the same
 * directory (.NAME.XXXXXX, which node_exporter's textfile collector,
 * reading *.prom, passes over), renamed over PATH, so that a reader
 * sees the old text or the new, never a part.  No fsync: after a crash
 * of the machine the file may be empty, and nbdkit rewrites it at its
 * next start.
 */
extern const struct throttle_param throttle_metrics_file_param_table[];
/* Writes the file a first time, so that a path that cannot be written
 * (no such directory, no permission, a directory at PATH) stops the
 * server before nbdkit forks.  -1 after nbdkit_error.  Needs the
 * registry (throttle_export_init).
 */
extern int throttle_metrics_file_config_complete (void);
/* Seconds between writes; 0 without a file. */
extern double throttle_metrics_file_interval (void);
/* Write the file now, with the features' families from the control
 * thread (see throttle_metrics_write).  A failure is logged once
 * (nbdkit_error), when it first happens or its reason changes, and the
 * file keeps its last text; the next interval tries again.
 */
extern void throttle_metrics_file_update (bool features);
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

/* --- the capacity commands (throttle-capacity.c) ------------------------ */

/* Setters (throttle-control-proto.h), listed in throttle-features.c:
 * set capacity (an export's, through the latency target's glue: with a
 * target on it is the ceiling) and set server-capacity.  They keep every export's capacity within the
 * server's (throttle-config.h).
 */
extern void throttle_control_set_capacity (FILE *out,
                                           struct throttle_export *exp,
                                           const char *value);
extern void throttle_control_set_server_capacity
  (FILE *out, struct throttle_export *unused, const char *value);

#endif /* THROTTLE_CONTROL_H */
