/* nbdkit-throttle filter: the control socket (throttle-control=SOCKET)
 * and the periodic statistics (throttle-stats-interval=SECS).
 *
 * Both are served by one thread of their own running a libev loop, so
 * that no operator, however slow or broken his client, can stall the
 * data path: the loop only ever takes the registry's and a budget's
 * locks for the time of a copy.
 *
 * When each hook is called, and why then: throttle-lifecycle.h.
 */

#ifndef THROTTLE_CONTROL_H
#define THROTTLE_CONTROL_H

#include <stddef.h>

#include "throttle-export.h"

/* 1 if key is one of ours and its value is good, 0 if it is not ours,
 * -1 after the one error line of a bad value (throttle-parse.h).
 */
extern int throttle_control_config (const char *key, const char *value);
extern int throttle_control_config_complete (void);
extern int throttle_control_after_fork (void);
/* Both stop the thread, close the clients and remove the socket; the
 * second call finds nothing left to do.
 */
extern void throttle_control_cleanup (void);
extern void throttle_control_unload (void);

#define throttle_control_config_help \
  "throttle-control=SOCKET     Serve stats and runtime changes on this\n" \
  "                            Unix socket (mode 0600).\n" \
  "throttle-stats-interval=SECS\n" \
  "                            Log stats every SECS seconds (with -v)."

/* Extra statistics: writeback mode's (pool use, pending writes, the
 * sticky error), the latency target's.  Each function added is called,
 * in the order added, from the control thread once
 * with exp == NULL for members of the top-level object, then once per
 * export.  It writes into buf (len bytes, at least 4096) zero or more
 * complete JSON members separated by commas, without a leading or
 * trailing comma, e.g.
 *   "pool_used":1048576,"pending_writes":3,"error":null
 * and NUL-terminates them.  Output that does not fit is dropped whole.
 * It must not block: it may run while the export registry is locked.
 * Add before after_fork (e.g. in config_complete); at most
 * THROTTLE_CONTROL_MAX_EXTRA functions.  The thread is
 * stopped by throttle_control_cleanup, so state the function reads may
 * be freed after that.
 */
typedef void (*throttle_control_extra_stats_fn) (struct throttle_export *exp,
                                                 char *buf, size_t len);
#define THROTTLE_CONTROL_MAX_EXTRA 4
extern void throttle_control_add_extra_stats (throttle_control_extra_stats_fn);

#endif /* THROTTLE_CONTROL_H */
