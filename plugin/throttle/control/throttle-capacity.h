/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the control socket's commands that change a
 * capacity: set capacity (an export's, through the latency target's
 * glue: with a target on it is the ceiling), set latency-target and set
 * server-capacity.  They keep every export's capacity within the
 * server's (throttle-config.h).
 */

#ifndef THROTTLE_CAPACITY_H
#define THROTTLE_CAPACITY_H

/* Add the commands to the control protocol, from .config_complete. */
extern int throttle_capacity_config_complete (void);

#endif /* THROTTLE_CAPACITY_H */
