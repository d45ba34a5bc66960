/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: admission of one request, whole or in parts, to its
 * export's budget and to the server's.
 *
 * A request is charged to its export's budget first and then, for
 * exactly the units the export granted, to the server's budget (if
 * there is one and the export is bound by it), always in that order:
 * nobody ever holds server units while waiting for an export's, so the
 * two queues cannot wait on each other.  Its units are credited back
 * to both.  The server's budget bounds what is in flight in the whole
 * process, whatever names the clients asked for; an export's bounds
 * that export.
 *
 * An export is bound by the server only from throttle_admit_bind on:
 * while a server has a single export whose capacity is within its
 * own, the server's bound cannot bind, and charging it would only cost
 * (two atomic operations a request).  throttle_admit_bind charges the
 * server what the export has in flight then (throttle_budget_mirror),
 * so that the bound holds from that instant; the caller binds every
 * export before a second one admits anything.
 *
 * Liveness of the pair (see throttle-budget.h for one budget): while
 * requests wait and nothing is in flight at a budget, its head is
 * granted.  An export's head is granted when the export has nothing in
 * flight; a request holding export units and waiting at the server is
 * either granted there or behind requests holding server units, which
 * complete.  The server is charged every unit the export granted
 * (a whole request above a capacity is charged in full at both, see
 * throttle-budget.h), so that its units are the export's; the caller
 * keeps every export's capacity at most the server's, so that a
 * request above the server's capacity only happens while a capacity
 * is being changed.
 *
 * Pure: no nbdkit, no clock of its own.  Used by the filter
 * (plugin/throttle/core/throttle-serve.c), by the simulation test
 * (tests/test-sim.c), which steps it with throttle_admit_poll instead
 * of sleeping in throttle_admit_wait, and by tests/test-admit.c.
 */

#ifndef THROTTLE_ADMIT_H
#define THROTTLE_ADMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "nbdkit-throttle-metric.h"
#include "throttle-budget.h"
#include "throttle-wait.h"

/* How requests are served in parts; fixed after the configuration. */
struct throttle_admit_policy {
  /* The metric's units per page-aligned THROTTLE_PAGE_SIZE bytes of a
   * read or write (struct throttle_metric's page_units); 0 if the
   * metric is not proportional to the length: never in parts.
   */
  uint64_t page_units;
  bool split;                   /* throttle-split */
  /* The largest request that may be split (what the layers below
   * accept whole: a part must be a request they take); UINT32_MAX for
   * any.
   */
  uint32_t split_max;
};

enum throttle_admit_stage {
  THROTTLE_ADMIT_EXPORT,        /* waiting at the export's budget */
  THROTTLE_ADMIT_SERVER,        /* holds export units, waiting at the server's */
  THROTTLE_ADMIT_GRANTED,       /* holds 'charged' at both */
  THROTTLE_ADMIT_DONE,          /* abandoned or failed: holds nothing */
};

/* One admission.  The caller owns it (on its stack while it waits);
 * every field is written by the functions below, and only 'charged',
 * 'len', 'waited' and 'stage' are the caller's to read.
 */
struct throttle_admit {
  /* Once granted: the units charged to the export (and as many to the
   * server), to give back with exactly one throttle_admit_credit; and
   * the bytes they pay for, from the request's offset: all of count,
   * or a page-aligned first part that the caller serves before
   * admitting the rest as a new request.
   */
  uint64_t charged;
  uint32_t len;
  bool waited;                  /* it had to queue somewhere */
  bool mirrored;                /* the export was bound when it granted */
  enum throttle_admit_stage stage;

  /* Private. */
  struct throttle_budget *exp, *server;
  const struct throttle_admit_policy *policy;
  uint64_t need;
  uint32_t count;
  bool parts;
  struct throttle_budget_waiter bw;
};

/* Whether a request of 'need' units is served in parts under an
 * export capacity of 'capacity': a read or write, page-aligned, of at
 * most p->split_max bytes, under a metric proportional to its length,
 * and larger than a quarter of the capacity.  A request that is not is
 * charged whole (above the capacity, in full: it then runs alone).
 * Decided when the request arrives: a request decided whole stays
 * whole if the capacity falls below it while it waits, and runs alone.
 */
extern bool throttle_admit_in_parts (const struct throttle_admit_policy *p,
                                     uint64_t capacity, enum throttle_op op,
                                     uint32_t count, uint64_t offset,
                                     uint64_t need);

/* Whether the rest of a request served in parts (what its parts so far
 * left; the caller's duty: one that throttle_admit_in_parts accepted,
 * page-aligned still) of 'need' units goes on in parts: while it is
 * larger than twice the part minimum (throttle_budget_part_min).  So a
 * rest is not charged whole, waiting at the head for all of it to be
 * free, once it is below a quarter of the capacity.
 */
extern bool throttle_admit_rest_in_parts (const struct throttle_admit_policy *p,
                                          uint64_t capacity, uint64_t need);

/* The policy's split_max for layers below whose block size constraints
 * are 'minimum' and 'maximum' (0 and 0: none): UINT32_MAX without
 * constraints, 0 (nothing split) if their minimum is above a page,
 * since a part's boundaries are only page-aligned, else their maximum,
 * since every part must be a request they take.
 */
extern uint32_t throttle_admit_split_max (uint32_t minimum, uint32_t maximum);

/* The bytes that 'units' granted to a request of 'count' bytes charged
 * 'need' units pay for: all of count if it is not served in parts
 * ('parts' as throttle_admit_in_parts decided) or units cover need,
 * else the whole pages they pay for (a part granted by the budget is
 * at least one page's units, throttle-budget.h).
 */
extern uint32_t throttle_admit_part_len (const struct throttle_admit_policy *p,
                                         bool parts, uint32_t count,
                                         uint64_t need, uint64_t units);

/* Start admitting a request of 'count' bytes at 'offset' charged
 * 'need' units (from the metric; need > 0) to export budget 'exp' and
 * server budget 'server' (NULL: no server-wide budget): a request as
 * the client sent it, or with 'rest' what a request's parts so far
 * left (throttle_admit_rest_in_parts).  'p' must outlive the
 * admission.
 *
 * Returns 0: granted at once (a->stage THROTTLE_ADMIT_GRANTED);
 * 1: queued, then the caller must end the admission with exactly one
 * of throttle_admit_wait, throttle_admit_poll until it returns 0 or
 * -1, or throttle_admit_abandon; -1: a budget is shut down (holds
 * nothing).
 */
extern int throttle_admit_start (struct throttle_admit *a,
                                 const struct throttle_admit_policy *p,
                                 struct throttle_budget *exp,
                                 struct throttle_budget *server,
                                 enum throttle_op op, uint32_t count,
                                 uint64_t offset, uint64_t need, bool rest);

/* Block until a queued admission is granted (0) or until 'cancel'
 * (asked every poll_ms, see throttle_wait) or a budget's shutdown ends
 * it (-1, holding nothing).
 */
extern int throttle_admit_wait (struct throttle_admit *a,
                                throttle_cancel_fn cancel, void *opaque,
                                unsigned poll_ms);

/* Never blocks: move a queued admission on if it has been granted
 * where it waits.  Returns 0 once granted at both budgets, 1 while
 * still queued, -1 if a budget was shut down (holding nothing).
 */
extern int throttle_admit_poll (struct throttle_admit *a);

/* Give up a queued admission, wherever it is, even one granted but not
 * yet polled: afterwards it holds nothing, and those behind it in
 * either queue may be granted.  Not for a granted admission, whose
 * units go back with throttle_admit_credit.
 */
extern void throttle_admit_abandon (struct throttle_admit *a);

/* Give back 'units' charged by one granted admission to export budget
 * 'exp' and, if exp is bound by it now, to server budget 'server'
 * (NULL if it had none).  May be called from any thread, e.g. by the
 * write-behind writer.
 */
extern void throttle_admit_credit (struct throttle_budget *exp,
                                   struct throttle_budget *server,
                                   uint64_t units);

/* Bind export budget 'exp' by server budget 'server' from now on (see
 * the head of this file); binding it again does nothing.  Takes exp's
 * lock, then server's.
 */
extern void throttle_admit_bind (struct throttle_budget *exp,
                                  struct throttle_budget *server);

#endif /* THROTTLE_ADMIT_H */
