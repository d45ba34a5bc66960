/* nbdkit-throttle filter: one budget per export name, shared by every
 * connection to that export.
 */

#ifndef THROTTLE_EXPORT_H
#define THROTTLE_EXPORT_H

#include "throttle-budget.h"

struct throttle_wb;

struct throttle_export {
  struct throttle_export *next;
  char *name;                 /* "" is the default export */
  struct throttle_budget budget;
  struct throttle_wb *wb;     /* throttle-mode=writeback, else NULL */
};

/* Find or create the export's budget.  NULL on allocation failure. */
extern struct throttle_export *throttle_export_get (const char *name,
                                                    uint64_t capacity);
/* Find without creating.  NULL if no client has opened it yet. */
extern struct throttle_export *throttle_export_find (const char *name);

typedef void (*throttle_export_fn) (struct throttle_export *exp, void *opaque);
extern void throttle_export_foreach (throttle_export_fn fn, void *opaque);

/* Fail every wait, then free everything (at unload). */
extern void throttle_export_free_all (void);

#endif /* THROTTLE_EXPORT_H */
