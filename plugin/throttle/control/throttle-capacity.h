/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the control socket's commands that change a
 * capacity: set capacity (an export's, through the latency target's
 * glue: with a target on it is the ceiling), set latency-target and set
 * server-capacity.  They keep every export's capacity within the
 * server's (throttle-config.h).
 */

#ifndef THROTTLE_CAPACITY_H
#define THROTTLE_CAPACITY_H

#include <stdio.h>

#include "throttle-export.h"

/* Setters (throttle-control-proto.h), listed in throttle-features.c. */
extern void throttle_control_set_capacity (FILE *out,
                                           struct throttle_export *exp,
                                           const char *value);
extern void throttle_control_set_latency_target (FILE *out,
                                                 struct throttle_export *exp,
                                                 const char *value);
extern void throttle_control_set_server_capacity
  (FILE *out, struct throttle_export *unused, const char *value);

#endif /* THROTTLE_CAPACITY_H */
