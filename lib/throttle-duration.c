/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: durations read one way.  See throttle-duration.h
 * for the grammar and why there is one.
 */

#include <config.h>

#include <stdint.h>
#include <string.h>

#include "throttle-duration.h"

/* The unit at s (the whole rest of the string): its length in decimal
 * digits of a nanosecond (9 for seconds, 0 for ns), or -1 if it is
 * not a unit.
 */
static int
unit_digits (const char *s)
{
  if (strcmp (s, "") == 0 || strcmp (s, "s") == 0)
    return 9;
  if (strcmp (s, "ms") == 0)
    return 6;
  if (strcmp (s, "us") == 0 || strcmp (s, "\xce\xbcs") == 0)
    return 3;
  if (strcmp (s, "ns") == 0)
    return 0;
  return -1;
}

int
throttle_parse_duration (const char *str, uint64_t *ns)
{
  const char *p = str, *frac = NULL, *unit;
  uint64_t whole = 0, part = 0, unit_ns = 1, v;
  int k, i;

  /* The digits first, to find where the unit begins. */
  p += strspn (p, "0123456789");
  if (*p == '.') {
    frac = ++p;
    p += strspn (p, "0123456789");
  }
  unit = p;
  /* At least one digit, before or after the point. */
  if (unit == str || (frac && unit - str == 1))
    return -1;
  k = unit_digits (unit);
  if (k == -1)
    return -1;
  for (i = 0; i < k; i++)
    unit_ns *= 10;

  for (p = str; *p >= '0' && *p <= '9'; p++) {
    if (whole > (UINT64_MAX - (*p - '0')) / 10)
      return -1;
    whole = whole * 10 + (*p - '0');
  }
  if (whole > UINT64_MAX / unit_ns)
    return -1;
  v = whole * unit_ns;

  /* The fraction's first k digits are whole nanoseconds; the next one
   * rounds (half up).
   */
  if (frac) {
    for (i = 0, p = frac; i < k; i++) {
      part = part * 10;
      if (p < unit)
        part += *p++ - '0';
    }
    if (p < unit && *p >= '5')
      part++;
    if (v > UINT64_MAX - part)
      return -1;
    v += part;
  }
  *ns = v;
  return 0;
}
