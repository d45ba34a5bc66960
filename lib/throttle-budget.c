/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: a budget of units in flight with FIFO admission.
 *
 * The four flaws of the 2007 writeout-throttling patch, and why this
 * code does not have them:
 *
 * - check-then-subtract race: the patch tested "enough available?"
 *   and subtracted later, so two threads could both pass the test.
 *   Here the test and the subtraction happen under one lock, and for a
 *   waiter they are done by the thread that frees the units (a grant),
 *   so the waiter never re-tests.
 *
 * - credit zeroed before it was returned: the completion path read the
 *   request's charge after clearing it.  Here charge() hands the exact
 *   number of units taken to the caller, which returns that number once.
 *
 * - interruptible wait leaking credit: a wait interrupted after being
 *   woken kept or lost its units.  Here a cancelled waiter removes
 *   itself under the lock; if it was granted meanwhile it gives the
 *   units back before returning, so a cancelled wait holds nothing.
 *
 * - starvation: a large request woke up to find the units taken by
 *   smaller ones that arrived later.  Here arrivals queue behind any
 *   waiter, and units are granted strictly in arrival order.
 *
 * The fast path.  Most requests find nobody waiting and their units
 * free, and most credits find nobody to grant: each is then one atomic
 * operation on b->word and no lock, as in the kernel's rq_wait_inc_below
 * (block/blk-rq-qos.c), which rq_qos_wait tries before it queues.  The
 * word holds the units in flight and THROTTLE_BUDGET_SLOW, the bit that
 * closes the fast charge.  Why the four promises still hold:
 *
 * - FIFO: the bit is set, under the lock, before anyone joins the
 *   queue, and cleared, under the lock, only when the queue is empty
 *   (settle).  A fast charge succeeds only with a compare-and-swap that
 *   finds the bit clear, so at that instant nobody is queued: it
 *   overtakes no waiter.  Every grant made under the lock is made with
 *   the bit set (a charge decided under the lock sets it first; a grant
 *   to the queue's head has a queue), so fast and locked additions
 *   never interleave, and the units a locked decision reads can only be
 *   more than are really in flight (credits go on without the lock):
 *   it errs towards waiting, never past the bound.
 *
 * - The bound: a fast charge adds its units only if they fit under the
 *   capacity it read, and gives them back at once (and takes the locked
 *   path) if the capacity changed meanwhile: cap_seq, written around
 *   each change, tells it so (a sequence count as in the kernel's
 *   seqcount_t).  Every operation on word, capacity and cap_seq is
 *   sequentially consistent, so if its two reads of cap_seq agree and
 *   are even, no change of the capacity lies between them, and its
 *   compare-and-swap, between them, charged under the capacity it read.
 *   Units given back that way never ran: nothing is counted for them.
 *
 * - No lost wake-up: a credit subtracts its units from the word and,
 *   if the old word had the bit set, takes the lock and grants from the
 *   head.  A charge that queues sets the bit with an atomic
 *   read-modify-write and then reads the units: a credit before it is
 *   in what it reads, a credit after it sees the bit.  So the liveness
 *   invariant holds once every credit has finished: between a credit's
 *   subtraction and its locked grant, the head may briefly wait with
 *   nothing in flight, and that credit is about to grant it.
 *
 * - Credit exactly once: a credit is one subtraction, which aborts if it
 *   would go below zero, as before.
 */

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "throttle-budget.h"
#include "throttle-clock.h"
#include "throttle-lock.h"
#include "throttle-wait.h"

int
throttle_budget_init (struct throttle_budget *b, uint64_t capacity)
{
  int err;

  if (capacity == 0 || capacity > THROTTLE_BUDGET_MAX_UNITS) {
    errno = EINVAL;
    return -1;
  }
  memset (b, 0, sizeof *b);
  err = throttle_lock_init (&b->lock);
  if (err != 0) {
    errno = err;
    return -1;
  }
  throttle_wait_queue_init (&b->queue, &b->lock);
  b->capacity = capacity;
  return 0;
}

void
throttle_budget_destroy (struct throttle_budget *b)
{
  pthread_mutex_destroy (&b->lock);
}

uint64_t
throttle_budget_part_min (uint64_t capacity, uint64_t quantum)
{
  uint64_t min = capacity / 32 / quantum * quantum;

  return min > quantum ? min : quantum;
}

static uint64_t
units_in_flight (const struct throttle_budget *b)
{
  return __atomic_load_n (&b->word, __ATOMIC_SEQ_CST) &
    THROTTLE_BUDGET_MAX_UNITS;
}

/* Raise the peak to 'now' units in flight, from any thread. */
static void
count_peak (struct throttle_budget *b, uint64_t now)
{
  uint64_t peak = __atomic_load_n (&b->peak, __ATOMIC_RELAXED);

  while (now > peak &&
         !__atomic_compare_exchange_n (&b->peak, &peak, now, true,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
}

/* Count a grant of 'units' that left 'now' units in flight, from any
 * thread: the counters are atomic, so that the fast path needs no lock
 * and 'stats' stays exact.
 */
static void
count_grant (struct throttle_budget *b, uint64_t units, uint64_t now)
{
  __atomic_add_fetch (&b->admitted, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch (&b->charged, units, __ATOMIC_RELAXED);
  count_peak (b, now);
}

/* Called with the lock held and the fast charge closed (the bit set):
 * no fast charge can add units meanwhile.  Returns the units taken,
 * with THROTTLE_BUDGET_MIRRORED if the budget is mirrored.
 */
static uint64_t
take (struct throttle_budget *b, uint64_t units, bool clamped)
{
  uint64_t word;

  throttle_lock_assert_held (&b->lock);
  word = __atomic_add_fetch (&b->word, units, __ATOMIC_SEQ_CST);
  count_grant (b, units, word & THROTTLE_BUDGET_MAX_UNITS);
  if (clamped)
    b->stats.clamped++;
  return units | (word & THROTTLE_BUDGET_MIRRORED);
}

/* Called with the lock held: close the fast charge before deciding a
 * charge under the lock.
 */
static void
close_fast (struct throttle_budget *b)
{
  throttle_lock_assert_held (&b->lock);
  __atomic_fetch_or (&b->word, THROTTLE_BUDGET_SLOW, __ATOMIC_SEQ_CST);
}

/* Called with the lock held, and drops it, after a change: reopen the
 * fast charge if nobody waits and the budget is not shut down.  Debug
 * builds check what keeps the liveness invariant (throttle-budget.h)
 * under the fast path: a queue is never left with the fast charge
 * open.  (The invariant itself is checked by the simulation at the
 * points where no credit is halfway, tests/test-sim.c.)
 */
static void
settle (struct throttle_budget *b)
{
  throttle_lock_assert_held (&b->lock);
  if (b->queue.head == NULL && !b->shutdown &&
      (__atomic_load_n (&b->word, __ATOMIC_RELAXED) & THROTTLE_BUDGET_SLOW))
    __atomic_fetch_and (&b->word, ~THROTTLE_BUDGET_SLOW, __ATOMIC_SEQ_CST);
  assert (b->queue.head == NULL ||
          (__atomic_load_n (&b->word, __ATOMIC_RELAXED) &
           THROTTLE_BUDGET_SLOW));
  throttle_unlock (&b->lock);
}

/* Called with the lock held (by acquire and charge_now, which check
 * it): how many of 'want' units a request of 'kind' may take now, or 0
 * if none; *clamped if it runs alone above the capacity.  Decided now,
 * not when the request queued: the capacity may have changed
 * meanwhile.  With nothing in flight every request gets something (the
 * liveness invariant): a whole request all it needs, a part at least
 * one quantum.  What is granted is always what the request holds, never
 * less: a request above the capacity is charged in full, so that while
 * it runs the free units are none under any capacity up to its size,
 * and a capacity raised over it admits nobody beside it (the bound,
 * throttle-budget.h).
 */
static uint64_t
grantable (const struct throttle_budget *b, enum throttle_budget_kind kind,
           uint64_t want, uint64_t quantum, bool *clamped)
{
  uint64_t cap = b->capacity;
  uint64_t in_flight = units_in_flight (b);
  uint64_t free = in_flight < cap ? cap - in_flight : 0;
  uint64_t part;

  *clamped = false;
  switch (kind) {
  case THROTTLE_BUDGET_WHOLE:
    if (want <= free)
      return want;
    break;
  case THROTTLE_BUDGET_PARTS:
    if (want <= free)
      return want;
    /* What is freed bit by bit is not left idle while the request
     * waits for all of it, once it makes a part worth a call: all
     * that is free when nobody queues behind it, else at most half of
     * what is left, so that those queued behind it share what is free
     * (small requests behind a large one) and the rest is a part of
     * like size, not a sliver that holds a round of its own.  With
     * nothing in flight that is above cap / 2, so at least the part
     * minimum.  queue.nr counts the head being granted.
     */
    part = b->queue.nr <= 1 ? want :
      (want / 2 + quantum - 1) / quantum * quantum;
    part = (part < free ? part : free) / quantum * quantum;
    if (part > 0 && part >= throttle_budget_part_min (cap, quantum))
      return part;
    /* A capacity below one quantum: one quantum, alone. */
    if (cap < quantum)
      want = want < quantum ? want : quantum;
    else
      return 0;
    break;
  }
  /* Above the capacity: alone, charged in full. */
  if (in_flight > 0)
    return 0;
  *clamped = want > cap;
  return want;
}

/* throttle_acquire_fn: called with the lock held. */
static bool
acquire (void *owner, struct throttle_waiter *w)
{
  struct throttle_budget *b = owner;
  struct throttle_budget_waiter *bw = (struct throttle_budget_waiter *) w;
  bool clamped;
  uint64_t n = grantable (b, bw->kind, w->want, bw->quantum, &clamped);

  if (n == 0)
    return false;
  w->got = take (b, n, clamped);
  bw->clamped = clamped;
  return true;
}

/* throttle_putback_fn: undo a grant whose wait was abandoned.  Called
 * with the lock held.
 */
static void
putback (void *owner, struct throttle_waiter *w)
{
  struct throttle_budget *b = owner;
  struct throttle_budget_waiter *bw = (struct throttle_budget_waiter *) w;

  uint64_t units = w->got & THROTTLE_BUDGET_MAX_UNITS;
  uint64_t old;

  throttle_lock_assert_held (&b->lock);
  old = __atomic_fetch_sub (&b->word, units, __ATOMIC_SEQ_CST);
  /* Granted before b was mirrored, given back after: the mirror was
   * charged these units with the rest of b's (throttle_budget_mirror).
   * Its lock nests under b's only here and in throttle_budget_mirror.
   */
  if ((old & THROTTLE_BUDGET_MIRRORED) &&
      !(w->got & THROTTLE_BUDGET_MIRRORED))
    throttle_budget_credit (b->mirror, units);
  __atomic_sub_fetch (&b->charged, units, __ATOMIC_RELAXED);
  __atomic_sub_fetch (&b->admitted, 1, __ATOMIC_RELAXED);
  if (bw->clamped)
    b->stats.clamped--;
}

/* Called with the lock held and the fast charge closed.  Take units
 * only if that overtakes no waiter: an arrival that fits while others
 * wait must queue behind them, or a stream of small requests could
 * starve a large one.
 */
static int
charge_now (struct throttle_budget *b, enum throttle_budget_kind kind,
            uint64_t need, uint64_t quantum, uint64_t *charged)
{
  bool clamped;
  uint64_t n;

  throttle_lock_assert_held (&b->lock);
  if (b->queue.head != NULL ||
      (n = grantable (b, kind, need, quantum, &clamped)) == 0)
    return -1;
  *charged = take (b, n, clamped);
  return 0;
}

/* The fast charge (see the head of this file): take 'need' units
 * without the lock if nobody waits, they fit, and the capacity stays
 * put meanwhile.  Its two steps are apart so that the simulation can
 * put other steps between them (throttle-budget.h); always inlined so
 * that the filter's copy is one straight path.
 */
static inline __attribute__ ((always_inline)) bool
fast_fits (const struct throttle_budget_fast *f)
{
  return (f->word & THROTTLE_BUDGET_SLOW) == 0 && f->need <= f->capacity &&
    (f->word & THROTTLE_BUDGET_MAX_UNITS) <= f->capacity - f->need;
}

static inline __attribute__ ((always_inline)) bool
fast_read (struct throttle_budget *b, uint64_t need,
           struct throttle_budget_fast *f)
{
  f->need = need;
  f->seq = __atomic_load_n (&b->cap_seq, __ATOMIC_SEQ_CST);
  if (f->seq & 1)
    return false;
  f->capacity = __atomic_load_n (&b->capacity, __ATOMIC_SEQ_CST);
  f->word = __atomic_load_n (&b->word, __ATOMIC_RELAXED);
  return fast_fits (f);
}

static inline __attribute__ ((always_inline)) int
fast_swap (struct throttle_budget *b, struct throttle_budget_fast *f)
{
  uint64_t w = f->word;        /* a local, so that f stays in registers */

  /* A failed compare-and-swap leaves the word it found in f->word. */
  if (!__atomic_compare_exchange_n (&b->word, &w, w + f->need, false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    f->word = w;
    return fast_fits (f) ? 1 : -1;
  }
  return 0;
}

static inline __attribute__ ((always_inline)) int
fast_recheck (struct throttle_budget *b, struct throttle_budget_fast *f)
{
  if (__atomic_load_n (&b->cap_seq, __ATOMIC_SEQ_CST) != f->seq)
    return -1;
  count_grant (b, f->need, (f->word & THROTTLE_BUDGET_MAX_UNITS) + f->need);
  return 0;
}

static inline __attribute__ ((always_inline)) int
fast_confirm (struct throttle_budget *b, struct throttle_budget_fast *f)
{
  if (fast_recheck (b, f) == -1) {
    /* Charged under a capacity that has changed since: give the units
     * back (granting whoever queued behind them meanwhile).  Taken
     * before b was mirrored and given back after, they were in what
     * the mirror was charged (throttle_budget_mirror).
     */
    if (throttle_budget_credit (b, f->need) &&
        !(f->word & THROTTLE_BUDGET_MIRRORED))
      throttle_budget_credit (b->mirror, f->need);
    return -1;
  }
  return 0;
}

static inline __attribute__ ((always_inline)) int
fast_commit (struct throttle_budget *b, struct throttle_budget_fast *f)
{
  int r = fast_swap (b, f);

  return r == 0 ? fast_confirm (b, f) : r;
}

/* Returns the units taken and counted (with THROTTLE_BUDGET_MIRRORED
 * if the budget is mirrored), or 0 holding nothing: the caller then
 * decides under the lock.
 */
static uint64_t
charge_fast (struct throttle_budget *b, uint64_t need)
{
  struct throttle_budget_fast f;
  int r;

  if (!fast_read (b, need, &f))
    return 0;
  while ((r = fast_commit (b, &f)) == 1)
    ;
  return r == 0 ? need | (f.word & THROTTLE_BUDGET_MIRRORED) : 0;
}

bool
throttle_budget_fast_read (struct throttle_budget *b, uint64_t need,
                           struct throttle_budget_fast *f)
{
  return need > 0 && need <= THROTTLE_BUDGET_MAX_UNITS &&
    fast_read (b, need, f);
}

int
throttle_budget_fast_swap (struct throttle_budget *b,
                           struct throttle_budget_fast *f)
{
  return fast_swap (b, f);
}

int
throttle_budget_fast_recheck (struct throttle_budget *b,
                              struct throttle_budget_fast *f)
{
  return fast_recheck (b, f);
}

int
throttle_budget_enqueue (struct throttle_budget *b,
                         struct throttle_budget_waiter *bw,
                         enum throttle_budget_kind kind, uint64_t need,
                         uint64_t quantum, uint64_t *charged)
{
  /* The locked path checks the arguments: a PARTS request without a
   * quantum must reach it; one above the capacity never fits here.
   */
  *charged = 0;
  if (need > 0 && (kind != THROTTLE_BUDGET_PARTS || quantum > 0) &&
      (*charged = charge_fast (b, need)) != 0)
    return 0;
  return throttle_budget_enqueue_locked (b, bw, kind, need, quantum, charged);
}

int
throttle_budget_enqueue_locked (struct throttle_budget *b,
                                struct throttle_budget_waiter *bw,
                                enum throttle_budget_kind kind, uint64_t need,
                                uint64_t quantum, uint64_t *charged)
{
  int r;

  *charged = 0;
  if ((kind == THROTTLE_BUDGET_PARTS && quantum == 0) ||
      need > THROTTLE_BUDGET_MAX_UNITS) {
    errno = EINVAL;
    return -1;
  }
  if (need == 0)
    return 0;
  throttle_lock (&b->lock);
  if (b->shutdown) {
    errno = ESHUTDOWN;
    r = -1;
  }
  else {
    close_fast (b);
    r = charge_now (b, kind, need, quantum, charged) == 0 ? 0 : 1;
  }
  if (r == 1) {
    memset (bw, 0, sizeof *bw);
    bw->w.want = need;
    bw->kind = kind;
    bw->quantum = quantum;
    bw->start_ns = throttle_now_ns ();
    throttle_wait_enqueue (&b->queue, &bw->w);
  }
  settle (b);
  return r;
}

/* Called with the lock held: bw was granted. */
static void
count_wait (struct throttle_budget *b, struct throttle_budget_waiter *bw,
            uint64_t *charged)
{
  uint64_t waited = throttle_now_ns () - bw->start_ns;

  throttle_lock_assert_held (&b->lock);
  *charged = bw->w.got;
  b->stats.waited++;
  b->stats.wait_ns_total += waited;
  if (waited > b->stats.wait_ns_max)
    b->stats.wait_ns_max = waited;
}

int
throttle_budget_wait (struct throttle_budget *b,
                      struct throttle_budget_waiter *bw,
                      throttle_cancel_fn cancel, void *opaque,
                      unsigned poll_ms, uint64_t *charged)
{
  int r;

  *charged = 0;
  throttle_lock (&b->lock);
  r = throttle_wait_sleep (&b->queue, &bw->w, &b->shutdown, cancel, opaque,
                           poll_ms, acquire, putback, b);
  if (r == 0)
    count_wait (b, bw, charged);
  else
    b->stats.cancelled++;
  settle (b);
  return r;
}

int
throttle_budget_poll (struct throttle_budget *b,
                      struct throttle_budget_waiter *bw, uint64_t *charged)
{
  int r = 1;

  *charged = 0;
  throttle_lock (&b->lock);
  if (b->shutdown) {
    throttle_wait_abandon (&b->queue, &bw->w, acquire, putback, b);
    b->stats.cancelled++;
    r = -1;
  }
  else if (bw->w.granted) {
    throttle_wait_release (&b->queue, &bw->w);
    count_wait (b, bw, charged);
    r = 0;
  }
  settle (b);
  return r;
}

void
throttle_budget_abandon (struct throttle_budget *b,
                         struct throttle_budget_waiter *bw)
{
  throttle_lock (&b->lock);
  throttle_wait_abandon (&b->queue, &bw->w, acquire, putback, b);
  b->stats.cancelled++;
  settle (b);
}

static int
charge (struct throttle_budget *b, enum throttle_budget_kind kind,
        uint64_t need, uint64_t quantum, throttle_cancel_fn cancel,
        void *opaque, unsigned poll_ms, uint64_t *charged)
{
  struct throttle_budget_waiter bw;
  int r;

  r = throttle_budget_enqueue (b, &bw, kind, need, quantum, charged);
  if (r == 1)
    r = throttle_budget_wait (b, &bw, cancel, opaque, poll_ms, charged);
  return r;
}

int
throttle_budget_charge (struct throttle_budget *b, uint64_t need,
                        throttle_cancel_fn cancel, void *opaque,
                        unsigned poll_ms, uint64_t *charged)
{
  return charge (b, THROTTLE_BUDGET_WHOLE, need, 0, cancel, opaque, poll_ms,
                 charged);
}

int
throttle_budget_charge_part (struct throttle_budget *b, uint64_t need,
                             uint64_t quantum, throttle_cancel_fn cancel,
                             void *opaque, unsigned poll_ms,
                             uint64_t *charged)
{
  return charge (b, THROTTLE_BUDGET_PARTS, need, quantum, cancel, opaque,
                 poll_ms, charged);
}

/* Without the lock unless the old word says that someone waits (or a
 * locked decision is under way, or the budget is shut down): then the
 * head is granted under the lock.
 */
static inline __attribute__ ((always_inline)) uint64_t
credit_release (struct throttle_budget *b, uint64_t units)
{
  uint64_t old;

  if (units == 0)
    return 0;                   /* nothing to grant, nor to mirror */
  old = __atomic_fetch_sub (&b->word, units, __ATOMIC_SEQ_CST);
  /* Crediting more than is held is a caller bug that would silently
   * raise the effective capacity; refuse to underflow.
   */
  if ((old & THROTTLE_BUDGET_MAX_UNITS) < units)
    abort ();
  return old & (THROTTLE_BUDGET_SLOW | THROTTLE_BUDGET_MIRRORED);
}

uint64_t
throttle_budget_credit_release (struct throttle_budget *b, uint64_t units)
{
  return credit_release (b, units);
}

void
throttle_budget_credit_grant (struct throttle_budget *b)
{
  throttle_lock (&b->lock);
  if (b->queue.head != NULL)
    throttle_wait_grant (&b->queue, acquire, b);
  settle (b);
}

bool
throttle_budget_credit (struct throttle_budget *b, uint64_t units)
{
  uint64_t old = credit_release (b, units);

  if (old & THROTTLE_BUDGET_SLOW)
    throttle_budget_credit_grant (b);
  return (old & THROTTLE_BUDGET_MIRRORED) != 0;
}

/* Why the mirror is exact: b's fast charge is closed and its lock held,
 * so from the reading of X below until the bit is set only credits
 * change b's word, and they only lower it: the mirror is charged at
 * least what b holds when the bit is set.  A credit before the bit
 * does not credit the mirror, and its units are not in what the bit's
 * fetch_or returns; every credit after it does, and every unit then in
 * b is either in that return or granted later with the bit (and charged
 * to the mirror by its holder).  What the mirror was charged beyond the
 * return is credited back at once.  The mirror's lock is taken for the
 * charge so that its locked grants never decide on a stale count.
 */
bool
throttle_budget_mirror_read (struct throttle_budget *b,
                             struct throttle_budget *mirror, uint64_t *x)
{
  throttle_lock (&b->lock);
  if (__atomic_load_n (&b->word, __ATOMIC_RELAXED) &
      THROTTLE_BUDGET_MIRRORED) {
    throttle_unlock (&b->lock);
    return false;
  }
  close_fast (b);
  b->mirror = mirror;
  *x = units_in_flight (b);
  throttle_lock (&mirror->lock);
  /* Units already at work, not a grant: only the peak sees them. */
  count_peak (mirror, __atomic_add_fetch (&mirror->word, *x,
                                          __ATOMIC_SEQ_CST)
              & THROTTLE_BUDGET_MAX_UNITS);
  throttle_unlock (&mirror->lock);
  return true;
}

uint64_t
throttle_budget_mirror_mark (struct throttle_budget *b, uint64_t x)
{
  uint64_t old;

  throttle_lock_assert_held (&b->lock);
  old = __atomic_fetch_or (&b->word, THROTTLE_BUDGET_MIRRORED,
                           __ATOMIC_SEQ_CST);
  settle (b);
  return x - (old & THROTTLE_BUDGET_MAX_UNITS);
}

void
throttle_budget_mirror (struct throttle_budget *b,
                        struct throttle_budget *mirror)
{
  uint64_t x;

  if (throttle_budget_mirror_read (b, mirror, &x))
    throttle_budget_credit (mirror, throttle_budget_mirror_mark (b, x));
}

bool
throttle_budget_mirrored (struct throttle_budget *b)
{
  return (__atomic_load_n (&b->word, __ATOMIC_RELAXED) &
          THROTTLE_BUDGET_MIRRORED) != 0;
}

int
throttle_budget_set_capacity_begin (struct throttle_budget *b,
                                    uint64_t capacity)
{
  if (capacity == 0 || capacity > THROTTLE_BUDGET_MAX_UNITS) {
    errno = EINVAL;
    return -1;
  }
  throttle_lock (&b->lock);
  /* Odd while it changes: a fast charge that read the old capacity
   * sees the count move and gives its units back.
   */
  __atomic_add_fetch (&b->cap_seq, 1, __ATOMIC_SEQ_CST);
  __atomic_store_n (&b->capacity, capacity, __ATOMIC_SEQ_CST);
  return 0;
}

void
throttle_budget_set_capacity_end (struct throttle_budget *b)
{
  throttle_lock_assert_held (&b->lock);
  __atomic_add_fetch (&b->cap_seq, 1, __ATOMIC_SEQ_CST);
  throttle_wait_grant (&b->queue, acquire, b);
  settle (b);
}

int
throttle_budget_set_capacity (struct throttle_budget *b, uint64_t capacity)
{
  if (throttle_budget_set_capacity_begin (b, capacity) == -1)
    return -1;
  throttle_budget_set_capacity_end (b);
  return 0;
}

void
throttle_budget_shutdown (struct throttle_budget *b)
{
  throttle_lock (&b->lock);
  b->shutdown = true;
  close_fast (b);
  throttle_wait_wake_all (&b->queue);
  throttle_unlock (&b->lock);
}


void
throttle_budget_get_stats (struct throttle_budget *b,
                           struct throttle_stats *stats)
{
  throttle_lock (&b->lock);
  *stats = b->stats;
  stats->capacity = b->capacity;
  stats->in_flight = units_in_flight (b);
  stats->admitted = __atomic_load_n (&b->admitted, __ATOMIC_RELAXED);
  stats->charged = __atomic_load_n (&b->charged, __ATOMIC_RELAXED);
  stats->peak = __atomic_load_n (&b->peak, __ATOMIC_RELAXED);
  stats->waiters = b->queue.nr;
  throttle_unlock (&b->lock);
}
