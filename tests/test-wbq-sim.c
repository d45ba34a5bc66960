/* SPDX-License-Identifier: BSD-3-Clause */
/* A seeded simulation of the write-behind queue's ordering
 * (lib/throttle-wbq.c), in the style of test-sim.c.
 *
 * One thread plays the requests, the writers and the backend (a small
 * disk in memory) against the real queue, in random order: writes
 * queued, direct writes under a barrier, reads, flushes of two
 * connections, a writer taking its next job, writing one piece of it,
 * finishing it with or without an error.
 *
 * What it covers, and what not: the engine's waits are condition
 * waits inside its calls, so a call is made only where the model says
 * it returns at once (a call that then blocks hangs the test, and the
 * alarm prints the seed): a write is queued when the pool has its
 * buffers, a barrier begins when no older overlapping write is pending,
 * a read begins when no overlapping write has started, a flush waits
 * once what preceded it has retired and without the writers' flushes,
 * a writer asks for a job when the model knows one may start.  So what
 * happens *during* those waits (a barrier or a read registered while it
 * waits, a flush waiting while newer writes come and go, the writers'
 * flush jobs) is left to test-wbq's threads.
 *
 * Checked after every step:
 * - the job a writer gets is the oldest queued write that may start,
 *   as the model computes it (no older overlapping write pending, no
 *   overlapping read in progress, no overlapping barrier older than
 *   it), with the sequence number the model expects;
 * - overlapping writes reach the backend in the order they were
 *   queued: every byte a writer writes was last written by an older
 *   write (queued or direct), and no older overlapping write is
 *   pending then; a piece's payload is the bytes queued;
 * - a read sees the newest data: the backend read with the pending
 *   writes laid over is, byte by byte, the newest write queued or made
 *   there (bytes whose newest write failed are not checked);
 *   read_begin says whether a pending write overlaps;
 * - a flush returns once what preceded it has retired, even while
 *   newer writes are pending or started; it reports a failure that
 *   happened after it arrived, and one its connection was not told
 *   of; it reports nothing when there was none since the connection
 *   was last told;
 * - the queue's stats: pending writes and bytes are the model's.
 * Then a drain: every write retires, the writers get STOP.
 *
 * THROTTLE_WBQ_SIM_SCHEDULES=N (default 1000), THROTTLE_WBQ_SIM_FIRST,
 * THROTTLE_WBQ_SIM_SEED=S (one schedule, its steps printed),
 * THROTTLE_WBQ_SIM_STEPS=N (default 200).  With CK_FORK=no for a
 * long run.
 */

#include <config.h>

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "throttle-wbq.h"
#include "sim-seed.h"
#include "check-main.h"

#define DISK (32 * 1024)
#define MAX_W 64              /* writes in the model at once */
#define MAX_WRITERS 3
#define NCONN 2
#define MAX_FLUSH 4
#define NO_ORD 0
#define SCHEDULES 1000        /* by default: about 10 s of CPU under TSan */

enum wstate { W_FREE = 0, W_QUEUED, W_STARTED };

struct mwrite {                 /* a queued write, as the model knows it */
  enum wstate state;
  uint64_t ord;                 /* the model's order of all writes */
  uint64_t seq;                 /* the queue's */
  uint64_t offset;
  uint32_t count;
};

struct writer {
  bool busy;
  struct throttle_wbq_job job;
  int w;                        /* its write in the model */
  uint32_t done;
  int err;
};

struct flush {
  bool active;
  int conn;
  struct throttle_wbq_flush f;
  uint64_t failures_at;         /* model failures when it arrived */
};

struct sim {
  uint64_t seed, rng;
  bool verbose;
  unsigned step;
  struct throttle_wbq *q;
  size_t nr, nwriters;
  uint64_t seq;                 /* the queue's next sequence number */
  uint64_t ord;
  unsigned char disk[DISK];
  uint64_t dord[DISK];          /* the write whose byte is on the disk */
  uint64_t lord[DISK];          /* the newest write made to each byte */
  bool failed[8192];            /* by ord */
  struct mwrite w[MAX_W];
  struct writer wr[MAX_WRITERS];
  /* A barrier or a read in progress (one of each at most). */
  bool barrier_on, read_on;
  struct throttle_wbq_barrier barrier, read;
  uint64_t b_off, b_end, b_ord, r_off, r_end;
  bool read_registered;
  struct flush fl[MAX_FLUSH];
  uint64_t seen[NCONN], told[NCONN];    /* told: model failures told */
  uint64_t failures;
  uint64_t buffers;             /* in use, by the model */
};

static struct sim *current;
static struct {
  uint64_t queued, direct, reads, reads_laid, pieces, failed;
  uint64_t flushes, flush_reported, frozen_skip;
} cover;

static uint64_t
pick (struct sim *s, uint64_t n)
{
  return sim_pick (&s->rng, n);
}

static void
say (struct sim *s, const char *fmt, ...)
{
  va_list ap;

  if (!s->verbose)
    return;
  fprintf (stderr, "  %3u ", s->step);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
}

static void
sim_fail (struct sim *s, const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "test-wbq-sim: THROTTLE_WBQ_SIM_SEED=%" PRIu64
           " replays it\n", s->seed);
  current = NULL;
  va_start (ap, fmt);
  sim_vfail ("test-wbq-sim", s->seed, s->step, fmt, ap);
}

/* A call the model said returns at once blocked. */
static void
on_alarm (int sig)
{
  if (current)
    fprintf (stderr, "test-wbq-sim: THROTTLE_WBQ_SIM_SEED=%" PRIu64
             ": a call blocked at step %u\n", current->seed, current->step);
  signal (sig, SIG_DFL);
  raise (sig);
}

/* The bytes write 'ord' puts at 'at'. */
static unsigned char
pattern (uint64_t ord, uint64_t at)
{
  return (unsigned char) ((ord * 131 + at * 7 + (at >> 8)) ^ (ord >> 3));
}

static bool
overlap (uint64_t a, uint64_t a_end, uint64_t b, uint64_t b_end)
{
  return a < b_end && b < a_end;
}

static void
hook_retired (void *opaque, uint64_t charged)
{
}

/* --- the model ---------------------------------------------------- */

/* The write a writer's next job must be, or -1: the oldest queued one
 * that no older pending write, read in progress, or older barrier
 * overlaps.
 */
static int
model_pick (struct sim *s)
{
  int best = -1, i, j;

  for (i = 0; i < MAX_W; i++) {
    struct mwrite *m = &s->w[i];
    uint64_t end = m->offset + m->count;
    bool blocked = false;

    if (m->state != W_QUEUED || (best >= 0 && s->w[best].seq < m->seq))
      continue;
    for (j = 0; j < MAX_W && !blocked; j++)
      blocked = s->w[j].state != W_FREE && s->w[j].seq < m->seq &&
        overlap (s->w[j].offset, s->w[j].offset + s->w[j].count,
                 m->offset, end);
    if (s->read_on && s->read_registered &&
        overlap (s->r_off, s->r_end, m->offset, end))
      blocked = true;
    if (s->barrier_on && s->barrier.seq < m->seq &&
        overlap (s->b_off, s->b_end, m->offset, end))
      blocked = true;
    if (!blocked)
      best = i;
  }
  return best;
}

static bool
older_overlapping_pending (struct sim *s, uint64_t seq, uint64_t off,
                           uint64_t end)
{
  int i;

  for (i = 0; i < MAX_W; i++)
    if (s->w[i].state != W_FREE && s->w[i].seq < seq &&
        overlap (s->w[i].offset, s->w[i].offset + s->w[i].count, off, end))
      return true;
  return false;
}

/* The backend: a write of 'ord' of [off, off+n) with these bytes. */
static void
backend_write (struct sim *s, uint64_t ord, uint64_t off, const void *buf,
               uint32_t n)
{
  uint32_t k;

  for (k = 0; k < n; k++) {
    if (s->dord[off + k] > ord)
      sim_fail (s, "write %" PRIu64 " reaches byte %" PRIu64 " after the "
                "newer write %" PRIu64, ord, off + k, s->dord[off + k]);
    s->dord[off + k] = ord;
  }
  memcpy (&s->disk[off], buf, n);
}

static void
check_stats (struct sim *s)
{
  struct throttle_wbq_stats st;
  uint64_t n = 0, bytes = 0;
  int i;

  throttle_wbq_get_stats (s->q, &st);
  for (i = 0; i < MAX_W; i++)
    if (s->w[i].state != W_FREE) {
      n++;
      bytes += s->w[i].count;
    }
  if (st.pending != n || st.pending_bytes != bytes)
    sim_fail (s, "the queue has %" PRIu64 " writes (%" PRIu64 " bytes) "
              "pending, the model %" PRIu64 " (%" PRIu64 ")", st.pending,
              st.pending_bytes, n, bytes);
}

/* --- steps -------------------------------------------------------- */

static void
random_range (struct sim *s, uint64_t *off, uint32_t *count)
{
  static const uint32_t sizes[] = { 512, 4096, 4096, 8192, 12288 };

  *count = pick (s, 3) == 0 ? 1 + pick (s, 12288) : sizes[pick (s, 5)];
  /* A small disk: most ranges overlap others. */
  *off = pick (s, 2) ? pick (s, DISK / 4096 - 3) * 4096 :
    pick (s, DISK - *count);
}

static void
step_queue (struct sim *s)
{
  unsigned char buf[16384];
  uint64_t off;
  uint32_t count, k;
  uint64_t need;
  int i;

  random_range (s, &off, &count);
  need = (count + THROTTLE_WBQ_ELEM - 1) / THROTTLE_WBQ_ELEM;
  if (s->buffers + need > s->nr || !throttle_wbq_fits (s->q, count))
    return;                     /* would wait for buffers */
  if (s->read_on && overlap (s->r_off, s->r_end, off, off + count))
    return;                     /* racing a read: either answer is right */
  for (i = 0; i < MAX_W && s->w[i].state != W_FREE; i++)
    ;
  if (i == MAX_W || s->ord + 1 >= sizeof s->failed)
    return;
  s->ord++;
  for (k = 0; k < count; k++)
    buf[k] = pattern (s->ord, off + k);
  if (throttle_wbq_queue (s->q, buf, count, off, 0, NULL, NULL) == -1)
    sim_fail (s, "queue failed");
  s->w[i] = (struct mwrite) {
    .state = W_QUEUED, .ord = s->ord, .seq = s->seq++, .offset = off,
    .count = count,
  };
  s->buffers += need;
  for (k = 0; k < count; k++)
    s->lord[off + k] = s->ord;
  cover.queued++;
  say (s, "queue write %" PRIu64 " (seq %" PRIu64 ") [%" PRIu64 ", +%"
       PRIu32 ")", s->ord, s->w[i].seq, off, count);
}

static void
step_next (struct sim *s, int wi)
{
  int i;
  struct writer *wr = &s->wr[wi];

  if (wr->busy)
    return;
  i = model_pick (s);
  if (i < 0)
    return;                     /* would wait */
  if (throttle_wbq_next (s->q, wi, &wr->job) != THROTTLE_WBQ_WRITE)
    sim_fail (s, "writer %d got no write", wi);
  if (wr->job.seq != s->w[i].seq || wr->job.offset != s->w[i].offset ||
      wr->job.count != s->w[i].count)
    sim_fail (s, "writer %d got seq %" PRIu64 " [%" PRIu64 ", +%" PRIu32
              "), the oldest that may start is seq %" PRIu64, wi,
              wr->job.seq, wr->job.offset, wr->job.count, s->w[i].seq);
  s->w[i].state = W_STARTED;
  wr->busy = true;
  wr->w = i;
  wr->done = 0;
  wr->err = pick (s, 12) == 0 ? EIO : 0;
  say (s, "writer %d takes write %" PRIu64 "%s", wi, s->w[i].ord,
       wr->err ? " (it will fail)" : "");
}

static void
step_piece (struct sim *s, int wi)
{
  struct writer *wr = &s->wr[wi];
  struct mwrite *m = &s->w[wr->w];
  const unsigned char *p;
  uint32_t n, k;

  if (!wr->busy || wr->done == m->count)
    return;
  if (older_overlapping_pending (s, m->seq, m->offset, m->offset + m->count))
    sim_fail (s, "write %" PRIu64 " on the backend while an older "
              "overlapping write is pending", m->ord);
  if (s->read_on && s->read_registered &&
      overlap (s->r_off, s->r_end, m->offset, m->offset + m->count))
    sim_fail (s, "write %" PRIu64 " started under a read", m->ord);
  p = throttle_wbq_piece (s->q, wi, &wr->job, wr->done, &n);
  if (n == 0 || n > m->count - wr->done)
    sim_fail (s, "a piece of %" PRIu32 " bytes", n);
  for (k = 0; k < n; k++)
    if (p[k] != pattern (m->ord, m->offset + wr->done + k))
      sim_fail (s, "write %" PRIu64 ": byte %" PRIu32 " of its payload "
                "is not what was queued", m->ord, wr->done + k);
  /* A failing write may have put some of its pieces. */
  if (wr->err == 0 || pick (s, 2))
    backend_write (s, m->ord, m->offset + wr->done, p, n);
  wr->done += n;
  cover.pieces++;
  say (s, "writer %d writes %" PRIu32 " bytes of write %" PRIu64, wi, n,
       m->ord);
}

static void
step_done (struct sim *s, int wi)
{
  struct writer *wr = &s->wr[wi];
  struct mwrite *m = &s->w[wr->w];

  if (!wr->busy || (wr->done < m->count && wr->err == 0))
    return;
  throttle_wbq_write_done (s->q, &wr->job, wr->err);
  if (wr->err) {
    s->failed[m->ord] = true;
    s->failures++;
    cover.failed++;
  }
  s->buffers -= (m->count + THROTTLE_WBQ_ELEM - 1) / THROTTLE_WBQ_ELEM;
  say (s, "writer %d done with write %" PRIu64 "%s", wi, m->ord,
       wr->err ? ": failed" : "");
  m->state = W_FREE;
  wr->busy = false;
}

static void
step_barrier (struct sim *s)
{
  unsigned char buf[16384];
  uint64_t off;
  uint32_t count, k;

  if (s->barrier_on) {
    /* The direct write, then the end. */
    for (k = 0; k < s->b_end - s->b_off; k++)
      buf[k] = pattern (s->b_ord, s->b_off + k);
    backend_write (s, s->b_ord, s->b_off, buf, s->b_end - s->b_off);
    throttle_wbq_barrier_end (s->q, &s->barrier);
    s->barrier_on = false;
    say (s, "direct write %" PRIu64 " done", s->b_ord);
    return;
  }
  random_range (s, &off, &count);
  if (older_overlapping_pending (s, s->seq, off, off + count))
    return;                     /* would wait */
  if (s->read_on && overlap (s->r_off, s->r_end, off, off + count))
    return;
  if (s->ord + 1 >= sizeof s->failed)
    return;
  throttle_wbq_barrier_begin (s->q, &s->barrier, off, count, true);
  if (s->barrier.seq != s->seq)
    sim_fail (s, "barrier seq %" PRIu64 ", expected %" PRIu64,
              s->barrier.seq, s->seq);
  s->seq++;
  s->b_ord = ++s->ord;
  s->b_off = off;
  s->b_end = off + count;
  s->barrier_on = true;
  for (k = 0; k < count; k++)
    s->lord[off + k] = s->b_ord;
  cover.direct++;
  say (s, "direct write %" PRIu64 " (seq %" PRIu64 ") [%" PRIu64 ", +%"
       PRIu32 ") begins", s->b_ord, s->barrier.seq, off, count);
}

static void
step_read (struct sim *s)
{
  unsigned char buf[16384];
  uint64_t off, k;
  uint32_t count;
  int i;
  bool any = false;

  if (s->read_on) {
    uint64_t n = s->r_end - s->r_off;

    memcpy (buf, &s->disk[s->r_off], n);
    if (s->read_registered)
      throttle_wbq_read_end (s->q, &s->read, buf, true);
    for (k = 0; k < n; k++) {
      uint64_t at = s->r_off + k, o = s->lord[at];

      if (o != NO_ORD && s->failed[o])
        continue;
      if (buf[k] != (o == NO_ORD ? 0 : pattern (o, at)))
        sim_fail (s, "a read of [%" PRIu64 ", %" PRIu64 ") sees at %" PRIu64
                  " not the newest write %" PRIu64, s->r_off, s->r_end, at, o);
    }
    s->read_on = false;
    say (s, "read [%" PRIu64 ", %" PRIu64 ") ends", s->r_off, s->r_end);
    return;
  }
  random_range (s, &off, &count);
  for (i = 0; i < MAX_W; i++) {
    struct mwrite *m = &s->w[i];

    if (m->state == W_FREE ||
        !overlap (m->offset, m->offset + m->count, off, off + count))
      continue;
    if (m->state == W_STARTED)
      return;                   /* would wait for it */
    any = true;
  }
  if (s->barrier_on && overlap (s->b_off, s->b_end, off, off + count))
    return;
  s->read_registered = throttle_wbq_read_begin (s->q, &s->read, off, count);
  if (s->read_registered != any)
    sim_fail (s, "read_begin says %d, the model %d", s->read_registered, any);
  s->read_on = true;
  s->r_off = off;
  s->r_end = off + count;
  cover.reads++;
  cover.reads_laid += any;
  say (s, "read [%" PRIu64 ", +%" PRIu32 ") begins%s", off, count,
       any ? ", over pending writes" : "");
}

static void
step_flush (struct sim *s, int i)
{
  struct flush *f = &s->fl[i];
  struct throttle_wbq_error last;
  uint64_t n, from;

  if (!f->active) {
    f->conn = pick (s, NCONN);
    throttle_wbq_flush_begin (s->q, &f->f);
    if (f->f.seq != s->seq)
      sim_fail (s, "flush seq %" PRIu64 ", expected %" PRIu64, f->f.seq,
                s->seq);
    f->failures_at = s->failures;
    f->active = true;
    say (s, "flush %d of connection %d begins", i, f->conn);
    return;
  }
  if (older_overlapping_pending (s, f->f.seq, 0, DISK))
    return;                     /* would wait */
  throttle_wbq_flush_wait (s->q, &f->f, false);
  n = throttle_wbq_flush_end (s->q, &f->f, &s->seen[f->conn], &last);
  cover.flushes++;
  cover.flush_reported += n > 0;
  /* The failures since it arrived, and those before that its
   * connection was not told of: one told to another flush of the
   * connection since it arrived still counts.
   */
  from = s->told[f->conn] < f->failures_at ? s->told[f->conn] :
    f->failures_at;
  if (n != s->failures - from)
    sim_fail (s, "flush %d of connection %d reports %" PRIu64 " failures, "
              "expected %" PRIu64 " (%" PRIu64 " in all, %" PRIu64 " when it "
              "arrived, %" PRIu64 " told)", i, f->conn, n,
              s->failures - from, s->failures, f->failures_at,
              s->told[f->conn]);
  if (n > 0)
    s->told[f->conn] = s->failures;
  f->active = false;
  say (s, "flush %d of connection %d: %" PRIu64 " failures", i, f->conn, n);
}

/* --- a schedule --------------------------------------------------- */

static void
drain (struct sim *s)
{
  unsigned round;
  struct throttle_wbq_job job;
  struct throttle_wbq_flush f;
  size_t i;

  for (round = 0; round < 100000; round++) {
    bool any = false;

    for (i = 0; i < s->nwriters; i++) {
      if (s->wr[i].busy) {
        step_piece (s, i);
        step_done (s, i);
        any = true;
      }
    }
    if (s->barrier_on)
      step_barrier (s);
    if (s->read_on)
      step_read (s);
    for (i = 0; i < s->nwriters; i++)
      if (model_pick (s) >= 0 && !s->wr[i].busy) {
        step_next (s, i);
        any = true;
      }
    for (i = 0; i < MAX_FLUSH; i++)
      if (s->fl[i].active) {
        step_flush (s, i);
        any = true;
      }
    check_stats (s);
    if (!any && !s->barrier_on && !s->read_on)
      break;
  }
  for (i = 0; i < MAX_W; i++)
    if (s->w[i].state != W_FREE)
      sim_fail (s, "the drain left write %" PRIu64 " pending", s->w[i].ord);
  throttle_wbq_flush_begin (s->q, &f);
  throttle_wbq_flush_wait (s->q, &f, false);
  throttle_wbq_stop (s->q);
  for (i = 0; i < s->nwriters; i++)
    if (throttle_wbq_next (s->q, i, &job) != THROTTLE_WBQ_STOP)
      sim_fail (s, "writer %zu not stopped", i);
}

static unsigned steps = 200;

static void
run_schedule (uint64_t seed, bool verbose)
{
  static struct sim sim;
  struct sim *s = &sim;

  memset (s, 0, sizeof *s);
  s->seed = s->rng = seed;
  s->verbose = verbose;
  s->nr = 4 + pick (s, 13);
  s->nwriters = 1 + pick (s, MAX_WRITERS);
  s->q = throttle_wbq_create (s->nr, s->nwriters,
                              THROTTLE_WBQ_ELEM << pick (s, 3), false,
                              hook_retired, NULL);
  ck_assert_ptr_nonnull (s->q);
  s->seen[0] = s->seen[1] = throttle_wbq_seen_at_open (s->q);
  say (s, "seed %" PRIu64 ": %zu buffers, %zu writers", seed, s->nr,
       s->nwriters);
  current = s;
  for (s->step = 1; s->step <= steps; s->step++) {
    unsigned c = pick (s, 100);

    alarm (60);
    if (c < 25)
      step_queue (s);
    else if (c < 40)
      step_next (s, pick (s, s->nwriters));
    else if (c < 60)
      step_piece (s, pick (s, s->nwriters));
    else if (c < 75)
      step_done (s, pick (s, s->nwriters));
    else if (c < 83)
      step_barrier (s);
    else if (c < 92)
      step_read (s);
    else
      step_flush (s, pick (s, MAX_FLUSH));
    check_stats (s);
  }
  drain (s);
  alarm (0);
  current = NULL;
  throttle_wbq_destroy (s->q);
}

START_TEST (test_schedules)
{
  uint64_t n = sim_env_u64 ("THROTTLE_WBQ_SIM_SCHEDULES", SCHEDULES);
  uint64_t seed = sim_env_u64 ("THROTTLE_WBQ_SIM_SEED", 0);
  uint64_t first = sim_env_u64 ("THROTTLE_WBQ_SIM_FIRST", 1);
  uint64_t i;

  steps = sim_env_u64 ("THROTTLE_WBQ_SIM_STEPS", 200);
  ck_assert_uint_le (steps, 200000);
  signal (SIGALRM, on_alarm);
  if (seed) {
    run_schedule (seed, true);
    return;
  }
  for (i = 0; i < n; i++) {
    run_schedule (first + i, false);
    if ((i + 1) % 100000 == 0)
      fprintf (stderr, "test-wbq-sim: %" PRIu64 " schedules passed\n", i + 1);
  }
  fprintf (stderr, "test-wbq-sim: %" PRIu64 " schedules of %u steps passed: "
           "%" PRIu64 " writes queued, %" PRIu64 " direct, %" PRIu64
           " pieces, %" PRIu64 " failed, %" PRIu64 " reads (%" PRIu64
           " over pending writes), %" PRIu64 " flushes (%" PRIu64
           " reporting failures)\n", n, steps, cover.queued, cover.direct,
           cover.pieces, cover.failed, cover.reads, cover.reads_laid,
           cover.flushes, cover.flush_reported);
  if (n >= SCHEDULES) {
    ck_assert_uint_gt (cover.reads_laid, 0);
    ck_assert_uint_gt (cover.failed, 0);
    ck_assert_uint_gt (cover.flush_reported, 0);
    ck_assert_uint_gt (cover.direct, 0);
  }
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *su = suite_create ("wbq-sim");
  TCase *tc = tcase_create ("core");

  tcase_set_timeout (tc, 120);
  tcase_add_test (tc, test_schedules);
  suite_add_tcase (su, tc);
  return su;
}
