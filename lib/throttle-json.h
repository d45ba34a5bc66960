/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the one string writer, for the control socket's
 * replies, throttle-load's report and the metrics' label values
 * (throttle-prom.h).
 */

#ifndef THROTTLE_JSON_H
#define THROTTLE_JSON_H

#include <stdbool.h>
#include <stdio.h>

/* Write s to fp quoted, as a JSON string if json, else as a label
 * value of the OpenMetrics text.  Whatever s holds (export names are
 * meant to be UTF-8, but nothing guarantees it), the output is valid:
 * " and \ are escaped with a backslash; in JSON the control characters
 * and DEL as \uXXXX, in a label value the newline as \n (the others
 * are valid there as they are); each byte that does not begin a valid
 * UTF-8 sequence becomes U+FFFD (an overlong form, a surrogate or a
 * code point above U+10FFFF is not valid).  The caller checks fp's
 * error state, as for any other write.
 */
extern void throttle_quote (FILE *fp, const char *s, bool json);

static inline void
throttle_json_string (FILE *fp, const char *s)
{
  throttle_quote (fp, s, true);
}

/* An error reply of the control socket: {"error":"..."} and a newline,
 * the message formatted as printf does and quoted as JSON.
 */
extern void throttle_json_error (FILE *fp, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3)));

#endif /* THROTTLE_JSON_H */
