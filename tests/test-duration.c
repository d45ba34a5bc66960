/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/throttle-duration.c (Check): the filter and the
 * tools read durations one way, nbdkit_parse_delay's.
 */

#include <config.h>

#include <stdint.h>
#include <stdlib.h>

#include <check.h>

#include "throttle-duration.h"
#include "check-main.h"

#define NS_S 1000000000ULL

/* Each input and what it reads as; -1 in ok: refused. */
static const struct {
  const char *str;
  int ok;
  uint64_t ns;
} cases[] = {
  /* A plain number is seconds, as in nbdkit_parse_delay. */
  { "0", 0, 0 },
  { "1", 0, NS_S },
  { "5", 0, 5 * NS_S },
  { "1.5", 0, 1500000000 },
  { ".5", 0, 500000000 },
  { "5.", 0, 5 * NS_S },
  { "0.1", 0, 100000000 },
  { "007", 0, 7 * NS_S },
  { "86400", 0, 86400 * NS_S },
  /* Units. */
  { "5s", 0, 5 * NS_S },
  { "0.25s", 0, 250000000 },
  { "5ms", 0, 5000000 },
  { "1.5ms", 0, 1500000 },
  { ".5ms", 0, 500000 },
  { "500us", 0, 500000 },
  { "1.2\xce\xbcs", 0, 1200 },          /* the micro sign, as nbdkit */
  { "100ns", 0, 100 },
  { "0ms", 0, 0 },
  /* Rounded to the nearest nanosecond, exactly. */
  { "0.1ns", 0, 0 },
  { "0.5ns", 0, 1 },
  { "1.0004us", 0, 1000 },
  { "1.0005us", 0, 1001 },
  { "0.0000000015", 0, 2 },
  { "0.0000000014999", 0, 1 },
  { "1.23456789012345s", 0, 1234567890 },
  /* The largest that fits, and one more. */
  { "18446744073709551615ns", 0, UINT64_MAX },
  { "18446744073709551616ns", -1, 0 },
  { "18446744073.709551615", 0, UINT64_MAX },
  { "18446744073.7095516155", -1, 0 },
  { "18446744074", -1, 0 },
  { "99999999999999999999999s", -1, 0 },
  /* Not durations. */
  { "", -1, 0 },
  { ".", -1, 0 },
  { ".s", -1, 0 },
  { "s", -1, 0 },
  { "ms", -1, 0 },
  { " 5", -1, 0 },
  { "5 ", -1, 0 },
  { "5 ms", -1, 0 },
  { "-5", -1, 0 },
  { "+5", -1, 0 },
  { "-0", -1, 0 },
  { "5m", -1, 0 },
  { "5h", -1, 0 },
  { "5S", -1, 0 },
  { "5MS", -1, 0 },
  { "5sec", -1, 0 },
  { "5mss", -1, 0 },
  { "5ms5", -1, 0 },
  { "1e3", -1, 0 },
  { "1e3ms", -1, 0 },
  { "0x10", -1, 0 },
  { "0x10ms", -1, 0 },
  { "inf", -1, 0 },
  { "infs", -1, 0 },
  { "nan", -1, 0 },
  { "1.2.3", -1, 0 },
  { "1,5", -1, 0 },
  { "fast", -1, 0 },
  { "\xce\xbc", -1, 0 },
  { "1\xce\xbc", -1, 0 },
};

START_TEST (test_cases)
{
  size_t i;

  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t ns = 12345;
    int r = throttle_parse_duration (cases[i].str, &ns);

    ck_assert_msg (r == cases[i].ok, "\"%s\": returned %d, expected %d",
                   cases[i].str, r, cases[i].ok);
    if (r == 0)
      ck_assert_msg (ns == cases[i].ns, "\"%s\": %llu ns, expected %llu",
                     cases[i].str, (unsigned long long) ns,
                     (unsigned long long) cases[i].ns);
    else
      /* A refusal leaves the result alone. */
      ck_assert_msg (ns == 12345, "\"%s\": refused, yet set to %llu",
                     cases[i].str, (unsigned long long) ns);
  }
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("duration");
  TCase *tc = tcase_create ("parse");

  tcase_add_test (tc, test_cases);
  suite_add_tcase (s, tc);
  return s;
}
