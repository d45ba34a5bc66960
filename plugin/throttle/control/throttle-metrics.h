/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the statistics, and every output of them:
 * the control socket's "stats" (JSON), its "metrics" and the metrics
 * file (OpenMetrics text, lib/throttle-prom.h), and the summary at
 * exit.  Each output formats one snapshot: the server-wide budget's
 * numbers, then every export's, copied in one walk of the registry
 * under its lock and each budget's in turn, so that each export's
 * numbers are of one instant.  A budget's statistic is defined once,
 * in the table of throttle-metrics.c, with its name in each output;
 * the names are contracts with scripts and dashboards: never rename
 * one.
 *
 * The metrics are the stats as a monitor scrapes them: each export's
 * budget with a label export="NAME", the server-wide budget under
 * names of its own (nbdkit_throttle_server_*, so that a sum over
 * exports counts nothing twice), and what the server is configured
 * with.  A name carries its unit: seconds where the stats count time,
 * and "units" where they count the metric's units, whatever
 * throttle-metric says, so that a dashboard is written once for every
 * metric.  What a unit is (bytes, pages, requests, or units of a user
 * metric's own) is the label unit="..." of the info metric,
 * nbdkit_throttle_info, beside the metric's name, rather than a label
 * of every sample: a query that needs it joins on the info metric, as
 * Prometheus's info metrics are used.
 *
 * To add a statistic: a line in the table if it is a budget's (in
 * every output then); a function beside write_config if it is the
 * server's configuration or state; a feature's report (below) if it is
 * a feature's.  A family has one label
 * at most per sample (a verdict with its reasons: a 0/1 gauge, and a
 * gauge of one sample per reason labelled reason="...").
 *
 * The locks taken: the registry's and, under it, each budget's
 * (HACKING.md, "Locks").  Any of these from the control thread, or
 * from nbdkit's main thread while the control thread is not running
 * and the budgets exist (from .config_complete to .unload).
 */

#ifndef THROTTLE_METRICS_H
#define THROTTLE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "throttle-export.h"

/* What a feature reports (write-behind's pool and queue, the latency
 * target, the swap verdict, real-time switching): the table
 * throttle_reports[], ending with a NULL json, is in
 * throttle-features.c, in the order the outputs give them.  Called
 * from the control thread alone, which starts after every feature's
 * .after_fork and is stopped in .cleanup before any feature's, so that
 * what they read exists; neither may block.
 *
 * json writes zero or more JSON members of the stats, each preceded
 * by a comma, e.g.
 *   ,"writeback":{"pool_used":1048576,"pending_writes":3,"error":null}
 * once with exp == NULL for members of the top-level object (without
 * the registry's lock), then once per export, maybe with the
 * registry's lock held: it must not call the registry (a lock it takes
 * for a copy is ordered after that one: throttle-export.c).
 *
 * metrics, or NULL, writes whole families as OpenMetrics text
 * (lib/throttle-prom.h), after the budgets', without the registry's
 * lock (it may get an export).
 */
struct throttle_report {
  void (*json) (FILE *fp, struct throttle_export *exp);
  void (*metrics) (FILE *fp);
};
extern const struct throttle_report throttle_reports[];

/* The stats of one export (exp != NULL, held by the caller), or of
 * every export, with the features' members (throttle_reports), as one
 * line of JSON with its newline, into a buffer the caller frees.
 * The control thread's.  NULL if memory ran out.
 */
extern char *throttle_metrics_stats (struct throttle_export *exp);

/* Write the whole exposition, ending with THROTTLE_PROM_EOF.  The
 * features' families are written only with_features, from the control
 * thread: at config_complete and at unload their state may be gone.
 * -1 if memory ran out (nothing written), else 0: the caller checks
 * fp's error state.
 */
extern int throttle_metrics_write (FILE *fp, bool with_features);

/* The summary at exit on stderr, a feature's hooks
 * (throttle-features.c): after_fork notes that the server started;
 * summary, at unload before the core frees the budgets, writes the
 * server-wide budget's line, then one per export, if it started (a
 * refused configuration has only its error to say).
 */
extern int throttle_metrics_after_fork (void);
extern void throttle_metrics_summary (void);

#endif /* THROTTLE_METRICS_H */
