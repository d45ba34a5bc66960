/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: a capacity that finds itself from a latency target.
 *
 * Like blk-wbt, this watches completion latencies in windows and moves
 * a depth limit: down multiplicatively when reads are slow, back up
 * when they are fast.  Where it differs, and why:
 *
 * - blk-wbt steps down when the *fastest* read of a window missed the
 *   target.  Here it is when more than a tenth of them did (the 90th
 *   percentile): the point of a target is the tail a reader sees.
 *   Counting samples over two thresholds gives that exactly, without
 *   keeping the samples.
 *
 * - Stability.  A controller that steps up whenever the latency is
 *   below the target and down whenever it is above oscillates around
 *   the target.  Here a step up needs the window's 90th percentile at
 *   most 2/3 of the target, and a step up is by 5/4: if latency grows
 *   at most in proportion to the capacity (a backend with a fixed base
 *   latency plus a time per byte in flight), a window that allowed a
 *   step up is followed by one within the target.  A step down (3/4,
 *   or 1/2 when most samples took over twice the target) from above
 *   the target lands above 2/3 of it (3/4 * 3/2 > 1), so it is not
 *   followed by a step up.  Between 2/3 of the target and the target
 *   the capacity stays where it is.
 *
 * - Requests come in sizes, so capacity is not fluid: a step up of
 *   5/4 can let in one more large request and double what is in
 *   flight.  Then a step up is undone by the next window (a bounce),
 *   which the argument above cannot prevent; each bounce doubles the
 *   number of windows to wait before trying again (up to
 *   THROTTLE_ADAPT_HOLD_MAX), so under a steady load the capacity
 *   stops moving but for a rare probe.
 *
 * - A sample of a request admitted before the last change of capacity
 *   describes the old capacity; it is not counted, so a step's effect
 *   is judged on requests that saw it.  A window runs from its first
 *   counted sample for the window's length, and then to the next
 *   sample or tick, so a pause never makes a window of one sample.
 *
 * - When a window has no reads but recent windows had some, nothing is
 *   decided: judging writes alone between sparse reads would fight the
 *   decisions taken on the reads.  Writes alone are judged once no read
 *   has been seen for THROTTLE_ADAPT_QUIET windows.
 */

#include <config.h>

#include <errno.h>
#include <string.h>

#include "throttle-adapt.h"

/* Too slow: over the target for more than 1/THROTTLE_ADAPT_PCT_DIV of
 * the samples (the 90th percentile, above); fast enough: over 2/3 of
 * it for at most as many.
 */
#define THROTTLE_ADAPT_PCT_DIV 10
#define THROTTLE_ADAPT_QUIET 8
#define THROTTLE_ADAPT_HOLD_MIN 4
#define THROTTLE_ADAPT_HOLD_MAX 128
/* A step up undone this soon (in windows) by a step down is a bounce. */
#define THROTTLE_ADAPT_BOUNCE 2

static void
open_window (struct throttle_adapt *a, uint64_t now_ns)
{
  a->window_start_ns = now_ns;
  memset (&a->reads, 0, sizeof a->reads);
  memset (&a->all, 0, sizeof a->all);
}

/* The window restarts: what it had counted described what no longer
 * holds.
 */
static void
restart (struct throttle_adapt *a, uint64_t now_ns)
{
  a->changed_ns = now_ns;
  a->hold = 0;
  open_window (a, now_ns);
}

int
throttle_adapt_init (struct throttle_adapt *a,
                     uint64_t floor, uint64_t ceiling,
                     uint64_t target_ns, uint64_t window_ns,
                     uint64_t capacity, uint64_t now_ns)
{
  if (floor == 0 || window_ns == 0) {
    errno = EINVAL;
    return -1;
  }
  memset (a, 0, sizeof *a);
  a->floor = floor;
  a->ceiling = ceiling;
  a->window_ns = window_ns;
  /* Turned on from off, as by the operator, then at 'capacity'. */
  if (throttle_adapt_set_target (a, target_ns, now_ns) == -1)
    return -1;
  if (target_ns)
    a->capacity = capacity > ceiling ? ceiling :
      capacity < floor ? floor : capacity;
  return 0;
}

static void
count (struct throttle_adapt_counts *c, const struct throttle_adapt *a,
       uint64_t latency_ns)
{
  c->n++;
  c->sum_ns += latency_ns;
  if (latency_ns > c->max_ns)
    c->max_ns = latency_ns;
  if (latency_ns > a->target_ns)
    c->over_target++;
  if (latency_ns > a->target_ns * 2 / 3)
    c->over_low++;
  if (latency_ns > a->target_ns * 2)
    c->over_twice++;
}

/* A caller's clock read before the window opened must not look like a
 * window that lasted for ever.
 */
static bool
window_over (const struct throttle_adapt *a, uint64_t now_ns)
{
  return a->target_ns && now_ns >= a->window_start_ns &&
    now_ns - a->window_start_ns >= a->window_ns;
}

bool
throttle_adapt_sample (struct throttle_adapt *a, uint64_t now_ns,
                       uint64_t latency_ns, bool is_read)
{
  /* Not counted if admitted before the last change (above). */
  if (a->target_ns && latency_ns <= now_ns &&
      now_ns - latency_ns >= a->changed_ns) {
    /* The window runs from its first counted sample (above). */
    if (a->all.n == 0)
      a->window_start_ns = now_ns;
    count (&a->all, a, latency_ns);
    if (is_read)
      count (&a->reads, a, latency_ns);
  }
  return a->all.n > 0 && window_over (a, now_ns);
}

/* More than a tenth of n. */
static bool
over_pct (uint64_t k, uint64_t n)
{
  return k * THROTTLE_ADAPT_PCT_DIV > n;
}

static uint64_t
step_down (const struct throttle_adapt *a,
           const struct throttle_adapt_counts *c)
{
  uint64_t cap = a->capacity, d;

  /* Far over the target: halve, as blk-wbt does at every step.  After
   * halving, the median is still over the target, so this too is
   * never followed by a step up.
   */
  if (c->over_twice * 2 > c->n)
    d = cap / 2;
  else
    d = cap / 4;
  if (d == 0)
    d = 1;
  return cap - d < a->floor || d >= cap ? a->floor : cap - d;
}

static uint64_t
step_up (const struct throttle_adapt *a)
{
  uint64_t cap = a->capacity, d = cap / 4;

  if (d == 0)
    d = 1;
  return cap > a->ceiling - d ? a->ceiling : cap + d;
}

/* Judge the window, which has samples and is over (window_over): the
 * capacity it asks for.  'work_waiting': requests waited for credit
 * during the window.
 */
static uint64_t
judge (struct throttle_adapt *a, uint64_t now_ns, bool work_waiting)
{
  const struct throttle_adapt_counts *c = NULL;
  uint64_t cap = a->capacity;

  if (a->reads.n > 0) {
    c = &a->reads;
    a->windows_since_read = 0;
  }
  else {
    if (a->windows_since_read < THROTTLE_ADAPT_QUIET)
      a->windows_since_read++;
    else
      c = &a->all;
  }
  if (a->windows_since_step < UINT32_MAX / 2)
    a->windows_since_step++;

  if (c && over_pct (c->over_target, c->n)) {
    cap = step_down (a, c);
    if (cap < a->capacity) {
      if (a->last_step == THROTTLE_ADAPT_UP &&
          a->windows_since_step <= THROTTLE_ADAPT_BOUNCE) {
        a->hold = a->hold * 2;
        if (a->hold < THROTTLE_ADAPT_HOLD_MIN)
          a->hold = THROTTLE_ADAPT_HOLD_MIN;
        if (a->hold > THROTTLE_ADAPT_HOLD_MAX)
          a->hold = THROTTLE_ADAPT_HOLD_MAX;
      }
      else
        /* The backend got slower: not a probe that failed. */
        a->hold = 0;
    }
  }
  else if (c && !over_pct (c->over_low, c->n) && work_waiting &&
           a->windows_since_step >= a->hold)
    cap = step_up (a);

  a->last.decided = c != NULL;
  a->last.reads = c == &a->reads;
  a->last.length_ns = now_ns - a->window_start_ns;
  if (c == NULL)
    c = &a->all;
  a->last.samples = c->n;
  a->last.over_target = c->over_target;
  a->last.mean_ns = c->sum_ns / c->n;
  a->last.max_ns = c->max_ns;
  return cap;
}

enum throttle_adapt_step
throttle_adapt_tick (struct throttle_adapt *a, uint64_t now_ns,
                     const struct throttle_stats *s)
{
  enum throttle_adapt_step step;
  uint64_t cap;

  if (!window_over (a, now_ns))
    return THROTTLE_ADAPT_NONE;
  if (a->all.n > 0)
    cap = judge (a, now_ns, s->waited != a->waited_mark || s->waiters > 0);
  else if (s->waiters > 0 && s->in_flight == 0)
    /* Work waits and nothing runs: no sample will ever come to end a
     * window, and the capacity says nothing about latency.
     */
    cap = step_up (a);
  else
    return THROTTLE_ADAPT_NONE;
  open_window (a, now_ns);
  a->waited_mark = s->waited;
  if (cap == a->capacity)
    return THROTTLE_ADAPT_NONE;

  step = cap < a->capacity ? THROTTLE_ADAPT_DOWN : THROTTLE_ADAPT_UP;
  a->capacity = cap;
  a->last_step = step;
  a->windows_since_step = 0;
  a->changed_ns = now_ns;
  if (step == THROTTLE_ADAPT_DOWN)
    a->steps_down++;
  else
    a->steps_up++;
  return step;
}

int
throttle_adapt_set_target (struct throttle_adapt *a, uint64_t target_ns,
                           uint64_t now_ns)
{
  if (target_ns && a->floor > a->ceiling) {
    errno = EINVAL;
    return -1;
  }
  if (target_ns == 0 || a->target_ns == 0) {
    /* Off, or on afresh: from the ceiling, as at the start. */
    a->capacity = a->ceiling;
    a->windows_since_read = THROTTLE_ADAPT_QUIET;
    a->windows_since_step = 0;
    a->last_step = THROTTLE_ADAPT_NONE;
    memset (&a->last, 0, sizeof a->last);
  }
  a->target_ns = target_ns;
  restart (a, now_ns);
  return 0;
}

int
throttle_adapt_set_ceiling (struct throttle_adapt *a, uint64_t ceiling,
                            uint64_t now_ns)
{
  if (a->target_ns && ceiling < a->floor) {
    errno = EINVAL;
    return -1;
  }
  a->ceiling = ceiling;
  a->capacity = ceiling;
  restart (a, now_ns);
  return 0;
}
