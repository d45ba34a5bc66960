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

/* Execute one command line (without its newline; the caller has
 * checked it holds no NUL) and write its reply, one line of JSON with
 * its newline, to out; a blank line has no reply.  line is cut up in
 * place.  The one reply of several lines is that of "metrics": the
 * OpenMetrics text, whose last line is "# EOF" (THROTTLE_PROM_EOF);
 * its error is one line of JSON as any other.
 */
extern void throttle_control_execute (FILE *out, char *line);

/* What features add (their statistics, their "set" commands) is in
 * the core's tables (throttle-report.h): the protocol names none of
 * them.
 */

#endif /* THROTTLE_CONTROL_PROTO_H */
