/* SPDX-License-Identifier: BSD-3-Clause */
/* One budget of lib/throttle-budget.c hammered from many threads: every
 * kind of charge, cancelled waits, and the capacity changed under
 * readers and fast charges that take no lock.  Apart from test-budget.c so that a
 * sanitizer build (TSan above all, where these races would show) can
 * loop over just these, with a timeout that allows for its slowness.
 */

#include <config.h>

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

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
  return s;
}
