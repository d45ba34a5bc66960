/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-ctl: the throttle filter's control socket, from the shell. */

#ifndef CTL_H
#define CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json-reply.h"

/* ctl-conn.c */

/* Connect to the control socket PATH, send the command LINE (without
 * its newline) and read one reply line, all within TIMEOUT seconds.
 * Returns the parsed reply, a JSON object that is not an error reply,
 * and sets *RAW to the line as received (the caller frees both).  On
 * failure returns NULL with ERR saying what went wrong in words an
 * operator can act on: no socket, permission denied, nobody serving,
 * no reply in time, a reply that is not JSON, or the server's own
 * error message.
 */
extern json_object *ctl_ask (const char *path, const char *line,
                             double timeout, char **raw,
                             char *err, size_t errlen);

/* The same for a reply of several lines, text up to a line "# EOF"
 * (the metrics): returns it without its last newline (to free), or
 * NULL with ERR, which holds the server's error line as it came if it
 * refused.
 */
extern char *ctl_ask_text (const char *path, const char *line,
                           double timeout, char *err, size_t errlen);

/* ctl-format.c */

/* V units, compact: with a 1024-power suffix when the metric counts
 * bytes (exact when V is a multiple, one decimal otherwise), else the
 * plain number.  BUF holds at least 24 bytes.
 */
extern const char *ctl_format_units (uint64_t v, bool bytes,
                                     char *buf, size_t len);
/* A duration in nanoseconds as 850us, 12.2ms or 3.05s. */
extern const char *ctl_format_ns (double ns, char *buf, size_t len);
/* An export name as it would be typed back: "" for the default
 * export, bare when it is plain, otherwise quoted with \" and \\ (and
 * bytes below 0x20 as \xNN, which cannot be typed back).
 */
extern const char *ctl_format_export (const char *name, char *buf,
                                      size_t len);
/* The export name quoted for a command line of the protocol.  Returns
 * false if it cannot be sent (a newline or a carriage return in it).
 */
extern bool ctl_quote_export (const char *name, char *buf, size_t len);

/* ctl-rt.c */

/* One line on the server's real-time mode, from the "rt" member of
 * REPLY (nothing if it has none).
 */
extern void ctl_print_rt (json_object *reply);

/* ctl-stats.c */

extern int ctl_stats (const char *path, const char *export, bool json,
                      double timeout);
extern int ctl_watch (const char *path, double interval, long count,
                      bool json, double timeout);

#endif /* CTL_H */
