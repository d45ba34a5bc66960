/* nbdkit-throttle filter: the registry of budgets.
 *
 * A budget bounds what is in flight on one set of data, so a name has
 * a budget of its own only if the plugin lists it as an export: most
 * plugins (memory, file=, throttle-disk, any without .list_exports)
 * serve the same data under every name, and a client must not
 * multiply the bound, nor grow the registry, by inventing names.
 * Every other name is charged to the default export's budget ("").
 *
 * nbdkit 1.32 shows a filter the plugin's list only in the filter's
 * own .list_exports, which runs when a client asks for the list
 * (NBD_OPT_LIST): .open is given no way to ask.  So the filter learns
 * the list as clients ask for it, and a name opened before the
 * plugin listed it is charged to the default budget.  Learned names
 * keep their budgets until unload; at most THROTTLE_MAX_EXPORTS
 * budgets exist, the default one included.
 */

#ifndef THROTTLE_EXPORT_H
#define THROTTLE_EXPORT_H

#include <stddef.h>

#include <nbdkit-filter.h>

#include "throttle-budget.h"

#define THROTTLE_MAX_EXPORTS 1024

struct throttle_wb;
struct throttle_adapt_export;

struct throttle_export {
  struct throttle_export *next;   /* in creation order; "" is first */
  struct throttle_export *hnext;  /* hash chain */
  char *name;                     /* "" is the default export */
  struct throttle_budget budget;
  struct throttle_wb *wb;         /* throttle-mode=writeback, else NULL */
  struct throttle_adapt_export *adapt;  /* the latency target's state */
};

/* Create the default export's budget at 'capacity', which every
 * budget made later starts at too.  Call once, from .config_complete,
 * before anything else here.  -1 with errno on allocation failure.
 */
extern int throttle_export_init (uint64_t capacity);

/* The budget a connection to export 'name' (as .open received it:
 * nbdkit has already replaced "" by the plugin's default export name)
 * is charged to: the name's own if the plugin has listed it, else the
 * default export's.  Never NULL after throttle_export_init.
 */
extern struct throttle_export *throttle_export_for_name (const char *name);

/* The filter's .list_exports: passes the next layer's list on
 * unchanged, and gives each name in it a budget.
 */
extern int throttle_export_list_exports (nbdkit_next_list_exports *next,
                                         nbdkit_backend *nxdata,
                                         int readonly, int is_tls,
                                         struct nbdkit_exports *exports);

/* Find without creating.  NULL if the name has no budget of its own. */
extern struct throttle_export *throttle_export_find (const char *name);

typedef void (*throttle_export_fn) (struct throttle_export *exp, void *opaque);
/* fn is called with the registry locked: it must not block. */
extern void throttle_export_foreach (throttle_export_fn fn, void *opaque);
/* The same for at most 'max' exports, from the 'from'th (0 is the
 * default export) in creation order, which never changes.  Returns how
 * many exports there are in all.
 */
extern size_t throttle_export_foreach_range (size_t from, size_t max,
                                             throttle_export_fn fn,
                                             void *opaque);

/* How many exports have a budget, the default one included. */
extern size_t throttle_export_count (void);

/* Fail every wait, then free everything (at unload). */
extern void throttle_export_free_all (void);

#endif /* THROTTLE_EXPORT_H */
