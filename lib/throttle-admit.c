/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: admission of one request, whole or in parts, to its
 * export's budget and to the server's.  See throttle-admit.h.
 *
 * The blocking path (throttle_admit_wait) and the stepped one
 * (throttle_admit_poll) run the same steps (step): the export's grant,
 * then the server's charge for exactly what the export granted.
 */

#include <config.h>

#include <errno.h>

#include "throttle-admit.h"
#include "throttle-metric.h"

/* Requests of more than this many units are large: twice an eighth of
 * the capacity in whole pages' units, at least two pages' (a quarter of
 * the capacity).  So a part is worth a backend call of its own, and
 * under the default capacity (16M) nothing the kernel's nbd client
 * sends (1280K at most) is split.
 */
static uint64_t
large_above (uint64_t capacity, uint64_t page_units)
{
  uint64_t eighth = capacity / 8 / page_units * page_units;

  return 2 * (eighth > page_units ? eighth : page_units);
}

bool
throttle_admit_in_parts (const struct throttle_admit_policy *p,
                         uint64_t capacity, enum throttle_op op,
                         uint32_t count, uint64_t offset, uint64_t need)
{
  /* Most requests stop at the first test: large_above is at least two
   * pages' units.  Page-aligned, so that every part is.
   */
  return need > 2 * p->page_units && p->split && p->page_units != 0 &&
    count <= p->split_max &&
    (op == THROTTLE_OP_READ || op == THROTTLE_OP_WRITE) &&
    offset % THROTTLE_PAGE_SIZE == 0 && count % THROTTLE_PAGE_SIZE == 0 &&
    need > large_above (capacity, p->page_units);
}

bool
throttle_admit_rest_in_parts (const struct throttle_admit_policy *p,
                              uint64_t capacity, uint64_t need)
{
  return p->page_units != 0 &&
    need > 2 * throttle_budget_part_min (capacity, p->page_units);
}

uint32_t
throttle_admit_split_max (uint32_t minimum, uint32_t maximum)
{
  if (minimum == 0)             /* no constraints */
    return UINT32_MAX;
  if (minimum > THROTTLE_PAGE_SIZE)
    return 0;
  return maximum;
}

uint32_t
throttle_admit_part_len (const struct throttle_admit_policy *p, bool parts,
                         uint32_t count, uint64_t need, uint64_t units)
{
  if (!parts || units >= need)
    return count;
  return units / p->page_units * THROTTLE_PAGE_SIZE;
}

/* The export granted 'got': record what its units pay for, and
 * whether they are owed to the server (the export was mirrored when it
 * granted them).
 */
static void
export_granted (struct throttle_admit *a, uint64_t got)
{
  a->mirrored = (got & THROTTLE_BUDGET_MIRRORED) != 0;
  a->charged = got & THROTTLE_BUDGET_MAX_UNITS;
  a->len = throttle_admit_part_len (a->policy, a->parts, a->count, a->need,
                                    a->charged);
}

/* Charge the server what the export granted.  Returns as
 * throttle_admit_start.
 */
static int
server_enqueue (struct throttle_admit *a)
{
  uint64_t got;
  int r;

  if (a->server == NULL || !a->mirrored) {
    a->stage = THROTTLE_ADMIT_GRANTED;
    return 0;
  }
  a->stage = THROTTLE_ADMIT_SERVER;
  r = throttle_budget_enqueue (a->server, &a->bw, THROTTLE_BUDGET_WHOLE,
                               a->charged, 0, &got);
  if (r == 0)
    a->stage = THROTTLE_ADMIT_GRANTED;
  else if (r == 1)
    a->waited = true;
  else {
    throttle_budget_credit (a->exp, a->charged);
    a->stage = THROTTLE_ADMIT_DONE;
  }
  return r;
}

int
throttle_admit_start (struct throttle_admit *a,
                      const struct throttle_admit_policy *p,
                      struct throttle_budget *exp,
                      struct throttle_budget *server, enum throttle_op op,
                      uint32_t count, uint64_t offset, uint64_t need,
                      bool rest)
{
  uint64_t capacity = throttle_budget_get_capacity (exp);
  uint64_t got;
  int r;

  /* Field by field: the waiter in 'a' is the budget's to fill, and only
   * if the request must wait.
   */
  a->waited = false;
  a->len = count;
  a->mirrored = false;
  a->exp = exp;
  a->server = server;
  a->policy = p;
  a->need = need;
  a->count = count;
  a->parts = rest ? throttle_admit_rest_in_parts (p, capacity, need) :
    throttle_admit_in_parts (p, capacity, op, count, offset, need);

  r = throttle_budget_enqueue (exp, &a->bw,
                               a->parts ? THROTTLE_BUDGET_PARTS :
                               THROTTLE_BUDGET_WHOLE,
                               need, p->page_units, &got);
  /* Most requests: granted whole at once, and owed to no server. */
  if (r == 0 && got == need) {
    a->charged = got;
    a->stage = THROTTLE_ADMIT_GRANTED;
    return 0;
  }
  a->charged = 0;
  a->stage = THROTTLE_ADMIT_EXPORT;
  if (r == 1) {
    a->waited = true;
    return 1;
  }
  if (r == -1) {
    a->stage = THROTTLE_ADMIT_DONE;
    return -1;
  }
  export_granted (a, got);
  return server_enqueue (a);
}

/* throttle_admit_wait if 'block', else throttle_admit_poll: the same
 * steps, which differ only in how they wait for a grant.
 */
static int
step (struct throttle_admit *a, bool block, throttle_cancel_fn cancel,
      void *opaque, unsigned poll_ms)
{
  uint64_t got;
  int r;

  switch (a->stage) {
  case THROTTLE_ADMIT_EXPORT:
    r = block ? throttle_budget_wait (a->exp, &a->bw, cancel, opaque,
                                      poll_ms, &got) :
      throttle_budget_poll (a->exp, &a->bw, &got);
    if (r == -1)
      a->stage = THROTTLE_ADMIT_DONE;
    if (r != 0)
      return r;
    export_granted (a, got);
    r = server_enqueue (a);
    if (r != 1 || !block)
      return r;
    /* fallthrough */
  case THROTTLE_ADMIT_SERVER:
    r = block ? throttle_budget_wait (a->server, &a->bw, cancel, opaque,
                                      poll_ms, &got) :
      throttle_budget_poll (a->server, &a->bw, &got);
    if (r == 0)
      a->stage = THROTTLE_ADMIT_GRANTED;
    else if (r == -1) {
      throttle_budget_credit (a->exp, a->charged);
      a->stage = THROTTLE_ADMIT_DONE;
    }
    return r;
  case THROTTLE_ADMIT_GRANTED:
    return 0;
  case THROTTLE_ADMIT_DONE:
    break;
  }
  return -1;
}

int
throttle_admit_poll (struct throttle_admit *a)
{
  return step (a, false, NULL, NULL, 0);
}

int
throttle_admit_wait (struct throttle_admit *a, throttle_cancel_fn cancel,
                     void *opaque, unsigned poll_ms)
{
  return step (a, true, cancel, opaque, poll_ms);
}

void
throttle_admit_abandon (struct throttle_admit *a)
{
  switch (a->stage) {
  case THROTTLE_ADMIT_EXPORT:
    throttle_budget_abandon (a->exp, &a->bw);
    break;
  case THROTTLE_ADMIT_SERVER:
    throttle_budget_abandon (a->server, &a->bw);
    throttle_budget_credit (a->exp, a->charged);
    break;
  case THROTTLE_ADMIT_GRANTED:
  case THROTTLE_ADMIT_DONE:
    return;
  }
  a->charged = 0;
  a->stage = THROTTLE_ADMIT_DONE;
}

void
throttle_admit_credit (struct throttle_budget *exp,
                       struct throttle_budget *server, uint64_t units)
{
  /* The export first: whether the server is owed these units is what
   * the export's word says when they leave it (throttle_budget_mirror).
   */
  if (throttle_budget_credit (exp, units) && server)
    throttle_budget_credit (server, units);
}

void
throttle_admit_bind (struct throttle_budget *exp,
                      struct throttle_budget *server)
{
  throttle_budget_mirror (exp, server);
}
