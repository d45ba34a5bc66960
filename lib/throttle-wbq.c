/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the write-behind queue.
 *
 * Lock order: HACKING.md, "Locks".  The lock is dropped by every wait:
 * on work, on done, and for buffers (throttle_wait, lib/throttle-wait.c).
 *
 * Why it is shaped like this:
 *
 * - Nothing may allocate once the queue exists: the payload goes into
 *   page-sized buffers of one locked, prefaulted mapping, beside the
 *   writers' bounce buffers, the records describing pending writes and
 *   the links chaining a write's buffers.  Buffer i's link is links[i],
 *   so the free buffers are a chain too, and a write takes its buffers
 *   as the head of that chain; its record is recs[i] of its first
 *   buffer i, so whoever holds buffers has a record.
 *
 * - A write waits for all of its buffers at once, in the FIFO of
 *   throttle_wait: two writes each holding part of the pool while
 *   waiting for the rest would deadlock.
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
#include "throttle-wbq.h"

/* How many queued writes a writer looks at for one it may start:
 * bounds the time under the lock when many are blocked by overlaps.
 */
#define PICK_WINDOW 64

#define NO_SLOT UINT32_MAX

struct throttle_wbq_rec {       /* a pending write */
  struct throttle_wbq_rec *prev, *next; /* pending list (seq order) */
  uint64_t seq;
  uint64_t offset;
  uint64_t charged;
  uint32_t count;
  uint32_t first;               /* its first buffer */
  bool writing;
};

struct wbq_writer {
  uint64_t flushed_gen;         /* lock */
  void *bounce;                 /* the writer's own */
};

struct throttle_wbq {
  pthread_mutex_t lock;         /* everything below but what is marked */
  pthread_cond_t work;          /* writers: something may be startable */
  pthread_cond_t done;          /* a write finished, a writer flushed */
  struct throttle_wbq_rec *head, *tail;
  struct throttle_wait_queue bufq;      /* writes waiting for buffers */
  uint32_t free_buf;            /* the free buffers' chain */
  size_t nr_free;
  struct throttle_wbq_barrier *barriers;
  uint64_t next_seq;
  bool stopping;

  /* Set at creation: the mapping, and what lies in it. */
  unsigned char *map;           /* buffer i at map + i * THROTTLE_WBQ_ELEM */
  size_t map_len;
  uint32_t *links;              /* links[i]: the buffer after i, or NO_SLOT */
  struct throttle_wbq_rec *recs;       /* recs[i]: of the write whose
                                           first buffer is i */
  size_t nr;                    /* buffers, links and records */
  size_t bounce_len;

  uint64_t error_seq;
  bool error_unreported;
  struct throttle_wbq_error last;

  uint64_t flush_gen;

  uint64_t pending, pending_bytes, peak_pending_bytes;
  uint64_t written, written_bytes, failed, direct;

  throttle_wbq_retired_fn *retired;     /* set at creation */
  void *opaque;
  size_t nr_writers;
  struct wbq_writer writers[];
};

size_t
throttle_wbq_max_write (uint64_t pool_bytes)
{
  return pool_bytes < THROTTLE_WBQ_MAX_WRITE
    ? pool_bytes : THROTTLE_WBQ_MAX_WRITE;
}

uint64_t
throttle_wbq_memory (uint64_t pool_bytes, size_t nr_writers,
                     size_t bounce_len)
{
  uint64_t nr = pool_bytes / THROTTLE_WBQ_ELEM;

  return pool_bytes + (uint64_t) nr_writers * bounce_len +
    nr * (sizeof (struct throttle_wbq_rec) + sizeof (uint32_t));
}

struct throttle_wbq *
throttle_wbq_create (size_t nr, size_t nr_writers, size_t bounce_len,
                     bool lock, throttle_wbq_retired_fn *retired,
                     void *opaque)
{
  struct throttle_wbq *q;
  unsigned char *bounce;
  size_t i;
  int err;

  q = calloc (1, sizeof *q + nr_writers * sizeof q->writers[0]);
  if (q == NULL)
    return NULL;
  if ((err = throttle_lock_init (&q->lock)) != 0) {
    free (q);
    errno = err;
    return NULL;
  }
  pthread_cond_init (&q->work, NULL);
  pthread_cond_init (&q->done, NULL);
  throttle_wait_queue_init (&q->bufq, &q->lock);
  q->retired = retired;
  q->opaque = opaque;
  q->nr = q->nr_free = nr;
  q->nr_writers = nr_writers;
  q->bounce_len = bounce_len;

  /* Written to fault every page in (MAP_POPULATE populates nothing
   * under mlockall (MCL_ONFAULT)), then locked.
   */
  q->map_len = throttle_wbq_memory ((uint64_t) nr * THROTTLE_WBQ_ELEM,
                                    nr_writers, bounce_len);
  q->map = mmap (NULL, q->map_len, PROT_READ|PROT_WRITE,
                 MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  if (q->map == MAP_FAILED) {
    q->map = NULL;
    goto fail;
  }
  memset (q->map, 0, q->map_len);
  if (lock && mlock (q->map, q->map_len) == -1)
    goto fail;
  bounce = q->map + nr * THROTTLE_WBQ_ELEM;
  for (i = 0; i < nr_writers; ++i)
    q->writers[i].bounce = bounce + i * bounce_len;
  q->recs = (struct throttle_wbq_rec *) (bounce + nr_writers * bounce_len);
  q->links = (uint32_t *) (q->recs + nr);
  q->free_buf = NO_SLOT;
  for (i = nr; i-- > 0; ) {
    q->links[i] = q->free_buf;
    q->free_buf = i;
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
  if (q == NULL)
    return;
  if (q->map)
    munmap (q->map, q->map_len);
  pthread_cond_destroy (&q->work);
  pthread_cond_destroy (&q->done);
  pthread_mutex_destroy (&q->lock);
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

/* A throttle_acquire_fn, called with q->lock held: w->want buffers,
 * all or none, as a chain from w->got.
 */
static bool
take_bufs (void *owner, struct throttle_waiter *w)
{
  struct throttle_wbq *q = owner;
  uint32_t l = q->free_buf;
  uint64_t i;

  throttle_lock_assert_held (&q->lock);
  if (q->nr_free < w->want)
    return false;
  for (i = 1; i < w->want; ++i)
    l = q->links[l];
  w->got = q->free_buf;
  q->free_buf = q->links[l];
  q->links[l] = NO_SLOT;
  q->nr_free -= w->want;
  return true;
}

/* Called with q->lock held: a chain of buffers goes back to the free
 * chain.  The caller grants the waiters.
 */
static void
free_bufs (struct throttle_wbq *q, uint32_t first)
{
  uint32_t l = first;

  throttle_lock_assert_held (&q->lock);
  q->nr_free++;
  while (q->links[l] != NO_SLOT) {
    l = q->links[l];
    q->nr_free++;
  }
  q->links[l] = q->free_buf;
  q->free_buf = first;
}

/* A throttle_putback_fn, called with q->lock held. */
static void
put_bufs (void *owner, struct throttle_waiter *w)
{
  free_bufs (owner, w->got);
}

/* Called with q->lock held: the write is on the backend or failed. */
static void
retire (struct throttle_wbq *q, struct throttle_wbq_rec *r)
{
  throttle_lock_assert_held (&q->lock);
  if (r->prev) r->prev->next = r->next; else q->head = r->next;
  if (r->next) r->next->prev = r->prev; else q->tail = r->prev;

  free_bufs (q, r->first);
  throttle_wait_grant (&q->bufq, take_bufs, q);
  q->pending--;
  q->pending_bytes -= r->count;
  q->retired (q->opaque, r->charged);

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
    l = q->links[l];
  while (len > 0) {
    uint32_t n = THROTTLE_WBQ_ELEM - off < len ? THROTTLE_WBQ_ELEM - off : len;

    memcpy (dst, q->map + (size_t) l * THROTTLE_WBQ_ELEM + off, n);
    dst += n;
    len -= n;
    off = 0;
    l = q->links[l];
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

/* Called with q->lock held: wait until no write older than seq (and,
 * if started, already started) is pending in [offset, end).
 */
static void
wait_older (struct throttle_wbq *q, uint64_t seq, uint64_t offset,
            uint64_t end, bool started)
{
  struct throttle_wbq_rec *r;

  throttle_lock_assert_held (&q->lock);
 again:
  for (r = q->head; r && r->seq < seq; r = r->next)
    if ((r->writing || !started) && rec_overlaps (r, offset, end)) {
      pthread_cond_wait (&q->done, &q->lock);
      goto again;
    }
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
  struct throttle_waiter w = {
    .want = (count + THROTTLE_WBQ_ELEM - 1) / THROTTLE_WBQ_ELEM,
  };
  const unsigned char *src = buf;
  struct throttle_wbq_rec *r;
  uint32_t done, l;

  throttle_lock (&q->lock);
  if ((q->bufq.head || !take_bufs (q, &w)) &&
      throttle_wait (&q->bufq, &w, &q->stopping, cancel, opaque,
                     THROTTLE_WAIT_POLL_MS, take_bufs, put_bufs, q) == -1) {
    throttle_unlock (&q->lock);
    return -1;
  }
  throttle_unlock (&q->lock);

  /* The buffers are this write's alone until it is queued: they are
   * filled without the lock.
   */
  for (l = w.got, done = 0; done < count; l = q->links[l]) {
    uint32_t n = count - done < THROTTLE_WBQ_ELEM
      ? count - done : THROTTLE_WBQ_ELEM;

    memcpy (q->map + (size_t) l * THROTTLE_WBQ_ELEM, src + done, n);
    done += n;
  }

  throttle_lock (&q->lock);
  r = &q->recs[w.got];
  r->offset = offset;
  r->count = count;
  r->charged = charged;
  r->writing = false;
  r->first = w.got;
  r->seq = q->next_seq++;
  r->next = NULL;
  r->prev = q->tail;
  if (q->tail) q->tail->next = r; else q->head = r;
  q->tail = r;
  q->pending++;
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
                            uint64_t offset, uint32_t count, bool write)
{
  throttle_lock (&q->lock);
  q->direct += write;
  barrier_add (q, b, offset, count, false);
  wait_older (q, b->seq, b->offset, b->end, false);
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

bool
throttle_wbq_read_begin (struct throttle_wbq *q,
                         struct throttle_wbq_barrier *b,
                         uint64_t offset, uint32_t count)
{
  uint64_t end = offset + count;
  struct throttle_wbq_rec *r;
  bool any = false;

  throttle_lock (&q->lock);
  for (r = q->head; r && !any; r = r->next)
    any = rec_overlaps (r, offset, end);
  if (!any) {
    throttle_unlock (&q->lock);
    return false;
  }

  /* Freeze what has not started; wait for what has. */
  barrier_add (q, b, offset, count, true);
  wait_older (q, UINT64_MAX, offset, end, true);
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
  wait_older (q, f->seq, 0, UINT64_MAX, false);
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

const void *
throttle_wbq_piece (struct throttle_wbq *q, size_t writer,
                    const struct throttle_wbq_job *job,
                    uint32_t done, uint32_t *n)
{
  const struct throttle_wbq_rec *r = job->rec;
  uint32_t left = r->count - done;

  if (q->links[r->first] == NO_SLOT) {        /* one buffer: done is 0 */
    *n = left;
    return q->map + (size_t) r->first * THROTTLE_WBQ_ELEM;
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
  throttle_wait_wake_all (&q->bufq);
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
  s->pool_used = (q->nr - q->nr_free) * THROTTLE_WBQ_ELEM;
  s->pool_size = q->nr * THROTTLE_WBQ_ELEM;
  s->error_unreported = q->error_unreported;
  s->last = q->last;
  throttle_unlock (&q->lock);
}
