/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the registry of budgets.
 *
 * Which budget: a connection is charged to the budget of the export
 * name nbdkit gives the filter's .open (the client's name, or the
 * plugin's default export name where the client asked for ""), and to
 * no other.  The rule looks at nothing but that name: not at what the
 * plugin lists, nor at what other clients did before, so two
 * connections to one name always share one bound.  (nbdkit 1.32 to
 * 1.44 show a filter the plugin's export list only in its own
 * .list_exports, when a client asks for the list; .open and .prepare
 * cannot ask, so a rule that depended on the list depended on
 * history.)  A client inventing names multiplies per-name bounds, not
 * what is in flight at the plugin: the server-wide bound, not the sum
 * over names, is what sizes the memory reserve.
 *
 * How long: the default export's budget ("") exists from start to
 * unload.  Every other budget is made by the first connection to its
 * name and freed when the last one closes, so invented names cost
 * memory only while their connections are open (as nbdkit's own
 * per-connection state does), with no cap to exhaust: a cap would let
 * any client, by holding names, refuse the names of everyone after
 * it, the kernel's included.  What a control command set on such a
 * budget (capacity, latency target) goes with it.  A handle keeps its
 * budget alive, so a handle's pointer to it stays valid until
 * throttle_export_close.
 *
 * Nothing here is called on the request path: a request uses the
 * budget its handle was given at open.
 */

#ifndef THROTTLE_EXPORT_H
#define THROTTLE_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "throttle-admit.h"
#include "throttle-budget.h"
#include "throttle-config.h"
#include "throttle-feature.h"

struct throttle_export;

/* An export's sampler: told that a request of op admitted at start_ns
 * (throttle_now_ns) has been served by the plugin and succeeded.  Any
 * request thread; must not block.
 */
typedef void throttle_sample_fn (struct throttle_export *exp,
                                 uint64_t start_ns, enum throttle_op op);

struct throttle_export {
  struct throttle_export *next;   /* in creation order; "" is first */
  char *name;                     /* "" is the default export */
  /* References: open connections plus control commands using it.
   * Guarded by the registry's lock.
   */
  size_t refs;
  size_t conns;                   /* open connections; atomic */
  bool permanent;                 /* "": never freed before unload */
  struct throttle_budget budget;
  /* NULL, or the latency target's sampler while the export has a
   * target: set and cleared by that feature at any time, read once per
   * request with a relaxed atomic load.
   */
  throttle_sample_fn *sample;
  /* Each feature's state (its export_attach, throttle-feature.h), at
   * its place in the features' table, made with the budget and freed
   * with it.
   */
  void *state[THROTTLE_MAX_FEATURES];
};

/* Create the default export's budget at 'capacity', which every
 * budget made later starts at too.  Call once, from .config_complete,
 * before anything else here.  -1 with errno on allocation failure.
 */
extern int throttle_export_init (uint64_t capacity);

/* .open: the budget of export 'name' (as .open received it), made at
 * 'capacity' if no connection has it open.  The caller must give it
 * back with throttle_export_close when the connection closes.  NULL
 * after nbdkit_error if memory ran out: refuse the connection.
 */
extern struct throttle_export *throttle_export_open (const char *name);
extern void throttle_export_close (struct throttle_export *exp);

/* The control socket: the budget of 'name' if one exists, NULL if
 * not, without making one; the caller must give it back with
 * throttle_export_put, and must not block in between.
 */
extern struct throttle_export *throttle_export_get (const char *name);
extern void throttle_export_put (struct throttle_export *exp);

typedef void (*throttle_export_fn) (struct throttle_export *exp, void *opaque);
/* fn for at most 'max' exports (SIZE_MAX: all), from the 'from'th (0
 * is the default export) in creation order, called with the registry
 * locked (so it may read refs): it must not block, nor call anything
 * here.  A budget freed between two calls moves the later ones one
 * place down.  Returns how many exports there are in all.
 */
extern size_t throttle_export_foreach_range (size_t from, size_t max,
                                             throttle_export_fn fn,
                                             void *opaque);

/* How many exports have a budget, the default one included. */
extern size_t throttle_export_count (void);

/* Fail every wait, then free everything (at unload). */
extern void throttle_export_free_all (void);

/* Give back the units of one admission to exp's budget and to the
 * server's: once per admission, from any thread (a writeback write's
 * are given back by the writer once it is on the backend).  Inline:
 * every request's credit comes here.  No units (a read not charged
 * under throttle-reads=false) make no call.
 */
static inline void
throttle_export_credit (struct throttle_export *exp, uint64_t units)
{
  if (units != 0)
    throttle_admit_credit (&exp->budget, throttle_config.server, units);
}

#endif /* THROTTLE_EXPORT_H */
