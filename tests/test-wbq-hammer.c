/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit test of lib/throttle-wbq.c, the write-behind queue, from many
 * threads: submitters queue, write directly, read and flush as the
 * filter's request threads do while writer threads take the jobs
 * (the single-threaded tests: test-wbq.c).  The backend is an array.
 */

#include <config.h>

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "throttle-wbq.h"
#include "wbq-harness.h"
#include "check-main.h"

/* --- many threads ---------------------------------------------------- *
 *
 * Submitters queue writes, write directly (each in a region of its own:
 * two direct writes that overlap are not ordered, in NBD either),
 * read and flush; writer threads put queued writes on the backend.
 * Every block of the backend holds a stamp: the version of the write
 * that put it there, versions being given in the order the queue
 * orders the requests (under 'order', around the call that takes the
 * queue's sequence number).  Checked:
 * - every block a write puts on the backend is newer than what it
 *   replaces (overlapping writes in order);
 * - no two of a queued write, a direct write and a frozen read's
 *   backend read overlap at once;
 * - a read returns, per block, a version at least the newest
 *   acknowledged when it began (so the reader's own writes too) and at
 *   most the newest issued when it ended, written to that block;
 * - after a flush the backend holds at least what was acknowledged
 *   when it began;
 * - at the end the backend holds the newest version of every block,
 *   and every unit queued was retired.
 */

#define H_BLOCK 512
#define H_BLOCKS 64
#define H_WORDS (H_BLOCK / 8)
#define H_SUBMITTERS 8
#define H_WRITERS 4
#define H_OPS 1500
#define H_REGION (H_BLOCKS / H_SUBMITTERS)

static struct {
  struct throttle_wbq *q;

  pthread_mutex_t order;        /* the fields up to dev_lock */
  uint64_t next_version;
  uint64_t issued[H_BLOCKS];    /* newest version sent */
  uint64_t acked[H_BLOCKS];     /* newest version acknowledged */
  uint32_t *first, *end;        /* blocks each version wrote */
  unsigned long queued_writes, queued_units, direct_writes;

  pthread_mutex_t dev_lock;     /* the fields below */
  uint64_t dev[H_BLOCKS][H_WORDS];
  unsigned busy_queued[H_BLOCKS], busy_direct[H_BLOCKS];
  unsigned busy_frozen[H_BLOCKS];
} h;

/* Not ck_assert: Check logs where every passing ck_assert is, with a
 * write(2) each, which would slow the hammer down a hundredfold.
 */
static void
check (bool ok, uint32_t block, const char *what)
{
  if (!ok)
    ck_abort_msg ("block %u: %s", block, what);
}

static uint64_t
stamp (uint64_t version, uint32_t block)
{
  return version << 8 | block;
}

static void
fill (uint64_t *buf, uint64_t version, uint32_t b0, uint32_t n)
{
  uint32_t i, k;

  for (i = 0; i < n; ++i)
    for (k = 0; k < H_WORDS; ++k)
      buf[i * H_WORDS + k] = stamp (version, b0 + i);
}

/* The version a block holds, asserting that it is whole and a version
 * written to this block.  Called with h.order or h.dev_lock held, or
 * on a private copy.
 */
static uint64_t
version_of (const uint64_t *block, uint32_t b)
{
  uint64_t v = block[0] >> 8;
  uint32_t k;

  for (k = 0; k < H_WORDS; ++k)
    check (block[k] == stamp (v, b), b, "torn or misplaced");
  return v;
}

enum busy { QUEUED, DIRECT, FROZEN };

/* Called with h.dev_lock held: what may not overlap a 'kind' access. */
static void
busy_mark (enum busy kind, uint32_t b0, uint32_t n, int delta)
{
  uint32_t b;

  for (b = b0; b < b0 + n; ++b) {
    if (delta > 0) {
      check (kind == FROZEN ||
             (h.busy_queued[b] == 0 && h.busy_direct[b] == 0), b,
             "two writes at once");
      check (kind != QUEUED || h.busy_frozen[b] == 0, b,
             "written under a read");
      check (kind != FROZEN || h.busy_queued[b] == 0, b,
             "read while written");
    }
    switch (kind) {
    case QUEUED: h.busy_queued[b] += delta; break;
    case DIRECT: h.busy_direct[b] += delta; break;
    case FROZEN: h.busy_frozen[b] += delta; break;
    }
  }
}

/* The backend: block by block, yielding once midway so that accesses
 * interleave.
 */
static void
dev_write (const uint64_t *buf, uint32_t b0, uint32_t n, enum busy kind)
{
  uint32_t i;

  pthread_mutex_lock (&h.dev_lock);
  busy_mark (kind, b0, n, 1);
  pthread_mutex_unlock (&h.dev_lock);
  for (i = 0; i < n; ++i) {
    pthread_mutex_lock (&h.dev_lock);
    check (version_of (h.dev[b0 + i], b0 + i) <
           version_of (buf + i * H_WORDS, b0 + i), b0 + i,
           "an older write after a newer one");
    memcpy (h.dev[b0 + i], buf + i * H_WORDS, H_BLOCK);
    pthread_mutex_unlock (&h.dev_lock);
    if (i == n / 2)
      sched_yield ();
  }
  pthread_mutex_lock (&h.dev_lock);
  busy_mark (kind, b0, n, -1);
  pthread_mutex_unlock (&h.dev_lock);
}

static void
dev_read (uint64_t *buf, uint32_t b0, uint32_t n, bool frozen)
{
  uint32_t i;

  if (frozen) {
    pthread_mutex_lock (&h.dev_lock);
    busy_mark (FROZEN, b0, n, 1);
    pthread_mutex_unlock (&h.dev_lock);
  }
  for (i = 0; i < n; ++i) {
    pthread_mutex_lock (&h.dev_lock);
    memcpy (buf + i * H_WORDS, h.dev[b0 + i], H_BLOCK);
    pthread_mutex_unlock (&h.dev_lock);
    if (i == n / 2)
      sched_yield ();
  }
  if (frozen) {
    pthread_mutex_lock (&h.dev_lock);
    busy_mark (FROZEN, b0, n, -1);
    pthread_mutex_unlock (&h.dev_lock);
  }
}

/* A piece of a queued write (bounce-sized, so whole blocks). */
static void
h_piece (const void *buf, uint32_t n, uint64_t offset, void *opaque)
{
  dev_write (buf, offset / H_BLOCK, n / H_BLOCK, QUEUED);
}

static void *
h_writer (void *vp)
{
  size_t w = (uintptr_t) vp;
  struct throttle_wbq_job job;

  for (;;) {
    switch (throttle_wbq_next (h.q, w, &job)) {
    case THROTTLE_WBQ_WRITE:
      for_each_piece (h.q, w, &job, h_piece, NULL);
      throttle_wbq_write_done (h.q, &job, 0);
      break;
    case THROTTLE_WBQ_FLUSH:
      throttle_wbq_flush_done (h.q, w, &job, 0);
      break;
    case THROTTLE_WBQ_STOP:
      return NULL;
    }
  }
}

/* Called with h.order held: a new version for blocks [b0, b0+n). */
static uint64_t
new_version (uint32_t b0, uint32_t n)
{
  uint64_t v = h.next_version++;
  uint32_t b;

  h.first[v] = b0;
  h.end[v] = b0 + n;
  for (b = b0; b < b0 + n; ++b)
    h.issued[b] = v;
  return v;
}

/* Called with h.order held. */
static void
acked (uint64_t v, uint32_t b0, uint32_t n)
{
  uint32_t b;

  for (b = b0; b < b0 + n; ++b)
    if (h.acked[b] < v)
      h.acked[b] = v;
}

static void
h_queued_write (uint64_t *buf, unsigned *seed)
{
  uint32_t b0 = rand_r (seed) % H_BLOCKS;
  uint32_t n = 1 + rand_r (seed) % (H_BLOCKS - b0 < 16 ? H_BLOCKS - b0 : 16);
  uint64_t v;

  pthread_mutex_lock (&h.order);
  v = new_version (b0, n);
  fill (buf, v, b0, n);
  check (throttle_wbq_queue (h.q, buf, n * H_BLOCK, b0 * H_BLOCK, n,
                             NULL, NULL) == 0, b0, "not queued");
  h.queued_writes++;
  h.queued_units += n;
  acked (v, b0, n);
  pthread_mutex_unlock (&h.order);
}

static void
h_direct_write (uint64_t *buf, unsigned *seed, uint32_t region)
{
  uint32_t b0 = region + rand_r (seed) % H_REGION;
  uint32_t n = 1 + rand_r (seed) % (region + H_REGION - b0);
  struct throttle_wbq_barrier b;
  uint64_t v;

  pthread_mutex_lock (&h.order);
  v = new_version (b0, n);
  fill (buf, v, b0, n);
  throttle_wbq_barrier_begin (h.q, &b, b0 * H_BLOCK, n * H_BLOCK, true);
  h.direct_writes++;
  pthread_mutex_unlock (&h.order);

  dev_write (buf, b0, n, DIRECT);
  throttle_wbq_barrier_end (h.q, &b);

  pthread_mutex_lock (&h.order);
  acked (v, b0, n);
  pthread_mutex_unlock (&h.order);
}

static void
h_read (uint64_t *buf, unsigned *seed)
{
  uint32_t b0 = rand_r (seed) % H_BLOCKS;
  uint32_t n = 1 + rand_r (seed) % (H_BLOCKS - b0 < 16 ? H_BLOCKS - b0 : 16);
  uint64_t lo[16], hi[16];
  struct throttle_wbq_barrier b;
  bool frozen;
  uint32_t i;

  pthread_mutex_lock (&h.order);
  memcpy (lo, &h.acked[b0], n * sizeof lo[0]);
  pthread_mutex_unlock (&h.order);

  frozen = throttle_wbq_read_begin (h.q, &b, b0 * H_BLOCK, n * H_BLOCK);
  dev_read (buf, b0, n, frozen);
  if (frozen)
    throttle_wbq_read_end (h.q, &b, buf, true);

  pthread_mutex_lock (&h.order);
  memcpy (hi, &h.issued[b0], n * sizeof hi[0]);
  for (i = 0; i < n; ++i) {
    uint64_t v = version_of (buf + i * H_WORDS, b0 + i);

    check (v >= lo[i], b0 + i, "read older than what was acknowledged");
    check (v <= hi[i], b0 + i, "read what was never written");
    check (v == 0 || (h.first[v] <= b0 + i && b0 + i < h.end[v]), b0 + i,
           "read what was written elsewhere");
  }
  pthread_mutex_unlock (&h.order);
}

static void
h_flush (unsigned *seed, uint64_t *seen)
{
  struct throttle_wbq_flush f;
  uint64_t lo[H_BLOCKS];
  uint32_t b;
  struct throttle_wbq_error e;

  pthread_mutex_lock (&h.order);
  memcpy (lo, h.acked, sizeof lo);
  pthread_mutex_unlock (&h.order);

  throttle_wbq_flush_begin (h.q, &f);
  throttle_wbq_flush_wait (h.q, &f, rand_r (seed) % 2);
  pthread_mutex_lock (&h.dev_lock);
  for (b = 0; b < H_BLOCKS; ++b)
    check (version_of (h.dev[b], b) >= lo[b], b,
           "an acknowledged write not on the backend after a flush");
  pthread_mutex_unlock (&h.dev_lock);
  check (throttle_wbq_flush_end (h.q, &f, seen, &e) == 0, 0,
         "a flush failed");
}

static void *
h_submitter (void *vp)
{
  uint32_t id = (uintptr_t) vp;
  unsigned seed = id + 1;
  uint64_t buf[16 * H_WORDS];
  uint64_t seen = throttle_wbq_seen_at_open (h.q);
  int i;

  for (i = 0; i < H_OPS; ++i) {
    unsigned op = rand_r (&seed) % 100;

    if (op < 50)
      h_queued_write (buf, &seed);
    else if (op < 60)
      h_direct_write (buf, &seed, id * H_REGION);
    else if (op < 95)
      h_read (buf, &seed);
    else
      h_flush (&seed, &seen);
  }
  return NULL;
}

START_TEST (test_hammer)
{
  pthread_t sub[H_SUBMITTERS], wr[H_WRITERS];
  size_t max_versions = H_SUBMITTERS * H_OPS + 1;
  struct throttle_wbq_stats s;
  struct throttle_wbq_flush f;
  uint32_t b;
  int i;

  memset (&h, 0, sizeof h);
  pthread_mutex_init (&h.order, NULL);
  pthread_mutex_init (&h.dev_lock, NULL);
  h.first = calloc (max_versions, sizeof *h.first);
  h.end = calloc (max_versions, sizeof *h.end);
  h.first[0] = 0;
  h.end[0] = H_BLOCKS;
  h.next_version = 1;
  for (b = 0; b < H_BLOCKS; ++b)
    fill (h.dev[b], 0, b, 1);
  /* A small pool: writers fall behind and writes wait for buffers. */
  h.q = make_queue (6, H_WRITERS);

  for (i = 0; i < H_WRITERS; ++i)
    pthread_create (&wr[i], NULL, h_writer, (void *) (uintptr_t) i);
  for (i = 0; i < H_SUBMITTERS; ++i)
    pthread_create (&sub[i], NULL, h_submitter, (void *) (uintptr_t) i);
  for (i = 0; i < H_SUBMITTERS; ++i)
    pthread_join (sub[i], NULL);
  throttle_wbq_flush_begin (h.q, &f);
  throttle_wbq_flush_wait (h.q, &f, false);
  throttle_wbq_stop (h.q);
  for (i = 0; i < H_WRITERS; ++i)
    pthread_join (wr[i], NULL);

  for (b = 0; b < H_BLOCKS; ++b)
    ck_assert_msg (version_of (h.dev[b], b) == h.issued[b],
                   "block %u: holds %llu, not the newest %llu", b,
                   (unsigned long long) version_of (h.dev[b], b),
                   (unsigned long long) h.issued[b]);
  s = stats_of (h.q);
  ck_assert_uint_eq (s.pending, 0);
  ck_assert_uint_eq (s.pending_bytes, 0);
  ck_assert_uint_eq (s.pool_used, 0);
  ck_assert_uint_eq (s.failed, 0);
  ck_assert_uint_eq (s.direct, h.direct_writes);
  ck_assert_uint_eq (s.written, h.queued_writes);
  ck_assert_uint_eq (atomic_load (&nr_retired), h.queued_writes);
  ck_assert_uint_eq (atomic_load (&units_retired), h.queued_units);
  ck_assert_uint_gt (s.written, 0);
  throttle_wbq_destroy (h.q);
  free (h.first);
  free (h.end);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("wbq-hammer");
  /* CK_RUN_CASE=hammer runs it alone (for a loop under TSan). */
  TCase *tc = tcase_create ("hammer");

  tcase_set_timeout (tc, 120);
  tcase_add_test (tc, test_hammer);
  suite_add_tcase (s, tc);
  return s;
}
