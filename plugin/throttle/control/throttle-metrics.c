/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the statistics as OpenMetrics text (see
 * throttle-metrics.h).
 */

#include <config.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "throttle-config.h"
#include "throttle-export.h"
#include "throttle-metrics.h"
#include "throttle-prom.h"
#include "throttle-report.h"

#define PREFIX "nbdkit_throttle_"
#define CONNECTIONS ((size_t) -1)   /* the export's, not a budget's */

/* A budget's statistic, as a family of its own per export and, unless
 * export_only, one for the server-wide budget.  The names and types
 * are the format's contract with every dashboard: never rename one,
 * and never make one depend on the configuration (the unit of the
 * metric's units is nbdkit_throttle_info's label: throttle-metrics.h).
 */
struct family {
  const char *name;             /* after PREFIX (and "server_") */
  bool units;                   /* counts the metric's units: _units */
  bool counter;                 /* else a gauge */
  bool ns;                      /* nanoseconds, written as seconds */
  bool export_only;
  size_t field;                 /* in struct throttle_stats */
  const char *help;
};

#define F(field) offsetof (struct throttle_stats, field)

static const struct family families[] = {
  { "capacity", true, false, false, false, F (capacity),
    "Units the budget lets be in flight" },
  { "in_flight", true, false, false, false, F (in_flight),
    "Units in flight now" },
  { "peak", true, false, false, false, F (peak),
    "Most units in flight at once since the budget was made" },
  { "charged", true, true, false, false, F (charged),
    "Units charged since the budget was made" },
  { "admitted_requests", false, true, false, false, F (admitted),
    "Requests (or parts of requests) admitted" },
  { "waited_requests", false, true, false, false, F (waited),
    "Admitted requests that had to wait for units" },
  { "cancelled_waits", false, true, false, true, F (cancelled),
    "Waits that were cancelled (the client went away, or shutdown)" },
  { "clamped_requests", false, true, false, false, F (clamped),
    "Requests above the capacity, run alone" },
  { "wait_seconds", false, true, true, false, F (wait_ns_total),
    "Time requests spent waiting for units, all together" },
  { "wait_max_seconds", false, false, true, false, F (wait_ns_max),
    "The longest wait for units" },
  { "waiters", false, false, false, false, F (waiters),
    "Requests waiting for units now" },
  { "connections", false, false, false, true, CONNECTIONS,
    "Open connections to the export" },
};

/* What the metric's units are, for the info metric: a user metric
 * counts units of its own.
 */
static const char *
unit (void)
{
  const char *m = throttle_config.metric.name;

  if (m && (strcmp (m, "bytes") == 0 || strcmp (m, "pages") == 0 ||
            strcmp (m, "requests") == 0))
    return m;
  return "units";
}

static void
family_name (const struct family *f, bool server, char *buf, size_t len)
{
  snprintf (buf, len, PREFIX "%s%s%s%s", server ? "server_" : "",
            f->name, f->units ? "_units" : "", f->counter ? "_total" : "");
}

static void
write_header (FILE *fp, const struct family *f, const char *name,
              bool server)
{
  char help[256];

  snprintf (help, sizeof help, "%s (%s)", f->help,
            server ? "the server-wide budget" : "per export");
  throttle_prom_family (fp, name, f->counter ? "counter" : "gauge", help);
}

static void
write_value (FILE *fp, const struct family *f, const char *name,
             const char *export, const struct throttle_stats *s,
             uint64_t conns)
{
  uint64_t v;

  if (f->field == CONNECTIONS)
    v = conns;
  else
    memcpy (&v, (const char *) s + f->field, sizeof v);
  if (f->ns)
    throttle_prom_sample_ns (fp, name, export ? "export" : NULL, export, v);
  else
    throttle_prom_sample (fp, name, export ? "export" : NULL, export, v);
}

struct export_ctx {
  FILE *fp;
  const struct family *f;
  const char *name;
};

static void
write_export (struct throttle_export *exp, void *opaque)
{
  struct export_ctx *ctx = opaque;
  struct throttle_stats s;

  throttle_budget_get_stats (&exp->budget, &s);
  write_value (ctx->fp, ctx->f, ctx->name, exp->name, &s,
               __atomic_load_n (&exp->conns, __ATOMIC_RELAXED));
}

/* What the server runs with, and how many exports have a budget. */
static void
write_config (FILE *fp)
{
  throttle_prom_family (fp, PREFIX "info", "gauge",
                        "Always 1: the metric that charges requests "
                        "(bytes, pages, requests or a user metric's path) "
                        "and what the _units families count (bytes, "
                        "pages, requests, or units for a user metric)");
  fputs (PREFIX "info{metric=", fp);
  throttle_prom_label_value (fp, throttle_config.metric.name ?
                             throttle_config.metric.name : "");
  fputs (",unit=", fp);
  throttle_prom_label_value (fp, unit ());
  fputs ("} 1\n", fp);
  throttle_prom_family (fp, PREFIX "default_capacity_units", "gauge",
                        "The capacity a new export's budget starts at "
                        "(throttle-capacity)");
  throttle_prom_sample (fp, PREFIX "default_capacity_units", NULL, NULL,
                        throttle_config.capacity);
  throttle_prom_family (fp, PREFIX "exports", "gauge",
                        "Exports with a budget, the default one included");
  throttle_prom_sample (fp, PREFIX "exports", NULL, NULL,
                        throttle_export_count ());
}

void
throttle_metrics_write (FILE *fp, bool with_features)
{
  throttle_report_metrics_fn fn;
  char name[128];
  size_t i;

  write_config (fp);
  for (i = 0; i < sizeof families / sizeof families[0]; i++) {
    const struct family *f = &families[i];
    struct export_ctx ctx = { .fp = fp, .f = f, .name = name };
    struct throttle_stats s;

    family_name (f, false, name, sizeof name);
    write_header (fp, f, name, false);
    throttle_export_foreach (write_export, &ctx);
    if (f->export_only || throttle_config.server == NULL)
      continue;
    family_name (f, true, name, sizeof name);
    write_header (fp, f, name, true);
    throttle_budget_get_stats (throttle_config.server, &s);
    write_value (fp, f, name, NULL, &s, 0);
  }
  for (i = 0; with_features && (fn = throttle_report_metrics (i)) != NULL;
       i++)
    fn (fp);
  fputs (THROTTLE_PROM_EOF, fp);
}
