/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/throttle-size.c (Check): the tools read sizes as
 * the filter does, with nbdkit_parse_size's grammar.
 */

#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "throttle-size.h"
#include "check-main.h"

#define KiB 1024LL
#define MiB (1024 * KiB)
#define GiB (1024 * MiB)
#define TiB (1024 * GiB)
#define PiB (1024 * TiB)
#define EiB (1024 * PiB)

/* What nbdkit_parse_size returns for each input (-1: refused).  The
 * inputs are nbdkit's own test cases for its size parser
 * (common/include/human-size-test-cases.h in nbdkit 1.44.1, which
 * server/test-public.c runs against nbdkit_parse_size), each answer as
 * nbdkit_parse_size gives it for the whole string; then the cases
 * issue 32 names.  The unit test cannot call nbdkit_parse_size (it is
 * in the nbdkit server): tests/test-ctl.sh runs a table through the
 * filter and both tools.
 */
static const struct {
  const char *str;
  int64_t res;
} nbdkit_cases[] = {
  /* Bogus strings */
  { "", -1 },
  { " ", -1 },
  { "+ 1", -1 },
  { "garbage", -1 },
  /* A number and more: refused as a whole string */
  { "0junk", -1 },
  { "0garbage", -1 },
  { "1 1", -1 },
  { "1M 1", -1 },
  /* Overflow */
  { "9223372036854775808", -1 },
  { "18446744073709551614", -1 },
  { "18446744073709551615", -1 },
  { "18446744073709551616", -1 },
  { "999999999999999999999999", -1 },
  { "8E", -1 },
  { "8192P", -1 },
  /* Negative */
  { "-1", -1 },
  { "-2", -1 },
  { "-9223372036854775809", -1 },
  { "-9223372036854775808", -1 },
  { "-9223372036854775807", -1 },
  { "-18446744073709551616", -1 },
  { "-18446744073709551615", -1 },
  { "-18446744073709551614", -1 },
  /* Not (yet) nbdkit's grammar */
  { "0x0", -1 },
  { "M", -1 },
  { "1MB", -1 },
  { "1MiB", -1 },
  { "1.5M", -1 },
  { "1.5MB", -1 },
  /* Valid */
  { " -0", 0 },
  { "0", 0 },
  { "+0", 0 },
  { " 08", 8 },
  { "1", 1 },
  { "+1", 1 },
  { "1234567890", 1234567890 },
  { "+1234567890", 1234567890 },
  { "9223372036854775807", INT64_MAX },
  { "1s", 512 },
  { "2S", 1024 },
  { "1b", 1 },
  { "1B", 1 },
  { "1k", KiB },
  { "1K", KiB },
  { "1m", MiB },
  { "1M", MiB },
  { "+1M", MiB },
  { "1g", GiB },
  { "1G", GiB },
  { "1t", TiB },
  { "1T", TiB },
  { "1p", PiB },
  { "1P", PiB },
  { "8191p", 8191 * PiB },
  { "1e", EiB },
  { "1E", EiB },
  /* Issue 32: what the tools once took and nbdkit does not, and the
   * other way round.
   */
  { "4KiB", -1 },
  { "4KB", -1 },
  { "4k ", -1 },
  { "4kk", -1 },
  { "16E", -1 },
  { "7E", 7 * EiB },
  { "4k", 4 * KiB },
  { "\t\n 64M", 64 * MiB },
  { "-0k", 0 },
  { "- 1", -1 },
  { "-", -1 },
  { "+", -1 },
  { "1X", -1 },
  { "8589934591G", 8589934591 * GiB },  /* INT64_MAX rounded down */
  { "8589934592G", -1 },
  { "18014398509481983s", 18014398509481983LL * 512 },
  { "18014398509481984s", -1 },
};

START_TEST (test_nbdkit_cases)
{
  size_t i;

  for (i = 0; i < sizeof nbdkit_cases / sizeof nbdkit_cases[0]; i++) {
    const char *why = NULL, *where = NULL;
    int64_t out = -42;
    int r = throttle_size_parse (nbdkit_cases[i].str, &out, &why, &where);

    if (nbdkit_cases[i].res == -1) {
      ck_assert_msg (r == -1, "\"%s\" accepted as %lld, nbdkit refuses it",
                     nbdkit_cases[i].str, (long long) out);
      /* A refusal says why and leaves *out alone. */
      ck_assert_ptr_nonnull (why);
      ck_assert_ptr_nonnull (where);
      ck_assert_int_eq (out, -42);
    }
    else {
      ck_assert_msg (r == 0, "\"%s\" refused (%s), nbdkit takes it as %lld",
                     nbdkit_cases[i].str, why,
                     (long long) nbdkit_cases[i].res);
      ck_assert_msg (out == nbdkit_cases[i].res,
                     "\"%s\" is %lld, nbdkit reads %lld",
                     nbdkit_cases[i].str, (long long) out,
                     (long long) nbdkit_cases[i].res);
    }
  }
}
END_TEST

/* The reasons the tools print: the phrase, and the part it is about. */
START_TEST (test_reasons)
{
  const char *why, *where;
  const char *s;
  int64_t out;

  s = "";
  ck_assert_int_eq (throttle_size_parse (s, &out, &why, &where), -1);
  ck_assert_str_eq (why, "not a number");
  ck_assert_ptr_eq (where, s);

  s = "4KiB";
  ck_assert_int_eq (throttle_size_parse (s, &out, &why, &where), -1);
  ck_assert_str_eq (why, "unknown suffix");
  ck_assert_str_eq (where, "KiB");

  s = "1.5M";
  ck_assert_int_eq (throttle_size_parse (s, &out, &why, &where), -1);
  ck_assert_str_eq (why, "unknown suffix");
  ck_assert_str_eq (where, ".5M");

  s = "-1";
  ck_assert_int_eq (throttle_size_parse (s, &out, &why, &where), -1);
  ck_assert_str_eq (why, "negative");
  ck_assert_ptr_eq (where, s);

  s = "16E";
  ck_assert_int_eq (throttle_size_parse (s, &out, &why, &where), -1);
  ck_assert_str_eq (why, "too large");
  ck_assert_ptr_eq (where, s);

  s = "99999999999999999999";
  ck_assert_int_eq (throttle_size_parse (s, &out, &why, &where), -1);
  ck_assert_str_eq (why, "too large");

  s = "64Mjunk";
  ck_assert_int_eq (throttle_size_parse (s, &out, &why, &where), -1);
  ck_assert_str_eq (why, "unknown suffix");
  ck_assert_str_eq (where, "Mjunk");
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("size");
  TCase *tc = tcase_create ("parse");

  tcase_add_test (tc, test_nbdkit_cases);
  tcase_add_test (tc, test_reasons);
  suite_add_tcase (s, tc);
  return s;
}
