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

static struct throttle_stats
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
  if (st.waiters > 0 && st.in_flight == 0 && !s->shut)
    sim_fail (s, "%s: %" PRIu64 " waiters and nothing in flight: the head "
          "is stranded (capacity %" PRIu64 ")", name, st.waiters,
          st.capacity);
  if (granted_now && st.in_flight > st.capacity && holders > 1)
    sim_fail (s, "%s: a grant left %" PRIu64 " in flight over the capacity %"
          PRIu64 " with %" PRIu64 " holders", name, st.in_flight,
          st.capacity, holders);
  return st;
}

/* The units r holds on export exp's budget (exp >= 0) or on the
 * server's (-1), as the plugin serves them: the metric of all a whole
 * request serves, or of all a part serves, not the units a budget
 * charged for it.  Running, or granted and not yet running: a grant
 * holds what it pays for from the instant it is made.  Without a
 * server budget, or before the binding, what the exports granted,
 * which the plugin will serve.
 */
static uint64_t
view_units (struct sim *s, const struct req *r, int exp)
{
  struct throttle_request tr = {
    .op = r->op, .count = r->a.len, .offset = r->offset, .exportname = "",
  };
  uint64_t got;

  if (r->state == FREE || (exp >= 0 && r->exp != exp))
    return 0;
  if (r->state == RUNNING)
    return s->metric (&tr);
  /* An export not yet bound keeps the process-wide bound by its own
   * (the filter binds before a second export admits anything).
   */
  got = exp >= 0 || s->no_server ||
    !throttle_budget_mirrored (&s->e[r->exp].b) ? held_exp (r) :
    held_srv (s, r);
  if (got == 0)
    return 0;
  if (r->a.stage == THROTTLE_ADMIT_EXPORT)
    tr.count = throttle_admit_part_len (&s->policy, r->a.parts, r->a.count,
                                        r->a.need,
                                        r->a.bw.w.got &
                                        THROTTLE_BUDGET_MAX_UNITS);
  return s->metric (&tr);
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
      struct seen *sn = &s->seen_exp[r->exp];
      uint64_t u = r->state == RUNNING ? r->a.charged : held_exp (r);

      r->exp_seen = true;
      exp_granted[r->exp] = true;
      if (u > 0) {
        sn->admitted++;
        sn->charged += u;
        /* Above the capacity by what it serves, not by what it was
         * charged: the same when a grant charges all it holds.
         */
        r->exp_clamped = view_units (s, r, r->exp) >
          throttle_budget_get_capacity (&s->e[r->exp].b);
        sn->clamped += r->exp_clamped;
      }
      for (j = 0; j < MAX_REQS; j++)
        if (queued_on (s, &s->r[j], &s->e[r->exp].b) &&
            s->r[j].exp_seq < r->exp_seq)
          sim_fail (s, "export %d: request %" PRIu64 " granted before request %"
                PRIu64 ", which asked first", r->exp, r->id, s->r[j].id);
    }
    if (sg && !r->srv_seen) {
      r->srv_seen = true;
      *srv_granted = true;
      s->seen_srv.admitted++;
      s->seen_srv.charged += r->a.charged;
      r->srv_clamped =
        r->a.charged > throttle_budget_get_capacity (&s->server);
      s->seen_srv.clamped += r->srv_clamped;
      for (j = 0; j < MAX_REQS; j++)
        if (queued_on (s, &s->r[j], &s->server) &&
            s->r[j].srv_seq < r->srv_seq)
          sim_fail (s, "server: request %" PRIu64 " granted before request %"
                PRIu64 ", which asked first", r->id, s->r[j].id);
    }
  }
}

/* The bound where it matters, at the plugin: what the requests of
 * export 'exp' (-1: of every export, the server's bound) hold is at
 * most budget b's capacity in force, or is held by one request alone,
 * or, with no grant since, the capacity was lowered under what they
 * held (lowering revokes nothing; nothing is granted until it fits),
 * or the server was bound with them in flight (throttle_admit_bind
 * charges it what is in flight, as a lowering would).
 */
static void
check_plugin (struct sim *s, int exp, struct throttle_budget *b,
              struct seen *sn, const char *name)
{
  uint64_t cap = throttle_budget_get_capacity (b), held = 0, holders = 0, u;
  bool granted = false;
  int i;

  for (i = 0; i < MAX_REQS; i++) {
    struct req *r = &s->r[i];

    u = view_units (s, r, exp);
    held += u;
    holders += u > 0;
    granted |= u > 0 && !(exp >= 0 ? r->in_exp_view : r->in_srv_view);
  }
  if (held <= cap || holders <= 1)
    sn->over = false;
  else if (exp < 0 && s->just_bound) {
    if (!sn->over)
      sim_cover.over_lowered++;
    sn->over = true;
  }
  else if (granted)
    sim_fail (s, "%s: a grant left %" PRIu64 " units of %" PRIu64
              " requests at the plugin, over the capacity %" PRIu64,
              name, held, holders, cap);
  else if (cap < sn->last_cap) {
    if (!sn->over)
      sim_cover.over_lowered++;
    sn->over = true;
  }
  else if (!sn->over)
    sim_fail (s, "%s: %" PRIu64 " units of %" PRIu64 " requests at the "
              "plugin, over the capacity %" PRIu64 ", which was not lowered "
              "under them", name, held, holders, cap);
  sn->last_cap = cap;
}

/* The budget's statistics against what the model saw: every grant
 * (admitted, charged, clamped: above the capacity in force), every
 * wait ended by a grant, every wait given up, the most units in
 * flight at once.
 */
/* The peak counts every grant: sampled before every step of the model
 * that may lower what is in flight, since each call into a budget
 * lowers it before it grants anything.
 */
static void
sample_peaks (struct sim *s)
{
  uint64_t u;
  int i;

  for (i = 0; i < s->nexp; i++) {
    u = __atomic_load_n (&s->e[i].b.word, __ATOMIC_SEQ_CST) &
      THROTTLE_BUDGET_MAX_UNITS;
    if (u > s->seen_exp[i].peak)
      s->seen_exp[i].peak = u;
  }
  u = __atomic_load_n (&s->server.word, __ATOMIC_SEQ_CST) &
    THROTTLE_BUDGET_MAX_UNITS;
  if (u > s->seen_srv.peak)
    s->seen_srv.peak = u;
}

static void
check_stats (struct sim *s, struct throttle_stats st, struct seen *sn,
             const char *name)
{
  if (st.in_flight > sn->peak)
    sn->peak = st.in_flight;
  if (!s->no_stats &&
      (st.admitted != sn->admitted || st.charged != sn->charged ||
      st.clamped != sn->clamped || st.waited != sn->waited ||
      st.cancelled != sn->cancelled || st.peak != sn->peak))
    sim_fail (s, "%s: stats admitted %" PRIu64 " charged %" PRIu64
              " clamped %" PRIu64 " waited %" PRIu64 " cancelled %" PRIu64
              " peak %" PRIu64 ", the model saw %" PRIu64 ", %" PRIu64 ", %"
              PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64, name,
              st.admitted, st.charged, st.clamped, st.waited, st.cancelled,
              st.peak, sn->admitted, sn->charged, sn->clamped, sn->waited,
              sn->cancelled, sn->peak);
}

static void
check_controllers (struct sim *s)
{
  int i;

  for (i = 0; i < s->nexp; i++) {
    struct export *e = &s->e[i];
    struct throttle_stats st;

    if (!e->adapt || s->shut)
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
  struct throttle_stats st;
  char name[32];
  int i;

  see_grants (s, eg, &sg);
  for (i = 0; i < s->nexp; i++) {
    snprintf (name, sizeof name, "export %d", i);
    st = check_budget (s, &s->e[i].b, name, eg[i]);
    check_plugin (s, i, &s->e[i].b, &s->seen_exp[i], name);
    check_stats (s, st, &s->seen_exp[i], name);
    if (throttle_budget_get_capacity (&s->server) <
        throttle_budget_get_capacity (&s->e[i].b))
      sim_cover.srv_below_exp++;
  }
  st = check_budget (s, &s->server, "server", sg);
  check_plugin (s, -1, &s->server, &s->seen_srv, "server");
  check_stats (s, st, &s->seen_srv, "server");
  for (i = 0; i < MAX_REQS; i++) {
    s->r[i].in_exp_view = view_units (s, &s->r[i], s->r[i].exp) > 0;
    s->r[i].in_srv_view = view_units (s, &s->r[i], -1) > 0;
  }
  s->just_bound = false;
  check_controllers (s);
}

/* A grant given back unpolled (throttle_budget_abandon, or a poll
 * after a shutdown) takes back its counts; the wait counts as
 * cancelled.
 */
static void
seen_gave_up (struct sim *s, const struct req *r)
{
  struct seen *sn;
  bool clamped;

  if (r->a.stage == THROTTLE_ADMIT_EXPORT) {
    sn = &s->seen_exp[r->exp];
    clamped = r->exp_clamped;
  }
  else if (r->a.stage == THROTTLE_ADMIT_SERVER) {
    sn = &s->seen_srv;
    clamped = r->srv_clamped;
  }
  else
    return;
  sn->cancelled++;
  /* Granted by the abandonment of a waiter ahead of it, in the same
   * drain of polls after a shutdown, and never seen by a check: the
   * grant and its undoing both left the counts as they were.
   */
  if (r->a.bw.w.granted &&
      (r->a.stage == THROTTLE_ADMIT_EXPORT ? r->exp_seen : r->srv_seen)) {
    sn->admitted--;
    sn->charged -= r->a.bw.w.got & THROTTLE_BUDGET_MAX_UNITS;
    sn->clamped -= clamped;
  }
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
  sim_set_capacity (s, &s->e[i].b, s->e[i].ctl.capacity, true);
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

/* Admit what is left of r (as the filter's serve loop does). */
void
sim_admit (struct sim *s, struct req *r)
{
  uint64_t need = need_of (s, r);
  int ret;

  r->exp_seen = r->srv_seen = false;
  r->exp_clamped = r->srv_clamped = false;
  r->in_exp_view = r->in_srv_view = false;
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
  if (ret == -1 && !s->shut)
    sim_fail (s, "admission failed without a shutdown");
  if (ret == -1) {
    if (r->a.stage != THROTTLE_ADMIT_DONE)
      sim_fail (s, "request %" PRIu64 ": a failed admission not done",
                r->id);
    sim_cover.shut_failed++;
    r->state = FREE;
    return;
  }
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
}

void
sim_poll (struct sim *s, struct req *r)
{
  enum throttle_admit_stage before = r->a.stage;
  bool granted = r->a.bw.w.granted;
  struct seen *sn = before == THROTTLE_ADMIT_EXPORT ? &s->seen_exp[r->exp] :
    &s->seen_srv;
  int ret;

  sample_peaks (s);
  if (s->shut)
    seen_gave_up (s, r);
  else if (granted)
    sn->waited++;
  ret = throttle_admit_poll (&r->a);
  if (ret == -1 && !s->shut)
    sim_fail (s, "poll failed without a shutdown");
  if (ret == -1) {
    if (r->a.stage != THROTTLE_ADMIT_DONE)
      sim_fail (s, "request %" PRIu64 ": a failed poll not done", r->id);
    sim_cover.shut_failed++;
    r->state = FREE;
    return;
  }
  if (before == THROTTLE_ADMIT_EXPORT && r->a.stage != THROTTLE_ADMIT_EXPORT)
    asked_server (s, r);
  sim_cover.at_server += r->a.stage == THROTTLE_ADMIT_SERVER &&
    before == THROTTLE_ADMIT_EXPORT;
  if (ret == 0) {
    r->state = RUNNING;
    r->admitted_ns = s->now;
  }
}

void
sim_complete (struct sim *s, struct req *r)
{
  struct export *e = &s->e[r->exp];
  uint32_t len = r->a.len;
  uint64_t latency = 0;
  bool failed = s->fail_in && pick (s, s->fail_in) == 0;

  sample_peaks (s);
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

    sim_apply (s, r->exp, throttle_adapt_tick (&e->ctl, s->now, &st),
           "window");
  }
  if (len < r->count)
    sim_cover.parts_granted++;
  if (len == 0 || len > r->count)
    sim_fail (s, "request %" PRIu64 ": a part of %" PRIu32 " bytes of %" PRIu32,
          r->id, len, r->count);
  if (failed) {
    /* No part starts after a failure: the request holds nothing and
     * asks nothing more.
     */
    sim_cover.failed++;
    sim_cover.failed_rest += len < r->count;
    sim_say (s, "  #%" PRIu64 ": its part of %" PRIu32 " bytes failed%s",
             r->id, len, len < r->count ? ": the rest is not admitted" : "");
    return;
  }
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
  s->just_bound = true;
}

void
sim_set_capacity (struct sim *s, struct throttle_budget *b, uint64_t cap,
                  bool by_controller)
{
  uint64_t old = throttle_budget_get_capacity (b);
  int i;

  for (i = 0; cap > old && i < MAX_REQS; i++) {
    struct req *r = &s->r[i];

    if (view_units (s, r, b == &s->server ? -1 : r->exp) > old &&
        (b == &s->server || b == &s->e[r->exp].b)) {
      if (by_controller)
        sim_cover.ctl_over_lone++;
      else
        sim_cover.set_over_lone++;
      break;
    }
  }
  throttle_budget_set_capacity (b, cap);
}

void
sim_shutdown (struct sim *s)
{
  int i;

  throttle_budget_shutdown (&s->server);
  for (i = 0; i < s->nexp; i++)
    throttle_budget_shutdown (&s->e[i].b);
  s->shut = true;
  sim_cover.shutdowns++;
}

void
sim_cancel (struct sim *s, struct req *r)
{
  sample_peaks (s);
  seen_gave_up (s, r);
  throttle_admit_abandon (&r->a);
  if (r->a.stage != THROTTLE_ADMIT_DONE)
    sim_fail (s, "abandoned admission not done");
  r->state = FREE;
}
