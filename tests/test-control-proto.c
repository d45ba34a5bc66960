/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the control socket's protocol
 * (plugin/throttle/control/throttle-control-proto.c) without a socket or nbdkit: the
 * tokenizer, the stats and their JSON, and the dispatch of set to what
 * features serve, over the real registry of budgets with two exports.
 * Only nbdkit is stood in for; the features here are the test's own,
 * in the tables the filter has in throttle-features.c.
 */

#include <config.h>

#include <check.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "throttle-config.h"
#include "throttle-control-proto.h"
#include "throttle-export.h"
#include "throttle-metrics.h"
#include "throttle-json.h"
#include "check-main.h"

/* A name that needs every kind of escape in JSON: a quote, a control
 * character and a byte that is not UTF-8.  Its budget is held by one
 * connection, beside the default export's.
 */
static const char named[] = "a b\"c\x01\xff";
static struct throttle_export *exports[2];
static struct throttle_budget server;
static int errors_logged;

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

/* --- two features --------------------------------------------------- */

/* "set limit EXPORT N": the export's capacity, as N in bytes. */
static void
set_limit (FILE *out, struct throttle_export *exp, const char *value)
{
  ck_assert_uint_gt (exp->refs, 0);     /* held for the call */
  if (strcmp (value, "bad") == 0) {
    throttle_json_error (out, "limit \"%s\": bad", value);
    return;
  }
  throttle_budget_set_capacity (&exp->budget, strtoull (value, NULL, 10));
  fprintf (out, "{\"ok\":true,\"limit\":%s}\n", value);
}

static char mode[8] = "auto";

/* "set mode VALUE": not per export. */
static void
set_mode (FILE *out, struct throttle_export *exp, const char *value)
{
  ck_assert_ptr_null (exp);
  snprintf (mode, sizeof mode, "%s", value);
  fprintf (out, "{\"ok\":true,\"mode\":\"%s\"}\n", mode);
}

const struct throttle_setter throttle_setters[] = {
  { "limit", "set limit EXPORT N", true, set_limit },
  { "mode", "set mode on|off", false, set_mode },
  { NULL }
};

/* Two features' members of the stats, once test_extra_stats turns
 * them on.
 */
static bool reporting;

static void
extra (FILE *fp, struct throttle_export *exp)
{
  if (reporting)
    fprintf (fp, ",\"extra\":%d", exp ? 1 : 0);
}

static void
second (FILE *fp, struct throttle_export *exp)
{
  if (reporting)
    fputs (",\"second\":true", fp);
}

const struct throttle_report throttle_reports[] = {
  { extra, NULL },
  { second, NULL },
  { NULL }
};

/* No feature keeps state per export here. */
const struct throttle_feature *const throttle_features[] = { NULL };
const size_t throttle_nr_features = 0;
/* The filter's (core/throttle.c). */
struct throttle_config throttle_config = { .split = true };
int throttle_debug_verbose;

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
  throttle_config.capacity = 262144;
  throttle_config.metric.name = "bytes";
  throttle_config.metric.page_units = 4096;
  ck_assert_int_eq (throttle_budget_init (&server, 2097152), 0);
  throttle_config.server = &server;
  ck_assert_int_eq (throttle_export_init (262144), 0);
  exports[0] = throttle_export_get ("");
  throttle_export_put (exports[0]);
  exports[1] = throttle_export_open (named);
  ck_assert_ptr_nonnull (exports[1]);
  errors_logged = 0;
}

/* Every reference the protocol took is given back: the default
 * export's none, the named one's its connection's.
 */
static void
teardown (void)
{
  ck_assert_uint_eq (exports[0]->refs, 0);
  ck_assert_uint_eq (exports[1]->refs, 1);
  throttle_export_close (exports[1]);
  throttle_export_free_all ();
  throttle_budget_destroy (&server);
  throttle_config.server = NULL;
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
  expect ("help", "{\"commands\":[\"stats [EXPORT]\",\"metrics\","
          "\"set limit EXPORT N\",\"set mode on|off\",\"help\"]}\n");
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
  /* Every export, in the order their budgets were made. */
  snprintf (want, sizeof want,
            "{\"metric\":\"bytes\",\"default_capacity\":262144,%s"
            "\"exports_total\":2,\"exports\":[{\"name\":\"\"%s,"
            "{\"name\":\"a b\\\"c\\u0001\\ufffd\"%s]}\n", server_json,
            counters0, counters);
  expect ("stats", want);
  expect_error ("stats nosuch", "unknown export \\\"nosuch\\\"");
  expect_error ("stats a b", "usage: stats [EXPORT]");
  expect_error ("stats from 1", "usage: stats [EXPORT]");
}
END_TEST

/* No reply is paged: stats gives every export in one line, and a
 * reply over the bound (4 MiB) is an error that says what to ask
 * instead.  Names of 4000 control bytes, each escaped to 6 in JSON:
 * 150 such exports fit in the stats (3.6 MB) but not in the metrics,
 * which give each name in every family; 200 fit in neither.
 */
START_TEST (test_reply_bound)
{
  static struct throttle_export *many[200];
  char name[4010], *r, *p;
  size_t i, n;

  for (i = 0; i < 200; i++) {
    memset (name, '\x01', 4000);
    snprintf (name + 4000, sizeof name - 4000, "%zu", i);
    many[i] = throttle_export_open (name);
    ck_assert_ptr_nonnull (many[i]);
    if (i + 1 != 150 && i + 1 != 200)
      continue;
    r = ask ("stats");
    for (n = 0, p = r; (p = strstr (p, "\"name\":")) != NULL; n++)
      p++;
    if (i + 1 == 150)
      ck_assert_uint_eq (n, 152);   /* "", the named one and these */
    else
      ck_assert_msg (strstr (r, "{\"error\":\"stats: the reply does not fit "
                             "in 4194304 bytes") == r, "%.80s", r);
    free (r);
    expect_error ("metrics", "metrics: the reply does not fit in 4194304 "
                  "bytes or memory ran out: ask for one export with stats "
                  "EXPORT, or read throttle-metrics-file");
  }
  for (i = 0; i < 200; i++)
    throttle_export_close (many[i]);
}
END_TEST

/* The members each feature adds, in the order of the table, after
 * the protocol's own.
 */
START_TEST (test_extra_stats)
{
  char *r;

  reporting = true;
  r = ask ("stats \"\"");
  reporting = false;
  ck_assert_ptr_nonnull (strstr (r, "\"exports_total\":2,\"extra\":0,"
                                 "\"second\":true,\"exports\":["));
  ck_assert_ptr_nonnull (strstr (r, "\"kept\":\"until exit\",\"extra\":1,"
                                 "\"second\":true}]}\n"));
  free (r);
}
END_TEST

/* set goes to the feature that added the command, with the named
 * export held for the call; a bad set lists every command added.
 */
/* The metrics: the stats as a monitor scrapes them, each family once
 * under a name that is the same whatever the metric,
 * the name escaped as a label value (only the quote; the control
 * character is valid there; the byte that is not UTF-8 becomes
 * U+FFFD), and the end a client reads up to.
 */
START_TEST (test_metrics)
{
  static const char *const lines[] = {
    "nbdkit_throttle_info{metric=\"bytes\",unit=\"bytes\"} 1\n",
    "nbdkit_throttle_exports 2\n",
    "nbdkit_throttle_default_capacity_units 262144\n",
    "nbdkit_throttle_capacity_units{export=\"\"} 262144\n",
    "nbdkit_throttle_capacity_units{export=\"a b\\\"c\x01\xef\xbf\xbd\"} 262144\n",
    "nbdkit_throttle_server_capacity_units 2097152\n",
    "nbdkit_throttle_connections{export=\"\"} 0\n",
    "nbdkit_throttle_connections{export=\"a b\\\"c\x01\xef\xbf\xbd\"} 1\n",
    "nbdkit_throttle_charged_units_total{export=\"\"} 0\n",
    "nbdkit_throttle_wait_seconds_total{export=\"\"} 0.000000000\n",
    /* A counter is declared by its family's name (OpenMetrics). */
    "# TYPE nbdkit_throttle_charged_units counter\n",
    "# TYPE nbdkit_throttle_in_flight_units gauge\n",
  };
  char *r = ask ("metrics"), *p;
  size_t i, n = strlen (r);

  for (i = 0; i < sizeof lines / sizeof lines[0]; i++)
    ck_assert_msg ((p = strstr (r, lines[i])) != NULL &&
                   (p == r || p[-1] == '\n') &&
                   strstr (p + 1, lines[i]) == NULL,
                   "metrics: not once: %s", lines[i]);
  ck_assert_msg (n > 6 && strcmp (r + n - 6, "# EOF\n") == 0 &&
                 strstr (r, "# EOF") == r + n - 6,
                 "metrics: does not end with # EOF");
  free (r);
  expect_error ("metrics now", "usage: metrics");
}
END_TEST

/* The summary at exit, the stats and the metrics give one budget's
 * numbers from the same table: the same values in each, the server's
 * line first and without the export's own counts.  A server that did
 * not start has no summary.
 */
START_TEST (test_summary)
{
  static const char want[] =
    "nbdkit: throttle: summary server capacity=2097152 in_flight=4096 "
    "peak=4096 charged=4096 admitted=1 waited=0 clamped=0 "
    "wait_total_ms=0.000 wait_max_ms=0.000\n"
    "nbdkit: throttle: summary export=\"\" capacity=262144 in_flight=0 "
    "peak=0 charged=0 admitted=0 waited=0 cancelled=0 clamped=0 "
    "wait_total_ms=0.000 wait_max_ms=0.000\n"
    "nbdkit: throttle: summary export=\"a b\"c\x01\xff\" capacity=262144 "
    "in_flight=4096 peak=4096 charged=4096 admitted=1 waited=0 "
    "cancelled=0 clamped=0 wait_total_ms=0.000 wait_max_ms=0.000\n";
  char path[] = "/tmp/test-control-proto.XXXXXX", got[2048], *r;
  uint64_t charged;
  int fd = mkstemp (path), saved = dup (2);
  ssize_t n;

  ck_assert_int_ge (fd, 0);
  unlink (path);
  /* As the filter charges: the export's budget, then the server's. */
  ck_assert_int_eq (throttle_budget_charge (&exports[1]->budget, 4096,
                                            NULL, NULL, 0, &charged), 0);
  ck_assert_int_eq (throttle_budget_charge (&server, 4096, NULL, NULL, 0,
                                            &charged), 0);
  fflush (stderr);
  ck_assert_int_eq (dup2 (fd, 2), 2);
  throttle_metrics_summary ();          /* not started: nothing */
  ck_assert_int_eq (throttle_metrics_after_fork (), 0);
  throttle_metrics_summary ();
  fflush (stderr);
  dup2 (saved, 2);
  close (saved);
  n = pread (fd, got, sizeof got - 1, 0);
  close (fd);
  ck_assert_int_gt (n, 0);
  got[n] = '\0';
  ck_assert_str_eq (got, want);

  r = ask ("stats \"a b\\\"c\x01\xff\"");
  ck_assert_ptr_nonnull (strstr (r, "\"in_flight\":4096,\"peak\":4096,"
                                 "\"charged\":4096,\"admitted\":1,"));
  free (r);
  r = ask ("metrics");
  ck_assert_ptr_nonnull (strstr (r, "\nnbdkit_throttle_in_flight_units{"
                                 "export=\"a b\\\"c\x01\xef\xbf\xbd\"} 4096\n"));
  ck_assert_ptr_nonnull (strstr (r, "\nnbdkit_throttle_server_charged_units_total"
                                 " 4096\n"));
  free (r);
  throttle_budget_credit (&exports[1]->budget, 4096);
  throttle_budget_credit (&server, 4096);
}
END_TEST

START_TEST (test_set)
{
  expect ("set limit \"\" 1048576", "{\"ok\":true,\"limit\":1048576}\n");
  ck_assert_uint_eq (throttle_budget_get_capacity (&exports[0]->budget),
                     1048576);
  expect ("set limit \"a b\\\"c\x01\xff\" 4096",
          "{\"ok\":true,\"limit\":4096}\n");
  ck_assert_uint_eq (throttle_budget_get_capacity (&exports[1]->budget),
                     4096);
  expect_error ("set limit \"\" bad", "limit \\\"bad\\\": bad");
  expect_error ("set limit nosuch 1", "unknown export \\\"nosuch\\\"");
  expect ("set mode on", "{\"ok\":true,\"mode\":\"on\"}\n");
  ck_assert_str_eq (mode, "on");
  static const char usage[] = "usage: set limit EXPORT N, or set mode "
    "on|off (the default export is \\\"\\\")";
  expect_error ("set limit \"\"", usage);
  expect_error ("set limit \"\" 1 2", "too many arguments");
  expect_error ("set mode", usage);
  expect_error ("set mode on now", usage);
  expect_error ("set frob 1", usage);
  expect_error ("set", usage);
  ck_assert_int_eq (errors_logged, 0);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("control-proto");
  TCase *tc = tcase_create ("core");

  tcase_add_checked_fixture (tc, setup, teardown);
  tcase_add_test (tc, test_tokens);
  tcase_add_test (tc, test_stats);
  tcase_add_test (tc, test_metrics);
  tcase_add_test (tc, test_reply_bound);
  tcase_add_test (tc, test_extra_stats);
  tcase_add_test (tc, test_set);
  tcase_add_test (tc, test_summary);
  suite_add_tcase (s, tc);
  return s;
}
