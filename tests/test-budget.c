/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/throttle-budget.c, including a regression test for
 * each flaw of the 2007 writeout-throttling patch.
 */

#include <config.h>

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include "throttle-budget.h"
#include "budget-probe.h"
#include "check-main.h"

static void
msleep (unsigned ms)
{
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  nanosleep (&ts, NULL);
}

/* Wait (bounded) until the budget has 'n' waiters queued. */
static void
wait_for_waiters (struct throttle_budget *b, uint64_t n)
{
  int i;
  for (i = 0; i < 5000 && probe_stats (b).waiters != n; i++)
    msleep (1);
  ck_assert_uint_eq (probe_stats (b).waiters, n);
}

START_TEST (test_basic)
{
  struct throttle_budget b;
  uint64_t c1, c2;

  ck_assert_int_eq (throttle_budget_init (&b, 100), 0);
  ck_assert_int_eq (throttle_budget_charge (&b, 60, NULL, NULL, 0, &c1), 0);
  ck_assert_uint_eq (c1, 60);
  ck_assert_int_eq (probe_try_charge (&b, 50, &c2), -1);
  ck_assert_int_eq (probe_try_charge (&b, 40, &c2), 0);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 100);
  throttle_budget_credit (&b, c1);
  throttle_budget_credit (&b, c2);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  ck_assert_uint_eq (probe_stats (&b).peak, 100);
  ck_assert_uint_eq (probe_stats (&b).admitted, 2);
  ck_assert_uint_eq (probe_stats (&b).charged, 100);
  ck_assert_uint_eq (probe_stats (&b).waited, 0);
  throttle_budget_destroy (&b);
}
END_TEST

START_TEST (test_zero_capacity_refused)
{
  struct throttle_budget b;

  ck_assert_int_eq (throttle_budget_init (&b, 0), -1);
  ck_assert_int_eq (throttle_budget_init (&b, 1), 0);
  ck_assert_int_eq (throttle_budget_set_capacity (&b, 0), -1);
  throttle_budget_destroy (&b);
}
END_TEST

START_TEST (test_zero_need_is_free)
{
  struct throttle_budget b;
  uint64_t c = 99;

  throttle_budget_init (&b, 10);
  ck_assert_int_eq (throttle_budget_charge (&b, 0, NULL, NULL, 0, &c), 0);
  ck_assert_uint_eq (c, 0);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

/* A request larger than the capacity is charged in full and runs
 * alone.
 */
START_TEST (test_clamp)
{
  struct throttle_budget b;
  uint64_t c, c2;

  throttle_budget_init (&b, 100);
  ck_assert_int_eq (throttle_budget_charge (&b, 1000, NULL, NULL, 0, &c), 0);
  ck_assert_uint_eq (c, 1000);
  ck_assert_uint_eq (probe_stats (&b).clamped, 1);
  ck_assert_int_eq (probe_try_charge (&b, 1, &c2), -1);
  /* A failed try does not count: the wait that follows will. */
  ck_assert_int_eq (probe_try_charge (&b, 1000, &c2), -1);
  ck_assert_uint_eq (probe_stats (&b).clamped, 1);
  throttle_budget_credit (&b, c);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

/* --- FIFO: a large waiter is not overtaken by later small ones. ------ */

struct order_arg {
  struct throttle_budget *b;
  uint64_t need;
  int id;
  atomic_int *next_slot;
  atomic_int *order;
  atomic_bool *hold;           /* keep the units while *hold */
};

static void *
order_thread (void *vp)
{
  struct order_arg *a = vp;
  uint64_t c;

  ck_assert_int_eq (throttle_budget_charge (a->b, a->need, NULL, NULL, 0, &c), 0);
  atomic_store (&a->order[atomic_fetch_add (a->next_slot, 1)], a->id);
  while (atomic_load (a->hold))
    msleep (1);
  throttle_budget_credit (a->b, c);
  return NULL;
}

START_TEST (test_fifo_no_starvation)
{
  struct throttle_budget b;
  pthread_t large, small[8];
  struct order_arg la, sa[8];
  atomic_int slot = 0;
  atomic_bool hold_large = true, hold_small = false;
  atomic_int order[9];
  uint64_t held;
  int i;

  throttle_budget_init (&b, 10);
  /* Hold 8 of 10 units: 2 stay free all along. */
  ck_assert_int_eq (throttle_budget_charge (&b, 8, NULL, NULL, 0, &held), 0);

  la = (struct order_arg) { &b, 10, 100, &slot, order, &hold_large };
  pthread_create (&large, NULL, order_thread, &la);
  wait_for_waiters (&b, 1);

  /* Small requests arrive after the large one.  Each would fit in the
   * 2 free units; the seed patch admitted them and starved the large
   * request.  Here they must queue behind it.
   */
  for (i = 0; i < 8; i++) {
    sa[i] = (struct order_arg) { &b, 1, i, &slot, order, &hold_small };
    pthread_create (&small[i], NULL, order_thread, &sa[i]);
  }
  wait_for_waiters (&b, 9);
  msleep (50);
  ck_assert_int_eq (atomic_load (&slot), 0);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 8);

  throttle_budget_credit (&b, held);
  /* The large request is granted first, and alone. */
  for (i = 0; i < 5000 && atomic_load (&slot) == 0; i++)
    msleep (1);
  msleep (20);
  ck_assert_int_eq (atomic_load (&slot), 1);
  ck_assert_int_eq (atomic_load (&order[0]), 100);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 10);

  atomic_store (&hold_large, false);
  pthread_join (large, NULL);
  for (i = 0; i < 8; i++)
    pthread_join (small[i], NULL);
  ck_assert_int_eq (atomic_load (&slot), 9);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  ck_assert_uint_eq (probe_stats (&b).waited, 9);
  throttle_budget_destroy (&b);
}
END_TEST

/* A later request that would fit must not barge past a queued waiter
 * through the non-blocking path either.
 */
START_TEST (test_enqueue_no_barging)
{
  struct throttle_budget b;
  pthread_t t;
  atomic_int slot = 0;
  atomic_bool hold = false;
  atomic_int order[1];
  struct order_arg a;
  uint64_t held, c;

  throttle_budget_init (&b, 10);
  throttle_budget_charge (&b, 5, NULL, NULL, 0, &held);
  a = (struct order_arg) { &b, 10, 1, &slot, order, &hold };
  pthread_create (&t, NULL, order_thread, &a);
  wait_for_waiters (&b, 1);
  ck_assert_int_eq (probe_try_charge (&b, 1, &c), -1);
  throttle_budget_credit (&b, held);
  pthread_join (t, NULL);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

/* --- cancellation ---------------------------------------------------- */

struct cancel_arg {
  struct throttle_budget *b;
  uint64_t need;
  atomic_bool cancel;
  int result;
  uint64_t charged;
};

static bool
cancel_cb (void *opaque)
{
  struct cancel_arg *a = opaque;
  return atomic_load (&a->cancel);
}

static void *
cancel_thread (void *vp)
{
  struct cancel_arg *a = vp;

  a->result = throttle_budget_charge (a->b, a->need, cancel_cb, a, 5,
                                      &a->charged);
  return NULL;
}

/* The seed patch's interruptible wait leaked credit.  A cancelled wait
 * returns -1 holding nothing, and lets the waiter behind it in.
 */
START_TEST (test_cancel_leaks_nothing)
{
  struct throttle_budget b;
  struct cancel_arg head = { .need = 10 }, behind = { .need = 3 };
  pthread_t t1, t2;
  uint64_t held;

  throttle_budget_init (&b, 10);
  head.b = behind.b = &b;
  throttle_budget_charge (&b, 6, NULL, NULL, 0, &held);
  pthread_create (&t1, NULL, cancel_thread, &head);
  wait_for_waiters (&b, 1);
  pthread_create (&t2, NULL, cancel_thread, &behind);
  wait_for_waiters (&b, 2);

  /* 4 units are free: 'behind' fits but is blocked by 'head' (FIFO)
   * until 'head' gives up.
   */
  atomic_store (&head.cancel, true);
  pthread_join (t1, NULL);
  ck_assert_int_eq (head.result, -1);
  ck_assert_uint_eq (head.charged, 0);
  pthread_join (t2, NULL);
  ck_assert_int_eq (behind.result, 0);
  ck_assert_uint_eq (behind.charged, 3);

  ck_assert_uint_eq (probe_stats (&b).in_flight, 9);
  ck_assert_uint_eq (probe_stats (&b).cancelled, 1);
  ck_assert_uint_eq (probe_stats (&b).waiters, 0);
  throttle_budget_credit (&b, held);
  throttle_budget_credit (&b, behind.charged);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

START_TEST (test_shutdown_wakes_waiters)
{
  struct throttle_budget b;
  struct cancel_arg a[4];
  pthread_t t[4];
  uint64_t held, c;
  int i;

  throttle_budget_init (&b, 10);
  throttle_budget_charge (&b, 10, NULL, NULL, 0, &held);
  for (i = 0; i < 4; i++) {
    a[i] = (struct cancel_arg) { .b = &b, .need = 1 };
    pthread_create (&t[i], NULL, cancel_thread, &a[i]);
  }
  wait_for_waiters (&b, 4);
  throttle_budget_shutdown (&b);
  for (i = 0; i < 4; i++) {
    pthread_join (t[i], NULL);
    ck_assert_int_eq (a[i].result, -1);
  }
  /* Later waits fail at once; units still held can be returned. */
  ck_assert_int_eq (throttle_budget_charge (&b, 1, NULL, NULL, 0, &c), -1);
  throttle_budget_credit (&b, held);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

/* --- runtime capacity ------------------------------------------------ */

START_TEST (test_set_capacity)
{
  struct throttle_budget b;
  struct cancel_arg w = { .need = 5 };
  pthread_t t;
  uint64_t held;

  throttle_budget_init (&b, 10);
  w.b = &b;
  throttle_budget_charge (&b, 8, NULL, NULL, 0, &held);
  /* Lowering never revokes credit already held. */
  throttle_budget_set_capacity (&b, 4);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 8);
  pthread_create (&t, NULL, cancel_thread, &w);
  wait_for_waiters (&b, 1);
  /* Raising admits the waiter at once. */
  throttle_budget_set_capacity (&b, 13);
  pthread_join (t, NULL);
  ck_assert_int_eq (w.result, 0);
  ck_assert_uint_eq (w.charged, 5);
  throttle_budget_credit (&b, held);
  throttle_budget_credit (&b, w.charged);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

/* The seed patch zeroed a request's charge before crediting it, so the
 * credit was lost.  Crediting more than is held is the mirror bug; it
 * would silently raise the capacity, so it aborts.
 */
START_TEST (test_over_credit_aborts)
{
  struct throttle_budget b;
  uint64_t c;

  throttle_budget_init (&b, 10);
  throttle_budget_charge (&b, 3, NULL, NULL, 0, &c);
  throttle_budget_credit (&b, c + 1);
}
END_TEST

/* --- requests served in parts ---------------------------------------- */

struct part_arg {
  struct throttle_budget *b;
  uint64_t need, quantum;
  int result;
  uint64_t charged;
};

static void *
part_thread (void *vp)
{
  struct part_arg *a = vp;

  a->result = throttle_budget_charge_part (a->b, a->need, a->quantum,
                                           NULL, NULL, 0, &a->charged);
  return NULL;
}

/* What is free is granted in quanta once it reaches the part minimum
 * (a 32nd of the capacity, at least a quantum: 10), at once when
 * nobody waits, and to the head of the queue when units come back.
 */
START_TEST (test_part_grants)
{
  struct throttle_budget b;
  struct part_arg a = { .need = 60, .quantum = 10 };
  pthread_t t;
  uint64_t held, c;

  throttle_budget_init (&b, 160);
  a.b = &b;
  throttle_budget_charge (&b, 135, NULL, NULL, 0, &held);
  /* 25 free: 20 of them, in quanta of 10. */
  ck_assert_int_eq (throttle_budget_charge_part (&b, 60, 10, NULL, NULL, 0,
                                                 &c), 0);
  ck_assert_uint_eq (c, 20);
  /* 5 free, below min: wait.  15 back: 20 free, granted as a part. */
  pthread_create (&t, NULL, part_thread, &a);
  wait_for_waiters (&b, 1);
  throttle_budget_credit (&b, 15);
  pthread_join (t, NULL);
  ck_assert_int_eq (a.result, 0);
  ck_assert_uint_eq (a.charged, 20);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 160);
  /* The whole need when it is free. */
  throttle_budget_credit (&b, 120 + c + a.charged);
  ck_assert_int_eq (throttle_budget_charge_part (&b, 60, 10, NULL, NULL, 0,
                                                 &c), 0);
  ck_assert_uint_eq (c, 60);
  throttle_budget_credit (&b, c);
  /* Larger than the capacity, with nobody queued behind it: parts of
   * all that is free, at most the capacity, never clamped.
   */
  ck_assert_int_eq (throttle_budget_charge_part (&b, 250, 10, NULL, NULL, 0,
                                                 &c), 0);
  ck_assert_uint_eq (c, 160);
  throttle_budget_credit (&b, c);
  ck_assert_int_eq (throttle_budget_charge_part (&b, 400, 10, NULL, NULL, 0,
                                                 &c), 0);
  ck_assert_uint_eq (c, 160);
  ck_assert_uint_eq (probe_stats (&b).clamped, 0);
  throttle_budget_credit (&b, c);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

/* A part goes to the head only: a later request that would fit in
 * what the head is granted still queues behind it.
 */
START_TEST (test_part_fifo)
{
  struct throttle_budget b;
  struct part_arg head = { .need = 60, .quantum = 10 };
  struct part_arg small = { .need = 10, .quantum = 10 };
  pthread_t th, ts;
  uint64_t held;

  /* 10 free, below the part minimum of 20 (640 / 32): the head waits. */
  throttle_budget_init (&b, 640);
  head.b = small.b = &b;
  throttle_budget_charge (&b, 630, NULL, NULL, 0, &held);
  pthread_create (&th, NULL, part_thread, &head);
  wait_for_waiters (&b, 1);
  pthread_create (&ts, NULL, part_thread, &small);
  wait_for_waiters (&b, 2);
  throttle_budget_credit (&b, 20);      /* 30 free: all to the head */
  pthread_join (th, NULL);
  ck_assert_uint_eq (head.charged, 30);
  ck_assert_uint_eq (probe_stats (&b).waiters, 1);
  throttle_budget_credit (&b, head.charged);
  pthread_join (ts, NULL);
  ck_assert_uint_eq (small.charged, 10);
  throttle_budget_credit (&b, small.charged + 610);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

/* A part takes at most half of what its request has left while a
 * request queues behind it, so that one shares what is free: granted
 * with it, in order, rather than after the part is done.  (With
 * nobody behind it a part takes all that is free: test_part_grants.)
 */
START_TEST (test_part_takes_half)
{
  struct throttle_budget b;
  struct throttle_budget_waiter head, small;
  uint64_t held, c;

  /* 10 free, below the part minimum of 20 (640 / 32): both queue. */
  throttle_budget_init (&b, 640);
  throttle_budget_charge (&b, 630, NULL, NULL, 0, &held);
  ck_assert_int_eq (throttle_budget_enqueue (&b, &head, THROTTLE_BUDGET_PARTS,
                                             120, 10, &c), 1);
  ck_assert_int_eq (throttle_budget_enqueue (&b, &small, THROTTLE_BUDGET_WHOLE,
                                             30, 0, &c), 1);
  throttle_budget_credit (&b, 100);     /* 110 free: 60 to the head */
  ck_assert_int_eq (throttle_budget_poll (&b, &head, &c), 0);
  ck_assert_uint_eq (c, 60);
  ck_assert_int_eq (throttle_budget_poll (&b, &small, &c), 0);
  ck_assert_uint_eq (c, 30);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 620);
  throttle_budget_credit (&b, 620);
  throttle_budget_destroy (&b);
}
END_TEST

START_TEST (test_part_bad_args)
{
  struct throttle_budget b;
  uint64_t c;

  throttle_budget_init (&b, 100);
  ck_assert_int_eq (throttle_budget_charge_part (&b, 60, 0, NULL, NULL, 0,
                                                 &c), -1);
  ck_assert_int_eq (errno, EINVAL);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

/* --- the liveness invariant ------------------------------------------ */

/* A part is sized when it is granted, under the capacity then: one
 * queued under a large capacity is granted after the capacity fell
 * below what its part minimum was when it queued.
 */
START_TEST (test_part_sized_at_grant)
{
  struct throttle_budget b;
  struct throttle_budget_waiter bw;
  uint64_t held, c;

  throttle_budget_init (&b, 640);
  throttle_budget_charge (&b, 630, NULL, NULL, 0, &held);
  /* 10 free, below the part minimum of 20 (640 / 32): queued. */
  ck_assert_int_eq (throttle_budget_enqueue (&b, &bw, THROTTLE_BUDGET_PARTS,
                                             160, 10, &c), 1);
  ck_assert_int_eq (throttle_budget_set_capacity (&b, 16), 0);
  ck_assert_int_eq (throttle_budget_poll (&b, &bw, &c), 1);
  throttle_budget_credit (&b, held);
  /* Nothing in flight: the head is granted, at most the capacity. */
  ck_assert_int_eq (throttle_budget_poll (&b, &bw, &c), 0);
  ck_assert_uint_eq (c, 10);
  ck_assert_uint_eq (probe_stats (&b).waiters, 0);
  throttle_budget_credit (&b, c);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

/* A capacity below one quantum still grants one quantum of a part,
 * alone, and the clamped whole request, alone.
 */
START_TEST (test_below_quantum)
{
  struct throttle_budget b;
  struct throttle_budget_waiter bw;
  uint64_t c1, c2;

  throttle_budget_init (&b, 1000);
  ck_assert_int_eq (throttle_budget_enqueue (&b, &bw, THROTTLE_BUDGET_PARTS,
                                             16384, 4096, &c1), 0);
  ck_assert_uint_eq (c1, 4096);
  ck_assert_uint_eq (probe_stats (&b).clamped, 1);
  /* Not while anything else is in flight. */
  ck_assert_int_eq (throttle_budget_enqueue (&b, &bw, THROTTLE_BUDGET_PARTS,
                                             12288, 4096, &c2), 1);
  throttle_budget_credit (&b, c1);
  ck_assert_int_eq (throttle_budget_poll (&b, &bw, &c2), 0);
  ck_assert_uint_eq (c2, 4096);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 4096);
  throttle_budget_credit (&b, c2);
  ck_assert_int_eq (throttle_budget_charge (&b, 8192, NULL, NULL, 0, &c1), 0);
  ck_assert_uint_eq (c1, 8192);
  ck_assert_uint_eq (probe_stats (&b).clamped, 3);
  throttle_budget_credit (&b, c1);
  throttle_budget_destroy (&b);
}
END_TEST

/* A whole request above the capacity holds it all, whatever the
 * capacity becomes: raised over it, nothing joins it until what is in
 * flight fits the new capacity with the newcomer (issue 38: a clamped
 * request charged only the old capacity let a 4M write join a 1M+1
 * one under a capacity of 4M).
 */
START_TEST (test_clamp_raised)
{
  struct throttle_budget b;
  struct throttle_budget_waiter bw;
  uint64_t c1, c2;

  throttle_budget_init (&b, 64);
  ck_assert_int_eq (throttle_budget_charge (&b, 1025, NULL, NULL, 0, &c1), 0);
  ck_assert_uint_eq (c1, 1025);
  ck_assert_int_eq (throttle_budget_set_capacity (&b, 4096), 0);
  ck_assert_int_eq (throttle_budget_enqueue (&b, &bw, THROTTLE_BUDGET_WHOLE,
                                             4096, 0, &c2), 1);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 1025);
  /* What fits beside it under the new capacity is granted; the 4M
   * write at the head is not, so nothing behind it either.
   */
  ck_assert_int_eq (throttle_budget_poll (&b, &bw, &c2), 1);
  throttle_budget_credit (&b, c1);
  ck_assert_int_eq (throttle_budget_poll (&b, &bw, &c2), 0);
  ck_assert_uint_eq (c2, 4096);
  ck_assert_uint_eq (probe_stats (&b).peak, 4096);
  throttle_budget_credit (&b, c2);
  /* Raised to just what both need: they run side by side. */
  ck_assert_int_eq (throttle_budget_set_capacity (&b, 64), 0);
  ck_assert_int_eq (throttle_budget_charge (&b, 1025, NULL, NULL, 0, &c1), 0);
  ck_assert_int_eq (throttle_budget_set_capacity (&b, 1025 + 100), 0);
  ck_assert_int_eq (throttle_budget_enqueue (&b, &bw, THROTTLE_BUDGET_WHOLE,
                                             100, 0, &c2), 0);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 1125);
  throttle_budget_credit (&b, c1);
  throttle_budget_credit (&b, c2);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

/* WHOLE above the capacity, by the stepped charge: alone and in full. */
START_TEST (test_exact)
{
  struct throttle_budget b;
  struct throttle_budget_waiter bw;
  uint64_t c1, c2;

  throttle_budget_init (&b, 100);
  ck_assert_int_eq (throttle_budget_enqueue (&b, &bw, THROTTLE_BUDGET_WHOLE,
                                             150, 0, &c1), 0);
  ck_assert_uint_eq (c1, 150);
  ck_assert_uint_eq (probe_stats (&b).clamped, 1);
  ck_assert_int_eq (throttle_budget_enqueue (&b, &bw, THROTTLE_BUDGET_WHOLE,
                                             10, 0, &c2), 1);
  ck_assert_int_eq (throttle_budget_poll (&b, &bw, &c2), 1);
  throttle_budget_credit (&b, c1);
  ck_assert_int_eq (throttle_budget_poll (&b, &bw, &c2), 0);
  ck_assert_uint_eq (c2, 10);
  throttle_budget_credit (&b, c2);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

/* The stepped wait: a waiter granted and then abandoned puts its units
 * back and passes them on; a shutdown ends a polled wait.
 */
START_TEST (test_stepped)
{
  struct throttle_budget b;
  struct throttle_budget_waiter w1, w2, w3;
  uint64_t held, c;

  throttle_budget_init (&b, 10);
  throttle_budget_charge (&b, 8, NULL, NULL, 0, &held);
  ck_assert_int_eq (throttle_budget_enqueue (&b, &w1, THROTTLE_BUDGET_WHOLE,
                                             5, 0, &c), 1);
  ck_assert_int_eq (throttle_budget_enqueue (&b, &w2, THROTTLE_BUDGET_WHOLE,
                                             5, 0, &c), 1);
  ck_assert_int_eq (throttle_budget_enqueue (&b, &w3, THROTTLE_BUDGET_WHOLE,
                                             5, 0, &c), 1);
  throttle_budget_credit (&b, held);
  /* w1 and w2 granted (5 + 5); w1 abandons after its grant: w3 gets it. */
  ck_assert_uint_eq (probe_stats (&b).waiters, 1);
  throttle_budget_abandon (&b, &w1);
  ck_assert_uint_eq (probe_stats (&b).waiters, 0);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 10);
  ck_assert_uint_eq (probe_stats (&b).cancelled, 1);
  ck_assert_int_eq (throttle_budget_poll (&b, &w2, &c), 0);
  ck_assert_uint_eq (c, 5);
  ck_assert_int_eq (throttle_budget_poll (&b, &w3, &c), 0);
  throttle_budget_credit (&b, c);
  ck_assert_int_eq (throttle_budget_enqueue (&b, &w1, THROTTLE_BUDGET_WHOLE,
                                             10, 0, &c), 1);
  throttle_budget_shutdown (&b);
  ck_assert_int_eq (throttle_budget_poll (&b, &w1, &c), -1);
  ck_assert_uint_eq (c, 0);
  throttle_budget_credit (&b, 5);
  ck_assert_uint_eq (probe_stats (&b).in_flight, 0);
  throttle_budget_destroy (&b);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("budget");
  TCase *tc = tcase_create ("core");

  tcase_set_timeout (tc, 30);
  tcase_add_test (tc, test_basic);
  tcase_add_test (tc, test_zero_capacity_refused);
  tcase_add_test (tc, test_zero_need_is_free);
  tcase_add_test (tc, test_clamp);
  tcase_add_test (tc, test_clamp_raised);
  tcase_add_test (tc, test_fifo_no_starvation);
  tcase_add_test (tc, test_enqueue_no_barging);
  tcase_add_test (tc, test_cancel_leaks_nothing);
  tcase_add_test (tc, test_shutdown_wakes_waiters);
  tcase_add_test (tc, test_set_capacity);
  tcase_add_test_raise_signal (tc, test_over_credit_aborts, SIGABRT);
  tcase_add_test (tc, test_part_grants);
  tcase_add_test (tc, test_part_fifo);
  tcase_add_test (tc, test_part_takes_half);
  tcase_add_test (tc, test_part_bad_args);
  tcase_add_test (tc, test_part_sized_at_grant);
  tcase_add_test (tc, test_below_quantum);
  tcase_add_test (tc, test_exact);
  tcase_add_test (tc, test_stepped);
  suite_add_tcase (s, tc);
  return s;
}
