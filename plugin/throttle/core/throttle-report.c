/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: what a feature reports.  See
 * throttle-report.h.
 */

#include <config.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "throttle-json.h"
#include "throttle-report.h"

/* The tables: added to before the control thread starts, read only by
 * it, so no lock (throttle-report.h).
 */
static struct {
  throttle_report_json_fn json;
  throttle_report_metrics_fn metrics;
} features[THROTTLE_REPORT_MAX_FEATURES];
static size_t nr_features;
static const struct throttle_report_setter *setters[THROTTLE_REPORT_MAX_SETTERS];
static size_t nr_setters;

void
throttle_report_add (throttle_report_json_fn json,
                     throttle_report_metrics_fn metrics)
{
  size_t i;

  for (i = 0; i < nr_features; i++)
    if (features[i].json == json && features[i].metrics == metrics)
      return;
  if (nr_features == THROTTLE_REPORT_MAX_FEATURES)
    abort ();                   /* a new feature: raise the maximum */
  features[nr_features].json = json;
  features[nr_features++].metrics = metrics;
}

void
throttle_report_metrics (FILE *fp)
{
  size_t i;

  for (i = 0; i < nr_features; i++)
    if (features[i].metrics)
      features[i].metrics (fp);
}

void
throttle_report_json (FILE *fp, struct throttle_export *exp)
{
  size_t i;

  for (i = 0; i < nr_features; i++)
    if (features[i].json)
      features[i].json (fp, exp);
}

void
throttle_report_add_setter (const struct throttle_report_setter *setter)
{
  if (nr_setters == THROTTLE_REPORT_MAX_SETTERS)
    abort ();                   /* a new command: raise the maximum */
  setters[nr_setters++] = setter;
}

const struct throttle_report_setter *
throttle_report_setter (size_t i)
{
  return i < nr_setters ? setters[i] : NULL;
}

void
throttle_report_error (FILE *out, const char *fmt, ...)
{
  char msg[2048];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  fputs ("{\"error\":", out);
  throttle_json_string (out, msg);
  fputs ("}\n", out);
}
