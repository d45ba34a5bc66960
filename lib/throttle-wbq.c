/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the write-behind queue.
 *
 * Lock order: HACKING.md, "Locks".  alloc_lock is held across a wait
 * for pool buffers; lock never is, and is dropped by every wait on work
 * or done.
 *
 * Why it is shaped like this:
 *
 * - Nothing may allocate once the queue exists: the payload goes into
 *   page-sized buffers of a locked, prefaulted pool, and the record
 *   describing a pending write, and the links between its buffers, come
 *   from arrays made (and locked) with the pool.  A write needs one
 *   record and one link per buffer, so with as many records and links
 *   as buffers, whoever holds buffers always finds both.
 *
 * - One multi-buffer allocation at a time (alloc_lock): two writes each
 *   holding part of the pool while waiting for the rest would deadlock.
 *
 * - Failures a flush reports are counted like the kernel's errseq_t: a
 *   counter that only grows.  Each flush samples it when it arrives and
 *   fails if it moved before the flush answers, and each connection
 *   keeps the value it last reported.  So a failure reaches every flush
 *   waiting when it happened, and the next flush of every connection
 *   open then; a later success cannot hide it, as a single "last
 *   result" would.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "throttle-lock.h"
#include "throttle-mempool.h"
#include "throttle-wbq.h"

/* How many queued writes a writer looks at for one it may start:
 * bounds the time under the lock when many are blocked by overlaps.
 */
#define PICK_WINDOW 64

#define NO_SLOT UINT32_MAX

struct throttle_wbq_rec {       /* a pending write */
  struct throttle_wbq_rec *prev, *next; /* pending list (seq order), or free list */
  uint64_t seq;
  uint64_t offset;
  uint64_t charged;
  uint32_t count;
  uint32_t first;               /* first link */
  bool writing;
};

struct wbq_link {               /* one buffer of a pending write */
  void *buf;
  uint32_t next;
};

struct wbq_writer {
  uint64_t flushed_gen;         /* lock */
  void *bounce;                 /* the writer's own */
};

struct throttle_wbq {
  pthread_mutex_t lock;         /* everything below but what is marked;
                                   after alloc_lock, before the pools' */
  pthread_cond_t work;          /* writers: something may be startable */
  pthread_cond_t done;          /* a write finished, a writer flushed */
  struct throttle_wbq_rec *head, *tail;
  struct throttle_wbq_rec *free_recs;
  uint32_t free_link;
  struct throttle_wbq_barrier *barriers;
  uint64_t next_seq;
  bool stopping;

  pthread_mutex_t alloc_lock;   /* one allocation at a time; guards no
                                   field; first of the queue's locks */
  struct throttle_mempool *pool;        /* set at creation */
  struct throttle_mempool *bounce_pool; /* set at creation */
  size_t bounce_len;                    /* set at creation */
  size_t nr;                    /* buffers, records and links */
  struct throttle_wbq_rec *recs;
  struct wbq_link *links;
  void *meta;                   /* the mapping holding recs and links */
  size_t meta_len;

  uint64_t error_seq;
  bool error_unreported;
  struct throttle_wbq_error last;

  uint64_t flush_gen;

  uint64_t pending, pending_bytes, peak_pending_bytes;
  uint64_t written, written_bytes, failed, direct;

  struct throttle_wbq_hooks hooks;      /* set at creation */
  size_t nr_writers;
  struct wbq_writer writers[];
};

size_t
throttle_wbq_max_write (uint64_t pool_bytes)
{
  return pool_bytes < THROTTLE_WBQ_MAX_WRITE
    ? pool_bytes : THROTTLE_WBQ_MAX_WRITE;
}

size_t
throttle_wbq_meta_bytes (size_t nr)
{
  return nr * (sizeof (struct throttle_wbq_rec) + sizeof (struct wbq_link));
}

uint64_t
throttle_wbq_memory (uint64_t pool_bytes, size_t nr_writers,
                     size_t bounce_len)
{
  uint64_t nr = pool_bytes / THROTTLE_WBQ_ELEM;
  /* Per buffer: its record and link, and the pool's free stack entry
   * and held byte.
   */
  uint64_t per = sizeof (struct throttle_wbq_rec) + sizeof (struct wbq_link) +
    sizeof (void *) + 1;

  return pool_bytes + nr * per + (uint64_t) nr_writers * bounce_len;
}

struct throttle_wbq *
throttle_wbq_create (size_t nr, size_t nr_writers, size_t bounce_len,
                     bool lock, const struct throttle_wbq_hooks *hooks,
                     enum throttle_wbq_failure *failed)
{
  struct throttle_wbq *q;
  size_t i;
  int err;

  q = calloc (1, sizeof *q + nr_writers * sizeof q->writers[0]);
  if (q == NULL) {
    *failed = THROTTLE_WBQ_FAIL_ALLOC;
    return NULL;
  }
  q->hooks = *hooks;
  q->nr = nr;
  q->nr_writers = nr_writers;
  q->free_link = NO_SLOT;
  if ((err = throttle_lock_init (&q->lock)) != 0) {
    free (q);
    errno = err;
    *failed = THROTTLE_WBQ_FAIL_ALLOC;
    return NULL;
  }
  if ((err = throttle_lock_init (&q->alloc_lock)) != 0) {
    pthread_mutex_destroy (&q->lock);
    free (q);
    errno = err;
    *failed = THROTTLE_WBQ_FAIL_ALLOC;
    return NULL;
  }
  pthread_cond_init (&q->work, NULL);
  pthread_cond_init (&q->done, NULL);

  q->pool = throttle_mempool_create (nr, THROTTLE_WBQ_ELEM, lock);
  if (q->pool == NULL) {
    *failed = THROTTLE_WBQ_FAIL_POOL;
    goto fail;
  }
  q->bounce_len = bounce_len;
  q->bounce_pool = throttle_mempool_create (nr_writers, bounce_len, lock);
  if (q->bounce_pool == NULL) {
    *failed = THROTTLE_WBQ_FAIL_BOUNCE;
    goto fail;
  }
  for (i = 0; i < nr_writers; ++i)
    q->writers[i].bounce = throttle_mempool_try_alloc (q->bounce_pool);

  /* Records and links beside the pool, prefaulted and locked like it. */
  q->meta_len = throttle_wbq_meta_bytes (nr);
  q->meta = mmap (NULL, q->meta_len, PROT_READ|PROT_WRITE,
                  MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  if (q->meta == MAP_FAILED) {
    q->meta = NULL;
    *failed = THROTTLE_WBQ_FAIL_MMAP;
    goto fail;
  }
  memset (q->meta, 0, q->meta_len);
  if (lock && mlock (q->meta, q->meta_len) == -1) {
    *failed = THROTTLE_WBQ_FAIL_MLOCK;
    goto fail;
  }
  q->recs = q->meta;
  q->links = (struct wbq_link *) (q->recs + nr);
  for (i = nr; i-- > 0; ) {
    q->recs[i].next = q->free_recs;
    q->free_recs = &q->recs[i];
    q->links[i].next = q->free_link;
    q->free_link = i;
  }
  return q;

 fail:
  err = errno;
  throttle_wbq_destroy (q);
  errno = err;
  return NULL;
}

void
throttle_wbq_destroy (struct throttle_wbq *q)
{
  size_t i;

  if (q == NULL)
    return;
  for (i = 0; i < q->nr_writers; ++i)
    if (q->writers[i].bounce)
      throttle_mempool_free (q->bounce_pool, q->writers[i].bounce);
  throttle_mempool_destroy (q->pool);
  throttle_mempool_destroy (q->bounce_pool);
  if (q->meta)
    munmap (q->meta, q->meta_len);
  pthread_cond_destroy (&q->work);
  pthread_cond_destroy (&q->done);
  pthread_mutex_destroy (&q->lock);
  pthread_mutex_destroy (&q->alloc_lock);
  free (q);
}

static bool
overlaps (uint64_t a, uint64_t a_end, uint64_t b, uint64_t b_end)
{
  return a < b_end && b < a_end;
}

static bool
rec_overlaps (const struct throttle_wbq_rec *r, uint64_t offset, uint64_t end)
{
  return overlaps (r->offset, r->offset + r->count, offset, end);
}

/* Called with q->lock held.  Oldest pending write that may start. */
static struct throttle_wbq_rec *
pick (struct throttle_wbq *q)
{
  struct throttle_wbq_rec *r, *e;
  struct throttle_wbq_barrier *b;
  unsigned looked = 0;

  throttle_lock_assert_held (&q->lock);
  for (r = q->head; r && looked < PICK_WINDOW; r = r->next) {
    uint64_t end = r->offset + r->count;
    bool blocked = false;

    if (r->writing)
      continue;
    looked++;
    for (e = q->head; e != r && !blocked; e = e->next)
      blocked = rec_overlaps (e, r->offset, end);
    for (b = q->barriers; b && !blocked; b = b->next)
      blocked = (b->freeze || r->seq > b->seq) &&
        overlaps (b->offset, b->end, r->offset, end);
    if (!blocked)
      return r;
  }
  return NULL;
}

/* Called with q->lock held: give a chain of links, and their buffers,
 * back.
 */
static void
free_links (struct throttle_wbq *q, uint32_t first)
{
  uint32_t l, next;

  throttle_lock_assert_held (&q->lock);
  for (l = first; l != NO_SLOT; l = next) {
    next = q->links[l].next;
    throttle_mempool_free (q->pool, q->links[l].buf);
    q->links[l].buf = NULL;
    q->links[l].next = q->free_link;
    q->free_link = l;
  }
}

/* Called with q->lock held: the write is on the backend or failed. */
static void
retire (struct throttle_wbq *q, struct throttle_wbq_rec *r)
{
  throttle_lock_assert_held (&q->lock);
  if (r->prev) r->prev->next = r->next; else q->head = r->next;
  if (r->next) r->next->prev = r->prev; else q->tail = r->prev;

  free_links (q, r->first);
  q->pending--;
  q->pending_bytes -= r->count;
  q->hooks.retired (q->hooks.opaque, r->charged);

  r->prev = NULL;
  r->next = q->free_recs;
  q->free_recs = r;

  pthread_cond_broadcast (&q->done);
  pthread_cond_broadcast (&q->work);
}

/* Copy bytes [from, from+len) of a pending write's payload to dst.
 * Called with q->lock held, or by the writer of r (its links do not
 * change while it is pending).
 */
static void
copy_out (const struct throttle_wbq *q, const struct throttle_wbq_rec *r,
          uint32_t from, uint32_t len, unsigned char *dst)
{
  uint32_t l = r->first, skip = from / THROTTLE_WBQ_ELEM;
  uint32_t off = from % THROTTLE_WBQ_ELEM;

  while (skip--)
    l = q->links[l].next;
  while (len > 0) {
    uint32_t n = THROTTLE_WBQ_ELEM - off < len ? THROTTLE_WBQ_ELEM - off : len;

    memcpy (dst, (unsigned char *) q->links[l].buf + off, n);
    dst += n;
    len -= n;
    off = 0;
    l = q->links[l].next;
  }
}

/* Called with q->lock held: a background write of count bytes at
 * offset failed, or (count 0) a writer's flush did, with err.
 */
static void
record_error (struct throttle_wbq *q, int err, uint32_t count,
              uint64_t offset)
{
  throttle_lock_assert_held (&q->lock);
  q->error_seq++;
  q->error_unreported = true;
  q->last.errnum = err;
  q->last.offset = offset;
  q->last.count = count;
}

/* Called with q->lock held: wait until no write older than seq is
 * pending in [offset, end).
 */
static void
wait_older (struct throttle_wbq *q, uint64_t seq, uint64_t offset,
            uint64_t end)
{
  struct throttle_wbq_rec *r;

  throttle_lock_assert_held (&q->lock);
 again:
  for (r = q->head; r && r->seq < seq; r = r->next)
    if (rec_overlaps (r, offset, end)) {
      pthread_cond_wait (&q->done, &q->lock);
      goto again;
    }
}

/* Called with q->lock held: wait until no write older than seq is
 * pending anywhere.
 */
static void
wait_all_older (struct throttle_wbq *q, uint64_t seq)
{
  throttle_lock_assert_held (&q->lock);
  while (q->head && q->head->seq < seq)
    pthread_cond_wait (&q->done, &q->lock);
}

/* Called with q->lock held. */
static void
barrier_add (struct throttle_wbq *q, struct throttle_wbq_barrier *b,
             uint64_t offset, uint32_t count, bool freeze)
{
  throttle_lock_assert_held (&q->lock);
  b->offset = offset;
  b->end = offset + count;
  b->freeze = freeze;
  b->seq = freeze ? 0 : q->next_seq++;
  b->next = q->barriers;
  q->barriers = b;
}

/* Called with q->lock held. */
static void
barrier_remove (struct throttle_wbq *q, struct throttle_wbq_barrier *b)
{
  struct throttle_wbq_barrier **p;

  throttle_lock_assert_held (&q->lock);
  for (p = &q->barriers; *p != b; p = &(*p)->next)
    ;
  *p = b->next;
  pthread_cond_broadcast (&q->work);
}

bool
throttle_wbq_fits (const struct throttle_wbq *q, uint32_t count)
{
  size_t n = (count + THROTTLE_WBQ_ELEM - 1) / THROTTLE_WBQ_ELEM;

  return count != 0 && count <= THROTTLE_WBQ_MAX_WRITE && n <= q->nr;
}

int
throttle_wbq_queue (struct throttle_wbq *q, const void *buf, uint32_t count,
                    uint64_t offset, uint64_t charged,
                    throttle_cancel_fn cancel, void *opaque)
{
  size_t n = (count + THROTTLE_WBQ_ELEM - 1) / THROTTLE_WBQ_ELEM, i;
  const unsigned char *src = buf;
  uint32_t first = NO_SLOT, last = NO_SLOT, l;
  struct throttle_wbq_rec *r;

  /* Each buffer is filled as soon as it is had, and chained through a
   * link: holding a buffer guarantees a free link (there are as many
   * links as buffers), and nothing here needs stack beyond a few words.
   */
  throttle_lock (&q->alloc_lock);
  for (i = 0; i < n; ++i) {
    size_t len = count - i * THROTTLE_WBQ_ELEM < THROTTLE_WBQ_ELEM
      ? count - i * THROTTLE_WBQ_ELEM : THROTTLE_WBQ_ELEM;
    void *b = throttle_mempool_try_alloc (q->pool);

    if (b == NULL)
      b = throttle_mempool_alloc (q->pool, cancel, opaque,
                                  THROTTLE_WAIT_POLL_MS);
    if (b == NULL) {
      throttle_unlock (&q->alloc_lock);
      throttle_lock (&q->lock);
      free_links (q, first);
      throttle_unlock (&q->lock);
      return -1;
    }
    memcpy (b, src + i * THROTTLE_WBQ_ELEM, len);

    throttle_lock (&q->lock);
    l = q->free_link;
    q->free_link = q->links[l].next;
    q->links[l].buf = b;
    q->links[l].next = NO_SLOT;
    if (last == NO_SLOT)
      first = l;
    else
      q->links[last].next = l;
    last = l;
    throttle_unlock (&q->lock);
  }
  throttle_unlock (&q->alloc_lock);

  throttle_lock (&q->lock);
  r = q->free_recs;             /* as many records as buffers, too */
  q->free_recs = r->next;
  r->offset = offset;
  r->count = count;
  r->charged = charged;
  r->writing = false;
  r->first = first;
  r->seq = q->next_seq++;
  r->next = NULL;
  r->prev = q->tail;
  if (q->tail) q->tail->next = r; else q->head = r;
  q->tail = r;
  q->pending++;
  q->hooks.queued (q->hooks.opaque);
  q->pending_bytes += count;
  if (q->pending_bytes > q->peak_pending_bytes)
    q->peak_pending_bytes = q->pending_bytes;
  pthread_cond_signal (&q->work);
  throttle_unlock (&q->lock);
  return 0;
}

void
throttle_wbq_barrier_begin (struct throttle_wbq *q,
                            struct throttle_wbq_barrier *b,
                            uint64_t offset, uint32_t count)
{
  throttle_lock (&q->lock);
  barrier_add (q, b, offset, count, false);
  wait_older (q, b->seq, b->offset, b->end);
  throttle_unlock (&q->lock);
}

void
throttle_wbq_barrier_end (struct throttle_wbq *q,
                          struct throttle_wbq_barrier *b)
{
  throttle_lock (&q->lock);
  barrier_remove (q, b);
  throttle_unlock (&q->lock);
}

void
throttle_wbq_count_direct (struct throttle_wbq *q)
{
  throttle_lock (&q->lock);
  q->direct++;
  throttle_unlock (&q->lock);
}

bool
throttle_wbq_read_begin (struct throttle_wbq *q,
                         struct throttle_wbq_barrier *b,
                         uint64_t offset, uint32_t count)
{
  uint64_t end = offset + count;
  struct throttle_wbq_rec *r;
  bool any = false, busy;

  throttle_lock (&q->lock);
  for (r = q->head; r && !any; r = r->next)
    any = rec_overlaps (r, offset, end);
  if (!any) {
    throttle_unlock (&q->lock);
    return false;
  }

  /* Freeze what has not started; wait for what has. */
  barrier_add (q, b, offset, count, true);
  do {
    busy = false;
    for (r = q->head; r && !busy; r = r->next)
      busy = r->writing && rec_overlaps (r, offset, end);
    if (busy)
      pthread_cond_wait (&q->done, &q->lock);
  } while (busy);
  throttle_unlock (&q->lock);
  return true;
}

void
throttle_wbq_read_end (struct throttle_wbq *q, struct throttle_wbq_barrier *b,
                       void *buf, bool ok)
{
  struct throttle_wbq_rec *r;

  throttle_lock (&q->lock);
  if (ok) {
    for (r = q->head; r; r = r->next) {
      uint64_t lo, hi;

      if (!rec_overlaps (r, b->offset, b->end))
        continue;
      lo = r->offset > b->offset ? r->offset : b->offset;
      hi = r->offset + r->count < b->end ? r->offset + r->count : b->end;
      copy_out (q, r, lo - r->offset, hi - lo,
                (unsigned char *) buf + (lo - b->offset));
    }
  }
  barrier_remove (q, b);
  throttle_unlock (&q->lock);
}

void
throttle_wbq_flush_begin (struct throttle_wbq *q, struct throttle_wbq_flush *f)
{
  throttle_lock (&q->lock);
  f->seq = q->next_seq;
  f->errors = q->error_seq;
  throttle_unlock (&q->lock);
}

void
throttle_wbq_flush_wait (struct throttle_wbq *q,
                         const struct throttle_wbq_flush *f,
                         bool writers_flush)
{
  throttle_lock (&q->lock);
  wait_all_older (q, f->seq);
  if (writers_flush) {
    uint64_t gen = ++q->flush_gen;
    bool waiting;
    size_t i;

    pthread_cond_broadcast (&q->work);
    do {
      waiting = false;
      for (i = 0; i < q->nr_writers && !waiting; ++i)
        waiting = q->writers[i].flushed_gen < gen;
      if (waiting)
        pthread_cond_wait (&q->done, &q->lock);
    } while (waiting);
  }
  throttle_unlock (&q->lock);
}

uint64_t
throttle_wbq_flush_end (struct throttle_wbq *q,
                        const struct throttle_wbq_flush *f,
                        uint64_t *seen, struct throttle_wbq_error *last)
{
  uint64_t from, n = 0;

  throttle_lock (&q->lock);
  from = *seen < f->errors ? *seen : f->errors;
  if (from != q->error_seq) {
    n = q->error_seq - from;
    *seen = q->error_seq;
    q->error_unreported = false;
    *last = q->last;
  }
  throttle_unlock (&q->lock);
  return n;
}

uint64_t
throttle_wbq_seen_at_open (struct throttle_wbq *q)
{
  uint64_t seen;

  throttle_lock (&q->lock);
  seen = q->error_seq - (q->error_unreported ? 1 : 0);
  throttle_unlock (&q->lock);
  return seen;
}

void
throttle_wbq_drain (struct throttle_wbq *q)
{
  throttle_lock (&q->lock);
  wait_all_older (q, q->next_seq);
  throttle_unlock (&q->lock);
}

const void *
throttle_wbq_piece (struct throttle_wbq *q, size_t writer,
                    const struct throttle_wbq_job *job,
                    uint32_t done, uint32_t *n)
{
  const struct throttle_wbq_rec *r = job->rec;
  uint32_t left = r->count - done;

  if (q->links[r->first].next == NO_SLOT) {   /* one buffer: done is 0 */
    *n = left;
    return (const char *) q->links[r->first].buf + done;
  }
  *n = left < q->bounce_len ? left : q->bounce_len;
  copy_out (q, r, done, *n, q->writers[writer].bounce);
  return q->writers[writer].bounce;
}

enum throttle_wbq_job_kind
throttle_wbq_next (struct throttle_wbq *q, size_t writer,
                   struct throttle_wbq_job *job)
{
  struct wbq_writer *w = &q->writers[writer];
  struct throttle_wbq_rec *r = NULL;

  throttle_lock (&q->lock);
  for (;;) {
    if (w->flushed_gen < q->flush_gen) {
      job->kind = THROTTLE_WBQ_FLUSH;
      job->gen = q->flush_gen;
      break;
    }
    r = pick (q);
    if (r) {
      r->writing = true;
      job->kind = THROTTLE_WBQ_WRITE;
      job->rec = r;
      job->count = r->count;
      job->offset = r->offset;
      job->seq = r->seq;
      break;
    }
    if (q->stopping && q->head == NULL) {
      job->kind = THROTTLE_WBQ_STOP;
      break;
    }
    pthread_cond_wait (&q->work, &q->lock);
  }
  throttle_unlock (&q->lock);
  return job->kind;
}

void
throttle_wbq_write_done (struct throttle_wbq *q,
                         const struct throttle_wbq_job *job, int err)
{
  throttle_lock (&q->lock);
  if (err) {
    record_error (q, err, job->count, job->offset);
    q->failed++;
  }
  else {
    q->written++;
    q->written_bytes += job->count;
  }
  retire (q, job->rec);
  throttle_unlock (&q->lock);
}

void
throttle_wbq_flush_done (struct throttle_wbq *q, size_t writer,
                         const struct throttle_wbq_job *job, int err)
{
  throttle_lock (&q->lock);
  if (err)
    record_error (q, err, 0, 0);
  q->writers[writer].flushed_gen = job->gen;
  pthread_cond_broadcast (&q->done);
  throttle_unlock (&q->lock);
}

void
throttle_wbq_stop (struct throttle_wbq *q)
{
  throttle_lock (&q->lock);
  q->stopping = true;
  pthread_cond_broadcast (&q->work);
  throttle_unlock (&q->lock);
}

void
throttle_wbq_get_stats (struct throttle_wbq *q, struct throttle_wbq_stats *s)
{
  throttle_lock (&q->lock);
  s->pending = q->pending;
  s->pending_bytes = q->pending_bytes;
  s->peak_pending_bytes = q->peak_pending_bytes;
  s->written = q->written;
  s->written_bytes = q->written_bytes;
  s->failed = q->failed;
  s->direct = q->direct;
  s->pool_used = throttle_mempool_in_use (q->pool) * THROTTLE_WBQ_ELEM;
  s->pool_size = q->nr * THROTTLE_WBQ_ELEM;
  s->nr = q->nr;
  s->error_unreported = q->error_unreported;
  s->last = q->last;
  throttle_unlock (&q->lock);
}
