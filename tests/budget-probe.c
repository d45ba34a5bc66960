/* SPDX-License-Identifier: BSD-3-Clause */
/* The budget tests' probes: see budget-probe.h. */

#include <config.h>

#include <stdint.h>

#include "throttle-budget.h"
#include "budget-probe.h"

struct throttle_stats
probe_stats (struct throttle_budget *b)
{
  struct throttle_stats s;
  throttle_budget_get_stats (b, &s);
  return s;
}

int
probe_try_charge (struct throttle_budget *b, uint64_t need,
                  uint64_t *charged)
{
  struct throttle_budget_waiter bw;
  int r = throttle_budget_enqueue (b, &bw, THROTTLE_BUDGET_WHOLE, need, 0,
                                   charged);

  /* Queued: it would wait.  Give bw up, granted meanwhile or not, so
   * that a failed try holds nothing. */
  if (r == 1) {
    throttle_budget_abandon (b, &bw);
    return -1;
  }
  return r;
}
