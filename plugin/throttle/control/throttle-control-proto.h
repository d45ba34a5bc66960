/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the control socket's protocol, without the
 * socket: the tokenizer, the commands and their JSON replies (see
 * CONTROL SOCKET in nbdkit-throttle-filter(1)).  throttle-control.c
 * feeds it lines and sends what it writes.
 *
 * Everything here runs in the control thread; the locks it and the
 * features' stats and set functions take: HACKING.md, "Locks".
 */

#ifndef THROTTLE_CONTROL_PROTO_H
#define THROTTLE_CONTROL_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "throttle-export.h"

/* What a client may have queued for it, all replies together. */
#define THROTTLE_CONTROL_MAX_OUTPUT (4 * 1024 * 1024)

/* The stats give at most this many exports per line. */
#define THROTTLE_CONTROL_STATS_PAGE 100

/* Execute one command line (without its newline; the caller has
 * checked it holds no NUL) and write its reply, one line of JSON with
 * its newline, to out; a blank line has no reply.  line is cut up in
 * place.  The one reply of several lines is that of "metrics": the
 * OpenMetrics text, whose last line is "# EOF" (THROTTLE_PROM_EOF);
 * its error is one line of JSON as any other.
 */
extern void throttle_control_execute (FILE *out, char *line);

/* Write one line of JSON, with its newline, {"error":MESSAGE}. */
extern void throttle_control_reply_error (FILE *out, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3)));

/* The stats of one export (exp != NULL), or of a page of at most
 * THROTTLE_CONTROL_STATS_PAGE exports from the from'th, as one line of
 * JSON without the newline, into a buffer the caller frees.  Returns
 * NULL if memory ran out or the line would be longer than
 * THROTTLE_CONTROL_MAX_OUTPUT.
 */
extern char *throttle_control_stats (struct throttle_export *exp,
                                     size_t from);

/* What features add: the protocol names none of them, so that it
 * depends on nothing but the export registry.
 *
 * Who adds, and when: a feature, in nbdkit's main thread, from
 * .config_complete, .get_ready or .after_fork before
 * throttle_control_after_fork starts the control thread
 * (throttle-lifecycle.h), without a lock: only that thread reads the
 * tables, and starting it publishes them; nothing is added or removed
 * after.  A setter must have static storage: the table keeps the
 * pointer until unload.
 */

/* Extra statistics: writeback mode's (pool use, pending writes, the
 * sticky error), the latency target's.  Each function added is called,
 * in the order added, from the control thread once
 * with exp == NULL for members of the top-level object, then once per
 * export.  It writes into buf (len bytes, at least 4096) zero or more
 * complete JSON members separated by commas, without a leading or
 * trailing comma, e.g.
 *   "pool_used":1048576,"pending_writes":3,"error":null
 * and NUL-terminates them.  Output that does not fit is dropped whole.
 * It must not block, and must not call the registry: it may run with
 * the registry's lock held (a lock it takes for a copy is ordered
 * after that one: throttle-export.c).
 * At most THROTTLE_CONTROL_MAX_EXTRA functions; adding one twice adds
 * it once.  The thread is stopped by throttle_control_cleanup, so
 * state the function reads may be freed after that.
 */
typedef void (*throttle_control_extra_stats_fn) (struct throttle_export *exp,
                                                 char *buf, size_t len);
#define THROTTLE_CONTROL_MAX_EXTRA 4
extern void throttle_control_add_extra_stats (throttle_control_extra_stats_fn);

/* A "set" command a feature serves: "set NAME EXPORT VALUE" if
 * per_export, else "set NAME VALUE".  set writes the one reply line,
 * {"ok":true,...} or throttle_control_reply_error's; exp is the named
 * export's budget, held for the call (NULL unless per_export), without
 * the registry's lock: set may call throttle_export_foreach.  It
 * runs in the control thread and must not block.  The commands are
 * listed in help and in the usage of a bad set in the order added.
 */
struct throttle_control_setter {
  const char *name;             /* "capacity" */
  const char *usage;            /* "set capacity EXPORT N" */
  bool per_export;
  void (*set) (FILE *out, struct throttle_export *exp, const char *value);
};

#define THROTTLE_CONTROL_MAX_SETTERS 8
extern void throttle_control_add_setter
  (const struct throttle_control_setter *setter);

#endif /* THROTTLE_CONTROL_PROTO_H */
