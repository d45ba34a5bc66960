/* nbdkit-throttle filter: what the filter's files share. */

#ifndef THROTTLE_H
#define THROTTLE_H

#include <stdbool.h>
#include <stdint.h>

#include "throttle-budget.h"
#include "throttle-metric.h"

/* -D throttle.verbose=1 */
extern int throttle_debug_verbose;

struct throttle_export;

/* Configuration, fixed after config_complete. */
struct throttle_config {
  uint64_t capacity;          /* 0 = the metric's default */
  /* The server-wide budget (throttle-server-capacity): every charge to
   * an export's budget is also made to it, so that what is in flight
   * in the whole process is bounded whatever names clients use.  Made
   * in config_complete, never NULL after it; its capacity is never
   * below any export's (the control socket keeps it so).
   */
  struct throttle_budget *server;
  /* throttle-server-capacity was given, or set server-capacity used:
   * set capacity is refused above it.  Otherwise the server's bound
   * follows the largest capacity an export is set to, so that one
   * export behaves as if there were no server-wide bound.  After
   * config_complete, read and written by the control thread only.
   */
  bool server_capacity_set;
  struct throttle_metric metric;
  bool charge_reads;
  bool split;                 /* serve large reads and writes in parts */
};
extern struct throttle_config throttle_config;

/* The throttle_cancel_fn of every wait: true once the server is
 * shutting down, never because of a client (see throttle-quit.c).
 */
extern bool throttle_cancelled (void *opaque);

/* Give back the units of one admission to exp's budget and to the
 * server's: once per admission, from any thread (a writeback write's
 * are given back by the writer once it is on the backend).
 */
extern void throttle_credit (struct throttle_export *exp, uint64_t units);

#endif /* THROTTLE_H */
