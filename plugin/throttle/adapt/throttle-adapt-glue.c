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
 * another, down to the floor.
 *
 * A window ends at the completion that finds it over, or on time: from
 * the first target on, a clock thread ticks every controller
 * (throttle_adapt_tick) twice a window, so that an export whose
 * requests all wait, with nothing in flight to complete, still sees
 * its window end and its capacity step back up.  Both end it through
 * the same call, end_window.  While no export has a target the clock
 * waits for one, rather than wake 20 times a second for nothing.
 */

#include <config.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nbdkit-filter.h>

#include "throttle-config.h"
#include "throttle-adapt.h"
#include "throttle-adapt-glue.h"
#include "throttle-clock.h"
#include "throttle-duration.h"
#include "throttle-export.h"
#include "throttle-feature.h"
#include "throttle-guards.h"
#include "throttle-json.h"
#include "throttle-lock.h"
#include "throttle-params.h"
#include "throttle-parse.h"

/* Lock order (ae->lock): HACKING.md, "Locks". */

/* As blk-wbt's default window. */
#define WINDOW_NS (100 * 1000000ULL)
/* The clock's period: a window ends at most this late. */
#define TICK_NS (WINDOW_NS / 2)
#define CLOCK_FAILED \
  "cannot start the latency target's clock: pthread_create: %s"

NBDKIT_DLL_PUBLIC int throttle_debug_adapt = 0;

static uint64_t config_target_ns;       /* 0 = off */
static uint64_t config_floor;           /* 0 = the default */
static const char *config_floor_text;   /* as given, for its errors */
static const char *config_target_text;  /* as given, for its warning */

/* The clock thread, started by the main thread (.after_fork) or the
 * control thread (a target first set live), which runs between the
 * two and stops before .cleanup joins it: clock_started needs no lock.
 */
static pthread_t clock_thread;
static bool clock_started;
/* Lock rule: clock_lock guards clock_targets (how many exports have a
 * target) and clock_stop; clock_cond is signalled when either changes.
 * A leaf: nothing is taken under it.
 */
static pthread_mutex_t clock_lock = THROTTLE_LOCK_INITIALIZER;
static pthread_cond_t clock_cond = PTHREAD_COND_INITIALIZER;
static size_t clock_targets;
static bool clock_stop;

struct throttle_adapt_export {
  /* Lock rule: 'lock' guards 'ctl', and is taken by the request
   * threads at each completion (only while a target is set), by the
   * clock and by the control thread; the budget's lock nests inside
   * it.
   */
  pthread_mutex_t lock;
  /* The controller, with a target (its window) or without (floor,
   * ceiling and the steps taken go on from one target to the next).
   */
  struct throttle_adapt ctl;
};

/* --- configuration ------------------------------------------------------- */

/* A target: a duration (lib/throttle-duration.h), at most an hour, or
 * "off" (*ns = 0).  NULL, or what was wrong, for a message that names
 * the parameter or command.
 */
static const char *
parse_target (const char *value, uint64_t *ns)
{
  *ns = 0;
  if (strcmp (value, "off") == 0)
    return NULL;
  if (throttle_parse_duration (value, ns) == -1 || *ns > 3600000000000ULL)
    return "expected a duration of at most 1 hour: seconds, or with a "
      "unit s, ms, us or ns (e.g. 5ms, 500us, 0.1), or off";
  return *ns == 0 ? "must be greater than 0 (off for no target)" : NULL;
}

static int
target_param (const char *key, const char *value)
{
  const char *why = parse_target (value, &config_target_ns);

  if (why)
    nbdkit_error ("%s=%s: %s", key, value, why);
  return why ? -1 : 0;
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

/* The place of the latency target's state in every export's state[]:
 * its place in the features' table (throttle-feature.h), found by
 * throttle_adapt_config_complete before the first export is made.
 */
static size_t adapt_slot;

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
  else if (config_floor < min)
    return throttle_check_capacity ("throttle-min-capacity",
                                    config_floor_text, config_floor);
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
                  " to %" PRIu64 " units", config_target_ns / 1e6,
                  config_floor, ceiling);
  while (throttle_features[adapt_slot]->export_attach !=
         throttle_adapt_export_attach)
    adapt_slot++;
  return 0;
}

int
throttle_adapt_get_ready (int thread_model)
{
  bool rt = throttle_guards_rt_active ();
  bool asked = throttle_config.reads_asked;
  char reads[128] = "", rt_on[128];
  const char *rt_why = "";

  if (config_target_ns == 0 || !throttle_config.charge_reads)
    return 0;
  /* Why reads are charged (final once the guards are ready):
   * throttle-reads as written, or the real-time guard's setting, or
   * both.
   */
  if (asked)
    snprintf (reads, sizeof reads, "throttle-reads=%s%s",
              throttle_config.reads_text, rt ? "; and " : "");
  if (rt && throttle_guards_params.rt == THROTTLE_GUARD_ON) {
    snprintf (rt_on, sizeof rt_on, "%s=on: real-time request threads "
              "charge them", throttle_guards_key ("throttle-rt"));
    rt_why = rt_on;
  }
  else if (rt)
    rt_why = "throttle-rt=auto: the request threads may become real-time "
      "here, and real-time threads charge them";
  throttle_warning ("throttle-latency-target=%s: reads are charged (%s%s): "
                    "a read waits for credit behind writes, on top of the "
                    "latency the target keeps, so the target cannot keep "
                    "reads within it; it protects uncharged reads only: "
                    "set %s", config_target_text, reads, rt_why,
                    asked && rt ? "throttle-rt=off and throttle-reads=false"
                    : rt ? "throttle-rt=off" : "throttle-reads=false");
  return 0;
}

/* --- per export ---------------------------------------------------------- */

static throttle_sample_fn sample;

/* Tell the clock that an export gained (+1) or lost (-1) a target, or
 * (stop) that .cleanup waits for it to end.
 */
static void
clock_tell (int targets, bool stop)
{
  throttle_lock (&clock_lock);
  clock_targets += targets;
  clock_stop |= stop;
  pthread_cond_signal (&clock_cond);
  throttle_unlock (&clock_lock);
}

/* The state of a new export, whose budget starts at its capacity, the
 * ceiling, which config_complete checked is not below the floor
 * (its export_attach, throttle-feature.h).
 */
void *
throttle_adapt_export_attach (struct throttle_export *exp)
{
  struct throttle_adapt_export *ae = calloc (1, sizeof *ae);
  uint64_t ceiling = throttle_budget_get_capacity (&exp->budget);

  if (ae == NULL)
    return NULL;
  throttle_lock_init (&ae->lock);
  throttle_adapt_init (&ae->ctl, config_floor, ceiling, config_target_ns,
                       WINDOW_NS, ceiling, throttle_now_ns ());
  if (config_target_ns) {
    __atomic_store_n (&exp->sample, sample, __ATOMIC_RELAXED);
    clock_tell (1, false);
  }
  return ae;
}

void
throttle_adapt_export_detach (void *state)
{
  struct throttle_adapt_export *ae = state;

  if (ae->ctl.target_ns)
    clock_tell (-1, false);
  pthread_mutex_destroy (&ae->lock);
  free (ae);
}

/* --- ending a window ------------------------------------------------------ */

/* Called with ae->lock held: end the export's window if it is over
 * (throttle_adapt_tick), and give its budget the new capacity: then
 * the capacity the budget gets is the controller's latest, never one
 * that a step on another thread has already replaced.  With -D
 * throttle.adapt=1 the step is logged here, under the lock: only that
 * debug line allocates under it.
 */
static void
end_window (struct throttle_export *exp, struct throttle_adapt_export *ae,
            uint64_t now)
{
  const struct throttle_adapt_window *w = &ae->ctl.last;
  uint64_t before = ae->ctl.capacity;
  bool judged = ae->ctl.all.n > 0;      /* else stalled, if it steps */
  enum throttle_adapt_step step;
  struct throttle_stats s;
  const char *dir;

  throttle_lock_assert_held (&ae->lock);
  throttle_budget_get_stats (&exp->budget, &s);
  step = throttle_adapt_tick (&ae->ctl, now, &s);
  if (step == THROTTLE_ADAPT_NONE)
    return;
  throttle_budget_set_capacity (&exp->budget, ae->ctl.capacity);
  if (!throttle_debug_adapt)
    return;
  dir = step == THROTTLE_ADAPT_DOWN ? "down" : "up";
  if (judged)
    nbdkit_debug ("throttle: adapt: export \"%s\": capacity %" PRIu64
                  " -> %" PRIu64 " (%s): %" PRIu64 " of %" PRIu64 " %s "
                  "over the %.3f ms target, mean %.3f ms, max %.3f ms, "
                  "window %.1f ms",
                  exp->name, before, ae->ctl.capacity, dir, w->over_target,
                  w->samples, w->reads ? "reads" : "requests",
                  ae->ctl.target_ns / 1e6, w->mean_ns / 1e6,
                  w->max_ns / 1e6, w->length_ns / 1e6);
  else
    nbdkit_debug ("throttle: adapt: export \"%s\": capacity %" PRIu64
                  " -> %" PRIu64 " (%s): the window ended on time with %"
                  PRIu64 " waiting and %" PRIu64 " units in flight",
                  exp->name, before, ae->ctl.capacity, dir, s.waiters,
                  s.in_flight);
}

/* The export's sampler (throttle_export.sample) while it has a target,
 * so that without one a request reads no clock: a request admitted at
 * 'start' has been served and succeeded.
 */
static void
sample (struct throttle_export *exp, uint64_t start, enum throttle_op op)
{
  struct throttle_adapt_export *ae = adapt_of (exp);
  uint64_t now;

  throttle_lock (&ae->lock);
  /* Read under the lock, so that the controller sees time go forward.
   * The target may have been turned off, or changed, since start: the
   * controller ignores what was admitted before.
   */
  now = throttle_now_ns ();
  if (throttle_adapt_sample (&ae->ctl, now, now - start,
                             op == THROTTLE_OP_READ))
    end_window (exp, ae, now);
  throttle_unlock (&ae->lock);
}

/* --- the clock ----------------------------------------------------------- */

/* Called by the clock with the registry locked (throttle-export.c): end
 * the export's window if it is over, whether or not anything completed.
 */
static void
tick_export (struct throttle_export *exp, void *opaque)
{
  struct throttle_adapt_export *ae = adapt_of (exp);

  if (__atomic_load_n (&exp->sample, __ATOMIC_RELAXED) == NULL)
    return;
  throttle_lock (&ae->lock);
  end_window (exp, ae, throttle_now_ns ());
  throttle_unlock (&ae->lock);
}

/* A tick every TICK_NS while an export has a target, until .cleanup:
 * it sleeps between them under no lock, and .cleanup waits for the one
 * under way.
 */
static void *
clock_main (void *arg)
{
  const struct timespec tick = { .tv_nsec = TICK_NS };
  bool stop = false;

  throttle_thread_enter ();
  while (!stop) {
    nanosleep (&tick, NULL);
    throttle_export_foreach_range (0, SIZE_MAX, tick_export, NULL);
    throttle_lock (&clock_lock);
    while (clock_targets == 0 && !clock_stop)
      pthread_cond_wait (&clock_cond, &clock_lock);
    stop = clock_stop;
    throttle_unlock (&clock_lock);
  }
  return NULL;
}

/* Start the clock if it is not running: 0, or pthread_create's error
 * (CLOCK_FAILED says it).  After fork, from the main thread or the
 * control thread (above).
 */
static int
start_clock (void)
{
  int r;

  if (clock_started)
    return 0;
  r = pthread_create (&clock_thread, NULL, clock_main, NULL);
  if (r != 0)
    return r;
  pthread_setname_np (clock_thread, "throttle-clock");
  clock_started = true;
  return 0;
}

int
throttle_adapt_after_fork (void)
{
  int r = config_target_ns ? start_clock () : 0;

  if (r != 0) {
    nbdkit_error ("throttle: " CLOCK_FAILED, throttle_errtext (r));
    return -1;
  }
  return 0;
}

void
throttle_adapt_cleanup (void)
{
  if (!clock_started)
    return;
  clock_tell (0, true);
  pthread_join (clock_thread, NULL);
  clock_started = false;
}

/* --- the control socket -------------------------------------------------- */

void
throttle_adapt_export_set_target (FILE *out, struct throttle_export *exp,
                                  const char *value)
{
  struct throttle_adapt_export *ae = adapt_of (exp);
  uint64_t ns, previous, ceiling;
  const char *why = parse_target (value, &ns);
  int r;

  if (why) {
    throttle_json_error (out, "bad latency-target \"%s\": %s", value, why);
    return;
  }
  /* The first target set live: the clock was not needed before. */
  r = ns ? start_clock () : 0;
  if (r != 0) {
    throttle_json_error (out, CLOCK_FAILED, throttle_errtext (r));
    return;
  }

  throttle_lock (&ae->lock);
  previous = ae->ctl.target_ns;
  ceiling = ae->ctl.ceiling;
  r = throttle_adapt_set_target (&ae->ctl, ns, throttle_now_ns ());
  if (r == 0) {
    throttle_budget_set_capacity (&exp->budget, ae->ctl.capacity);
    __atomic_store_n (&exp->sample, ns ? sample : NULL, __ATOMIC_RELAXED);
    clock_tell ((ns != 0) - (previous != 0), false);
  }
  throttle_unlock (&ae->lock);

  if (r == -1) {
    throttle_json_error (out, "cannot set a latency-target: the capacity %"
                         PRIu64 " is below throttle-min-capacity=%" PRIu64
                         ": raise it first with set capacity", ceiling,
                         config_floor);
    return;
  }
  nbdkit_debug ("throttle: control: export \"%s\" latency target %s",
                exp->name, value);
  fputs ("{\"ok\":true,\"export\":", out);
  throttle_json_string (out, exp->name);
  fputs (",\"latency_target\":", out);
  throttle_json_string (out, value);
  if (previous)
    fprintf (out, ",\"previous_ns\":%" PRIu64 "}\n", previous);
  else
    fputs (",\"previous_ns\":null}\n", out);
}

int
throttle_adapt_export_set_ceiling (FILE *out, struct throttle_export *exp,
                                   uint64_t ceiling, uint64_t *previous)
{
  struct throttle_adapt_export *ae = adapt_of (exp);
  int r;

  throttle_lock (&ae->lock);
  *previous = ae->ctl.ceiling;
  r = throttle_adapt_set_ceiling (&ae->ctl, ceiling, throttle_now_ns ());
  if (r == 0)
    throttle_budget_set_capacity (&exp->budget, ae->ctl.capacity);
  throttle_unlock (&ae->lock);
  if (r == -1)
    throttle_json_error (out, "capacity %" PRIu64 " is below "
                         "throttle-min-capacity=%" PRIu64 ", the floor of "
                         "the latency target (set latency-target EXPORT off "
                         "first)", ceiling, config_floor);
  return r;
}

uint64_t
throttle_adapt_export_ceiling (struct throttle_export *exp)
{
  struct throttle_adapt_export *ae = adapt_of (exp);
  uint64_t ceiling;

  throttle_lock (&ae->lock);
  ceiling = ae->ctl.ceiling;
  throttle_unlock (&ae->lock);
  return ceiling;
}

void
throttle_adapt_stats_json (FILE *fp, struct throttle_export *exp)
{
  struct throttle_adapt_export *ae = exp ? adapt_of (exp) : NULL;
  struct throttle_adapt c;
  const struct throttle_adapt_window *w = &c.last;

  if (ae == NULL)
    return;
  throttle_lock (&ae->lock);
  c = ae->ctl;
  throttle_unlock (&ae->lock);

  /* The effective capacity is the export's "capacity", read from the
   * budget: a copy here could disagree with it by a step.
   */
  if (c.target_ns == 0)
    fputs (",\"adapt\":{\"latency_target_ns\":null", fp);
  else
    fprintf (fp, ",\"adapt\":{\"latency_target_ns\":%" PRIu64, c.target_ns);
  fprintf (fp, ",\"floor\":%" PRIu64 ",\"ceiling\":%" PRIu64,
           c.floor, c.ceiling);
  if (c.target_ns && w->samples)
    fprintf (fp, ",\"window\":{\"judged_on\":\"%s\",\"length_ns\":%" PRIu64
             ",\"samples\":%" PRIu64 ",\"over_target\":%" PRIu64
             ",\"mean_ns\":%" PRIu64 ",\"max_ns\":%" PRIu64 "}",
             !w->decided ? "none" : w->reads ? "reads" : "all",
             w->length_ns, w->samples, w->over_target, w->mean_ns, w->max_ns);
  else if (c.target_ns)
    fputs (",\"window\":null", fp);
  fprintf (fp, ",\"steps_down\":%" PRIu64 ",\"steps_up\":%" PRIu64 "}",
           c.steps_down, c.steps_up);
}
