/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the statistics, and every output of them
 * (see throttle-metrics.h).
 */

#include <config.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "throttle-config.h"
#include "throttle-export.h"
#include "throttle-json.h"
#include "throttle-metrics.h"
#include "throttle-prom.h"

#define PREFIX "nbdkit_throttle_"

/* One budget's statistics in a snapshot: an export's, or the
 * server-wide one's (name NULL).
 */
struct budget {
  const char *name;
  struct throttle_stats s;
  uint64_t conns;               /* open connections */
  bool permanent;               /* kept until exit */
  const char *json;             /* the features' members */
};

#define UNITS 1                 /* counts the metric's units: _units */
#define COUNTER 2               /* else a gauge */
#define NS 4                    /* nanoseconds */
#define EXPORT_ONLY 8           /* not the server-wide budget's */
#define S(field) offsetof (struct budget, s.field)

/* Each statistic of a budget, in the order every output gives them:
 * its member in the stats, its key in the summary (NULL: not there),
 * its family after PREFIX (and "server_").
 */
static const struct statistic {
  const char *json, *summary, *prom, *help;
  size_t offset;                /* of a uint64_t in struct budget */
  unsigned flags;
} stats[] = {
  { "capacity", "capacity", "capacity", "Units the budget lets be in flight",
    S (capacity), UNITS },
  { "in_flight", "in_flight", "in_flight", "Units in flight now",
    S (in_flight), UNITS },
  { "peak", "peak", "peak",
    "Most units in flight at once since the budget was made",
    S (peak), UNITS },
  { "charged", "charged", "charged",
    "Units charged since the budget was made", S (charged), UNITS | COUNTER },
  { "admitted", "admitted", "admitted_requests",
    "Requests (or parts of requests) admitted", S (admitted), COUNTER },
  { "waited", "waited", "waited_requests",
    "Admitted requests that had to wait for units", S (waited), COUNTER },
  { "cancelled", "cancelled", "cancelled_waits",
    "Waits that were cancelled (the client went away, or shutdown)",
    S (cancelled), COUNTER | EXPORT_ONLY },
  { "clamped", "clamped", "clamped_requests",
    "Requests above the capacity, run alone", S (clamped), COUNTER },
  { "wait_ns_total", "wait_total_ms", "wait_seconds",
    "Time requests spent waiting for units, all together",
    S (wait_ns_total), COUNTER | NS },
  { "wait_ns_max", "wait_max_ms", "wait_max_seconds",
    "The longest wait for units", S (wait_ns_max), NS },
  { "waiters", NULL, "waiters", "Requests waiting for units now",
    S (waiters), 0 },
  { "connections", NULL, "connections", "Open connections to the export",
    offsetof (struct budget, conns), EXPORT_ONLY },
};
#define NR_STATS (sizeof stats / sizeof stats[0])

static uint64_t
value (const struct budget *b, const struct statistic *st)
{
  uint64_t v;

  memcpy (&v, (const char *) b + st->offset, sizeof v);
  return v;
}

/* Every feature's members of the stats, in the table's order. */
static void
report_json (FILE *fp, struct throttle_export *exp)
{
  const struct throttle_report *r;

  for (r = throttle_reports; r->json; r++)
    r->json (fp, exp);
}

/* --- the snapshot -------------------------------------------------------- */

struct snapshot {
  struct budget server;
  size_t total;                 /* exports with a budget, in all */
  size_t n;                     /* in exports[] */
  struct budget *exports;
  char *text;                   /* where the strings are */
  FILE *fp;                     /* text, while taking */
  bool with_json;
};

/* Until the text is complete, a budget's name and json are offsets
 * into it (the stream moves it as it grows).
 */
static const char *
offset (FILE *fp)
{
  return (const char *) (uintptr_t) ftell (fp);
}

static void
take_export (struct throttle_export *exp, void *opaque)
{
  struct snapshot *r = opaque;
  struct budget *b = &r->exports[r->n++];

  throttle_budget_get_stats (&exp->budget, &b->s);
  b->conns = __atomic_load_n (&exp->conns, __ATOMIC_RELAXED);
  b->permanent = exp->permanent;
  b->name = offset (r->fp);
  fwrite (exp->name, 1, strlen (exp->name) + 1, r->fp);
  b->json = offset (r->fp);
  if (r->with_json)
    report_json (r->fp, exp);
  putc ('\0', r->fp);
}

/* One export (exp != NULL, held by the caller), or every export, with
 * each export's features' JSON members if with_json.  An export made
 * between the count and the walk is left out, as if made just after.
 * 0, or -1 if memory ran out (nothing to free then).
 */
static int
take (struct snapshot *r, struct throttle_export *exp, bool with_json)
{
  size_t len, i, room = exp ? 1 : throttle_export_count ();

  memset (r, 0, sizeof *r);
  r->with_json = with_json;
  r->exports = calloc (room, sizeof *r->exports);
  if (r->exports == NULL ||
      (r->fp = open_memstream (&r->text, &len)) == NULL) {
    free (r->exports);
    return -1;
  }
  throttle_budget_get_stats (throttle_config.server, &r->server.s);
  if (exp) {
    take_export (exp, r);
    r->total = throttle_export_count ();
  }
  else
    r->total = throttle_export_foreach_range (0, room, take_export, r);
  if (fclose (r->fp) == EOF) {
    free (r->exports);
    free (r->text);
    return -1;
  }
  for (i = 0; i < r->n; i++) {
    r->exports[i].name = r->text + (uintptr_t) r->exports[i].name;
    r->exports[i].json = r->text + (uintptr_t) r->exports[i].json;
  }
  return 0;
}

static void
snapshot_free (struct snapshot *r)
{
  free (r->exports);
  free (r->text);
}

/* --- the stats ----------------------------------------------------------- */

/* A budget's object: an export's with its name first and, last, how
 * long it is kept and the features' members.
 */
static void
budget_json (FILE *fp, const struct budget *b)
{
  size_t i;

  putc ('{', fp);
  if (b->name) {
    fputs ("\"name\":", fp);
    throttle_json_string (fp, b->name);
  }
  for (i = 0; i < NR_STATS; i++)
    if (b->name || !(stats[i].flags & EXPORT_ONLY))
      fprintf (fp, "%s\"%s\":%" PRIu64, b->name || i ? "," : "",
               stats[i].json, value (b, &stats[i]));
  if (b->name)
    fprintf (fp, ",\"kept\":\"%s\"%s",
             b->permanent ? "until exit" : "while connected", b->json);
  putc ('}', fp);
}

char *
throttle_metrics_stats (struct throttle_export *exp)
{
  struct snapshot r;
  char *line = NULL;
  size_t len, i;
  FILE *fp;

  if (take (&r, exp, true) == -1)
    return NULL;
  fp = open_memstream (&line, &len);
  if (fp == NULL) {
    snapshot_free (&r);
    return NULL;
  }
  fputs ("{\"metric\":", fp);
  throttle_json_string (fp, throttle_config.metric.name ?
                        throttle_config.metric.name : "");
  fprintf (fp, ",\"default_capacity\":%" PRIu64 ",\"server\":",
           throttle_config.capacity);
  budget_json (fp, &r.server);
  fprintf (fp, ",\"exports_total\":%zu", r.total);
  report_json (fp, NULL);
  fputs (",\"exports\":[", fp);
  for (i = 0; i < r.n; i++) {
    if (i > 0)
      putc (',', fp);
    budget_json (fp, &r.exports[i]);
  }
  fputs ("]}\n", fp);
  snapshot_free (&r);
  if (fclose (fp) == EOF) {
    free (line);
    return NULL;
  }
  return line;
}

/* --- the metrics --------------------------------------------------------- */

/* What the metric's units are, for the info metric: a user metric
 * counts units of its own.
 */
static const char *
unit (const char *m)
{
  if (strcmp (m, "bytes") == 0 || strcmp (m, "pages") == 0 ||
      strcmp (m, "requests") == 0)
    return m;
  return "units";
}

/* What the server runs with, and how many exports have a budget. */
static void
write_config (FILE *fp, size_t exports)
{
  const char *m = throttle_config.metric.name ?
    throttle_config.metric.name : "";

  throttle_prom_family (fp, PREFIX "info", "gauge",
                        "Always 1: the metric that charges requests "
                        "(bytes, pages, requests or a user metric's path) "
                        "and what the _units families count (bytes, "
                        "pages, requests, or units for a user metric)");
  fputs (PREFIX "info{metric=", fp);
  throttle_quote (fp, m, false);
  fputs (",unit=", fp);
  throttle_quote (fp, unit (m), false);
  fputs ("} 1\n", fp);
  throttle_prom_family (fp, PREFIX "default_capacity_units", "gauge",
                        "The capacity a new export's budget starts at "
                        "(throttle-capacity)");
  throttle_prom_sample (fp, PREFIX "default_capacity_units", NULL, NULL,
                        throttle_config.capacity);
  throttle_prom_family (fp, PREFIX "exports", "gauge",
                        "Exports with a budget, the default one included");
  throttle_prom_sample (fp, PREFIX "exports", NULL, NULL, exports);
}

/* A statistic's family: its HELP and TYPE lines, and a sample for
 * each of the n budgets (the server-wide one's alone if server).
 */
static void
write_family (FILE *fp, const struct statistic *st, const struct budget *b,
              size_t n, bool server)
{
  char name[128], help[256];
  size_t i;

  snprintf (name, sizeof name, PREFIX "%s%s%s%s", server ? "server_" : "",
            st->prom, st->flags & UNITS ? "_units" : "",
            st->flags & COUNTER ? "_total" : "");
  snprintf (help, sizeof help, "%s (%s)", st->help,
            server ? "the server-wide budget" : "per export");
  throttle_prom_family (fp, name, st->flags & COUNTER ? "counter" : "gauge",
                        help);
  for (i = 0; i < n; i++)
    if (st->flags & NS)
      throttle_prom_sample_ns (fp, name, server ? NULL : "export",
                               b[i].name, value (&b[i], st));
    else
      throttle_prom_sample (fp, name, server ? NULL : "export", b[i].name,
                            value (&b[i], st));
}

int
throttle_metrics_write (FILE *fp, bool with_features)
{
  const struct throttle_report *rep;
  struct snapshot r;
  size_t i;

  if (take (&r, NULL, false) == -1)
    return -1;
  write_config (fp, r.total);
  for (i = 0; i < NR_STATS; i++) {
    write_family (fp, &stats[i], r.exports, r.n, false);
    if (!(stats[i].flags & EXPORT_ONLY))
      write_family (fp, &stats[i], &r.server, 1, true);
  }
  snapshot_free (&r);
  for (rep = throttle_reports; with_features && rep->json; rep++)
    if (rep->metrics)
      rep->metrics (fp);
  fputs (THROTTLE_PROM_EOF, fp);
  return 0;
}

/* --- the summary --------------------------------------------------------- */

/* The summary at exit goes to stderr whether or not -v was given, as
 * nbdkit's stats filter writes its statistics at exit (there to a
 * file; statsfile=/dev/stderr is its usual use): nbdkit 1.32 has no
 * call that logs what is neither an error nor a debug line.  A server
 * in the background without -v has no stderr (nbdkit points it at
 * /dev/null): throttle-metrics-file is written a last time instead.
 * A line is written under stderr's lock, as nbdkit writes its own.
 */
static void
summary_line (const struct budget *b)
{
  size_t i;

  flockfile (stderr);
  if (b->name)
    fprintf (stderr, "nbdkit: throttle: summary export=\"%s\"", b->name);
  else
    fputs ("nbdkit: throttle: summary server", stderr);
  for (i = 0; i < NR_STATS; i++) {
    if (stats[i].summary == NULL ||
        (b->name == NULL && stats[i].flags & EXPORT_ONLY))
      continue;
    if (stats[i].flags & NS)
      fprintf (stderr, " %s=%.3f", stats[i].summary,
               value (b, &stats[i]) / 1e6);
    else
      fprintf (stderr, " %s=%" PRIu64, stats[i].summary,
               value (b, &stats[i]));
  }
  putc ('\n', stderr);
  funlockfile (stderr);
}

static bool started;

int
throttle_metrics_after_fork (void)
{
  started = true;
  return 0;
}

/* The server's line first: a script reading the last summary line
 * finds an export's, as before there was a server-wide budget.
 */
void
throttle_metrics_summary (void)
{
  struct snapshot r;
  size_t i;

  if (!started)
    return;
  if (take (&r, NULL, false) == -1) {
    fputs ("nbdkit: throttle: summary: out of memory\n", stderr);
    return;
  }
  summary_line (&r.server);
  for (i = 0; i < r.n; i++)
    summary_line (&r.exports[i]);
  snapshot_free (&r);
}
