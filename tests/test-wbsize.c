/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/throttle-wbsize.c (Check): how many writer threads
 * write-behind starts, and how many bounce buffers they share.
 */

#include <config.h>

#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "throttle-wbsize.h"
#include "check-main.h"

/* Under parallel, a full pool must drain at least as fast as one
 * writethrough connection writes: as many writers as nbdkit's request
 * threads (16 unless -t): 4 writers drained at 0.59x of writethrough
 * in bench case 4.
 */
START_TEST (test_parallel_default)
{
  const char *why = NULL;
  unsigned n = throttle_wbsize_writers (THROTTLE_WBSIZE_PARALLEL, 0, &why);

  ck_assert_uint_eq (n, THROTTLE_WBSIZE_NBDKIT_THREADS);
  ck_assert_uint_eq (n, 16);
  ck_assert_ptr_nonnull (why);
  ck_assert_ptr_nonnull (strstr (why, "parallel"));
}
END_TEST

START_TEST (test_serialized_defaults)
{
  const char *why = NULL;

  ck_assert_uint_eq (throttle_wbsize_writers
                     (THROTTLE_WBSIZE_SERIALIZE_REQUESTS, 0, &why),
                     THROTTLE_WBSIZE_SERIAL_WRITERS);
  ck_assert_ptr_nonnull (strstr (why, "serialize_requests"));
  /* One request at a time on the whole backend: more writers would
   * only wait for each other.
   */
  ck_assert_uint_eq (throttle_wbsize_writers
                     (THROTTLE_WBSIZE_SERIALIZE_ALL_REQUESTS, 0, NULL), 1);
  ck_assert_uint_eq (throttle_wbsize_writers
                     (THROTTLE_WBSIZE_SERIALIZE_CONNECTIONS, 0, NULL), 1);
}
END_TEST

/* throttle-writeback-threads wins under every model, within 1..max. */
START_TEST (test_requested)
{
  enum throttle_wbsize_model m;
  const char *why;

  for (m = THROTTLE_WBSIZE_SERIALIZE_CONNECTIONS;
       m <= THROTTLE_WBSIZE_PARALLEL; ++m) {
    why = NULL;
    ck_assert_uint_eq (throttle_wbsize_writers (m, 7, &why), 7);
    ck_assert_str_eq (why, "throttle-writeback-threads");
    ck_assert_uint_eq (throttle_wbsize_writers (m, 1, NULL), 1);
    ck_assert_uint_eq (throttle_wbsize_writers (m, THROTTLE_WBSIZE_MAX, NULL),
                       THROTTLE_WBSIZE_MAX);
    ck_assert_uint_eq (throttle_wbsize_writers (m, THROTTLE_WBSIZE_MAX + 1,
                                                NULL), THROTTLE_WBSIZE_MAX);
  }
}
END_TEST

/* Locked memory does not grow with the writer count: the writers'
 * bounce buffers hold at most THROTTLE_WBSIZE_BOUNCE_BYTES together,
 * each is a multiple of 4096 and no larger than the largest write.
 */
START_TEST (test_bounce)
{
  const size_t max_write = 2 * 1024 * 1024;
  unsigned w;

  ck_assert_uint_eq (THROTTLE_WBSIZE_BOUNCE_BYTES, 8 * 1024 * 1024);
  for (w = 1; w <= THROTTLE_WBSIZE_MAX; ++w) {
    size_t b = throttle_wbsize_bounce_size (w, max_write);

    ck_assert_uint_ge (b, 4096);
    ck_assert_uint_eq (b % 4096, 0);
    ck_assert_uint_le (b, max_write);
    ck_assert_uint_le ((size_t) w * b, THROTTLE_WBSIZE_BOUNCE_BYTES);
  }
  /* Up to 4 writers keep whole 2 MiB buffers, as before. */
  ck_assert_uint_eq (throttle_wbsize_bounce_size (1, max_write), max_write);
  ck_assert_uint_eq (throttle_wbsize_bounce_size (4, max_write), max_write);
  ck_assert_uint_eq (throttle_wbsize_bounce_size (16, max_write), 512 * 1024);
  ck_assert_uint_eq (throttle_wbsize_bounce_size (3, max_write), max_write);
  ck_assert_uint_eq (throttle_wbsize_bounce_size (5, max_write),
                     8 * 1024 * 1024 / 5 / 4096 * 4096);
  /* A pool smaller than 2 MiB bounds the largest write, and so this. */
  ck_assert_uint_eq (throttle_wbsize_bounce_size (16, 64 * 1024), 64 * 1024);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("wbsize");
  TCase *tc = tcase_create ("core");

  tcase_add_test (tc, test_parallel_default);
  tcase_add_test (tc, test_serialized_defaults);
  tcase_add_test (tc, test_requested);
  tcase_add_test (tc, test_bounce);
  suite_add_tcase (s, tc);
  return s;
}
