/* nbdkit-throttle filter: write-behind (throttle-mode=writeback).
 *
 * Why it is shaped like this:
 *
 * - Nothing on the write path may allocate: the payload goes into
 *   page-sized buffers of a locked, prefaulted pool, and the record
 *   describing a pending write, and the links between its buffers, come
 *   from arrays made (and locked) with the pool.  A write needs one
 *   record and one link per buffer, so with as many records and links
 *   as buffers, whoever holds buffers always finds both.
 *
 * - Writers write through backend contexts of their own, opened shared:
 *   a connection's context may be gone before its writes are, and one
 *   context per writer thread keeps nbdkit's SERIALIZE_REQUESTS promise
 *   (one request at a time per plugin handle) to the plugin.
 *
 * - Ordering is by a sequence number taken under the export's lock.  A
 *   pending write does not start while an older overlapping one is
 *   pending, so overlapping writes reach the backend in the order they
 *   were acknowledged.  Requests that must reach the backend directly
 *   (zero, trim, FUA writes, extents) register a "barrier": they wait
 *   for older overlapping writes, and newer overlapping writes wait for
 *   them.  A read registers a barrier that freezes every overlapping
 *   write not yet started, waits for those already started, reads the
 *   backend and lays the frozen writes over the result, oldest first:
 *   so it returns the newest data without racing a writer.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <nbdkit-filter.h>

#include "throttle.h"
#include "throttle-abort.h"
#include "throttle-control.h"
#include "throttle-export.h"
#include "throttle-guards.h"
#include "throttle-mempool.h"
#include "throttle-parse.h"
#include "throttle-wbsize.h"
#include "throttle-writeback.h"

/* A pending write's payload lives in page-sized buffers: a swap device
 * writes pages, and a 4 KiB write must not pin more than 4 KiB.
 */
#define WB_ELEM 4096

/* Larger writes go through synchronously (in order): a writer copies
 * a pending write into a contiguous buffer of this size to write it
 * with one backend call, and that buffer is locked too.  2 MiB covers
 * the kernel's usual largest request (max_sectors_kb 1280).  With
 * many writers each buffer is smaller (throttle_wbsize_bounce_size),
 * so more writers do not lock more memory, and a larger write goes to
 * the backend in pieces.
 */
#define WB_MAX_WRITE (2 * 1024 * 1024)

/* throttle-writeback-threads: 0, the default, sizes the writers from
 * the thread model in get_ready (throttle_wbsize_writers).
 */
#define WB_DEFAULT_THREADS 0
#define WB_MAX_THREADS THROTTLE_WBSIZE_MAX

/* How many queued writes a writer looks at for one it may start:
 * bounds the time under the lock when many are blocked by overlaps.
 */
#define WB_PICK_WINDOW 64

#define NO_SLOT UINT32_MAX

static bool writeback;
static uint64_t pool_param;      /* throttle-writeback-pool, 0 = default */
static unsigned nr_threads = WB_DEFAULT_THREADS;
static unsigned nr_writers;      /* decided in get_ready */
static uint64_t pool_bytes;      /* decided in config_complete */

struct wb_rec {                  /* a pending write */
  struct wb_rec *prev, *next;    /* pending list (seq order), or free list */
  uint64_t seq;
  uint64_t offset;
  uint64_t charged;
  uint32_t count;
  uint32_t first;                /* first link */
  bool writing;
};

struct wb_link {                 /* one buffer of a pending write */
  void *buf;
  uint32_t next;
};

/* A request that goes to the backend directly, on its thread's stack. */
struct wb_barrier {
  struct wb_barrier *next;
  uint64_t offset, end;
  uint64_t seq;                  /* writes newer than this wait for it */
  bool freeze;                   /* a read: no overlapping write starts */
};

struct wb_writer {
  struct throttle_wb *wb;
  pthread_t thread;
  bool started;
  nbdkit_next *ctx;
  void *bounce;
  uint32_t bounce_len;
  uint64_t flushed_gen;
  bool dirty;                    /* wrote since its last flush */
};

struct throttle_wb {
  struct throttle_wb *next_all;
  struct throttle_export *exp;

  pthread_mutex_t lock;
  pthread_cond_t work;           /* writers: something may be startable */
  pthread_cond_t done;           /* a write finished, a writer flushed */
  struct wb_rec *head, *tail;
  struct wb_rec *free_recs;
  uint32_t free_link;
  struct wb_barrier *barriers;
  uint64_t next_seq;
  bool stopping;
  bool started_all;

  /* One multi-buffer allocation at a time: two writes each holding
   * part of the pool while waiting for the rest would deadlock.
   */
  pthread_mutex_t alloc_lock;
  struct throttle_mempool *pool;
  struct throttle_mempool *bounce_pool;
  size_t nr;                     /* buffers, records and links */
  struct wb_rec *recs;
  struct wb_link *links;
  void *meta;                    /* the mapping holding recs and links */
  size_t meta_len;

  /* Failures a flush reports: background writes, and writers'
   * flushes (what the writer wrote may be lost).  Like the kernel's
   * errseq_t, a counter that only grows: each flush samples it when it
   * arrives and fails if it moved before the flush answers, and each
   * connection keeps the value it last reported.  So a failure reaches
   * every flush waiting when it happened, and the next flush of every
   * connection open then; a later success cannot hide it, as a single
   * "last result" would.
   */
  uint64_t error_seq;
  bool error_unreported;         /* no flush has reported the last one */
  int last_errno;
  uint64_t last_err_offset;
  uint32_t last_err_count;       /* 0: a writer's flush failed */

  bool multi_conn;               /* a flush on any context covers all */
  bool writer_flush;             /* writers' contexts can flush */
  uint64_t flush_gen;

  uint64_t pending, pending_bytes, peak_pending_bytes;
  uint64_t written, written_bytes, failed, direct;

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

/* Each writer's bounce buffer. */
static size_t
wb_bounce_size (void)
{
  return throttle_wbsize_bounce_size (wb_sizing_writers (),
                                      pool_bytes < WB_MAX_WRITE ?
                                      pool_bytes : WB_MAX_WRITE);
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
  uint64_t nr = pool / WB_ELEM;
  uint64_t per = sizeof (struct wb_rec) + sizeof (struct wb_link) +
    sizeof (void *) + 1;

  return pool + nr * per + (uint64_t) wb_sizing_writers () * wb_bounce_size ();
}

int
throttle_writeback_config_complete (void)
{
  char why_metric[128];
  const char *why, *fix;
  uint64_t ram, need;

  if (!writeback) {
    if (pool_param || nr_threads != WB_DEFAULT_THREADS)
      nbdkit_debug ("throttle: throttle-writeback-* ignored: "
                    "throttle-mode is writethrough");
    return 0;
  }

  /* Cover the whole budget where the metric says how many bytes it
   * holds; other metrics do not, so the pool is then a second bound
   * of its own (a write waits for buffers as it waits for units).
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

    if (__builtin_mul_overflow (throttle_config.capacity, unit, &pool_bytes)) {
      nbdkit_error ("throttle-capacity: %" PRIu64 " %s of %" PRIu64 " bytes "
                    "overflow a 64-bit writeback pool size: lower "
                    "throttle-capacity, or set throttle-writeback-pool",
                    throttle_config.capacity, throttle_config.metric.name,
                    unit);
      return -1;
    }
    if (unit == 1)
      snprintf (why_metric, sizeof why_metric, "throttle-capacity (the "
                "pool's default under throttle-metric=%s)",
                throttle_config.metric.name);
    else
      snprintf (why_metric, sizeof why_metric, "throttle-capacity (the "
                "pool's default under throttle-metric=%s is capacity x %"
                PRIu64 ")", throttle_config.metric.name, unit);
    why = why_metric;
    fix = "lower throttle-capacity, or set throttle-writeback-pool";
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

static bool
overlaps (uint64_t a, uint64_t a_end, uint64_t b, uint64_t b_end)
{
  return a < b_end && b < a_end;
}

/* Called with wb->lock held.  Oldest pending write that may start. */
static struct wb_rec *
pick (struct throttle_wb *wb)
{
  struct wb_rec *r, *e;
  struct wb_barrier *b;
  unsigned looked = 0;

  for (r = wb->head; r && looked < WB_PICK_WINDOW; r = r->next) {
    uint64_t end = r->offset + r->count;
    bool blocked = false;

    if (r->writing)
      continue;
    looked++;
    for (e = wb->head; e != r && !blocked; e = e->next)
      blocked = overlaps (e->offset, e->offset + e->count, r->offset, end);
    for (b = wb->barriers; b && !blocked; b = b->next)
      blocked = (b->freeze || r->seq > b->seq) &&
        overlaps (b->offset, b->end, r->offset, end);
    if (!blocked)
      return r;
  }
  return NULL;
}

/* Called with wb->lock held: the write is on the backend or failed. */
static void
retire (struct throttle_wb *wb, struct wb_rec *r)
{
  uint32_t l, next;

  if (r->prev) r->prev->next = r->next; else wb->head = r->next;
  if (r->next) r->next->prev = r->prev; else wb->tail = r->prev;

  for (l = r->first; l != NO_SLOT; l = next) {
    next = wb->links[l].next;
    throttle_mempool_free (wb->pool, wb->links[l].buf);
    wb->links[l].buf = NULL;
    wb->links[l].next = wb->free_link;
    wb->free_link = l;
  }
  wb->pending--;
  throttle_abort_pending (-1);
  wb->pending_bytes -= r->count;
  throttle_budget_credit (&wb->exp->budget, r->charged);

  r->prev = NULL;
  r->next = wb->free_recs;
  wb->free_recs = r;

  pthread_cond_broadcast (&wb->done);
  pthread_cond_broadcast (&wb->work);
}

/* Copy bytes [from, from+len) of a pending write's payload to dst. */
static void
copy_out (struct throttle_wb *wb, const struct wb_rec *r,
          uint32_t from, uint32_t len, unsigned char *dst)
{
  uint32_t l = r->first, skip = from / WB_ELEM, off = from % WB_ELEM;

  while (skip--)
    l = wb->links[l].next;
  while (len > 0) {
    uint32_t n = WB_ELEM - off < len ? WB_ELEM - off : len;

    memcpy (dst, (unsigned char *) wb->links[l].buf + off, n);
    dst += n;
    len -= n;
    off = 0;
    l = wb->links[l].next;
  }
}

/* Called with wb->lock held: a background write of count bytes at
 * offset failed, or (count 0) a writer's flush did, with err.
 */
static void
record_error (struct throttle_wb *wb, int err, uint32_t count,
              uint64_t offset)
{
  wb->error_seq++;
  wb->error_unreported = true;
  wb->last_errno = err;
  wb->last_err_offset = offset;
  wb->last_err_count = count;
}

/* The last failure, for a message: "write of 4096 bytes at 0: ..." */
static void
describe_last_error (const struct throttle_wb *wb, char *buf, size_t len)
{
  if (wb->last_err_count == 0)
    snprintf (buf, len, "a writer's flush: %s", strerror (wb->last_errno));
  else
    snprintf (buf, len, "write of %" PRIu32 " bytes at %" PRIu64 ": %s",
              wb->last_err_count, wb->last_err_offset,
              strerror (wb->last_errno));
}

static void *
writer_main (void *arg)
{
  struct wb_writer *w = arg;
  struct throttle_wb *wb = w->wb;
  struct wb_rec *r;

  throttle_guards_thread_enter ();
  throttle_abort_writer_thread ();

  pthread_mutex_lock (&wb->lock);
  for (;;) {
    if (w->flushed_gen < wb->flush_gen) {
      uint64_t gen = wb->flush_gen;
      int err = 0, res = 0;

      /* A writer that wrote nothing since its last flush has nothing
       * of its own to make durable: without this, every client flush
       * would cost a backend flush per writer.
       */
      pthread_mutex_unlock (&wb->lock);
      if (wb->writer_flush && w->dirty)
        res = w->ctx->flush (w->ctx, 0, &err);
      w->dirty = false;
      if (res == -1) {
        if (err == 0)
          err = EIO;
        nbdkit_error ("throttle: writeback: flushing a writer's backend "
                      "context of export \"%s\" failed: %s; the flushes "
                      "waiting report it", wb->exp->name, strerror (err));
      }
      pthread_mutex_lock (&wb->lock);
      if (res == -1)
        record_error (wb, err, 0, 0);
      w->flushed_gen = gen;
      pthread_cond_broadcast (&wb->done);
      continue;
    }

    r = pick (wb);
    if (r) {
      uint32_t done, n;
      int err = 0, res = 0;

      r->writing = true;
      pthread_mutex_unlock (&wb->lock);

      /* A record larger than the bounce buffer goes in pieces, in
       * order.  It stays "writing" until retired, so newer overlapping
       * writes, and reads of its range, wait for the whole of it.
       */
      if (wb->links[r->first].next == NO_SLOT)
        res = w->ctx->pwrite (w->ctx, wb->links[r->first].buf, r->count,
                              r->offset, 0, &err);
      else {
        for (done = 0; res == 0 && done < r->count; done += n) {
          n = r->count - done < w->bounce_len ? r->count - done
            : w->bounce_len;
          copy_out (wb, r, done, n, w->bounce);
          res = w->ctx->pwrite (w->ctx, w->bounce, n, r->offset + done, 0,
                                &err);
        }
      }
      w->dirty = true;
      if (res == -1) {
        if (err == 0)
          err = EIO;
        nbdkit_error ("throttle: writeback: background write of %" PRIu32
                      " bytes at %" PRIu64 " to export \"%s\" failed: %s; "
                      "the next flush reports it", r->count, r->offset,
                      wb->exp->name, strerror (err));
      }
      else if (throttle_debug_verbose)
        nbdkit_debug ("throttle: writeback: wrote %" PRIu32 " bytes at %"
                      PRIu64 " seq %" PRIu64, r->count, r->offset, r->seq);

      pthread_mutex_lock (&wb->lock);
      if (res == -1) {
        record_error (wb, err, r->count, r->offset);
        wb->failed++;
      }
      else {
        wb->written++;
        wb->written_bytes += r->count;
      }
      retire (wb, r);
      continue;
    }

    if (wb->stopping && wb->head == NULL)
      break;
    pthread_cond_wait (&wb->work, &wb->lock);
  }
  pthread_mutex_unlock (&wb->lock);
  return NULL;
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
  size_t i;

  pthread_mutex_lock (&wb->lock);
  wb->stopping = true;
  pthread_cond_broadcast (&wb->work);
  pthread_mutex_unlock (&wb->lock);
  for (i = 0; i < wb->nr_writers; ++i) {
    struct wb_writer *w = &wb->writers[i];

    if (w->started)
      pthread_join (w->thread, NULL);
    if (w->bounce)
      throttle_mempool_free (wb->bounce_pool, w->bounce);
    close_writer_ctx (w);
  }
  if (wb->started_all)
    nbdkit_debug ("throttle: writeback summary export=\"%s\" written=%"
                  PRIu64 " written_bytes=%" PRIu64 " direct=%" PRIu64
                  " failed=%" PRIu64 " peak_pending_bytes=%" PRIu64,
                  wb->exp->name, wb->written, wb->written_bytes, wb->direct,
                  wb->failed, wb->peak_pending_bytes);
  if (wb->error_unreported)
    nbdkit_error ("throttle: writeback: export \"%s\": %" PRIu64
                  " background write(s) failed and no flush reported it; "
                  "last: %" PRIu32 " bytes at %" PRIu64 ": %s",
                  wb->exp->name, wb->failed, wb->last_err_count,
                  wb->last_err_offset, strerror (wb->last_errno));
  throttle_mempool_destroy (wb->pool);
  throttle_mempool_destroy (wb->bounce_pool);
  if (wb->meta)
    munmap (wb->meta, wb->meta_len);
  pthread_cond_destroy (&wb->work);
  pthread_cond_destroy (&wb->done);
  pthread_mutex_destroy (&wb->lock);
  pthread_mutex_destroy (&wb->alloc_lock);
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

/* NULL with *read_only set if the backend takes no writes: nothing
 * to write behind then, and nbdkit refuses the client's writes itself.
 */
static struct throttle_wb *
wb_create (struct throttle_export *exp, nbdkit_backend *backend,
           const char *exportname, bool *read_only)
{
  struct throttle_wb *wb;
  size_t i, bounce_len = wb_bounce_size ();
  bool lock = throttle_guards_lock_pools ();
  int err;

  wb = calloc (1, sizeof *wb + nr_writers * sizeof wb->writers[0]);
  if (wb == NULL) {
    nbdkit_error ("calloc: %m");
    return NULL;
  }
  wb->exp = exp;
  wb->nr_writers = nr_writers;
  wb->nr = pool_bytes / WB_ELEM;
  pthread_mutex_init (&wb->lock, NULL);
  pthread_mutex_init (&wb->alloc_lock, NULL);
  pthread_cond_init (&wb->work, NULL);
  pthread_cond_init (&wb->done, NULL);
  wb->free_link = NO_SLOT;

  wb->pool = throttle_mempool_create (wb->nr, WB_ELEM, lock);
  if (wb->pool)
    wb->bounce_pool = throttle_mempool_create (nr_writers, bounce_len, lock);
  if (wb->pool == NULL || wb->bounce_pool == NULL) {
    nbdkit_error ("throttle: writeback: cannot create the %s pool of "
                  "export \"%s\" (%" PRIu64 " bytes%s): %m%s",
                  wb->pool ? "writers'" : "write", exp->name,
                  wb->pool ? (uint64_t) nr_writers * bounce_len : pool_bytes,
                  lock ? ", locked" : "",
                  lock ? " (raise ulimit -l, lower throttle-writeback-pool, "
                  "or throttle-mlock=off)" : "");
    goto fail;
  }

  /* Records and links beside the pool, prefaulted and locked like it. */
  wb->meta_len = wb->nr * (sizeof (struct wb_rec) + sizeof (struct wb_link));
  wb->meta = mmap (NULL, wb->meta_len, PROT_READ|PROT_WRITE,
                   MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  if (wb->meta == MAP_FAILED) {
    wb->meta = NULL;
    nbdkit_error ("throttle: writeback: mmap: %m");
    goto fail;
  }
  memset (wb->meta, 0, wb->meta_len);
  if (lock && mlock (wb->meta, wb->meta_len) == -1) {
    nbdkit_error ("throttle: writeback: mlock of %zu bytes: %m", wb->meta_len);
    goto fail;
  }
  wb->recs = wb->meta;
  wb->links = (struct wb_link *) (wb->recs + wb->nr);
  for (i = wb->nr; i-- > 0; ) {
    wb->recs[i].next = wb->free_recs;
    wb->free_recs = &wb->recs[i];
    wb->links[i].next = wb->free_link;
    wb->free_link = i;
  }

  for (i = 0; i < nr_writers; ++i) {
    struct wb_writer *w = &wb->writers[i];

    w->wb = wb;
    w->bounce = throttle_mempool_try_alloc (wb->bounce_pool);
    w->bounce_len = bounce_len;
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
      errno = err;
      nbdkit_error ("throttle: writeback: pthread_create: %m");
      goto fail;
    }
    w->started = true;
  }
  wb->started_all = true;
  nbdkit_debug ("throttle: writeback: export \"%s\": %zu buffers, %zu "
                "writers with %zu-byte bounce buffers, backend multi-conn %d",
                exp->name, wb->nr, wb->nr_writers, bounce_len, wb->multi_conn);
  return wb;

 fail:
  wb_destroy (wb);
  free (wb);
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

  pthread_mutex_lock (&wb->lock);
  /* A failure nobody has heard of yet is told to the next flush on any
   * connection, even one opened after it.
   */
  c->seen_errors = wb->error_seq - (wb->error_unreported ? 1 : 0);
  pthread_mutex_unlock (&wb->lock);
  return 0;
}

/* The export's writeback state, once a writable connection made it. */
static struct throttle_wb *
conn_wb (const struct throttle_wb_conn *c)
{
  return c->exp ? __atomic_load_n (&c->exp->wb, __ATOMIC_ACQUIRE) : NULL;
}

/* Called with wb->lock held: wait until no write older than seq is
 * pending in [offset, end).
 */
static void
wait_older (struct throttle_wb *wb, uint64_t seq, uint64_t offset,
            uint64_t end)
{
  struct wb_rec *r;

 again:
  for (r = wb->head; r && r->seq < seq; r = r->next)
    if (overlaps (r->offset, r->offset + r->count, offset, end)) {
      pthread_cond_wait (&wb->done, &wb->lock);
      goto again;
    }
}

static void
barrier_remove (struct throttle_wb *wb, struct wb_barrier *b)
{
  struct wb_barrier **p;

  for (p = &wb->barriers; *p != b; p = &(*p)->next)
    ;
  *p = b->next;
  pthread_cond_broadcast (&wb->work);
}

/* Put a request on the backend in its place in the order: after older
 * overlapping pending writes, before newer ones.
 */
#define ORDERED(c, count, offset, call)                                 \
  do {                                                                  \
    struct throttle_wb *wb_ = conn_wb (c);                              \
    struct wb_barrier b_;                                               \
    int r_;                                                             \
                                                                        \
    if (wb_ == NULL)                                                    \
      return (call);                                                    \
    b_.offset = (offset);                                               \
    b_.end = (offset) + (count);                                        \
    b_.freeze = false;                                                  \
    pthread_mutex_lock (&wb_->lock);                                    \
    b_.seq = wb_->next_seq++;                                           \
    b_.next = wb_->barriers;                                            \
    wb_->barriers = &b_;                                                \
    wait_older (wb_, b_.seq, b_.offset, b_.end);                        \
    pthread_mutex_unlock (&wb_->lock);                                  \
    r_ = (call);                                                        \
    pthread_mutex_lock (&wb_->lock);                                    \
    barrier_remove (wb_, &b_);                                          \
    pthread_mutex_unlock (&wb_->lock);                                  \
    return r_;                                                          \
  } while (0)

static int
pwrite_direct (struct throttle_wb_conn *c, nbdkit_next *next,
               const void *buf, uint32_t count, uint64_t offset,
               uint32_t flags, int *err)
{
  struct throttle_wb *wb = conn_wb (c);

  if (wb) {
    pthread_mutex_lock (&wb->lock);
    wb->direct++;
    pthread_mutex_unlock (&wb->lock);
  }
  ORDERED (c, count, offset,
           next->pwrite (next, buf, count, offset, flags, err));
}

int
throttle_writeback_pwrite (struct throttle_wb_conn *c,
                           struct throttle_export *exp, nbdkit_next *next,
                           const void *buf, uint32_t count, uint64_t offset,
                           uint32_t flags, uint64_t charged, int *err)
{
  struct throttle_wb *wb = conn_wb (c);
  size_t n = (count + WB_ELEM - 1) / WB_ELEM, i;
  const unsigned char *src = buf;
  uint32_t first = NO_SLOT, last = NO_SLOT, l;
  struct wb_rec *r;
  int res;

  /* A FUA write must be on the backend before its reply anyway, and
   * one larger than a writer's buffer cannot be queued.
   */
  if (wb == NULL || (flags & NBDKIT_FLAG_FUA) || count == 0 ||
      count > WB_MAX_WRITE || n > wb->nr) {
    res = pwrite_direct (c, next, buf, count, offset, flags, err);
    throttle_budget_credit (&exp->budget, charged);
    return res;
  }

  throttle_abort_hold ();

  /* Each buffer is filled as soon as it is had, and chained through a
   * link: holding a buffer guarantees a free link (there are as many
   * links as buffers), and nothing here needs stack beyond a few words.
   */
  pthread_mutex_lock (&wb->alloc_lock);
  for (i = 0; i < n; ++i) {
    size_t len = count - i * WB_ELEM < WB_ELEM ? count - i * WB_ELEM : WB_ELEM;
    void *b = throttle_mempool_try_alloc (wb->pool);

    if (b == NULL)
      b = throttle_mempool_alloc (wb->pool, throttle_cancelled, NULL,
                                  THROTTLE_WAIT_POLL_MS);
    if (b == NULL) {
      pthread_mutex_unlock (&wb->alloc_lock);
      pthread_mutex_lock (&wb->lock);
      while (first != NO_SLOT) {
        l = first;
        first = wb->links[l].next;
        throttle_mempool_free (wb->pool, wb->links[l].buf);
        wb->links[l].buf = NULL;
        wb->links[l].next = wb->free_link;
        wb->free_link = l;
      }
      pthread_mutex_unlock (&wb->lock);
      throttle_budget_credit (&exp->budget, charged);
      nbdkit_error ("throttle: writeback: write of %" PRIu32 " bytes at %"
                    PRIu64 " abandoned while waiting for pool buffers: "
                    "server shutting down", count, offset);
      *err = ESHUTDOWN;
      return -1;
    }
    memcpy (b, src + i * WB_ELEM, len);

    pthread_mutex_lock (&wb->lock);
    l = wb->free_link;
    wb->free_link = wb->links[l].next;
    wb->links[l].buf = b;
    wb->links[l].next = NO_SLOT;
    if (last == NO_SLOT)
      first = l;
    else
      wb->links[last].next = l;
    last = l;
    pthread_mutex_unlock (&wb->lock);
  }
  pthread_mutex_unlock (&wb->alloc_lock);

  pthread_mutex_lock (&wb->lock);
  r = wb->free_recs;            /* as many records as buffers, too */
  wb->free_recs = r->next;
  r->offset = offset;
  r->count = count;
  r->charged = charged;
  r->writing = false;
  r->first = first;
  r->seq = wb->next_seq++;
  r->next = NULL;
  r->prev = wb->tail;
  if (wb->tail) wb->tail->next = r; else wb->head = r;
  wb->tail = r;
  wb->pending++;
  throttle_abort_pending (1);
  wb->pending_bytes += count;
  if (wb->pending_bytes > wb->peak_pending_bytes)
    wb->peak_pending_bytes = wb->pending_bytes;
  pthread_cond_signal (&wb->work);
  pthread_mutex_unlock (&wb->lock);
  return 0;
}

int
throttle_writeback_pread (struct throttle_wb_conn *c, nbdkit_next *next,
                          void *buf, uint32_t count, uint64_t offset,
                          uint32_t flags, int *err)
{
  struct throttle_wb *wb = conn_wb (c);
  uint64_t end = offset + count;
  struct wb_barrier b;
  struct wb_rec *r;
  bool any = false, busy;
  int res;

  if (wb == NULL)
    return next->pread (next, buf, count, offset, flags, err);

  pthread_mutex_lock (&wb->lock);
  for (r = wb->head; r && !any; r = r->next)
    any = overlaps (r->offset, r->offset + r->count, offset, end);
  if (!any) {
    pthread_mutex_unlock (&wb->lock);
    return next->pread (next, buf, count, offset, flags, err);
  }

  /* Freeze what has not started; wait for what has. */
  b.offset = offset;
  b.end = end;
  b.seq = 0;
  b.freeze = true;
  b.next = wb->barriers;
  wb->barriers = &b;
  do {
    busy = false;
    for (r = wb->head; r && !busy; r = r->next)
      busy = r->writing && overlaps (r->offset, r->offset + r->count,
                                     offset, end);
    if (busy)
      pthread_cond_wait (&wb->done, &wb->lock);
  } while (busy);
  pthread_mutex_unlock (&wb->lock);

  res = next->pread (next, buf, count, offset, flags, err);

  pthread_mutex_lock (&wb->lock);
  if (res == 0) {
    for (r = wb->head; r; r = r->next) {
      uint64_t lo, hi;

      if (!overlaps (r->offset, r->offset + r->count, offset, end))
        continue;
      lo = r->offset > offset ? r->offset : offset;
      hi = r->offset + r->count < end ? r->offset + r->count : end;
      copy_out (wb, r, lo - r->offset, hi - lo,
                (unsigned char *) buf + (lo - offset));
    }
  }
  barrier_remove (wb, &b);
  pthread_mutex_unlock (&wb->lock);
  return res;
}

int
throttle_writeback_zero (struct throttle_wb_conn *c, nbdkit_next *next,
                         uint32_t count, uint64_t offset, uint32_t flags,
                         int *err)
{
  ORDERED (c, count, offset, next->zero (next, count, offset, flags, err));
}

int
throttle_writeback_trim (struct throttle_wb_conn *c, nbdkit_next *next,
                         uint32_t count, uint64_t offset, uint32_t flags,
                         int *err)
{
  ORDERED (c, count, offset, next->trim (next, count, offset, flags, err));
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
 * path: the allocation above is harmless.)
 */
int
throttle_writeback_extents (struct throttle_wb_conn *c, nbdkit_next *next,
                            uint32_t count, uint64_t offset, uint32_t flags,
                            struct nbdkit_extents *extents, int *err)
{
  ORDERED (c, count, offset,
           extents_clipped (next, count, offset, flags, extents, err));
}

/* Called with wb->lock held. */
static void
wait_all_older (struct throttle_wb *wb, uint64_t seq)
{
  while (wb->head && wb->head->seq < seq)
    pthread_cond_wait (&wb->done, &wb->lock);
}

int
throttle_writeback_flush (struct throttle_wb_conn *c, nbdkit_next *next,
                          uint32_t flags, int *err)
{
  struct throttle_wb *wb = conn_wb (c);
  uint64_t arrived_seq, seen;
  char last[128];
  size_t i;
  int res;

  if (wb == NULL)
    return next->flush (next, flags, err);

  pthread_mutex_lock (&wb->lock);
  arrived_seq = wb->error_seq;
  wait_all_older (wb, wb->next_seq);

  /* Without multi-conn the plugin promises nothing about writes made
   * through other handles, so each writer flushes its own.
   */
  if (!wb->multi_conn && wb->writer_flush) {
    uint64_t gen = ++wb->flush_gen;
    bool waiting;

    pthread_cond_broadcast (&wb->work);
    do {
      waiting = false;
      for (i = 0; i < wb->nr_writers && !waiting; ++i)
        waiting = wb->writers[i].flushed_gen < gen;
      if (waiting)
        pthread_cond_wait (&wb->done, &wb->lock);
    } while (waiting);
  }
  pthread_mutex_unlock (&wb->lock);

  res = next->flush (next, flags, err);

  /* Failures since this flush arrived, which it was waiting for, and
   * failures before that this connection has not heard of.  Another
   * flush of the connection that reports first does not make this one
   * succeed: it compares with what it sampled, not only with seen.  A
   * flush that fails anyway reports them too (with its own error), so
   * that a writer's failed flush, always awaited by some flush, is
   * always reported.
   */
  pthread_mutex_lock (&wb->lock);
  seen = c->seen_errors < arrived_seq ? c->seen_errors : arrived_seq;
  if (seen != wb->error_seq) {
    c->seen_errors = wb->error_seq;
    wb->error_unreported = false;
    if (res == 0) {
      *err = wb->last_errno;
      res = -1;
    }
    describe_last_error (wb, last, sizeof last);
    nbdkit_error ("throttle: writeback: flush of export \"%s\": %" PRIu64
                  " failure(s) of background writes or writers' flushes "
                  "since this flush arrived or this connection's last "
                  "report; last: %s", wb->exp->name, wb->error_seq - seen,
                  last);
  }
  pthread_mutex_unlock (&wb->lock);
  return res;
}

int
throttle_writeback_finalize (struct throttle_wb_conn *c)
{
  struct throttle_wb *wb = conn_wb (c);

  if (wb == NULL)
    return 0;
  pthread_mutex_lock (&wb->lock);
  if (wb->head && throttle_debug_verbose)
    nbdkit_debug ("throttle: writeback: disconnect waits for %" PRIu64
                  " pending writes", wb->pending);
  wait_all_older (wb, wb->next_seq);
  pthread_mutex_unlock (&wb->lock);
  return 0;
}

void
throttle_writeback_cleanup (void)
{
  struct throttle_wb *wb;

  pthread_mutex_lock (&all_lock);
  while ((wb = all_wbs) != NULL) {
    all_wbs = wb->next_all;
    if (wb->pending)
      nbdkit_debug ("throttle: writeback: export \"%s\": writing %" PRIu64
                    " pending writes before exit", wb->exp->name, wb->pending);
    wb->exp->wb = NULL;
    wb_destroy (wb);            /* waits for the pending writes */
    free (wb);
  }
  pthread_mutex_unlock (&all_lock);
}

void
throttle_writeback_free (struct throttle_wb *wb)
{
  struct throttle_wb **p;

  if (wb == NULL)
    return;
  pthread_mutex_lock (&all_lock);
  for (p = &all_wbs; *p; p = &(*p)->next_all)
    if (*p == wb) {
      *p = wb->next_all;
      break;
    }
  pthread_mutex_unlock (&all_lock);
  wb->exp->wb = NULL;
  wb_destroy (wb);
  free (wb);
}

void
throttle_writeback_stats_json (struct throttle_export *exp, char *buf,
                               size_t len)
{
  struct throttle_wb *wb =
    exp ? __atomic_load_n (&exp->wb, __ATOMIC_ACQUIRE) : NULL;
  int n;

  if (len > 0)
    buf[0] = '\0';
  if (wb == NULL)
    return;
  pthread_mutex_lock (&wb->lock);
  if (wb->error_unreported)
    n = snprintf (buf, len,
                  "\"writeback\":{\"pending_writes\":%" PRIu64
                  ",\"pending_bytes\":%" PRIu64 ",\"peak_pending_bytes\":%"
                  PRIu64 ",\"pool_used\":%zu,\"pool_size\":%zu"
                  ",\"written\":%" PRIu64 ",\"direct\":%" PRIu64
                  ",\"failed\":%" PRIu64 ",\"error\":\"%s\"}",
                  wb->pending, wb->pending_bytes, wb->peak_pending_bytes,
                  throttle_mempool_in_use (wb->pool) * WB_ELEM,
                  wb->nr * WB_ELEM, wb->written, wb->direct, wb->failed,
                  strerrorname_np (wb->last_errno) ? : "EIO");
  else
    n = snprintf (buf, len,
                  "\"writeback\":{\"pending_writes\":%" PRIu64
                  ",\"pending_bytes\":%" PRIu64 ",\"peak_pending_bytes\":%"
                  PRIu64 ",\"pool_used\":%zu,\"pool_size\":%zu"
                  ",\"written\":%" PRIu64 ",\"direct\":%" PRIu64
                  ",\"failed\":%" PRIu64 ",\"error\":null}",
                  wb->pending, wb->pending_bytes, wb->peak_pending_bytes,
                  throttle_mempool_in_use (wb->pool) * WB_ELEM,
                  wb->nr * WB_ELEM, wb->written, wb->direct, wb->failed);
  pthread_mutex_unlock (&wb->lock);
  if (n < 0 || (size_t) n >= len)
    buf[0] = '\0';            /* dropped whole, never half a member */
}
