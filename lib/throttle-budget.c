/* nbdkit-throttle: a budget of units in flight with FIFO admission.
 *
 * The three flaws of the 2007 writeout-throttling patch, and why this
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

struct throttle_waiter {
  struct throttle_waiter *next;
  pthread_cond_t cond;
  uint64_t want;              /* as asked */
  uint64_t need;              /* clamped to the capacity when granted */
  bool granted;
  bool cancelled;
};

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

/* Grant units to waiters at the head of the queue, in order, for as
 * long as the head fits.  Stops at the first waiter that does not fit
 * even if a later one would: that is what keeps admission FIFO.
 * Called with the lock held after anything that frees units.
 */
static void
grant_waiters (struct throttle_budget *b)
{
  struct throttle_waiter *w;

  while ((w = b->head) != NULL) {
    /* The capacity may have changed since w queued. */
    w->need = clamp (b, w->want);
    if (b->in_flight + w->need > b->capacity)
      break;
    take (b, w->need);
    w->granted = true;
    b->head = w->next;
    if (b->head == NULL)
      b->tail = NULL;
    b->stats.waiters--;
    pthread_cond_signal (&w->cond);
  }
}

static void
unlink_waiter (struct throttle_budget *b, struct throttle_waiter *w)
{
  struct throttle_waiter **p, *prev = NULL;

  for (p = &b->head; *p; prev = *p, p = &(*p)->next) {
    if (*p == w) {
      *p = w->next;
      if (b->tail == w)
        b->tail = prev;
      b->stats.waiters--;
      return;
    }
  }
}

int
throttle_budget_try_charge (struct throttle_budget *b, uint64_t need,
                            uint64_t *charged)
{
  int r = -1;

  pthread_mutex_lock (&b->lock);
  if (!b->shutdown && b->head == NULL &&
      b->in_flight + clamp (b, need) <= b->capacity) {
    /* Counted here only on success: a caller that then waits with
     * throttle_budget_charge is counted there.
     */
    if (need > b->capacity)
      b->stats.clamped++;
    need = clamp (b, need);
    take (b, need);
    *charged = need;
    r = 0;
  }
  pthread_mutex_unlock (&b->lock);
  return r;
}

int
throttle_budget_charge (struct throttle_budget *b, uint64_t need,
                        throttle_cancel_fn cancel, void *opaque,
                        unsigned poll_ms, uint64_t *charged)
{
  struct throttle_waiter w = { .want = need };
  pthread_condattr_t attr;
  uint64_t start, waited;
  int r;

  *charged = 0;
  if (need == 0)
    return 0;

  pthread_mutex_lock (&b->lock);
  if (b->shutdown) {
    pthread_mutex_unlock (&b->lock);
    return -1;
  }
  if (need > b->capacity)
    b->stats.clamped++;
  w.need = clamp (b, need);

  /* Fast path: nobody is queued and it fits. */
  if (b->head == NULL && b->in_flight + w.need <= b->capacity) {
    take (b, w.need);
    *charged = w.need;
    pthread_mutex_unlock (&b->lock);
    return 0;
  }

  /* Queue at the tail and wait to be granted. */
  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (&w.cond, &attr);
  pthread_condattr_destroy (&attr);
  if (b->tail)
    b->tail->next = &w;
  else
    b->head = &w;
  b->tail = &w;
  b->stats.waiters++;
  start = throttle_now_ns ();

  while (!w.granted && !b->shutdown) {
    if (cancel == NULL)
      pthread_cond_wait (&w.cond, &b->lock);
    else {
      struct timespec deadline = throttle_deadline_ms (poll_ms ? poll_ms : 100);

      if (pthread_cond_timedwait (&w.cond, &b->lock, &deadline) == ETIMEDOUT &&
          !w.granted) {
        /* Ask without holding the lock: the callback may poll. */
        pthread_mutex_unlock (&b->lock);
        w.cancelled = cancel (opaque);
        pthread_mutex_lock (&b->lock);
        if (w.cancelled)
          break;
      }
    }
  }

  /* Ask once more after a grant.  At shutdown the request ahead fails
   * fast and credits its units, and without this check they would pass
   * straight to the next waiter, which would run a request that the
   * shutdown should have ended.
   */
  if (w.granted && cancel && !w.cancelled) {
    pthread_mutex_unlock (&b->lock);
    w.cancelled = cancel (opaque);
    pthread_mutex_lock (&b->lock);
  }

  if (w.granted && !w.cancelled && !b->shutdown) {
    *charged = w.need;
    r = 0;
  }
  else {
    /* Cancelled, possibly after a grant that raced with it: a
     * cancelled wait must leave holding nothing, so give a raced
     * grant back rather than hand the caller units it will not use.
     */
    if (w.granted) {
      b->in_flight -= w.need;
      b->stats.charged -= w.need;
      b->stats.admitted--;
    }
    else
      unlink_waiter (b, &w);
    b->stats.cancelled++;
    /* Our departure may let the next waiter in. */
    grant_waiters (b);
    r = -1;
  }
  waited = throttle_now_ns () - start;
  if (r == 0) {
    b->stats.waited++;
    b->stats.wait_ns_total += waited;
    if (waited > b->stats.wait_ns_max)
      b->stats.wait_ns_max = waited;
  }
  pthread_mutex_unlock (&b->lock);
  pthread_cond_destroy (&w.cond);
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
  grant_waiters (b);
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
  grant_waiters (b);
  pthread_mutex_unlock (&b->lock);
  return 0;
}

void
throttle_budget_shutdown (struct throttle_budget *b)
{
  struct throttle_waiter *w;

  pthread_mutex_lock (&b->lock);
  b->shutdown = true;
  for (w = b->head; w; w = w->next)
    pthread_cond_signal (&w->cond);
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
  pthread_mutex_unlock (&b->lock);
}
