/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the one JSON string writer, for the control
 * socket's replies and throttle-load's report.
 */

#ifndef THROTTLE_JSON_H
#define THROTTLE_JSON_H

#include <stdio.h>

/* Write s to fp as a JSON string, with its quotes.  Whatever s holds
 * (export names are meant to be UTF-8, but nothing guarantees it), the
 * output is valid JSON: control characters and DEL are escaped, and
 * each byte that does not begin a valid UTF-8 sequence becomes U+FFFD.
 * The caller checks fp's error state, as for any other write.
 */
extern void throttle_json_string (FILE *fp, const char *s);

#endif /* THROTTLE_JSON_H */
