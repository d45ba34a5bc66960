/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: is this server safe to serve swap now, the
 * guards and storage over a network (see throttle-verdict.h)?
 */

#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <nbdkit-filter.h>

#include "throttle-json.h"
#include "throttle-params.h"
#include "throttle-parse.h"
#include "throttle-prom.h"
#include "throttle-verdict.h"

/* The reasons, fixed: their names are the label values of the metrics
 * and the keys of stats' "unsafe", a contract with every dashboard.
 * The guards first, in their order, then the storage's: the vm
 * settings storage over a network needs, read when asked from
 * /proc/sys/vm/NAME, or for the tests from the file the environment
 * variable env names, as nbdkit's own tests stand files in through the
 * environment rather than through a parameter a user would see.
 */
enum {
  THROTTLE_SWAP_MIN_FREE = THROTTLE_GUARDS,
  THROTTLE_SWAP_BOOST,
  THROTTLE_SWAP_REASONS
};
static const struct {
  const char *reason, *name, *env;
} settings[] = {
  { "min-free-kbytes", "min_free_kbytes", "THROTTLE_MIN_FREE_FILE" },
  { "watermark-boost", "watermark_boost_factor", "THROTTLE_BOOST_FILE" },
};

static const char *
reason_name (size_t i)
{
  return i < THROTTLE_GUARDS ? throttle_guard_names[i] :
    settings[i - THROTTLE_GUARDS].reason;
}

/* What the start's report named (main thread only). */
static unsigned reported;

#define SEE "see SWAP SAFETY in nbdkit-throttle-filter(1)"

/* In the order of remote_words. */
enum remote_mode { REMOTE_FALSE, REMOTE_TRUE, REMOTE_AUTO };
static const char *const remote_words[] = { "false", "true", "auto", NULL };

/* Set by .config only, read in .get_ready. */
static enum remote_mode remote = REMOTE_AUTO;
/* The plugin's key that said the storage is remote, NULL if none did:
 * a literal, never the value, which may hold a password (curl's url=).
 */
static const char *remote_key;

const struct throttle_param throttle_verdict_param_table[] = {
  { "throttle-remote", THROTTLE_PARAM_WORD, &remote, .words = remote_words,
    .why = "expected auto, true or false" },
  { NULL }
};

/* Whether value starts with scheme (which ends in ':'), in any case,
 * as URI schemes are compared.
 */
static int
has_scheme (const char *value, const char *scheme)
{
  return strncasecmp (value, scheme, strlen (scheme)) == 0;
}

void
throttle_verdict_plugin_key (const char *key, const char *value)
{
  if (remote_key)
    return;
  /* nbdkit's nbd plugin: TCP to hostname=, or a URI naming a host;
   * nbd+unix:// and socket= are local, nbd+vsock:// is not TCP.
   */
  if (strcmp (key, "hostname") == 0)
    remote_key = "hostname";
  else if (strcmp (key, "uri") == 0 &&
           (has_scheme (value, "nbd:") || has_scheme (value, "nbds:")))
    remote_key = "uri";
  /* curl: any URL but a local file. */
  else if (strcmp (key, "url") == 0 && !has_scheme (value, "file:"))
    remote_key = "url";
  /* ssh. */
  else if (strcmp (key, "host") == 0)
    remote_key = "host";
}

/* The number of reason's setting, or -1 (and, if log, a debug line
 * saying why).
 */
static long
read_setting (size_t reason, bool log)
{
  const char *name = settings[reason - THROTTLE_GUARDS].name;
  const char *path = getenv (settings[reason - THROTTLE_GUARDS].env);
  char proc[64];
  FILE *fp;
  long v = -1;
  int err = 0;

  if (path == NULL || *path == '\0') {
    snprintf (proc, sizeof proc, "/proc/sys/vm/%s", name);
    path = proc;
  }
  fp = fopen (path, "r");
  if (fp == NULL)
    err = errno;
  else {
    if (fscanf (fp, "%ld", &v) != 1 || v < 0)
      v = -1;
    fclose (fp);
  }
  if (v == -1 && log)
    nbdkit_debug ("throttle: cannot read %s: %s: not checking vm.%s", path,
                  err ? throttle_errtext (err) : "not a number", name);
  return v;
}

/* Why the storage is remote, into why; 0, or -1 if it is not. */
static int
remote_why (char *why, size_t len)
{
  if (remote == REMOTE_TRUE)
    snprintf (why, len, "throttle-remote=true");
  else if (remote == REMOTE_AUTO && remote_key)
    snprintf (why, len, "the plugin's %s=", remote_key);
  else
    return -1;
  return 0;
}

/* The verdict now: the guards' reasons and, read now (not for the
 * writeout path), the storage's.
 */
struct verdict {
  unsigned missing;
  const char *why[THROTTLE_SWAP_REASONS];
  char min_free[256], boost[256];
};

static void
judge (struct verdict *v)
{
  char why[64];
  size_t i;
  long n;

  v->missing = 0;
  for (i = 0; i < THROTTLE_GUARDS; i++)
    if ((v->why[i] = throttle_guards_missing (i)) != NULL)
      v->missing |= 1u << i;
  if (remote_why (why, sizeof why) == -1)
    return;
  /* A file that cannot be read is no reason: get_ready said why. */
  n = read_setting (THROTTLE_SWAP_MIN_FREE, false);
  if (n != -1 && n < THROTTLE_REMOTE_MIN_FREE_KBYTES) {
    snprintf (v->min_free, sizeof v->min_free, "vm.min_free_kbytes is %ld, "
              "below %d, the least for storage over a network (%s): set "
              "sysctl vm.min_free_kbytes=%d", n,
              THROTTLE_REMOTE_MIN_FREE_KBYTES, why,
              THROTTLE_REMOTE_MIN_FREE_KBYTES);
    v->missing |= 1u << THROTTLE_SWAP_MIN_FREE;
    v->why[THROTTLE_SWAP_MIN_FREE] = v->min_free;
  }
  /* A kernel without the setting (before Linux 5.0) does not boost. */
  n = read_setting (THROTTLE_SWAP_BOOST, false);
  if (n > 0) {
    snprintf (v->boost, sizeof v->boost, "vm.watermark_boost_factor is %ld: "
              "a boost raises the min watermark above what a forwarded "
              "write can take (storage over a network: %s): set sysctl "
              "vm.watermark_boost_factor=0", n, why);
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
                   reason_name (i), v->why[i]);
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
void
throttle_verdict_stats_json (FILE *fp, struct throttle_export *exp)
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
    throttle_json_string (fp, reason_name (i));
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
void
throttle_verdict_metrics (FILE *fp)
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
    throttle_prom_sample (fp, UNSAFE, "reason", reason_name (i),
                          !!(v.missing & (1u << i)));
}

int
throttle_verdict_get_ready (int thread_model)
{
  struct verdict v;
  char why[64];
  long min_free, boost;

  if (remote_why (why, sizeof why) == 0) {
    min_free = read_setting (THROTTLE_SWAP_MIN_FREE, true);
    boost = read_setting (THROTTLE_SWAP_BOOST, true);
    nbdkit_debug ("throttle: storage over a network (%s): "
                  "vm.min_free_kbytes %ld, at least %d needed; "
                  "vm.watermark_boost_factor %ld, 0 needed",
                  why, min_free, THROTTLE_REMOTE_MIN_FREE_KBYTES, boost);
  }
  judge (&v);
  report (&v);
  reported = v.missing;
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
throttle_verdict_kernel_client (const char *why)
{
  struct verdict v;
  char text[2048];

  judge (&v);
  if (v.missing == 0)
    return;
  reasons (&v, text, sizeof text);
  nbdkit_error ("throttle: NOT SAFE for swap, yet a kernel nbd client "
                "attached (%s): a device of this machine served by this "
                "server can deadlock it under memory pressure; missing: %s; "
                SEE, why, text);
}
