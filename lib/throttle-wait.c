/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the one way a thread waits for a resource.
 * See throttle-wait.h.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>

#include "throttle-clock.h"
#include "throttle-lock.h"
#include "throttle-wait.h"

void
throttle_wait_queue_init (struct throttle_wait_queue *q, pthread_mutex_t *lock)
{
  q->lock = lock;
  q->head = q->tail = NULL;
  q->nr = 0;
}

static void
unlink_waiter (struct throttle_wait_queue *q, struct throttle_waiter *w)
{
  if (w->prev) w->prev->next = w->next; else q->head = w->next;
  if (w->next) w->next->prev = w->prev; else q->tail = w->prev;
  w->prev = w->next = NULL;
  q->nr--;
}

void
throttle_wait_grant (struct throttle_wait_queue *q,
                     throttle_acquire_fn acquire, void *owner)
{
  struct throttle_waiter *w;

  throttle_lock_assert_held (q->lock);
  while ((w = q->head) != NULL && acquire (owner, w)) {
    unlink_waiter (q, w);
    w->granted = true;
    /* Signal under the lock: the condvar is on the waiter's stack and
     * may be gone as soon as the waiter can see 'granted'.
     */
    pthread_cond_signal (&w->cond);
  }
}

void
throttle_wait_wake_all (struct throttle_wait_queue *q)
{
  struct throttle_waiter *w;

  throttle_lock_assert_held (q->lock);
  for (w = q->head; w != NULL; w = w->next)
    pthread_cond_signal (&w->cond);
}

/* Ask 'cancel' without the owner's lock: the callback may block or look
 * at the owner.  The waiter stays queued meanwhile, so it may be
 * granted while the callback runs; the caller looks at w->granted
 * afterwards.
 */
static bool
ask (pthread_mutex_t *lock, throttle_cancel_fn cancel, void *opaque)
{
  bool r;

  throttle_unlock (lock);
  r = cancel (opaque);
  throttle_lock (lock);
  return r;
}

void
throttle_wait_enqueue (struct throttle_wait_queue *q, struct throttle_waiter *w)
{
  throttle_lock_assert_held (q->lock);
  throttle_cond_init_monotonic (&w->cond);
  w->granted = false;
  w->next = NULL;
  w->prev = q->tail;
  if (q->tail) q->tail->next = w; else q->head = w;
  q->tail = w;
  q->nr++;
}

void
throttle_wait_release (struct throttle_wait_queue *q,
                       struct throttle_waiter *w)
{
  throttle_lock_assert_held (q->lock);
  pthread_cond_destroy (&w->cond);
}

void
throttle_wait_abandon (struct throttle_wait_queue *q,
                       struct throttle_waiter *w,
                       throttle_acquire_fn acquire,
                       throttle_putback_fn putback, void *owner)
{
  throttle_lock_assert_held (q->lock);
  /* A grant that raced with the abandonment is put back rather than
   * handed to a caller that will not use it; either way our place is
   * free and the next waiter may now fit.
   */
  if (w->granted)
    putback (owner, w);
  else
    unlink_waiter (q, w);
  pthread_cond_destroy (&w->cond);
  throttle_wait_grant (q, acquire, owner);
}

int
throttle_wait_sleep (struct throttle_wait_queue *q, struct throttle_waiter *w,
                     const bool *shutdown, throttle_cancel_fn cancel,
                     void *opaque, unsigned poll_ms,
                     throttle_acquire_fn acquire, throttle_putback_fn putback,
                     void *owner)
{
  pthread_mutex_t *lock = q->lock;
  bool cancelled = false;

  throttle_lock_assert_held (lock);
  /* Whoever releases grants, so a wake-up without a grant only means
   * "look at shutdown" or a poll: there is nothing to re-check.
   */
  while (!w->granted && !*shutdown && !cancelled) {
    if (cancel == NULL)
      pthread_cond_wait (&w->cond, lock);
    else {
      struct timespec deadline =
        throttle_deadline_ms (poll_ms ? poll_ms : THROTTLE_WAIT_POLL_MS);

      if (pthread_cond_timedwait (&w->cond, lock, &deadline) == ETIMEDOUT &&
          !w->granted && !*shutdown)
        cancelled = ask (lock, cancel, opaque);
    }
  }

  /* Ask once more after a grant: at shutdown the request ahead fails
   * fast and releases what it held, which would otherwise pass
   * straight to this waiter and run a request the shutdown should
   * have ended.
   */
  if (w->granted && cancel && !cancelled && !*shutdown)
    cancelled = ask (lock, cancel, opaque);

  if (w->granted && !cancelled && !*shutdown) {
    throttle_wait_release (q, w);
    return 0;
  }
  throttle_wait_abandon (q, w, acquire, putback, owner);
  return -1;
}

int
throttle_wait (struct throttle_wait_queue *q, struct throttle_waiter *w,
               const bool *shutdown, throttle_cancel_fn cancel, void *opaque,
               unsigned poll_ms, throttle_acquire_fn acquire,
               throttle_putback_fn putback, void *owner)
{
  throttle_wait_enqueue (q, w);
  return throttle_wait_sleep (q, w, shutdown, cancel, opaque, poll_ms,
                              acquire, putback, owner);
}
