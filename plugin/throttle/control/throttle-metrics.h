/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the statistics as OpenMetrics text
 * (lib/throttle-prom.h), for the control command "metrics" and the
 * metrics file (throttle-metrics-file.h).
 *
 * The same numbers as the control socket's "stats", as a monitor
 * scrapes them: each export's budget with a label export="NAME", the
 * server-wide budget under names of its own (nbdkit_throttle_server_*,
 * so that a sum over exports counts nothing twice), and what the
 * server is configured with.  A name carries its unit: seconds where
 * the stats count time, and "units" where they count the metric's
 * units, whatever throttle-metric says, so that a dashboard is written
 * once for every metric.  What a unit is (bytes, pages, requests, or
 * units of a user metric's own) is the label unit="..." of the info
 * metric, nbdkit_throttle_info, beside the metric's name, rather than
 * a label of every sample: a query that needs it joins on the info
 * metric, as Prometheus's info metrics are used.
 *
 * To add a family: a line in the table of throttle-metrics.c if it is
 * a budget's; a function beside write_config if it is the server's
 * configuration or state; a feature's own function added with
 * throttle_report_add_metrics (throttle-report.h) if it is a feature's.  Each writes its HELP and
 * TYPE lines and its samples with throttle_prom_*, one label at most
 * per sample (a verdict with its reasons: a 0/1 gauge, and a gauge of
 * one sample per reason labelled reason="...").
 */

#ifndef THROTTLE_METRICS_H
#define THROTTLE_METRICS_H

#include <stdbool.h>
#include <stdio.h>

/* Write the whole exposition, ending with THROTTLE_PROM_EOF.  Each
 * family walks the registry once, so the samples of one export come
 * from instants a little apart (nothing is stopped to read them); an
 * export made or freed meanwhile is in some families only.  Takes the
 * registry's lock and, under it, each budget's (HACKING.md, "Locks");
 * allocates nothing but what fp does.  From the control thread with
 * with_features; from nbdkit's main thread without while
 * the control thread is not running (at config_complete, and at unload
 * before the budgets are freed): the features' families are left out,
 * as their state may be gone.
 */
extern void throttle_metrics_write (FILE *fp, bool with_features);

/* A feature's families (writeback's pool and queue, the swap verdict)
 * are in the core's table (throttle-report.h), written after the
 * budgets' when with_features.
 */

#endif /* THROTTLE_METRICS_H */
