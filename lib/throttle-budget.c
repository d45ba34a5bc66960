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

  if (capacity == 0) {
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
  uint64_t min = capacity / 8 / quantum * quantum;

  return min > quantum ? min : quantum;
}

/* Called with the lock held. */
static void
take (struct throttle_budget *b, uint64_t units, bool clamped)
{
  throttle_lock_assert_held (&b->lock);
  b->in_flight += units;
  b->stats.charged += units;
  b->stats.admitted++;
  if (clamped)
    b->stats.clamped++;
  if (b->in_flight > b->stats.peak)
    b->stats.peak = b->in_flight;
}

/* Called with the lock held (by acquire and charge_now, which check
 * it): how many of 'want' units a request of 'kind' may take now, or 0
 * if none; *clamped if it runs alone above the capacity.  Decided now,
 * not when the request queued: the capacity may have changed
 * meanwhile.  With nothing in flight every request gets something (the
 * liveness invariant): a whole request at most the capacity, a part at
 * least one quantum.
 */
static uint64_t
grantable (const struct throttle_budget *b, enum throttle_budget_kind kind,
           uint64_t want, uint64_t quantum, bool *clamped)
{
  uint64_t cap = b->capacity;
  uint64_t free = b->in_flight < cap ? cap - b->in_flight : 0;
  uint64_t part;

  *clamped = false;
  switch (kind) {
  case THROTTLE_BUDGET_WHOLE:
    if (want > cap) {
      want = cap;
      *clamped = true;
    }
    return want <= free ? want : 0;
  case THROTTLE_BUDGET_EXACT:
    if (want <= free)
      return want;
    break;
  case THROTTLE_BUDGET_PARTS:
    if (want <= free)
      return want;
    /* What is freed bit by bit is not left idle while the request
     * waits for all of it, once it makes a part worth a call.
     */
    part = free / quantum * quantum;
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
  if (b->in_flight > 0)
    return 0;
  *clamped = want > cap;
  return want;
}

/* The liveness invariant (throttle-budget.h), after every change made
 * under the lock.
 */
static void
check_live (const struct throttle_budget *b)
{
  assert (b->shutdown || b->queue.head == NULL || b->in_flight > 0);
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
  take (b, n, clamped);
  w->got = n;
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

  throttle_lock_assert_held (&b->lock);
  b->in_flight -= w->got;
  b->stats.charged -= w->got;
  b->stats.admitted--;
  if (bw->clamped)
    b->stats.clamped--;
}

/* Called with the lock held.  Take units only if that overtakes no
 * waiter: an arrival that fits while others wait must queue behind
 * them, or a stream of small requests could starve a large one.
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
  take (b, n, clamped);
  *charged = n;
  return 0;
}

int
throttle_budget_enqueue (struct throttle_budget *b,
                         struct throttle_budget_waiter *bw,
                         enum throttle_budget_kind kind, uint64_t need,
                         uint64_t quantum, uint64_t *charged)
{
  int r;

  *charged = 0;
  if (kind == THROTTLE_BUDGET_PARTS && quantum == 0) {
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
  else if (charge_now (b, kind, need, quantum, charged) == 0)
    r = 0;
  else {
    memset (bw, 0, sizeof *bw);
    bw->w.want = need;
    bw->kind = kind;
    bw->quantum = quantum;
    bw->start_ns = throttle_now_ns ();
    throttle_wait_enqueue (&b->queue, &bw->w);
    r = 1;
  }
  check_live (b);
  throttle_unlock (&b->lock);
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
  check_live (b);
  throttle_unlock (&b->lock);
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
  check_live (b);
  throttle_unlock (&b->lock);
  return r;
}

void
throttle_budget_abandon (struct throttle_budget *b,
                         struct throttle_budget_waiter *bw)
{
  throttle_lock (&b->lock);
  throttle_wait_abandon (&b->queue, &bw->w, acquire, putback, b);
  b->stats.cancelled++;
  check_live (b);
  throttle_unlock (&b->lock);
}

static int
charge (struct throttle_budget *b, enum throttle_budget_kind kind,
        uint64_t need, uint64_t quantum, throttle_cancel_fn cancel,
        void *opaque, unsigned poll_ms, uint64_t *charged)
{
  struct throttle_budget_waiter bw;
  int r;

  *charged = 0;
  if (need == 0)
    return 0;
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

void
throttle_budget_credit (struct throttle_budget *b, uint64_t units)
{
  if (units == 0)
    return;
  throttle_lock (&b->lock);
  /* Crediting more than is held is a caller bug that would silently
   * raise the effective capacity; refuse to underflow.
   */
  if (units > b->in_flight)
    abort ();
  b->in_flight -= units;
  if (b->queue.head != NULL)
    throttle_wait_grant (&b->queue, acquire, b);
  check_live (b);
  throttle_unlock (&b->lock);
}

int
throttle_budget_set_capacity (struct throttle_budget *b, uint64_t capacity)
{
  if (capacity == 0) {
    errno = EINVAL;
    return -1;
  }
  throttle_lock (&b->lock);
  __atomic_store_n (&b->capacity, capacity, __ATOMIC_RELAXED);
  throttle_wait_grant (&b->queue, acquire, b);
  check_live (b);
  throttle_unlock (&b->lock);
  return 0;
}

void
throttle_budget_shutdown (struct throttle_budget *b)
{
  throttle_lock (&b->lock);
  b->shutdown = true;
  throttle_wait_wake_all (&b->queue);
  throttle_unlock (&b->lock);
}

/* Without the lock: the filter asks on every request, and a value
 * that a concurrent set_capacity replaces a moment later is as good
 * as one read just before it.
 */
uint64_t
throttle_budget_get_capacity (struct throttle_budget *b)
{
  return __atomic_load_n (&b->capacity, __ATOMIC_RELAXED);
}

void
throttle_budget_get_stats (struct throttle_budget *b,
                           struct throttle_stats *stats)
{
  throttle_lock (&b->lock);
  *stats = b->stats;
  stats->capacity = b->capacity;
  stats->in_flight = b->in_flight;
  stats->waiters = b->queue.nr;
  throttle_unlock (&b->lock);
}
