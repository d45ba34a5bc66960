/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the configuration (see throttle-config.h). */

#include <config.h>

#include <nbdkit-filter.h>

#include "throttle-config.h"

/* -D throttle.verbose=1: log every admission that waited, and every
 * charge.
 */
NBDKIT_DLL_PUBLIC int throttle_debug_verbose = 0;

struct throttle_config throttle_config = { .split = true };
