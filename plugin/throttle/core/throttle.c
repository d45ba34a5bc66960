/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: bound the units in flight per export.
 *
 * Every data request is charged by the metric before it is passed
 * down and credited when the plugin returns, so at no instant does an
 * export have more than its capacity in flight at the plugin.  That
 * bound is what lets a preallocated reserve (a locked pool, a pre-grown
 * heap) always suffice for the writeout path of a locally attached
 * device.  See nbdkit-throttle-filter(1).
 *
 * The lifecycle callbacks below call the features' hooks
 * (throttle-feature.h) in the order of their table, and take them down
 * in reverse, as does a thread's first request (thread_enter); the
 * data callbacks are in throttle-serve.c.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nbdkit-filter.h>

#include "throttle-admit.h"
#include "throttle-compat.h"
#include "throttle-config.h"
#include "throttle-export.h"
#include "throttle-feature.h"
#include "throttle-params.h"
#include "throttle-parse.h"
#include "throttle-quit.h"
#include "throttle-serve.h"

/* -D throttle.verbose=1: log every admission that waited, and every
 * charge.
 */
NBDKIT_DLL_PUBLIC int throttle_debug_verbose = 0;

struct throttle_config throttle_config = { .split = true };

static const char *metric_spec = "bytes";
static uint64_t server_capacity;        /* 0 = throttle-capacity */
static struct throttle_budget server_budget;

/* The core's parameters; their help is throttle_core_config_help. */
static const struct throttle_param core_params[] = {
  { "throttle-capacity", THROTTLE_PARAM_SIZE, &throttle_config.capacity,
    .text = &throttle_config.capacity_text, .min = 1, .max = INT64_MAX,
    .why = "must be greater than 0: a zero capacity would admit nothing" },
  { "throttle-server-capacity", THROTTLE_PARAM_SIZE, &server_capacity,
    .text = &throttle_config.server_capacity_text, .min = 1, .max = INT64_MAX,
    .why = "must be greater than 0: a zero capacity would admit nothing" },
  { "throttle-metric", THROTTLE_PARAM_STRING, &metric_spec,
    .why = "expected bytes, pages, requests or the path of a shared object" },
  { "throttle-reads", THROTTLE_PARAM_BOOL, &throttle_config.reads_asked,
    .text = &throttle_config.reads_text },
  { "throttle-split", THROTTLE_PARAM_BOOL, .out = &throttle_config.split },
  { NULL }
};

/* The core's table, then each feature's, NULL-terminated. */
static const struct throttle_param *const *
param_tables (void)
{
  static const struct throttle_param *tables[THROTTLE_MAX_FEATURES + 2];
  const struct throttle_feature *const *f;
  size_t n = 0;

  if (tables[0] == NULL) {
    tables[n++] = core_params;
    for (f = throttle_features; *f; f++)
      if ((*f)->params)
        tables[n++] = (*f)->params;
  }
  return tables;
}

static int
throttle_config_key (nbdkit_next_config *next, nbdkit_backend *nxdata,
                     const char *key, const char *value)
{
  const struct throttle_feature *const *f;

  if (strncmp (key, "throttle-", 9) == 0)
    return throttle_params_config (param_tables (), key, value);
  for (f = throttle_features; *f; f++)
    if ((*f)->plugin_key)
      (*f)->plugin_key (key, value);
  return next (nxdata, key, value);
}

int
throttle_check_capacity (const char *key, const char *text, uint64_t value)
{
  char what[256], err[512];
  int r;

  snprintf (what, sizeof what, "%s=%s", key, text);
  r = throttle_capacity_judge (&throttle_config.metric, what, text, value,
                               err, sizeof err);
  if (r == -1) {
    nbdkit_error ("%s", err);
    return -1;
  }
  if (r == 1)
    throttle_warning ("%s", err);
  return 0;
}

static int
throttle_config_complete (nbdkit_next_config_complete *next,
                          nbdkit_backend *nxdata)
{
  const struct throttle_feature *const *f;
  char err[512];

  throttle_config.charge_reads = throttle_config.reads_asked;
  if (throttle_metric_load (metric_spec, &throttle_config.metric,
                            err, sizeof err) == -1) {
    nbdkit_error ("throttle-metric=%s: %s", metric_spec, err);
    return -1;
  }
  if (throttle_config.capacity == 0)
    throttle_config.capacity = throttle_config.metric.default_capacity;
  else if (throttle_check_capacity ("throttle-capacity",
                                    throttle_config.capacity_text,
                                    throttle_config.capacity) == -1)
    return -1;
  /* The server's bound: as one export's by default, following any
   * capacity set higher (throttle-config.h), so that a server with one export
   * behaves as if there were none.  Every export starts at
   * throttle-capacity, so the server's is never below it.
   */
  if (server_capacity == 0)
    server_capacity = throttle_config.capacity;
  else {
    if (throttle_check_capacity ("throttle-server-capacity",
                                 throttle_config.server_capacity_text,
                                 server_capacity) == -1)
      return -1;
    if (server_capacity < throttle_config.capacity) {
      if (throttle_config.capacity_text)
        nbdkit_error ("throttle-server-capacity=%s: below "
                      "throttle-capacity=%s: the server-wide bound cannot "
                      "be below one export's",
                      throttle_config.server_capacity_text,
                      throttle_config.capacity_text);
      else
        nbdkit_error ("throttle-server-capacity=%s: below %" PRIu64 ", the "
                      "default throttle-capacity under throttle-metric=%s: "
                      "the server-wide bound cannot be below one export's",
                      throttle_config.server_capacity_text,
                      throttle_config.capacity, throttle_config.metric.name);
      return -1;
    }
    throttle_config.server_capacity_set = true;
  }
  if (throttle_budget_init (&server_budget, server_capacity) != 0) {
    nbdkit_error ("throttle: cannot create the server-wide budget: %s",
                  throttle_errtext (errno));
    return -1;
  }
  throttle_config.server = &server_budget;
  for (f = throttle_features; *f; f++)
    if ((*f)->before_exports && (*f)->before_exports () == -1)
      return -1;
  /* Made now, so that the control socket shows it before any client. */
  if (throttle_export_init (throttle_config.capacity) == -1) {
    nbdkit_error ("throttle: cannot create the default export's budget: %s",
                  throttle_errtext (errno));
    return -1;
  }
  for (f = throttle_features; *f; f++)
    if ((*f)->config_complete && (*f)->config_complete () == -1)
      return -1;
  nbdkit_debug ("throttle: capacity %" PRIu64 " units per export, %" PRIu64
                " in the whole server, metric %s, reads %s",
                throttle_config.capacity, server_capacity,
                throttle_config.metric.name,
                throttle_config.charge_reads ? "charged" : "free");

  return next (nxdata);
}

/* Per-thread settings (throttle-feature.h).  initial-exec: in a
 * dlopen'ed object the default TLS model reaches a variable through
 * __tls_get_addr, which on a thread's first access mallocs the
 * thread's slot: an allocation on the writeout path, before the
 * guards are on.  One word fits glibc's static TLS surplus.  The
 * generation starts at 1: 0 is a thread that never entered.
 */
atomic_uint throttle_thread_generation = 1;
__thread unsigned throttle_thread_seen
  __attribute__ ((tls_model ("initial-exec")));

void
throttle_thread_enter_slow (unsigned gen)
{
  const struct throttle_feature *const *f;
  bool first = throttle_thread_seen == 0;

  for (f = throttle_features; *f; f++)
    if ((*f)->thread_enter)
      (*f)->thread_enter (first);
  throttle_thread_seen = gen;
}

/* A generation that wraps to 0 is skipped: 0 means never entered. */
void
throttle_threads_renew (void)
{
  if (atomic_fetch_add (&throttle_thread_generation, 1) == UINT_MAX)
    atomic_fetch_add (&throttle_thread_generation, 1);
}

/* The features' hooks run in the table's order; the first failure
 * stops nbdkit.
 */
static int
throttle_get_ready (int thread_model)
{
  const struct throttle_feature *const *f;

  for (f = throttle_features; *f; f++)
    if ((*f)->get_ready && (*f)->get_ready (thread_model) == -1)
      return -1;
  return 0;
}

/* The quit prober, after the guards, which every thread started later
 * inherits.
 */
static int
throttle_after_fork (nbdkit_backend *backend)
{
  const struct throttle_feature *const *f;

  for (f = throttle_features; *f; f++)
    if ((*f)->after_fork && (*f)->after_fork () == -1)
      return -1;
  if (throttle_quit_start () == -1)
    return -1;
  return 0;
}

static void
throttle_cleanup (nbdkit_backend *backend)
{
  size_t i = throttle_nr_features;

  while (i-- > 0)
    if (throttle_features[i]->cleanup)
      throttle_features[i]->cleanup ();
  throttle_quit_stop ();
}

static void
throttle_unload (void)
{
  size_t i = throttle_nr_features;

  while (i-- > 0)
    if (throttle_features[i]->unload)
      throttle_features[i]->unload ();
  throttle_abort_uninstall ();
  throttle_export_free_all ();
  if (throttle_config.server) {
    throttle_budget_shutdown (throttle_config.server);
    throttle_budget_destroy (throttle_config.server);
    throttle_config.server = NULL;
  }
  throttle_metric_unload (&throttle_config.metric);
}

static int
throttle_list_exports (nbdkit_next_list_exports *next, nbdkit_backend *nxdata,
                       int readonly, int is_tls, struct nbdkit_exports *exports)
{
  const struct throttle_feature *const *f;

  for (f = throttle_features; *f; f++)
    if ((*f)->list_exports)
      return (*f)->list_exports (next, nxdata, readonly, exports);
  return next (nxdata, readonly, exports);
}

/* Close what the first n features (in the table) opened for c,
 * backwards.
 */
static void
close_features (struct throttle_conn *c, size_t n)
{
  while (n-- > 0)
    if (throttle_features[n]->close)
      throttle_features[n]->close (c->state[n]);
}

/* The features' preopen before anything is made for the connection and
 * before the plugin's open; their open once the export's budget is
 * there.  A preopen that refuses the connection has undone its own
 * work, and the features before it are closed; after every preopen
 * succeeded, a refusal (an open undoes its own work) closes them all.
 */
static void *
throttle_open (nbdkit_next_open *next, nbdkit_context *nxdata,
               int readonly, const char *exportname, int is_tls)
{
  const struct throttle_feature *const *f, *const *g;
  struct throttle_conn *c;

  c = calloc (1, sizeof *c);
  if (c == NULL) {
    nbdkit_error ("calloc: %s", throttle_errtext (errno));
    return NULL;
  }
  for (f = throttle_features; *f; f++)
    if ((*f)->preopen &&
        (*f)->preopen (exportname, &c->state[f - throttle_features]) == -1)
      goto refused;
  if (next (nxdata, readonly, exportname) == -1)
    goto refused;
  c->max_request = throttle_max_request;
  /* The budget of the name, whatever other clients did before. */
  c->exp = throttle_export_open (exportname);
  if (c->exp == NULL)
    goto refused;
  c->policy = (struct throttle_admit_policy) {
    .page_units = throttle_config.metric.page_units,
    .split = throttle_config.split,
    .split_max = 0,             /* until throttle_prepare */
  };
  for (g = throttle_features; *g; g++)
    if ((*g)->open &&
        (*g)->open (c, nxdata, readonly,
                    &c->state[g - throttle_features]) == -1) {
      throttle_export_close (c->exp);
      goto refused;
    }
  throttle_pace_init (&c->pace);
  return c;

 refused:
  /* f: past the last feature whose preopen succeeded. */
  close_features (c, f - throttle_features);
  free (c);
  return NULL;
}

/* A clean disconnect waits for the export's pending writes. */
static int
throttle_finalize (nbdkit_next *next, void *handle)
{
  const struct throttle_feature *const *f;
  struct throttle_conn *c = handle;

  for (f = throttle_features; *f; f++)
    if ((*f)->finalize &&
        (*f)->finalize (c->state[f - throttle_features]) == -1)
      return -1;
  return 0;
}

static void
throttle_close (void *handle)
{
  struct throttle_conn *c = handle;

  throttle_pace_destroy (&c->pace);
  close_features (c, throttle_nr_features);
  throttle_export_close (c->exp);
  free (c);
}

/* Advertise throttle-max-request as the maximum block size, so that
 * clients which honour it (libnbd, qemu, nbdcopy) split larger I/O;
 * the kernel's nbd client ignores it, and the default is above what
 * it sends.  The plugin's own constraints are kept where tighter, and
 * with throttle-max-request=plugin they are all there is.
 */
static int
throttle_block_size (nbdkit_next *next, void *handle,
                     uint32_t *minimum, uint32_t *preferred,
                     uint32_t *maximum)
{
  uint32_t max = throttle_max_request;

  if (next->block_size (next, minimum, preferred, maximum) == -1)
    return -1;
  if (max == 0)
    return 0;
  if (*minimum == 0) {          /* the plugin sets no constraints */
    *minimum = 1;
    *preferred = 4096;
    *maximum = max;
    return 0;
  }
  if (*maximum > max)
    /* A plugin's minimum is a power of 2 of at most 64K (nbdkit 1.32
     * checks it) and max is at least 64K: this stays a nonzero
     * multiple of the minimum.
     */
    *maximum = max - max % *minimum;
  while (*preferred > *maximum)
    *preferred /= 2;
  return 0;
}

/* What the layers below accept decides which requests may be split
 * (throttle_admit_split_max), before the connection's first request.
 */
static int
throttle_prepare (nbdkit_next *next, void *handle, int readonly)
{
  struct throttle_conn *c = handle;
  uint32_t minimum, preferred, maximum;

  if (next->block_size (next, &minimum, &preferred, &maximum) == -1)
    return -1;
  c->policy.split_max = throttle_admit_split_max (minimum, maximum);
  return 0;
}

static struct nbdkit_filter filter = {
  .name              = "throttle",
  .longname          = "nbdkit throttle filter",
  .unload            = throttle_unload,
  .config            = throttle_config_key,
  .config_complete   = throttle_config_complete,
  .config_help       = throttle_config_help,
  .get_ready         = throttle_get_ready,
  .after_fork        = throttle_after_fork,
  .block_size        = throttle_block_size,
  .cleanup           = throttle_cleanup,
  .list_exports      = throttle_list_exports,
  .open              = throttle_open,
  .prepare           = throttle_prepare,
  .finalize          = throttle_finalize,
  .close             = throttle_close,
  .pread             = throttle_pread,
  .pwrite            = throttle_pwrite,
  .zero              = throttle_zero,
  .trim              = throttle_trim,
  .flush             = throttle_flush,
  .extents           = throttle_extents,
};

NBDKIT_REGISTER_FILTER (filter)
