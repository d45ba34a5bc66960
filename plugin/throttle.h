/* nbdkit-throttle filter: what the filter's files share. */

#ifndef THROTTLE_H
#define THROTTLE_H

#include <stdbool.h>
#include <stdint.h>

#include "throttle-budget.h"
#include "throttle-metric.h"

/* -D throttle.verbose=1 */
extern int throttle_debug_verbose;

/* Configuration, fixed after config_complete. */
struct throttle_config {
  uint64_t capacity;          /* 0 = the metric's default */
  struct throttle_metric metric;
  bool charge_reads;
  bool split;                 /* serve large reads and writes in parts */
};
extern struct throttle_config throttle_config;

/* The throttle_cancel_fn of every wait: true once the server is
 * shutting down, never because of a client (see throttle-quit.c).
 */
extern bool throttle_cancelled (void *opaque);

#endif /* THROTTLE_H */
