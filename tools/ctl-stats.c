/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-ctl: the stats command (a table) and watch (a line per
 * interval per export, like vmstat).
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

#define MAX_EXPORT_DISPLAY 256
/* A verdict line: every reason of the filter's, each with its why. */
#define VERDICT_LEN 4096

static void
error (const char *msg)
{
  fprintf (stderr, "throttle-ctl: %s\n", msg);
}

/* The reply's exports array, or NULL with ERR if the reply is not the
 * filter's (a server that answers JSON of another shape).
 */
static json_object *
exports_of (json_object *reply, const char *path, char *err, size_t errlen)
{
  json_object *a = reply_member (reply, "exports", json_type_array);
  size_t i, n;
  uint64_t u;

  if (a == NULL) {
    snprintf (err, errlen, "%s: the reply has no \"exports\" array: not a "
              "throttle control socket?", path);
    return NULL;
  }
  n = json_object_array_length (a);
  for (i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx (a, i);

    if (reply_string (e, "name") == NULL ||
        !reply_uint (e, "capacity", &u) ||
        !reply_uint (e, "in_flight", &u) ||
        !reply_uint (e, "admitted", &u) ||
        !reply_uint (e, "waited", &u) ||
        !reply_uint (e, "wait_ns_total", &u) ||
        !reply_uint (e, "wait_ns_max", &u)) {
      snprintf (err, errlen, "%s: an export in the reply lacks a name or "
                "a counter: not a throttle control socket?", path);
      return NULL;
    }
  }
  return a;
}

static bool
metric_is_bytes (json_object *reply)
{
  const char *m = reply_string (reply, "metric");

  return m && strcmp (m, "bytes") == 0;
}

/* A counter that exports_of did not require: 0 if absent. */
static uint64_t
get (json_object *e, const char *key)
{
  uint64_t u = 0;

  reply_uint (e, key, &u);
  return u;
}

/* The swap verdict of the reply's "swap" member (see SWAP SAFETY in
 * nbdkit-throttle-filter(1)) as one line into BUF: safe, or not with
 * every reason the server gave, and the throttle-swap mode.  Returns
 * false, BUF empty, when the reply has none (a reply for one EXPORT,
 * or a filter older than the verdict).
 */
static bool
swap_verdict (json_object *reply, char *buf, size_t len)
{
  json_object *sw = reply_member (reply, "swap", json_type_object);
  json_object *unsafe;
  const char *mode;
  size_t n;

  buf[0] = '\0';
  if (sw == NULL)
    return false;
  mode = reply_string (sw, "mode");
  if (reply_bool (sw, "safe", false)) {
    snprintf (buf, len, "safe for swap: every guard taken (throttle-swap=%s)",
              mode ? mode : "?");
    return true;
  }
  n = snprintf (buf, len, "NOT safe for swap (throttle-swap=%s)",
                mode ? mode : "?");
  unsafe = reply_member (sw, "unsafe", json_type_object);
  if (unsafe) {
    const char *sep = ": ";

    json_object_object_foreach (unsafe, reason, why) {
      const char *w = json_object_get_type (why) == json_type_string ?
        json_object_get_string (why) : "?";

      if (n < len)
        n += snprintf (buf + n, len - n, "%s%s (%s)", sep, reason, w);
      sep = "; ";
    }
  }
  return true;
}

/* --- the table ----------------------------------------------------------- */

enum { COL_EXPORT, COL_CAPACITY, COL_TARGET, COL_IN_FLIGHT, COL_PEAK,
       COL_WAITING, COL_ADMITTED, COL_WAITED, COL_CANCELLED, COL_CLAMPED,
       COL_MEAN_WAIT, COL_MAX_WAIT, COL_WB_PENDING, COL_WB_WRITES,
       COL_WB_ERROR, NCOLS };

static const char *const headers[NCOLS] = {
  "EXPORT", "CAPACITY", "TARGET", "IN-FLIGHT", "PEAK", "WAITING", "ADMITTED",
  "WAITED", "CANCELLED", "CLAMPED", "MEAN-WAIT", "MAX-WAIT", "WB-PENDING",
  "WB-WRITES", "WB-ERROR",
};

/* The export's latency target in ns, or 0 if it has none. */
static uint64_t
target_ns (json_object *e)
{
  return get (reply_member (e, "adapt", json_type_object),
              "latency_target_ns");
}

#define CELL 64

static void
fill_row (char row[NCOLS][CELL], json_object *e, bool bytes)
{
  json_object *wb = reply_member (e, "writeback", json_type_object);
  uint64_t waited = get (e, "waited");
  char name[MAX_EXPORT_DISPLAY];
  const char *wberr;

  ctl_format_export (reply_string (e, "name"), name, sizeof name);
  /* A long name is cut where it says so. */
  if (strlen (name) >= CELL)
    strcpy (name + CELL - 4, "...");
  snprintf (row[COL_EXPORT], CELL, "%s", name);
  ctl_format_units (get (e, "capacity"), bytes, row[COL_CAPACITY], CELL);
  if (target_ns (e) > 0)
    ctl_format_ns (target_ns (e), row[COL_TARGET], CELL);
  else
    strcpy (row[COL_TARGET], "-");
  ctl_format_units (get (e, "in_flight"), bytes, row[COL_IN_FLIGHT], CELL);
  ctl_format_units (get (e, "peak"), bytes, row[COL_PEAK], CELL);
  snprintf (row[COL_WAITING], CELL, "%" PRIu64, get (e, "waiters"));
  snprintf (row[COL_ADMITTED], CELL, "%" PRIu64, get (e, "admitted"));
  snprintf (row[COL_WAITED], CELL, "%" PRIu64, waited);
  snprintf (row[COL_CANCELLED], CELL, "%" PRIu64, get (e, "cancelled"));
  snprintf (row[COL_CLAMPED], CELL, "%" PRIu64, get (e, "clamped"));
  if (waited > 0)
    ctl_format_ns ((double) get (e, "wait_ns_total") / waited,
                   row[COL_MEAN_WAIT], CELL);
  else
    strcpy (row[COL_MEAN_WAIT], "-");
  if (get (e, "wait_ns_max") > 0)
    ctl_format_ns (get (e, "wait_ns_max"), row[COL_MAX_WAIT], CELL);
  else
    strcpy (row[COL_MAX_WAIT], "-");
  if (wb) {
    ctl_format_units (get (wb, "pending_bytes"), true, row[COL_WB_PENDING],
                      CELL);
    snprintf (row[COL_WB_WRITES], CELL, "%" PRIu64,
              get (wb, "pending_writes"));
    wberr = reply_string (wb, "error");
    snprintf (row[COL_WB_ERROR], CELL, "%s", wberr ? wberr : "-");
  }
  else {
    strcpy (row[COL_WB_PENDING], "-");
    strcpy (row[COL_WB_WRITES], "-");
    strcpy (row[COL_WB_ERROR], "-");
  }
}

/* The server-wide budget, which every export's charges are charged
 * to too, on a line of its own (a filter without one says nothing).
 */
static void
print_server (json_object *reply, bool bytes)
{
  json_object *sv = reply_member (reply, "server", json_type_object);
  char cap[CELL], infl[CELL], peak[CELL];

  if (sv == NULL)
    return;
  ctl_format_units (get (sv, "capacity"), bytes, cap, sizeof cap);
  ctl_format_units (get (sv, "in_flight"), bytes, infl, sizeof infl);
  ctl_format_units (get (sv, "peak"), bytes, peak, sizeof peak);
  printf ("server-wide: capacity %s, in flight %s, peak %s, waiting %"
          PRIu64 ", admitted %" PRIu64 ", waited %" PRIu64 "\n",
          cap, infl, peak, get (sv, "waiters"), get (sv, "admitted"),
          get (sv, "waited"));
}

static void
print_table (json_object *reply, json_object *exports)
{
  const char *m = reply_string (reply, "metric");
  bool bytes = metric_is_bytes (reply), shown[NCOLS];
  int width[NCOLS], c;
  size_t n = json_object_array_length (exports), i;
  char (*rows)[NCOLS][CELL];
  char verdict[VERDICT_LEN];

  /* The target's and writeback's columns only where they say
   * something.
   */
  for (c = 0; c < NCOLS; c++)
    shown[c] = c != COL_TARGET && c < COL_WB_PENDING;
  for (i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx (exports, i);

    if (target_ns (e) > 0)
      shown[COL_TARGET] = true;
    if (json_object_object_get_ex (e, "writeback", NULL))
      shown[COL_WB_PENDING] = shown[COL_WB_WRITES] = shown[COL_WB_ERROR] =
        true;
  }
  printf ("metric %s%s\n",
          m ? m : "(unknown)",
          bytes ? " (sizes in bytes, K = 1024)" : "");
  print_server (reply, bytes);
  ctl_print_rt (reply);
  if (swap_verdict (reply, verdict, sizeof verdict))
    printf ("%s\n", verdict);
  if (n == 0) {
    printf ("no exports\n");
    return;
  }
  rows = calloc (n, sizeof *rows);
  if (rows == NULL) {
    error ("out of memory");
    return;
  }
  for (c = 0; c < NCOLS; c++)
    width[c] = strlen (headers[c]);
  for (i = 0; i < n; i++) {
    fill_row (rows[i], json_object_array_get_idx (exports, i), bytes);
    for (c = 0; c < NCOLS; c++)
      if ((int) strlen (rows[i][c]) > width[c])
        width[c] = strlen (rows[i][c]);
  }
  for (c = 0; c < NCOLS; c++)
    if (shown[c])
      printf (c == 0 ? "%-*s" : "  %*s", width[c], headers[c]);
  printf ("\n");
  for (i = 0; i < n; i++) {
    for (c = 0; c < NCOLS; c++)
      if (shown[c])
        printf (c == 0 ? "%-*s" : "  %*s", width[c], rows[i][c]);
    printf ("\n");
  }
  free (rows);
}

int
ctl_stats (const char *path, const char *export, bool json, double timeout)
{
  json_object *reply, *exports;
  char err[1024], line[1100], q[1040];
  char *raw;

  if (export == NULL)
    reply = ctl_ask (path, "stats", timeout, &raw, err, sizeof err);
  else if (ctl_quote_export (export, q, sizeof q)) {
    snprintf (line, sizeof line, "stats %s", q);
    reply = ctl_ask (path, line, timeout, &raw, err, sizeof err);
  }
  else {
    error ("the export name holds a newline or is too long: it cannot "
           "be sent");
    return 2;
  }
  if (reply == NULL) {
    error (err);
    return 1;
  }
  exports = exports_of (reply, path, err, sizeof err);
  if (exports == NULL) {
    error (err);
    json_object_put (reply);
    free (raw);
    return 1;
  }
  if (json)
    printf ("%s\n", raw);
  else
    print_table (reply, exports);
  json_object_put (reply);
  free (raw);
  return fflush (stdout) == 0 ? 0 : 1;
}

/* --- watch ------------------------------------------------------------------ */

/* What the last sample said of one export. */
struct seen {
  char *name;
  uint64_t admitted, waited, wait_ns_total;
};

struct sample {
  struct seen *v;
  size_t n;
  struct seen server;           /* name unused */
  bool has_server;
  double t;
};

static void
free_sample (struct sample *s)
{
  size_t i;

  for (i = 0; i < s->n; i++)
    free (s->v[i].name);
  free (s->v);
  s->v = NULL;
  s->n = 0;
}

static const struct seen *
find_seen (const struct sample *s, const char *name)
{
  size_t i;

  for (i = 0; i < s->n; i++)
    if (strcmp (s->v[i].name, name) == 0)
      return &s->v[i];
  return NULL;
}

static double
monotonic (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
watch_header (int namew)
{
  printf ("%-8s %-*s %9s %9s %7s %9s %9s %9s %9s %10s\n",
          "TIME", namew, "EXPORT", "CAPACITY", "IN-FLIGHT", "WAITING",
          "ADMIT/S", "WAITED/S", "MEAN-WAIT", "MAX-WAIT", "WB-PENDING");
}

/* One line for a budget's object E (an export's, or the server's),
 * labelled LABEL, rates against P (NULL if absent from the last
 * sample, or its counters went back because nbdkit restarted: "-").
 * Records E's counters in S for the next sample.
 */
static void
watch_row (const char *clock, int namew, const char *label,
           json_object *e, const struct seen *p, struct seen *s,
           double dt, bool bytes)
{
  json_object *wb;
  char cap[CELL], infl[CELL], ar[CELL], wr[CELL], mw[CELL], xw[CELL],
    pend[CELL];
  uint64_t adm = get (e, "admitted"), wtd = get (e, "waited");
  uint64_t wns = get (e, "wait_ns_total");

  s->admitted = adm;
  s->waited = wtd;
  s->wait_ns_total = wns;
  if (p && adm >= p->admitted && wtd >= p->waited &&
      wns >= p->wait_ns_total && dt > 0) {
    snprintf (ar, sizeof ar, "%.0f", (adm - p->admitted) / dt);
    snprintf (wr, sizeof wr, "%.0f", (wtd - p->waited) / dt);
    if (wtd > p->waited)
      ctl_format_ns ((double) (wns - p->wait_ns_total) / (wtd - p->waited),
                     mw, sizeof mw);
    else
      strcpy (mw, "-");
  }
  else {
    strcpy (ar, "-");
    strcpy (wr, "-");
    strcpy (mw, "-");
  }
  if (get (e, "wait_ns_max") > 0)
    ctl_format_ns (get (e, "wait_ns_max"), xw, sizeof xw);
  else
    strcpy (xw, "-");
  wb = reply_member (e, "writeback", json_type_object);
  if (wb)
    ctl_format_units (get (wb, "pending_bytes"), true, pend, sizeof pend);
  else
    strcpy (pend, "-");
  printf ("%-8s %-*s %9s %9s %7" PRIu64 " %9s %9s %9s %9s %10s\n",
          clock, namew, label,
          ctl_format_units (get (e, "capacity"), bytes, cap, sizeof cap),
          ctl_format_units (get (e, "in_flight"), bytes, infl, sizeof infl),
          get (e, "waiters"), ar, wr, mw, xw, pend);
}

/* The server-wide budget's line (label SERVER_LABEL, which no export
 * name displays as: ctl_format_export quotes names that hold a
 * space), then one line per export of REPLY, rates against PREV.
 * Fills CUR.  Returns the number of lines printed.
 */
#define SERVER_LABEL "(server wide)"
static size_t
watch_lines (json_object *reply, json_object *exports,
             const struct sample *prev, struct sample *cur, int namew)
{
  bool bytes = metric_is_bytes (reply);
  json_object *sv = reply_member (reply, "server", json_type_object);
  char clock[16], name[MAX_EXPORT_DISPLAY];
  time_t now = time (NULL);
  double dt = cur->t - prev->t;
  size_t n = json_object_array_length (exports), lines = 0, i;

  strftime (clock, sizeof clock, "%H:%M:%S", localtime (&now));
  if (sv) {
    watch_row (clock, namew, SERVER_LABEL, sv,
               prev->has_server ? &prev->server : NULL, &cur->server, dt,
               bytes);
    cur->has_server = true;
    lines++;
  }
  cur->v = calloc (n ? n : 1, sizeof *cur->v);
  for (i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx (exports, i);
    const char *nm = reply_string (e, "name");
    struct seen scratch, *s = &scratch;

    if (cur->v) {
      s = &cur->v[cur->n];
      s->name = strdup (nm);
      if (s->name)
        cur->n++;
    }
    watch_row (clock, namew, ctl_format_export (nm, name, sizeof name), e,
               find_seen (prev, nm), s, dt, bytes);
    lines++;
  }
  if (n == 0) {
    printf ("%-8s %-*s (no exports)\n", clock, namew, "-");
    lines++;
  }
  return lines;
}

int
ctl_watch (const char *path, double interval, long count, bool json,
           double timeout)
{
  struct sample prev = { 0 }, cur = { 0 };
  char verdict[VERDICT_LEN], last_verdict[VERDICT_LEN] = "";
  bool tty = isatty (STDOUT_FILENO);
  int namew = sizeof SERVER_LABEL - 1, rc = 0;
  size_t lines = 0;
  double next = monotonic ();
  long i;

  for (i = 0; count == 0 || i < count; i++) {
    json_object *reply, *exports;
    char err[1024], name[MAX_EXPORT_DISPLAY];
    char *raw;
    double wait;

    if (i > 0) {
      next += interval;
      wait = next - monotonic ();
      if (wait > 0) {
        struct timespec ts = { .tv_sec = (time_t) wait };

        ts.tv_nsec = (long) ((wait - ts.tv_sec) * 1e9);
        while (nanosleep (&ts, &ts) == -1 && errno == EINTR)
          ;
      }
      else
        next = monotonic ();     /* fell behind: do not catch up */
    }
    /* A fresh connection each time: the server drops clients idle for
     * longer than its timeout, and a restarted nbdkit is found again.
     */
    reply = ctl_ask (path, "stats", timeout, &raw, err, sizeof err);
    if (reply == NULL) {
      error (err);
      rc = 1;
      break;
    }
    exports = exports_of (reply, path, err, sizeof err);
    if (exports == NULL) {
      error (err);
      json_object_put (reply);
      free (raw);
      rc = 1;
      break;
    }
    if (json)
      printf ("%s\n", raw);
    else {
      size_t j, n = json_object_array_length (exports);
      int w = namew;

      for (j = 0; j < n; j++) {
        json_object *e = json_object_array_get_idx (exports, j);
        int l = strlen (ctl_format_export (reply_string (e, "name"),
                                           name, sizeof name));
        if (l > w)
          w = l;
      }
      /* Again when the columns move, and every screenful on a tty. */
      if (i == 0 || w != namew || (tty && lines >= 20)) {
        namew = w;
        watch_header (namew);
        lines = 0;
      }
      /* The verdict at the first sample, then whenever it changes:
       * on every line it would hide the numbers.
       */
      if (swap_verdict (reply, verdict, sizeof verdict) &&
          strcmp (verdict, last_verdict) != 0) {
        char clock[16];
        time_t now = time (NULL);

        strftime (clock, sizeof clock, "%H:%M:%S", localtime (&now));
        printf ("%-8s %s\n", clock, verdict);
        strcpy (last_verdict, verdict);
        lines++;
      }
      cur.t = monotonic ();
      lines += watch_lines (reply, exports, &prev, &cur, namew);
      free_sample (&prev);
      prev = cur;
      memset (&cur, 0, sizeof cur);
    }
    json_object_put (reply);
    free (raw);
    if (fflush (stdout) != 0) {
      rc = 1;
      break;
    }
  }
  free_sample (&prev);
  return rc;
}
