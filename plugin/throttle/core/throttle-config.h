/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the configuration every module reads.
 *
 * Set by throttle.c's .config and .config_complete; after that, read
 * only, except the two fields whose comments say who writes them.  No
 * lock: nbdkit calls .config_complete before any other thread of ours
 * exists.
 */

#ifndef THROTTLE_CONFIG_H
#define THROTTLE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "throttle-budget.h"
#include "throttle-metric.h"

/* -D throttle.verbose=1 */
extern int throttle_debug_verbose;

/* Configuration, fixed after config_complete. */
struct throttle_config {
  uint64_t capacity;          /* 0 = the metric's default */
  /* throttle-capacity and throttle-server-capacity as the user wrote
   * them (NULL: not given), for the messages that name them: an error
   * echoes a value as written, not as parsed.
   */
  const char *capacity_text, *server_capacity_text;
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
  bool charge_reads;           /* final once the guards are ready */
  /* throttle-reads as written (NULL: not given), and whether it said
   * true: the guards may charge reads without being asked.
   */
  const char *reads_text;
  bool reads_asked;
  bool split;                 /* serve large reads and writes in parts */
};
extern struct throttle_config throttle_config;

/* A capacity (or floor) given as key=text (value parsed), judged
 * against the metric, once it is loaded (throttle_capacity_judge): -1
 * after its one error line, else 0, after a warning if it can never be
 * reached.
 */
extern int throttle_check_capacity (const char *key, const char *text,
                                    uint64_t value);

/* --help for the core's parameters (their rows: throttle.c). */
#define throttle_core_config_help \
  "throttle-capacity=SIZE      Units allowed in flight per export\n" \
  "                            (default 16M for bytes).\n" \
  "throttle-server-capacity=SIZE  Units allowed in flight in the whole\n" \
  "                            server (default throttle-capacity).\n" \
  "throttle-metric=bytes|pages|requests|/path/metric.so\n" \
  "                            How requests are charged (default bytes).\n" \
  "throttle-reads=true|false   Charge reads too (default false).\n" \
  "throttle-split=true|false   Serve large reads and writes in parts\n" \
  "                            charged one by one (default true)."

#endif /* THROTTLE_CONFIG_H */
