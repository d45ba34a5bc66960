/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the control socket (throttle-control=SOCKET),
 * the periodic statistics (throttle-stats-interval=SECS) and the
 * rewrites of the metrics file (throttle-metrics-file.h).
 *
 * All are served by one thread of their own running a libev loop, so
 * that no operator, however slow or broken his client, can stall the
 * data path: the loop takes only locks that no thread holds across a
 * plugin call or a wait, and each briefly (which: HACKING.md, "Locks").
 *
 * When each hook is called, and why then: throttle-features.c.
 */

#ifndef THROTTLE_CONTROL_H
#define THROTTLE_CONTROL_H

#include <stddef.h>

#include "throttle-params.h"

extern const struct throttle_param throttle_control_param_table[];
/* Binds the socket, so that a bad path stops the server before nbdkit
 * forks.
 */
extern int throttle_control_config_complete (void);
extern int throttle_control_after_fork (void);
/* Both stop the thread, close the clients and remove the socket; the
 * second call finds nothing left to do.
 */
extern void throttle_control_cleanup (void);
extern void throttle_control_unload (void);

#define throttle_control_config_help \
  "throttle-control=SOCKET     Serve stats and runtime changes on this\n" \
  "                            Unix socket (mode 0600).\n" \
  "throttle-stats-interval=SECS\n" \
  "                            Log stats every SECS seconds (with -v)."

#endif /* THROTTLE_CONTROL_H */
