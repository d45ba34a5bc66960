/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: a capacity that finds itself from a latency target,
 * as the kernel's writeback throttling (block/blk-wbt.c) finds a depth
 * (how, and where it differs: throttle-adapt.c).  It never leaves
 * [floor, ceiling]; without a target (off) it is the ceiling.
 *
 * The controller is a pure state machine: it reads no clock (the
 * caller passes every timestamp, so tests run on a simulated clock),
 * takes no lock and touches no budget (the caller passes its budget's
 * statistics and applies the capacity it computes).  All calls on one
 * controller must be serialized by the caller: the filter holds the
 * export's adapt lock around each call.
 */

#ifndef THROTTLE_ADAPT_H
#define THROTTLE_ADAPT_H

#include <stdbool.h>
#include <stdint.h>

#include "throttle-budget.h"

/* Counters of one class of samples (reads, or all) in one window. */
struct throttle_adapt_counts {
  uint64_t n;                 /* samples */
  uint64_t over_target;       /* slower than the target */
  uint64_t over_low;          /* slower than target * 2/3 */
  uint64_t over_twice;        /* slower than target * 2 */
  uint64_t sum_ns, max_ns;
};

enum throttle_adapt_step {
  THROTTLE_ADAPT_NONE = 0,
  THROTTLE_ADAPT_DOWN,
  THROTTLE_ADAPT_UP,
};

/* The last judged window, for statistics and logs (none: samples 0). */
struct throttle_adapt_window {
  bool decided;               /* false: no reads, but reads shortly before */
  bool reads;                 /* judged on its reads (else on all samples) */
  uint64_t length_ns;
  uint64_t samples;           /* samples of the class judged */
  uint64_t over_target;
  uint64_t mean_ns, max_ns;
};

struct throttle_adapt {
  /* Parameters. */
  uint64_t floor, ceiling;    /* 1 <= floor; floor <= ceiling with a target */
  uint64_t target_ns;         /* 0: off */
  uint64_t window_ns;

  uint64_t capacity;          /* the effective capacity now */

  /* The open window. */
  uint64_t window_start_ns;
  struct throttle_adapt_counts reads, all;
  /* The budget's 'waited' when the window opened. */
  uint64_t waited_mark;
  /* Samples of requests admitted before the last change of capacity
   * say nothing about the new one: they are not counted.
   */
  uint64_t changed_ns;

  unsigned windows_since_read;
  unsigned windows_since_step;
  enum throttle_adapt_step last_step;
  /* Windows to wait before the next step up: set when a step up was
   * undone at once (a bounce), doubled at each further bounce.
   */
  unsigned hold;

  uint64_t steps_down, steps_up;        /* since init, over every target */
  struct throttle_adapt_window last;    /* since the target was turned on */
};

/* Start a controller with target_ns (0: off), at 'capacity' clamped to
 * [floor, ceiling] (off: at the ceiling).  Returns -1 (errno EINVAL)
 * if floor or window_ns is 0, or with a target if floor > ceiling.
 */
extern int throttle_adapt_init (struct throttle_adapt *a,
                                uint64_t floor, uint64_t ceiling,
                                uint64_t target_ns, uint64_t window_ns,
                                uint64_t capacity, uint64_t now_ns);

/* Record the completion at now_ns of a request whose latency (from its
 * admission) was latency_ns (nothing without a target).  Returns true
 * when the window is over (it has lasted window_ns since its first
 * counted sample): the caller ends it with throttle_adapt_tick.
 */
extern bool throttle_adapt_sample (struct throttle_adapt *a, uint64_t now_ns,
                                   uint64_t latency_ns, bool is_read);

/* End the window if it has lasted window_ns, given the statistics 's'
 * of the budget now: called at the completion that
 * throttle_adapt_sample said ended it, and on a timer (at least once
 * per window_ns), so that windows end on time, not only on
 * completions, and the controller cannot hold a stalled export.
 * - A window with samples is judged: down when too slow; up when fast
 *   enough and work waited for credit in it (s->waited moved) or waits
 *   now (without it the capacity never grows: a capacity that did not
 *   bind says nothing about a larger one), unless held after bounces.
 * - A window without samples, while requests wait (s->waiters) and
 *   nothing is in flight (s->in_flight): the capacity is too low for
 *   the waiting work to start and tells nothing about latency: it
 *   steps up (whatever the hold), so that it reaches the ceiling
 *   within a bounded number of windows.
 * - Otherwise (idle, or requests in flight that have not completed)
 *   nothing: a slow request is judged by its latency when it
 *   completes.
 * Returns the step taken; a->capacity is the new effective capacity.
 * Without a target, nothing.
 */
extern enum throttle_adapt_step throttle_adapt_tick
  (struct throttle_adapt *a, uint64_t now_ns, const struct throttle_stats *s);

/* Change the target, 0 to turn it off; the window restarts.  Turned on
 * (or off) the capacity is the ceiling, as at the start.  -1 (EINVAL)
 * if on and the ceiling is below the floor.
 */
extern int throttle_adapt_set_target (struct throttle_adapt *a,
                                      uint64_t target_ns, uint64_t now_ns);

/* Change the ceiling, and the capacity with it, at once: an operator
 * who sets a capacity gets it now, raised or lowered, and the
 * controller moves on from there.  The window restarts.  -1 (EINVAL)
 * if a target is on and it is below the floor.
 */
extern int throttle_adapt_set_ceiling (struct throttle_adapt *a,
                                       uint64_t ceiling, uint64_t now_ns);

#endif /* THROTTLE_ADAPT_H */
