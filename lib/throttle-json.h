/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the one JSON string writer, for the control
 * socket's replies and throttle-load's report; and the UTF-8 check it
 * shares with the metrics' label values (throttle-prom.h).
 */

#ifndef THROTTLE_JSON_H
#define THROTTLE_JSON_H

#include <stddef.h>
#include <stdio.h>

/* Write s to fp as a JSON string, with its quotes.  Whatever s holds
 * (export names are meant to be UTF-8, but nothing guarantees it), the
 * output is valid JSON: control characters and DEL are escaped, and
 * each byte that does not begin a valid UTF-8 sequence becomes U+FFFD.
 * The caller checks fp's error state, as for any other write.
 */
extern void throttle_json_string (FILE *fp, const char *s);

/* The length of the valid UTF-8 sequence that begins at s (1 to 4
 * bytes, s[0] >= 0x80; an overlong form, a surrogate or a code point
 * above U+10FFFF is not valid), or 0 if none does.  s is
 * NUL-terminated: the check stops at the first byte that does not
 * continue the sequence.
 */
extern size_t throttle_utf8_len (const unsigned char *s);

#endif /* THROTTLE_JSON_H */
