/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/throttle-prom.c and throttle_quote (Check): what
 * the OpenMetrics text format wants escaped in a label value, and its
 * numbers.  A real parser reads the filter's whole text in
 * tests/test-metrics.sh.
 */

#include <config.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <check.h>

#include "throttle-json.h"
#include "throttle-prom.h"
#include "check-main.h"

/* What the writer wrote, NUL-terminated, for the caller to free. */
#define WRITE(call)                                             \
  ({ char *buf_ = NULL; size_t len_;                            \
     FILE *fp = open_memstream (&buf_, &len_);                  \
     ck_assert_ptr_nonnull (fp);                                \
     call;                                                      \
     ck_assert_int_eq (fclose (fp), 0);                         \
     buf_; })

static void
expect_label (const char *value, const char *want)
{
  char *got = WRITE (throttle_quote (fp, value, false));

  ck_assert_str_eq (got, want);
  free (got);
}

START_TEST (test_label_value)
{
  expect_label ("", "\"\"");
  expect_label ("plain name", "\"plain name\"");
  expect_label ("a\"b", "\"a\\\"b\"");
  expect_label ("a\\b", "\"a\\\\b\"");
  expect_label ("\\\"", "\"\\\\\\\"\"");
  expect_label ("line\nnext", "\"line\\nnext\"");
  /* Other control characters are valid as they are. */
  expect_label ("tab\there\r\x01", "\"tab\there\r\x01\"");
  /* UTF-8 passes; a byte that does not begin it becomes U+FFFD. */
  expect_label ("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x92\xbe",
                "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x92\xbe\"");
  expect_label ("\xff", "\"\xef\xbf\xbd\"");
  expect_label ("\xc3", "\"\xef\xbf\xbd\"");
  expect_label ("\xc0\xaf", "\"\xef\xbf\xbd\xef\xbf\xbd\"");  /* overlong */
  expect_label ("\xed\xa0\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
}
END_TEST

START_TEST (test_lines)
{
  char *got;

  /* A counter is declared by its family's name, without _total
   * (OpenMetrics); a gauge by its samples'.
   */
  got = WRITE (throttle_prom_family (fp, "x_total", "counter", "Some help"));
  ck_assert_str_eq (got, "# HELP x Some help\n# TYPE x counter\n");
  free (got);
  got = WRITE (throttle_prom_family (fp, "y_total_units", "gauge", "Help"));
  ck_assert_str_eq (got, "# HELP y_total_units Help\n"
                    "# TYPE y_total_units gauge\n");
  free (got);
  got = WRITE (throttle_prom_sample (fp, "x", NULL, NULL, UINT64_MAX));
  ck_assert_str_eq (got, "x 18446744073709551615\n");
  free (got);
  got = WRITE (throttle_prom_sample (fp, "x", "export", "a\"", 0));
  ck_assert_str_eq (got, "x{export=\"a\\\"\"} 0\n");
  free (got);
  /* Nanoseconds as exact decimal seconds. */
  got = WRITE (throttle_prom_sample_ns (fp, "t", NULL, NULL, 0));
  ck_assert_str_eq (got, "t 0.000000000\n");
  free (got);
  got = WRITE (throttle_prom_sample_ns (fp, "t", "export", "", 1250000001));
  ck_assert_str_eq (got, "t{export=\"\"} 1.250000001\n");
  free (got);
  got = WRITE (throttle_prom_sample_ns (fp, "t", NULL, NULL, UINT64_MAX));
  ck_assert_str_eq (got, "t 18446744073.709551615\n");
  free (got);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("prom");
  TCase *tc = tcase_create ("prom");

  tcase_add_test (tc, test_label_value);
  tcase_add_test (tc, test_lines);
  suite_add_tcase (s, tc);
  return s;
}
