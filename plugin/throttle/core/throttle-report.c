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
static throttle_report_json_fn json_fns[THROTTLE_REPORT_MAX_JSON];
static throttle_report_metrics_fn metrics_fns[THROTTLE_REPORT_MAX_METRICS];
static const struct throttle_report_setter *setters[THROTTLE_REPORT_MAX_SETTERS];
static size_t nr_setters;

/* Each add puts fn in the first free slot, unless it is there. */
void
throttle_report_add_json (throttle_report_json_fn fn)
{
  size_t i;

  for (i = 0; i < THROTTLE_REPORT_MAX_JSON; i++)
    if (json_fns[i] == NULL || json_fns[i] == fn) {
      json_fns[i] = fn;
      return;
    }
  abort ();                     /* a new caller: raise the maximum */
}

throttle_report_json_fn
throttle_report_json (size_t i)
{
  return i < THROTTLE_REPORT_MAX_JSON ? json_fns[i] : NULL;
}

void
throttle_report_add_metrics (throttle_report_metrics_fn fn)
{
  size_t i;

  for (i = 0; i < THROTTLE_REPORT_MAX_METRICS; i++)
    if (metrics_fns[i] == NULL || metrics_fns[i] == fn) {
      metrics_fns[i] = fn;
      return;
    }
  abort ();                     /* a new caller: raise the maximum */
}

throttle_report_metrics_fn
throttle_report_metrics (size_t i)
{
  return i < THROTTLE_REPORT_MAX_METRICS ? metrics_fns[i] : NULL;
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
