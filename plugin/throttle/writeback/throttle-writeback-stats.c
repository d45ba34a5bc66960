/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: write-behind's members of the control
 * socket's stats, and its metrics.  See throttle-writeback-stats.h.
 */

#include <config.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "throttle-prom.h"
#include "throttle-wbq.h"
#include "throttle-writeback-state.h"
#include "throttle-writeback-stats.h"

void
throttle_writeback_stats_json (FILE *fp, struct throttle_export *exp)
{
  struct throttle_wb *wb = throttle_wb_of (exp);
  struct throttle_wbq_stats s;
  const char *error = NULL;

  if (wb == NULL)
    return;
  throttle_wbq_get_stats (wb->q, &s);
  if (s.error_unreported)
    error = strerrorname_np (s.last.errnum) ? : "EIO";
  fprintf (fp, ",\"writeback\":{\"pending_writes\":%" PRIu64
           ",\"pending_bytes\":%" PRIu64 ",\"peak_pending_bytes\":%" PRIu64
           ",\"pool_used\":%zu,\"pool_size\":%zu,\"written\":%" PRIu64
           ",\"direct\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"error\":%s%s%s}",
           s.pending, s.pending_bytes, s.peak_pending_bytes,
           s.pool_used, s.pool_size, s.written, s.direct, s.failed,
           error ? "\"" : "", error ? error : "null", error ? "\"" : "");
}

#define PREFIX "nbdkit_throttle_writeback_"

/* The members of the JSON above, as families (the error as whether
 * one is unreported, 0 or 1).  Never rename one: dashboards use them.
 */
static const struct {
  const char *name;
  bool counter;
  const char *help;
} families[] = {
  { PREFIX "pending_writes", false,
    "Writes acknowledged and not yet on the backend" },
  { PREFIX "pending_bytes", false,
    "Bytes acknowledged and not yet on the backend" },
  { PREFIX "peak_pending_bytes", false,
    "Most bytes pending at once" },
  { PREFIX "pool_used_bytes", false,
    "Bytes of the locked pool in use" },
  { PREFIX "pool_size_bytes", false,
    "Bytes of the locked pool" },
  { PREFIX "written_writes_total", true,
    "Writes the writers put on the backend" },
  { PREFIX "direct_writes_total", true,
    "Writes too large for the pool, passed straight through" },
  { PREFIX "failed_writes_total", true,
    "Writes that failed on the backend" },
  { PREFIX "error_unreported", false,
    "1 while a failed write has not been reported by a flush" },
};

void
throttle_writeback_metrics (FILE *fp)
{
  /* Writeback serves the default export alone. */
  struct throttle_export *exp = throttle_export_get ("");
  struct throttle_wb *wb = throttle_wb_of (exp);
  struct throttle_wbq_stats s = { 0 };
  size_t i;

  if (wb)
    throttle_wbq_get_stats (wb->q, &s);
  for (i = 0; i < sizeof families / sizeof families[0]; i++) {
    const uint64_t v[] = {
      s.pending, s.pending_bytes, s.peak_pending_bytes, s.pool_used,
      s.pool_size, s.written, s.direct, s.failed, s.error_unreported,
    };

    throttle_prom_family (fp, families[i].name,
                          families[i].counter ? "counter" : "gauge",
                          families[i].help);
    if (wb)
      throttle_prom_sample (fp, families[i].name, "export", "", v[i]);
  }
  if (exp)
    throttle_export_put (exp);
}
