/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the guards' parameters (see
 * throttle-guards-config.h).
 */

#include <config.h>

#include <stdbool.h>
#include <stdint.h>

#include <nbdkit-filter.h>

#include "throttle-guards-config.h"
#include "throttle-params.h"

struct throttle_guards_params throttle_guards_params = {
  .swap = THROTTLE_GUARD_AUTO,
  .threads = DEFAULT_THREADS,
  .max_request = DEFAULT_MAX_REQUEST,
  .rt_hold = DEFAULT_RT_HOLD,
  .psi_path = "/proc/pressure/memory",
};

static struct throttle_guards_params *const gp = &throttle_guards_params;

const char *const throttle_guard_words[] = { "off", "auto", "on", NULL };
/* In the order of enum throttle_lock_mode. */
static const char *const lock_words[] = {
  "off", "pool", "onfault", "auto", NULL
};
static const char *const plugin_word[] = { "plugin", NULL };

/* A guard that is auto, on or off. */
#define GUARD(key, field) \
  { key, THROTTLE_PARAM_WORD, &throttle_guards_params.field, \
    .words = throttle_guard_words, .why = "expected auto, on or off" }

const struct throttle_param throttle_guards_param_table[] = {
  { "throttle-swap", THROTTLE_PARAM_WORD, &throttle_guards_params.swap,
    .words = throttle_guard_words,
    .why = "expected auto, on (require every guard, for swap) or off (no "
    "guard, for ordinary throttling)" },
  GUARD ("throttle-io-flusher", io_flusher),
  GUARD ("throttle-rt", rt),
  GUARD ("throttle-oom", oom),
  { "throttle-rt-hold", THROTTLE_PARAM_SECONDS,
    &throttle_guards_params.rt_hold, .max = 86400 * THROTTLE_PARAM_S,
    .why = "expected a number of seconds from 0 to 86400" },
  { "throttle-rt-pressure", THROTTLE_PARAM_PATH,
    &throttle_guards_params.psi_path,
    .why = "expected the absolute path of a PSI file "
    "(/proc/pressure/memory, or a cgroup's memory.pressure)" },
  { "throttle-mlock", THROTTLE_PARAM_WORD, &throttle_guards_params.mlock,
    .words = lock_words, .why = "expected auto, onfault, pool or off" },
  { "throttle-reserve", THROTTLE_PARAM_SIZE, &throttle_guards_params.reserve,
    .text = &throttle_guards_params.reserve_text, .max = INT64_MAX },
  { "throttle-threads", THROTTLE_PARAM_NUMBER,
    &throttle_guards_params.threads, .min = 1, .max = 1024,
    .why = " (nbdkit's --threads value)" },
  { "throttle-max-request", THROTTLE_PARAM_SIZE,
    &throttle_guards_params.max_request, .min = MIN_MAX_REQUEST,
    .max = MAX_MAX_REQUEST, .words = plugin_word,
    .why = "expected a size from 64K to 32M (the largest read or write a "
    "client may send), or plugin" },
  { NULL }
};

int
throttle_guards_config_complete (void)
{
  enum throttle_guard_mode swap = gp->swap;

  if (!throttle_params_given ("throttle-io-flusher"))
    gp->io_flusher = swap;
  if (!throttle_params_given ("throttle-rt"))
    gp->rt = swap;
  if (!throttle_params_given ("throttle-oom"))
    gp->oom = swap;
  if (!throttle_params_given ("throttle-mlock"))
    gp->mlock = swap == THROTTLE_GUARD_OFF ? THROTTLE_LOCK_OFF :
      swap == THROTTLE_GUARD_ON ? THROTTLE_LOCK_ONFAULT : THROTTLE_LOCK_AUTO;
  if (!gp->reserve_text)
    gp->reserve = swap == THROTTLE_GUARD_OFF ? 0 : -1;
  if (gp->max_request == 0) {
    gp->max_request_plugin = true;
    gp->max_request = NBDKIT_MAX_REQUEST;
  }
  return 0;
}

const char *
throttle_guards_key (const char *own_key)
{
  return throttle_params_given (own_key) ? own_key : "throttle-swap";
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
