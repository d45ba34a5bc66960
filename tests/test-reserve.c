/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the heap reserve's size (lib/throttle-reserve.c): one
 * request buffer per worker, each as large as the largest request a
 * kernel client sends, and never more than half of RAM.
 */

#include <config.h>

#include <check.h>
#include <stdlib.h>

#include "throttle-reserve.h"
#include "check-main.h"

#define K 1024ULL
#define M (1024 * K)
#define KERNEL (1280 * K)

START_TEST (test_workers)
{
  /* Parallel: one buffer per thread; serialized or one thread: one. */
  ck_assert_uint_eq (throttle_reserve_default (true, 16, 4 * M, KERNEL),
                     16 * KERNEL);
  ck_assert_uint_eq (throttle_reserve_default (true, 4, 4 * M, KERNEL),
                     4 * KERNEL);
  ck_assert_uint_eq (throttle_reserve_default (false, 16, 4 * M, KERNEL),
                     KERNEL);
  ck_assert_uint_eq (throttle_reserve_default (true, 1, 4 * M, KERNEL),
                     KERNEL);
  ck_assert_uint_eq (throttle_reserve_default (true, 0, 4 * M, KERNEL),
                     KERNEL);
}
END_TEST

START_TEST (test_per_request)
{
  /* A smaller throttle-max-request bounds each buffer; a larger one
   * (or plugin's 64M) does not raise it past what the kernel sends.
   */
  ck_assert_uint_eq (throttle_reserve_default (true, 16, 64 * K, KERNEL),
                     16 * 64 * K);
  ck_assert_uint_eq (throttle_reserve_default (true, 16, KERNEL, KERNEL),
                     16 * KERNEL);
  ck_assert_uint_eq (throttle_reserve_default (true, 16, 64 * M, KERNEL),
                     16 * KERNEL);
  /* No overflow with the largest values the parameters accept. */
  ck_assert_uint_eq (throttle_reserve_default (true, 1024, 64 * M, 64 * M),
                     1024 * 64 * M);
}
END_TEST

START_TEST (test_fits)
{
  ck_assert (throttle_reserve_fits (0, 0));
  ck_assert (throttle_reserve_fits (512 * M, 1024 * M));
  ck_assert (!throttle_reserve_fits (512 * M + 1, 1024 * M));
  ck_assert (!throttle_reserve_fits (1, 1));
  ck_assert (throttle_reserve_fits (1, 3));
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("reserve");
  TCase *tc = tcase_create ("core");

  tcase_add_test (tc, test_workers);
  tcase_add_test (tc, test_per_request);
  tcase_add_test (tc, test_fits);
  suite_add_tcase (s, tc);
  return s;
}
