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

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "throttle-budget.h"
#include "throttle-clock.h"
#include "throttle-wait.h"

int
throttle_budget_init (struct throttle_budget *b, uint64_t capacity)
{
  if (capacity == 0) {
    errno = EINVAL;
    return -1;
  }
  memset (b, 0, sizeof *b);
  pthread_mutex_init (&b->lock, NULL);
  b->capacity = capacity;
  return 0;
}

void
throttle_budget_destroy (struct throttle_budget *b)
{
  pthread_mutex_destroy (&b->lock);
}

static uint64_t
clamp (const struct throttle_budget *b, uint64_t need)
{
  return need > b->capacity ? b->capacity : need;
}

static void
take (struct throttle_budget *b, uint64_t units)
{
  b->in_flight += units;
  b->stats.charged += units;
  b->stats.admitted++;
  if (b->in_flight > b->stats.peak)
    b->stats.peak = b->in_flight;
}

/* A waiter of this budget.  min == want: the whole request or nothing
 * (clamped to the capacity); min < want: a part of at least min units,
 * a multiple of quantum, will do.
 */
struct budget_wait {
  struct throttle_waiter w;
  uint64_t min, quantum;
};

/* Called with the lock held: how many of 'want' units to take now, or
 * 0 if none.  A request that takes parts gets the whole of what it
 * still needs if that is free, else as much as is free in quanta, if
 * that reaches min: the units freed bit by bit are not left idle while
 * it waits for all of them.  A request larger than the capacity can
 * only ever be granted in parts, or clamped.
 */
static uint64_t
grantable (const struct throttle_budget *b, uint64_t want, uint64_t min,
           uint64_t quantum)
{
  uint64_t free = b->in_flight < b->capacity ? b->capacity - b->in_flight : 0;
  uint64_t part;

  if (min >= want)
    return clamp (b, want) <= free ? clamp (b, want) : 0;
  if (want <= free)
    return want;
  part = free / quantum * quantum;
  return part >= min ? part : 0;
}

/* throttle_acquire_fn.  Decided at the grant, not when w queued: the
 * capacity may have changed meanwhile.
 */
static bool
acquire (void *owner, struct throttle_waiter *w)
{
  struct throttle_budget *b = owner;
  struct budget_wait *bw = (struct budget_wait *) w;
  uint64_t n = grantable (b, w->want, bw->min, bw->quantum);

  if (n == 0)
    return false;
  take (b, n);
  w->got = n;
  return true;
}

/* throttle_putback_fn: undo a grant whose wait was abandoned. */
static void
putback (void *owner, struct throttle_waiter *w)
{
  struct throttle_budget *b = owner;

  b->in_flight -= w->got;
  b->stats.charged -= w->got;
  b->stats.admitted--;
}

static void
count_clamped (struct throttle_budget *b, uint64_t need, uint64_t min)
{
  if (min >= need && need > b->capacity)
    b->stats.clamped++;
}

/* Called with the lock held.  Take units only if that overtakes no
 * waiter: an arrival that fits while others wait must queue behind
 * them, or a stream of small requests could starve a large one.
 */
static int
charge_now (struct throttle_budget *b, uint64_t need, uint64_t min,
            uint64_t quantum, uint64_t *charged)
{
  uint64_t n;

  if (b->queue.head != NULL ||
      (n = grantable (b, need, min, quantum)) == 0)
    return -1;
  count_clamped (b, need, min);
  take (b, n);
  *charged = n;
  return 0;
}

int
throttle_budget_try_charge (struct throttle_budget *b, uint64_t need,
                            uint64_t *charged)
{
  int r = -1;

  pthread_mutex_lock (&b->lock);
  if (!b->shutdown)
    r = charge_now (b, need, need, 1, charged);
  pthread_mutex_unlock (&b->lock);
  return r;
}

/* Called with the lock held: queue and wait to be granted. */
static int
charge_wait (struct throttle_budget *b, uint64_t need, uint64_t min,
             uint64_t quantum, throttle_cancel_fn cancel, void *opaque,
             unsigned poll_ms, uint64_t *charged)
{
  struct budget_wait bw = { .w.want = need, .min = min, .quantum = quantum };
  uint64_t start = throttle_now_ns (), waited;

  count_clamped (b, need, min);
  if (throttle_wait (&b->queue, &b->lock, &bw.w, &b->shutdown, cancel,
                     opaque, poll_ms, acquire, putback, b) == -1) {
    b->stats.cancelled++;
    return -1;
  }
  *charged = bw.w.got;
  waited = throttle_now_ns () - start;
  b->stats.waited++;
  b->stats.wait_ns_total += waited;
  if (waited > b->stats.wait_ns_max)
    b->stats.wait_ns_max = waited;
  return 0;
}

static int
charge (struct throttle_budget *b, uint64_t need, uint64_t min,
        uint64_t quantum, throttle_cancel_fn cancel, void *opaque,
        unsigned poll_ms, uint64_t *charged)
{
  int r;

  *charged = 0;
  if (need == 0)
    return 0;
  pthread_mutex_lock (&b->lock);
  if (b->shutdown)
    r = -1;
  else if (charge_now (b, need, min, quantum, charged) == 0)
    r = 0;
  else
    r = charge_wait (b, need, min, quantum, cancel, opaque, poll_ms, charged);
  pthread_mutex_unlock (&b->lock);
  return r;
}

int
throttle_budget_charge (struct throttle_budget *b, uint64_t need,
                        throttle_cancel_fn cancel, void *opaque,
                        unsigned poll_ms, uint64_t *charged)
{
  return charge (b, need, need, 1, cancel, opaque, poll_ms, charged);
}

int
throttle_budget_charge_part (struct throttle_budget *b, uint64_t need,
                             uint64_t min, uint64_t quantum,
                             throttle_cancel_fn cancel, void *opaque,
                             unsigned poll_ms, uint64_t *charged)
{
  if (quantum == 0 || min == 0 || min % quantum != 0) {
    errno = EINVAL;
    return -1;
  }
  return charge (b, need, min < need ? min : need, quantum, cancel, opaque,
                 poll_ms, charged);
}

void
throttle_budget_credit (struct throttle_budget *b, uint64_t units)
{
  if (units == 0)
    return;
  pthread_mutex_lock (&b->lock);
  /* Crediting more than is held is a caller bug that would silently
   * raise the effective capacity; refuse to underflow.
   */
  if (units > b->in_flight)
    abort ();
  b->in_flight -= units;
  if (b->queue.head != NULL)
    throttle_wait_grant (&b->queue, acquire, b);
  pthread_mutex_unlock (&b->lock);
}

int
throttle_budget_set_capacity (struct throttle_budget *b, uint64_t capacity)
{
  if (capacity == 0) {
    errno = EINVAL;
    return -1;
  }
  pthread_mutex_lock (&b->lock);
  __atomic_store_n (&b->capacity, capacity, __ATOMIC_RELAXED);
  throttle_wait_grant (&b->queue, acquire, b);
  pthread_mutex_unlock (&b->lock);
  return 0;
}

void
throttle_budget_shutdown (struct throttle_budget *b)
{
  pthread_mutex_lock (&b->lock);
  b->shutdown = true;
  throttle_wait_wake_all (&b->queue);
  pthread_mutex_unlock (&b->lock);
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
  pthread_mutex_lock (&b->lock);
  *stats = b->stats;
  stats->capacity = b->capacity;
  stats->in_flight = b->in_flight;
  stats->waiters = b->queue.nr;
  pthread_mutex_unlock (&b->lock);
}
