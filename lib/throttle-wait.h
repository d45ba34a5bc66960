/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the one way a thread waits for a resource.
 *
 * Modelled on the kernel's rq_qos_wait (block/blk-rq-qos.c), which
 * serves every I/O policy through an acquire callback: a thread that
 * cannot take what it needs at once joins the tail of a FIFO queue and
 * is *granted* it by whoever releases enough, so a waiter never has to
 * re-check and re-take (no check-then-take race, no lost wake-up) and
 * no later arrival slips in ahead of it.  The budget (units in flight),
 * the write-behind queue and the disk plugin's mempool (buffers) are
 * its users.
 *
 * The owner of a queue keeps its resource and the queue under one
 * mutex of its own, made by throttle_lock_init and given to
 * throttle_wait_queue_init; every other function here is called with
 * that mutex held, which checking builds check (throttle-lock.h), and
 * throttle_wait_sleep drops it only while it sleeps and while it asks
 * 'cancel'.  The lock order: HACKING.md, "Locks".
 */

#ifndef THROTTLE_WAIT_H
#define THROTTLE_WAIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

/* How often a waiter asks its cancel callback when the caller gives 0. */
#define THROTTLE_WAIT_POLL_MS 100

/* Called periodically by a waiter, outside the owner's lock.  Return
 * true to abandon the wait (e.g. the server is shutting down).
 */
typedef bool (*throttle_cancel_fn) (void *opaque);

/* Lives on the waiting thread's stack while it is queued. */
struct throttle_waiter {
  struct throttle_waiter *prev, *next;
  pthread_cond_t cond;
  uint64_t want;                /* what the owner's acquire looks at */
  uint64_t got;                 /* what it granted: units ... */
  void *item;                   /* ... or an item */
  bool granted;
};

struct throttle_wait_queue {
  pthread_mutex_t *lock;        /* the owner's: held around every call */
  struct throttle_waiter *head, *tail;
  size_t nr;
};

/* An empty queue whose owner keeps it under 'lock'. */
extern void throttle_wait_queue_init (struct throttle_wait_queue *q,
                                      pthread_mutex_t *lock);

/* Called with the owner's lock held: take what w wants from the
 * owner's resource, recording it in w->got or w->item, and return
 * true; or return false (taking nothing) if it is not there yet.
 */
typedef bool (*throttle_acquire_fn) (void *owner, struct throttle_waiter *w);
/* Called with the owner's lock held: put back what a waiter was
 * granted but will not use (its wait was abandoned after the grant).
 */
typedef void (*throttle_putback_fn) (void *owner, struct throttle_waiter *w);

/* Grant waiters from the head, in order, for as long as acquire
 * succeeds; stops at the first that it refuses, which keeps admission
 * FIFO.  The releasing side calls it after it released anything.
 */
extern void throttle_wait_grant (struct throttle_wait_queue *q,
                                 throttle_acquire_fn acquire, void *owner);

/* The steps of a wait, for an owner that must not block (a caller
 * stepping the queue from one thread, as the simulation test does);
 * throttle_wait composes them.  Each is called with the owner's lock
 * held.
 *
 * throttle_wait_enqueue: queue w at the tail (w->want set by the
 * caller).  It then must end with exactly one of throttle_wait_sleep,
 * throttle_wait_abandon, or (once w->granted) throttle_wait_release.
 */
extern void throttle_wait_enqueue (struct throttle_wait_queue *q,
                                   struct throttle_waiter *w);

/* Sleep until queued w is granted (returns 0; what it got is in w), or
 * until *shutdown is true or 'cancel' says so (returns -1 holding
 * nothing: a grant that raced with the cancellation is put back and
 * passed on).  'cancel' may be NULL (then only shutdown, with a
 * throttle_wait_wake_all, ends the wait); it is asked every poll_ms
 * (0: THROTTLE_WAIT_POLL_MS), and once more after a grant, so that a
 * waiter granted units freed by a request that failed at shutdown does
 * not run.  Returns with the owner's lock held and w done.  The one
 * place where a thread sleeps for a resource.
 */
extern int throttle_wait_sleep (struct throttle_wait_queue *q,
                                struct throttle_waiter *w,
                                const bool *shutdown,
                                throttle_cancel_fn cancel, void *opaque,
                                unsigned poll_ms, throttle_acquire_fn acquire,
                                throttle_putback_fn putback, void *owner);

/* Give up queued w, granted or not: off the queue, or what it was
 * granted put back; then grant whoever now fits.  w is done.
 */
extern void throttle_wait_abandon (struct throttle_wait_queue *q,
                                   struct throttle_waiter *w,
                                   throttle_acquire_fn acquire,
                                   throttle_putback_fn putback, void *owner);

/* w was granted and its owner has taken what it got: w is done. */
extern void throttle_wait_release (struct throttle_wait_queue *q,
                                   struct throttle_waiter *w);

/* Enqueue and sleep: see throttle_wait_enqueue, throttle_wait_sleep. */
extern int throttle_wait (struct throttle_wait_queue *q,
                          struct throttle_waiter *w, const bool *shutdown,
                          throttle_cancel_fn cancel, void *opaque,
                          unsigned poll_ms, throttle_acquire_fn acquire,
                          throttle_putback_fn putback, void *owner);

/* Wake every waiter to look at *shutdown again. */
extern void throttle_wait_wake_all (struct throttle_wait_queue *q);

#endif /* THROTTLE_WAIT_H */
