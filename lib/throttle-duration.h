/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: durations read one way, by the filter and the tools
 * (throttle-load -t, throttle-ctl watch), so that an operator need not
 * know which takes a unit.  The one grammar is nbdkit_parse_delay's
 * (nbdkit >= 1.40), so that a duration means what it means to nbdkit's
 * delay filter:
 *
 *   one or more decimal digits, optionally with a fraction ("1.5",
 *   ".5", "5."),
 *   then at most one unit:  none or "s" = seconds,  "ms",
 *     "us" or "\u03bcs" (micro sign, UTF-8) = microseconds,  "ns",
 *   and nothing after it.
 *
 * Refused: "", blanks anywhere, a sign, an exponent ("1e3"), hex,
 * "inf", "nan", any other unit ("5m", "1h", "5 ms").  The result is
 * rounded to the nearest nanosecond, exactly (no floating point:
 * "0.1s" is 100000000 ns); "0" and "0.1ns" are 0, which the caller
 * refuses or takes by its own rule.  Ranges are the caller's too: this
 * refuses only a duration over UINT64_MAX ns (584 years).
 *
 * Pure: no nbdkit headers, no locale.
 */

#ifndef THROTTLE_DURATION_H
#define THROTTLE_DURATION_H

#include <stdint.h>

/* The grammar in a phrase, for --help texts and error messages. */
#define THROTTLE_DURATION_GRAMMAR \
  "seconds (5, 0.5), or with a unit s, ms, us or ns " \
  "(2s, 500ms, 250us)"

/* Parse str, a NUL-terminated string (the caller's duty: not NULL).
 * Returns 0 and sets *ns, or returns -1 and leaves *ns alone; the
 * caller writes the message, naming what it was reading.
 */
extern int throttle_parse_duration (const char *str, uint64_t *ns);

#endif /* THROTTLE_DURATION_H */
