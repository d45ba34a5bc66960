/* SPDX-License-Identifier: BSD-3-Clause */
/* What a run measured: a table for people, JSON for scripts.
 *
 * Both print the same numbers.  Every key of the JSON that holds a
 * measure names its unit (_bytes, _seconds, _bytes_per_second, _us),
 * and a measure that does not exist (the latency of reads in a run
 * without reads, a rate over no time) is null, never a 0 that reads
 * as measured.  What the throttle said (--control) comes after the
 * client's sections, as the "throttle" object.
 */

#include <config.h>

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "json-reply.h"
#include "load.h"
#include "throttle-json.h"

/* Jain's index: (sum x)^2 / (n * sum x^2).  1 when every connection
 * moved the same amount; 1/n when one moved everything; 0 when none
 * moved anything (undefined: null in the JSON).
 */
static double
load_fairness (const struct load_result *res)
{
  double sum = 0, sq = 0;
  unsigned i;

  for (i = 0; i < res->nr_conns; i++) {
    double x = res->conns[i].bytes;
    sum += x;
    sq += x * x;
  }
  if (sq == 0)
    return 0;
  return sum * sum / (res->nr_conns * sq);
}

static double
rate (uint64_t n, double secs)
{
  return secs > 0 ? n / secs : 0;
}

static double
us (uint64_t ns)
{
  return ns / 1000.0;
}

static unsigned
largest (const struct load_config *cfg)
{
  unsigned i, l = 0;

  for (i = 1; i < cfg->nr_sizes; i++)
    if (cfg->sizes[i].size > cfg->sizes[l].size)
      l = i;
  return l;
}

static void
size_str (uint32_t size, char *buf, size_t n)
{
  if (size % (1024 * 1024) == 0)
    snprintf (buf, n, "%" PRIu32 "M", size / (1024 * 1024));
  else if (size % 1024 == 0)
    snprintf (buf, n, "%" PRIu32 "k", size / 1024);
  else
    snprintf (buf, n, "%" PRIu32, size);
}

/* The name of a signal that ends a run (load-run.c takes SIGINT and
 * SIGTERM), as a user would send it.
 */
static const char *
signal_name (int sig)
{
  switch (sig) {
  case SIGINT: return "SIGINT";
  case SIGTERM: return "SIGTERM";
  default: return "a signal";
  }
}

static uint64_t
get (json_object *obj, const char *key)
{
  uint64_t u = 0;

  reply_uint (obj, key, &u);
  return u;
}

/* One block per export of the throttle's stats (load_control_stats
 * checked that each has its name and counters).
 */
static void
report_server_human (json_object *stats, FILE *fp)
{
  json_object *exports = reply_member (stats, "exports", json_type_array);
  size_t i, n = json_object_array_length (exports);
  uint64_t total;

  fprintf (fp, "\nthrottle (control socket):\n");
  for (i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx (exports, i);

    fprintf (fp, "  export ");
    throttle_json_string (fp, reply_string (e, "name"));
    fprintf (fp, ": capacity %" PRIu64 ", peak in flight %" PRIu64
             ", units charged %" PRIu64 "\n"
             "    admitted %" PRIu64 ", waited %" PRIu64 ", wait total "
             "%.3f s, max %.1f ms\n",
             get (e, "capacity"), get (e, "peak"), get (e, "charged"),
             get (e, "admitted"), get (e, "waited"),
             get (e, "wait_ns_total") / 1e9, get (e, "wait_ns_max") / 1e6);
  }
  /* The reply is the server's first page of exports. */
  if (reply_uint (stats, "exports_total", &total) && total > n)
    fprintf (fp, "  (%" PRIu64 " more exports: throttle-ctl SOCKET stats "
             "shows them all)\n", total - n);
}

static void
lat_row (FILE *fp, const char *name, const struct load_hist *h)
{
  if (h->count == 0)
    return;
  fprintf (fp, "  %-10s %10" PRIu64 " %10.1f %10.1f %10.1f %10.1f %10.1f\n",
           name, h->count, us (h->sum_ns / h->count),
           us (load_hist_quantile (h, 0.50)),
           us (load_hist_quantile (h, 0.99)),
           us (load_hist_quantile (h, 0.999)),
           us (h->max_ns));
}

void
load_report_human (const struct load_config *cfg,
                   const struct load_result *res, FILE *fp)
{
  unsigned i, l = largest (cfg);
  char s[32];

  /* First, so that numbers of a part of the run are not read as the
   * whole.
   */
  if (res->signal)
    fprintf (fp, "INTERRUPTED by %s: the run ended early, the numbers are "
             "of the part that ran\n", signal_name (res->signal));
  fprintf (fp, "elapsed %.3f s, %" PRIu64 " requests, %" PRIu64 " bytes "
           "(%" PRIu64 " read, %" PRIu64 " written)\n",
           res->elapsed, res->ops, res->bytes, res->read_bytes,
           res->write_bytes);
  fprintf (fp, "throughput %.2f MiB/s, %.0f IOPS\n\n",
           rate (res->bytes, res->elapsed) / 1048576,
           rate (res->ops, res->elapsed));

  fprintf (fp, "  latency us %10s %10s %10s %10s %10s %10s\n",
           "requests", "mean", "p50", "p99", "p99.9", "max");
  lat_row (fp, "all", res->all);
  lat_row (fp, "read", res->read);
  lat_row (fp, "write", res->write);
  if (cfg->nr_sizes > 1)
    for (i = 0; i < cfg->nr_sizes; i++) {
      size_str (cfg->sizes[i].size, s, sizeof s);
      lat_row (fp, s, res->by_size[i]);
    }
  size_str (cfg->sizes[l].size, s, sizeof s);
  if (res->by_size[l]->count > 0)
    fprintf (fp, "\nmax latency of the largest size (%s): %.1f us\n", s,
             us (res->by_size[l]->max_ns));
  else
    fprintf (fp, "\nmax latency of the largest size (%s): none ran\n", s);

  fprintf (fp, "\n  connection %10s %14s %12s\n", "requests", "bytes", "MiB/s");
  for (i = 0; i < res->nr_conns; i++)
    fprintf (fp, "  %-10u %10" PRIu64 " %14" PRIu64 " %12.2f\n", i,
             res->conns[i].ops, res->conns[i].bytes,
             rate (res->conns[i].bytes, res->elapsed) / 1048576);
  fprintf (fp, "fairness (Jain) %.4f over %u connections\n",
           load_fairness (res), res->nr_conns);
  if (cfg->verify)
    fprintf (fp, "verify: %" PRIu64 " bytes checked, %" PRIu64
             " bad blocks\n", res->verify_bytes, res->verify_mismatches);
  fprintf (fp, "seed %" PRIu64 " (--seed %" PRIu64 " repeats the run's "
           "choices)\n", cfg->seed, cfg->seed);
  if (res->server_stats)
    report_server_human (res->server_stats, fp);
}

/* "KEY": V with PREC decimals, or null when the measure does not
 * exist.
 */
static void
json_num (FILE *fp, const char *key, int prec, double v, bool exists)
{
  fprintf (fp, "\"%s\": ", key);
  if (exists)
    fprintf (fp, "%.*f", prec, v);
  else
    fprintf (fp, "null");
}

/* A latency histogram in microseconds: its statistics are null when
 * it counted nothing.
 */
static void
json_lat (FILE *fp, const struct load_hist *h)
{
  bool any = h->count > 0;

  fprintf (fp, "{\"count\": %" PRIu64 ", ", h->count);
  json_num (fp, "mean", 1, any ? us (h->sum_ns / h->count) : 0, any);
  fprintf (fp, ", ");
  json_num (fp, "p50", 1, us (load_hist_quantile (h, 0.50)), any);
  fprintf (fp, ", ");
  json_num (fp, "p99", 1, us (load_hist_quantile (h, 0.99)), any);
  fprintf (fp, ", ");
  json_num (fp, "p99.9", 1, us (load_hist_quantile (h, 0.999)), any);
  fprintf (fp, ", ");
  json_num (fp, "max", 1, us (h->max_ns), any);
  fprintf (fp, "}");
}

void
load_report_json (const struct load_config *cfg,
                  const struct load_result *res, FILE *fp)
{
  unsigned i, l = largest (cfg);
  /* A rate needs time to be over. */
  bool timed = res->started && res->elapsed > 0;
  double fair = load_fairness (res);

  /* An error says more than the signal that may have come too. */
  fprintf (fp, "{\n  \"status\": ");
  throttle_json_string (fp, res->error[0] ? "error"
                        : res->signal ? "interrupted" : "ok");
  if (res->error[0]) {
    fprintf (fp, ",\n  \"error\": ");
    throttle_json_string (fp, res->error);
  }
  fprintf (fp, ",\n  \"interrupted_by\": ");
  if (res->signal)
    throttle_json_string (fp, signal_name (res->signal));
  else
    fprintf (fp, "null");
  fprintf (fp, ",\n  \"config\": {\"connections\": %u, \"queue_depth\": %u, "
           "\"read_percent\": %u, \"pattern\": \"%s\", ",
           cfg->connections, cfg->queue_depth, cfg->read_pct,
           cfg->sequential ? "sequential" : "random");
  if (cfg->bytes)
    fprintf (fp, "\"bytes\": %" PRIu64 ", ", cfg->bytes);
  else
    fprintf (fp, "\"duration_seconds\": %g, ", cfg->duration);
  fprintf (fp, "\"offset_bytes\": %" PRIu64 ", \"span_bytes\": ", cfg->offset);
  if (cfg->span)
    fprintf (fp, "%" PRIu64 ", ", cfg->span);
  else
    fprintf (fp, "null, ");
  fprintf (fp, "\"verify\": %s, \"seed\": %" PRIu64 ", \"block_sizes\": [",
           cfg->verify ? "true" : "false", cfg->seed);
  for (i = 0; i < cfg->nr_sizes; i++)
    fprintf (fp, "%s{\"size_bytes\": %" PRIu32 ", \"weight\": %u}",
             i ? ", " : "", cfg->sizes[i].size, cfg->sizes[i].weight);
  fprintf (fp, "]},\n  ");
  json_num (fp, "export_size_bytes", 0, res->export_size,
            res->export_size > 0);
  fprintf (fp, ",\n  ");
  json_num (fp, "elapsed_seconds", 6, res->elapsed, res->started);
  fprintf (fp, ",\n  \"ops\": %" PRIu64 ", \"bytes\": %" PRIu64 ",\n",
           res->ops, res->bytes);
  fprintf (fp, "  \"read_ops\": %" PRIu64 ", \"read_bytes\": %" PRIu64 ", "
           "\"write_ops\": %" PRIu64 ", \"write_bytes\": %" PRIu64 ",\n  ",
           res->read_ops, res->read_bytes, res->write_ops, res->write_bytes);
  json_num (fp, "throughput_bytes_per_second", 1,
            rate (res->bytes, res->elapsed), timed);
  fprintf (fp, ",\n  ");
  json_num (fp, "iops", 1, rate (res->ops, res->elapsed), timed);
  fprintf (fp, ",\n  \"latency_us\": ");
  json_lat (fp, res->all);
  fprintf (fp, ",\n  \"read_latency_us\": ");
  json_lat (fp, res->read);
  fprintf (fp, ",\n  \"write_latency_us\": ");
  json_lat (fp, res->write);
  fprintf (fp, ",\n  \"by_size\": [");
  for (i = 0; i < cfg->nr_sizes; i++) {
    fprintf (fp, "%s\n    {\"size_bytes\": %" PRIu32 ", \"latency_us\": ",
             i ? "," : "", cfg->sizes[i].size);
    json_lat (fp, res->by_size[i]);
    fprintf (fp, "}");
  }
  fprintf (fp, "],\n");
  fprintf (fp, "  \"largest_size_bytes\": %" PRIu32 ", ", cfg->sizes[l].size);
  json_num (fp, "largest_size_max_latency_us", 1,
            us (res->by_size[l]->max_ns), res->by_size[l]->count > 0);
  fprintf (fp, ",\n  \"connections\": [");
  for (i = 0; i < res->nr_conns; i++) {
    fprintf (fp, "%s\n    {\"id\": %u, \"ops\": %" PRIu64 ", \"bytes\": %"
             PRIu64 ", ", i ? "," : "", i, res->conns[i].ops,
             res->conns[i].bytes);
    json_num (fp, "throughput_bytes_per_second", 1,
              rate (res->conns[i].bytes, res->elapsed), timed);
    fprintf (fp, "}");
  }
  fprintf (fp, "],\n  ");
  json_num (fp, "fairness", 6, fair, fair > 0);
  /* Without --verify nothing was checked: null, not 0 bytes. */
  fprintf (fp, ",\n  \"verify\": {\"enabled\": %s, ",
           cfg->verify ? "true" : "false");
  json_num (fp, "bytes", 0, res->verify_bytes, cfg->verify);
  fprintf (fp, ", ");
  json_num (fp, "mismatched_blocks", 0, res->verify_mismatches, cfg->verify);
  fprintf (fp, "}");
  /* The control socket's reply, as json-c writes it back. */
  if (res->server_stats)
    fprintf (fp, ",\n  \"throttle\": %s",
             json_object_to_json_string_ext (res->server_stats,
                                             JSON_C_TO_STRING_PLAIN |
                                             JSON_C_TO_STRING_NOSLASHESCAPE));
  fprintf (fp, "\n}\n");
}

int
load_result_init (struct load_result *res, const struct load_config *cfg)
{
  unsigned i;

  memset (res, 0, sizeof *res);
  res->nr_conns = cfg->connections;
  res->conns = calloc (cfg->connections, sizeof *res->conns);
  res->all = malloc (sizeof *res->all);
  res->read = malloc (sizeof *res->read);
  res->write = malloc (sizeof *res->write);
  if (!res->conns || !res->all || !res->read || !res->write)
    return -1;
  load_hist_init (res->all);
  load_hist_init (res->read);
  load_hist_init (res->write);
  for (i = 0; i < cfg->nr_sizes; i++) {
    res->by_size[i] = malloc (sizeof *res->by_size[i]);
    if (res->by_size[i] == NULL)
      return -1;
    load_hist_init (res->by_size[i]);
  }
  return 0;
}

void
load_result_free (struct load_result *res)
{
  unsigned i;

  free (res->all);
  free (res->read);
  free (res->write);
  for (i = 0; i < LOAD_MAX_SIZES; i++)
    free (res->by_size[i]);
  free (res->conns);
  json_object_put (res->server_stats);
  memset (res, 0, sizeof *res);
}
