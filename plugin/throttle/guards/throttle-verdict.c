/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: is this server safe to serve swap now (see
 * throttle-verdict.h)?
 */

#include <config.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <nbdkit-filter.h>

#include "throttle-params.h"
#include "throttle-json.h"
#include "throttle-parse.h"
#include "throttle-prom.h"
#include "throttle-remote.h"
#include "throttle-report.h"
#include "throttle-verdict.h"

const char *const throttle_swap_reason_names[THROTTLE_SWAP_REASONS] = {
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

/* throttle-swap's mode: the guards include this header, and the
 * verdict reads the parameter, not the guards.
 */
static const char *
swap_mode (void)
{
  const char *mode = throttle_params_given ("throttle-swap");

  return mode ? mode : "auto";
}

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

/* The verdict now: the guards' reasons and, read now, the storage's. */
struct verdict {
  unsigned missing;
  const char *why[THROTTLE_SWAP_REASONS];
  char remote[2][256];          /* by enum throttle_remote_setting */
};

static void
judge (struct verdict *v)
{
  size_t i;

  v->missing = atomic_load (&missing);
  for (i = 0; i < THROTTLE_SWAP_REASONS; i++)
    v->why[i] = v->missing & (1u << i) ? atomic_load (&whys[i]) : NULL;
  for (i = 0; i < 2; i++)
    if (throttle_remote_unsafe (i, v->remote[i], sizeof v->remote[i])) {
      v->missing |= 1u << (THROTTLE_SWAP_MIN_FREE + i);
      v->why[THROTTLE_SWAP_MIN_FREE + i] = v->remote[i];
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
                   throttle_swap_reason_names[i], v->why[i]);
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
  if (strcmp (swap_mode (), "off") == 0)
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
           swap_mode (),
           v.missing ? "false" : "true");
  for (i = 0; i < THROTTLE_SWAP_REASONS; i++) {
    if (!(v.missing & (1u << i)))
      continue;
    if (n++)
      putc (',', fp);
    throttle_json_string (fp, throttle_swap_reason_names[i]);
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
    throttle_prom_sample (fp, UNSAFE, "reason", throttle_swap_reason_names[i],
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
