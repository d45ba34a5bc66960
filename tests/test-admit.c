/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the decision in lib/throttle-admit.c whether and how a
 * request is served in parts: which requests are split, what a part's
 * bytes are, and the split_max the layers below allow.  Each request
 * is served here as the filter's serving loop does
 * (plugin/throttle/core/throttle-serve.c): admit, serve the part granted,
 * credit it, admit the rest as a new request.
 */

#include <config.h>

#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "throttle-admit.h"
#include "throttle-metric.h"
#include "check-main.h"

#define PAGE THROTTLE_PAGE_SIZE
#define K 1024u
#define M (1024u * 1024u)

/* The metrics the filter has that are proportional to the length:
 * bytes (4096 units a page) and pages (1 unit a page).
 */
enum metric { BYTES, PAGES };

static uint64_t
units_of (enum metric m, uint32_t count)
{
  return m == BYTES ? count : (count + PAGE - 1) / PAGE;
}

static struct throttle_admit_policy
policy_of (enum metric m, uint32_t split_max)
{
  struct throttle_admit_policy p = {
    .page_units = m == BYTES ? PAGE : 1,
    .split = true,
    .split_max = split_max,
  };
  return p;
}

/* Called before each part is admitted, with its number (0 first). */
typedef void (*before_part_fn) (struct throttle_budget *b, unsigned part);

/* Serve a request of 'count' bytes at 'offset' part after part on
 * budget b, with nothing else in flight, so that each admission is
 * granted at once.  Checks every part against the capacity at its
 * grant and against the policy's split_max; returns the number of
 * parts.
 */
static unsigned
serve (const struct throttle_admit_policy *p, enum metric m,
       struct throttle_budget *b, enum throttle_op op, uint32_t count,
       uint64_t offset, before_part_fn before)
{
  unsigned parts = 0;

  for (;;) {
    struct throttle_admit a;
    uint64_t need = units_of (m, count), capacity;

    if (before)
      before (b, parts);
    capacity = throttle_budget_get_capacity (b);
    ck_assert_int_eq (throttle_admit_start (&a, p, b, NULL, op, count,
                                            offset, need, parts > 0), 0);
    ck_assert_int_eq (a.stage, THROTTLE_ADMIT_GRANTED);
    ck_assert (!a.waited);
    ck_assert_uint_gt (a.len, 0);
    ck_assert_uint_le (a.len, count);
    if (a.len < count) {
      /* A part: never more than the capacity at its grant, nor than
       * the largest request the layers below take; whole pages, at a
       * page-aligned offset, paid for exactly.
       */
      ck_assert_uint_le (a.charged, capacity);
      ck_assert_uint_le (a.len, p->split_max);
      ck_assert_uint_eq (a.len % PAGE, 0);
      ck_assert_uint_eq (offset % PAGE, 0);
      ck_assert_uint_eq (a.charged, units_of (m, a.len));
    }
    throttle_admit_credit (b, NULL, a.charged);
    parts++;
    if (a.len == count)
      return parts;
    offset += a.len;
    count -= a.len;
  }
}

/* Admit a request once and return what it was granted (credited back
 * before returning). */
static struct throttle_admit
admit_once (const struct throttle_admit_policy *p, enum metric m,
            struct throttle_budget *b, enum throttle_op op, uint32_t count,
            uint64_t offset)
{
  struct throttle_admit a;

  ck_assert_int_eq (throttle_admit_start (&a, p, b, NULL, op, count, offset,
                                          units_of (m, count), false), 0);
  throttle_admit_credit (b, NULL, a.charged);
  return a;
}

START_TEST (test_smaller_than_capacity_whole)
{
  enum metric m = _i ? PAGES : BYTES;
  struct throttle_admit_policy p = policy_of (m, UINT32_MAX);
  struct throttle_budget b;
  struct throttle_admit a;
  uint64_t cap = units_of (m, 1 * M);

  ck_assert_int_eq (throttle_budget_init (&b, cap), 0);
  ck_assert (!throttle_admit_in_parts (&p, cap, THROTTLE_OP_WRITE, 64 * K, 0,
                                       units_of (m, 64 * K)));
  a = admit_once (&p, m, &b, THROTTLE_OP_WRITE, 64 * K, 0);
  ck_assert_uint_eq (a.len, 64 * K);
  ck_assert_uint_eq (a.charged, units_of (m, 64 * K));
  /* As large as the capacity: still whole. */
  ck_assert_uint_eq (serve (&p, m, &b, THROTTLE_OP_READ, 1 * M, 0, NULL), 1);
  throttle_budget_destroy (&b);
}
END_TEST

START_TEST (test_larger_than_capacity_parts)
{
  enum metric m = _i ? PAGES : BYTES;
  struct throttle_admit_policy p = policy_of (m, UINT32_MAX);
  struct throttle_budget b;
  struct throttle_admit a;
  uint64_t cap = units_of (m, 256 * K);

  ck_assert_int_eq (throttle_budget_init (&b, cap), 0);
  ck_assert (throttle_admit_in_parts (&p, cap, THROTTLE_OP_WRITE, 1 * M, 0,
                                      units_of (m, 1 * M)));
  a = admit_once (&p, m, &b, THROTTLE_OP_WRITE, 1 * M, 0);
  ck_assert_uint_eq (a.len, 256 * K);
  ck_assert_uint_eq (a.charged, cap);
  /* Nothing else in flight: every part is the whole capacity. */
  ck_assert_uint_eq (serve (&p, m, &b, THROTTLE_OP_WRITE, 1 * M, 0, NULL), 4);
  ck_assert_uint_eq (serve (&p, m, &b, THROTTLE_OP_READ, 1 * M + 4 * K,
                            8 * K, NULL), 5);
  throttle_budget_destroy (&b);
}
END_TEST

/* With another request in flight, a part is what is free then, never
 * the capacity.
 */
START_TEST (test_part_is_what_is_free)
{
  struct throttle_admit_policy p = policy_of (BYTES, UINT32_MAX);
  struct throttle_budget b;
  struct throttle_admit other, a;

  ck_assert_int_eq (throttle_budget_init (&b, 256 * K), 0);
  ck_assert_int_eq (throttle_admit_start (&other, &p, &b, NULL,
                                          THROTTLE_OP_WRITE, 192 * K, 0,
                                          192 * K, false), 0);
  ck_assert_int_eq (throttle_admit_start (&a, &p, &b, NULL, THROTTLE_OP_WRITE,
                                          1 * M, 0, 1 * M, false), 0);
  ck_assert_uint_eq (a.len, 64 * K);
  ck_assert_uint_eq (a.charged, 64 * K);
  throttle_admit_credit (&b, NULL, a.charged);
  throttle_admit_credit (&b, NULL, other.charged);
  throttle_budget_destroy (&b);
}
END_TEST

/* Each part is sized by the capacity at its own grant. */
static void
change_capacity (struct throttle_budget *b, unsigned part)
{
  static const uint64_t caps[] = { 256 * K, 64 * K, 512 * K, 12 * K };

  ck_assert_int_eq (throttle_budget_set_capacity (b, caps[part % 4]), 0);
}

START_TEST (test_capacity_changes_between_parts)
{
  struct throttle_admit_policy p = policy_of (BYTES, UINT32_MAX);
  struct throttle_budget b;

  ck_assert_int_eq (throttle_budget_init (&b, 256 * K), 0);
  /* 256K + 64K + 512K (all that is free: nobody queues behind it) +
   * 12K + 180K (the rest, which fits)
   */
  ck_assert_uint_eq (serve (&p, BYTES, &b, THROTTLE_OP_WRITE, 1 * M, 0,
                            change_capacity), 5);
  throttle_budget_destroy (&b);
}
END_TEST

/* A request larger than the layers below take is never split (its
 * parts would be requests they take, but the request is not one they
 * take either): it is charged whole, in full, and runs alone.  One they
 * take is split in parts no larger than itself.
 */
START_TEST (test_inner_maximum)
{
  struct throttle_admit_policy p = policy_of (BYTES, 512 * K);
  struct throttle_budget b;
  struct throttle_admit a;

  ck_assert_int_eq (throttle_budget_init (&b, 128 * K), 0);
  ck_assert (!throttle_admit_in_parts (&p, 128 * K, THROTTLE_OP_WRITE, 1 * M,
                                       0, 1 * M));
  a = admit_once (&p, BYTES, &b, THROTTLE_OP_WRITE, 1 * M, 0);
  ck_assert_uint_eq (a.len, 1 * M);
  ck_assert_uint_eq (a.charged, 1 * M);
  ck_assert_uint_eq (serve (&p, BYTES, &b, THROTTLE_OP_WRITE, 512 * K, 0,
                            NULL), 4);
  /* A minimum above a page: nothing is split. */
  p.split_max = throttle_admit_split_max (8 * K, 1 * M);
  ck_assert (!throttle_admit_in_parts (&p, 128 * K, THROTTLE_OP_WRITE,
                                       512 * K, 0, 512 * K));
  ck_assert_uint_eq (serve (&p, BYTES, &b, THROTTLE_OP_WRITE, 512 * K, 0,
                            NULL), 1);
  throttle_budget_destroy (&b);
}
END_TEST

START_TEST (test_split_max)
{
  ck_assert_uint_eq (throttle_admit_split_max (0, 0), UINT32_MAX);
  ck_assert_uint_eq (throttle_admit_split_max (1, 32 * M), 32 * M);
  ck_assert_uint_eq (throttle_admit_split_max (512, 64 * K), 64 * K);
  ck_assert_uint_eq (throttle_admit_split_max (PAGE, 1 * M), 1 * M);
  ck_assert_uint_eq (throttle_admit_split_max (2 * PAGE, 1 * M), 0);
}
END_TEST

/* throttle-max-request=plugin: the filter refuses nothing, and what is
 * split is what the plugin's block size allows: any size where it sets
 * no constraints, nothing above its maximum where it does.
 */
START_TEST (test_max_request_plugin)
{
  struct throttle_admit_policy p =
    policy_of (BYTES, throttle_admit_split_max (0, 0));
  struct throttle_budget b;
  const uint32_t huge = UINT32_MAX / PAGE * PAGE;

  ck_assert_int_eq (throttle_budget_init (&b, 16 * M), 0);
  ck_assert_uint_eq (serve (&p, BYTES, &b, THROTTLE_OP_WRITE, huge, 0, NULL),
                     ((uint64_t) huge + 16 * M - 1) / (16 * M));
  p.split_max = throttle_admit_split_max (1, 32 * M);
  ck_assert (throttle_admit_in_parts (&p, 16 * M, THROTTLE_OP_READ, 32 * M, 0,
                                      32 * M));
  ck_assert (!throttle_admit_in_parts (&p, 16 * M, THROTTLE_OP_READ,
                                       32 * M + PAGE, 0, 32 * M + PAGE));
  throttle_budget_destroy (&b);
}
END_TEST

/* Only reads and writes are split, page-aligned, under a metric
 * proportional to the length, with throttle-split on, and only when
 * larger than a quarter of the capacity; everything else is charged whole
 * (above the capacity in full, running alone).
 */
START_TEST (test_which_requests)
{
  struct throttle_admit_policy p = policy_of (BYTES, UINT32_MAX);
  struct throttle_budget b;
  struct throttle_admit a;
  uint64_t cap = 256 * K;
  uint64_t quarter = cap / 4;

  ck_assert_int_eq (throttle_budget_init (&b, cap), 0);
  ck_assert (throttle_admit_in_parts (&p, cap, THROTTLE_OP_READ, 1 * M, 0,
                                      1 * M));
  ck_assert (throttle_admit_in_parts (&p, cap, THROTTLE_OP_WRITE, 1 * M, 0,
                                      1 * M));
  ck_assert (!throttle_admit_in_parts (&p, cap, THROTTLE_OP_ZERO, 1 * M, 0,
                                       1 * M));
  ck_assert (!throttle_admit_in_parts (&p, cap, THROTTLE_OP_TRIM, 1 * M, 0,
                                       1 * M));
  ck_assert (!throttle_admit_in_parts (&p, cap, THROTTLE_OP_FLUSH, 1 * M, 0,
                                       1 * M));
  /* Zero and trim: whole, clamped. */
  a = admit_once (&p, BYTES, &b, THROTTLE_OP_ZERO, 1 * M, 0);
  ck_assert_uint_eq (a.len, 1 * M);
  ck_assert_uint_eq (a.charged, 1 * M);
  a = admit_once (&p, BYTES, &b, THROTTLE_OP_TRIM, 1 * M, 0);
  ck_assert_uint_eq (a.len, 1 * M);
  ck_assert_uint_eq (a.charged, 1 * M);
  /* Not page-aligned: whole. */
  ck_assert (!throttle_admit_in_parts (&p, cap, THROTTLE_OP_WRITE, 1 * M, 512,
                                       1 * M));
  ck_assert (!throttle_admit_in_parts (&p, cap, THROTTLE_OP_WRITE,
                                       1 * M + 512, 0, 1 * M + 512));
  a = admit_once (&p, BYTES, &b, THROTTLE_OP_WRITE, 1 * M, 512);
  ck_assert_uint_eq (a.len, 1 * M);
  /* Not larger than a quarter of the capacity: whole. */
  ck_assert (!throttle_admit_in_parts (&p, cap, THROTTLE_OP_WRITE, quarter,
                                       0, quarter));
  ck_assert (throttle_admit_in_parts (&p, cap, THROTTLE_OP_WRITE,
                                      quarter + PAGE, 0, quarter + PAGE));
  /* What a request's parts left goes on in parts down to twice the
   * part minimum (a 32nd of the capacity), below a quarter too.
   */
  ck_assert (throttle_admit_rest_in_parts (&p, cap, quarter));
  ck_assert (throttle_admit_rest_in_parts (&p, cap, cap / 16 + PAGE));
  ck_assert (!throttle_admit_rest_in_parts (&p, cap, cap / 16));
  /* throttle-split=false, or a metric not proportional to the length
   * (requests): whole.
   */
  p.split = false;
  ck_assert (!throttle_admit_in_parts (&p, cap, THROTTLE_OP_WRITE, 1 * M, 0,
                                       1 * M));
  p.split = true;
  p.page_units = 0;
  ck_assert (!throttle_admit_in_parts (&p, cap, THROTTLE_OP_WRITE, 1 * M, 0,
                                       1));
  throttle_budget_destroy (&b);
}
END_TEST

START_TEST (test_part_len)
{
  struct throttle_admit_policy bytes = policy_of (BYTES, UINT32_MAX);
  struct throttle_admit_policy pages = policy_of (PAGES, UINT32_MAX);

  /* Whole: all of count, whatever was granted (clamped). */
  ck_assert_uint_eq (throttle_admit_part_len (&bytes, false, 1 * M, 1 * M,
                                              64 * K), 1 * M);
  ck_assert_uint_eq (throttle_admit_part_len (&bytes, true, 1 * M, 1 * M,
                                              1 * M), 1 * M);
  /* A part: the whole pages its units pay for. */
  ck_assert_uint_eq (throttle_admit_part_len (&bytes, true, 1 * M, 1 * M,
                                              64 * K), 64 * K);
  ck_assert_uint_eq (throttle_admit_part_len (&bytes, true, 1 * M, 1 * M,
                                              3 * PAGE + 100), 3 * PAGE);
  ck_assert_uint_eq (throttle_admit_part_len (&pages, true, 1 * M, 256, 16),
                     16 * PAGE);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("admit");
  TCase *tc = tcase_create ("core");

  tcase_set_timeout (tc, 30);
  tcase_add_loop_test (tc, test_smaller_than_capacity_whole, 0, 2);
  tcase_add_loop_test (tc, test_larger_than_capacity_parts, 0, 2);
  tcase_add_test (tc, test_part_is_what_is_free);
  tcase_add_test (tc, test_capacity_changes_between_parts);
  tcase_add_test (tc, test_inner_maximum);
  tcase_add_test (tc, test_split_max);
  tcase_add_test (tc, test_max_request_plugin);
  tcase_add_test (tc, test_which_requests);
  tcase_add_test (tc, test_part_len);
  suite_add_tcase (s, tc);
  return s;
}
