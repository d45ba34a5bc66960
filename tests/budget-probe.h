/* SPDX-License-Identifier: BSD-3-Clause */
/* What the budget's unit tests (test-budget.c, test-budget-threads.c)
 * share: a look at the counters, and a charge that never blocks, so a
 * test can assert what the budget would do right now without a thread
 * of its own to wait in.
 */

#ifndef THROTTLE_BUDGET_PROBE_H
#define THROTTLE_BUDGET_PROBE_H

#include <stdint.h>

#include "throttle-budget.h"

/* A snapshot of b's counters, by value, so that a test can assert on
 * one field inline.  Each call takes b's lock: fields read from two
 * calls may come from different instants while other threads run.
 */
struct throttle_stats probe_stats (struct throttle_budget *b);

/* Take 'need' units of b (THROTTLE_BUDGET_WHOLE: above the capacity,
 * clamped) only if that is possible at once, the stepped charge given
 * up if it would wait.  Returns 0 with the units taken in *charged,
 * which the caller must give back with exactly one
 * throttle_budget_credit; or -1 holding nothing, if it would wait or
 * after a shutdown.  A try given up is abandoned from the queue, so it
 * counts in the stats as cancelled (not as waited): assert on
 * 'cancelled' with that in mind.
 */
int probe_try_charge (struct throttle_budget *b, uint64_t need,
                      uint64_t *charged);

#endif /* THROTTLE_BUDGET_PROBE_H */
