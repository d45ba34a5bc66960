/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: is this server safe to serve swap now (see
 * throttle-verdict.h)?
 */

#include <config.h>

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <nbdkit-filter.h>

#include "throttle-guards-config.h"
#include "throttle-json.h"
#include "throttle-parse.h"
#include "throttle-prom.h"
#include "throttle-remote.h"
#include "throttle-report.h"
#include "throttle-verdict.h"

/* In the order of enum throttle_swap_reason. */
static const char *const names[THROTTLE_SWAP_REASONS] = {
  "io-flusher", "rt", "oom", "mlock", "reserve", "min-free-kbytes",
  "watermark-boost",
};

/* The guards' reasons, a bit each, and their texts: a text is stored
 * before its bit is set, so whoever sees the bit sees its text.  No
 * lock: written by one thread at a time (the main thread, then the
 * control thread), read by any.
 */
static atomic_uint missing;
static _Atomic (const char *) whys[THROTTLE_SWAP_REASONS];
/* What the start's report named (main thread only). */
static unsigned reported;

#define SEE "see SWAP SAFETY in nbdkit-throttle-filter(1)"

void
throttle_verdict_missing (enum throttle_swap_reason reason, const char *why)
{
  atomic_store (&whys[reason], why);
  atomic_fetch_or (&missing, 1u << reason);
}

void
throttle_verdict_taken (enum throttle_swap_reason reason)
{
  atomic_fetch_and (&missing, ~(1u << reason));
}

/* The required guards refused since the last throttle_verdict_refusals,
 * in the order of the reasons (main thread only).
 */
static struct {
  char kv[64];                  /* "throttle-swap=on" */
  const char *fix;
  char what[512];
} refusals[THROTTLE_SWAP_REASONS];
static unsigned refused_mask;

void
throttle_verdict_refused (enum throttle_swap_reason reason, const char *key,
                          const char *value, const char *fix,
                          const char *fmt, ...)
{
  va_list ap;

  snprintf (refusals[reason].kv, sizeof refusals[reason].kv, "%s=%s",
            key, value);
  refusals[reason].fix = fix;
  va_start (ap, fmt);
  vsnprintf (refusals[reason].what, sizeof refusals[reason].what, fmt, ap);
  va_end (ap);
  refused_mask |= 1u << reason;
}

/* Whether a refusal before reason i has its key=value. */
static bool
said_before (size_t i)
{
  size_t j;

  for (j = 0; j < i; j++)
    if (refused_mask & (1u << j) &&
        strcmp (refusals[j].kv, refusals[i].kv) == 0)
      return true;
  return false;
}

int
throttle_verdict_refusals (void)
{
  char line[4096], fixes[512];
  size_t i, n = 0, f = 0, count = 0;
  bool all_swap = true, one_key = true;
  const char *first = NULL;

  if (refused_mask == 0)
    return 0;
  for (i = 0; i < THROTTLE_SWAP_REASONS; i++) {
    if (!(refused_mask & (1u << i)))
      continue;
    count++;
    if (strncmp (refusals[i].kv, "throttle-swap=", 14) != 0)
      all_swap = false;
    if (first == NULL)
      first = refusals[i].kv;
    else if (strcmp (first, refusals[i].kv) != 0)
      one_key = false;
  }
  /* One guard: as it always was said. */
  if (count == 1) {
    i = __builtin_ctz (refused_mask);
    refused_mask = 0;
    if (all_swap)
      nbdkit_error ("%s: %s; use throttle-swap=auto, or %s, to start "
                    "without it", refusals[i].kv, refusals[i].what,
                    refusals[i].fix);
    else
      nbdkit_error ("%s: %s; use %s to start without it", refusals[i].kv,
                    refusals[i].what, refusals[i].fix);
    return -1;
  }
  /* Several: every key=value that required one first, then each guard
   * with what refused it (and its key=value where they differ), then
   * the parameters that start without them.
   */
  line[0] = fixes[0] = '\0';
  for (i = 0; i < THROTTLE_SWAP_REASONS && n < sizeof line; i++) {
    if (!(refused_mask & (1u << i)) || said_before (i))
      continue;
    n += snprintf (line + n, sizeof line - n, "%s%s", n ? " " : "",
                   refusals[i].kv);
  }
  if (n < sizeof line)
    n += snprintf (line + n, sizeof line - n, ": %zu required guards "
                   "cannot be taken: ", count);
  count = 0;
  for (i = 0; i < THROTTLE_SWAP_REASONS && n < sizeof line; i++) {
    if (!(refused_mask & (1u << i)))
      continue;
    if (one_key)
      n += snprintf (line + n, sizeof line - n, "%s%s: %s",
                     count++ ? "; " : "", names[i], refusals[i].what);
    else
      n += snprintf (line + n, sizeof line - n, "%s%s (%s): %s",
                     count++ ? "; " : "", names[i], refusals[i].kv,
                     refusals[i].what);
    if (f < sizeof fixes)
      f += snprintf (fixes + f, sizeof fixes - f, "%s%s", f ? " " : "",
                     refusals[i].fix);
  }
  refused_mask = 0;
  if (all_swap)
    nbdkit_error ("%s; use throttle-swap=auto, or %s, to start without "
                  "them", line, fixes);
  else
    nbdkit_error ("%s; use %s to start without them", line, fixes);
  return -1;
}

/* The verdict now: the guards' reasons and, read now, the storage's. */
struct verdict {
  unsigned missing;
  const char *why[THROTTLE_SWAP_REASONS];
  char min_free[256];
  char boost[256];
};

static void
judge (struct verdict *v)
{
  size_t i;

  v->missing = atomic_load (&missing);
  for (i = 0; i < THROTTLE_SWAP_REASONS; i++)
    v->why[i] = v->missing & (1u << i) ? atomic_load (&whys[i]) : NULL;
  if (throttle_remote_min_free_low (v->min_free, sizeof v->min_free)) {
    v->missing |= 1u << THROTTLE_SWAP_MIN_FREE;
    v->why[THROTTLE_SWAP_MIN_FREE] = v->min_free;
  }
  if (throttle_remote_boost_on (v->boost, sizeof v->boost)) {
    v->missing |= 1u << THROTTLE_SWAP_BOOST;
    v->why[THROTTLE_SWAP_BOOST] = v->boost;
  }
}

/* "io-flusher (WHY); rt (WHY)" into buf. */
static void
reasons (const struct verdict *v, char *buf, size_t len)
{
  size_t i, n = 0;

  buf[0] = '\0';
  for (i = 0; i < THROTTLE_SWAP_REASONS && n < len; i++) {
    if (!(v->missing & (1u << i)))
      continue;
    n += snprintf (buf + n, len - n, "%s%s (%s)", n ? "; " : "",
                   names[i], v->why[i]);
  }
}

/* The one line at start. */
static void
report (const struct verdict *v)
{
  char text[2048];

  if (v->missing == 0) {
    nbdkit_debug ("throttle: safe for swap: every guard taken");
    return;
  }
  reasons (v, text, sizeof text);
  if (throttle_guards_params.swap == THROTTLE_GUARD_OFF)
    nbdkit_debug ("throttle: not safe for swap (throttle-swap=off: ordinary "
                  "throttling): %s", text);
  else
    throttle_warning ("not safe for swap: %s. For ordinary throttling set "
                      "throttle-swap=off; to make it safe, " SEE, text);
}

/* The control socket's top-level stats member "swap". */
static void
stats_json (FILE *fp, struct throttle_export *exp)
{
  struct verdict v;
  size_t i, n = 0;

  if (exp != NULL)
    return;
  judge (&v);
  fprintf (fp, ",\"swap\":{\"mode\":\"%s\",\"safe\":%s,\"unsafe\":{",
           throttle_guard_words[throttle_guards_params.swap],
           v.missing ? "false" : "true");
  for (i = 0; i < THROTTLE_SWAP_REASONS; i++) {
    if (!(v.missing & (1u << i)))
      continue;
    if (n++)
      putc (',', fp);
    throttle_json_string (fp, names[i]);
    putc (':', fp);
    throttle_json_string (fp, v.why[i]);
  }
  fputs ("}}", fp);
}

#define SAFE "nbdkit_throttle_swap_safe"
#define UNSAFE "nbdkit_throttle_swap_unsafe"

/* The verdict as two families: a 0/1 gauge, and one sample per reason
 * (1: it holds now), every reason always present so that a monitor
 * tells "taken" from "not reported".
 */
static void
metrics (FILE *fp)
{
  struct verdict v;
  size_t i;

  judge (&v);
  throttle_prom_family (fp, SAFE, "gauge",
                        "1 if this server is safe to serve swap now, 0 if "
                        "not (the reasons: " UNSAFE ")");
  throttle_prom_sample (fp, SAFE, NULL, NULL, v.missing == 0);
  throttle_prom_family (fp, UNSAFE, "gauge",
                        "1 for each reason this server is not safe to "
                        "serve swap now (stats has why)");
  for (i = 0; i < THROTTLE_SWAP_REASONS; i++)
    throttle_prom_sample (fp, UNSAFE, "reason", names[i],
                          !!(v.missing & (1u << i)));
}

int
throttle_verdict_get_ready (int thread_model)
{
  struct verdict v;

  judge (&v);
  report (&v);
  reported = v.missing;
  throttle_report_add (stats_json, metrics);
  return 0;
}

int
throttle_verdict_after_fork (void)
{
  struct verdict v;

  judge (&v);
  if (v.missing & ~reported)
    report (&v);
  reported = v.missing;
  return 0;
}

void
throttle_verdict_peer (enum throttle_rt_peer peer, const char *why)
{
  struct verdict v;
  char text[2048];

  if (peer != THROTTLE_RT_PEER_KERNEL)
    return;
  judge (&v);
  if (v.missing == 0)
    return;
  reasons (&v, text, sizeof text);
  nbdkit_error ("throttle: NOT SAFE for swap, yet a kernel nbd client "
                "attached (%s): a device of this machine served by this "
                "server can deadlock it under memory pressure; missing: %s; "
                SEE, why, text);
}
