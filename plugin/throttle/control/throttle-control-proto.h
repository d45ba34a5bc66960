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

/* A "set" command: "set NAME EXPORT VALUE" if per_export, else "set
 * NAME VALUE".  set writes the one reply line, {"ok":true,...} or
 * throttle_json_error's; exp is the named export's budget, held for the
 * call (NULL unless per_export), without the registry's lock: set may
 * call throttle_export_foreach_range.  It runs in the control thread and
 * must not block.  The table throttle_setters[], ending with a NULL
 * name, is in throttle-features.c, in the order help and the usage of
 * a bad set list them: the protocol names no command of a feature's.
 */
struct throttle_setter {
  const char *name;             /* "capacity" */
  const char *usage;            /* "set capacity EXPORT N" */
  bool per_export;
  void (*set) (FILE *out, struct throttle_export *exp, const char *value);
};
extern const struct throttle_setter throttle_setters[];

#endif /* THROTTLE_CONTROL_PROTO_H */
