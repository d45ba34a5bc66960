/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/throttle-metric.c. */

#include <config.h>

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "throttle-metric.h"
#include "check-main.h"

static uint64_t
cost (throttle_metric_fn *fn, enum throttle_op op, uint32_t count,
      uint64_t offset)
{
  struct throttle_request r = { .op = op, .count = count, .offset = offset,
                                .exportname = "" };
  return fn (&r);
}

START_TEST (test_bytes)
{
  ck_assert_uint_eq (cost (throttle_metric_bytes, THROTTLE_OP_WRITE, 65536, 0), 65536);
  ck_assert_uint_eq (cost (throttle_metric_bytes, THROTTLE_OP_WRITE, 1, 7), 1);
  ck_assert_uint_eq (cost (throttle_metric_bytes, THROTTLE_OP_READ, 512, 0), 512);
  /* Zero and trim carry no payload but are work in flight: one page. */
  ck_assert_uint_eq (cost (throttle_metric_bytes, THROTTLE_OP_ZERO, 1 << 30, 0), 4096);
  ck_assert_uint_eq (cost (throttle_metric_bytes, THROTTLE_OP_TRIM, 1 << 30, 0), 4096);
  ck_assert_uint_eq (cost (throttle_metric_bytes, THROTTLE_OP_FLUSH, 0, 0), 0);
  ck_assert_uint_eq (cost (throttle_metric_bytes, THROTTLE_OP_CACHE, 4096, 0), 0);
  ck_assert_uint_eq (cost (throttle_metric_bytes, THROTTLE_OP_EXTENTS, 4096, 0), 0);
}
END_TEST

START_TEST (test_pages)
{
  /* Pages touched, like the seed patch's bi_vcnt. */
  ck_assert_uint_eq (cost (throttle_metric_pages, THROTTLE_OP_WRITE, 4096, 0), 1);
  ck_assert_uint_eq (cost (throttle_metric_pages, THROTTLE_OP_WRITE, 4096, 1), 2);
  ck_assert_uint_eq (cost (throttle_metric_pages, THROTTLE_OP_WRITE, 1, 4095), 1);
  ck_assert_uint_eq (cost (throttle_metric_pages, THROTTLE_OP_WRITE, 2, 4095), 2);
  ck_assert_uint_eq (cost (throttle_metric_pages, THROTTLE_OP_WRITE, 65536, 0), 16);
  ck_assert_uint_eq (cost (throttle_metric_pages, THROTTLE_OP_WRITE, 0, 0), 0);
  ck_assert_uint_eq (cost (throttle_metric_pages, THROTTLE_OP_WRITE, 512, UINT64_C(1) << 40), 1);
  ck_assert_uint_eq (cost (throttle_metric_pages, THROTTLE_OP_ZERO, 1 << 30, 0), 1);
  ck_assert_uint_eq (cost (throttle_metric_pages, THROTTLE_OP_TRIM, 1 << 30, 0), 1);
  ck_assert_uint_eq (cost (throttle_metric_pages, THROTTLE_OP_FLUSH, 0, 0), 0);
}
END_TEST

START_TEST (test_requests)
{
  ck_assert_uint_eq (cost (throttle_metric_requests, THROTTLE_OP_WRITE, 1 << 25, 0), 1);
  ck_assert_uint_eq (cost (throttle_metric_requests, THROTTLE_OP_READ, 1, 0), 1);
  ck_assert_uint_eq (cost (throttle_metric_requests, THROTTLE_OP_ZERO, 1, 0), 1);
  ck_assert_uint_eq (cost (throttle_metric_requests, THROTTLE_OP_TRIM, 1, 0), 1);
  ck_assert_uint_eq (cost (throttle_metric_requests, THROTTLE_OP_FLUSH, 0, 0), 0);
}
END_TEST

START_TEST (test_load_builtin)
{
  struct throttle_metric m;
  char err[256];

  ck_assert_int_eq (throttle_metric_load ("pages", &m, err, sizeof err), 0);
  ck_assert_ptr_eq (m.fn, throttle_metric_pages);
  ck_assert_str_eq (m.name, "pages");
  ck_assert_uint_eq (m.default_capacity, 4096);
  throttle_metric_unload (&m);
  ck_assert_int_eq (throttle_metric_load ("bytes", &m, err, sizeof err), 0);
  ck_assert_uint_eq (m.default_capacity, 16 * 1024 * 1024);
  ck_assert_int_eq (throttle_metric_load ("requests", &m, err, sizeof err), 0);
  ck_assert_uint_eq (m.default_capacity, 64);
}
END_TEST

/* page_units is what the filter's parts rely on: a page-aligned read
 * or write of n pages costs exactly n * page_units; 0 where that is not
 * so.
 */
START_TEST (test_page_units)
{
  static const char *names[] = { "bytes", "pages", "requests" };
  struct throttle_metric m;
  char err[256];
  size_t i;
  uint32_t n;

  for (i = 0; i < 3; i++) {
    ck_assert_int_eq (throttle_metric_load (names[i], &m, err, sizeof err), 0);
    if (strcmp (names[i], "requests") == 0)
      ck_assert_uint_eq (m.page_units, 0);
    else
      for (n = 1; n <= 512; n *= 2) {
        ck_assert_uint_eq (cost (m.fn, THROTTLE_OP_WRITE, n * 4096, 8192),
                           n * m.page_units);
        ck_assert_uint_eq (cost (m.fn, THROTTLE_OP_READ, n * 4096, 4096 * n),
                           n * m.page_units);
      }
    throttle_metric_unload (&m);
  }
}
END_TEST

START_TEST (test_load_errors)
{
  struct throttle_metric m;
  char err[256];
  const char *nometric = getenv ("TEST_NOMETRIC");

  ck_assert_int_eq (throttle_metric_load ("byte", &m, err, sizeof err), -1);
  ck_assert_ptr_nonnull (strstr (err, "unknown metric: expected bytes, pages"));
  ck_assert_int_eq (throttle_metric_load ("/nonexistent/m.so", &m, err, sizeof err), -1);
  ck_assert_ptr_nonnull (strstr (err, "cannot load: /nonexistent/m.so"));
  ck_assert_ptr_nonnull (nometric);
  ck_assert_int_eq (throttle_metric_load (nometric, &m, err, sizeof err), -1);
  ck_assert_ptr_nonnull (strstr (err, "does not define the symbol throttle_metric"));
}
END_TEST

START_TEST (test_load_user)
{
  struct throttle_metric m;
  char err[256];
  const char *path = getenv ("TEST_METRIC");

  ck_assert_ptr_nonnull (path);
  ck_assert_int_eq (throttle_metric_load (path, &m, err, sizeof err), 0);
  ck_assert_ptr_nonnull (m.dl);
  ck_assert_uint_eq (m.page_units, 0);        /* never split */
  ck_assert_uint_eq (m.default_capacity, 16 * 1024 * 1024);
  ck_assert_uint_eq (cost (m.fn, THROTTLE_OP_WRITE, 1048577, 0), 3);
  ck_assert_uint_eq (cost (m.fn, THROTTLE_OP_ZERO, 1048577, 0), 0);
  throttle_metric_unload (&m);
  ck_assert_ptr_null (m.fn);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("metric");
  TCase *tc = tcase_create ("core");

  tcase_add_test (tc, test_bytes);
  tcase_add_test (tc, test_pages);
  tcase_add_test (tc, test_requests);
  tcase_add_test (tc, test_load_builtin);
  tcase_add_test (tc, test_page_units);
  tcase_add_test (tc, test_load_errors);
  tcase_add_test (tc, test_load_user);
  suite_add_tcase (s, tc);
  return s;
}
