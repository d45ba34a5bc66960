/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the latency target.
 *
 * Each export with a target has a controller (lib/throttle-adapt.c)
 * that moves its budget's capacity between the floor
 * (throttle-min-capacity) and the ceiling (throttle-capacity, or what
 * "set capacity" last set).  The reserve is sized for the ceiling and
 * stays so: the controller only ever asks for less.
 *
 * A request's latency runs from its admission (for a read that is not
 * charged, its arrival) to the plugin's return.  Not from its arrival:
 * the time spent waiting for credit is made by the controller itself,
 * and counting it would make every step down look like a reason for
 * another, down to the floor.  Writes in writeback mode are not
 * sampled: their reply comes before the backend has them.
 *
 * Windows end on time, not only at completions: while any export has
 * a target, a clock thread ticks every controller (throttle_adapt_tick)
 * twice a window, so that an export whose requests all wait, with
 * nothing in flight to complete, still sees its window end and its
 * capacity step back up.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nbdkit-filter.h>

#include "throttle-config.h"
#include "throttle-adapt.h"
#include "throttle-adapt-glue.h"
#include "throttle-clock.h"
#include "throttle-report.h"
#include "throttle-duration.h"
#include "throttle-export.h"
#include "throttle-feature.h"
#include "throttle-guards.h"
#include "throttle-guards-config.h"
#include "throttle-lock.h"
#include "throttle-params.h"
#include "throttle-parse.h"
#include "throttle-writeback.h"

/* Lock order (ae->lock, clock_lock): HACKING.md, "Locks". */

/* As blk-wbt's default window. */
#define WINDOW_NS (100 * 1000000ULL)
/* The clock's period: a window ends at most this late. */
#define TICK_NS (WINDOW_NS / 2)

NBDKIT_DLL_PUBLIC int throttle_debug_adapt = 0;

static uint64_t config_target_ns;       /* 0 = off */
static uint64_t config_floor;           /* 0 = the default */
static const char *config_floor_text;   /* as given, for its errors */
static const char *config_target_text;  /* as given, for its warning */

/* The clock thread.  Lock rule: clock_lock guards the four fields
 * below; a leaf, never held while the clock walks the exports.
 */
static pthread_mutex_t clock_lock = THROTTLE_LOCK_INITIALIZER;
static pthread_cond_t clock_cond;       /* CLOCK_MONOTONIC */
static pthread_t clock_thread;
static bool clock_started, clock_stop;
static unsigned targets_on;             /* exports with a target */

struct throttle_adapt_export {
  /* Lock rule: 'lock' guards every field below but 'target_ns', and is
   * taken by the request threads at each completion (only while a
   * target is set), by the clock and by the control thread; the
   * budget's lock and clock_lock nest inside it.
   */
  pthread_mutex_t lock;
  struct throttle_export *exp;  /* whose state this is */
  struct throttle_budget *budget;
  /* The target, 0 when off.  Written under the lock; read without it
   * (atomically) by the data path to decide whether to read the clock.
   */
  uint64_t target_ns;
  uint64_t floor, ceiling;
  struct throttle_adapt ctl;    /* valid while target_ns != 0 */
  uint64_t waited_mark;         /* the budget's 'waited' when the window began */
  uint64_t steps_down, steps_up;        /* since the start, over every target */
};

/* --- configuration ------------------------------------------------------- */

/* A target: a duration (lib/throttle-duration.h), at most an hour, or
 * "off" (*ns = 0).  On error, *why says what was wrong, for a message
 * that names the parameter or command.
 */
static int
parse_target (const char *value, uint64_t *ns, const char **why)
{
  if (strcmp (value, "off") == 0) {
    *ns = 0;
    return 0;
  }
  if (throttle_parse_duration (value, ns) == -1 || *ns > 3600000000000ULL) {
    *why = "expected a duration of at most 1 hour: seconds, or with a "
      "unit s, ms, us or ns (e.g. 5ms, 500us, 0.1), or off";
    return -1;
  }
  if (*ns == 0) {
    *why = "must be greater than 0 (off for no target)";
    return -1;
  }
  return 0;
}

static int
target_param (const char *key, const char *value)
{
  const char *why;

  if (parse_target (value, &config_target_ns, &why) == 0)
    return 0;
  nbdkit_error ("%s=%s: %s", key, value, why);
  return -1;
}

const struct throttle_param throttle_adapt_param_table[] = {
  { "throttle-latency-target", THROTTLE_PARAM_OWN, .text = &config_target_text,
    .parse = target_param },
  { "throttle-min-capacity", THROTTLE_PARAM_SIZE, &config_floor,
    .text = &config_floor_text, .min = 1, .max = INT64_MAX,
    .why = "must be greater than 0: a floor of 0 would let the capacity "
    "reach nothing" },
  { NULL }
};

static void *adapt_attach (struct throttle_export *exp);
static void adapt_detach (void *state);

static const struct throttle_export_feature adapt_feature = {
  .attach = adapt_attach,
  .detach = adapt_detach,
};

/* The slot of the latency target's state in every export, set by
 * throttle_adapt_config_complete before the first export is made.
 */
static unsigned adapt_slot;

static struct throttle_adapt_export *
adapt_of (struct throttle_export *exp)
{
  return exp->state[adapt_slot];
}

int
throttle_adapt_config_complete (void)
{
  uint64_t ceiling = throttle_config.capacity;
  uint64_t min = throttle_capacity_min (&throttle_config.metric);
  pthread_condattr_t attr;

  /* Before any export exists: a target turned on signals it. */
  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (&clock_cond, &attr);
  pthread_condattr_destroy (&attr);

  if (config_floor == 0) {
    /* A sixteenth: with the default 16M, four of the kernel's usual
     * 256K writeout requests in flight, so writeout still streams.
     * Never below what the metric's smallest request needs (the
     * capacity itself is at least that).
     */
    config_floor = ceiling / 16;
    if (config_floor < min)
      config_floor = min;
  }
  else if (config_floor < min) {
    char what[256], err[512];

    snprintf (what, sizeof what, "throttle-min-capacity=%s",
              config_floor_text);
    throttle_capacity_check (&throttle_config.metric, config_floor, what,
                             err, sizeof err);
    nbdkit_error ("%s", err);
    return -1;
  }
  else if (config_floor > ceiling) {
    if (throttle_config.capacity_text)
      nbdkit_error ("throttle-min-capacity=%s: above throttle-capacity=%s: "
                    "the floor cannot be above the ceiling",
                    config_floor_text, throttle_config.capacity_text);
    else
      nbdkit_error ("throttle-min-capacity=%s: above %" PRIu64 ", the "
                    "default throttle-capacity under throttle-metric=%s: "
                    "the floor cannot be above the ceiling",
                    config_floor_text, ceiling, throttle_config.metric.name);
    return -1;
  }
  if (config_target_ns)
    nbdkit_debug ("throttle: latency target %.3f ms: capacity from %" PRIu64
                  " to %" PRIu64 " units%s", config_target_ns / 1e6,
                  config_floor, ceiling,
                  throttle_writeback_enabled () ?
                  " (writeback: writes are not sampled)" : "");
  adapt_slot = throttle_export_add_feature (&adapt_feature);
  throttle_report_add (throttle_adapt_stats_json, NULL);
  return 0;
}

/* Why reads are charged, into buf: throttle-reads as written, or the
 * real-time guard's setting, or both; the parameters that uncharge
 * them into *fix.  The caller's duty: reads are charged
 * (throttle_config.charge_reads, final once the guards are ready).
 */
static void
reads_charged_by (char *buf, size_t len, const char **fix)
{
  const char *key = throttle_guards_key ("throttle-rt");
  bool rt = throttle_guards_rt_active ();
  bool asked = throttle_config.reads_asked;
  size_t n = 0;

  buf[0] = '\0';
  if (asked)
    n = snprintf (buf, len, "throttle-reads=%s%s", throttle_config.reads_text,
                  rt ? "; and " : "");
  if (rt && n < len) {
    if (throttle_guards_params.rt == THROTTLE_GUARD_ON)
      snprintf (buf + n, len - n, "%s=on: real-time request threads "
                "charge them", key);
    else
      snprintf (buf + n, len - n, "throttle-rt=auto: the request threads "
                "may become real-time here, and real-time threads charge "
                "them");
  }
  *fix = asked && rt ? "throttle-rt=off and throttle-reads=false" :
    rt ? "throttle-rt=off" : "throttle-reads=false";
}

int
throttle_adapt_get_ready (int thread_model)
{
  char why[256];
  const char *fix;

  if (config_target_ns == 0 || !throttle_config.charge_reads)
    return 0;
  reads_charged_by (why, sizeof why, &fix);
  throttle_warning ("throttle-latency-target=%s: reads are charged (%s): a "
                    "read waits for credit behind writes, on top of the "
                    "latency the target keeps, so the target cannot keep "
                    "reads within it; it protects uncharged reads only: "
                    "set %s", config_target_text, why, fix);
  return 0;
}

/* --- per export ---------------------------------------------------------- */

/* Called with an export's ae->lock held, when its target goes from
 * off to on (+1) or back (-1): the clock ticks while any is on.
 */
static void
count_target (int d)
{
  throttle_lock (&clock_lock);
  targets_on += d;
  pthread_cond_signal (&clock_cond);
  throttle_unlock (&clock_lock);
}

static throttle_sample_fn sample;

/* Called with ae->lock held: start a controller at the ceiling. */
static void
start_locked (struct throttle_adapt_export *ae, uint64_t target_ns)
{
  struct throttle_stats s;

  throttle_lock_assert_held (&ae->lock);
  throttle_adapt_init (&ae->ctl, ae->floor, ae->ceiling, target_ns,
                       WINDOW_NS, ae->ceiling, throttle_now_ns ());
  throttle_budget_get_stats (ae->budget, &s);
  ae->waited_mark = s.waited;
  throttle_budget_set_capacity (ae->budget, ae->ctl.capacity);
  __atomic_store_n (&ae->target_ns, target_ns, __ATOMIC_RELAXED);
  __atomic_store_n (&ae->exp->sample, sample, __ATOMIC_RELAXED);
  count_target (1);
}

/* The state of a new export, whose budget starts at its capacity
 * (throttle_export_feature's attach).
 */
static void *
adapt_attach (struct throttle_export *exp)
{
  struct throttle_budget *budget = &exp->budget;
  uint64_t capacity = throttle_budget_get_capacity (budget);
  struct throttle_adapt_export *ae = calloc (1, sizeof *ae);

  if (ae == NULL)
    return NULL;
  throttle_lock_init (&ae->lock);
  ae->exp = exp;
  ae->budget = budget;
  ae->floor = config_floor ? config_floor : 1;
  ae->ceiling = capacity;
  if (config_target_ns && ae->floor <= ae->ceiling) {
    throttle_lock (&ae->lock);
    start_locked (ae, config_target_ns);
    throttle_unlock (&ae->lock);
  }
  return ae;
}

static void
adapt_detach (void *state)
{
  struct throttle_adapt_export *ae = state;

  /* A named export's budget goes with its last connection, target on
   * or not.
   */
  if (__atomic_load_n (&ae->target_ns, __ATOMIC_RELAXED) != 0)
    count_target (-1);
  pthread_mutex_destroy (&ae->lock);
  free (ae);
}

/* --- the data path ------------------------------------------------------- */
/* The controller took 'step' (not THROTTLE_ADAPT_NONE): give its budget
 * the new capacity and count the step.  Called with ae->lock held: the
 * capacity the budget gets is then the controller's latest, never one
 * that a judgement or a tick on another thread has already replaced.
 * Returns the new capacity.
 */
static uint64_t
apply_step (struct throttle_adapt_export *ae, enum throttle_adapt_step step)
{
  throttle_budget_set_capacity (ae->budget, ae->ctl.capacity);
  if (step == THROTTLE_ADAPT_DOWN)
    ae->steps_down++;
  else
    ae->steps_up++;
  return ae->ctl.capacity;
}

static const char *
step_name (enum throttle_adapt_step step)
{
  return step == THROTTLE_ADAPT_DOWN ? "down" : "up";
}



/* The export's sampler (throttle_export.sample) while it has a target:
 * a request admitted at 'start' has been served and succeeded.
 */
static void
sample (struct throttle_export *exp, uint64_t start, enum throttle_op op)
{
  struct throttle_adapt_export *ae = adapt_of (exp);
  enum throttle_adapt_step step = THROTTLE_ADAPT_NONE;
  struct throttle_adapt_window w = { .judged = false };
  uint64_t now, before = 0, after = 0, target = 0;

  throttle_lock (&ae->lock);
  /* Read under the lock, so that the controller sees time go forward. */
  now = throttle_now_ns ();
  /* The target may have been turned off, or changed, since start:
   * a controller started later ignores what was admitted before it.
   */
  if (ae->target_ns &&
      throttle_adapt_sample (&ae->ctl, now, now - start,
                             op == THROTTLE_OP_READ)) {
    struct throttle_stats s;
    bool waiting;

    /* Work waited for credit in this window: some request was
     * admitted after waiting, or is waiting now.
     */
    throttle_budget_get_stats (ae->budget, &s);
    waiting = s.waited != ae->waited_mark || s.waiters > 0;
    ae->waited_mark = s.waited;
    before = ae->ctl.capacity;
    step = throttle_adapt_judge (&ae->ctl, now, waiting);
    if (step != THROTTLE_ADAPT_NONE) {
      after = apply_step (ae, step);
      w = ae->ctl.last;
      target = ae->target_ns;
    }
  }
  throttle_unlock (&ae->lock);

  if (step != THROTTLE_ADAPT_NONE && throttle_debug_adapt)
    nbdkit_debug ("throttle: adapt: export \"%s\": capacity %" PRIu64
                  " -> %" PRIu64 " (%s): %" PRIu64 " of %" PRIu64 " %s "
                  "over the %.3f ms target, mean %.3f ms, max %.3f ms, "
                  "window %.1f ms",
                  exp->name, before, after, step_name (step),
                  w.over_target, w.samples, w.reads ? "reads" : "requests",
                  target / 1e6, w.mean_ns / 1e6, w.max_ns / 1e6,
                  w.length_ns / 1e6);
}

/* --- the clock ----------------------------------------------------------- */

/* Called by the clock with the registry locked (throttle-export.c): end
 * the export's window if it is over, whether or not anything completed.
 */
static void
tick_export (struct throttle_export *exp, void *opaque)
{
  struct throttle_adapt_export *ae = adapt_of (exp);
  enum throttle_adapt_step step = THROTTLE_ADAPT_NONE;
  uint64_t before = 0, after = 0, waiters = 0, in_flight = 0;

  if (ae == NULL || __atomic_load_n (&ae->target_ns, __ATOMIC_RELAXED) == 0)
    return;
  throttle_lock (&ae->lock);
  if (ae->target_ns) {
    uint64_t window = ae->ctl.window_start_ns;
    struct throttle_stats s;

    throttle_budget_get_stats (ae->budget, &s);
    waiters = s.waiters;
    in_flight = s.in_flight;
    before = ae->ctl.capacity;
    step = throttle_adapt_tick (&ae->ctl, throttle_now_ns (),
                                waiters, in_flight);
    /* A window ended here: the next one counts its own waits. */
    if (ae->ctl.window_start_ns != window)
      ae->waited_mark = s.waited;
    if (step != THROTTLE_ADAPT_NONE)
      after = apply_step (ae, step);
  }
  throttle_unlock (&ae->lock);

  if (step != THROTTLE_ADAPT_NONE && throttle_debug_adapt)
    nbdkit_debug ("throttle: adapt: export \"%s\": capacity %" PRIu64
                  " -> %" PRIu64 " (%s): the window ended on time with %"
                  PRIu64 " waiting and %" PRIu64 " units in flight",
                  exp->name, before, after, step_name (step),
                  waiters, in_flight);
}

static void *
clock_main (void *arg)
{
  uint64_t next = 0;

  throttle_thread_enter ();
  throttle_lock (&clock_lock);
  while (!clock_stop) {
    uint64_t now;

    if (targets_on == 0) {
      pthread_cond_wait (&clock_cond, &clock_lock);
      continue;
    }
    now = throttle_now_ns ();
    if (now < next) {
      struct timespec ts = { .tv_sec = next / 1000000000,
                             .tv_nsec = next % 1000000000 };

      pthread_cond_timedwait (&clock_cond, &clock_lock, &ts);
      continue;
    }
    throttle_unlock (&clock_lock);
    throttle_export_foreach (tick_export, NULL);
    throttle_lock (&clock_lock);
    next = now + TICK_NS;
  }
  throttle_unlock (&clock_lock);
  return NULL;
}

/* Start the clock if it is not running: 0, or -1 with a message for
 * the operator in err.  After fork only.
 */
static int
start_clock (char *err, size_t errlen)
{
  int r = 0;

  throttle_lock (&clock_lock);
  if (!clock_started) {
    r = pthread_create (&clock_thread, NULL, clock_main, NULL);
    if (r != 0)
      snprintf (err, errlen, "cannot start the latency target's clock: "
                "pthread_create: %s", throttle_errtext (r));
    else
      clock_started = true;
  }
  throttle_unlock (&clock_lock);
  return r == 0 ? 0 : -1;
}

int
throttle_adapt_after_fork (void)
{
  char err[256];

  if (config_target_ns == 0)
    return 0;
  if (start_clock (err, sizeof err) == -1) {
    nbdkit_error ("throttle: %s", err);
    return -1;
  }
  return 0;
}

void
throttle_adapt_cleanup (void)
{
  bool started;

  throttle_lock (&clock_lock);
  started = clock_started;
  clock_stop = true;
  pthread_cond_signal (&clock_cond);
  throttle_unlock (&clock_lock);
  if (started)
    pthread_join (clock_thread, NULL);
  clock_started = false;
}

/* --- the control socket -------------------------------------------------- */

int
throttle_adapt_export_set_target (struct throttle_export *exp,
                                  const char *value, uint64_t *previous,
                                  char *err, size_t errlen)
{
  struct throttle_adapt_export *ae = adapt_of (exp);
  const char *why;
  uint64_t ns;

  if (parse_target (value, &ns, &why) == -1) {
    snprintf (err, errlen, "bad latency-target \"%s\": %s", value, why);
    return -1;
  }

  throttle_lock (&ae->lock);
  *previous = ae->target_ns;
  if (ns && ae->floor > ae->ceiling) {
    throttle_unlock (&ae->lock);
    snprintf (err, errlen, "cannot set a latency-target: the capacity %"
              PRIu64 " is below throttle-min-capacity=%" PRIu64
              ": raise it first with set capacity", ae->ceiling, ae->floor);
    return -1;
  }
  if (ns == 0) {
    /* Back to the fixed capacity, the ceiling. */
    if (ae->target_ns)
      count_target (-1);
    __atomic_store_n (&ae->target_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n (&exp->sample, NULL, __ATOMIC_RELAXED);
    throttle_budget_set_capacity (ae->budget, ae->ceiling);
  }
  else if (ae->target_ns == 0) {
    /* The first target set live: the clock was not needed before. */
    if (start_clock (err, errlen) == -1) {
      throttle_unlock (&ae->lock);
      return -1;
    }
    start_locked (ae, ns);
  }
  else {
    throttle_adapt_set_target (&ae->ctl, ns, throttle_now_ns ());
    __atomic_store_n (&ae->target_ns, ns, __ATOMIC_RELAXED);
  }
  throttle_unlock (&ae->lock);
  return 0;
}

int
throttle_adapt_export_set_ceiling (struct throttle_export *exp,
                                   uint64_t ceiling, uint64_t *previous,
                                   char *err, size_t errlen)
{
  struct throttle_adapt_export *ae = adapt_of (exp);

  throttle_lock (&ae->lock);
  *previous = ae->ceiling;
  if (ae->target_ns) {
    if (throttle_adapt_set_ceiling (&ae->ctl, ceiling,
                                    throttle_now_ns ()) == -1) {
      throttle_unlock (&ae->lock);
      snprintf (err, errlen, "capacity %" PRIu64 " is below "
                "throttle-min-capacity=%" PRIu64 ", the floor of the "
                "latency target (set latency-target EXPORT off first)",
                ceiling, ae->floor);
      return -1;
    }
    throttle_budget_set_capacity (ae->budget, ae->ctl.capacity);
  }
  else
    throttle_budget_set_capacity (ae->budget, ceiling);
  ae->ceiling = ceiling;
  throttle_unlock (&ae->lock);
  return 0;
}

uint64_t
throttle_adapt_export_ceiling (struct throttle_export *exp)
{
  struct throttle_adapt_export *ae = adapt_of (exp);
  uint64_t ceiling;

  throttle_lock (&ae->lock);
  ceiling = ae->ceiling;
  throttle_unlock (&ae->lock);
  return ceiling;
}

void
throttle_adapt_stats_json (FILE *fp, struct throttle_export *exp)
{
  struct throttle_adapt_export *ae = exp ? adapt_of (exp) : NULL;
  struct throttle_adapt_window w = { .judged = false };
  uint64_t target, floor, ceiling, down, up;

  if (ae == NULL)
    return;
  throttle_lock (&ae->lock);
  target = ae->target_ns;
  if (target)
    w = ae->ctl.last;
  floor = ae->floor;
  ceiling = ae->ceiling;
  down = ae->steps_down;
  up = ae->steps_up;
  throttle_unlock (&ae->lock);

  /* The effective capacity is the export's "capacity", read from the
   * budget: a copy here could disagree with it by a step.
   */
  if (target == 0) {
    fprintf (fp, ",\"adapt\":{\"latency_target_ns\":null,\"floor\":%" PRIu64
             ",\"ceiling\":%" PRIu64 ",\"steps_down\":%" PRIu64
             ",\"steps_up\":%" PRIu64 "}", floor, ceiling, down, up);
    return;
  }
  fprintf (fp, ",\"adapt\":{\"latency_target_ns\":%" PRIu64
           ",\"floor\":%" PRIu64 ",\"ceiling\":%" PRIu64 ",\"window\":",
           target, floor, ceiling);
  if (w.judged)
    fprintf (fp, "{\"judged_on\":\"%s\",\"length_ns\":%" PRIu64
             ",\"samples\":%" PRIu64 ",\"over_target\":%" PRIu64
             ",\"mean_ns\":%" PRIu64 ",\"max_ns\":%" PRIu64 "}",
             !w.decided ? "none" : w.reads ? "reads" : "all",
             w.length_ns, w.samples, w.over_target, w.mean_ns, w.max_ns);
  else
    fputs ("null", fp);
  fprintf (fp, ",\"steps_down\":%" PRIu64 ",\"steps_up\":%" PRIu64 "}",
           down, up);
}
