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
  bool cont;                  /* what a request's parts so far left */
  uint64_t offset;
  struct throttle_admit a;
  uint64_t admitted_ns;
  /* What the model knows of its grants, to see new ones. */
  bool exp_seen, srv_seen;
  uint64_t exp_seq, srv_seq;  /* order it asked each budget */
  /* Counted by the model as the budgets count their statistics: a
   * grant above the capacity in force (clamped), to take back if the
   * grant is given back unpolled.
   */
  bool exp_clamped, srv_clamped;
  /* Seen holding units at its export's budget, at the server's, as
   * the plugin serves them: a new holder is a new grant.
   */
  bool in_exp_view, in_srv_view;
};

/* What the model saw happen on one budget: its statistics must say
 * the same (throttle_stats), and the bound at the plugin.
 */
struct seen {
  uint64_t admitted, charged, clamped, waited, cancelled, peak;
  uint64_t last_cap;          /* the capacity at the last check */
  /* The plugin holds more than the capacity, with several requests,
   * only since the capacity was lowered under what it held: nothing
   * may be granted until that fits.
   */
  bool over;
};

struct export {
  struct throttle_budget b;
  bool adapt;
  struct throttle_adapt ctl;
  uint64_t ceiling;
  uint64_t stall_since, stall_cap;   /* 0: not stalled */
};

struct sim {
  uint64_t seed, rng;
  unsigned ops;
  bool no_server;             /* admit without it, still check its bound */
  bool no_stats;              /* check all but the statistics */
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
  /* A completed part (or whole request) fails at the plugin in one
   * of 'fail_in' (0: never): its request then admits nothing more
   * (the filter's serve loop, plugin/throttle/core/throttle-serve.c).
   */
  unsigned fail_in;
  /* Every budget shut down (the server's unload) at this step; 0:
   * never.  From then on every admission fails holding nothing.
   */
  unsigned shutdown_step;
  bool shut;
  bool just_bound;            /* the exports were bound at this step */
  struct seen seen_exp[MAX_EXPORTS], seen_srv;
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
  uint64_t failed, failed_rest; /* parts that failed; with a rest left */
  /* A capacity raised by "set" or by a controller's step up while a
   * request above it ran alone: the bound must still hold.
   */
  uint64_t set_over_lone, ctl_over_lone;
  uint64_t over_lowered;        /* the plugin over a lowered capacity */
  uint64_t srv_below_exp;       /* server capacity below an export's */
  uint64_t shutdowns, shut_failed;
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
 * count, offset): r is RUNNING or WAITING after it, or FREE if the
 * budgets are shut down.
 */
void sim_admit (struct sim *s, struct req *r);

/* A WAITING request's thread wakes up: it may go on to the server's
 * budget or run, or end holding nothing after a shutdown (FREE).
 */
void sim_poll (struct sim *s, struct req *r);

/* A RUNNING request completes: credit, sample the controller, and
 * admit the rest of a request served in parts, in its own thread, one
 * part after another, unless the part failed (r is FREE after it
 * unless a rest was admitted).
 */
void sim_complete (struct sim *s, struct req *r);

/* Bind every export by the server's budget (the filter's bind_locked). */
void sim_bind (struct sim *s);

/* Set budget b's capacity (an export's or the server's), noting a
 * raise over a request running alone above it, by "set" or by a
 * controller's step (by_controller).
 */
void sim_set_capacity (struct sim *s, struct throttle_budget *b,
                       uint64_t cap, bool by_controller);

/* Shut every budget down (the filter's unload). */
void sim_shutdown (struct sim *s);

/* A WAITING request's thread gives up (its wait cancelled): it holds
 * nothing after it, and is FREE.
 */
void sim_cancel (struct sim *s, struct req *r);

#endif /* THROTTLE_SIM_MODEL_H */
