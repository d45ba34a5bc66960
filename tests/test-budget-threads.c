/* SPDX-License-Identifier: BSD-3-Clause */
/* Budgets of lib/throttle-budget.c hammered from many threads: every
 * kind of charge, cancelled waits, and the capacity changed under
 * readers and fast charges that take no lock; and a stress of two
 * exports and a server as lib/throttle-admit.c uses them, mirrored
 * while they run, with a stall watchdog (test_stress).  Apart from
 * test-budget.c so that a sanitizer build (TSan above all, where these
 * races would show) can loop over just these, with a timeout that
 * allows for its slowness.  tests/test-budget-mutants.sh builds
 * test_stress against mutants of the fast path and of mirroring and
 * checks that each fails it.
 */

#include <config.h>

#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "throttle-budget.h"
#include "budget-probe.h"
#include "check-main.h"

#define CAPACITY 1000
#define THREADS 16
#define ITERS 20000
#define MAX_NEED 1500

static struct throttle_budget hammer_b;
static atomic_long hammer_inflight;     /* what the "backend" sees */
static atomic_long hammer_peak;
static atomic_long hammer_violations;
static atomic_ulong hammer_charged, hammer_credited;
static atomic_long hammer_cancelled;

static bool
random_cancel (void *opaque)
{
  unsigned *seed = opaque;
  return rand_r (seed) % 4 == 0;
}

static void *
hammer_thread (void *vp)
{
  unsigned seed = (unsigned) (uintptr_t) vp;
  int i;

  for (i = 0; i < ITERS; i++) {
    uint64_t need = 1 + rand_r (&seed) % MAX_NEED; /* some above the capacity */
    uint64_t c;
    long now, peak;
    bool use_cancel = rand_r (&seed) % 8 == 0;

    /* A third are served in parts of at least 100 units. */
    if ((rand_r (&seed) % 3 == 0
         ? throttle_budget_charge_part (&hammer_b, need, 50,
                                        use_cancel ? random_cancel : NULL,
                                        &seed, 1, &c)
         : throttle_budget_charge (&hammer_b, need,
                                   use_cancel ? random_cancel : NULL, &seed,
                                   1, &c)) == -1) {
      atomic_fetch_add (&hammer_cancelled, 1);
      continue;
    }
    atomic_fetch_add (&hammer_charged, c);
    now = atomic_fetch_add (&hammer_inflight, (long) c) + (long) c;
    /* Above the capacity only a request above it, alone: charged in
     * full, so that what the holders add up is what they hold.
     */
    if (now > CAPACITY && now != (long) c)
      atomic_fetch_add (&hammer_violations, 1);
    peak = atomic_load (&hammer_peak);
    while (now > peak && !atomic_compare_exchange_weak (&hammer_peak, &peak, now))
      ;
    if (rand_r (&seed) % 16 == 0)
      sched_yield ();
    atomic_fetch_sub (&hammer_inflight, (long) c);
    atomic_fetch_add (&hammer_credited, c);
    throttle_budget_credit (&hammer_b, c);
  }
  return NULL;
}

/* The seed patch's check-then-subtract race let two threads both pass
 * the check.  Assert 'in flight <= capacity, or one request alone' at
 * every instant, as seen by the holders themselves, and that every
 * unit comes back.
 */
START_TEST (test_hammer)
{
  pthread_t t[THREADS];
  struct throttle_stats s;
  int i;

  throttle_budget_init (&hammer_b, CAPACITY);
  for (i = 0; i < THREADS; i++)
    pthread_create (&t[i], NULL, hammer_thread, (void *) (uintptr_t) (i + 1));
  for (i = 0; i < THREADS; i++)
    pthread_join (t[i], NULL);

  s = probe_stats (&hammer_b);
  ck_assert_int_eq (atomic_load (&hammer_violations), 0);
  ck_assert_int_le (atomic_load (&hammer_peak), MAX_NEED);
  ck_assert_uint_le (s.peak, MAX_NEED);
  ck_assert_uint_eq (s.in_flight, 0);
  ck_assert_uint_eq (s.waiters, 0);
  ck_assert_uint_eq (atomic_load (&hammer_charged), atomic_load (&hammer_credited));
  ck_assert_uint_eq (s.charged, atomic_load (&hammer_charged));
  ck_assert_uint_eq (s.admitted + s.cancelled, (uint64_t) THREADS * ITERS);
  ck_assert_uint_eq (s.cancelled, (uint64_t) atomic_load (&hammer_cancelled));
  /* The load is far above the capacity: the budget must have bound. */
  ck_assert_uint_gt (s.waited, 0);
  /* ... without serializing more than it must. */
  ck_assert_uint_gt (s.peak, CAPACITY / 2);
  /* The whole capacity is available again. */
  {
    uint64_t c;
    ck_assert_int_eq (probe_try_charge (&hammer_b, CAPACITY, &c), 0);
    throttle_budget_credit (&hammer_b, c);
  }
  throttle_budget_destroy (&hammer_b);
}
END_TEST

/* The filter reads the capacity without the lock on every request
 * while the control socket may change it: under TSan this is where a
 * plain read would show.  Requests fit the smaller capacity, so every
 * one is admitted whole, and every unit comes back.
 */
static atomic_bool capacity_done;

static void *
capacity_thread (void *vp)
{
  unsigned n = 0;

  while (!atomic_load (&capacity_done))
    throttle_budget_set_capacity (&hammer_b, ++n % 2 ? CAPACITY / 2 : CAPACITY);
  return NULL;
}

static void *
reader_thread (void *vp)
{
  unsigned seed = (unsigned) (uintptr_t) vp;
  int i;

  for (i = 0; i < ITERS / 4; i++) {
    uint64_t cap = throttle_budget_get_capacity (&hammer_b);
    uint64_t need = 1 + rand_r (&seed) % (CAPACITY / 2);
    uint64_t c;

    ck_assert (cap == CAPACITY || cap == CAPACITY / 2);
    if (probe_try_charge (&hammer_b, need, &c) == -1)
      ck_assert_int_eq (throttle_budget_charge (&hammer_b, need, NULL, NULL,
                                                1, &c), 0);
    ck_assert_uint_eq (c, need);
    throttle_budget_credit (&hammer_b, c);
  }
  return NULL;
}

START_TEST (test_capacity_changes)
{
  pthread_t t[THREADS], changer;
  struct throttle_stats s;
  int i;

  throttle_budget_init (&hammer_b, CAPACITY);
  atomic_store (&capacity_done, false);
  pthread_create (&changer, NULL, capacity_thread, NULL);
  for (i = 0; i < THREADS; i++)
    pthread_create (&t[i], NULL, reader_thread, (void *) (uintptr_t) (i + 1));
  for (i = 0; i < THREADS; i++)
    pthread_join (t[i], NULL);
  atomic_store (&capacity_done, true);
  pthread_join (changer, NULL);

  s = probe_stats (&hammer_b);
  ck_assert_uint_eq (s.in_flight, 0);
  ck_assert_uint_eq (s.waiters, 0);
  ck_assert_uint_le (s.peak, CAPACITY);
  ck_assert_uint_eq (s.admitted, (uint64_t) THREADS * (ITERS / 4));
  throttle_budget_destroy (&hammer_b);
}
END_TEST

/* The fast path against capacity changes: small charges that mostly
 * take no lock, while a thread lowers the capacity and raises it
 * again.  A charge begun after a lowering returned and counted before
 * the raise began must find the lower bound in force: a fast charge
 * that read the capacity before the lowering and committed after it
 * must have given its units back (the sequence count,
 * lib/throttle-budget.c).  What the holders count is never more than
 * is in flight (they count after the grant and stop before the
 * credit), so it must stay within the lower capacity.
 */
#define LOW (CAPACITY / 4)
static atomic_ulong lowering_phase;     /* odd: the low capacity in force */

static void *
lowering_thread (void *vp)
{
  while (!atomic_load (&capacity_done)) {
    throttle_budget_set_capacity (&hammer_b, LOW);
    atomic_fetch_add (&lowering_phase, 1);
    sched_yield ();
    atomic_fetch_add (&lowering_phase, 1);
    throttle_budget_set_capacity (&hammer_b, CAPACITY);
    sched_yield ();
  }
  return NULL;
}

static void *
small_thread (void *vp)
{
  unsigned seed = (unsigned) (uintptr_t) vp;
  int i;

  for (i = 0; i < ITERS / 2; i++) {
    unsigned long p1 = atomic_load (&lowering_phase), p2;
    uint64_t need = 1 + rand_r (&seed) % (LOW / 8);
    uint64_t c;
    long now;

    ck_assert_int_eq (throttle_budget_charge (&hammer_b, need, NULL, NULL, 1,
                                              &c), 0);
    ck_assert_uint_eq (c, need);
    now = atomic_fetch_add (&hammer_inflight, (long) c) + (long) c;
    p2 = atomic_load (&lowering_phase);
    if (p1 == p2 && (p1 & 1) && now > LOW)
      atomic_fetch_add (&hammer_violations, 1);
    if (rand_r (&seed) % 8 == 0)
      sched_yield ();
    atomic_fetch_sub (&hammer_inflight, (long) c);
    throttle_budget_credit (&hammer_b, c);
  }
  return NULL;
}

START_TEST (test_fast_path_lowering)
{
  pthread_t t[THREADS], changer;
  struct throttle_stats s;
  int i;

  throttle_budget_init (&hammer_b, CAPACITY);
  atomic_store (&capacity_done, false);
  atomic_store (&hammer_inflight, 0);
  atomic_store (&hammer_violations, 0);
  pthread_create (&changer, NULL, lowering_thread, NULL);
  for (i = 0; i < THREADS; i++)
    pthread_create (&t[i], NULL, small_thread, (void *) (uintptr_t) (i + 1));
  for (i = 0; i < THREADS; i++)
    pthread_join (t[i], NULL);
  atomic_store (&capacity_done, true);
  pthread_join (changer, NULL);

  s = probe_stats (&hammer_b);
  ck_assert_int_eq (atomic_load (&hammer_violations), 0);
  ck_assert_uint_eq (s.in_flight, 0);
  ck_assert_uint_eq (s.waiters, 0);
  ck_assert_uint_eq (s.admitted, (uint64_t) THREADS * (ITERS / 2));
  /* Nothing waits now: the fast path is open again. */
  ck_assert_uint_eq (__atomic_load_n (&hammer_b.word, __ATOMIC_SEQ_CST) &
                     THROTTLE_BUDGET_SLOW, 0);
  throttle_budget_destroy (&hammer_b);
}
END_TEST


/* --- the stress: exports, a server, mirroring, a watchdog ------------ */

/* Two exports' budgets and a server's, used as lib/throttle-admit.c
 * uses them: a request is charged to its export (whole or in parts),
 * then, if the grant is marked THROTTLE_BUDGET_MIRRORED, the same units
 * to the server; given back to the export, then to the server if the
 * export's credit says it is mirrored.  While the workers run, a
 * changer moves every capacity every few hundred microseconds, within
 * [S_LOW, S_HIGH], and a mirrorer binds each export to the server
 * (throttle_budget_mirror) at a moment drawn anew each round, so that
 * every round mirrors budgets with requests in flight and waiting.
 * Every other round is quiet: no capacity changes, no cancels (see
 * st_quiet).  Checked:
 * - the bound, as the holders see it: what holders of an export hold
 *   together after a grant is within the highest capacity the export
 *   ever has, or is the grant's alone; and for a grant made entirely
 *   while the low capacity was in force, within that (a phase counter,
 *   as test_fast_path_lowering); once both exports are mirrored, what
 *   all holders hold after a server grant is within the server's
 *   highest capacity, or is the grant's alone;
 * - progress: a watchdog fails the test if no request is granted nor
 *   cancelled for THROTTLE_STALL_S seconds (default 60: sanitizer
 *   builds run 10x slower on a loaded machine) while work is pending;
 * - after each round: nothing in flight nor waiting anywhere, every
 *   unit given back (a unit the server was charged by the mirroring and
 *   never credited, or credited twice, shows), the statistics add up.
 */
#define S_ROUNDS 6
#define S_THREADS 10
#define S_ITERS 1500
#define S_LOW 100
#define S_HIGH 1000

static struct throttle_budget st_exp[2], st_srv;
static atomic_long st_held[2], st_held_all;
static atomic_ulong st_phase[2];        /* odd: S_LOW in force */
static atomic_bool st_mirrored_both;
static atomic_ulong st_progress;
static atomic_int st_running;           /* workers not yet done */
static atomic_bool st_round_done;
/* A round without capacity changes nor cancels: there a lost wake-up
 * has nothing else to end it, and the watchdog sees it.
 */
static atomic_bool st_quiet;
static atomic_long st_violations, st_srv_violations, st_low_violations;
static atomic_ulong st_admitted[2], st_cancelled[2], st_attempts[2];
static atomic_ulong st_srv_charges, st_srv_cancelled, st_marked;
static atomic_ulong st_waited_srv, st_waited_exp;
static atomic_ulong st_low_checked, st_srv_checked;

static bool
st_cancel (void *opaque)
{
  unsigned *seed = opaque;

  return rand_r (seed) % 3 == 0;
}

/* Count 'units' held; returns what the holders hold with them. */
static long
st_hold (atomic_long *held, long units, long high, atomic_long *v)
{
  long now = atomic_fetch_add (held, units) + units;

  if (now > high && now != units)
    atomic_fetch_add (v, 1);
  return now;
}

static void *
st_worker (void *vp)
{
  unsigned seed = (unsigned) (uintptr_t) vp;
  int e = seed % 2, i;

  for (i = 0; i < S_ITERS; i++) {
    uint64_t need = 1 + (rand_r (&seed) % 8 ? rand_r (&seed) % (S_LOW / 2)
                         : rand_r (&seed) % (S_HIGH + S_HIGH / 2));
    bool parts = rand_r (&seed) % 3 == 0;
    bool use_cancel = rand_r (&seed) % 6 == 0 && !atomic_load (&st_quiet);
    unsigned long p1 = atomic_load (&st_phase[e]), p2;
    /* Both exports mirrored before this request's server charge: then
     * everything held is in the server's word (st_srv_violations).
     */
    bool both = atomic_load (&st_mirrored_both);
    uint64_t got, units, c;
    bool marked;
    long now;
    int r;

    atomic_fetch_add (&st_attempts[e], 1);
    r = parts ?
      throttle_budget_charge_part (&st_exp[e], need, 10,
                                   use_cancel ? st_cancel : NULL, &seed, 1,
                                   &got) :
      throttle_budget_charge (&st_exp[e], need,
                              use_cancel ? st_cancel : NULL, &seed, 1, &got);
    atomic_fetch_add (&st_progress, 1);
    if (r == -1) {
      atomic_fetch_add (&st_cancelled[e], 1);
      continue;
    }
    atomic_fetch_add (&st_admitted[e], 1);
    units = got & THROTTLE_BUDGET_MAX_UNITS;
    marked = (got & THROTTLE_BUDGET_MIRRORED) != 0;
    if (marked) {
      /* Owed to the server: charge it the same units. */
      atomic_fetch_add (&st_marked, 1);
      if (throttle_budget_charge (&st_srv, units,
                                  use_cancel ? st_cancel : NULL, &seed, 1,
                                  &c) == -1) {
        atomic_fetch_add (&st_srv_cancelled, 1);
        atomic_fetch_add (&st_progress, 1);
        throttle_budget_credit (&st_exp[e], units);
        continue;
      }
      atomic_fetch_add (&st_srv_charges, 1);
      atomic_fetch_add (&st_progress, 1);
    }
    now = st_hold (&st_held[e], (long) units, S_HIGH, &st_violations);
    /* The low capacity in force from before the charge began to after
     * it was counted: every grant meanwhile left the export within it.
     */
    p2 = atomic_load (&st_phase[e]);
    if (p1 == p2 && (p1 & 1)) {
      atomic_fetch_add (&st_low_checked, 1);
      if (now > S_LOW && now != (long) units)
        atomic_fetch_add (&st_low_violations, 1);
    }
    atomic_fetch_add (&st_srv_checked, marked && both);
    if (marked && both)
      st_hold (&st_held_all, (long) units, S_HIGH, &st_srv_violations);
    else
      atomic_fetch_add (&st_held_all, (long) units);
    if (rand_r (&seed) % 4 == 0)
      sched_yield ();
    atomic_fetch_sub (&st_held_all, (long) units);
    atomic_fetch_sub (&st_held[e], (long) units);
    if (throttle_budget_credit (&st_exp[e], units))
      throttle_budget_credit (&st_srv, units);
  }
  atomic_fetch_sub (&st_running, 1);
  return NULL;
}

static void
st_sleep_us (long us)
{
  struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = us % 1000000 * 1000 };

  nanosleep (&ts, NULL);
}

/* Every capacity moved every 100 to 500 microseconds; an export's to
 * S_LOW and back in phases the workers read.
 */
static void *
st_changer (void *vp)
{
  unsigned seed = (unsigned) (uintptr_t) vp;

  while (!atomic_load (&st_round_done)) {
    int e = rand_r (&seed) % 3;

    if (e == 2)
      throttle_budget_set_capacity (&st_srv, S_LOW + rand_r (&seed) %
                                    (S_HIGH - S_LOW + 1));
    else if (atomic_load (&st_phase[e]) & 1) {
      atomic_fetch_add (&st_phase[e], 1);
      throttle_budget_set_capacity (&st_exp[e], S_LOW + rand_r (&seed) %
                                    (S_HIGH - S_LOW + 1));
    }
    else {
      throttle_budget_set_capacity (&st_exp[e], S_LOW);
      atomic_fetch_add (&st_phase[e], 1);
    }
    st_sleep_us (100 + rand_r (&seed) % 400);
  }
  return NULL;
}

/* Each export mirrored into the server once its workers have made a
 * number of requests drawn from the seed.
 */
static void *
st_mirrorer (void *vp)
{
  unsigned seed = (unsigned) (uintptr_t) vp;
  unsigned long at[2];
  int e, done = 0;

  for (e = 0; e < 2; e++)
    at[e] = rand_r (&seed) % (S_THREADS / 2 * S_ITERS / 2);
  while (done < 2 && !atomic_load (&st_round_done)) {
    for (e = 0; e < 2; e++)
      if (!throttle_budget_mirrored (&st_exp[e]) &&
          atomic_load (&st_attempts[e]) >= at[e]) {
        throttle_budget_mirror (&st_exp[e], &st_srv);
        done++;
      }
    if (done == 2)
      atomic_store (&st_mirrored_both, true);
    sched_yield ();
  }
  return NULL;
}

static void
st_dump (const char *why)
{
  struct throttle_stats st;
  int e;

  fprintf (stderr, "test-budget-threads: %s\n", why);
  for (e = 0; e < 3; e++) {
    throttle_budget_get_stats (e < 2 ? &st_exp[e] : &st_srv, &st);
    fprintf (stderr, "  %s: capacity %" PRIu64 " in flight %" PRIu64
             " waiters %" PRIu64 " admitted %" PRIu64 " cancelled %"
             PRIu64 "%s\n", e == 0 ? "export 0" : e == 1 ? "export 1" :
             "server", st.capacity, st.in_flight, st.waiters, st.admitted,
             st.cancelled,
             e < 2 && throttle_budget_mirrored (&st_exp[e]) ?
             ", mirrored" : "");
  }
}

static atomic_bool st_stalled;

/* A lib abort (crediting more than a budget holds, an assertion): say
 * where things stand.
 */
static void
st_on_abort (int sig)
{
  if (!atomic_load (&st_stalled))
    st_dump ("aborted in the budget (a credit above what it holds, or an "
             "assertion)");
  signal (sig, SIG_DFL);
  raise (sig);
}

/* No request granted nor cancelled for THROTTLE_STALL_S seconds while
 * workers run: fail, saying where things stand.
 */
static void *
st_watchdog (void *vp)
{
  const char *env = getenv ("THROTTLE_STALL_S");
  unsigned long limit = env && *env ? strtoul (env, NULL, 0) : 60;
  unsigned long last = atomic_load (&st_progress), still = 0;
  char why[128];

  while (atomic_load (&st_running) > 0) {
    unsigned long now;

    st_sleep_us (100000);
    now = atomic_load (&st_progress);
    if (now != last) {
      last = now;
      still = 0;
      continue;
    }
    if (++still < limit * 10)
      continue;
    snprintf (why, sizeof why, "no request granted nor cancelled for %lu s "
              "with %d workers running: stalled", limit,
              atomic_load (&st_running));
    st_dump (why);
    atomic_store (&st_stalled, true);
    abort ();
  }
  return NULL;
}

START_TEST (test_stress)
{
  pthread_t w[S_THREADS], changer, mirrorer, watchdog;
  struct throttle_stats st;
  int round, i, e;

  signal (SIGABRT, st_on_abort);
  for (round = 0; round < S_ROUNDS; round++) {
    throttle_budget_init (&st_exp[0], S_HIGH);
    throttle_budget_init (&st_exp[1], S_HIGH);
    /* Below the exports' sum: requests wait there too. */
    throttle_budget_init (&st_srv, S_HIGH);
    atomic_store (&st_round_done, false);
    atomic_store (&st_mirrored_both, false);
    atomic_store (&st_running, S_THREADS);
    for (e = 0; e < 2; e++) {
      atomic_store (&st_phase[e], 0);
      atomic_store (&st_admitted[e], 0);
      atomic_store (&st_cancelled[e], 0);
      atomic_store (&st_attempts[e], 0);
    }
    atomic_store (&st_srv_charges, 0);
    atomic_store (&st_srv_cancelled, 0);
    atomic_store (&st_quiet, round % 2 == 1);
    pthread_create (&watchdog, NULL, st_watchdog, NULL);
    if (!atomic_load (&st_quiet))
      pthread_create (&changer, NULL, st_changer,
                      (void *) (uintptr_t) (round + 1));
    pthread_create (&mirrorer, NULL, st_mirrorer,
                    (void *) (uintptr_t) (round + 7));
    for (i = 0; i < S_THREADS; i++)
      pthread_create (&w[i], NULL, st_worker,
                      (void *) (uintptr_t) (round * S_THREADS + i + 1));
    for (i = 0; i < S_THREADS; i++)
      pthread_join (w[i], NULL);
    atomic_store (&st_round_done, true);
    if (!atomic_load (&st_quiet))
      pthread_join (changer, NULL);
    pthread_join (mirrorer, NULL);
    pthread_join (watchdog, NULL);

    ck_assert_msg (atomic_load (&st_violations) == 0,
                   "round %d: %ld grants left an export's holders over the "
                   "capacity %d, not alone", round,
                   atomic_load (&st_violations), S_HIGH);
    ck_assert_msg (atomic_load (&st_low_violations) == 0,
                   "round %d: %ld grants made under the low capacity left "
                   "an export's holders over the capacity %d", round,
                   atomic_load (&st_low_violations), S_LOW);
    ck_assert_msg (atomic_load (&st_srv_violations) == 0,
                   "round %d: %ld server grants left the holders over the "
                   "capacity %d, not alone", round,
                   atomic_load (&st_srv_violations), S_HIGH);
    for (e = 0; e < 3; e++) {
      throttle_budget_get_stats (e < 2 ? &st_exp[e] : &st_srv, &st);
      if (st.in_flight != 0 || st.waiters != 0) {
        st_dump ("units left in flight or waiters after the round");
        ck_abort_msg ("round %d: %s: %" PRIu64 " in flight, %" PRIu64
                      " waiting after the round", round,
                      e < 2 ? "an export" : "the server", st.in_flight,
                      st.waiters);
      }
      if (e < 2) {
        ck_assert_uint_eq (st.admitted, atomic_load (&st_admitted[e]));
        ck_assert_uint_eq (st.cancelled, atomic_load (&st_cancelled[e]));
        ck_assert_uint_eq (st.admitted + st.cancelled,
                           atomic_load (&st_attempts[e]));
        atomic_fetch_add (&st_waited_exp, st.waited);
      }
      else {
        ck_assert_uint_eq (st.admitted, atomic_load (&st_srv_charges));
        ck_assert_uint_eq (st.cancelled, atomic_load (&st_srv_cancelled));
        atomic_fetch_add (&st_waited_srv, st.waited);
      }
    }
    for (e = 0; e < 3; e++)
      throttle_budget_destroy (e < 2 ? &st_exp[e] : &st_srv);
  }
  fprintf (stderr, "test-budget-threads: stress: %d rounds of %d workers: "
           "%lu grants marked for the server, %lu waits at the server, "
           "%lu at the exports; %lu grants under the low capacity, %lu "
           "at the server once both were mirrored\n", S_ROUNDS, S_THREADS,
           atomic_load (&st_marked), atomic_load (&st_waited_srv),
           atomic_load (&st_waited_exp), atomic_load (&st_low_checked),
           atomic_load (&st_srv_checked));
  /* The server bound and made requests wait, and mirroring marked
   * grants, in the rounds together.
   */
  ck_assert_uint_gt (atomic_load (&st_marked), 0);
  ck_assert_uint_gt (atomic_load (&st_waited_srv), 0);
  ck_assert_uint_gt (atomic_load (&st_low_checked), 0);
  ck_assert_uint_gt (atomic_load (&st_srv_checked), 0);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("budget-threads");
  TCase *tc = tcase_create ("threads");

  /* Sanitizer builds run these 5-10 times slower. */
  tcase_set_timeout (tc, 120);
  tcase_add_test (tc, test_hammer);
  tcase_add_test (tc, test_capacity_changes);
  tcase_add_test (tc, test_fast_path_lowering);
  suite_add_tcase (s, tc);
  /* A case of its own, that the mutants run alone (CK_RUN_CASE). */
  tc = tcase_create ("stress");
  tcase_set_timeout (tc, 600);
  tcase_add_test (tc, test_stress);
  suite_add_tcase (s, tc);
  return s;
}
