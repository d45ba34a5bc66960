/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: sizes read as nbdkit reads them.
 * See throttle-size.h for the grammar and why there is one.
 */

#include <config.h>

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "throttle-size.h"

/* log2 of suffix c's multiplier, or -1 if c is not a suffix.  's' is
 * 512 (2^9): nbdkit's "sectors", whatever the disk's sector size.
 */
static int
suffix_shift (char c)
{
  switch (c) {
  case 'b': case 'B': return 0;
  case 's': case 'S': return 9;
  case 'k': case 'K': return 10;
  case 'm': case 'M': return 20;
  case 'g': case 'G': return 30;
  case 't': case 'T': return 40;
  case 'p': case 'P': return 50;
  case 'e': case 'E': return 60;
  default: return -1;
  }
}

int
throttle_size_parse (const char *str, int64_t *out,
                     const char **why, const char **where)
{
  const char *p = str;
  bool minus = false, over = false;
  uint64_t v = 0;
  int shift = 0;

  *where = str;
  /* The white space strtoimax skips in the C locale. */
  p += strspn (p, " \t\n\v\f\r");
  if (*p == '+' || *p == '-')
    minus = *p++ == '-';
  if (!(*p >= '0' && *p <= '9')) {
    *why = "not a number";
    return -1;
  }
  /* Saturate rather than wrap, so that a long run of digits is "too
   * large" (or "negative"), never a small number.
   */
  for (; *p >= '0' && *p <= '9'; p++) {
    unsigned d = *p - '0';

    if (v > ((uint64_t) INT64_MAX - d) / 10)
      over = true;
    else
      v = v * 10 + d;
  }
  /* nbdkit asks "negative?" before "too large?", and "-0" is 0. */
  if (minus && (v != 0 || over)) {
    *why = "negative";
    return -1;
  }
  if (over) {
    *why = "too large";
    return -1;
  }
  if (*p != '\0') {
    shift = suffix_shift (*p);
    /* One suffix letter and nothing after it: "4KiB", "1MB", "1.5M"
     * and "1 " are refused, as nbdkit refuses them.
     */
    if (shift == -1 || p[1] != '\0') {
      *where = p;
      *why = "unknown suffix";
      return -1;
    }
  }
  if (v > (uint64_t) INT64_MAX >> shift) {
    *why = "too large";
    return -1;
  }
  *out = (int64_t) (v << shift);
  return 0;
}
