/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the write-behind queue, the engine of
 * throttle-mode=writeback.
 *
 * A write is copied into page-sized buffers of a preallocated pool and
 * queued; writer threads take queued writes and put them on the
 * backend.  Nothing here knows nbdkit or makes a backend call: the
 * caller makes each call between two functions of this file, one that
 * puts it in its place in the order and one that says what came of it.
 * Nothing here allocates after throttle_wbq_create.
 *
 * What the queue guarantees:
 * - Overlapping writes reach the backend in the order they were
 *   queued: a queued write does not start while an older overlapping
 *   one is pending.  Ordering is by a sequence number taken under the
 *   queue's lock.
 * - A request that goes to the backend directly registers a barrier:
 *   it waits for older overlapping pending writes, and newer
 *   overlapping writes wait for it.
 * - A read sees the newest data: it freezes every overlapping write
 *   not yet started, waits for those already started, and after the
 *   backend read lays the frozen writes over the result, oldest first.
 * - A flush waits for every write queued before it began, and no
 *   other.
 * - A failure (of a background write, or of a writer's flush) is
 *   reported by every flush waiting when it happened and by the next
 *   flush of every connection open then; see throttle_wbq_flush_end.
 *
 * Locks: each queue has one mutex, taken only inside these functions
 * (its place among the filter's: HACKING.md, "Locks").  No function
 * here is called with it held, nor from 'retired': checking builds abort
 * if one is (lib/throttle-lock.h).  Those that wait say for whose
 * call; they sleep with the lock released.  The others hold it
 * briefly and never sleep.
 */

#ifndef THROTTLE_WBQ_H
#define THROTTLE_WBQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "throttle-wait.h"

/* A pending write's payload lives in page-sized buffers: a swap device
 * writes pages, and a 4 KiB write must not pin more than 4 KiB.
 */
#define THROTTLE_WBQ_ELEM 4096

/* Larger writes (or larger than the pool) are not queued but written
 * directly: 2 MiB covers the kernel's usual largest request
 * (max_sectors_kb 1280).
 */
#define THROTTLE_WBQ_MAX_WRITE (2 * 1024 * 1024)

/* Buffers are numbered by 32 bits, one value meaning none. */
#define THROTTLE_WBQ_MAX_BUFS (UINT32_MAX - 1)

struct throttle_wbq;
struct throttle_wbq_rec;

/* Called when a write leaves the queue (on the backend, or failed),
 * with the units it was queued with, and with the queue's lock held:
 * must not block, nor call any function of this file.
 */
typedef void throttle_wbq_retired_fn (void *opaque, uint64_t charged);

/* A queue of 'nr' buffers (each with a link and a record) for
 * 'nr_writers' writer threads, numbered from 0, each with a bounce
 * buffer of 'bounce_len' bytes (a multiple of THROTTLE_WBQ_ELEM, at
 * most throttle_wbq_max_write of the pool): a write larger than that
 * reaches the backend in pieces (throttle_wbq_piece).  All of it lives
 * in one mapping of throttle_wbq_memory bytes, touched, and locked if
 * 'lock'.  NULL with errno set on error.
 */
extern struct throttle_wbq *
throttle_wbq_create (size_t nr, size_t nr_writers, size_t bounce_len,
                     bool lock, throttle_wbq_retired_fn *retired,
                     void *opaque);
/* Called after throttle_wbq_stop, once no thread is inside any other
 * function of this file.
 */
extern void throttle_wbq_destroy (struct throttle_wbq *q);

/* Bytes of the mapping of a queue of pool_bytes (a multiple of
 * THROTTLE_WBQ_ELEM) with nr_writers bounce buffers of bounce_len: the
 * pool, the writers' buffers, the records and links.  The caller
 * ensures pool_bytes is at most half of RAM, so nothing overflows.
 */
extern uint64_t throttle_wbq_memory (uint64_t pool_bytes, size_t nr_writers,
                                     size_t bounce_len);
/* The largest write that can be queued in a pool of pool_bytes. */
extern size_t throttle_wbq_max_write (uint64_t pool_bytes);

/* --- the requests' side ------------------------------------------- */

/* Whether a write of count bytes can be queued at all (else the caller
 * writes it directly, under a barrier).
 */
extern bool throttle_wbq_fits (const struct throttle_wbq *q, uint32_t count);

/* Copies a write (throttle_wbq_fits) into the pool and queues it with
 * 'charged', which 'retired' is given back.  Waits, first come
 * first served, until every buffer it needs is free (a writer's
 * throttle_wbq_write_done frees them), asking cancel every
 * THROTTLE_WAIT_POLL_MS: a write never holds part of the pool while it
 * waits for the rest, as two such writes could forever.  Returns 0
 * once queued, or -1 if cancelled while waiting or the queue stopped:
 * then nothing is queued and 'charged' stays the caller's.
 */
extern int throttle_wbq_queue (struct throttle_wbq *q, const void *buf,
                               uint32_t count, uint64_t offset,
                               uint64_t charged, throttle_cancel_fn cancel,
                               void *opaque);

/* On the caller's stack while its request is registered.  Private. */
struct throttle_wbq_barrier {
  struct throttle_wbq_barrier *next;
  uint64_t offset, end;
  uint64_t seq;                 /* writes newer than this wait for it */
  bool freeze;                  /* a read: no overlapping write starts */
};

/* A request that goes to the backend directly (a zero, a trim, a write
 * that is not queued, counted in the stats if 'write', extents):
 * register b for [offset, offset+count) and wait until no older
 * overlapping write is pending (the writers' throttle_wbq_write_done).
 * The caller then makes its backend call and calls
 * throttle_wbq_barrier_end; meanwhile newer overlapping writes do not
 * start.
 */
extern void throttle_wbq_barrier_begin (struct throttle_wbq *q,
                                        struct throttle_wbq_barrier *b,
                                        uint64_t offset, uint32_t count,
                                        bool write);
extern void throttle_wbq_barrier_end (struct throttle_wbq *q,
                                      struct throttle_wbq_barrier *b);

/* A read of [offset, offset+count).  Returns false if no pending write
 * overlaps it: the caller reads the backend and is done.  Otherwise b
 * is registered (overlapping writes not yet started stay so) and the
 * writes already started have finished (it waits for their
 * throttle_wbq_write_done): the caller reads the backend
 * into buf and calls throttle_wbq_read_end, which lays the pending
 * writes over buf if 'ok' (the backend read succeeded).
 */
extern bool throttle_wbq_read_begin (struct throttle_wbq *q,
                                     struct throttle_wbq_barrier *b,
                                     uint64_t offset, uint32_t count);
extern void throttle_wbq_read_end (struct throttle_wbq *q,
                                   struct throttle_wbq_barrier *b,
                                   void *buf, bool ok);

/* A flush: throttle_wbq_flush_begin marks where it arrived, _wait waits
 * for every write queued before that (the writers' _write_done), and
 * if writers_flush (the backend promises nothing about the writers'
 * own handles without a flush on each) for each writer to flush once
 * after that (each writer's _flush_done).  The caller then flushes its
 * own backend handle and calls _end.
 */
struct throttle_wbq_flush {
  uint64_t seq;                 /* writes older than this precede it */
  uint64_t errors;              /* the error count when it arrived */
};
extern void throttle_wbq_flush_begin (struct throttle_wbq *q,
                                      struct throttle_wbq_flush *f);
extern void throttle_wbq_flush_wait (struct throttle_wbq *q,
                                     const struct throttle_wbq_flush *f,
                                     bool writers_flush);
/* A failure, as a message tells it. */
struct throttle_wbq_error {
  int errnum;
  uint64_t offset;
  uint32_t count;               /* 0: a writer's flush failed */
};
/* How many failures the flush reports: those since it arrived, and
 * those before that its connection has not been told of (*seen, the
 * connection's count, which only these functions touch).  Another
 * flush of the connection that reports first does not make this one
 * succeed.  When nonzero, *last is the last failure, and the queue no
 * longer has an unreported failure.
 */
extern uint64_t throttle_wbq_flush_end (struct throttle_wbq *q,
                                        const struct throttle_wbq_flush *f,
                                        uint64_t *seen,
                                        struct throttle_wbq_error *last);
/* A new connection's *seen: a failure no flush has reported yet is
 * told to its next flush too.
 */
extern uint64_t throttle_wbq_seen_at_open (struct throttle_wbq *q);

/* --- the writers' side -------------------------------------------- */

enum throttle_wbq_job_kind {
  THROTTLE_WBQ_WRITE,           /* write buf, then throttle_wbq_write_done */
  THROTTLE_WBQ_FLUSH,           /* flush, then throttle_wbq_flush_done */
  THROTTLE_WBQ_STOP,            /* the queue is stopped and empty: return */
};

struct throttle_wbq_job {
  enum throttle_wbq_job_kind kind;
  uint32_t count;               /* WRITE: its payload, throttle_wbq_piece */
  uint64_t offset;
  uint64_t seq;
  uint64_t gen;                 /* FLUSH: the flush generation */
  struct throttle_wbq_rec *rec; /* private */
};

/* Writer number 'writer' (each writer thread its own) waits for its
 * next job: a flush that some flush waits for, else the oldest queued
 * write that may start, else STOP once the queue is stopped and empty.
 * What ends the wait: _queue, _barrier_end, _read_end, _flush_wait,
 * another writer's _write_done, _stop.  The writer must finish each
 * job (_write_done, _flush_done) before asking for the next.
 */
extern enum throttle_wbq_job_kind
throttle_wbq_next (struct throttle_wbq *q, size_t writer,
                   struct throttle_wbq_job *job);
/* Bytes [done, done + *n) of the payload of a WRITE job this writer
 * holds, contiguous: the record's own buffer when it has one, else a
 * copy in the writer's bounce buffer, so *n is at most the bounce
 * length.  Valid until the writer's next call of this or _write_done.
 * The writer writes the pieces in order, done from 0 to job->count:
 * the record stays started until _write_done, so newer overlapping
 * writes, and reads of its range, wait for all of it.  No lock: a
 * started record's buffers change only when it is retired.
 */
extern const void *throttle_wbq_piece (struct throttle_wbq *q, size_t writer,
                                       const struct throttle_wbq_job *job,
                                       uint32_t done, uint32_t *n);
/* The job's backend calls returned: err 0, or the first errno. */
extern void throttle_wbq_write_done (struct throttle_wbq *q,
                                     const struct throttle_wbq_job *job,
                                     int err);
extern void throttle_wbq_flush_done (struct throttle_wbq *q, size_t writer,
                                     const struct throttle_wbq_job *job,
                                     int err);
/* The writers stop once nothing is pending (they get STOP). */
extern void throttle_wbq_stop (struct throttle_wbq *q);

/* Every number a uint64_t, so that a table can point at each. */
struct throttle_wbq_stats {
  uint64_t pending, pending_bytes, peak_pending_bytes;
  uint64_t written, written_bytes, failed, direct;
  uint64_t pool_used, pool_size;        /* bytes */
  uint64_t error_unreported;    /* 1: no flush has reported the last one */
  struct throttle_wbq_error last;       /* the last failure, if any */
};
extern void throttle_wbq_get_stats (struct throttle_wbq *q,
                                    struct throttle_wbq_stats *s);

#endif /* THROTTLE_WBQ_H */
