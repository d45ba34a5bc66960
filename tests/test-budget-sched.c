/* SPDX-License-Identifier: BSD-3-Clause */
/* The budget's fast path, mirroring and capacity changes
 * (lib/throttle-budget.c), proven over seeded random schedules of
 * their atomic steps.
 *
 * test-sim.c steps the admission whole: each charge and credit is one
 * step there.  Here the steps are the budget's own atomic ones, so the
 * races between them are among the schedules:
 * - a fast charge reads (throttle_budget_fast_read), swaps
 *   (throttle_budget_fast_swap) and rechecks the capacity's sequence
 *   count (throttle_budget_fast_recheck) at three steps with anything
 *   between them; one that raced a capacity change gives its units back
 *   as a credit does, in two steps;
 * - a credit subtracts (throttle_budget_credit_release) and grants
 *   (throttle_budget_credit_grant) at two steps;
 * - a capacity change makes the sequence count odd and stores the
 *   capacity (throttle_budget_set_capacity_begin), then makes it even
 *   and grants (throttle_budget_set_capacity_end), with the lock-free
 *   steps of other threads between;
 * - mirroring (throttle_budget_mirror, the binding of an export to the
 *   server's budget) reads what the budget holds and charges the server
 *   (throttle_budget_mirror_read), marks the budget
 *   (throttle_budget_mirror_mark), then credits the server the excess,
 *   with credits and fast charges between;
 * - a budget shut down (throttle_budget_shutdown) at any step;
 * - and the locked steps (a charge decided under the lock, a waiter's
 *   poll or abandonment) in any order among them.
 * A step that needs a lock another actor keeps across its steps (a
 * capacity change, a mirroring under way) waits, as a thread would.
 *
 * Two exports' budgets and a server's: simulated threads, each on one
 * export, run requests of both kinds (whole, in parts; some above the
 * capacity) one after another, as lib/throttle-admit.c does: the
 * export's grant, then, if the export was mirrored when it granted
 * (THROTTLE_BUDGET_MIRRORED in the grant), the same units charged to
 * the server, where they may wait (its capacity is often below the
 * exports' sum, at times below one export's); their credit gives them
 * back to the export and, if the export's credit says it is mirrored,
 * to the server.  Each export is mirrored into the server at a step
 * drawn from the seed (at once, later, or never); the capacities move
 * up and down, below a quantum and to 1.  Then a drain: every thread
 * finishes.
 *
 * Checked after every step:
 * - accounting: each export's units in flight are exactly what its
 *   threads put there and have not yet subtracted (granted, or swapped
 *   and not yet confirmed or given back); the server's are what the
 *   threads were granted there, plus every unit an export holds
 *   unmarked once mirrored (the mirroring charged it), plus credits to
 *   the server under way, plus what a mirroring under way charged;
 *   so a charge lost, taken twice or credited twice, or a unit owed to
 *   the server and never given back, shows at once;
 * - the grant: a whole request is granted all it needs, a part a whole
 *   number of quanta of it;
 * - the bound: a step that granted anything on a budget leaves at most
 *   its capacity in flight, or the one request it granted alone, and a
 *   fast charge kept counts only if the capacity it fitted is in force;
 * - FIFO: a charge taken at once (fast or locked) finds no waiter
 *   queued on its budget, and a waiter is never granted while one
 *   queued before it on the same budget still waits;
 * - liveness: waiters and nothing in flight only while some credit is
 *   between its subtraction and its grant, or a capacity change is
 *   under way (throttle-budget.h); never waiters with the fast charge
 *   open;
 * - after the drain: nothing in flight, nobody waiting, the fast path
 *   open again (unless shut down), and each budget's statistics
 *   (admitted, charged, clamped, waited, cancelled, peak) exactly what
 *   the threads saw.
 *
 * THROTTLE_SIM_SCHEDULES=N runs N schedules (default 20000) from seed
 * THROTTLE_SIM_FIRST (default 1); THROTTLE_SIM_SEED=S replays seed S
 * and prints its steps.  A failure prints its seed and its steps.
 * tests/test-budget-mutants.sh builds this test against mutated copies
 * of lib/throttle-budget.c and checks that each mutation fails it.
 */

#include <config.h>

#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "throttle-budget.h"
#include "check-main.h"
#include "sim-seed.h"

#define SCHEDULES 20000
#define THREADS 6
#define NB 3                    /* budgets: exports 0 and 1, the server */
#define SRV 2
#define STEPS 240
#define DRAIN_STEPS 4000
#define BASE 64                 /* the capacity's scale */
#define MAX_CREDITS 4

enum thread_state {
  IDLE,                         /* no request */
  READ,                         /* the fast charge has read: swap next */
  SWAPPED,                      /* its units are in the word: recheck next */
  LOCKED,                       /* the locked path decides next */
  QUEUED,                       /* waiting (maybe granted, not yet polled) */
  HOLDING,                      /* granted everywhere: credit next */
  CREDITING,                    /* credits under way (cr), then 'after' */
};

/* A credit of 'units' to budget b, in its two steps. */
struct credit {
  int b;
  uint64_t units;
  bool granting;                /* subtracted; the grant is next */
  bool in_holds;                /* the units are in the thread's holds[b] */
  /* An export's: if it says the export is mirrored, credit the server
   * as many, from what the thread was granted there (follow_in_holds)
   * or from what the mirroring charged (not).
   */
  bool follow, follow_in_holds;
};

struct thread {
  enum thread_state st, after;
  int exp;                      /* its export's budget */
  int cur;                      /* the budget it charges now */
  enum throttle_budget_kind kind;
  uint64_t need, quantum;       /* of the charge at 'cur' */
  struct throttle_budget_fast f;
  uint64_t swap_word;           /* units in flight just after its swap */
  struct throttle_budget_waiter bw;
  bool was_granted;             /* bw granted at the last check */
  bool grant_clamped;           /* bw's grant was above the capacity */
  uint64_t queued_seq;          /* when it queued: FIFO */
  /* Units it put in each budget's word (or was granted there and
   * polled) and has not yet subtracted.
   */
  uint64_t holds[NB];
  bool exp_marked;              /* its export units were granted marked */
  struct credit cr[MAX_CREDITS];
  int ncr;
};

/* A mirroring of export 'b' into the server, in its steps. */
enum mirror_state { M_NONE, M_MARK, M_CREDIT };

/* What each budget's statistics must say. */
struct seen {
  uint64_t admitted, charged, clamped, waited, cancelled, peak;
};

struct sched {
  uint64_t seed, rng;
  unsigned step;
  bool verbose;
  struct throttle_budget b[NB];
  struct thread t[THREADS];
  uint64_t next_seq;
  unsigned mirror_step[2];      /* 0: never mirrored */
  bool mirror_done[2];
  /* The mirroring under way, if any: its export, what it charged the
   * server, then the excess it credits back.
   */
  enum mirror_state ms;
  int mb;
  uint64_t mx;
  struct credit mcr;
  /* The capacity change under way, if any (-1). */
  int cb;
  unsigned shutdown_step;       /* 0: never; budgets shut one a step */
  bool shut[NB];
  unsigned locks;               /* budgets whose lock an actor keeps */
  struct seen seen[NB];
  char log[STEPS + DRAIN_STEPS + 8][112];
};

static struct {
  uint64_t fast, fast_retried, fast_gave_back, fast_refused, locked_now,
    queued, abandoned, grants_owed, mirrored, owed_mirror, srv_waited,
    mirror_raced, odd_window, blocked, shut_failed, srv_below_exp,
    clamped;
} cover;

static const char *const kind_name[] = { "whole", "parts" };
static const char *const bname[NB] = { "export 0", "export 1", "server" };

/* One thread here plays several: a capacity change or a mirroring
 * keeps a budget's lock across steps while other simulated threads
 * take other budgets' locks, so ThreadSanitizer would see one thread
 * take two locks in both orders.  No real thread does (the lock rules
 * are the real threads' tests' to check, test-budget-threads.c): its
 * deadlock detection is off for this program alone.
 */
const char *__tsan_default_options (void);
const char *
__tsan_default_options (void)
{
  return "detect_deadlocks=0";
}

/* The schedule running, for the abort handler. */
static struct sched *current;

static void
print_schedule (struct sched *s)
{
  unsigned i;

  fprintf (stderr, "test-budget-sched: seed %" PRIu64 ", %u steps "
           "(replay: THROTTLE_SIM_SEED=%" PRIu64 "):\n",
           s->seed, s->step, s->seed);
  for (i = 0; i <= s->step && i < sizeof s->log / sizeof s->log[0]; i++)
    fprintf (stderr, "  %4u %s\n", i, s->log[i]);
}

/* A lib abort (crediting more than is held, a debug assertion): say
 * which schedule it was, as a failed check would.
 */
static void
on_abort (int sig)
{
  if (current) {
    print_schedule (current);
    fprintf (stderr, "test-budget-sched: step %u: aborted in the budget: "
             "schedule of seed %" PRIu64 " failed at step %u\n",
             current->step, current->seed, current->step);
  }
  signal (sig, SIG_DFL);
  raise (sig);
}

static void __attribute__ ((format (printf, 2, 3), noreturn))
sched_fail (struct sched *s, const char *fmt, ...)
{
  va_list ap;

  current = NULL;
  print_schedule (s);
  va_start (ap, fmt);
  sim_vfail ("test-budget-sched", s->seed, s->step, fmt, ap);
}

/* One line a step: what it did (a step that did nothing says so). */
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
in_flight (struct sched *s, int b)
{
  return __atomic_load_n (&s->b[b].word, __ATOMIC_SEQ_CST) &
    THROTTLE_BUDGET_MAX_UNITS;
}

static bool
mirrored (struct sched *s, int b)
{
  return b != SRV && throttle_budget_mirrored (&s->b[b]);
}

static bool
waiting (const struct thread *t, int b)
{
  return t->st == QUEUED && t->cur == b && !t->bw.w.granted;
}

/* Units granted to a queued thread and not yet polled. */
static uint64_t
queued_granted (const struct thread *t, int b)
{
  return t->st == QUEUED && t->cur == b && t->bw.w.granted ?
    t->bw.w.got & THROTTLE_BUDGET_MAX_UNITS : 0;
}

/* --- credits ------------------------------------------------------------ */

/* A credit of units the thread holds at b. */
static void
push_credit (struct thread *t, int b, uint64_t units, bool follow,
             bool follow_in_holds)
{
  struct credit *c = &t->cr[t->ncr++];

  c->b = b;
  c->units = units;
  c->granting = false;
  c->in_holds = true;
  c->follow = follow;
  c->follow_in_holds = follow_in_holds;
}

/* The next step of credit c: the subtraction or the grant.  Returns
 * true when c is done; *follow: a server credit it asks for next.
 */
static bool
step_credit (struct sched *s, struct credit *c, uint64_t *holds,
             const char *who, struct credit *follow, bool *followed)
{
  uint64_t flags;

  *followed = false;
  if (c->granting) {
    say (s, "%s: credit %s: grant", who, bname[c->b]);
    throttle_budget_credit_grant (&s->b[c->b]);
    return true;
  }
  say (s, "%s: credit %s %" PRIu64 ": subtract", who, bname[c->b], c->units);
  flags = throttle_budget_credit_release (&s->b[c->b], c->units);
  if (c->in_holds)
    holds[c->b] -= c->units;
  if (c->follow && (flags & THROTTLE_BUDGET_MIRRORED)) {
    follow->b = SRV;
    follow->units = c->units;
    follow->granting = false;
    follow->in_holds = c->follow_in_holds;
    follow->follow = follow->follow_in_holds = false;
    *followed = true;
  }
  if (flags & THROTTLE_BUDGET_SLOW) {
    cover.grants_owed++;
    c->granting = true;
    return false;
  }
  return true;
}

/* --- the checks ------------------------------------------------------- */

/* Whether the units t holds at its export were granted marked
 * THROTTLE_BUDGET_MIRRORED (owed to the server by t's own charge):
 * a fast charge's by the word its swap found.
 */
static bool
exp_units_marked (const struct thread *t)
{
  if (t->cur == t->exp &&
      (t->st == SWAPPED || (t->st == CREDITING && t->after == LOCKED)))
    return (t->f.word & THROTTLE_BUDGET_MIRRORED) != 0;
  return t->exp_marked;
}

/* What each step may have granted, seen against the state before it. */
struct before {
  unsigned waiters[NB];
};

static void
look_before (struct sched *s, struct before *bf)
{
  int i, b;

  for (b = 0; b < NB; b++)
    bf->waiters[b] = 0;
  for (i = 0; i < THREADS; i++)
    for (b = 0; b < NB; b++)
      bf->waiters[b] += waiting (&s->t[i], b);
}

/* Grants seen in a step, per budget: how many, and the units of the
 * last, for the bound (one request alone above the capacity).
 */
struct grants {
  unsigned n[NB];
  uint64_t units[NB];
  bool peak[NB];                /* a grant or a charge the peak counts */
};

static void
granted (struct grants *g, int b, uint64_t units)
{
  g->n[b]++;
  g->units[b] = units;
  g->peak[b] = true;
}

/* A grant of 'units' of 'need' to a request of kind 'kind'. */
static void
check_grant (struct sched *s, int i, enum throttle_budget_kind kind,
             uint64_t need, uint64_t quantum, uint64_t units)
{
  if (units == 0 || units > need ||
      (kind == THROTTLE_BUDGET_WHOLE && units != need) ||
      (kind == THROTTLE_BUDGET_PARTS && units != need && units % quantum))
    sched_fail (s, "thread %d: a %s request of %" PRIu64 " (quantum %"
                PRIu64 ") granted %" PRIu64, i, kind_name[kind], need,
                quantum, units);
}

static void
check (struct sched *s, const struct before *bf, struct grants *g)
{
  uint64_t expect[NB] = { 0 }, crediting[NB] = { 0 }, waiters[NB] = { 0 };
  uint64_t now, cap;
  int i, j, b;

  for (i = 0; i < THREADS; i++) {
    struct thread *t = &s->t[i];

    for (b = 0; b < NB; b++) {
      uint64_t u = t->holds[b] + queued_granted (t, b);

      expect[b] += u;
      waiters[b] += waiting (t, b);
    }
    /* Export units held unmarked on a mirrored export: the mirroring
     * charged the server for them.
     */
    if (mirrored (s, t->exp)) {
      if (!exp_units_marked (t))
        expect[SRV] += t->holds[t->exp];
      if (t->st == QUEUED && t->cur == t->exp && t->bw.w.granted &&
          !(t->bw.w.got & THROTTLE_BUDGET_MIRRORED))
        expect[SRV] += queued_granted (t, t->exp);
    }
    for (j = 0; j < t->ncr; j++) {
      /* A server credit from what the mirroring charged: no longer in
       * any export, still in the server until subtracted.
       */
      if (t->cr[j].b == SRV && !t->cr[j].in_holds && !t->cr[j].granting)
        expect[SRV] += t->cr[j].units;
      crediting[t->cr[j].b] += t->cr[j].granting;
    }
    /* Granted from the queue at this step. */
    if (t->st == QUEUED && t->bw.w.granted && !t->was_granted) {
      uint64_t u = t->bw.w.got & THROTTLE_BUDGET_MAX_UNITS;

      t->was_granted = true;
      t->grant_clamped = u > throttle_budget_get_capacity (&s->b[t->cur]);
      granted (g, t->cur, u);
      for (j = 0; j < THREADS; j++)
        if (waiting (&s->t[j], t->cur) &&
            s->t[j].queued_seq < t->queued_seq)
          sched_fail (s, "thread %d granted %" PRIu64 " units on %s before "
                      "thread %d, which queued first and still waits",
                      i, t->bw.w.got, bname[t->cur], j);
    }
  }
  if (s->ms == M_MARK)
    expect[SRV] += s->mx;
  if (s->ms == M_CREDIT && !s->mcr.granting)
    expect[SRV] += s->mcr.units;
  if (s->ms == M_CREDIT)
    crediting[SRV] += s->mcr.granting;

  for (b = 0; b < NB; b++) {
    now = in_flight (s, b);
    cap = throttle_budget_get_capacity (&s->b[b]);
    if (now != expect[b])
      sched_fail (s, "%s: %" PRIu64 " units in flight but %" PRIu64
                  " are held or owed (a charge lost, taken twice or "
                  "credited twice)", bname[b], now, expect[b]);
    if (g->n[b] > 0 && now > cap && !(g->n[b] == 1 && now == g->units[b]))
      sched_fail (s, "%s: a grant left %" PRIu64 " in flight over the "
                  "capacity %" PRIu64, bname[b], now, cap);
    if (g->peak[b] && now > s->seen[b].peak)
      s->seen[b].peak = now;
    if (waiters[b] > 0 && now == 0 && crediting[b] == 0 && s->cb != b &&
        !s->shut[b])
      sched_fail (s, "%s: %" PRIu64 " waiters, nothing in flight and no "
                  "credit about to grant: the head is stranded (capacity %"
                  PRIu64 ")", bname[b], waiters[b], cap);
    if (waiters[b] > 0 &&
        !(__atomic_load_n (&s->b[b].word, __ATOMIC_SEQ_CST) &
          THROTTLE_BUDGET_SLOW))
      sched_fail (s, "%s: %" PRIu64 " waiters with the fast charge open",
                  bname[b], waiters[b]);
  }
  if (throttle_budget_get_capacity (&s->b[SRV]) <
      throttle_budget_get_capacity (&s->b[0]))
    cover.srv_below_exp++;
  (void) bf;
}

/* --- a thread's steps ------------------------------------------------- */

/* Begin a charge of t->need units at budget t->cur: the fast read. */
static void
begin_charge (struct sched *s, int i)
{
  struct thread *t = &s->t[i];

  if (throttle_budget_fast_read (&s->b[t->cur], t->need, &t->f))
    t->st = READ;
  else {
    t->st = LOCKED;
    cover.fast_refused++;
  }
}

/* A request for thread i at its export. */
static void
arrive (struct sched *s, int i)
{
  struct thread *t = &s->t[i];
  uint64_t cap = throttle_budget_get_capacity (&s->b[t->exp]);
  uint64_t top = cap + cap / 2 + 1;

  t->cur = t->exp;
  t->kind = sim_pick (&s->rng, 2);
  t->quantum = t->kind == THROTTLE_BUDGET_PARTS ?
    1 + sim_pick (&s->rng, BASE / 4) : 0;
  /* Mostly small, as in the filter; now and then above the capacity. */
  t->need = 1 + (sim_pick (&s->rng, 4) ? sim_pick (&s->rng, BASE / 4)
                 : sim_pick (&s->rng, top));
  t->exp_marked = false;
  begin_charge (s, i);
  say (s, "t%d: %s %" PRIu64 " (q %" PRIu64 ") at %s: fast %s", i,
       kind_name[t->kind], t->need, t->quantum, bname[t->cur],
       t->st == READ ? "read" : "refused");
}

/* Thread i was granted 'got' at t->cur and keeps it. */
static void
got_grant (struct sched *s, int i, uint64_t got, bool clamped)
{
  struct thread *t = &s->t[i];
  struct seen *sn = &s->seen[t->cur];
  uint64_t units = got & THROTTLE_BUDGET_MAX_UNITS;

  check_grant (s, i, t->kind, t->need, t->quantum, units);
  t->holds[t->cur] += units;
  sn->admitted++;
  sn->charged += units;
  sn->clamped += clamped;
  cover.clamped += clamped;
  if (t->cur == SRV) {
    t->st = HOLDING;
    return;
  }
  t->exp_marked = (got & THROTTLE_BUDGET_MIRRORED) != 0;
  if (!t->exp_marked) {
    t->st = HOLDING;
    return;
  }
  /* Owed to the server: charge it the same units (throttle-admit.c). */
  cover.owed_mirror++;
  t->cur = SRV;
  t->kind = THROTTLE_BUDGET_WHOLE;
  t->need = units;
  t->quantum = 0;
  begin_charge (s, i);
}

/* Thread i ends its request holding nothing at t->cur: its export
 * units go back if it held them while charging the server (owed to
 * the server by its own charge, which never happened: no server
 * credit).
 */
static void
give_up (struct sched *s, int i)
{
  struct thread *t = &s->t[i];

  t->ncr = 0;
  if (t->cur == SRV)
    push_credit (t, t->exp, t->holds[t->exp], false, false);
  t->st = t->ncr ? CREDITING : IDLE;
  t->after = IDLE;
}

/* Whose locks thread i's next step takes (a bit per budget). */
static unsigned
locks_of (struct sched *s, int i)
{
  struct thread *t = &s->t[i];
  struct throttle_budget *b = &s->b[t->cur];

  switch (t->st) {
  case IDLE: case READ: case HOLDING:
    return 0;
  case SWAPPED:
    return 0;
  case LOCKED:
    return 1u << t->cur;
  case QUEUED:
    /* An abandoned grant made before the mirroring gives its units
     * back to the server too, under its lock.
     */
    return 1u << t->cur | (t->cur != SRV ? 1u << SRV : 0);
  case CREDITING:
    return t->cr[0].granting ? 1u << t->cr[0].b : 0;
  }
  (void) b;
  return 0;
}

static void
step_thread (struct sched *s, const struct before *bf, int i, bool drain,
             struct grants *g)
{
  struct thread *t = &s->t[i];
  struct credit follow;
  bool followed;
  uint64_t got, cap;
  char who[8];
  int r;

  snprintf (who, sizeof who, "t%d", i);
  switch (t->st) {
  case IDLE:
    if (!drain)
      arrive (s, i);
    else
      say (s, "t%d: idle", i);
    break;
  case READ:
    r = throttle_budget_fast_swap (&s->b[t->cur], &t->f);
    say (s, "t%d: fast swap at %s: %s", i, bname[t->cur],
         r == 0 ? "in the word" : r == 1 ? "word moved, again" :
         "locked path");
    if (r == 0) {
      /* The swap is when a fast charge takes its place: never past a
       * waiter, nor while the fast charge is closed (a decision under
       * the lock, a mirroring, a shutdown).
       */
      if (bf->waiters[t->cur] > 0)
        sched_fail (s, "thread %d took %" PRIu64 " units by the fast path "
                    "past %u waiters", i, t->need, bf->waiters[t->cur]);
      if (t->f.word & THROTTLE_BUDGET_SLOW)
        sched_fail (s, "thread %d took %" PRIu64 " units by the fast path "
                    "past the closed fast charge of %s", i, t->need,
                    bname[t->cur]);
      t->holds[t->cur] += t->need;
      t->swap_word = (t->f.word & THROTTLE_BUDGET_MAX_UNITS) + t->need;
      t->st = SWAPPED;
    }
    else if (r == 1)
      cover.fast_retried++;
    else
      t->st = LOCKED;
    break;
  case SWAPPED:
    r = throttle_budget_fast_recheck (&s->b[t->cur], &t->f);
    say (s, "t%d: fast recheck at %s: %s", i, bname[t->cur],
         r == 0 ? "taken" : "capacity moved: give back");
    if (r == 0) {
      /* Kept: the capacity it fitted must be the one in force. */
      cap = throttle_budget_get_capacity (&s->b[t->cur]);
      if (t->swap_word > cap)
        sched_fail (s, "thread %d kept a fast charge that left %" PRIu64
                    " in flight over the capacity %" PRIu64 " of %s", i,
                    t->swap_word, cap, bname[t->cur]);
      cover.fast++;
      if (t->swap_word > s->seen[t->cur].peak)
        s->seen[t->cur].peak = t->swap_word;
      t->holds[t->cur] -= t->need;    /* counted again as a grant */
      got_grant (s, i, t->need | (t->f.word & THROTTLE_BUDGET_MIRRORED),
                 false);
    }
    else {
      /* Given back as fast_confirm does: to the server too if the
       * mirroring charged it for them (taken unmarked).
       */
      cover.fast_gave_back++;
      t->ncr = 0;
      push_credit (t, t->cur, t->need,
                   t->cur != SRV && !(t->f.word & THROTTLE_BUDGET_MIRRORED),
                   false);
      t->st = CREDITING;
      t->after = LOCKED;
    }
    break;
  case LOCKED:
    r = throttle_budget_enqueue_locked (&s->b[t->cur], &t->bw, t->kind,
                                        t->need, t->quantum, &got);
    say (s, "t%d: locked at %s: %s %" PRIu64, i, bname[t->cur],
         r == 0 ? "taken" : r == 1 ? "queued for" : "failed", t->need);
    if (r == 0) {
      uint64_t u = got & THROTTLE_BUDGET_MAX_UNITS;

      if (bf->waiters[t->cur] > 0)
        sched_fail (s, "thread %d took %" PRIu64 " units under the lock "
                    "past %u waiters", i, u, bf->waiters[t->cur]);
      cover.locked_now++;
      granted (g, t->cur, u);
      got_grant (s, i, got,
                 u > throttle_budget_get_capacity (&s->b[t->cur]));
    }
    else if (r == 1) {
      cover.queued++;
      cover.srv_waited += t->cur == SRV;
      t->st = QUEUED;
      t->was_granted = false;
      t->queued_seq = s->next_seq++;
    }
    else if (s->shut[t->cur]) {
      cover.shut_failed++;
      give_up (s, i);
    }
    else
      sched_fail (s, "thread %d: the locked charge failed", i);
    break;
  case QUEUED:
    if (!drain && sim_pick (&s->rng, 6) == 0) {
      say (s, "t%d: abandon at %s (%s)", i, bname[t->cur],
           t->bw.w.granted ? "granted" : "waiting");
      throttle_budget_abandon (&s->b[t->cur], &t->bw);
      cover.abandoned++;
      s->seen[t->cur].cancelled++;
      give_up (s, i);
      break;
    }
    r = throttle_budget_poll (&s->b[t->cur], &t->bw, &got);
    say (s, "t%d: poll at %s: %s", i, bname[t->cur],
         r == 0 ? "granted" : r == 1 ? "waits" : "failed, shut down");
    if (r == 0) {
      s->seen[t->cur].waited++;
      got_grant (s, i, got, t->grant_clamped);
    }
    else if (r == -1 && s->shut[t->cur]) {
      cover.shut_failed++;
      s->seen[t->cur].cancelled++;
      give_up (s, i);
    }
    else if (r == -1)
      sched_fail (s, "thread %d: poll failed", i);
    break;
  case HOLDING:
    /* Done: the export's units back, then the server's if the export
     * says it is mirrored (throttle_admit_credit).
     */
    t->ncr = 0;
    push_credit (t, t->exp, t->holds[t->exp], true, t->exp_marked);
    t->after = IDLE;
    t->st = CREDITING;
    /* The subtraction is this step. */
    /* fall through */
  case CREDITING:
    if (step_credit (s, &t->cr[0], t->holds, who, &follow, &followed)) {
      memmove (&t->cr[0], &t->cr[1], (t->ncr - 1) * sizeof t->cr[0]);
      t->ncr--;
    }
    if (followed)
      t->cr[t->ncr++] = follow;
    if (t->ncr == 0)
      t->st = t->after;
    break;
  }
}

/* --- the other actors ------------------------------------------------- */

static uint64_t
random_cap (struct sched *s, int b)
{
  static const uint64_t caps[] = { 1, 2, BASE / 8, BASE / 4, BASE / 2,
                                   BASE, BASE * 2, BASE * 3 };

  return caps[sim_pick (&s->rng, sizeof caps / sizeof caps[0])];
}

/* Begin a capacity change (the lock kept) or end it (granting). */
static void
step_capacity (struct sched *s, int b)
{
  if (s->cb >= 0) {
    say (s, "set capacity %s: end (%" PRIu64 " in flight)", bname[s->cb],
         in_flight (s, s->cb));
    throttle_budget_set_capacity_end (&s->b[s->cb]);
    s->locks &= ~(1u << s->cb);
    s->cb = -1;
  }
  else {
    uint64_t cap = random_cap (s, b);

    say (s, "set capacity %s %" PRIu64 ": begin (%" PRIu64 " in flight)",
         bname[b], cap, in_flight (s, b));
    throttle_budget_set_capacity_begin (&s->b[b], cap);
    s->locks |= 1u << b;
    s->cb = b;
  }
}

static void
step_mirror (struct sched *s, int b, struct grants *g)
{
  struct credit follow;
  bool followed;

  switch (s->ms) {
  case M_NONE:
    if (!throttle_budget_mirror_read (&s->b[b], &s->b[SRV], &s->mx))
      sched_fail (s, "%s mirrored twice", bname[b]);
    say (s, "mirror %s: read %" PRIu64 ", charged to the server",
         bname[b], s->mx);
    s->mb = b;
    s->ms = M_MARK;
    s->locks |= 1u << b;
    g->peak[SRV] = true;
    cover.mirrored++;
    break;
  case M_MARK:
    s->mcr.units = throttle_budget_mirror_mark (&s->b[s->mb], s->mx);
    say (s, "mirror %s: marked; %" PRIu64 " credited meanwhile",
         bname[s->mb], s->mcr.units);
    s->locks &= ~(1u << s->mb);
    s->mirror_done[s->mb] = true;
    /* Credits only lower what the budget holds meanwhile. */
    if (s->mcr.units > s->mx)
      sched_fail (s, "mirror %s: %" PRIu64 " units to credit back to the "
                  "server, which it charged %" PRIu64 ": less than what is "
                  "held or owed", bname[s->mb], s->mcr.units, s->mx);
    cover.mirror_raced += s->mcr.units > 0;
    s->mcr.b = SRV;
    s->mcr.granting = s->mcr.in_holds = false;
    s->mcr.follow = s->mcr.follow_in_holds = false;
    s->ms = s->mcr.units ? M_CREDIT : M_NONE;
    break;
  case M_CREDIT:
    if (step_credit (s, &s->mcr, NULL, "mirror", &follow, &followed))
      s->ms = M_NONE;
    break;
  }
}

/* --- a schedule ----------------------------------------------------- */

static void
run_schedule (uint64_t seed, bool verbose)
{
  static struct sched sched;
  struct sched *s = &sched;
  struct throttle_stats st;
  struct before bf;
  struct grants g;
  unsigned shut_next = 0;
  int i, b;

  memset (s, 0, sizeof *s);
  s->seed = s->rng = seed;
  s->verbose = verbose;
  s->cb = -1;
  current = s;
  throttle_budget_init (&s->b[0], BASE);
  throttle_budget_init (&s->b[1], BASE);
  /* A server that never binds in a quarter of the schedules; else one
   * that makes requests wait, below the exports' sum.
   */
  throttle_budget_init (&s->b[SRV], seed % 4 == 3 ? THROTTLE_BUDGET_MAX_UNITS :
                        BASE / 2 + sim_pick (&s->rng, BASE + BASE / 2));
  for (i = 0; i < THREADS; i++)
    s->t[i].exp = i % 2;
  /* Decided from the seed: each export mirrored at once (step 1),
   * later, or never; a shutdown in one schedule in eight.
   */
  for (b = 0; b < 2; b++) {
    unsigned k = seed / (b ? 7 : 3) % 4;

    s->mirror_step[b] = k == 0 ? 0 : k == 1 ? 1 :
      1 + (seed * (b ? 40503 : 2654435761)) % STEPS;
  }
  if (seed / 5 % 8 == 0)
    s->shutdown_step = 1 + seed / 40 % STEPS;
  say (s, "seed %" PRIu64 ": server capacity %" PRIu64 ", mirror steps %u "
       "%u, shutdown step %u", seed,
       throttle_budget_get_capacity (&s->b[SRV]), s->mirror_step[0],
       s->mirror_step[1], s->shutdown_step);

  for (s->step = 1; ; s->step++) {
    bool drain = s->step > STEPS;
    bool busy = s->ms != M_NONE || s->cb >= 0;
    int actors[THREADS + 4], na = 0;
    unsigned pick;

    for (i = 0; i < THREADS; i++)
      busy |= s->t[i].st != IDLE;
    if (drain && !busy)
      break;
    if (s->step > STEPS + DRAIN_STEPS)
      sched_fail (s, "the drain did not end");
    look_before (s, &bf);
    memset (&g, 0, sizeof g);

    /* What may step now: the threads whose step takes no lock kept by
     * another actor, the mirroring and the capacity change under way.
     */
    for (i = 0; i < THREADS; i++) {
      if (drain && s->t[i].st == IDLE)
        continue;
      if (locks_of (s, i) & s->locks)
        cover.blocked++;
      else
        actors[na++] = i;
    }
    if (s->ms == M_MARK ||
        (s->ms == M_CREDIT &&
         !(s->mcr.granting && (s->locks & (1u << SRV)))))
      actors[na++] = THREADS;
    if (s->cb >= 0)
      actors[na++] = THREADS + 1;

    /* The steps decided from the seed come first, when their locks are
     * free.
     */
    for (b = 0; b < 2; b++)
      if (!drain && s->ms == M_NONE && !s->mirror_done[b] &&
          s->mirror_step[b] && s->step >= s->mirror_step[b] &&
          !(s->locks & (1u << b | 1u << SRV)))
        break;
    if (b < 2) {
      step_mirror (s, b, &g);
      check (s, &bf, &g);
      continue;
    }
    if (s->shutdown_step && s->step >= s->shutdown_step + shut_next &&
        shut_next < NB && !(s->locks & (1u << shut_next))) {
      say (s, "shutdown %s", bname[shut_next]);
      throttle_budget_shutdown (&s->b[shut_next]);
      s->shut[shut_next++] = true;
      check (s, &bf, &g);
      continue;
    }
    if (!drain && s->cb < 0 && sim_pick (&s->rng, 10) == 0) {
      b = sim_pick (&s->rng, NB);
      if (!(s->locks & (1u << b))) {
        step_capacity (s, b);
        check (s, &bf, &g);
        continue;
      }
    }
    if (na == 0)
      sched_fail (s, "no actor may step: a lock kept for good");
    pick = actors[sim_pick (&s->rng, na)];
    if (pick == THREADS)
      step_mirror (s, s->mb, &g);
    else if (pick == THREADS + 1) {
      cover.odd_window++;
      step_capacity (s, s->cb);
    }
    else
      step_thread (s, &bf, pick, drain, &g);
    check (s, &bf, &g);
  }

  for (b = 0; b < NB; b++) {
    struct seen *sn = &s->seen[b];

    throttle_budget_get_stats (&s->b[b], &st);
    if (st.in_flight != 0 || st.waiters != 0)
      sched_fail (s, "%s after the drain: %" PRIu64 " in flight, %" PRIu64
                  " waiting", bname[b], st.in_flight, st.waiters);
    if (!s->shut[b] &&
        (__atomic_load_n (&s->b[b].word, __ATOMIC_SEQ_CST) &
         THROTTLE_BUDGET_SLOW))
      sched_fail (s, "%s: after the drain the fast charge is still closed",
                  bname[b]);
    if (st.admitted != sn->admitted || st.charged != sn->charged ||
        st.clamped != sn->clamped || st.waited != sn->waited ||
        st.cancelled != sn->cancelled || st.peak != sn->peak)
      sched_fail (s, "%s: stats admitted %" PRIu64 " charged %" PRIu64
                  " clamped %" PRIu64 " waited %" PRIu64 " cancelled %"
                  PRIu64 " peak %" PRIu64 ", the threads saw %" PRIu64
                  ", %" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %"
                  PRIu64, bname[b], st.admitted, st.charged, st.clamped,
                  st.waited, st.cancelled, st.peak, sn->admitted,
                  sn->charged, sn->clamped, sn->waited, sn->cancelled,
                  sn->peak);
    throttle_budget_destroy (&s->b[b]);
  }
  current = NULL;
}

START_TEST (test_schedules)
{
  uint64_t n = sim_env_u64 ("THROTTLE_SIM_SCHEDULES", SCHEDULES);
  uint64_t seed = sim_env_u64 ("THROTTLE_SIM_SEED", 0);
  uint64_t first = sim_env_u64 ("THROTTLE_SIM_FIRST", 1);
  uint64_t i;

  signal (SIGABRT, on_abort);
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
           "passed: %" PRIu64 " fast charges (%" PRIu64 " swaps again, %"
           PRIu64 " given back for a capacity change, %" PRIu64
           " refused), %" PRIu64 " taken under the lock, %" PRIu64
           " queued (%" PRIu64 " at the server), %" PRIu64 " abandoned, %"
           PRIu64 " credits that granted, %" PRIu64 " clamped, %" PRIu64
           " mirrorings (%" PRIu64 " with a credit between the read and "
           "the mark), %" PRIu64 " grants owed to the server, %" PRIu64
           " steps in a capacity change's odd window, %" PRIu64
           " steps waiting for a lock, %" PRIu64 " charges failed by a "
           "shutdown, %" PRIu64 " checks with the server below an export\n",
           n, STEPS, cover.fast, cover.fast_retried, cover.fast_gave_back,
           cover.fast_refused, cover.locked_now, cover.queued,
           cover.srv_waited, cover.abandoned, cover.grants_owed,
           cover.clamped, cover.mirrored, cover.mirror_raced,
           cover.owed_mirror, cover.odd_window, cover.blocked,
           cover.shut_failed, cover.srv_below_exp);
  /* Every race is reached in the default run. */
  if (n >= SCHEDULES) {
    ck_assert_uint_gt (cover.fast_retried, 0);
    ck_assert_uint_gt (cover.fast_gave_back, 0);
    ck_assert_uint_gt (cover.grants_owed, 0);
    ck_assert_uint_gt (cover.abandoned, 0);
    ck_assert_uint_gt (cover.owed_mirror, 0);
    ck_assert_uint_gt (cover.srv_waited, 0);
    ck_assert_uint_gt (cover.mirror_raced, 0);
    ck_assert_uint_gt (cover.odd_window, 0);
    ck_assert_uint_gt (cover.shut_failed, 0);
    ck_assert_uint_gt (cover.clamped, 0);
    ck_assert_uint_gt (cover.srv_below_exp, 0);
  }
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("budget-sched");
  TCase *tc = tcase_create ("schedules");

  /* A few seconds for the default run; sanitizer builds 5-10x. */
  tcase_set_timeout (tc, 300);
  tcase_add_test (tc, test_schedules);
  suite_add_tcase (s, tc);
  return s;
}
