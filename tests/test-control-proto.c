/* Unit tests of the control socket's protocol
 * (plugin/throttle/throttle-control-proto.c) without a socket or nbdkit: the
 * tokenizer, the commands and their JSON replies, against two exports
 * with real budgets.  What the protocol calls in nbdkit and in the rest
 * of the filter is stood in for here.
 */

#include <config.h>

#include <check.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "throttle.h"
#include "throttle-adapt-glue.h"
#include "throttle-control.h"
#include "throttle-control-proto.h"
#include "throttle-export.h"

struct throttle_config throttle_config = {
  .capacity = 262144, .metric = { .name = "bytes", .page_units = 4096 },
};

/* "" and a name that needs every kind of escape in JSON: a quote, a
 * control character and a byte that is not UTF-8.
 */
static struct throttle_export exports[2] = {
  { .name = (char *) "", .permanent = true },
  { .name = (char *) "a b\"c\x01\xff", .conns = 1 },
};
static struct throttle_budget server;
static int errors_logged;
static uint64_t target_ns;

/* --- nbdkit, as far as the protocol and throttle-parse.c use it ------- */

void
nbdkit_debug (const char *fmt, ...)
{
}

void
nbdkit_error (const char *fmt, ...)
{
  errors_logged++;
}

/* Decimal digits and an optional K or M: enough to tell what the
 * protocol does with nbdkit's answer.
 */
int64_t
nbdkit_parse_size (const char *str)
{
  char *end;
  long long v;

  if (*str < '0' || *str > '9') {
    nbdkit_error ("could not parse size string (%s)", str);
    return -1;
  }
  v = strtoll (str, &end, 10);
  if (strcmp (end, "K") == 0)
    v *= 1024;
  else if (strcmp (end, "M") == 0)
    v *= 1024 * 1024;
  else if (*end != '\0') {
    nbdkit_error ("could not parse size: unknown suffix '%s'", end);
    return -1;
  }
  return v;
}

int
nbdkit_parse_unsigned (const char *what, const char *str, unsigned *rp)
{
  abort ();                   /* no command takes one */
}

int
nbdkit_parse_bool (const char *str)
{
  abort ();                   /* no command takes one */
}

/* --- the registry and the latency target's glue ----------------------- */

/* Every reference the protocol takes is given back (teardown). */
struct throttle_export *
throttle_export_get (const char *name)
{
  size_t i;

  for (i = 0; i < 2; i++)
    if (strcmp (exports[i].name, name) == 0) {
      exports[i].refs++;
      return &exports[i];
    }
  return NULL;
}

void
throttle_export_put (struct throttle_export *exp)
{
  ck_assert_uint_gt (exp->refs, 0);
  exp->refs--;
}

size_t
throttle_export_count (void)
{
  return 2;
}

size_t
throttle_export_foreach_range (size_t from, size_t max,
                               throttle_export_fn fn, void *opaque)
{
  size_t i;

  for (i = from; i < 2 && i < from + max; i++)
    fn (&exports[i], opaque);
  return 2;
}

void
throttle_export_foreach (throttle_export_fn fn, void *opaque)
{
  throttle_export_foreach_range (0, 2, fn, opaque);
}

uint64_t
throttle_adapt_export_ceiling (struct throttle_export *exp)
{
  return throttle_budget_get_capacity (&exp->budget);
}

int
throttle_adapt_export_set_ceiling (struct throttle_export *exp,
                                   uint64_t ceiling, uint64_t *previous,
                                   char *err, size_t errlen)
{
  *previous = throttle_budget_get_capacity (&exp->budget);
  throttle_budget_set_capacity (&exp->budget, ceiling);
  return 0;
}

int
throttle_adapt_export_set_target (struct throttle_export *exp,
                                  const char *value, uint64_t *previous,
                                  char *err, size_t errlen)
{
  if (strcmp (value, "5ms") != 0 && strcmp (value, "off") != 0) {
    snprintf (err, errlen, "bad latency-target \"%s\"", value);
    return -1;
  }
  *previous = target_ns;
  target_ns = strcmp (value, "off") == 0 ? 0 : 5000000;
  return 0;
}

static char rt_mode[8] = "auto";

int
throttle_guards_set_rt (const char *value, char *err, size_t errlen)
{
  if (strcmp (value, "on") != 0 && strcmp (value, "off") != 0 &&
      strcmp (value, "auto") != 0) {
    snprintf (err, errlen, "set rt: bad mode \"%s\"", value);
    return -1;
  }
  snprintf (rt_mode, sizeof rt_mode, "%s", value);
  return 0;
}

void
throttle_guards_rt_json (char *buf, size_t len)
{
  snprintf (buf, len, "\"rt\":{\"mode\":\"%s\"}", rt_mode);
}

/* --- helpers ---------------------------------------------------------- */

/* The reply to one command line, which the caller frees. */
static char *
ask (const char *cmd)
{
  char line[2048], *buf = NULL;
  size_t len;
  FILE *fp = open_memstream (&buf, &len);

  ck_assert_ptr_nonnull (fp);
  snprintf (line, sizeof line, "%s", cmd);
  throttle_control_execute (fp, line);
  ck_assert_int_eq (fclose (fp), 0);
  return buf;
}

static void
expect (const char *cmd, const char *reply)
{
  char *r = ask (cmd);

  ck_assert_str_eq (r, reply);
  free (r);
}

static void
expect_error (const char *cmd, const char *part)
{
  char *r = ask (cmd);

  ck_assert_msg (strncmp (r, "{\"error\":\"", 10) == 0 &&
                 strstr (r, part) != NULL &&
                 strcmp (strchr (r, '\n'), "\n") == 0,
                 "%s: reply %s has no error saying %s", cmd, r, part);
  free (r);
}

static void
setup (void)
{
  size_t i;

  for (i = 0; i < 2; i++)
    ck_assert_int_eq (throttle_budget_init (&exports[i].budget, 262144), 0);
  ck_assert_int_eq (throttle_budget_init (&server, 2097152), 0);
  throttle_config.server = &server;
  errors_logged = 0;
  target_ns = 0;
}

static void
teardown (void)
{
  size_t i;

  for (i = 0; i < 2; i++) {
    ck_assert_uint_eq (exports[i].refs, 0);
    throttle_budget_destroy (&exports[i].budget);
  }
  throttle_budget_destroy (&server);
  throttle_config.server = NULL;
  throttle_config.server_capacity_set = false;
}

/* --- tests ------------------------------------------------------------ */

START_TEST (test_tokens)
{
  expect ("", "");
  expect ("  \t ", "");
  expect_error ("stats \"", "unterminated quoted string");
  expect_error ("stats \"a\"b", "no blank after a quoted string");
  expect_error ("stats \"a\\q\"", "bad escape in a quoted string");
  expect_error ("set capacity \"\" 1 2", "too many arguments");
  expect_error ("frob", "unknown command \\\"frob\\\"");
  expect_error ("help me", "usage: help");
  expect ("help", "{\"commands\":[\"stats [EXPORT]\",\"stats from N\","
          "\"set capacity EXPORT N\",\"set latency-target EXPORT "
          "DURATION|off\",\"set server-capacity N\",\"set rt on|off|auto\","
          "\"help\"]}\n");
}
END_TEST

START_TEST (test_stats)
{
  static const char counters[] =
    ",\"capacity\":262144,\"in_flight\":0,\"peak\":0,\"charged\":0,"
    "\"admitted\":0,\"waited\":0,\"cancelled\":0,\"clamped\":0,"
    "\"wait_ns_total\":0,\"wait_ns_max\":0,\"waiters\":0,"
    "\"connections\":1,\"kept\":\"while connected\"}";
  static const char counters0[] =
    ",\"capacity\":262144,\"in_flight\":0,\"peak\":0,\"charged\":0,"
    "\"admitted\":0,\"waited\":0,\"cancelled\":0,\"clamped\":0,"
    "\"wait_ns_total\":0,\"wait_ns_max\":0,\"waiters\":0,"
    "\"connections\":0,\"kept\":\"until exit\"}";
  /* The server-wide budget, after default_capacity. */
  static const char server_json[] =
    "\"server\":{\"capacity\":2097152,\"in_flight\":0,\"peak\":0,"
    "\"charged\":0,\"admitted\":0,\"waited\":0,\"clamped\":0,"
    "\"wait_ns_total\":0,\"wait_ns_max\":0,\"waiters\":0},";
  char want[2048];

  /* A quoted name with its escapes; the reply escapes it for JSON. */
  snprintf (want, sizeof want,
            "{\"metric\":\"bytes\",\"default_capacity\":262144,%s"
            "\"exports_total\":2,\"exports\":[{\"name\":"
            "\"a b\\\"c\\u0001\\ufffd\"%s]}\n", server_json, counters);
  expect ("stats \"a b\\\"c\x01\xff\"", want);
  snprintf (want, sizeof want,
            "{\"metric\":\"bytes\",\"default_capacity\":262144,%s"
            "\"exports_total\":2,\"from\":1,\"next\":null,\"exports\":["
            "{\"name\":\"a b\\\"c\\u0001\\ufffd\"%s]}\n", server_json,
            counters);
  expect ("stats from 1", want);
  snprintf (want, sizeof want,
            "{\"metric\":\"bytes\",\"default_capacity\":262144,%s"
            "\"exports_total\":2,\"from\":0,\"next\":null,\"exports\":["
            "{\"name\":\"\"%s,", server_json, counters0);
  {
    char *r = ask ("stats");

    ck_assert_msg (strncmp (r, want, strlen (want)) == 0, "stats: %s", r);
    free (r);
  }
  expect_error ("stats nosuch", "unknown export \\\"nosuch\\\"");
  expect_error ("stats from x", "bad number \\\"x\\\"");
  expect_error ("stats from -1", "bad number");
  expect_error ("stats a b", "usage: stats [EXPORT] or stats from N");
}
END_TEST

static void
extra (struct throttle_export *exp, char *buf, size_t len)
{
  snprintf (buf, len, "\"extra\":%d", exp ? 1 : 0);
}

START_TEST (test_extra_stats)
{
  char *r;

  throttle_control_add_extra_stats (extra);
  r = ask ("stats \"\"");
  ck_assert_ptr_null (strstr (r, "\"next\""));     /* one export: no page */
  ck_assert_ptr_nonnull (strstr (r, "\"exports_total\":2,\"extra\":0,"
                                 "\"exports\":["));
  ck_assert_ptr_nonnull (strstr (r, "\"kept\":\"until exit\",\"extra\":1}]}\n"));
  free (r);
}
END_TEST

START_TEST (test_set_capacity)
{
  expect ("set capacity \"\" 1M",
          "{\"ok\":true,\"export\":\"\",\"capacity\":1048576,"
          "\"previous\":262144}\n");
  ck_assert_uint_eq (throttle_budget_get_capacity (&exports[0].budget),
                     1048576);
  expect ("set capacity \"a b\\\"c\x01\xff\" 4096",
          "{\"ok\":true,\"export\":\"a b\\\"c\\u0001\\ufffd\","
          "\"capacity\":4096,\"previous\":262144}\n");
  ck_assert_int_eq (errors_logged, 0);
  expect_error ("set capacity \"\" 0", "the capacity must be greater than 0");
  ck_assert_int_eq (errors_logged, 0);
  /* What nbdkit's parser refuses, it logs (once); the operator gets
   * the reply.
   */
  expect_error ("set capacity \"\" abc",
                "bad number \\\"abc\\\": expected a positive size");
  ck_assert_int_eq (errors_logged, 1);
  expect_error ("set capacity nosuch 1M", "unknown export \\\"nosuch\\\"");
  expect_error ("set capacity \"\"", "usage: set capacity EXPORT N");
  /* Less than a page could never be granted under bytes. */
  expect_error ("set capacity \"\" 100", "capacity \\\"100\\\": below 4096, "
                "the smallest capacity under throttle-metric=bytes");
  expect_error ("set capacity \"\" 4095", "capacity \\\"4095\\\": below 4096");
  ck_assert_uint_eq (throttle_budget_get_capacity (&exports[0].budget),
                     1048576);
}
END_TEST

START_TEST (test_set_server_capacity)
{
  /* Not given at start: the server's bound follows an export raised
   * above it, first.
   */
  expect ("set capacity \"\" 4M",
          "{\"ok\":true,\"export\":\"\",\"capacity\":4194304,"
          "\"previous\":262144}\n");
  ck_assert_uint_eq (throttle_budget_get_capacity (&server), 4194304);
  expect ("set server-capacity 8M",
          "{\"ok\":true,\"server_capacity\":8388608,\"previous\":4194304}\n");
  ck_assert_uint_eq (throttle_budget_get_capacity (&server), 8388608);
  /* Set: no export above it ... */
  expect_error ("set capacity \"\" 16M", "capacity \\\"16M\\\": above the "
                "server-wide capacity 8388608: raise it first with set "
                "server-capacity N");
  ck_assert_uint_eq (throttle_budget_get_capacity (&exports[0].budget),
                     4194304);
  /* ... and the server's never below an export's, nor below a page. */
  expect_error ("set server-capacity 1M", "server-capacity \\\"1M\\\": below "
                "the capacity 4194304 of export \\\"\\\": lower it first");
  expect_error ("set server-capacity 100", "server-capacity \\\"100\\\": "
                "below 4096, the smallest capacity");
  expect_error ("set server-capacity 0", "the capacity must be greater than 0");
  expect_error ("set server-capacity", "usage: set capacity EXPORT N, or "
                "set latency-target EXPORT DURATION|off, or set "
                "server-capacity N (the default export is \\\"\\\")");
  ck_assert_uint_eq (throttle_budget_get_capacity (&server), 8388608);
  expect ("set capacity \"\" 256K",
          "{\"ok\":true,\"export\":\"\",\"capacity\":262144,"
          "\"previous\":4194304}\n");
  /* Not below throttle-capacity, at which new exports start. */
  expect_error ("set server-capacity 128K", "below the capacity 262144");
  expect ("set server-capacity 256K",
          "{\"ok\":true,\"server_capacity\":262144,\"previous\":8388608}\n");
}
END_TEST

START_TEST (test_set_latency_target)
{
  expect ("set latency-target \"\" 5ms",
          "{\"ok\":true,\"export\":\"\",\"latency_target\":\"5ms\","
          "\"previous_ns\":null}\n");
  expect ("set latency-target \"\" off",
          "{\"ok\":true,\"export\":\"\",\"latency_target\":\"off\","
          "\"previous_ns\":5000000}\n");
  expect_error ("set latency-target \"\" 5", "bad latency-target \\\"5\\\"");
  expect_error ("set latency-target nosuch 5ms", "unknown export");
}
END_TEST

START_TEST (test_set_rt)
{
  expect ("set rt on", "{\"ok\":true,\"rt\":{\"mode\":\"on\"}}\n");
  expect ("set rt auto", "{\"ok\":true,\"rt\":{\"mode\":\"auto\"}}\n");
  expect_error ("set rt maybe", "set rt: bad mode \\\"maybe\\\"");
  expect_error ("set rt", "set rt on|off|auto");
  expect_error ("set rt on now", "set rt on|off|auto");
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("control-proto");
  TCase *tc = tcase_create ("core");
  SRunner *sr;
  int failed;

  tcase_add_checked_fixture (tc, setup, teardown);
  tcase_add_test (tc, test_tokens);
  tcase_add_test (tc, test_stats);
  tcase_add_test (tc, test_extra_stats);
  tcase_add_test (tc, test_set_capacity);
  tcase_add_test (tc, test_set_server_capacity);
  tcase_add_test (tc, test_set_latency_target);
  tcase_add_test (tc, test_set_rt);
  suite_add_tcase (s, tc);
  sr = srunner_create (s);
  srunner_run_all (sr, CK_NORMAL);
  failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
