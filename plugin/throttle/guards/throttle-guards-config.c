/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the guards' parameters (see
 * throttle-guards-config.h).
 */

#include <config.h>

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <nbdkit-filter.h>

#include "throttle-guards-config.h"
#include "throttle-parse.h"

struct throttle_guards_params throttle_guards_params = {
  .swap = THROTTLE_GUARD_AUTO,
  .io_flusher = THROTTLE_GUARD_AUTO,
  .rt = THROTTLE_GUARD_AUTO,
  .oom = THROTTLE_GUARD_AUTO,
  .mlock = THROTTLE_LOCK_AUTO,
  .reserve = -1,
  .threads = DEFAULT_THREADS,
  .max_request = DEFAULT_MAX_REQUEST,
  .rt_hold = DEFAULT_RT_HOLD,
  .psi_path = "/proc/pressure/memory",
};

/* Set by .config only. */
static struct throttle_guards_params *const gp = &throttle_guards_params;

const char *const throttle_guard_words[] = { "off", "auto", "on", NULL };
/* In the order of enum throttle_lock_mode. */
static const char *const lock_words[] = {
  "off", "pool", "onfault", "auto", NULL
};

static int
parse_guard (const char *key, const char *value, unsigned given,
             enum throttle_guard_mode *mode)
{
  int i;

  if (throttle_parse_word (key, value, throttle_guard_words,
                           "expected auto, on or off", &i) == -1)
    return -1;
  *mode = i;
  gp->given |= given;
  return 1;
}

/* throttle-swap=MODE: every guard not given its own parameter takes
 * MODE (mlock's "on" is onfault, the reserve is none under "off").
 */
static int
parse_swap (const char *key, const char *value)
{
  int i;

  if (throttle_parse_word (key, value, throttle_guard_words,
                           "expected auto, on (require every guard, for "
                           "swap) or off (no guard, for ordinary "
                           "throttling)", &i) == -1)
    return -1;
  gp->swap = i;
  if (!(gp->given & THROTTLE_GIVEN_IO_FLUSHER))
    gp->io_flusher = i;
  if (!(gp->given & THROTTLE_GIVEN_RT))
    gp->rt = i;
  if (!(gp->given & THROTTLE_GIVEN_OOM))
    gp->oom = i;
  if (!(gp->given & THROTTLE_GIVEN_MLOCK))
    gp->mlock = i == THROTTLE_GUARD_OFF ? THROTTLE_LOCK_OFF :
      i == THROTTLE_GUARD_ON ? THROTTLE_LOCK_ONFAULT : THROTTLE_LOCK_AUTO;
  if (!(gp->given & THROTTLE_GIVEN_RESERVE))
    gp->reserve = i == THROTTLE_GUARD_OFF ? 0 : -1;
  return 1;
}

int
throttle_guards_config (const char *key, const char *value)
{
  int64_t size;
  int i;

  if (strcmp (key, "throttle-swap") == 0)
    return parse_swap (key, value);
  if (strcmp (key, "throttle-io-flusher") == 0)
    return parse_guard (key, value, THROTTLE_GIVEN_IO_FLUSHER,
                        &gp->io_flusher);
  if (strcmp (key, "throttle-rt") == 0)
    return parse_guard (key, value, THROTTLE_GIVEN_RT, &gp->rt);
  if (strcmp (key, "throttle-oom") == 0)
    return parse_guard (key, value, THROTTLE_GIVEN_OOM, &gp->oom);
  if (strcmp (key, "throttle-rt-hold") == 0)
    return throttle_parse_seconds (key, value, 0, 86400,
                                   "expected a number of seconds from 0 to "
                                   "86400", &gp->rt_hold);
  if (strcmp (key, "throttle-rt-pressure") == 0)
    return throttle_parse_path (key, value, "expected the absolute path of "
                                "a PSI file (/proc/pressure/memory, or a "
                                "cgroup's memory.pressure)", &gp->psi_path);
  if (strcmp (key, "throttle-mlock") == 0) {
    if (throttle_parse_word (key, value, lock_words,
                             "expected auto, onfault, pool or off", &i) == -1)
      return -1;
    gp->mlock = i;
    gp->given |= THROTTLE_GIVEN_MLOCK;
    return 1;
  }
  if (strcmp (key, "throttle-reserve") == 0) {
    /* Every size is good. */
    if (throttle_parse_size (key, value, 0, INT64_MAX, "", &size) == -1)
      return -1;
    gp->reserve = size;
    gp->reserve_text = value;
    gp->given |= THROTTLE_GIVEN_RESERVE;
    return 1;
  }
  if (strcmp (key, "throttle-threads") == 0)
    return throttle_parse_unsigned (key, value, 1, 1024,
                                    " (nbdkit's --threads value)",
                                    &gp->threads);
  if (strcmp (key, "throttle-max-request") == 0) {
    if (strcmp (value, "plugin") == 0) {
      gp->max_request_plugin = true;
      gp->max_request = NBDKIT_MAX_REQUEST;
      return 1;
    }
    if (throttle_parse_size (key, value, MIN_MAX_REQUEST, MAX_MAX_REQUEST,
                             "expected a size from 64K to 32M (the largest "
                             "read or write a client may send), or plugin",
                             &size) == -1)
      return -1;
    gp->max_request_plugin = false;
    gp->max_request = size;
    return 1;
  }
  return 0;
}

const char *
throttle_guards_key (unsigned given, const char *own_key)
{
  return gp->given & given ? own_key : "throttle-swap";
}

uint32_t
throttle_guards_max_request (void)
{
  return gp->max_request_plugin ? 0 : gp->max_request;
}

bool
throttle_guards_lock_pools (void)
{
  return gp->mlock != THROTTLE_LOCK_OFF;
}
