/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: sizes read as nbdkit reads them.
 *
 * `throttle-capacity=64M` must mean what `size=64M` means to any
 * nbdkit plugin.  The tools (throttle-ctl, throttle-load) cannot call
 * nbdkit_parse_size (it lives in the nbdkit server), and each once
 * had a parser of its own that took a different set of sizes: a size
 * an operator typed to one was refused by another.  The filter does
 * not call it either: it logs an error line of its own that names no
 * parameter, before the filter's.  This is the one grammar the
 * filter and the tools use, nbdkit_parse_size's as of nbdkit 1.32 to
 * 1.44 (human_size_parse in nbdkit's common/include/human-size.h),
 * written anew; tests/test-size.c checks it against nbdkit's own
 * table of cases.
 *
 * The grammar:
 *   optional leading white space (" \t\n\v\f\r"),
 *   an optional sign "+" or "-",
 *   one or more decimal digits,
 *   at most one suffix:  b B = 1,  s S = 512 (a "sector"),
 *     k K = 2^10, m M = 2^20, g G = 2^30, t T = 2^40, p P = 2^50,
 *     e E = 2^60,
 *   and nothing after it.
 * The result must lie in 0 .. INT64_MAX: "-0" is 0, any other negative
 * number is refused, as is a product that overflows (8E, 8192P).
 * Refused: "", "4KiB", "4KB", "1.5M", "0x10", "1 ", "M".
 *
 * Pure: no nbdkit headers, no locale (strtoimax's white space and
 * digits in the C locale, which is what nbdkit runs in).
 */

#ifndef THROTTLE_SIZE_H
#define THROTTLE_SIZE_H

#include <stdint.h>

/* Parse str, a NUL-terminated string (the caller's duty: not NULL).
 * Returns 0 and sets *out to the size in bytes, or returns -1, leaves
 * *out alone and sets *why to a static phrase saying what is wrong
 * ("not a number", "negative", "too large", "unknown suffix") and
 * *where to the part of str the phrase is about: the suffix for
 * "unknown suffix", else str itself.  why and where must not be NULL.
 * The caller writes the message, e.g. "bad size \"%s\": %s \"%s\"".
 */
extern int throttle_size_parse (const char *str, int64_t *out,
                                const char **why, const char **where);

#endif /* THROTTLE_SIZE_H */
