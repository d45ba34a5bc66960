/* nbdkit-throttle filter: write-behind (throttle-mode=writeback).
 *
 * The ordering engine (the queue, its records and buffers, barriers,
 * flushes and their errors) is lib/throttle-wbq.c; this file gives it
 * nbdkit: the configuration, each export's writer threads and their
 * backend contexts, the request hooks and the stats.
 *
 * Lock order: HACKING.md, "Locks".  all_lock is held while the writers
 * of each export are joined at cleanup: a writer takes neither it nor
 * create_lock.
 *
 * Writers write through backend contexts of their own, opened shared:
 * a connection's context may be gone before its writes are, and one
 * context per writer thread keeps nbdkit's SERIALIZE_REQUESTS promise
 * (one request at a time per plugin handle) to the plugin.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nbdkit-filter.h>

#include "throttle-config.h"
#include "throttle-abort.h"
#include "throttle-control-proto.h"
#include "throttle-export.h"
#include "throttle-guards.h"
#include "throttle-parse.h"
#include "throttle-quit.h"
#include "throttle-wbq.h"
#include "throttle-wbsize.h"
#include "throttle-writeback.h"

/* The names the configuration uses (see lib/throttle-wbq.h). */
#define WB_ELEM THROTTLE_WBQ_ELEM
#define WB_MAX_WRITE THROTTLE_WBQ_MAX_WRITE
#define NO_SLOT (THROTTLE_WBQ_MAX_BUFS + 1)   /* buffers are below it */

/* throttle-writeback-threads: 0, the default, sizes the writers from
 * the thread model in get_ready (throttle_wbsize_writers).
 */
#define WB_DEFAULT_THREADS 0
#define WB_MAX_THREADS THROTTLE_WBSIZE_MAX

static bool writeback;
static uint64_t pool_param;      /* throttle-writeback-pool, 0 = default */
static unsigned nr_threads = WB_DEFAULT_THREADS;
static unsigned nr_writers;      /* decided in get_ready */
static uint64_t pool_bytes;      /* decided in config_complete */

struct wb_writer {
  struct throttle_wb *wb;
  size_t idx;                    /* its number in the queue */
  pthread_t thread;
  bool started;
  nbdkit_next *ctx;
  bool dirty;                    /* wrote since its last flush; own thread */
};

struct throttle_wb {
  struct throttle_wb *next_all;  /* all_lock */
  struct throttle_export *exp;
  struct throttle_wbq *q;
  /* Set before the writers start, read-only afterwards. */
  bool multi_conn;               /* a flush on any context covers all */
  bool writer_flush;             /* writers' contexts can flush */
  bool started_all;
  size_t nr_writers;
  struct wb_writer writers[];
};

static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct throttle_wb *all_wbs;

int
throttle_writeback_config (const char *key, const char *value)
{
  static const char *const modes[] = { "writethrough", "writeback", NULL };
  int64_t size;
  int i;

  if (strcmp (key, "throttle-mode") == 0) {
    if (throttle_parse_word (key, value, modes,
                             "expected writethrough or writeback", &i) == -1)
      return -1;
    writeback = i == 1;
    return 1;
  }
  if (strcmp (key, "throttle-writeback-pool") == 0) {
    if (throttle_parse_size (key, value, 1, INT64_MAX,
                             "expected a size greater than 0 (e.g. 16M)",
                             &size) == -1)
      return -1;
    pool_param = size;
    return 1;
  }
  if (strcmp (key, "throttle-writeback-threads") == 0)
    return throttle_parse_unsigned (key, value, 1, WB_MAX_THREADS,
                                    "", &nr_threads);
  return 0;
}


/* The writers' count for sizing, before get_ready has decided it:
 * the parameter, else the largest default.
 */
static unsigned
wb_sizing_writers (void)
{
  if (nr_writers)
    return nr_writers;
  return nr_threads ? nr_threads : THROTTLE_WBSIZE_NBDKIT_THREADS;
}

/* Each writer's bounce buffer (the writers' together stay within
 * THROTTLE_WBSIZE_BOUNCE_BYTES, whatever their number).
 */
static size_t
wb_bounce_size (void)
{
  return throttle_wbsize_bounce_size (wb_sizing_writers (),
                                      throttle_wbq_max_write (pool_bytes));
}

/* Bytes an export's writeback state takes, all of it touched and
 * (unless throttle-mlock=off) locked: the pool, with its free stack
 * and its records and links, and the writers' bounce buffers.  The
 * caller ensures pool is at most half of RAM, so nothing here
 * overflows.
 */
static uint64_t
wb_memory (uint64_t pool)
{
  return throttle_wbq_memory (pool, wb_sizing_writers (), wb_bounce_size ());
}

int
throttle_writeback_config_complete (void)
{
  char why_metric[128], fix_key[96];
  const char *why, *fix;
  uint64_t ram, need;

  if (!writeback) {
    if (pool_param || nr_threads != WB_DEFAULT_THREADS)
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
    why = "throttle-writeback-pool";
    fix = "lower throttle-writeback-pool";
  }
  else if (throttle_config.metric.page_units != 0) {
    /* Bytes per unit: 1 under bytes, 4096 under pages. */
    uint64_t unit = THROTTLE_PAGE_SIZE / throttle_config.metric.page_units;
    /* The most the export can ever have in flight: its capacity can
     * be raised live up to the server-wide bound, never above.
     */
    uint64_t bound = throttle_budget_get_capacity (throttle_config.server);
    const char *key = bound == throttle_config.capacity ?
      "throttle-capacity" : "throttle-server-capacity";

    if (__builtin_mul_overflow (bound, unit, &pool_bytes)) {
      nbdkit_error ("%s: %" PRIu64 " %s of %" PRIu64 " bytes "
                    "overflow a 64-bit writeback pool size: lower "
                    "%s, or set throttle-writeback-pool",
                    key, bound, throttle_config.metric.name, unit, key);
      return -1;
    }
    if (unit == 1)
      snprintf (why_metric, sizeof why_metric, "%s (the "
                "pool's default under throttle-metric=%s)",
                key, throttle_config.metric.name);
    else
      snprintf (why_metric, sizeof why_metric, "%s (the "
                "pool's default under throttle-metric=%s is capacity x %"
                PRIu64 ")", key, throttle_config.metric.name, unit);
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
   * product of pages a multiple of WB_ELEM already.
   */
  pool_bytes = (pool_bytes + WB_ELEM - 1) / WB_ELEM * WB_ELEM;

  /* Refused here, before nbdkit starts: each pool is allocated,
   * touched and locked at the first connection, where a pool RAM
   * cannot hold fails every connection or wakes the OOM killer.  Half
   * of RAM, as throttle-reserve is judged.
   */
  ram = (uint64_t) sysconf (_SC_PHYS_PAGES) * sysconf (_SC_PAGESIZE);
  if (pool_bytes > ram / 2 || (need = wb_memory (pool_bytes)) > ram / 2) {
    nbdkit_error ("%s: a writeback pool of %" PRIu64 " bytes per export "
                  "(plus its records and %u writers' buffers) needs more "
                  "than half of RAM, %" PRIu64 " of %" PRIu64 " bytes: %s",
                  why, pool_bytes, wb_sizing_writers (), ram / 2, ram, fix);
    return -1;
  }
  if (pool_bytes / WB_ELEM >= NO_SLOT) {     /* 16 TiB */
    nbdkit_error ("%s: a writeback pool of %" PRIu64 " bytes is more "
                  "than the %" PRIu32 " buffers of %d bytes a pool can "
                  "have: %s", why, pool_bytes, NO_SLOT - 1, WB_ELEM, fix);
    return -1;
  }
  nbdkit_debug ("throttle: writeback: pool %" PRIu64 " bytes per export "
                "in %d-byte buffers (%" PRIu64 " bytes in all with records "
                "and writers' buffers), writes above "
                "%d bytes go through directly",
                pool_bytes, WB_ELEM, need,
                (int) (pool_bytes < WB_MAX_WRITE ? pool_bytes : WB_MAX_WRITE));
  throttle_control_add_extra_stats (throttle_writeback_stats_json);
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
  nr_writers = throttle_wbsize_writers (
    thread_model == NBDKIT_THREAD_MODEL_SERIALIZE_REQUESTS
    ? THROTTLE_WBSIZE_SERIALIZE_REQUESTS : THROTTLE_WBSIZE_PARALLEL,
    nr_threads, &why);
  nbdkit_debug ("throttle: writeback: %u writer threads per export (%s), "
                "each with a bounce buffer of %zu bytes", nr_writers, why,
                wb_bounce_size ());
  return throttle_abort_install ();
}

/* The queue's hooks, called with its lock held: an acknowledged write
 * counts for an abort's drain until it is on the backend, and its units
 * are credited then.
 */
static void
wb_queued (void *opaque)
{
  throttle_abort_pending (1);
}

static void
wb_retired (void *opaque, uint64_t charged)
{
  struct throttle_export *exp = opaque;

  throttle_abort_pending (-1);
  throttle_export_credit (exp, charged);
}

/* A writer's flush: what it wrote may be lost if this fails, so every
 * flush waiting for it reports the failure.
 */
static void
writer_flush (struct wb_writer *w, const struct throttle_wbq_job *job)
{
  struct throttle_wb *wb = w->wb;
  int err = 0;

  /* A writer that wrote nothing since its last flush has nothing of
   * its own to make durable: without this, every client flush would
   * cost a backend flush per writer.
   */
  if (w->dirty && w->ctx->flush (w->ctx, 0, &err) == -1) {
    if (err == 0)
      err = EIO;
    nbdkit_error ("throttle: writeback: flushing a writer's backend "
                  "context of export \"%s\" failed: %s; the flushes "
                  "waiting report it", wb->exp->name, throttle_errtext (err));
  }
  w->dirty = false;
  throttle_wbq_flush_done (wb->q, w->idx, job, err);
}

static void
writer_write (struct wb_writer *w, const struct throttle_wbq_job *job)
{
  struct throttle_wb *wb = w->wb;
  const void *buf;
  uint32_t done, n;
  int err = 0, res = 0;

  for (done = 0; res == 0 && done < job->count; done += n) {
    buf = throttle_wbq_piece (wb->q, w->idx, job, done, &n);
    res = w->ctx->pwrite (w->ctx, buf, n, job->offset + done, 0, &err);
  }
  w->dirty = true;
  if (res == -1) {
    if (err == 0)
      err = EIO;
    nbdkit_error ("throttle: writeback: background write of %" PRIu32
                  " bytes at %" PRIu64 " to export \"%s\" failed: %s; "
                  "the next flush reports it", job->count, job->offset,
                  wb->exp->name, throttle_errtext (err));
  }
  else if (throttle_debug_verbose)
    nbdkit_debug ("throttle: writeback: wrote %" PRIu32 " bytes at %"
                  PRIu64 " seq %" PRIu64, job->count, job->offset, job->seq);
  throttle_wbq_write_done (wb->q, job, err);
}

static void *
writer_main (void *arg)
{
  struct wb_writer *w = arg;
  struct throttle_wbq_job job;

  throttle_guards_thread_enter ();
  throttle_abort_writer_thread ();

  for (;;) {
    switch (throttle_wbq_next (w->wb->q, w->idx, &job)) {
    case THROTTLE_WBQ_FLUSH: writer_flush (w, &job); break;
    case THROTTLE_WBQ_WRITE: writer_write (w, &job); break;
    case THROTTLE_WBQ_STOP: return NULL;
    }
  }
}

static void
close_writer_ctx (struct wb_writer *w)
{
  if (w->ctx) {
    w->ctx->finalize (w->ctx);
    nbdkit_next_context_close (w->ctx);
    w->ctx = NULL;
  }
}

/* Stop the writers once nothing is pending, and free everything. */
static void
wb_destroy (struct throttle_wb *wb)
{
  struct throttle_wbq_stats s;
  size_t i;

  if (wb->q)
    throttle_wbq_stop (wb->q);
  for (i = 0; i < wb->nr_writers; ++i) {
    struct wb_writer *w = &wb->writers[i];

    if (w->started)
      pthread_join (w->thread, NULL);
    close_writer_ctx (w);
  }
  if (wb->q) {
    throttle_wbq_get_stats (wb->q, &s);
    if (wb->started_all)
      nbdkit_debug ("throttle: writeback summary export=\"%s\" written=%"
                    PRIu64 " written_bytes=%" PRIu64 " direct=%" PRIu64
                    " failed=%" PRIu64 " peak_pending_bytes=%" PRIu64,
                    wb->exp->name, s.written, s.written_bytes, s.direct,
                    s.failed, s.peak_pending_bytes);
    if (s.error_unreported)
      nbdkit_error ("throttle: writeback: export \"%s\": %" PRIu64
                    " background write(s) failed and no flush reported it; "
                    "last: %" PRIu32 " bytes at %" PRIu64 ": %s",
                    wb->exp->name, s.failed, s.last.count, s.last.offset,
                    throttle_errtext (s.last.errnum));
    throttle_wbq_destroy (wb->q);
  }
  free (wb);
}

/* Returns 1 if the backend does not take writes at all. */
static int
open_writer_ctx (struct throttle_wb *wb, struct wb_writer *w,
                 nbdkit_backend *backend, const char *exportname)
{
  w->ctx = nbdkit_next_context_open (backend, 0, exportname, 1);
  if (w->ctx == NULL) {
    nbdkit_error ("throttle: writeback: cannot open a backend context "
                  "for export \"%s\"", exportname);
    return -1;
  }
  /* nbdkit checks each request against what these returned, so ask
   * before the first write.
   */
  if (w->ctx->prepare (w->ctx) == -1 ||
      w->ctx->get_size (w->ctx) == -1)
    return -1;
  switch (w->ctx->can_write (w->ctx)) {
  case 1: break;
  case 0: return 1;
  default: return -1;
  }
  if (w == &wb->writers[0]) {
    wb->writer_flush = w->ctx->can_flush (w->ctx) == 1;
    wb->multi_conn = w->ctx->can_multi_conn (w->ctx) == 1;
  }
  else if (wb->writer_flush)
    w->ctx->can_flush (w->ctx);
  return 0;
}

/* The queue of a new export, or NULL after nbdkit_error. */
static struct throttle_wbq *
wb_queue_create (struct throttle_export *exp, bool lock)
{
  const struct throttle_wbq_hooks hooks = {
    .queued = wb_queued, .retired = wb_retired, .opaque = exp,
  };
  enum throttle_wbq_failure failed;
  struct throttle_wbq *q;
  size_t nr = pool_bytes / WB_ELEM;

  q = throttle_wbq_create (nr, nr_writers, wb_bounce_size (), lock, &hooks,
                           &failed);
  if (q)
    return q;
  switch (failed) {
  case THROTTLE_WBQ_FAIL_ALLOC:
    nbdkit_error ("calloc: %s", throttle_errtext (errno));
    break;
  case THROTTLE_WBQ_FAIL_POOL:
  case THROTTLE_WBQ_FAIL_BOUNCE:
    nbdkit_error ("throttle: writeback: cannot create the %s pool of "
                  "export \"%s\" (%" PRIu64 " bytes%s): %s%s",
                  failed == THROTTLE_WBQ_FAIL_BOUNCE ? "writers'" : "write",
                  exp->name,
                  failed == THROTTLE_WBQ_FAIL_BOUNCE
                  ? (uint64_t) nr_writers * wb_bounce_size ()
                  : pool_bytes,
                  lock ? ", locked" : "", throttle_errtext (errno),
                  lock ? " (raise ulimit -l, lower throttle-writeback-pool, "
                  "or throttle-mlock=off)" : "");
    break;
  case THROTTLE_WBQ_FAIL_MMAP:
    nbdkit_error ("throttle: writeback: mmap: %s", throttle_errtext (errno));
    break;
  case THROTTLE_WBQ_FAIL_MLOCK:
    nbdkit_error ("throttle: writeback: mlock of %zu bytes: %s",
                  throttle_wbq_meta_bytes (nr), throttle_errtext (errno));
    break;
  }
  return NULL;
}

/* NULL with *read_only set if the backend takes no writes: nothing
 * to write behind then, and nbdkit refuses the client's writes itself.
 */
static struct throttle_wb *
wb_create (struct throttle_export *exp, nbdkit_backend *backend,
           const char *exportname, bool *read_only)
{
  struct throttle_wb *wb;
  size_t i;
  int err;

  wb = calloc (1, sizeof *wb + nr_writers * sizeof wb->writers[0]);
  if (wb == NULL) {
    nbdkit_error ("calloc: %s", throttle_errtext (errno));
    return NULL;
  }
  wb->exp = exp;
  wb->nr_writers = nr_writers;
  wb->q = wb_queue_create (exp, throttle_guards_lock_pools ());
  if (wb->q == NULL)
    goto fail;

  for (i = 0; i < nr_writers; ++i) {
    struct wb_writer *w = &wb->writers[i];

    w->wb = wb;
    w->idx = i;
    switch (open_writer_ctx (wb, w, backend, exportname)) {
    case 0: break;
    case 1: *read_only = true; /* fallthrough */
    default: goto fail;
    }
  }
  for (i = 0; i < nr_writers; ++i) {
    struct wb_writer *w = &wb->writers[i];

    err = pthread_create (&w->thread, NULL, writer_main, w);
    if (err != 0) {
      nbdkit_error ("throttle: writeback: pthread_create: %s",
                    throttle_errtext (err));
      goto fail;
    }
    w->started = true;
  }
  wb->started_all = true;
  nbdkit_debug ("throttle: writeback: export \"%s\": %" PRIu64 " buffers, "
                "%zu writers with %zu-byte bounce buffers, backend "
                "multi-conn %d", exp->name, pool_bytes / WB_ELEM,
                wb->nr_writers, wb_bounce_size (), wb->multi_conn);
  return wb;

 fail:
  wb_destroy (wb);
  return NULL;
}

int
throttle_writeback_open (struct throttle_export *exp, nbdkit_context *context,
                         int readonly, const char *exportname,
                         struct throttle_wb_conn *c)
{
  static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;
  struct throttle_wb *wb;
  bool read_only = false;

  c->exp = NULL;
  c->seen_errors = 0;
  if (!writeback)
    return 0;
  /* The writers' contexts are shared (they outlive connections), and
   * in a shared context nbdkit does not tell the plugin the client's
   * export name: a plugin serving several exports would write to its
   * default one, or fail.  Named exports stay writethrough.
   */
  if (exportname[0] != '\0') {
    static bool said;

    if (!__atomic_exchange_n (&said, true, __ATOMIC_RELAXED))
      nbdkit_debug ("throttle: writeback: export \"%s\" (and every other "
                    "named export) is served writethrough: only the default "
                    "export \"\" is written behind", exportname);
    return 0;
  }
  c->exp = exp;

  /* A read-only connection creates nothing, but still sees (through
   * c->exp) the pending writes of the export's other connections.
   */
  pthread_mutex_lock (&create_lock);
  wb = exp->wb;
  if (wb == NULL && !readonly) {
    wb = wb_create (exp, nbdkit_context_get_backend (context), exportname,
                    &read_only);
    if (wb == NULL) {
      pthread_mutex_unlock (&create_lock);
      if (read_only) {
        nbdkit_debug ("throttle: writeback: export \"%s\" takes no writes",
                      exportname);
        return 0;
      }
      return -1;
    }
    pthread_mutex_lock (&all_lock);
    wb->next_all = all_wbs;
    all_wbs = wb;
    pthread_mutex_unlock (&all_lock);
    __atomic_store_n (&exp->wb, wb, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock (&create_lock);
  if (wb == NULL)
    return 0;

  c->seen_errors = throttle_wbq_seen_at_open (wb->q);
  return 0;
}

/* The export's writeback state, once a writable connection made it. */
static struct throttle_wb *
conn_wb (const struct throttle_wb_conn *c)
{
  return c->exp ? __atomic_load_n (&c->exp->wb, __ATOMIC_ACQUIRE) : NULL;
}

/* A request that goes to the backend directly takes its place in the
 * order: after older overlapping pending writes, before newer ones.
 * Returns the queue to give ordered_end after the backend call, or
 * NULL if nothing is written behind (the call then needs no order).
 */
static struct throttle_wbq *
ordered_begin (const struct throttle_wb_conn *c, struct throttle_wbq_barrier *b,
               uint32_t count, uint64_t offset)
{
  struct throttle_wb *wb = conn_wb (c);

  if (wb == NULL)
    return NULL;
  throttle_wbq_barrier_begin (wb->q, b, offset, count);
  return wb->q;
}

static void
ordered_end (struct throttle_wbq *q, struct throttle_wbq_barrier *b)
{
  if (q)
    throttle_wbq_barrier_end (q, b);
}

static int
pwrite_direct (struct throttle_wb_conn *c, nbdkit_next *next,
               const void *buf, uint32_t count, uint64_t offset,
               uint32_t flags, int *err)
{
  struct throttle_wbq_barrier b;
  struct throttle_wbq *q;
  int r;

  q = ordered_begin (c, &b, count, offset);
  if (q)
    throttle_wbq_count_direct (q);
  r = next->pwrite (next, buf, count, offset, flags, err);
  ordered_end (q, &b);
  return r;
}

int
throttle_writeback_pwrite (struct throttle_wb_conn *c,
                           struct throttle_export *exp, nbdkit_next *next,
                           const void *buf, uint32_t count, uint64_t offset,
                           uint32_t flags, uint64_t charged, int *err)
{
  struct throttle_wb *wb = conn_wb (c);
  int res;

  /* A FUA write must be on the backend before its reply anyway, and
   * one larger than THROTTLE_WBQ_MAX_WRITE or the pool is not queued
   * (throttle_wbq_fits).
   */
  if (wb == NULL || (flags & NBDKIT_FLAG_FUA) ||
      !throttle_wbq_fits (wb->q, count)) {
    res = pwrite_direct (c, next, buf, count, offset, flags, err);
    throttle_export_credit (exp, charged);
    return res;
  }

  throttle_abort_hold ();
  if (throttle_wbq_queue (wb->q, buf, count, offset, charged,
                          throttle_quit_cancelled, NULL) == -1) {
    throttle_export_credit (exp, charged);
    nbdkit_error ("throttle: writeback: write of %" PRIu32 " bytes at %"
                  PRIu64 " abandoned while waiting for pool buffers: "
                  "server shutting down", count, offset);
    *err = ESHUTDOWN;
    return -1;
  }
  return 0;
}

int
throttle_writeback_pread (struct throttle_wb_conn *c, nbdkit_next *next,
                          void *buf, uint32_t count, uint64_t offset,
                          uint32_t flags, int *err)
{
  struct throttle_wb *wb = conn_wb (c);
  struct throttle_wbq_barrier b;
  int res;

  if (wb == NULL || !throttle_wbq_read_begin (wb->q, &b, offset, count))
    return next->pread (next, buf, count, offset, flags, err);
  res = next->pread (next, buf, count, offset, flags, err);
  throttle_wbq_read_end (wb->q, &b, buf, res == 0);
  return res;
}

int
throttle_writeback_zero (struct throttle_wb_conn *c, nbdkit_next *next,
                         uint32_t count, uint64_t offset, uint32_t flags,
                         int *err)
{
  struct throttle_wbq_barrier b;
  struct throttle_wbq *q = ordered_begin (c, &b, count, offset);
  int r = next->zero (next, count, offset, flags, err);

  ordered_end (q, &b);
  return r;
}

int
throttle_writeback_trim (struct throttle_wb_conn *c, nbdkit_next *next,
                         uint32_t count, uint64_t offset, uint32_t flags,
                         int *err)
{
  struct throttle_wbq_barrier b;
  struct throttle_wbq *q = ordered_begin (c, &b, count, offset);
  int r = next->trim (next, count, offset, flags, err);

  ordered_end (q, &b);
  return r;
}

/* Asks the backend for extents of [offset, offset+count) only: the
 * backend may describe more than was asked, and what lies beyond may
 * still have writes pending.
 */
static int
extents_clipped (nbdkit_next *next, uint32_t count, uint64_t offset,
                 uint32_t flags, struct nbdkit_extents *extents, int *err)
{
  struct nbdkit_extents *mine = nbdkit_extents_new (offset, offset + count);
  size_t i, n;
  int r = -1;

  if (mine == NULL) {
    *err = errno ? errno : ENOMEM;
    return -1;
  }
  if (next->extents (next, count, offset, flags, mine, err) == -1)
    goto out;
  n = nbdkit_extents_count (mine);
  for (i = 0; i < n; ++i) {
    struct nbdkit_extent e = nbdkit_get_extent (mine, i);

    if (nbdkit_add_extent (extents, e.offset, e.length, e.type) == -1) {
      *err = errno ? errno : EIO;
      goto out;
    }
  }
  r = 0;
 out:
  nbdkit_extents_free (mine);
  return r;
}

/* The backend's extents do not know about pending writes: a range being
 * written may still show as a hole, and a client that skips holes
 * would lose the data.  (Extents are not on a swap device's writeout
 * path: the allocation above is harmless.)  In writeback mode they are
 * clipped whether or not the export has writes pending yet;
 * writethrough passes the backend's answer on as it is.
 */
int
throttle_writeback_extents (struct throttle_wb_conn *c, nbdkit_next *next,
                            uint32_t count, uint64_t offset, uint32_t flags,
                            struct nbdkit_extents *extents, int *err)
{
  struct throttle_wbq_barrier b;
  struct throttle_wbq *q;
  int r;

  if (!writeback)
    return next->extents (next, count, offset, flags, extents, err);
  q = ordered_begin (c, &b, count, offset);
  r = extents_clipped (next, count, offset, flags, extents, err);
  ordered_end (q, &b);
  return r;
}

int
throttle_writeback_flush (struct throttle_wb_conn *c, nbdkit_next *next,
                          uint32_t flags, int *err)
{
  struct throttle_wb *wb = conn_wb (c);
  struct throttle_wbq_flush f;
  struct throttle_wbq_error last;
  uint64_t failures;
  char what[128];
  int res;

  if (wb == NULL)
    return next->flush (next, flags, err);

  /* Without multi-conn the plugin promises nothing about writes made
   * through other handles, so each writer flushes its own.
   */
  throttle_wbq_flush_begin (wb->q, &f);
  throttle_wbq_flush_wait (wb->q, &f, !wb->multi_conn && wb->writer_flush);

  res = next->flush (next, flags, err);

  /* A flush that fails anyway reports the failures too (with its own
   * error), so that a writer's failed flush, always awaited by some
   * flush, is always reported.
   */
  failures = throttle_wbq_flush_end (wb->q, &f, &c->seen_errors, &last);
  if (failures > 0) {
    if (res == 0) {
      *err = last.errnum;
      res = -1;
    }
    if (last.count == 0)
      snprintf (what, sizeof what, "a writer's flush: %s",
                throttle_errtext (last.errnum));
    else
      snprintf (what, sizeof what, "write of %" PRIu32 " bytes at %" PRIu64
                ": %s", last.count, last.offset,
                throttle_errtext (last.errnum));
    nbdkit_error ("throttle: writeback: flush of export \"%s\": %" PRIu64
                  " failure(s) of background writes or writers' flushes "
                  "since this flush arrived or this connection's last "
                  "report; last: %s", wb->exp->name, failures, what);
  }
  return res;
}

int
throttle_writeback_finalize (struct throttle_wb_conn *c)
{
  struct throttle_wb *wb = conn_wb (c);
  struct throttle_wbq_stats s;

  if (wb == NULL)
    return 0;
  if (throttle_debug_verbose) {
    throttle_wbq_get_stats (wb->q, &s);
    if (s.pending)
      nbdkit_debug ("throttle: writeback: disconnect waits for %" PRIu64
                    " pending writes", s.pending);
  }
  throttle_wbq_drain (wb->q);
  return 0;
}

void
throttle_writeback_cleanup (void)
{
  struct throttle_wb *wb;
  struct throttle_wbq_stats s;

  pthread_mutex_lock (&all_lock);
  while ((wb = all_wbs) != NULL) {
    all_wbs = wb->next_all;
    throttle_wbq_get_stats (wb->q, &s);
    if (s.pending)
      nbdkit_debug ("throttle: writeback: export \"%s\": writing %" PRIu64
                    " pending writes before exit", wb->exp->name, s.pending);
    wb->exp->wb = NULL;
    wb_destroy (wb);            /* waits for the pending writes */
  }
  pthread_mutex_unlock (&all_lock);
}

void
throttle_writeback_stats_json (struct throttle_export *exp, char *buf,
                               size_t len)
{
  struct throttle_wb *wb =
    exp ? __atomic_load_n (&exp->wb, __ATOMIC_ACQUIRE) : NULL;
  struct throttle_wbq_stats s;
  const char *error = NULL;
  int n;

  if (len > 0)
    buf[0] = '\0';
  if (wb == NULL)
    return;
  throttle_wbq_get_stats (wb->q, &s);
  if (s.error_unreported)
    error = strerrorname_np (s.last.errnum) ? : "EIO";
  n = snprintf (buf, len,
                "\"writeback\":{\"pending_writes\":%" PRIu64
                ",\"pending_bytes\":%" PRIu64 ",\"peak_pending_bytes\":%"
                PRIu64 ",\"pool_used\":%zu,\"pool_size\":%zu"
                ",\"written\":%" PRIu64 ",\"direct\":%" PRIu64
                ",\"failed\":%" PRIu64 ",\"error\":%s%s%s}",
                s.pending, s.pending_bytes, s.peak_pending_bytes,
                s.pool_used, s.pool_size, s.written, s.direct, s.failed,
                error ? "\"" : "", error ? error : "null", error ? "\"" : "");
  if (n < 0 || (size_t) n >= len)
    buf[0] = '\0';            /* dropped whole, never half a member */
}
