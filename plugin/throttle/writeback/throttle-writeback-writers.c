/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the write-behind state of the default export
 * (the one name writeback serves, throttle_writeback_preopen), made by
 * its first writable open and freed at cleanup once nothing is
 * pending: its queue, its locked, prefaulted pool, its writer threads,
 * and their statistics.
 *
 * The writers need the guards: each calls throttle_thread_enter at its
 * start, and the pool is locked unless throttle_guards_lock_pools ()
 * says otherwise.  Each writes through a backend context of its own,
 * opened shared: a connection's context may be gone before its writes
 * are, and one context per writer thread keeps nbdkit's
 * SERIALIZE_REQUESTS promise (one request at a time per plugin handle)
 * to the plugin.
 *
 * Lock order: HACKING.md, "Locks".  create_lock is held while the
 * writers are made, and joined at cleanup: a writer never takes it.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <nbdkit-filter.h>

#include "throttle-config.h"
#include "throttle-compat.h"
#include "throttle-export.h"
#include "throttle-feature.h"
#include "throttle-guards.h"
#include "throttle-lock.h"
#include "throttle-parse.h"
#include "throttle-prom.h"
#include "throttle-wbq.h"
#include "throttle-writeback-config.h"
#include "throttle-writeback-writers.h"

/* Lock rule: create_lock is held from looking at throttle_wb_made to
 * publishing it, so that the export gets one, and while it is freed.
 */
static pthread_mutex_t create_lock = THROTTLE_LOCK_INITIALIZER;
struct throttle_wb *throttle_wb_made;

/* The queue's retired hook, called with its lock held: an acknowledged
 * write counts for an abort's drain (from before it is queued, by
 * wb_pwrite) until it is on the backend, and its units are credited
 * then.
 */
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
writer_flush (struct throttle_wb_writer *w, const struct throttle_wbq_job *job)
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
writer_write (struct throttle_wb_writer *w, const struct throttle_wbq_job *job)
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
  struct throttle_wb_writer *w = arg;
  struct throttle_wbq_job job;

  throttle_thread_enter ();
  throttle_abort_writer_thread ();

  for (;;) {
    switch (throttle_wbq_next (w->wb->q, w->idx, &job)) {
    case THROTTLE_WBQ_FLUSH: writer_flush (w, &job); break;
    case THROTTLE_WBQ_WRITE: writer_write (w, &job); break;
    case THROTTLE_WBQ_STOP: return NULL;
    }
  }
}

/* Stop the writers once nothing is pending, and free everything. */
static void
wb_destroy (struct throttle_wb *wb)
{
  struct throttle_wbq_stats s;
  size_t i;

  throttle_wbq_stop (wb->q);
  for (i = 0; i < wb->nr_writers; ++i) {
    struct throttle_wb_writer *w = &wb->writers[i];

    if (w->started)
      pthread_join (w->thread, NULL);
    if (w->ctx) {
      w->ctx->finalize (w->ctx);
      nbdkit_next_context_close (w->ctx);
    }
  }
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
  free (wb);
}

/* Returns 1 if the backend does not take writes at all. */
static int
open_writer_ctx (struct throttle_wb *wb, struct throttle_wb_writer *w,
                 nbdkit_backend *backend)
{
  w->ctx = nbdkit_next_context_open (backend, 0, wb->exp->name, 1);
  if (w->ctx == NULL) {
    nbdkit_error ("throttle: writeback: cannot open a backend context "
                  "for export \"%s\"", wb->exp->name);
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

/* NULL with *read_only set if the backend takes no writes: nothing
 * to write behind then, and nbdkit refuses the client's writes itself.
 */
static struct throttle_wb *
wb_create (struct throttle_export *exp, nbdkit_backend *backend,
           bool *read_only)
{
  uint64_t pool_bytes = throttle_writeback_pool_bytes ();
  unsigned nr_writers = throttle_writeback_writers ();
  size_t bounce = throttle_writeback_bounce_size ();
  bool lock = throttle_guards_lock_pools ();
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
  wb->q = throttle_wbq_create (pool_bytes / THROTTLE_WBQ_ELEM, nr_writers,
                               bounce, lock, wb_retired, exp);
  if (wb->q == NULL) {
    nbdkit_error ("throttle: writeback: cannot create the write pool of "
                  "export \"%s\" (%" PRIu64 " bytes%s): %s%s", exp->name,
                  throttle_wbq_memory (pool_bytes, nr_writers, bounce),
                  lock ? ", locked" : "", throttle_errtext (errno),
                  lock ? " (raise ulimit -l, lower throttle-writeback-pool, "
                  "or throttle-mlock=off)" : "");
    free (wb);
    return NULL;
  }

  for (i = 0; i < nr_writers; ++i) {
    struct throttle_wb_writer *w = &wb->writers[i];

    w->wb = wb;
    w->idx = i;
    switch (open_writer_ctx (wb, w, backend)) {
    case 0: break;
    case 1: *read_only = true; /* fallthrough */
    default: goto fail;
    }
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
                "multi-conn %d", exp->name, pool_bytes / THROTTLE_WBQ_ELEM,
                wb->nr_writers, bounce, wb->multi_conn);
  return wb;

 fail:
  wb_destroy (wb);
  return NULL;
}

/* Only "" is written behind: the writers' contexts are shared (they
 * outlive connections), and in a shared context nbdkit does not tell
 * the plugin the client's export name, so a plugin serving several
 * exports would write a named export's data to its default one, or
 * fail.  Nor can a named export be served writethrough beside it: a
 * plugin may serve one disk under several names (the file plugin with
 * file= serves every name from its file), and a request through
 * another name reaches the disk past the writes acknowledged on ""
 * and still queued: a write acknowledged there after them would be
 * overwritten by them, a read would miss them.  So every other name
 * is refused, read-only connections too.
 */
int
throttle_writeback_preopen (const char *exportname, void **state)
{
  if (!throttle_writeback_enabled () || exportname[0] == '\0')
    return 0;
  nbdkit_error ("throttle: export \"%s\" refused: throttle-mode=writeback "
                "serves only the default export \"\" (its write-behind "
                "queue cannot order the requests that reach the plugin "
                "through other names); use throttle-mode=writethrough to "
                "serve named exports", exportname);
  return -1;
}

int
throttle_writeback_list_exports (nbdkit_next_list_exports *next,
                                 nbdkit_backend *nxdata, int readonly,
                                 struct nbdkit_exports *exports)
{
  struct nbdkit_exports *all;
  size_t i, n;
  int r = 0;

  if (!throttle_writeback_enabled ())
    return next (nxdata, readonly, exports);

  /* The plugin's list, its default export resolved by nbdkit, less
   * the names throttle_writeback_preopen refuses: a client shown a
   * name expects to open it.
   */
  all = nbdkit_exports_new ();
  if (all == NULL)
    return -1;
  if (next (nxdata, readonly, all) == -1) {
    nbdkit_exports_free (all);
    return -1;
  }
  n = nbdkit_exports_count (all);
  for (i = 0; r == 0 && i < n; ++i) {
    struct nbdkit_export e = nbdkit_get_export (all, i);

    if (e.name[0] == '\0')
      r = nbdkit_add_export (exports, "", e.description);
  }
  nbdkit_exports_free (all);
  return r;
}

int
throttle_writeback_make (struct throttle_export *exp, nbdkit_context *context)
{
  struct throttle_wb *wb;
  bool read_only = false;
  int r = 0;

  throttle_lock (&create_lock);
  if (throttle_wb_made == NULL) {
    wb = wb_create (exp, nbdkit_context_get_backend (context), &read_only);
    if (wb)
      __atomic_store_n (&throttle_wb_made, wb, __ATOMIC_RELEASE);
    else if (read_only)
      nbdkit_debug ("throttle: writeback: export \"%s\" takes no writes",
                    exp->name);
    else
      r = -1;
  }
  throttle_unlock (&create_lock);
  return r;
}

void
throttle_writeback_cleanup (void)
{
  struct throttle_wb *wb;
  struct throttle_wbq_stats s;

  throttle_lock (&create_lock);
  wb = throttle_wb_made;
  if (wb) {
    throttle_wbq_get_stats (wb->q, &s);
    if (s.pending)
      nbdkit_debug ("throttle: writeback: export \"%s\": writing %" PRIu64
                    " pending writes before exit", wb->exp->name, s.pending);
    throttle_wb_made = NULL;
    wb_destroy (wb);            /* waits for the pending writes */
  }
  throttle_unlock (&create_lock);
}

#define PREFIX "nbdkit_throttle_writeback_"
#define STAT(f) offsetof (struct throttle_wbq_stats, f)

/* An export's numbers, in the order of the stats' member and of the
 * metrics: each one's member of the JSON (NULL: the last, the error,
 * which the JSON gives as its name), family (never rename one:
 * scripts and dashboards use them) and field of the queue's snapshot.
 */
static const struct {
  const char *json, *family;
  bool counter;
  const char *help;
  size_t field;
} wb_stats[] = {
  { "pending_writes", PREFIX "pending_writes", false,
    "Writes acknowledged and not yet on the backend", STAT (pending) },
  { "pending_bytes", PREFIX "pending_bytes", false,
    "Bytes acknowledged and not yet on the backend", STAT (pending_bytes) },
  { "peak_pending_bytes", PREFIX "peak_pending_bytes", false,
    "Most bytes pending at once", STAT (peak_pending_bytes) },
  { "pool_used", PREFIX "pool_used_bytes", false,
    "Bytes of the locked pool in use", STAT (pool_used) },
  { "pool_size", PREFIX "pool_size_bytes", false,
    "Bytes of the locked pool", STAT (pool_size) },
  { "written", PREFIX "written_writes_total", true,
    "Writes the writers put on the backend", STAT (written) },
  { "direct", PREFIX "direct_writes_total", true,
    "Writes too large for the pool, passed straight through", STAT (direct) },
  { "failed", PREFIX "failed_writes_total", true,
    "Writes that failed on the backend", STAT (failed) },
  { NULL, PREFIX "error_unreported", false,
    "1 while a failed write has not been reported by a flush",
    STAT (error_unreported) },
};
#define NR_WB_STATS (sizeof wb_stats / sizeof wb_stats[0])

static uint64_t
stat_value (const struct throttle_wbq_stats *s, size_t i)
{
  return *(const uint64_t *) ((const char *) s + wb_stats[i].field);
}

void
throttle_writeback_stats_json (FILE *fp, struct throttle_export *exp)
{
  struct throttle_wb *wb = exp ? throttle_wb_get () : NULL;
  struct throttle_wbq_stats s;
  size_t i;

  if (wb == NULL)
    return;
  throttle_wbq_get_stats (wb->q, &s);
  for (i = 0; wb_stats[i].json; i++)
    fprintf (fp, "%s\"%s\":%" PRIu64, i ? "," : ",\"writeback\":{",
             wb_stats[i].json, stat_value (&s, i));
  if (s.error_unreported)
    fprintf (fp, ",\"error\":\"%s\"}",
             strerrorname_np (s.last.errnum) ? : "EIO");
  else
    fputs (",\"error\":null}", fp);
}

void
throttle_writeback_metrics (FILE *fp)
{
  struct throttle_wb *wb = throttle_wb_get ();
  struct throttle_wbq_stats s;
  size_t i;

  if (!throttle_writeback_enabled ())
    return;
  if (wb)
    throttle_wbq_get_stats (wb->q, &s);
  for (i = 0; i < NR_WB_STATS; i++) {
    throttle_prom_family (fp, wb_stats[i].family,
                          wb_stats[i].counter ? "counter" : "gauge",
                          wb_stats[i].help);
    if (wb)
      throttle_prom_sample (fp, wb_stats[i].family, "export", "",
                            stat_value (&s, i));
  }
}
