/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/throttle-wbq.c, the write-behind queue: the
 * single-threaded tests (many threads: test-wbq-hammer.c).
 *
 * The test plays every part: it queues writes, reads and flushes as the
 * filter's request threads do, and takes the writers' jobs itself,
 * deciding exactly what has started.  The backend is an array.
 */

#include <config.h>

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "throttle-wbq.h"
#include "wbq-harness.h"
#include "check-main.h"

static void
msleep (unsigned ms)
{
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  nanosleep (&ts, NULL);
}

/* --- the single-threaded tests' backend ------------------------------ */

#define DEV_SIZE (128 * 1024)
static unsigned char dev[DEV_SIZE];

/* Byte i of the payload of the write with 'tag'. */
static unsigned char
pattern (int tag, uint64_t i)
{
  return (unsigned char) (tag * 31 + i * 7 + i / 251);
}

static void
queue_write (struct throttle_wbq *q, int tag, uint64_t offset, uint32_t count)
{
  unsigned char *buf = malloc (count);
  uint32_t i;

  for (i = 0; i < count; ++i)
    buf[i] = pattern (tag, i);
  ck_assert (throttle_wbq_fits (q, count));
  ck_assert_int_eq (throttle_wbq_queue (q, buf, count, offset, count,
                                        NULL, NULL), 0);
  free (buf);
}

/* Bytes [offset, offset+count) of dev are the payload of the write
 * with 'tag' at 'written_at', from its byte offset-written_at.
 */
static void
assert_dev (uint64_t offset, uint32_t count, int tag, uint64_t written_at)
{
  uint32_t i;

  for (i = 0; i < count; ++i)
    ck_assert_msg (dev[offset + i] == pattern (tag, offset - written_at + i),
                   "byte %llu: not from write %d",
                   (unsigned long long) (offset + i), tag);
}

/* Take writer 'w''s next job, which must be a write at 'offset'. */
static struct throttle_wbq_job
take_write (struct throttle_wbq *q, size_t w, uint64_t offset)
{
  struct throttle_wbq_job job;

  ck_assert_int_eq (throttle_wbq_next (q, w, &job), THROTTLE_WBQ_WRITE);
  ck_assert_uint_eq (job.offset, offset);
  return job;
}

static void
to_dev (const void *buf, uint32_t n, uint64_t offset, void *opaque)
{
  memcpy (dev + offset, buf, n);
}

static void
to_buf (const void *buf, uint32_t n, uint64_t offset, void *opaque)
{
  const struct throttle_wbq_job *job = ((void **) opaque)[0];
  unsigned char *dst = ((void **) opaque)[1];

  memcpy (dst + (offset - job->offset), buf, n);
}

/* Writer 0 finishes a write: its pieces land in dev unless it failed. */
static void
finish_write (struct throttle_wbq *q, const struct throttle_wbq_job *job,
              int err)
{
  if (err == 0)
    for_each_piece (q, 0, job, to_dev, NULL);
  throttle_wbq_write_done (q, job, err);
}

/* Poll (bounded) until *flag is set. */
static void
wait_flag (atomic_int *flag)
{
  int i;

  for (i = 0; i < 5000 && !atomic_load (flag); i++)
    msleep (1);
  ck_assert_msg (atomic_load (flag), "still waiting after 5 s");
}

/* Run fn (arg) in a thread that must wait: after 50 ms it has not set
 * *flag.  (A bug that lets it through is seen, not a correct wait
 * missed.)
 */
static pthread_t
start_waiting (void *(*fn) (void *), void *arg, atomic_int *flag,
               const char *what)
{
  pthread_t t;

  pthread_create (&t, NULL, fn, arg);
  msleep (50);
  ck_assert_msg (!atomic_load (flag), "%s", what);
  return t;
}

/* Overlapping writes reach the backend in the order they were queued;
 * one that overlaps nothing does not wait for them.
 */
START_TEST (test_overlap_order)
{
  struct throttle_wbq *q = make_queue (16, 2);
  struct throttle_wbq_job w1, w2, w3;

  memset (dev, 0, sizeof dev);
  queue_write (q, 1, 0, 8192);
  queue_write (q, 2, 4096, 8192);
  queue_write (q, 3, 65536, 4096);
  ck_assert_uint_eq (stats_of (q).pending, 3);
  ck_assert_uint_eq (stats_of (q).pending_bytes, 20480);

  w1 = take_write (q, 0, 0);
  /* The second write overlaps the first, which has not finished: the
   * other writer gets the third.
   */
  w3 = take_write (q, 1, 65536);
  finish_write (q, &w1, 0);
  w2 = take_write (q, 0, 4096);
  ck_assert_uint_lt (w1.seq, w2.seq);
  finish_write (q, &w2, 0);
  finish_write (q, &w3, 0);

  assert_dev (0, 4096, 1, 0);
  assert_dev (4096, 8192, 2, 4096);
  assert_dev (65536, 4096, 3, 65536);
  ck_assert_uint_eq (stats_of (q).pending, 0);
  ck_assert_uint_eq (stats_of (q).written, 3);
  ck_assert_uint_eq (stats_of (q).written_bytes, 20480);
  ck_assert_uint_eq (stats_of (q).peak_pending_bytes, 20480);
  ck_assert_uint_eq (stats_of (q).pool_used, 0);
  ck_assert_uint_eq (atomic_load (&nr_retired), 3);
  ck_assert_uint_eq (atomic_load (&units_retired), 20480);
  throttle_wbq_stop (q);
  throttle_wbq_destroy (q);
}
END_TEST

/* A write larger than a writer's buffer or the pool is not queued. */
START_TEST (test_fits)
{
  struct throttle_wbq *q = make_queue (4, 1);

  ck_assert (!throttle_wbq_fits (q, 0));
  ck_assert (throttle_wbq_fits (q, 1));
  ck_assert (throttle_wbq_fits (q, 4 * THROTTLE_WBQ_ELEM));
  ck_assert (!throttle_wbq_fits (q, 4 * THROTTLE_WBQ_ELEM + 1));
  ck_assert_uint_eq (throttle_wbq_max_write (4 * THROTTLE_WBQ_ELEM),
                     4 * THROTTLE_WBQ_ELEM);
  ck_assert_uint_eq (throttle_wbq_max_write (1ULL << 30),
                     THROTTLE_WBQ_MAX_WRITE);
  throttle_wbq_stop (q);
  throttle_wbq_destroy (q);

  q = make_queue (1024, 1);
  ck_assert (throttle_wbq_fits (q, THROTTLE_WBQ_MAX_WRITE));
  ck_assert (!throttle_wbq_fits (q, THROTTLE_WBQ_MAX_WRITE + 1));
  throttle_wbq_stop (q);
  throttle_wbq_destroy (q);
}
END_TEST

struct barrier_arg {
  struct throttle_wbq *q;
  atomic_int passed;
  unsigned char seen;           /* dev[0] once the barrier was passed */
};

static void *
barrier_thread (void *vp)
{
  struct barrier_arg *a = vp;
  struct throttle_wbq_barrier b;

  throttle_wbq_barrier_begin (a->q, &b, 0, 4096, false);
  a->seen = dev[0];
  atomic_store (&a->passed, 1);
  throttle_wbq_barrier_end (a->q, &b);
  return NULL;
}

/* A request that goes to the backend directly comes after older
 * overlapping writes and before newer ones.
 */
START_TEST (test_barrier_order)
{
  struct throttle_wbq *q = make_queue (16, 1);
  struct barrier_arg a = { .q = q };
  struct throttle_wbq_barrier b;
  struct throttle_wbq_job j;
  pthread_t t;

  memset (dev, 0, sizeof dev);
  queue_write (q, 1, 0, 4096);
  t = start_waiting (barrier_thread, &a, &a.passed,
                     "the barrier did not wait for an older write");
  j = take_write (q, 0, 0);
  finish_write (q, &j, 0);
  pthread_join (t, NULL);
  ck_assert_int_eq (a.seen, pattern (1, 0));

  /* Newer overlapping writes wait for the barrier; others do not. */
  throttle_wbq_barrier_begin (q, &b, 0, 4096, false);
  queue_write (q, 2, 2048, 4096);
  queue_write (q, 3, 8192, 4096);
  j = take_write (q, 0, 8192);
  finish_write (q, &j, 0);
  throttle_wbq_barrier_end (q, &b);
  j = take_write (q, 0, 2048);
  finish_write (q, &j, 0);
  assert_dev (2048, 4096, 2, 2048);
  throttle_wbq_stop (q);
  throttle_wbq_destroy (q);
}
END_TEST

/* A read sees the newest data: the backend's, with every overlapping
 * pending write laid over it, oldest first, whatever their alignment;
 * and no overlapping write starts meanwhile.
 */
START_TEST (test_read_newest)
{
  struct throttle_wbq *q = make_queue (16, 1);
  struct throttle_wbq_barrier b;
  struct throttle_wbq_job j;
  unsigned char *buf = malloc (16384);
  uint32_t i;

  memset (dev, 'm', sizeof dev);
  queue_write (q, 1, 1000, 10000);      /* three buffers, unaligned */
  queue_write (q, 2, 3000, 2000);
  queue_write (q, 3, 65536, 4096);

  /* Nothing pending there: the caller just reads the backend. */
  ck_assert (!throttle_wbq_read_begin (q, &b, 20000, 4096));

  ck_assert (throttle_wbq_read_begin (q, &b, 0, 16384));
  /* Frozen: the writer gets the only write outside the read. */
  j = take_write (q, 0, 65536);
  finish_write (q, &j, 0);
  memcpy (buf, dev, 16384);
  throttle_wbq_read_end (q, &b, buf, true);
  for (i = 0; i < 16384; ++i) {
    unsigned char want =
      i < 1000 ? 'm' :
      i >= 3000 && i < 5000 ? pattern (2, i - 3000) :
      i < 11000 ? pattern (1, i - 1000) : 'm';

    ck_assert_msg (buf[i] == want, "byte %u of the read", i);
  }

  /* A failed backend read is passed on untouched. */
  ck_assert (throttle_wbq_read_begin (q, &b, 0, 16384));
  memset (buf, 'e', 16384);
  throttle_wbq_read_end (q, &b, buf, false);
  for (i = 0; i < 16384; ++i)
    ck_assert_int_eq (buf[i], 'e');

  /* The writer's copy of a write spread over buffers is whole, in
   * pieces of its bounce buffer.
   */
  j = take_write (q, 0, 1000);
  {
    void *args[2] = { &j, buf };

    memset (buf, 0, 10000);
    for_each_piece (q, 0, &j, to_buf, args);
  }
  for (i = 0; i < 10000; ++i)
    ck_assert_int_eq (buf[i], pattern (1, i));
  finish_write (q, &j, 0);
  j = take_write (q, 0, 3000);
  finish_write (q, &j, 0);
  assert_dev (1000, 2000, 1, 1000);
  assert_dev (3000, 2000, 2, 3000);
  assert_dev (5000, 6000, 1, 1000);
  free (buf);
  throttle_wbq_stop (q);
  throttle_wbq_destroy (q);
}
END_TEST

struct flush_arg {
  struct throttle_wbq *q;
  struct throttle_wbq_flush f;
  bool writers_flush;
  atomic_int done;
};

static void *
flush_thread (void *vp)
{
  struct flush_arg *a = vp;

  throttle_wbq_flush_wait (a->q, &a->f, a->writers_flush);
  atomic_store (&a->done, 1);
  return NULL;
}

/* A flush waits for the writes queued before it, and not for later
 * ones; with writers_flush, also for each writer's flush.
 */
START_TEST (test_flush_exact)
{
  struct throttle_wbq *q = make_queue (16, 2);
  struct flush_arg a = { .q = q };
  struct throttle_wbq_job j, k;
  pthread_t t;

  queue_write (q, 1, 0, 4096);
  throttle_wbq_flush_begin (q, &a.f);
  queue_write (q, 2, 8192, 4096);
  t = start_waiting (flush_thread, &a, &a.done,
                     "the flush did not wait for the write before it");
  j = take_write (q, 0, 0);
  finish_write (q, &j, 0);
  wait_flag (&a.done);
  pthread_join (t, NULL);
  ck_assert_uint_eq (stats_of (q).pending, 1);
  j = take_write (q, 0, 8192);
  finish_write (q, &j, 0);

  /* With writers_flush, it waits for a flush of each writer too. */
  a.writers_flush = true;
  atomic_store (&a.done, 0);
  throttle_wbq_flush_begin (q, &a.f);
  pthread_create (&t, NULL, flush_thread, &a);
  ck_assert_int_eq (throttle_wbq_next (q, 0, &j), THROTTLE_WBQ_FLUSH);
  throttle_wbq_flush_done (q, 0, &j, 0);
  msleep (50);
  ck_assert_msg (!atomic_load (&a.done),
                 "the flush did not wait for every writer's flush");
  ck_assert_int_eq (throttle_wbq_next (q, 1, &k), THROTTLE_WBQ_FLUSH);
  ck_assert_uint_eq (j.gen, k.gen);
  throttle_wbq_flush_done (q, 1, &k, 0);
  wait_flag (&a.done);
  pthread_join (t, NULL);
  throttle_wbq_stop (q);
  throttle_wbq_destroy (q);
}
END_TEST

/* A whole flush of a connection with *seen. */
static uint64_t
flush_conn (struct throttle_wbq *q, uint64_t *seen,
            struct throttle_wbq_error *last)
{
  struct throttle_wbq_flush f;

  throttle_wbq_flush_begin (q, &f);
  throttle_wbq_flush_wait (q, &f, false);
  return throttle_wbq_flush_end (q, &f, seen, last);
}

static void
fail_write (struct throttle_wbq *q, uint64_t offset, int err)
{
  struct throttle_wbq_job j;

  queue_write (q, 9, offset, 4096);
  j = take_write (q, 0, offset);
  finish_write (q, &j, err);
}

/* A failure reaches every flush that covers it (each connection's next
 * flush, a flush waiting when it happened) and no flush that does not.
 */
START_TEST (test_errors)
{
  struct throttle_wbq *q = make_queue (16, 1);
  struct flush_arg fa = { .q = q };
  struct throttle_wbq_flush f, g;
  struct throttle_wbq_job j;
  uint64_t a, b, c;
  pthread_t t;
  struct throttle_wbq_error e;

  a = throttle_wbq_seen_at_open (q);
  b = throttle_wbq_seen_at_open (q);
  ck_assert_uint_eq (flush_conn (q, &a, &e), 0);

  fail_write (q, 8192, EIO);
  ck_assert (stats_of (q).error_unreported);
  ck_assert_uint_eq (stats_of (q).failed, 1);
  ck_assert_uint_eq (stats_of (q).pending, 0);
  ck_assert_uint_eq (atomic_load (&units_retired), 4096);
  ck_assert_uint_eq (flush_conn (q, &a, &e), 1);
  ck_assert_int_eq (e.errnum, EIO);
  ck_assert_uint_eq (e.offset, 8192);
  ck_assert_uint_eq (e.count, 4096);
  ck_assert (!stats_of (q).error_unreported);
  /* Told once per connection. */
  ck_assert_uint_eq (flush_conn (q, &a, &e), 0);
  ck_assert_uint_eq (flush_conn (q, &b, &e), 1);
  /* A connection opened after the report was not there for it. */
  c = throttle_wbq_seen_at_open (q);
  ck_assert_uint_eq (flush_conn (q, &c, &e), 0);

  /* A failure no flush has reported reaches a connection opened after
   * it too.
   */
  fail_write (q, 0, ENOSPC);
  c = throttle_wbq_seen_at_open (q);
  ck_assert_uint_eq (flush_conn (q, &c, &e), 1);
  ck_assert_int_eq (e.errnum, ENOSPC);
  ck_assert_uint_eq (flush_conn (q, &a, &e), 1);
  ck_assert_uint_eq (flush_conn (q, &b, &e), 1);

  /* A flush over before a failure does not report it. */
  ck_assert_uint_eq (flush_conn (q, &a, &e), 0);
  queue_write (q, 4, 0, 4096);
  throttle_wbq_flush_begin (q, &f);
  j = take_write (q, 0, 0);
  finish_write (q, &j, 0);
  throttle_wbq_flush_wait (q, &f, false);
  ck_assert_uint_eq (throttle_wbq_flush_end (q, &f, &a, &e), 0);
  fail_write (q, 4096, EIO);

  /* Two flushes of a connection waiting when it fails both report it,
   * whichever answers first.
   */
  throttle_wbq_flush_begin (q, &f);
  throttle_wbq_flush_begin (q, &g);
  fail_write (q, 0, EROFS);
  ck_assert_uint_eq (throttle_wbq_flush_end (q, &f, &a, &e), 2);
  ck_assert_uint_eq (throttle_wbq_flush_end (q, &g, &a, &e), 1);
  ck_assert_int_eq (e.errnum, EROFS);
  ck_assert_uint_eq (flush_conn (q, &a, &e), 0);

  /* A writer's failed flush is reported by the flush that waited. */
  throttle_wbq_flush_begin (q, &fa.f);
  fa.writers_flush = true;
  pthread_create (&t, NULL, flush_thread, &fa);
  ck_assert_int_eq (throttle_wbq_next (q, 0, &j), THROTTLE_WBQ_FLUSH);
  throttle_wbq_flush_done (q, 0, &j, EIO);
  pthread_join (t, NULL);
  ck_assert_uint_eq (throttle_wbq_flush_end (q, &fa.f, &a, &e), 1);
  ck_assert_int_eq (e.errnum, EIO);
  ck_assert_uint_eq (e.count, 0);
  throttle_wbq_stop (q);
  throttle_wbq_destroy (q);
}
END_TEST

static bool
cancel_now (void *opaque)
{
  return true;
}

/* A write waiting for buffers of a full pool can be cancelled, and
 * then holds nothing and is not queued.
 */
START_TEST (test_cancel)
{
  struct throttle_wbq *q = make_queue (2, 1);
  unsigned char buf[8192] = { 0 };
  struct throttle_wbq_job j;

  ck_assert_int_eq (throttle_wbq_queue (q, buf, 4096, 0, 1, NULL, NULL), 0);
  ck_assert_int_eq (throttle_wbq_queue (q, buf, 8192, 0, 2, cancel_now,
                                        NULL), -1);
  ck_assert_uint_eq (stats_of (q).pending, 1);
  ck_assert_uint_eq (stats_of (q).pool_used, 4096);
  j = take_write (q, 0, 0);
  finish_write (q, &j, 0);
  ck_assert_uint_eq (stats_of (q).pool_used, 0);
  ck_assert_int_eq (throttle_wbq_queue (q, buf, 8192, 0, 2, cancel_now,
                                        NULL), 0);
  j = take_write (q, 0, 0);
  finish_write (q, &j, 0);
  ck_assert_uint_eq (atomic_load (&units_retired), 3);
  throttle_wbq_stop (q);
  ck_assert_int_eq (throttle_wbq_next (q, 0, &j), THROTTLE_WBQ_STOP);
  throttle_wbq_destroy (q);
}
END_TEST

/* The cancel callback of a write waiting for buffers finishes the
 * write that holds them, which grants them to the waiter, and then
 * says cancel: the waiter gives them back.
 */
static struct throttle_wbq_job granting_job;

static bool
grant_then_cancel (void *opaque)
{
  struct throttle_wbq *q = opaque;

  throttle_wbq_write_done (q, &granting_job, 0);
  return true;
}

START_TEST (test_cancel_after_grant)
{
  struct throttle_wbq *q = make_queue (2, 1);
  unsigned char buf[8192] = { 0 };
  struct throttle_wbq_job j;

  ck_assert_int_eq (throttle_wbq_queue (q, buf, 8192, 0, 1, NULL, NULL), 0);
  granting_job = take_write (q, 0, 0);
  ck_assert_int_eq (throttle_wbq_queue (q, buf, 4096, 0, 2,
                                        grant_then_cancel, q), -1);
  ck_assert_uint_eq (stats_of (q).pending, 0);
  ck_assert_uint_eq (stats_of (q).pool_used, 0);
  ck_assert_int_eq (throttle_wbq_queue (q, buf, 8192, 0, 3, NULL, NULL), 0);
  j = take_write (q, 0, 0);
  finish_write (q, &j, 0);
  ck_assert_uint_eq (atomic_load (&units_retired), 4);
  throttle_wbq_stop (q);
  throttle_wbq_destroy (q);
}
END_TEST

/* A stopped queue's writers still write what is pending first. */
START_TEST (test_stop_drains)
{
  struct throttle_wbq *q = make_queue (4, 1);
  struct throttle_wbq_job j;
  struct throttle_wbq_error e;
  uint64_t seen = throttle_wbq_seen_at_open (q);

  queue_write (q, 1, 0, 4096);
  throttle_wbq_stop (q);
  j = take_write (q, 0, 0);
  finish_write (q, &j, 0);
  ck_assert_int_eq (throttle_wbq_next (q, 0, &j), THROTTLE_WBQ_STOP);
  ck_assert_uint_eq (flush_conn (q, &seen, &e), 0);
  throttle_wbq_destroy (q);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("wbq");
  TCase *tc = tcase_create ("core");

  tcase_set_timeout (tc, 30);
  tcase_add_test (tc, test_overlap_order);
  tcase_add_test (tc, test_fits);
  tcase_add_test (tc, test_barrier_order);
  tcase_add_test (tc, test_read_newest);
  tcase_add_test (tc, test_flush_exact);
  tcase_add_test (tc, test_errors);
  tcase_add_test (tc, test_cancel);
  tcase_add_test (tc, test_cancel_after_grant);
  tcase_add_test (tc, test_stop_drains);
  suite_add_tcase (s, tc);
  return s;
}
