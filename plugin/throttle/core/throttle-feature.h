/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: how a feature attaches to the core.
 *
 * The core (this folder) bounds what is in flight; everything else
 * (the guards, write-behind, the latency target, the control socket,
 * the metrics file, the remote-storage checks, the swap verdict) is a
 * feature: a struct throttle_feature in the table throttle_features[]
 * (plugin/throttle/throttle-features.c, the one file that names them
 * all).  The core calls their hooks at nbdkit's lifecycle points, in
 * the table's order, and .cleanup, .unload and .close in reverse, so a
 * feature set up after another is taken down before it.  The table's
 * order and why it matters is written there.
 *
 * On the data path a feature gets three narrow doors, each costing the
 * core one test when nobody uses it:
 * - thread_enter: the first request a thread serves, and its first
 *   after throttle_threads_renew (the guards);
 * - the connection's ops (struct throttle_conn_ops, set by a feature's
 *   .open): write-behind stands between the core and the plugin;
 * - the export's sampler (throttle-export.h): the latency target
 *   hears how long each request took.
 *
 * Every hook may be NULL.  Those before .after_fork, .cleanup and
 * .unload run in nbdkit's main thread with no other thread of ours.
 */

#ifndef THROTTLE_FEATURE_H
#define THROTTLE_FEATURE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nbdkit-filter.h>

struct throttle_conn;
struct throttle_export;
struct throttle_param;

struct throttle_feature {
  /* .config: the feature's throttle-* parameters, a table ending with
   * a NULL key (throttle-params.h), or NULL.
   */
  const struct throttle_param *params;
  /* .config, for every key that is not the filter's, before it is
   * passed to the plugin.
   */
  void (*plugin_key) (const char *key, const char *value);
  /* .config_complete, once the metric and the capacities are known
   * and before any export's budget exists.  0, or -1 after
   * nbdkit_error.
   */
  int (*before_exports) (void);
  /* .config_complete, after the default export's budget exists:
   * misuse found here is reported before nbdkit forks.
   */
  int (*config_complete) (void);
  int (*get_ready) (int thread_model);
  int (*after_fork) (void);
  void (*cleanup) (void);
  void (*unload) (void);

  /* A budget made for an export (throttle-export.h), before the
   * control socket can find it, outside the registry's lock (in
   * .config_complete for "", else in the .open of the first connection
   * to the name): returns the feature's state for it, which the export
   * keeps in state[] at the feature's place in the table, or NULL with
   * errno to refuse the budget (and so the connection, or the start
   * for "").  export_detach is called with that state when the budget
   * is freed: no connection and no control command holds it then, and
   * at unload the registry's lock may be held.  Neither may call into
   * the registry, nor take a lock held while calling into it.
   */
  void *(*export_attach) (struct throttle_export *exp);
  void (*export_detach) (void *state);

  /* .list_exports: at most one feature may answer it (write-behind);
   * without one the plugin's list is passed on.
   */
  int (*list_exports) (nbdkit_next_list_exports *next, nbdkit_backend *nxdata,
                       int readonly, struct nbdkit_exports *exports);
  /* .open, before the plugin's open: may refuse the name (-1 after
   * nbdkit_error) and keep what it needs in *state for .close.
   */
  int (*preopen) (const char *exportname, void **state);
  /* .open, after the plugin's open and the export's budget: may set
   * c->ops.  -1 after nbdkit_error refuses the connection, with *state
   * as preopen left it (close is called).
   */
  int (*open) (struct throttle_conn *c, nbdkit_context *nxdata, int readonly,
               void **state);
  /* .finalize: 0, or -1 with nbdkit's error set. */
  int (*finalize) (void *state);
  /* .close, and a connection refused after this feature's preopen
   * succeeded (whether or not its open was called).
   */
  void (*close) (void *state);

  /* The calling thread's per-thread settings, from throttle_thread_enter's
   * slow path; 'first' on the thread's first call.
   */
  void (*thread_enter) (bool first);
};

/* The table, NULL-terminated, and how many it holds
 * (throttle-features.c).
 */
extern const struct throttle_feature *const throttle_features[];
extern const size_t throttle_nr_features;

/* .config_help: the core's parameters (throttle_core_config_help),
 * then each feature's (throttle-features.c).
 */
extern const char throttle_config_help[];

/* How many features there are at most: a connection keeps a state
 * pointer for each.
 */
#define THROTTLE_MAX_FEATURES 12

/* Per-thread settings.  Every request callback and every thread of
 * ours starts with throttle_thread_enter: a thread must carry the
 * guards before it can fault or allocate.  Its cost on every request:
 * a thread-local load and an atomic load.
 */
extern atomic_uint throttle_thread_generation;
extern __thread unsigned throttle_thread_seen
  __attribute__ ((tls_model ("initial-exec")));
extern void throttle_thread_enter_slow (unsigned gen);

static inline void
throttle_thread_enter (void)
{
  unsigned gen = atomic_load_explicit (&throttle_thread_generation,
                                       memory_order_acquire);

  if (__builtin_expect (throttle_thread_seen != gen, false))
    throttle_thread_enter_slow (gen);
}

/* Make every thread run its features' thread_enter again at its next
 * throttle_thread_enter (real-time switched on or off).  Any thread.
 */
extern void throttle_threads_renew (void);

#endif /* THROTTLE_FEATURE_H */
