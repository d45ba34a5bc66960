/* SPDX-License-Identifier: BSD-3-Clause */
/* test-sim.c's model of admission: what each simulated request holds,
 * the checks made after every step, and the glue that serves a request
 * as the filter does (parts, the export's budget then the server's,
 * the controller's capacity applied to its budget).  test-sim.c draws
 * the steps and the schedules; see its head comment for what is
 * checked and why.
 */

#ifndef THROTTLE_SIM_MODEL_H
#define THROTTLE_SIM_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "throttle-adapt.h"
#include "throttle-admit.h"
#include "throttle-budget.h"
#include "throttle-metric.h"
#include "sim-seed.h"

#define MAX_EXPORTS 3
#define MAX_REQS 48
#define MAX_STEPS 20000
#define MS UINT64_C (1000000)

enum req_state { FREE = 0, WAITING, RUNNING };

struct req {
  enum req_state state;
  int exp;
  uint64_t id;
  enum throttle_op op;
  uint32_t count;             /* bytes still to serve */
  bool rest;                  /* the rest of a request, handed to a helper */
  bool cont;                  /* what a request's parts so far left */
  uint64_t offset;
  struct throttle_admit a;
  uint64_t admitted_ns;
  /* What the model knows of its grants, to see new ones. */
  bool exp_seen, srv_seen;
  uint64_t exp_seq, srv_seq;  /* order it asked each budget */
};

struct export {
  struct throttle_budget b;
  bool adapt;
  struct throttle_adapt ctl;
  uint64_t ceiling;
  uint64_t stall_since, stall_cap;   /* 0: not stalled */
  uint64_t waited_mark;       /* the budget's 'waited' when the window began */
};

struct sim {
  uint64_t seed, rng;
  unsigned ops;
  bool no_server;             /* admit without it, still check its bound */
  struct throttle_admit_policy policy;
  throttle_metric_fn *metric;
  int nexp;
  struct export e[MAX_EXPORTS];
  struct throttle_budget server;
  bool enforce;               /* export capacity <= server capacity */
  struct req r[MAX_REQS];
  uint64_t next_id, next_seq;
  uint64_t now;
  uint64_t short_ns;          /* how far time moves, mostly: the backend's speed */
  uint64_t window_ns;         /* the controllers' */
  bool slow;                  /* the backend misses the targets now */
  /* Latencies are the time from the grant to the completion, and time
   * moves by up to windows at once: the targets are mostly missed, and
   * the controller comes down fast.
   */
  bool elapsed;
  /* Controllers coming down while large requests queue in parts: the
   * schedules that reach a part stranded by the controller alone.
   */
  bool pressure;
  /* As the filter's part helpers (plugin/throttle/throttle-parts.h):
   * once a part of a request is granted, its rest is admitted at once
   * as a request of its own, while fewer than 'helpers' rests are
   * live; 0: a request's rest is admitted when its part completes.
   */
  unsigned helpers;
  /* The exports are bound by the server's budget (throttle_admit_bind)
   * from the start, or, in a third of the schedules (with export
   * capacities within the server's, as the filter requires), at step
   * bind_step: until then only export 0 receives requests, as the
   * filter binds when a second export opens.
   */
  bool bound;
  unsigned bind_step;
  uint64_t next_tick;
  unsigned step;
  /* The schedule so far, to print on a failure. */
  char log[MAX_STEPS + 64][96];
  unsigned nlog;
  bool verbose;
};

/* What the schedules exercised, over a run: a generator that stopped
 * reaching a case would prove nothing about it.
 */
struct sim_cover {
  uint64_t steps, arrivals, in_parts, parts_granted, waited, at_server;
  uint64_t cancelled, cancelled_granted, below_page, lone;
  uint64_t ctl_down, ctl_up, tick_up;
  uint64_t bound_late;          /* exports bound with requests in flight */
  uint64_t rests;               /* rests handed off beside their part */
};
extern struct sim_cover sim_cover;

/* The schedule running, for a signal handler to print; NULL between
 * schedules and once a failure has printed it.
 */
extern struct sim *sim_current;

/* A number in [0, n) from the schedule's seed. */
static inline uint64_t
pick (struct sim *s, uint64_t n)
{
  return sim_pick (&s->rng, n);
}

/* Log a step of the schedule, to print if it fails (and at once in
 * the verbose mode of a single seed).
 */
void sim_say (struct sim *s, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3)));

/* Print the seed that replays s and the steps it took. */
void sim_print_schedule (struct sim *s);

/* Print the schedule and what went wrong, then fail the Check test
 * (which does not return).
 */
void sim_fail (struct sim *s, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3), noreturn));

struct throttle_stats sim_stats (struct throttle_budget *b);

/* The server budget the glue admits through: NULL in the mode that
 * admits without it (THROTTLE_SIM_NO_SERVER), where it is still the
 * bound checked.
 */
struct throttle_budget *sim_server (struct sim *s);

/* Every check of the head comment of test-sim.c, after a step; fails
 * the test on the first that does not hold.
 */
void sim_check_all (struct sim *s);

/* Export i's controller took 'step' (from a judgement or a tick, 'why'):
 * apply its capacity to the budget, as the filter's glue does.
 */
void sim_apply (struct sim *s, int i, enum throttle_adapt_step step,
                const char *why);

/* Admit what is left of r, which the caller has filled in (exp, op,
 * count, offset): r is RUNNING or WAITING after it.  A part granted at
 * once may hand its rest off (sim_model.h, helpers).
 */
void sim_admit (struct sim *s, struct req *r);

/* A WAITING request's thread wakes up: it may go on to the server's
 * budget or run, and hand its rest off.
 */
void sim_poll (struct sim *s, struct req *r);

/* A RUNNING request completes: credit, sample the controller, and
 * admit the rest of a request served in parts (r is FREE after it
 * unless a rest was left).
 */
void sim_complete (struct sim *s, struct req *r);

/* Bind every export by the server's budget (the filter's bind_locked). */
void sim_bind (struct sim *s);

#endif /* THROTTLE_SIM_MODEL_H */
