/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: what a feature reports, and the commands it
 * serves, as the core holds them for whatever reports (the control
 * socket and the metrics, control/).
 *
 * A feature (the guards and the swap verdict, write-behind, the latency
 * target, real-time switching) adds its functions here and knows
 * nothing of who calls them: it depends on the core alone, and the
 * reporting sits above every feature it reports on.
 *
 * Who adds, and when: a feature, in nbdkit's main thread, from
 * .config_complete, .get_ready or .after_fork, before the control
 * thread starts (throttle-features.c), without a lock: only that
 * thread reads the tables, and starting it publishes them; nothing is
 * added or removed after.  A setter must have static storage: the
 * table keeps the pointer until unload.  Adding more than a table
 * holds aborts: a new caller must raise its maximum.
 */

#ifndef THROTTLE_REPORT_H
#define THROTTLE_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "throttle-export.h"

/* What a feature reports (write-behind's pool and queue, the latency
 * target, real-time switching, the swap verdict), added once with
 * throttle_report_add; either function may be NULL.  Called in the
 * order added, from the control thread, and never at unload (the
 * control thread is stopped in .cleanup before any feature's, so state
 * they read may be freed after that).  Neither may block.  Adding the
 * same pair twice adds it once.
 *
 * json writes zero or more JSON members of the control socket's stats,
 * each preceded by a comma, e.g.
 *   ,"writeback":{"pool_used":1048576,"pending_writes":3,"error":null}
 * once with exp == NULL for members of the top-level object (without
 * the registry's lock), then once per export, maybe with the
 * registry's lock held: it must not call the registry (a lock it takes
 * for a copy is ordered after that one: throttle-export.c).
 *
 * metrics writes whole families as OpenMetrics text
 * (lib/throttle-prom.h), after the budgets', without the registry's
 * lock (it may get an export).
 */
typedef void (*throttle_report_json_fn) (FILE *fp,
                                         struct throttle_export *exp);
typedef void (*throttle_report_metrics_fn) (FILE *fp);
#define THROTTLE_REPORT_MAX_FEATURES 4
extern void throttle_report_add (throttle_report_json_fn json,
                                 throttle_report_metrics_fn metrics);

/* Call every feature's json, or metrics, in the order added
 * (throttle-metrics.c).
 */
extern void throttle_report_json (FILE *fp, struct throttle_export *exp);
extern void throttle_report_metrics (FILE *fp);

/* A "set" command a feature serves: "set NAME EXPORT VALUE" if
 * per_export, else "set NAME VALUE".  set writes the one reply line,
 * {"ok":true,...} or throttle_report_error's; exp is the named
 * export's budget, held for the call (NULL unless per_export), without
 * the registry's lock: set may call throttle_export_foreach.  It runs
 * in the control thread and must not block.  The commands are listed
 * in help and in the usage of a bad set in the order added.
 */
struct throttle_report_setter {
  const char *name;             /* "capacity" */
  const char *usage;            /* "set capacity EXPORT N" */
  bool per_export;
  void (*set) (FILE *out, struct throttle_export *exp, const char *value);
};

#define THROTTLE_REPORT_MAX_SETTERS 8
extern void throttle_report_add_setter
  (const struct throttle_report_setter *setter);

/* The i'th setter added (from 0), NULL past the last. */
extern const struct throttle_report_setter *throttle_report_setter (size_t i);

/* An error reply of the control socket: {"error":"..."} and a newline,
 * the message formatted as printf does and quoted as JSON.
 */
extern void throttle_report_error (FILE *out, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3)));

#endif /* THROTTLE_REPORT_H */
