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

/* Members of the control socket's stats: writeback mode's (pool use,
 * pending writes, the sticky error), the latency target's, real-time
 * switching's, the swap verdict's.  Called in the order added, from
 * the control thread, once with exp == NULL for members of the
 * top-level object, then once per export.  It writes into buf (len
 * bytes, at least 4096) zero or more complete JSON members separated
 * by commas, without a leading or trailing comma, e.g.
 *   "pool_used":1048576,"pending_writes":3,"error":null
 * and NUL-terminates them.  Output that does not fit is dropped whole.
 * It must not block, and must not call the registry: it may run with
 * the registry's lock held (a lock it takes for a copy is ordered after
 * that one: throttle-export.c).  Adding one twice adds it once.  The
 * control thread is stopped in .cleanup before any feature's, so state
 * the function reads may be freed after that.
 */
typedef void (*throttle_report_json_fn) (struct throttle_export *exp,
                                         char *buf, size_t len);
#define THROTTLE_REPORT_MAX_JSON 4
extern void throttle_report_add_json (throttle_report_json_fn fn);

/* The i'th function added (from 0), NULL past the last. */
extern throttle_report_json_fn throttle_report_json (size_t i);

/* Metric families (write-behind's pool and queue, the swap verdict):
 * fn writes whole families as OpenMetrics text (lib/throttle-prom.h).
 * Called in the order added from the control thread, without the
 * registry's lock (fn may walk the registry or get an export).  fn
 * must not block.  Adding one twice adds it once.
 */
typedef void (*throttle_report_metrics_fn) (FILE *fp);
#define THROTTLE_REPORT_MAX_METRICS 4
extern void throttle_report_add_metrics (throttle_report_metrics_fn fn);

/* The i'th function added (from 0), NULL past the last. */
extern throttle_report_metrics_fn throttle_report_metrics (size_t i);

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
