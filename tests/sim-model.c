/* SPDX-License-Identifier: BSD-3-Clause */
/* test-sim.c's model of admission: checks and glue (sim-model.h). */

#include <config.h>

#include <check.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sim-model.h"

struct sim_cover sim_cover;
struct sim *sim_current;

void
sim_say (struct sim *s, const char *fmt, ...)
{
  va_list ap;

  if (s->nlog >= sizeof s->log / sizeof s->log[0])
    return;
  va_start (ap, fmt);
  vsnprintf (s->log[s->nlog], sizeof s->log[0], fmt, ap);
  va_end (ap);
  if (s->verbose)
    fprintf (stderr, "  %3u %s\n", s->step, s->log[s->nlog]);
  s->nlog++;
}

void
sim_print_schedule (struct sim *s)
{
  unsigned i;

  fprintf (stderr, "test-sim: failing schedule: THROTTLE_SIM_SEED=%" PRIu64
           " (ops %#x%s), %u steps:\n", s->seed, s->ops,
           s->no_server ? ", THROTTLE_SIM_NO_SERVER=1" : "", s->step);
  for (i = 0; i < s->nlog; i++)
    fprintf (stderr, "  %s\n", s->log[i]);
}

void
sim_fail (struct sim *s, const char *fmt, ...)
{
  va_list ap;

  sim_print_schedule (s);
  sim_current = NULL;
  va_start (ap, fmt);
  sim_vfail ("test-sim", s->seed, s->step, fmt, ap);
}

struct throttle_stats
sim_stats (struct throttle_budget *b)
{
  struct throttle_stats st;

  throttle_budget_get_stats (b, &st);
  return st;
}

struct throttle_budget *
sim_server (struct sim *s)
{
  return s->no_server ? NULL : &s->server;
}

/* --- the model's view of what each request holds -------------------- */

/* Units r holds on its export's budget and on the server's now. */
static uint64_t
held_exp (const struct req *r)
{
  if (r->state == RUNNING || r->a.stage == THROTTLE_ADMIT_SERVER)
    return r->a.charged;
  if (r->a.stage == THROTTLE_ADMIT_EXPORT && r->a.bw.w.granted)
    return r->a.bw.w.got & THROTTLE_BUDGET_MAX_UNITS;
  return 0;
}

static uint64_t
held_srv (const struct sim *s, const struct req *r)
{
  if (s->no_server)
    return 0;
  /* A request running on a bound export owes the server its units:
   * charged at its grant, or in what the binding charged the server.
   */
  if (r->state == RUNNING)
    return throttle_budget_mirrored (&((struct sim *) s)->e[r->exp].b) ?
      r->a.charged : 0;
  if (r->a.stage == THROTTLE_ADMIT_SERVER && r->a.bw.w.granted)
    return r->a.bw.w.got;
  /* Granted by its export before the binding, not yet polled: in what
   * the binding charged the server.
   */
  if (r->a.stage == THROTTLE_ADMIT_EXPORT && r->a.bw.w.granted &&
      !(r->a.bw.w.got & THROTTLE_BUDGET_MIRRORED) &&
      throttle_budget_mirrored (&((struct sim *) s)->e[r->exp].b))
    return r->a.bw.w.got & THROTTLE_BUDGET_MAX_UNITS;
  return 0;
}

/* Is r waiting, ungranted, in the queue of budget b? */
static bool
queued_on (const struct sim *s, const struct req *r,
           const struct throttle_budget *b)
{
  if (r->state != WAITING || r->a.bw.w.granted)
    return false;
  if (r->a.stage == THROTTLE_ADMIT_EXPORT)
    return b == &s->e[r->exp].b;
  return r->a.stage == THROTTLE_ADMIT_SERVER && b == &s->server;
}

/* A request went on from its export to the server: its place there. */
static void
asked_server (struct sim *s, struct req *r)
{
  if (r->srv_seq == 0)
    r->srv_seq = ++s->next_seq;
}

/* --- checks ----------------------------------------------------------- */

static void
check_budget (struct sim *s, struct throttle_budget *b, const char *name,
              bool granted_now)
{
  struct throttle_stats st = sim_stats (b);
  uint64_t held = 0, holders = 0, h;
  int i;

  for (i = 0; i < MAX_REQS; i++) {
    struct req *r = &s->r[i];

    if (r->state == FREE)
      continue;
    h = b == &s->server ? held_srv (s, r) :
      b == &s->e[r->exp].b ? held_exp (r) : 0;
    held += h;
    holders += h > 0;
  }
  if (st.in_flight != held)
    sim_fail (s, "%s: in_flight %" PRIu64 " but the requests hold %" PRIu64
          " (a charge lost or credited twice)", name, st.in_flight, held);
  if (st.waiters > 0 && st.in_flight == 0)
    sim_fail (s, "%s: %" PRIu64 " waiters and nothing in flight: the head "
          "is stranded (capacity %" PRIu64 ")", name, st.waiters,
          st.capacity);
  if (granted_now && st.in_flight > st.capacity && holders > 1)
    sim_fail (s, "%s: a grant left %" PRIu64 " in flight over the capacity %"
          PRIu64 " with %" PRIu64 " holders", name, st.in_flight,
          st.capacity, holders);
}

/* New grants since the last step: FIFO, and which budgets granted. */
static void
see_grants (struct sim *s, bool *exp_granted, bool *srv_granted)
{
  int i, j;

  for (i = 0; i < MAX_REQS; i++) {
    struct req *r = &s->r[i];
    bool eg, sg;

    if (r->state == FREE)
      continue;
    eg = held_exp (r) > 0 || r->state == RUNNING;
    /* Granted by the server itself (not owed through a binding). */
    sg = !s->no_server &&
      ((r->state == RUNNING && r->a.mirrored) ||
       (r->a.stage == THROTTLE_ADMIT_SERVER && r->a.bw.w.granted));
    if (eg && !r->exp_seen) {
      r->exp_seen = true;
      exp_granted[r->exp] = true;
      for (j = 0; j < MAX_REQS; j++)
        if (queued_on (s, &s->r[j], &s->e[r->exp].b) &&
            s->r[j].exp_seq < r->exp_seq)
          sim_fail (s, "export %d: request %" PRIu64 " granted before request %"
                PRIu64 ", which asked first", r->exp, r->id, s->r[j].id);
    }
    if (sg && !r->srv_seen) {
      r->srv_seen = true;
      *srv_granted = true;
      for (j = 0; j < MAX_REQS; j++)
        if (queued_on (s, &s->r[j], &s->server) &&
            s->r[j].srv_seq < r->srv_seq)
          sim_fail (s, "server: request %" PRIu64 " granted before request %"
                PRIu64 ", which asked first", r->id, s->r[j].id);
    }
  }
}

/* The units running at the plugin, all exports together. */
static void
check_process_bound (struct sim *s)
{
  uint64_t running = 0, n = 0, cap = sim_stats (&s->server).capacity;
  int i;

  for (i = 0; i < MAX_REQS; i++)
    if (s->r[i].state == RUNNING && s->r[i].a.charged > 0) {
      running += s->r[i].a.charged;
      n++;
    }
  if (running > cap && n > 1)
    sim_fail (s, "%" PRIu64 " units running across exports, over the "
          "process-wide bound %" PRIu64, running, cap);
}

static void
check_controllers (struct sim *s)
{
  int i;

  for (i = 0; i < s->nexp; i++) {
    struct export *e = &s->e[i];
    struct throttle_stats st;

    if (!e->adapt)
      continue;
    st = sim_stats (&e->b);
    if (st.waiters == 0 || st.in_flight > 0 ||
        e->ctl.capacity >= e->ctl.ceiling) {
      e->stall_since = 0;
      continue;
    }
    if (e->stall_since == 0 || e->ctl.capacity > e->stall_cap) {
      e->stall_since = s->now + 1;
      e->stall_cap = e->ctl.capacity;
    }
    else if (s->now + 1 - e->stall_since > 2 * s->window_ns + s->window_ns / 2)
      sim_fail (s, "export %d: waiters and nothing in flight for %" PRIu64
            " ms, capacity stuck at %" PRIu64, i,
            (s->now + 1 - e->stall_since) / MS, e->ctl.capacity);
  }
}

void
sim_check_all (struct sim *s)
{
  bool eg[MAX_EXPORTS] = { false }, sg = false;
  char name[32];
  int i;

  see_grants (s, eg, &sg);
  for (i = 0; i < s->nexp; i++) {
    snprintf (name, sizeof name, "export %d", i);
    check_budget (s, &s->e[i].b, name, eg[i]);
  }
  check_budget (s, &s->server, "server", sg);
  if (sg || (s->no_server && (eg[0] || eg[1] || eg[2])))
    check_process_bound (s);
  check_controllers (s);
}

/* --- the glue ----------------------------------------------------------- */

void
sim_apply (struct sim *s, int i, enum throttle_adapt_step step, const char *why)
{
  if (step == THROTTLE_ADAPT_NONE)
    return;
  if (step == THROTTLE_ADAPT_DOWN)
    sim_cover.ctl_down++;
  else if (strcmp (why, "tick") == 0)
    sim_cover.tick_up++;
  else
    sim_cover.ctl_up++;
  throttle_budget_set_capacity (&s->e[i].b, s->e[i].ctl.capacity);
  sim_say (s, "  export %d controller %s (%s): capacity %" PRIu64, i,
       step == THROTTLE_ADAPT_UP ? "up" : "down", why, s->e[i].ctl.capacity);
}

static uint64_t
need_of (struct sim *s, struct req *r)
{
  const struct throttle_request tr = {
    .op = r->op, .count = r->count, .offset = r->offset, .exportname = "",
  };

  return s->metric (&tr);
}

/* The filter's serve loop with helpers (plugin/throttle/throttle-serve.c):
 * r was just granted a part; its rest is admitted at once as a request
 * of its own in a free slot, if fewer than s->helpers rests are live,
 * and r is then only that part.  Otherwise r admits its rest when the
 * part completes (sim_complete), as without helpers.
 */
static void
hand_rest (struct sim *s, struct req *r)
{
  struct req *rest = NULL;
  unsigned live = 0;
  int i;

  if (s->helpers == 0 || r->state != RUNNING || r->a.len >= r->count)
    return;
  for (i = 0; i < MAX_REQS; i++) {
    if (s->r[i].state != FREE)
      live += s->r[i].rest;
    else if (rest == NULL)
      rest = &s->r[i];
  }
  if (rest == NULL || live >= s->helpers)
    return;
  memset (rest, 0, sizeof *rest);
  rest->exp = r->exp;
  rest->id = ++s->next_id;
  rest->op = r->op;
  rest->count = r->count - r->a.len;
  rest->offset = r->offset + r->a.len;
  rest->rest = true;
  rest->cont = true;
  r->count = r->a.len;
  sim_cover.rests++;
  sim_say (s, "#%" PRIu64 " granted a part of %" PRIu32 " bytes, its rest "
           "handed off as #%" PRIu64 ": %" PRIu32 " bytes", r->id, r->count,
           rest->id, rest->count);
  sim_admit (s, rest);
}

/* Admit what is left of r (as the filter's serve loop does). */
void
sim_admit (struct sim *s, struct req *r)
{
  uint64_t need = need_of (s, r);
  int ret;

  r->exp_seen = r->srv_seen = false;
  r->exp_seq = r->srv_seq = 0;
  if (need == 0) {
    memset (&r->a, 0, sizeof r->a);
    r->a.len = r->count;
    r->a.stage = THROTTLE_ADMIT_GRANTED;
    r->state = RUNNING;
    r->admitted_ns = s->now;
    return;
  }
  ret = throttle_admit_start (&r->a, &s->policy, &s->e[r->exp].b,
                              sim_server (s), r->op, r->count, r->offset,
                              need, r->cont);
  if (ret == -1)
    sim_fail (s, "admission failed without a shutdown");
  /* Its place in each queue it asked: the export's now, the server's
   * if it went on to it.
   */
  r->exp_seq = ++s->next_seq;
  if (r->a.stage == THROTTLE_ADMIT_SERVER || r->a.stage == THROTTLE_ADMIT_GRANTED)
    r->srv_seq = ++s->next_seq;
  r->state = ret == 0 ? RUNNING : WAITING;
  if (r->state == RUNNING)
    r->admitted_ns = s->now;
  sim_cover.waited += ret == 1;
  sim_cover.at_server += r->a.stage == THROTTLE_ADMIT_SERVER;
  sim_cover.in_parts += r->a.parts;
  hand_rest (s, r);
}

void
sim_poll (struct sim *s, struct req *r)
{
  enum throttle_admit_stage before = r->a.stage;
  int ret = throttle_admit_poll (&r->a);

  if (ret == -1)
    sim_fail (s, "poll failed without a shutdown");
  if (before == THROTTLE_ADMIT_EXPORT && r->a.stage != THROTTLE_ADMIT_EXPORT)
    asked_server (s, r);
  sim_cover.at_server += r->a.stage == THROTTLE_ADMIT_SERVER &&
    before == THROTTLE_ADMIT_EXPORT;
  if (ret == 0) {
    r->state = RUNNING;
    r->admitted_ns = s->now;
    hand_rest (s, r);
  }
}

void
sim_complete (struct sim *s, struct req *r)
{
  struct export *e = &s->e[r->exp];
  uint32_t len = r->a.len;
  uint64_t latency = 0;

  throttle_admit_credit (&e->b, sim_server (s), r->a.charged);
  /* Checked here too: what the credit granted must fit the capacity
   * before the controller moves it.
   */
  r->state = FREE;
  sim_check_all (s);
  /* The backend's latency: under the target while it is fast, over
   * it while slow; never longer than the request has been admitted.
   */
  if (e->adapt) {
    uint64_t t = e->ctl.target_ns;

    latency = s->slow ? t + pick (s, 10 * t) : pick (s, t / 2);
    if (latency > s->now - r->admitted_ns || s->elapsed)
      latency = s->now - r->admitted_ns;
  }
  if (e->adapt && throttle_adapt_sample (&e->ctl, s->now, latency,
                                         r->op == THROTTLE_OP_READ)) {
    struct throttle_stats st = sim_stats (&e->b);
    /* As the glue: work waited during the window, or waits now. */
    bool waiting = st.waited != e->waited_mark || st.waiters > 0;

    e->waited_mark = st.waited;
    sim_apply (s, r->exp, throttle_adapt_judge (&e->ctl, s->now, waiting),
           "window");
  }
  if (len < r->count)
    sim_cover.parts_granted++;
  if (len == 0 || len > r->count)
    sim_fail (s, "request %" PRIu64 ": a part of %" PRIu32 " bytes of %" PRIu32,
          r->id, len, r->count);
  if (len < r->count) {
    r->count -= len;
    r->offset += len;
    r->cont = true;
    sim_admit (s, r);
  }
}

void
sim_bind (struct sim *s)
{
  int i;

  for (i = 0; i < s->nexp; i++)
    throttle_admit_bind (&s->e[i].b, &s->server);
  s->bound = true;
}
