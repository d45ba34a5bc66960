/* nbdkit-throttle filter: the control socket's protocol, without the
 * socket: the tokenizer, the commands and their JSON replies (see
 * CONTROL SOCKET in nbdkit-throttle-filter(1)).  throttle-control.c
 * feeds it lines and sends what it writes.
 *
 * Everything here runs in the control thread, and takes no lock but
 * the export registry's and a budget's (or the latency target's), each
 * for the time of a copy.
 */

#ifndef THROTTLE_CONTROL_PROTO_H
#define THROTTLE_CONTROL_PROTO_H

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
 * place.
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

#endif /* THROTTLE_CONTROL_PROTO_H */
