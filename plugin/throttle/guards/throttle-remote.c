/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: storage over a network needs
 * vm.min_free_kbytes raised and watermark boosting off (see
 * throttle-remote.h).
 */

#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <nbdkit-filter.h>

#include "throttle-parse.h"
#include "throttle-params.h"
#include "throttle-remote.h"

/* In the order of remote_words. */
enum remote_mode { REMOTE_FALSE, REMOTE_TRUE, REMOTE_AUTO };
static const char *const remote_words[] = { "false", "true", "auto", NULL };

/* Set by .config only, read in .get_ready. */
static enum remote_mode mode = REMOTE_AUTO;
/* The plugin's key that said the storage is remote, NULL if none did:
 * a literal, never the value, which may hold a password (curl's url=).
 */
static const char *remote_key;

const struct throttle_param throttle_remote_param_table[] = {
  { "throttle-remote", THROTTLE_PARAM_WORD, &mode, .words = remote_words,
    .why = "expected auto, true or false" },
  { NULL }
};

/* The settings, by enum throttle_remote_setting: read from
 * /proc/sys/vm/NAME, or for the tests from the file the environment
 * variable env names, as nbdkit's own tests stand files in through the
 * environment rather than through a parameter a user would see.
 */
static const struct {
  const char *name, *env;
} settings[] = {
  { "min_free_kbytes", "THROTTLE_MIN_FREE_FILE" },
  { "watermark_boost_factor", "THROTTLE_BOOST_FILE" },
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
throttle_remote_plugin_key (const char *key, const char *value)
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

/* The setting's number, or -1 (and, if log, a debug line saying why). */
static long
read_setting (enum throttle_remote_setting setting, bool log)
{
  const char *name = settings[setting].name;
  const char *path = getenv (settings[setting].env);
  char proc[64];
  FILE *fp;
  long v;

  if (path == NULL || *path == '\0') {
    snprintf (proc, sizeof proc, "/proc/sys/vm/%s", name);
    path = proc;
  }
  fp = fopen (path, "r");
  if (fp == NULL) {
    if (log)
      nbdkit_debug ("throttle: cannot read %s: %s: not checking vm.%s",
                    path, throttle_errtext (errno), name);
    return -1;
  }
  if (fscanf (fp, "%ld", &v) != 1 || v < 0) {
    if (log)
      nbdkit_debug ("throttle: cannot read %s: not a number: not checking "
                    "vm.%s", path, name);
    v = -1;
  }
  fclose (fp);
  return v;
}

/* Why the storage is remote, into why; 0, or -1 if it is not. */
static int
remote_why (char *why, size_t len)
{
  if (mode == REMOTE_TRUE)
    snprintf (why, len, "throttle-remote=true");
  else if (mode == REMOTE_AUTO && remote_key)
    snprintf (why, len, "the plugin's %s=", remote_key);
  else
    return -1;
  return 0;
}

int
throttle_remote_get_ready (int thread_model)
{
  char why[64];
  long min_free, boost;

  if (remote_why (why, sizeof why) == -1)
    return 0;
  min_free = read_setting (THROTTLE_REMOTE_MIN_FREE, true);
  boost = read_setting (THROTTLE_REMOTE_BOOST, true);
  nbdkit_debug ("throttle: storage over a network (%s): "
                "vm.min_free_kbytes %ld, at least %d needed; "
                "vm.watermark_boost_factor %ld, 0 needed",
                why, min_free, THROTTLE_REMOTE_MIN_FREE_KBYTES, boost);
  return 0;
}

int
throttle_remote_unsafe (enum throttle_remote_setting setting,
                        char *buf, size_t len)
{
  char why[64];
  long v;

  if (remote_why (why, sizeof why) == -1)
    return 0;
  v = read_setting (setting, false);
  if (setting == THROTTLE_REMOTE_BOOST && v > 0)
    snprintf (buf, len, "vm.watermark_boost_factor is %ld: a boost raises "
              "the min watermark above what a forwarded write can take "
              "(storage over a network: %s): set sysctl "
              "vm.watermark_boost_factor=0", v, why);
  else if (setting == THROTTLE_REMOTE_MIN_FREE && v != -1 &&
           v < THROTTLE_REMOTE_MIN_FREE_KBYTES)
    snprintf (buf, len, "vm.min_free_kbytes is %ld, below %d, the least "
              "for storage over a network (%s): set sysctl "
              "vm.min_free_kbytes=%d", v, THROTTLE_REMOTE_MIN_FREE_KBYTES,
              why, THROTTLE_REMOTE_MIN_FREE_KBYTES);
  else
    return 0;
  return 1;
}
