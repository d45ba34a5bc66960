/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-load: a load generator for NBD servers on libnbd + libev.
 *
 * The pieces: load-options.c turns argv into a struct load_config,
 * load-run.c drives the connections, load-workload.c picks each
 * request, load-verify.c is --verify's pattern and map, load-hist.c
 * keeps latencies, load-report.c holds and prints what was measured.
 * load-workload.c and load-verify.c need neither libnbd nor libev
 * (tests/test-load-tool.c).
 */

#ifndef THROTTLE_LOAD_H
#define THROTTLE_LOAD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct json_object;

#define LOAD_MAX_SIZES 16
/* The NBD protocol lets servers refuse anything larger. */
#define LOAD_MAX_BLOCK (32 * 1024 * 1024)
#define LOAD_MAX_CONNECTIONS 1024
#define LOAD_MAX_QUEUE_DEPTH 4096

/* ---- latency histogram (load-hist.c) ------------------------------ */

/* Log-linear buckets: LOAD_HIST_SUB per power of two, so a percentile
 * read from a bucket is off by less than 1/LOAD_HIST_SUB, while memory
 * stays constant however long the run is.
 */
#define LOAD_HIST_SUB_BITS 6
#define LOAD_HIST_SUB (1 << LOAD_HIST_SUB_BITS)
#define LOAD_HIST_OCTAVES 44    /* 2^44 ns: about 4.9 hours */
#define LOAD_HIST_BUCKETS (LOAD_HIST_OCTAVES * LOAD_HIST_SUB)

struct load_hist {
  uint64_t count;
  uint64_t max_ns;
  uint64_t min_ns;
  double sum_ns;
  uint64_t bucket[LOAD_HIST_BUCKETS];
};

extern void load_hist_init (struct load_hist *h);
extern void load_hist_add (struct load_hist *h, uint64_t ns);
/* q in [0,1]; 0 if empty.  The exact maximum for q == 1. */
extern uint64_t load_hist_quantile (const struct load_hist *h, double q);
/* Writes "latency_us count cumulative_fraction" lines for plotting. */
extern int load_hist_write_cdf (const struct load_hist *h, FILE *fp);

/* ---- configuration (load-options.c) -------------------------------- */

struct load_size {
  uint32_t size;
  unsigned weight;
};

struct load_config {
  const char *uri;              /* one of uri, unix_path, host */
  const char *unix_path;
  const char *host;
  const char *port;
  const char *export_name;

  unsigned connections;
  unsigned queue_depth;
  struct load_size sizes[LOAD_MAX_SIZES];
  unsigned nr_sizes;
  unsigned weight_total;
  unsigned read_pct;
  bool sequential;
  double duration;              /* seconds; 0 when bytes is set */
  uint64_t bytes;               /* total across connections; 0 = duration */
  uint64_t offset;              /* the area used: [offset, offset+span) */
  uint64_t span;                /* 0 = up to the end of the export */
  uint64_t seed;
  double timeout;               /* seconds without any reply = failure */
  bool verify;
  bool json;
  bool progress;
  const char *histogram_file;
  const char *control_path;     /* throttle-control socket, or NULL */
};

extern void load_parse_args (int argc, char **argv, struct load_config *cfg);

/* ---- results (load-run.c fills, load-report.c prints) ------------- */

struct load_conn_result {
  uint64_t ops;
  uint64_t bytes;
};

struct load_result {
  bool started;                 /* the requests began: elapsed is measured */
  double elapsed;               /* seconds from the first request to the last reply */
  uint64_t ops, bytes;
  uint64_t read_ops, read_bytes;
  uint64_t write_ops, write_bytes;
  uint64_t export_size;         /* 0 until connected */
  struct load_hist *all;        /* latencies of every request */
  struct load_hist *read, *write;
  struct load_hist *by_size[LOAD_MAX_SIZES];  /* indexed like cfg->sizes */
  struct load_conn_result *conns;
  unsigned nr_conns;

  uint64_t verify_bytes;        /* read back and compared */
  uint64_t verify_mismatches;   /* blocks whose contents were wrong */

  /* The signal (SIGINT, SIGTERM) that ended the run early, or 0: the
   * report says so, and throttle-load exits with 128 + it.
   */
  int signal;

  /* What the throttle reported about the run: its control socket's
   * reply to "stats" (json-c), filled after load_run returns.
   */
  struct json_object *server_stats;

  /* Not empty when the run failed: what went wrong, for the user. */
  char error[512];
};

extern int load_run (const struct load_config *cfg, struct load_result *res);

/* Ask the throttle filter's control socket for "stats" (load-control.c).
 * Returns the reply, checked to be the filter's (an object with an
 * "exports" array, each export with its name and counters), for the
 * caller to drop with json_object_put; or NULL with a message in err.
 */
extern struct json_object *load_control_stats (const char *path,
                                               double timeout,
                                               char *err, size_t errlen);
/* The result's histograms, for load_run (load-report.c): -1 when
 * memory ran out; load_result_free frees what was made either way.
 */
extern int load_result_init (struct load_result *res,
                             const struct load_config *cfg);
extern void load_result_free (struct load_result *res);

extern void load_report_human (const struct load_config *cfg,
                               const struct load_result *res, FILE *fp);
extern void load_report_json (const struct load_config *cfg,
                              const struct load_result *res, FILE *fp);

#endif /* THROTTLE_LOAD_H */
