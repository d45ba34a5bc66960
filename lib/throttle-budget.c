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

/* throttle_acquire_fn.  The clamp is taken at the grant, not when w
 * queued: the capacity may have changed meanwhile.
 */
static bool
acquire (void *owner, struct throttle_waiter *w)
{
  struct throttle_budget *b = owner;
  uint64_t need = clamp (b, w->want);

  if (b->in_flight + need > b->capacity)
    return false;
  take (b, need);
  w->got = need;
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

/* Called with the lock held.  Take 'need' only if that overtakes no
 * waiter: an arrival that fits while others wait must queue behind
 * them, or a stream of small requests could starve a large one.
 */
static int
charge_now (struct throttle_budget *b, uint64_t need, uint64_t *charged)
{
  if (b->queue.head != NULL || b->in_flight + clamp (b, need) > b->capacity)
    return -1;
  if (need > b->capacity)
    b->stats.clamped++;
  *charged = clamp (b, need);
  take (b, *charged);
  return 0;
}

int
throttle_budget_try_charge (struct throttle_budget *b, uint64_t need,
                            uint64_t *charged)
{
  int r = -1;

  pthread_mutex_lock (&b->lock);
  if (!b->shutdown)
    r = charge_now (b, need, charged);
  pthread_mutex_unlock (&b->lock);
  return r;
}

/* Called with the lock held: queue and wait to be granted. */
static int
charge_wait (struct throttle_budget *b, uint64_t need,
             throttle_cancel_fn cancel, void *opaque, unsigned poll_ms,
             uint64_t *charged)
{
  struct throttle_waiter w = { .want = need };
  uint64_t start = throttle_now_ns (), waited;

  if (need > b->capacity)
    b->stats.clamped++;
  if (throttle_wait (&b->queue, &b->lock, &w, &b->shutdown, cancel, opaque,
                     poll_ms, acquire, putback, b) == -1) {
    b->stats.cancelled++;
    return -1;
  }
  *charged = w.got;
  waited = throttle_now_ns () - start;
  b->stats.waited++;
  b->stats.wait_ns_total += waited;
  if (waited > b->stats.wait_ns_max)
    b->stats.wait_ns_max = waited;
  return 0;
}

int
throttle_budget_charge (struct throttle_budget *b, uint64_t need,
                        throttle_cancel_fn cancel, void *opaque,
                        unsigned poll_ms, uint64_t *charged)
{
  int r;

  *charged = 0;
  if (need == 0)
    return 0;
  pthread_mutex_lock (&b->lock);
  if (b->shutdown)
    r = -1;
  else if (charge_now (b, need, charged) == 0)
    r = 0;
  else
    r = charge_wait (b, need, cancel, opaque, poll_ms, charged);
  pthread_mutex_unlock (&b->lock);
  return r;
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
  b->capacity = capacity;
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
