/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: a capacity that finds itself from a latency target.
 *
 * In the spirit of the kernel's writeback throttling (block/blk-wbt.c):
 * completion latencies are sampled in windows; when the window's reads
 * (or all requests, when there are no reads) are too slow, the
 * effective capacity of the budget steps down multiplicatively; when
 * they are fast enough and work was waiting for credit, it steps up.
 * It never leaves [floor, ceiling].
 *
 * The controller is a pure state machine: it reads no clock (the
 * caller passes every timestamp, so tests run on a simulated clock),
 * takes no lock and touches no budget (the caller applies the capacity
 * it computes).  All calls on one controller must be serialized by the
 * caller: the filter holds the export's adapt lock around each call.
 */

#ifndef THROTTLE_ADAPT_H
#define THROTTLE_ADAPT_H

#include <stdbool.h>
#include <stdint.h>

/* A window is judged too slow when more than 1/THROTTLE_ADAPT_PCT_DIV
 * of its samples took longer than the target (its 90th percentile is
 * above the target); fast enough when at most that many took longer
 * than target * 2/3.
 */
#define THROTTLE_ADAPT_PCT_DIV 10

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

/* What the last judged window saw, for statistics and logs. */
struct throttle_adapt_window {
  bool judged;                /* a window has been judged since the start */
  bool decided;               /* false: no reads, but reads shortly before */
  bool reads;                 /* judged on its reads (else on all samples) */
  uint64_t length_ns;
  uint64_t samples;           /* samples of the class judged */
  uint64_t over_target;
  uint64_t mean_ns, max_ns;
};

struct throttle_adapt {
  /* Parameters. */
  uint64_t floor, ceiling;    /* 1 <= floor <= ceiling */
  uint64_t target_ns;
  uint64_t window_ns;

  uint64_t capacity;          /* the effective capacity now */

  /* The open window. */
  uint64_t window_start_ns;
  struct throttle_adapt_counts reads, all;
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

  uint64_t steps_down, steps_up;
  struct throttle_adapt_window last;
};

/* Start a controller at 'capacity', clamped to [floor, ceiling].
 * Returns -1 (errno EINVAL) if floor is 0, floor > ceiling, or
 * target_ns or window_ns is 0.
 */
extern int throttle_adapt_init (struct throttle_adapt *a,
                                uint64_t floor, uint64_t ceiling,
                                uint64_t target_ns, uint64_t window_ns,
                                uint64_t capacity, uint64_t now_ns);

/* Record the completion at now_ns of a request whose latency (from its
 * admission) was latency_ns.  Returns true when the window is over (it
 * has lasted window_ns since its first counted sample) and must be
 * judged with throttle_adapt_judge before the next sample.
 */
extern bool throttle_adapt_sample (struct throttle_adapt *a, uint64_t now_ns,
                                   uint64_t latency_ns, bool is_read);

/* Judge the window that throttle_adapt_sample said was over, and open
 * the next.  'work_waiting': requests had to wait for credit during
 * the window (without it the capacity never grows: a capacity that did
 * not bind says nothing about a larger one).  Returns the step taken;
 * a->capacity is the new effective capacity.
 */
extern enum throttle_adapt_step throttle_adapt_judge (struct throttle_adapt *a,
                                                      uint64_t now_ns,
                                                      bool work_waiting);

/* Called by the caller on a timer (at least once per window_ns), with
 * the budget's 'waiters' (requests waiting for credit now) and
 * 'in_flight' (units held now): windows end on time, not only on
 * completions, so that the controller cannot hold a stalled export.
 * Once the open window has lasted window_ns:
 * - with samples, it is judged as throttle_adapt_judge would at the
 *   next completion (work_waiting: waiters > 0);
 * - without samples, with requests waiting and nothing in flight, the
 *   capacity is too low for the waiting work to start and tells
 *   nothing about latency: it steps up (whatever the hold after
 *   bounces), so that it reaches the ceiling within a bounded number
 *   of windows;
 * - otherwise (idle, or requests in flight that have not completed)
 *   nothing: a slow request is judged by its latency when it
 *   completes.
 * Returns the step taken; a->capacity is the new effective capacity.
 */
extern enum throttle_adapt_step throttle_adapt_tick (struct throttle_adapt *a,
                                                     uint64_t now_ns,
                                                     uint64_t waiters,
                                                     uint64_t in_flight);

/* Change the target; the window restarts.  -1 (EINVAL) if 0. */
extern int throttle_adapt_set_target (struct throttle_adapt *a,
                                      uint64_t target_ns, uint64_t now_ns);

/* Change the ceiling, and the capacity with it, at once: an operator
 * who sets a capacity gets it now, raised or lowered, and the
 * controller moves on from there.  The window restarts.  -1 (EINVAL)
 * if below the floor.
 */
extern int throttle_adapt_set_ceiling (struct throttle_adapt *a,
                                       uint64_t ceiling, uint64_t now_ns);

#endif /* THROTTLE_ADAPT_H */
