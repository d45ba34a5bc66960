/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the latency target (throttle-latency-target,
 * throttle-min-capacity), the glue between the data path and the
 * controller of lib/throttle-adapt.c.
 *
 * When each hook is called, and why then: throttle-features.c.
 */

#ifndef THROTTLE_ADAPT_GLUE_H
#define THROTTLE_ADAPT_GLUE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "throttle-params.h"

struct throttle_export;

extern const struct throttle_param throttle_adapt_param_table[];
extern int throttle_adapt_config_complete (void);
/* .get_ready, after the guards' (which decide whether reads are
 * charged): with a target configured and reads charged, the warning
 * that the target cannot protect them (nbdkit-throttle-design(1),
 * LATENCY TARGET), naming why they are and the parameter that
 * uncharges them.
 */
extern int throttle_adapt_get_ready (int thread_model);
/* Starts the clock that ends the controllers' windows on time, when a
 * target is configured (a target first set live starts it then).
 */
extern int throttle_adapt_after_fork (void);
/* Stops the clock. */
extern void throttle_adapt_cleanup (void);
/* Each export's controller, at the export's capacity, and the export's
 * sampler while a target is configured.
 */
extern void *throttle_adapt_export_attach (struct throttle_export *exp);
extern void throttle_adapt_export_detach (void *state);

#define throttle_adapt_config_help \
  "throttle-latency-target=DURATION|off\n" \
  "                            Move the capacity between the floor and\n" \
  "                            throttle-capacity to keep the latency of\n" \
  "                            reads within DURATION (default off).\n" \
  "throttle-min-capacity=SIZE  The floor (default throttle-capacity/16)."

/* The control socket's "set latency-target" (a struct throttle_setter's
 * set, throttle-control-proto.h).
 */
extern void throttle_adapt_export_set_target (FILE *out,
                                              struct throttle_export *exp,
                                              const char *value);
/* "set capacity": with a target, the ceiling (refused below the
 * floor); without, the capacity itself.  0 with the capacity replaced
 * in *previous, or -1 after the error reply on out.
 */
extern int throttle_adapt_export_set_ceiling (FILE *out,
                                              struct throttle_export *exp,
                                              uint64_t ceiling,
                                              uint64_t *previous);

/* The capacity "set capacity" last set (or throttle-capacity): with a
 * target, the ceiling; the most the export can have in flight.
 */
extern uint64_t throttle_adapt_export_ceiling (struct throttle_export *exp);

/* JSON members for the control socket (a report's json,
 * throttle-metrics.h).
 */
extern void throttle_adapt_stats_json (FILE *fp, struct throttle_export *exp);

#endif /* THROTTLE_ADAPT_GLUE_H */
