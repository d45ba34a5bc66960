/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: write-behind's members of the control
 * socket's stats.  See throttle-writeback-stats.h.
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "throttle-wbq.h"
#include "throttle-writeback-state.h"
#include "throttle-writeback-stats.h"

void
throttle_writeback_stats_json (struct throttle_export *exp, char *buf,
                               size_t len)
{
  struct throttle_wb *wb = throttle_wb_of (exp);
  struct throttle_wbq_stats s;
  const char *error = NULL;
  int n;

  if (len > 0)
    buf[0] = '\0';
  if (wb == NULL)
    return;
  throttle_wbq_get_stats (wb->q, &s);
  if (s.error_unreported)
    error = strerrorname_np (s.last.errnum) ? : "EIO";
  n = snprintf (buf, len,
                "\"writeback\":{\"pending_writes\":%" PRIu64
                ",\"pending_bytes\":%" PRIu64 ",\"peak_pending_bytes\":%"
                PRIu64 ",\"pool_used\":%zu,\"pool_size\":%zu"
                ",\"written\":%" PRIu64 ",\"direct\":%" PRIu64
                ",\"failed\":%" PRIu64 ",\"error\":%s%s%s}",
                s.pending, s.pending_bytes, s.peak_pending_bytes,
                s.pool_used, s.pool_size, s.written, s.direct, s.failed,
                error ? "\"" : "", error ? error : "null", error ? "\"" : "");
  if (n < 0 || (size_t) n >= len)
    buf[0] = '\0';            /* dropped whole, never half a member */
}
