/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: a connection's data requests.
 *
 * A read, write, zero or trim is charged by the metric, admitted to its
 * export's budget and the server's (lib/throttle-admit.h), whole or a
 * first part at a time, and passed down: straight to the plugin, or to
 * the connection's ops where a feature stands between (write-behind).
 * A part's units are credited once the plugin has returned, or, for a
 * write the ops took over, when they say.  The parts of a request are
 * served one after another in the request's own thread, the one nbdkit
 * called the filter in: the plugin sees each as it would see the
 * request.
 */

#ifndef THROTTLE_SERVE_H
#define THROTTLE_SERVE_H

#include <stdbool.h>
#include <stdint.h>

#include <nbdkit-filter.h>

#include "throttle-admit.h"
#include "throttle-compat.h"
#include "throttle-export.h"
#include "throttle-feature.h"
#include "throttle-metric.h"

/* What a feature that stands between the core and the plugin does in
 * the plugin's place, for one connection (throttle_conn.ops).  Each
 * takes the state the feature gave with them; the core has charged the
 * request (and admitted it) before, and credits it after, except for a
 * write: pwrite owns 'charged' and must credit it to c->exp
 * (throttle_export_credit) exactly once, also when it fails.
 */
struct throttle_conn_ops {
  int (*pwrite) (void *state, nbdkit_next *next, const void *buf,
                 uint32_t count, uint64_t offset, uint32_t flags,
                 uint64_t charged, int *err);
  /* A read (buf), zero or trim (buf NULL). */
  int (*call) (void *state, nbdkit_next *next, enum throttle_op op, void *buf,
               uint32_t count, uint64_t offset, uint32_t flags, int *err);
  int (*flush) (void *state, nbdkit_next *next, uint32_t flags, int *err);
  int (*extents) (void *state, nbdkit_next *next, uint32_t count,
                  uint64_t offset, uint32_t flags,
                  struct nbdkit_extents *extents, int *err);
};

/* A connection: the filter's handle.  Its own, so no lock. */
struct throttle_conn {
  struct throttle_export *exp;  /* from throttle_export_open */
  /* NULL: the plugin is called directly.  Set by a feature's .open. */
  const struct throttle_conn_ops *ops;
  void *ops_state;
  /* The connection's admission policy, made once: throttle-config's
   * metric and split, and split_max (throttle_admit_split_max of the
   * layers below), 0, nothing split, until .prepare sets it.
   */
  struct throttle_admit_policy policy;
  uint32_t max_request;         /* throttle_max_request, fixed at open */
  struct throttle_pace pace;    /* nbdkit < 1.33.10: throttle-compat.h */
  void *state[THROTTLE_MAX_FEATURES]; /* each feature's, by its place */
};

/* The largest read or write a client may send (the block size this
 * filter advertises), 0 for no limit of ours.  Set by the guards
 * (throttle-max-request) before .get_ready ends.
 */
extern uint32_t throttle_max_request;

/* nbdkit's data callbacks, for the filter's table (throttle.c). */
extern int throttle_pread (nbdkit_next *next, void *handle, void *buf,
                           uint32_t count, uint64_t offset, uint32_t flags,
                           int *err);
extern int throttle_pwrite (nbdkit_next *next, void *handle, const void *buf,
                            uint32_t count, uint64_t offset, uint32_t flags,
                            int *err);
extern int throttle_zero (nbdkit_next *next, void *handle, uint32_t count,
                          uint64_t offset, uint32_t flags, int *err);
extern int throttle_trim (nbdkit_next *next, void *handle, uint32_t count,
                          uint64_t offset, uint32_t flags, int *err);
extern int throttle_flush (nbdkit_next *next, void *handle, uint32_t flags,
                           int *err);
extern int throttle_extents (nbdkit_next *next, void *handle, uint32_t count,
                             uint64_t offset, uint32_t flags,
                             struct nbdkit_extents *extents, int *err);

#endif /* THROTTLE_SERVE_H */
