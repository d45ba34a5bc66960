/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: a budget of units in flight with FIFO admission.
 *
 * A request that cannot be admitted at once waits in the budget's
 * queue (throttle-wait.h: the kernel's rq_qos_wait), *granted* its
 * units by whoever frees them: no later arrival slips in ahead of it,
 * so a stream of small requests cannot starve a large one.
 */

#ifndef THROTTLE_BUDGET_H
#define THROTTLE_BUDGET_H

#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>

#include "throttle-wait.h"

struct throttle_stats {
  uint64_t capacity;
  uint64_t in_flight;         /* units held now */
  uint64_t peak;              /* most units ever held at once */
  uint64_t charged;           /* total units ever charged */
  uint64_t admitted;          /* requests admitted */
  uint64_t waited;            /* of those, how many had to wait */
  uint64_t cancelled;         /* waits that were cancelled */
  uint64_t clamped;           /* requests above the capacity, run alone */
  uint64_t wait_ns_total;
  uint64_t wait_ns_max;
  uint64_t waiters;           /* waiting now */
};

/* The fast path (throttle-budget.c, "The fast path"): while nobody
 * waits, a charge that fits and a credit are one atomic operation each
 * on 'word', without the lock.  The lock is taken only to wait, to
 * grant, and to change the capacity.
 */
#define THROTTLE_BUDGET_SLOW (UINT64_C (1) << 63)

/* Set for good by throttle_budget_mirror: every unit granted on the
 * budget from then on is owed to a second budget too.
 */
#define THROTTLE_BUDGET_MIRRORED (UINT64_C (1) << 62)

/* Units a budget can hold: the low 62 bits of its word. */
#define THROTTLE_BUDGET_MAX_UNITS (THROTTLE_BUDGET_MIRRORED - 1)

struct throttle_budget {
  /* The units in flight (THROTTLE_BUDGET_MAX_UNITS), and
   * THROTTLE_BUDGET_SLOW while the fast charge is closed: whenever the
   * queue is not empty, after a shutdown, and while a holder of 'lock'
   * decides a charge.  The bit is set and cleared only under 'lock';
   * units are added without the lock only by a fast charge while it is
   * clear, and taken away by a credit at any time.  And
   * THROTTLE_BUDGET_MIRRORED, set once under 'lock'.  Atomic.
   */
  uint64_t word;
  /* Even while the capacity is stable, odd while it changes: a fast
   * charge that saw it move gives its units back.  Written under
   * 'lock', read without it.  Atomic.
   */
  uint64_t cap_seq;
  /* Written under 'lock' with an atomic store between two increments
   * of cap_seq: get_capacity and the fast charge read it without the
   * lock.
   */
  uint64_t capacity;
  /* Counted by every grant, fast or not, and by putback: atomic. */
  uint64_t admitted, charged, peak;
  /* Set with THROTTLE_BUDGET_MIRRORED, under 'lock'. */
  struct throttle_budget *mirror;
  pthread_mutex_t lock;         /* the queue, shutdown, mirror and the
                                   other stats; HACKING.md, "Locks" */
  struct throttle_wait_queue queue;
  bool shutdown;
  struct throttle_stats stats;  /* waited, cancelled, clamped, wait_ns_* */
};

/* The liveness invariant, whatever the capacity becomes: whenever
 * requests wait and nothing is in flight, the head of the queue is
 * granted.  A budget keeps it because every kind of request below is
 * grantable to a budget with nothing in flight, and every change that
 * can make a waiter grantable (a credit, a capacity change, a waiter
 * leaving the queue) grants from the head.  "Whenever" is once every
 * credit under way has returned: a credit takes its units away before
 * it grants (throttle-budget.c, "The fast path").  Debug builds
 * (without NDEBUG) check after each change under the lock that a
 * queue is never left with the fast charge open, which the invariant
 * rests on; the simulation (tests/test-sim.c) checks the invariant.
 *
 * The bound: every grant leaves at most the capacity then in force in
 * flight, or is the only one in flight (a request above the capacity,
 * counted in the 'clamped' statistic).  A grant is charged every unit
 * its request holds, so the units in flight are what the layers below
 * hold, at every instant: raising the capacity over a request above it
 * admits a new one only where both fit.  Lowering the capacity revokes
 * nothing already held; no grant is made until what is held fits.
 */

/* How a request may be granted. */
enum throttle_budget_kind {
  /* All of 'need' at once.  Above the capacity it is granted when
   * nothing else is in flight, charged in full (counted as clamped):
   * it runs alone, and nothing joins it until enough of it is credited
   * back under the capacity then in force.
   */
  THROTTLE_BUDGET_WHOLE,
  /* All of 'need' if that is free, else a part in whole quanta of at
   * least throttle_budget_part_min of the capacity at the grant, and
   * never more than the capacity nor, while others queue behind it,
   * than half of 'need' rounded up to a quantum: the caller serves the
   * part it pays for and charges again for the rest.  A capacity below
   * one quantum still grants one quantum when nothing else is in
   * flight (it runs alone, charged in full, counted as clamped).
   */
  THROTTLE_BUDGET_PARTS,
};

/* A request's place in the queue while it waits: the caller's, on its
 * stack or in its request; every field is the budget's.
 */
struct throttle_budget_waiter {
  struct throttle_waiter w;
  enum throttle_budget_kind kind;
  uint64_t quantum;
  uint64_t start_ns;
  bool clamped;                 /* granted above the capacity */
};

/* capacity: 1 to THROTTLE_BUDGET_MAX_UNITS, else -1 with EINVAL. */
extern int throttle_budget_init (struct throttle_budget *b, uint64_t capacity);
extern void throttle_budget_destroy (struct throttle_budget *b);

/* The smallest part a PARTS request is granted under 'capacity' when
 * all of it is not free: a 32nd of the capacity in whole quanta, at
 * least one quantum, at most the capacity in whole quanta (when the
 * capacity is at least one quantum).  quantum > 0.  Small, so that a
 * large request waiting at the head leaves little idle: it takes what
 * is freed bit by bit instead of waiting for a large part.
 */
extern uint64_t throttle_budget_part_min (uint64_t capacity, uint64_t quantum);

/* The non-blocking steps of a charge; throttle_budget_charge and
 * throttle_budget_charge_part compose them with throttle_budget_wait.
 *
 * throttle_budget_enqueue: take 'need' units of 'kind' (none if 0)
 * ('quantum' > 0 for THROTTLE_BUDGET_PARTS, else ignored) if that is
 * possible at once without overtaking a waiter: returns 0 with the
 * units taken in *charged.  Otherwise queues bw at the tail and
 * returns 1: the caller must then end bw's wait with exactly one of
 * throttle_budget_wait, throttle_budget_poll until it returns 0 or -1,
 * or throttle_budget_abandon, and keep bw alive until then.  Returns
 * -1 holding nothing after a shutdown (errno ESHUTDOWN) or with
 * EINVAL for a PARTS request with quantum 0 or a need above
 * THROTTLE_BUDGET_MAX_UNITS.
 *
 * *charged is what the caller gives back with exactly one
 * throttle_budget_credit: 'need' (WHOLE), or a part (PARTS); on a
 * mirrored budget with THROTTLE_BUDGET_MIRRORED or'd in
 * (throttle_budget_mirror), which the credit must leave out.
 */
extern int throttle_budget_enqueue (struct throttle_budget *b,
                                    struct throttle_budget_waiter *bw,
                                    enum throttle_budget_kind kind,
                                    uint64_t need, uint64_t quantum,
                                    uint64_t *charged);

/* The steps of the fast charge and of a credit, for a caller that
 * puts other steps between them from one thread, as the simulation
 * does (tests/test-budget-sched.c); throttle_budget_enqueue and
 * throttle_budget_credit are made of them.  Not for the filter.
 *
 * throttle_budget_fast_read: the fast charge's first reads (the
 * capacity's sequence count, the capacity, the word) into *f for
 * 'need' units.  false: the fast charge cannot take them (someone
 * waits, they do not fit, the capacity is changing); the caller goes
 * on with throttle_budget_enqueue_locked.
 *
 * throttle_budget_fast_swap: its compare-and-swap.  0: the units are
 * in the word: recheck next; 1: the word had changed and they still
 * fit: swap again; -1: holding nothing, they no longer fit: go on with
 * throttle_budget_enqueue_locked.
 *
 * throttle_budget_fast_recheck: its second reading of the sequence
 * count.  0: the units are taken and counted, to be given back with
 * one throttle_budget_credit (f->word, the word the swap found, says
 * with THROTTLE_BUDGET_MIRRORED whether they are owed to a mirror);
 * -1: the capacity changed meanwhile: the caller gives f->need back
 * as the fast charge does, with throttle_budget_credit_release,
 * throttle_budget_credit_grant if that returned THROTTLE_BUDGET_SLOW,
 * and as many units credited to the mirror if it returned
 * THROTTLE_BUDGET_MIRRORED and f->word had not; then goes on with
 * throttle_budget_enqueue_locked.
 *
 * throttle_budget_enqueue_locked: throttle_budget_enqueue without the
 * fast charge.
 *
 * throttle_budget_credit_release: a credit's subtraction.  Returns
 * the word's flags before it: with THROTTLE_BUDGET_SLOW the credit
 * must still grant, with throttle_budget_credit_grant.
 */
struct throttle_budget_fast {
  uint64_t need, seq, capacity, word;
};

extern bool throttle_budget_fast_read (struct throttle_budget *b,
                                       uint64_t need,
                                       struct throttle_budget_fast *f);
extern int throttle_budget_fast_swap (struct throttle_budget *b,
                                      struct throttle_budget_fast *f);
extern int throttle_budget_fast_recheck (struct throttle_budget *b,
                                         struct throttle_budget_fast *f);
extern int throttle_budget_enqueue_locked (struct throttle_budget *b,
                                           struct throttle_budget_waiter *bw,
                                           enum throttle_budget_kind kind,
                                           uint64_t need, uint64_t quantum,
                                           uint64_t *charged);
extern uint64_t throttle_budget_credit_release (struct throttle_budget *b,
                                                uint64_t units);
extern void throttle_budget_credit_grant (struct throttle_budget *b);

/* Block until queued bw is granted (0, *charged set) or until 'cancel'
 * or throttle_budget_shutdown ends the wait (-1, holding nothing).
 * 'cancel' may be NULL; it is asked every poll_ms (see throttle_wait).
 */
extern int throttle_budget_wait (struct throttle_budget *b,
                                 struct throttle_budget_waiter *bw,
                                 throttle_cancel_fn cancel, void *opaque,
                                 unsigned poll_ms, uint64_t *charged);

/* Never blocks: 0 if queued bw has been granted (*charged set; bw is
 * done), 1 if it still waits, -1 if the budget was shut down (bw is
 * done and holds nothing).
 */
extern int throttle_budget_poll (struct throttle_budget *b,
                                 struct throttle_budget_waiter *bw,
                                 uint64_t *charged);

/* Give up queued bw, granted or not: afterwards it holds nothing, and
 * the waiters behind it may be granted.
 */
extern void throttle_budget_abandon (struct throttle_budget *b,
                                     struct throttle_budget_waiter *bw);

/* Block until 'need' units are free, then take them
 * (THROTTLE_BUDGET_WHOLE: above the capacity, alone).  On success
 * returns 0 and stores in *charged the units taken, to be given back
 * with exactly one throttle_budget_credit.  Returns -1 (holding
 * nothing) if the wait was cancelled by 'cancel' or by
 * throttle_budget_shutdown.  'poll_ms' is how often 'cancel' is asked
 * (ignored if cancel is NULL).  need == 0 takes nothing.
 */
extern int throttle_budget_charge (struct throttle_budget *b, uint64_t need,
                                   throttle_cancel_fn cancel, void *opaque,
                                   unsigned poll_ms, uint64_t *charged);

/* The same for THROTTLE_BUDGET_PARTS: *charged is all of 'need' or a
 * part of it in whole quanta.  -1 with errno EINVAL if quantum is 0.
 */
extern int throttle_budget_charge_part (struct throttle_budget *b,
                                        uint64_t need, uint64_t quantum,
                                        throttle_cancel_fn cancel,
                                        void *opaque, unsigned poll_ms,
                                        uint64_t *charged);

/* Give back units taken by one charge (without
 * THROTTLE_BUDGET_MIRRORED).  Crediting more than is in flight aborts:
 * it would silently raise the capacity.  Returns whether b was
 * mirrored then (throttle_budget_mirror).
 */
extern bool throttle_budget_credit (struct throttle_budget *b, uint64_t units);

/* Mirror b into 'mirror' from now on, for a caller that keeps a second
 * budget bounding several first ones (throttle-admit.h): 'mirror' is
 * charged, without waiting, what b has in flight now, and
 * THROTTLE_BUDGET_MIRRORED is set in b.  Afterwards:
 * - every grant on b returns its units in *charged with
 *   THROTTLE_BUDGET_MIRRORED or'd in if b was mirrored when it granted
 *   (the caller then owes 'mirror' as many units, and charges them);
 * - throttle_budget_credit on b returns true: the caller then credits
 *   'mirror' as many units, whether they were granted before the
 *   mirroring (they are in what 'mirror' was charged) or after;
 * - a waiter granted before the mirroring and abandoned after it
 *   (throttle_budget_abandon, a cancelled throttle_budget_wait) gives
 *   its units back to 'mirror' as well: they were in what it was
 *   charged.
 * A second call does nothing.  Takes b's lock, then mirror's: the one
 * place where two budgets' locks nest (HACKING.md, "Locks").
 */
extern void throttle_budget_mirror (struct throttle_budget *b,
                                    struct throttle_budget *mirror);

/* The steps of throttle_budget_mirror, for the simulation
 * (tests/test-budget-sched.c), which puts lock-free steps of other
 * threads (credits, fast charges) between them.  Not for the filter.
 *
 * throttle_budget_mirror_read: false if b is mirrored already.  Else
 * takes b's lock and KEEPS it, closes the fast charge, and charges
 * 'mirror' what b has in flight, in *x.  The caller must then call
 * throttle_budget_mirror_mark, and take nothing that needs b's lock
 * meanwhile.
 *
 * throttle_budget_mirror_mark: set THROTTLE_BUDGET_MIRRORED and drop
 * b's lock.  Returns what 'mirror' was charged beyond what b held
 * then (credits made meanwhile), for the caller to credit 'mirror'.
 */
extern bool throttle_budget_mirror_read (struct throttle_budget *b,
                                         struct throttle_budget *mirror,
                                         uint64_t *x);
extern uint64_t throttle_budget_mirror_mark (struct throttle_budget *b,
                                             uint64_t x);
extern bool throttle_budget_mirrored (struct throttle_budget *b);

/* Change the capacity, to any value from 1 to
 * THROTTLE_BUDGET_MAX_UNITS.  Lowering it never revokes units already
 * held; raising it admits waiters at once.  A waiting part is sized
 * under the new capacity when it is granted.  Returns -1 (EINVAL) for
 * a capacity out of range.
 */
extern int throttle_budget_set_capacity (struct throttle_budget *b,
                                         uint64_t capacity);

/* The steps of throttle_budget_set_capacity, for the simulation, which
 * puts lock-free steps between them while the sequence count is odd.
 * Not for the filter.  throttle_budget_set_capacity_begin: -1 (EINVAL)
 * as throttle_budget_set_capacity; else takes b's lock and KEEPS it,
 * makes the count odd and stores the capacity.  The caller must then
 * call throttle_budget_set_capacity_end (count even again, waiters
 * granted, lock dropped), and take nothing that needs b's lock
 * meanwhile.
 */
extern int throttle_budget_set_capacity_begin (struct throttle_budget *b,
                                               uint64_t capacity);
extern void throttle_budget_set_capacity_end (struct throttle_budget *b);

/* Fail every current and future wait (server unload). */
extern void throttle_budget_shutdown (struct throttle_budget *b);

/* Without the lock: the filter asks on every request, and a value
 * that a concurrent set_capacity replaces a moment later is as good
 * as one read just before it.
 */
static inline uint64_t
throttle_budget_get_capacity (struct throttle_budget *b)
{
  return __atomic_load_n (&b->capacity, __ATOMIC_SEQ_CST);
}
extern void throttle_budget_get_stats (struct throttle_budget *b,
                                       struct throttle_stats *stats);

#endif /* THROTTLE_BUDGET_H */
