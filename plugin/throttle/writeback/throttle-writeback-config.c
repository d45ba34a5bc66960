/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: write-behind's parameters and sizes.
 *
 * throttle-mode, throttle-writeback-pool and throttle-writeback-threads
 * are read here; config_complete sizes each export's pool (refusing one
 * that RAM cannot hold) and get_ready the writer threads per export.
 * Both are fixed before the first connection, so the values below are
 * read without a lock.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <nbdkit-filter.h>

#include "throttle-config.h"
#include "throttle-compat.h"
#include "throttle-params.h"
#include "throttle-wbq.h"
#include "throttle-writeback-config.h"

/* throttle-writeback-threads: 0, the default, sizes the writers from
 * the thread model in get_ready.  Under sustained load the writers,
 * not the clients, set the pace: a full pool drains at (writers /
 * backend latency) writes per second, while writethrough puts as many
 * writes on the backend at once as nbdkit has request threads serving
 * the connection (16 unless -t, which a filter cannot ask for): fewer
 * writers drained a full pool at 0.59x of writethrough (bench case 4).
 * Under serialize_requests writethrough gets one write per client
 * connection on the backend, and each writer is a backend handle of
 * its own (for plugins with this model often a costly one: a session,
 * a remote connection): 4 cover the usual multi-connection clients
 * (nbd-client -C 4).
 */
#define WB_PARALLEL_WRITERS 16
#define WB_SERIAL_WRITERS 4
#define WB_MAX_THREADS 64
/* The writers' bounce buffers together hold at most this, so locked
 * memory does not grow with the writer count; a writer writes a
 * record larger than its bounce buffer in pieces, in order.  At most
 * WB_MAX_THREADS writers, each share is a whole number of buffers.
 */
#define WB_BOUNCE_BYTES (8 * 1024 * 1024)

static int writeback;             /* throttle-mode: 1 = writeback */
static uint64_t pool_param;      /* throttle-writeback-pool, 0 = default */
static unsigned nr_threads;      /* throttle-writeback-threads, 0 = default */
static unsigned nr_writers;      /* decided in get_ready */
static uint64_t pool_bytes;      /* decided in config_complete */

static const char *const modes[] = { "writethrough", "writeback", NULL };

const struct throttle_param throttle_writeback_param_table[] = {
  { "throttle-mode", THROTTLE_PARAM_WORD, &writeback, .words = modes,
    .why = "expected writethrough or writeback" },
  { "throttle-writeback-pool", THROTTLE_PARAM_SIZE, &pool_param,
    .min = 1, .max = INT64_MAX,
    .why = "expected a size greater than 0 (e.g. 16M)" },
  { "throttle-writeback-threads", THROTTLE_PARAM_NUMBER, &nr_threads,
    .min = 1, .max = WB_MAX_THREADS },
  { NULL }
};

/* The writers' count for sizing, before get_ready has decided it:
 * the parameter, else the largest default.
 */
static unsigned
wb_sizing_writers (void)
{
  if (nr_writers)
    return nr_writers;
  return nr_threads ? nr_threads : WB_PARALLEL_WRITERS;
}

/* Each writer's: the largest write written behind if that fits in its
 * share of WB_BOUNCE_BYTES, else the share in whole buffers.
 */
size_t
throttle_writeback_bounce_size (void)
{
  size_t share = WB_BOUNCE_BYTES / wb_sizing_writers () / THROTTLE_WBQ_ELEM *
    THROTTLE_WBQ_ELEM;
  size_t max_write = throttle_wbq_max_write (pool_bytes);

  return max_write < share ? max_write : share;
}

int
throttle_writeback_config_complete (void)
{
  char why_metric[256], fix_key[96], pool_kv[160], bound_kv[160];
  const char *why, *fix;
  uint64_t ram, need;

  if (!writeback) {
    if (pool_param || nr_threads)
      nbdkit_debug ("throttle: throttle-writeback-* ignored: "
                    "throttle-mode is writethrough");
    return 0;
  }

  /* Cover the whole budget where the metric says how many bytes it
   * holds, at the most it can be set to (the server-wide bound);
   * other metrics do not, so the pool is then a second bound of its
   * own (a write waits for buffers as it waits for units).
   * The parameter that decided the size is named in every error.
   */
  if (pool_param) {
    pool_bytes = pool_param;
    snprintf (pool_kv, sizeof pool_kv, "throttle-writeback-pool=%s",
              throttle_params_given ("throttle-writeback-pool"));
    why = pool_kv;
    fix = "lower throttle-writeback-pool";
  }
  else if (throttle_config.metric.page_units != 0) {
    /* Bytes per unit: 1 under bytes, 4096 under pages. */
    uint64_t unit = THROTTLE_PAGE_SIZE / throttle_config.metric.page_units;
    /* The most the export can ever have in flight: its capacity can
     * be raised live up to the server-wide bound, never above.
     */
    uint64_t bound = throttle_budget_get_capacity (throttle_config.server);
    bool export_bound = bound == throttle_config.capacity;
    const char *key = export_bound ?
      "throttle-capacity" : "throttle-server-capacity";
    const char *text = throttle_params_given (key);

    /* Named as written, as every error names a value. */
    if (text)
      snprintf (bound_kv, sizeof bound_kv, "%s=%s", key, text);
    else
      snprintf (bound_kv, sizeof bound_kv, "the default %s (%" PRIu64 ")",
                key, bound);
    if (__builtin_mul_overflow (bound, unit, &pool_bytes)) {
      nbdkit_error ("%s: %" PRIu64 " %s of %" PRIu64 " bytes "
                    "overflow a 64-bit writeback pool size: lower "
                    "%s, or set throttle-writeback-pool",
                    bound_kv, bound, throttle_config.metric.name, unit, key);
      return -1;
    }
    if (unit == 1)
      snprintf (why_metric, sizeof why_metric, "%s (the "
                "pool's default under throttle-metric=%s)",
                bound_kv, throttle_config.metric.name);
    else
      snprintf (why_metric, sizeof why_metric, "%s (the "
                "pool's default under throttle-metric=%s is capacity x %"
                PRIu64 ")", bound_kv, throttle_config.metric.name, unit);
    why = why_metric;
    snprintf (fix_key, sizeof fix_key, "lower %s, or set "
              "throttle-writeback-pool", key);
    fix = fix_key;
  }
  else {
    pool_bytes = 16 * 1024 * 1024;
    why = "the default throttle-writeback-pool";
    fix = "set a smaller throttle-writeback-pool";
  }
  /* Cannot overflow: a size nbdkit parsed is below 2^63, and a
   * product of pages a multiple of THROTTLE_WBQ_ELEM already.
   */
  pool_bytes = (pool_bytes + THROTTLE_WBQ_ELEM - 1) / THROTTLE_WBQ_ELEM *
    THROTTLE_WBQ_ELEM;

  /* Refused here, before nbdkit starts: each pool is allocated,
   * touched and locked at the first connection, where a pool RAM
   * cannot hold fails every connection or wakes the OOM killer.  Half
   * of RAM, as throttle-reserve is judged.
   */
  ram = (uint64_t) sysconf (_SC_PHYS_PAGES) * sysconf (_SC_PAGESIZE);
  if (pool_bytes > ram / 2 ||
      (need = throttle_wbq_memory (pool_bytes, wb_sizing_writers (),
                                   throttle_writeback_bounce_size ()))
      > ram / 2) {
    nbdkit_error ("%s: a writeback pool of %" PRIu64 " bytes per export "
                  "(plus its records and %u writers' buffers) needs more "
                  "than half of RAM, %" PRIu64 " of %" PRIu64 " bytes: %s",
                  why, pool_bytes, wb_sizing_writers (), ram / 2, ram, fix);
    return -1;
  }
  if (pool_bytes / THROTTLE_WBQ_ELEM > THROTTLE_WBQ_MAX_BUFS) { /* 16 TiB */
    nbdkit_error ("%s: a writeback pool of %" PRIu64 " bytes is more "
                  "than the %" PRIu32 " buffers of %d bytes a pool can "
                  "have: %s", why, pool_bytes, THROTTLE_WBQ_MAX_BUFS,
                  THROTTLE_WBQ_ELEM, fix);
    return -1;
  }
  nbdkit_debug ("throttle: writeback: pool %" PRIu64 " bytes per export "
                "in %d-byte buffers (%" PRIu64 " bytes in all with records "
                "and writers' buffers), writes above "
                "%zu bytes go through directly", pool_bytes,
                THROTTLE_WBQ_ELEM, need, throttle_wbq_max_write (pool_bytes));
  return 0;
}

bool
throttle_writeback_enabled (void)
{
  return writeback;
}

int
throttle_writeback_get_ready (int thread_model)
{
  const char *why;

  if (!writeback)
    return 0;
  /* The writers are extra plugin handles used from threads serving no
   * connection.  SERIALIZE_REQUESTS allows that (each writer owns its
   * handle); the two stricter models promise the plugin something a
   * background writer would break.
   */
  if (thread_model == NBDKIT_THREAD_MODEL_SERIALIZE_CONNECTIONS ||
      thread_model == NBDKIT_THREAD_MODEL_SERIALIZE_ALL_REQUESTS) {
    nbdkit_error ("throttle-mode=writeback: the backend's thread model is "
                  "%s, which forbids writing from background threads "
                  "alongside the connections; use throttle-mode="
                  "writethrough with this plugin or filter stack",
                  thread_model == NBDKIT_THREAD_MODEL_SERIALIZE_CONNECTIONS
                  ? "serialize_connections" : "serialize_all_requests");
    return -1;
  }
  if (nr_threads) {
    nr_writers = nr_threads;
    why = "throttle-writeback-threads";
  }
  else if (thread_model == NBDKIT_THREAD_MODEL_SERIALIZE_REQUESTS) {
    nr_writers = WB_SERIAL_WRITERS;
    why = "thread model serialize_requests: one request per handle";
  }
  else {
    nr_writers = WB_PARALLEL_WRITERS;
    why = "thread model parallel: as many as nbdkit's request threads "
      "per connection";
  }
  nbdkit_debug ("throttle: writeback: %u writer threads per export (%s), "
                "each with a bounce buffer of %zu bytes", nr_writers, why,
                throttle_writeback_bounce_size ());
  return throttle_abort_install ();
}

uint64_t
throttle_writeback_pool_bytes (void)
{
  return pool_bytes;
}

unsigned
throttle_writeback_writers (void)
{
  return nr_writers;
}
