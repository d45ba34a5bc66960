/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the control socket's capacity commands (see
 * throttle-control.h).
 */

#include <config.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <nbdkit-filter.h>

#include "throttle-adapt-glue.h"
#include "throttle-config.h"
#include "throttle-control.h"
#include "throttle-export.h"
#include "throttle-json.h"
#include "throttle-parse.h"
#include "throttle-size.h"

/* A capacity's value for "set NAME" (NAME: capacity or
 * server-capacity): parsed, then checked against the metric as at
 * start.  -1 after replying the error.  *huge, with why in warning
 * (len bytes), when it can never be reached.
 */
static int
parse_capacity (FILE *out, const char *name, const char *value, int64_t *r,
                bool *huge, char *warning, size_t len)
{
  const char *why, *where;
  char what[256];
  int judged;

  if (throttle_size_parse (value, r, &why, &where) == -1) {
    throttle_json_error (out, "bad number \"%s\": expected a "
                         "positive size (e.g. 4096, 64M)", value);
    return -1;
  }
  if (*r == 0) {
    throttle_json_error (out, "bad number \"%s\": the capacity "
                         "must be greater than 0", value);
    return -1;
  }
  snprintf (what, sizeof what, "%s \"%s\"", name, value);
  judged = throttle_capacity_judge (&throttle_config.metric, what, value, *r,
                                    warning, len);
  if (judged == -1) {
    throttle_json_error (out, "%s", warning);
    return -1;
  }
  *huge = judged == 1;
  return 0;
}

/* The end of a set reply: with "warning" when the capacity was set
 * but can never be reached (throttle_capacity_judge), as nbdkit
 * would have warned at start, so the operator reads why.
 */
static void
reply_warning (FILE *out, bool huge, const char *warning)
{
  if (huge) {
    nbdkit_debug ("throttle: control: warning: %s", warning);
    fputs (",\"warning\":", out);
    throttle_json_string (out, warning);
  }
  fputs ("}\n", out);
}

void
throttle_control_set_capacity (FILE *out, struct throttle_export *exp,
                               const char *value)
{
  const char *name = exp->name;
  uint64_t previous;
  char warning[512];
  bool huge;
  int64_t r;

  if (parse_capacity (out, "capacity", value, &r, &huge, warning,
                      sizeof warning) == -1)
    return;
  /* Every export's capacity stays within the server's, so that the
   * server-wide budget bounds the sum and never clamps an export's
   * grant: above it, refused if throttle-server-capacity was given,
   * else the server's follows, first.  (Only this thread sets either.)
   */
  if ((uint64_t) r > throttle_budget_get_capacity (throttle_config.server)) {
    if (throttle_config.server_capacity_set) {
      throttle_json_error (out, "capacity \"%s\": above the "
                           "server-wide capacity %" PRIu64 ": "
                           "raise it first with set "
                           "server-capacity N", value,
                           throttle_budget_get_capacity
                           (throttle_config.server));
      return;
    }
    nbdkit_debug ("throttle: control: server-wide capacity %" PRIu64
                  " -> %" PRId64 ", following export \"%s\" (no "
                  "throttle-server-capacity)", throttle_budget_get_capacity
                  (throttle_config.server), r, name);
    throttle_budget_set_capacity (throttle_config.server, r);
  }
  /* Through the latency target's glue: with a target, this is its
   * ceiling, and the two must not race.
   */
  if (throttle_adapt_export_set_ceiling (out, exp, r, &previous) == -1)
    return;
  nbdkit_debug ("throttle: control: export \"%s\" capacity %" PRIu64
                " -> %" PRId64, name, previous, r);
  fputs ("{\"ok\":true,\"export\":", out);
  throttle_json_string (out, name);
  fprintf (out, ",\"capacity\":%" PRId64 ",\"previous\":%" PRIu64,
           r, previous);
  reply_warning (out, huge, warning);
}

struct ceiling_ctx {
  uint64_t max;
  bool found;                   /* an export has the largest */
  char name[256];               /* its name, cut: copied under the lock */
};

/* Called with the registry locked. */
static void
max_ceiling (struct throttle_export *exp, void *opaque)
{
  struct ceiling_ctx *ctx = opaque;
  uint64_t c = throttle_adapt_export_ceiling (exp);

  if (c > ctx->max || (c == ctx->max && !ctx->found)) {
    ctx->max = c;
    ctx->found = true;
    snprintf (ctx->name, sizeof ctx->name, "%s", exp->name);
  }
}

void
throttle_control_set_server_capacity (FILE *out,
                                      struct throttle_export *unused,
                                      const char *value)
{
  struct ceiling_ctx ctx = { .max = throttle_config.capacity };
  uint64_t previous;
  char warning[512];
  bool huge;
  int64_t r;

  if (parse_capacity (out, "server-capacity", value, &r, &huge, warning,
                      sizeof warning) == -1)
    return;
  /* Not below an export's capacity, nor below throttle-capacity, at
   * which every budget made from now on starts.
   */
  throttle_export_foreach_range (0, SIZE_MAX, max_ceiling, &ctx);
  if ((uint64_t) r < ctx.max) {
    if (ctx.found)
      throttle_json_error (out, "server-capacity \"%s\": below "
                           "the capacity %" PRIu64 " of export "
                           "\"%s\": lower it first with set "
                           "capacity", value, ctx.max, ctx.name);
    else
      throttle_json_error (out, "server-capacity \"%s\": below "
                           "throttle-capacity=%" PRIu64 ", at "
                           "which every export starts",
                           value, ctx.max);
    return;
  }
  previous = throttle_budget_get_capacity (throttle_config.server);
  throttle_budget_set_capacity (throttle_config.server, r);
  /* Set now: it no longer follows the exports' capacities. */
  throttle_config.server_capacity_set = true;
  nbdkit_debug ("throttle: control: server capacity %" PRIu64 " -> %" PRId64,
                previous, r);
  fprintf (out, "{\"ok\":true,\"server_capacity\":%" PRId64
           ",\"previous\":%" PRIu64, r, previous);
  reply_warning (out, huge, warning);
}
