/* nbdkit-throttle: a budget of units in flight with FIFO admission.
 *
 * Modelled on the kernel's rq_qos_wait (block/blk-rq-qos.c): a request
 * that cannot be admitted at once joins the tail of a queue and is
 * *granted* its units by whoever frees them, so a waiter never has to
 * re-check and re-take (no check-then-subtract race, no lost wake-up),
 * and no later arrival can slip in ahead of it (no barging, no
 * starvation of large requests by a stream of small ones).
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
  uint64_t clamped;           /* requests larger than the capacity */
  uint64_t wait_ns_total;
  uint64_t wait_ns_max;
  uint64_t waiters;           /* waiting now */
};

struct throttle_budget {
  pthread_mutex_t lock;         /* everything below, and the waiters */
  uint64_t capacity;            /* written under lock with an atomic store:
                                   get_capacity reads it without the lock */
  uint64_t in_flight;
  struct throttle_wait_queue queue;
  bool shutdown;
  struct throttle_stats stats;
};

extern int throttle_budget_init (struct throttle_budget *b, uint64_t capacity);
extern void throttle_budget_destroy (struct throttle_budget *b);

/* Block until 'need' units are free, then take them.  A 'need' above
 * the capacity is clamped to the capacity: such a request runs alone.
 * On success returns 0 and stores in *charged the units taken, which
 * the caller must give back with exactly one throttle_budget_credit.
 * Returns -1 (holding nothing) if the wait was cancelled by 'cancel'
 * or by throttle_budget_shutdown.  'poll_ms' is how often 'cancel' is
 * asked (ignored if cancel is NULL).
 */
extern int throttle_budget_charge (struct throttle_budget *b, uint64_t need,
                                   throttle_cancel_fn cancel, void *opaque,
                                   unsigned poll_ms, uint64_t *charged);

/* The same, for a request that can be served in parts (a read or write
 * split into pieces): when the whole of 'need' is not free, at least
 * 'min' units (a multiple of 'quantum') may be granted, as many as are
 * free in quanta.  On success *charged holds the units taken, between
 * min and need (or exactly need), to be credited once as above; the
 * caller serves the part they pay for and charges again for the rest.
 * 'need' may exceed the capacity: it is then always granted in parts.
 * min == need behaves as throttle_budget_charge.  Returns -1 with errno
 * EINVAL if quantum or min is 0 or min is not a multiple of quantum.
 */
extern int throttle_budget_charge_part (struct throttle_budget *b,
                                        uint64_t need, uint64_t min,
                                        uint64_t quantum,
                                        throttle_cancel_fn cancel,
                                        void *opaque, unsigned poll_ms,
                                        uint64_t *charged);

/* Take 'need' units only if that is possible at once without
 * overtaking a waiter.  Returns 0 and sets *charged, or -1.
 */
extern int throttle_budget_try_charge (struct throttle_budget *b, uint64_t need,
                                       uint64_t *charged);

extern void throttle_budget_credit (struct throttle_budget *b, uint64_t units);

/* Change the capacity.  Lowering it never revokes units already held;
 * raising it admits waiters at once.  Returns -1 if capacity is 0.
 */
extern int throttle_budget_set_capacity (struct throttle_budget *b,
                                         uint64_t capacity);

/* Fail every current and future wait (server unload). */
extern void throttle_budget_shutdown (struct throttle_budget *b);

extern uint64_t throttle_budget_get_capacity (struct throttle_budget *b);
extern void throttle_budget_get_stats (struct throttle_budget *b,
                                       struct throttle_stats *stats);

#endif /* THROTTLE_BUDGET_H */
