/* SPDX-License-Identifier: BSD-3-Clause */
/* The budget's fast path (lib/throttle-budget.c, "The fast path"),
 * proven over seeded random schedules of its atomic steps.
 *
 * test-sim.c steps the admission whole: each charge and credit is one
 * step there.  Here the steps are the budget's own atomic ones, so the
 * races of the fast path are among the schedules: a fast charge reads
 * (throttle_budget_fast_read), swaps (throttle_budget_fast_swap) and
 * confirms (throttle_budget_fast_confirm) at three steps with anything
 * between them, a credit subtracts
 * (throttle_budget_credit_release) and grants
 * (throttle_budget_credit_grant) at two steps, and the locked steps
 * (a charge decided under the lock, a waiter's poll or abandonment, a
 * capacity change) come in any order among them.  A few simulated
 * threads each run requests of every kind (whole, in parts, exact; some
 * above the capacity) one after another; the capacity moves up and
 * down, below a quantum and to 1; in half the schedules the budget is
 * mirrored (throttle_budget_mirror) into a second one at a step drawn
 * from the seed, and the threads keep the mirror's contract (charge it
 * what a grant marked mirrored gave, credit it when a credit says so).
 * Then a drain: every thread finishes.
 *
 * Checked after every step:
 * - accounting: the units in flight are exactly what the threads hold
 *   (granted, and not yet subtracted by their credit), so a charge
 *   lost, taken twice or credited twice shows at once; and the
 *   mirror's are what is owed to it: every unit the threads hold once
 *   the budget is mirrored (charged by the mirroring, or by the thread
 *   whose grant was marked), but a granted waiter's marked units, which
 *   its poll charges;
 * - the bound: a step that granted anything leaves at most the
 *   capacity in flight, or a single holder;
 * - FIFO: a charge taken at once (fast or locked) finds no waiter
 *   queued, and a waiter is never granted while one queued before it
 *   still waits;
 * - liveness: waiters and nothing in flight only while some credit is
 *   between its subtraction and its grant (throttle-budget.h);
 * - after the drain: nothing in flight, nobody waiting, the fast path
 *   open again, and stats' admitted, charged and cancelled exactly
 *   what the threads saw.
 *
 * THROTTLE_SIM_SCHEDULES=N runs N schedules (default 20000) from seed
 * THROTTLE_SIM_FIRST (default 1); THROTTLE_SIM_SEED=S replays seed S
 * and prints its steps.  A failure prints its seed and its steps.
 * tests/test-budget-mutants.sh builds this test against mutated copies
 * of the fast path and checks that each mutation fails it.
 */

#include <config.h>

#include <check.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "throttle-budget.h"
#include "check-main.h"
#include "sim-seed.h"

#define SCHEDULES 20000
#define THREADS 5
#define STEPS 240
#define DRAIN_STEPS 2000
#define BASE 64                 /* the capacity's scale */

enum thread_state {
  IDLE,                         /* no request */
  READ,                         /* the fast charge has read: swap next */
  SWAPPED,                      /* its units are in the word: confirm next */
  LOCKED,                       /* the locked path decides next */
  QUEUED,                       /* waiting (maybe granted, not yet polled) */
  HOLDING,                      /* granted: credit next */
  CREDITING,                    /* subtracted: grant next */
};

struct thread {
  enum thread_state st;
  enum throttle_budget_kind kind;
  uint64_t need, quantum;
  struct throttle_budget_fast f;
  struct throttle_budget_waiter bw;
  uint64_t held;
  uint64_t queued_seq;          /* when it queued: FIFO */
};

struct sched {
  uint64_t seed, rng;
  struct throttle_budget m;     /* the mirror */
  unsigned mirror_step;         /* 0: never mirrored */
  unsigned step;
  bool verbose;
  struct throttle_budget b;
  struct thread t[THREADS];
  uint64_t next_seq;
  /* What the threads saw, to hold stats to. */
  uint64_t admitted, charged, cancelled;
  char log[STEPS + DRAIN_STEPS + 8][112];
};

static struct {
  uint64_t fast, fast_retried, fast_gave_back, fast_refused, locked_now,
    queued, abandoned, grants_owed, mirrored, owed_mirror;
} cover;

static const char *const kind_name[] = { "whole", "parts", "exact" };

static void
print_schedule (struct sched *s)
{
  unsigned i;

  fprintf (stderr, "test-budget-sched: seed %" PRIu64 ", %u steps "
           "(replay: THROTTLE_SIM_SEED=%" PRIu64 "):\n",
           s->seed, s->step, s->seed);
  for (i = 0; i < s->step && i < sizeof s->log / sizeof s->log[0]; i++)
    fprintf (stderr, "  %4u %s\n", i, s->log[i]);
}

static void __attribute__ ((format (printf, 2, 3), noreturn))
sched_fail (struct sched *s, const char *fmt, ...)
{
  va_list ap;

  print_schedule (s);
  va_start (ap, fmt);
  sim_vfail ("test-budget-sched", s->seed, s->step, fmt, ap);
}

static void __attribute__ ((format (printf, 2, 3)))
say (struct sched *s, const char *fmt, ...)
{
  va_list ap;
  char *line = s->log[s->step < sizeof s->log / sizeof s->log[0] ?
                      s->step : 0];

  va_start (ap, fmt);
  vsnprintf (line, sizeof s->log[0], fmt, ap);
  va_end (ap);
  if (s->verbose)
    fprintf (stderr, "  %4u %s\n", s->step, line);
}

static uint64_t
in_flight_of (struct throttle_budget *b)
{
  return __atomic_load_n (&b->word, __ATOMIC_SEQ_CST) &
    THROTTLE_BUDGET_MAX_UNITS;
}

static uint64_t
in_flight (struct sched *s)
{
  return in_flight_of (&s->b);
}

static bool
waiting (const struct thread *t)
{
  return t->st == QUEUED && !t->bw.w.granted;
}

/* What each step may have granted, seen against the state before it. */
struct before {
  bool granted[THREADS];
  unsigned waiters;
};

static void
look_before (struct sched *s, struct before *bf)
{
  int i;

  bf->waiters = 0;
  for (i = 0; i < THREADS; i++) {
    bf->granted[i] = s->t[i].st == QUEUED && s->t[i].bw.w.granted;
    bf->waiters += waiting (&s->t[i]);
  }
}

/* A charge taken at once by thread i (bf NULL: a fast charge, whose
 * swap was its moment): it must have overtaken nobody.
 */
static void
taken_at_once (struct sched *s, const struct before *bf, int i,
               uint64_t units, const char *how)
{
  if (bf && bf->waiters > 0)
    sched_fail (s, "thread %d took %" PRIu64 " units %s past %u waiters",
          i, units, how, bf->waiters);
  s->t[i].st = HOLDING;
  s->t[i].held = units;
  s->admitted++;
  s->charged += units;
}

/* A grant of 'got' (maybe marked THROTTLE_BUDGET_MIRRORED): the units,
 * after charging the mirror what a marked grant owes it.
 */
static uint64_t
owe_mirror (struct sched *s, uint64_t got)
{
  uint64_t units = got & THROTTLE_BUDGET_MAX_UNITS, c;
  struct throttle_budget_waiter w;

  if (got & THROTTLE_BUDGET_MIRRORED) {
    cover.owed_mirror++;
    if (throttle_budget_enqueue (&s->m, &w, THROTTLE_BUDGET_WHOLE, units, 0,
                                 &c) != 0)
      sched_fail (s, "the mirror did not take %" PRIu64 " units at once",
                  units);
  }
  return units;
}

static void
check (struct sched *s, const struct before *bf, bool granted_now)
{
  uint64_t held = 0, holders = 0, owed = 0, crediting = 0, waiters = 0;
  uint64_t swapped = 0;
  bool mirrored = throttle_budget_mirrored (&s->b);
  uint64_t now = in_flight (s);
  uint64_t cap = throttle_budget_get_capacity (&s->b);
  int i, j;

  for (i = 0; i < THREADS; i++) {
    const struct thread *t = &s->t[i];

    if (t->st == HOLDING || (t->st == QUEUED && t->bw.w.granted)) {
      uint64_t u = t->st == HOLDING ? t->held :
        t->bw.w.got & THROTTLE_BUDGET_MAX_UNITS;

      held += u;
      holders++;
      /* Owed to the mirror once there is one: all a holder holds, but
       * a granted waiter's marked units until its poll charges them.
       */
      if (mirrored &&
          !(t->st == QUEUED && (t->bw.w.got & THROTTLE_BUDGET_MIRRORED)))
        owed += u;
    }
    /* Swapped but not confirmed: in the word, not yet a grant. */
    if (t->st == SWAPPED) {
      swapped += t->need;
      if (mirrored && !(t->f.word & THROTTLE_BUDGET_MIRRORED))
        owed += t->need;
    }
    crediting += t->st == CREDITING;
    waiters += waiting (t);
    /* Granted at this step, from the queue. */
    if (t->st == QUEUED && t->bw.w.granted && !bf->granted[i]) {
      granted_now = true;
      for (j = 0; j < THREADS; j++)
        if (waiting (&s->t[j]) && s->t[j].queued_seq < t->queued_seq)
          sched_fail (s, "thread %d granted %" PRIu64 " units before thread %d, "
                "which queued first and still waits",
                i, t->bw.w.got, j);
    }
  }
  if (now != held + swapped)
    sched_fail (s, "%" PRIu64 " units in flight but the threads hold %" PRIu64
          " (a charge lost, taken twice or credited twice)", now,
          held + swapped);
  if (granted_now && held > cap && holders > 1)
    sched_fail (s, "a grant left %" PRIu64 " granted over the capacity %"
          PRIu64 " with %" PRIu64 " holders", held, cap, holders);
  if (mirrored && in_flight_of (&s->m) != owed)
    sched_fail (s, "the mirror has %" PRIu64 " units in flight but %" PRIu64
                " are owed to it", in_flight_of (&s->m), owed);
  if (waiters > 0 && now == 0 && crediting == 0)
    sched_fail (s, "%" PRIu64 " waiters, nothing in flight and no credit about "
          "to grant: the head is stranded (capacity %" PRIu64 ")",
          waiters, cap);
  if (waiters > 0 &&
      !(__atomic_load_n (&s->b.word, __ATOMIC_SEQ_CST) &
        THROTTLE_BUDGET_SLOW))
    sched_fail (s, "%" PRIu64 " waiters with the fast charge open", waiters);
}

/* A new request for thread i, under the capacity 'cap'. */
static void
arrive (struct sched *s, int i)
{
  struct thread *t = &s->t[i];
  uint64_t cap = throttle_budget_get_capacity (&s->b);
  uint64_t top = cap + cap / 2 + 1;

  t->kind = sim_pick (&s->rng, 3);
  t->quantum = t->kind == THROTTLE_BUDGET_PARTS ?
    1 + sim_pick (&s->rng, BASE / 4) : 0;
  /* Mostly small, as in the filter; now and then above the capacity. */
  t->need = 1 + (sim_pick (&s->rng, 4) ? sim_pick (&s->rng, BASE / 4)
                 : sim_pick (&s->rng, top));
  if (throttle_budget_fast_read (&s->b, t->need, &t->f)) {
    t->st = READ;
    say (s, "t%d: %s %" PRIu64 " (q %" PRIu64 "): fast read (word %"
         PRIu64 ", capacity %" PRIu64 ")", i, kind_name[t->kind], t->need,
         t->quantum, t->f.word, t->f.capacity);
  }
  else {
    t->st = LOCKED;
    cover.fast_refused++;
    say (s, "t%d: %s %" PRIu64 " (q %" PRIu64 "): fast refused",
         i, kind_name[t->kind], t->need, t->quantum);
  }
}

static void
step_thread (struct sched *s, const struct before *bf, int i, bool drain,
             bool *granted_now)
{
  struct thread *t = &s->t[i];
  bool seq_moved;
  uint64_t got, flags;
  int r;

  switch (t->st) {
  case IDLE:
    if (!drain)
      arrive (s, i);
    break;
  case READ:
    r = throttle_budget_fast_swap (&s->b, &t->f);
    say (s, "t%d: fast swap: %s", i,
         r == 0 ? "in the word" : r == 1 ? "word moved, again" :
         "locked path");
    if (r == 0) {
      /* The swap is when a fast charge takes its place. */
      if (bf->waiters > 0)
        sched_fail (s, "thread %d took %" PRIu64 " units by the fast path "
                    "past %u waiters", i, t->need, bf->waiters);
      t->st = SWAPPED;
    }
    else if (r == 1)
      cover.fast_retried++;
    else
      t->st = LOCKED;
    break;
  case SWAPPED:
    seq_moved = t->f.seq != __atomic_load_n (&s->b.cap_seq, __ATOMIC_SEQ_CST);
    r = throttle_budget_fast_confirm (&s->b, &t->f);
    say (s, "t%d: fast confirm: %s", i,
         r == 0 ? "taken" : "capacity moved: given back, locked path");
    if (r == 0) {
      cover.fast++;
      *granted_now = true;
      taken_at_once (s, NULL, i,
                     owe_mirror (s, t->need |
                                 (t->f.word & THROTTLE_BUDGET_MIRRORED)),
                     "by the fast path");
    }
    else {
      cover.fast_gave_back += seq_moved;
      t->st = LOCKED;
    }
    break;
  case LOCKED:
    r = throttle_budget_enqueue_locked (&s->b, &t->bw, t->kind, t->need,
                                        t->quantum, &got);
    say (s, "t%d: locked: %s %" PRIu64, i,
         r == 0 ? "taken" : r == 1 ? "queued for" : "failed", t->need);
    if (r == 0) {
      cover.locked_now++;
      *granted_now = true;
      taken_at_once (s, bf, i, owe_mirror (s, got), "under the lock");
    }
    else if (r == 1) {
      cover.queued++;
      t->st = QUEUED;
      t->queued_seq = s->next_seq++;
    }
    else
      sched_fail (s, "thread %d: the locked charge failed", i);
    break;
  case QUEUED:
    if (!drain && sim_pick (&s->rng, 6) == 0) {
      say (s, "t%d: abandon (%s)", i, t->bw.w.granted ? "granted" : "waiting");
      throttle_budget_abandon (&s->b, &t->bw);
      cover.abandoned++;
      s->cancelled++;
      t->st = IDLE;
      break;
    }
    r = throttle_budget_poll (&s->b, &t->bw, &got);
    say (s, "t%d: poll: %s", i, r == 0 ? "granted" : "waits");
    if (r == 0) {
      t->held = owe_mirror (s, got);
      s->admitted++;
      s->charged += t->held;
      t->st = HOLDING;
    }
    else if (r == -1)
      sched_fail (s, "thread %d: poll failed", i);
    break;
  case HOLDING:
    say (s, "t%d: credit %" PRIu64 ": subtract", i, t->held);
    flags = throttle_budget_credit_release (&s->b, t->held);
    if (flags & THROTTLE_BUDGET_MIRRORED)
      throttle_budget_credit (&s->m, t->held);
    if (flags & THROTTLE_BUDGET_SLOW) {
      cover.grants_owed++;
      t->st = CREDITING;
    }
    else
      t->st = IDLE;
    t->held = 0;
    break;
  case CREDITING:
    say (s, "t%d: credit: grant", i);
    throttle_budget_credit_grant (&s->b);
    t->st = IDLE;
    break;
  }
}

static void
set_capacity (struct sched *s)
{
  static const uint64_t caps[] = { 1, 2, BASE / 8, BASE / 4, BASE / 2,
                                   BASE, BASE * 2 };
  uint64_t cap = caps[sim_pick (&s->rng, sizeof caps / sizeof caps[0])];

  say (s, "set capacity %" PRIu64 " (in flight %" PRIu64 ")",
       cap, in_flight (s));
  throttle_budget_set_capacity (&s->b, cap);
}

static void
run_schedule (uint64_t seed, bool verbose)
{
  static struct sched sched;
  struct sched *s = &sched;
  struct throttle_stats st;
  struct before bf;
  bool granted_now;
  int i;

  memset (s, 0, sizeof *s);
  s->seed = s->rng = seed;
  s->verbose = verbose;
  throttle_budget_init (&s->b, BASE);
  /* Never binds: only its accounting is checked. */
  throttle_budget_init (&s->m, THROTTLE_BUDGET_MAX_UNITS);
  /* Decided from the seed, not drawn. */
  s->mirror_step = seed % 2 ? 1 + seed / 2 % STEPS : 0;

  for (s->step = 0; s->step < STEPS; s->step++) {
    look_before (s, &bf);
    granted_now = false;
    if (s->step + 1 == s->mirror_step) {
      say (s, "mirror (%" PRIu64 " in flight)", in_flight (s));
      throttle_budget_mirror (&s->b, &s->m);
      cover.mirrored++;
    }
    else if (sim_pick (&s->rng, 10) == 0)
      set_capacity (s);
    else
      step_thread (s, &bf, sim_pick (&s->rng, THREADS), false, &granted_now);
    check (s, &bf, granted_now);
  }

  /* The drain: every thread finishes what it started. */
  for (;;) {
    bool busy = false;

    for (i = 0; i < THREADS; i++)
      busy |= s->t[i].st != IDLE;
    if (!busy)
      break;
    if (s->step >= STEPS + DRAIN_STEPS)
      sched_fail (s, "the drain did not end");
    look_before (s, &bf);
    granted_now = false;
    i = sim_pick (&s->rng, THREADS);
    step_thread (s, &bf, i, true, &granted_now);
    check (s, &bf, granted_now);
    s->step++;
  }

  throttle_budget_get_stats (&s->b, &st);
  if (st.in_flight != 0 || st.waiters != 0)
    sched_fail (s, "after the drain: %" PRIu64 " in flight, %" PRIu64 " waiting",
          st.in_flight, st.waiters);
  if (__atomic_load_n (&s->b.word, __ATOMIC_SEQ_CST) & THROTTLE_BUDGET_SLOW)
    sched_fail (s, "after the drain the fast charge is still closed");
  if (in_flight_of (&s->m) != 0)
    sched_fail (s, "after the drain the mirror has %" PRIu64 " in flight",
                in_flight_of (&s->m));
  if (st.admitted != s->admitted || st.charged != s->charged ||
      st.cancelled != s->cancelled)
    sched_fail (s, "stats: admitted %" PRIu64 " charged %" PRIu64 " cancelled %"
          PRIu64 ", the threads saw %" PRIu64 ", %" PRIu64 ", %" PRIu64,
          st.admitted, st.charged, st.cancelled, s->admitted, s->charged,
          s->cancelled);
  throttle_budget_destroy (&s->b);
  throttle_budget_destroy (&s->m);
}

START_TEST (test_schedules)
{
  uint64_t n = sim_env_u64 ("THROTTLE_SIM_SCHEDULES", SCHEDULES);
  uint64_t seed = sim_env_u64 ("THROTTLE_SIM_SEED", 0);
  uint64_t first = sim_env_u64 ("THROTTLE_SIM_FIRST", 1);
  uint64_t i;

  if (seed) {
    run_schedule (seed, true);
    return;
  }
  for (i = 0; i < n; i++) {
    run_schedule (first + i, false);
    if ((i + 1) % 100000 == 0)
      fprintf (stderr, "test-budget-sched: %" PRIu64 " schedules passed\n",
               i + 1);
  }
  fprintf (stderr, "test-budget-sched: %" PRIu64 " schedules of %u steps "
           "passed: %" PRIu64 " fast charges (%" PRIu64 " commits again, %"
           PRIu64 " given back for a capacity change, %" PRIu64
           " refused), %" PRIu64 " taken under the lock, %" PRIu64
           " queued, %" PRIu64 " abandoned, %" PRIu64 " credits that "
           "granted, %" PRIu64 " mirrored, %" PRIu64 " grants owed to the "
           "mirror\n", n, STEPS, cover.fast, cover.fast_retried,
           cover.fast_gave_back, cover.fast_refused, cover.locked_now,
           cover.queued, cover.abandoned, cover.grants_owed, cover.mirrored,
           cover.owed_mirror);
  /* Every race of the fast path is reached in the default run. */
  if (n >= SCHEDULES) {
    ck_assert_uint_gt (cover.fast_retried, 0);
    ck_assert_uint_gt (cover.fast_gave_back, 0);
    ck_assert_uint_gt (cover.grants_owed, 0);
    ck_assert_uint_gt (cover.abandoned, 0);
    ck_assert_uint_gt (cover.owed_mirror, 0);
  }
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("budget-sched");
  TCase *tc = tcase_create ("schedules");

  /* About a second per 20000 schedules; sanitizer builds 5-10x. */
  tcase_set_timeout (tc, 300);
  tcase_add_test (tc, test_schedules);
  suite_add_tcase (s, tc);
  return s;
}
