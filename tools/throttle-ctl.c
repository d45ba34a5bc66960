/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-ctl: drive the throttle filter's control socket (see
 * throttle-ctl(1) and CONTROL SOCKET in nbdkit-throttle-filter(1)).
 *
 * Exit status: 0 done, 1 the server could not be asked or refused,
 * 2 a mistake on the command line (nothing was sent).
 */

#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "throttle-duration.h"
#include "throttle-size.h"

#define DEFAULT_TIMEOUT 5.

static const char usage_text[] =
  "usage: throttle-ctl [--json] [--timeout SECS] SOCKET stats [EXPORT]\n"
  "       throttle-ctl [--json] [--timeout SECS] SOCKET set capacity EXPORT SIZE\n"
  "       throttle-ctl [--json] [--timeout SECS] SOCKET set latency-target EXPORT DURATION|off\n"
  "       throttle-ctl [--json] [--timeout SECS] SOCKET set server-capacity SIZE\n"
  "       throttle-ctl [--json] [--timeout SECS] SOCKET set rt on|off|auto\n"
  "       throttle-ctl [--json] [--timeout SECS] SOCKET watch [INTERVAL [COUNT]]\n"
  "       throttle-ctl [--timeout SECS] SOCKET metrics\n"
  "The default export is \"\".  SIZE is read as nbdkit reads sizes\n"
  "(nbdkit_parse_size): a whole number with an optional suffix b, s (512),\n"
  "K, M, G, T, P or E (powers of 1024): 4096, 256K, 64M.  DURATION, SECS\n"
  "and INTERVAL are read as nbdkit reads delays (nbdkit_parse_delay):\n"
  "seconds (5, 0.5), or with a unit s, ms, us or ns (2s, 500ms, 250us).\n"
  "See throttle-ctl(1).\n";

/* What a SIZE may be, for the message that refuses one. */
static const char size_grammar[] =
  "read as nbdkit reads sizes: suffixes b, s, K, M, G, T, P, E";

static int usage_error (const char *fmt, ...)
  __attribute__ ((format (printf, 1, 2)));

/* Says what was wrong on one line, and where to read more, as
 * throttle-load does (the whole usage would bury the line).  Returns
 * the exit status of a mistake on the command line.
 */
static int
usage_error (const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "throttle-ctl: ");
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fprintf (stderr, "\nTry 'throttle-ctl --help' for more information.\n");
  return 2;
}

/* A duration (lib/throttle-duration.h) from 0.01 s to a day. */
static bool
parse_seconds (const char *s, double *out)
{
  uint64_t ns;

  if (throttle_parse_duration (s, &ns) == -1 || ns < 10000000 ||
      ns > 86400 * UINT64_C (1000000000))
    return false;
  *out = ns / 1e9;
  return true;
}

/* Reports a reply that is not the filter's answer to LINE, frees it
 * and RAW, and returns NULL.
 */
static json_object *
unexpected (const char *path, const char *line, json_object *reply,
            char *raw)
{
  fprintf (stderr, "throttle-ctl: %s: unexpected reply to \"%s\": %s\n",
           path, line, raw);
  json_object_put (reply);
  free (raw);
  return NULL;
}

/* Send "set WHAT EXPORT VALUE", or "set WHAT VALUE" if EXPORT is NULL
 * (LINE receives it, LINELEN at least 1100 bytes) and return the reply if it says ok.  Else returns NULL
 * with *RC the exit status, after saying why on stderr: 2 if the
 * export name cannot be sent (nothing was), 1 if the server could not
 * be asked or refused.
 */
static json_object *
ask_set (const char *path, const char *what, const char *export,
         const char *value, double timeout, char *line, size_t linelen,
         char **raw, int *rc)
{
  json_object *reply;
  char err[1024], q[1040];

  *rc = 1;
  if (export == NULL)
    snprintf (line, linelen, "set %s %s", what, value);
  else if (!ctl_quote_export (export, q, sizeof q)) {
    *rc = usage_error ("export name \"%s\": holds a newline or is too "
                       "long, it cannot be sent", export);
    return NULL;
  }
  else
    snprintf (line, linelen, "set %s %s %s", what, q, value);
  reply = ctl_ask (path, line, timeout, raw, err, sizeof err);
  if (reply == NULL) {
    fprintf (stderr, "throttle-ctl: %s\n", err);
    return NULL;
  }
  if (!reply_bool (reply, "ok", false))
    return unexpected (path, line, reply, *raw);
  return reply;
}

/* set capacity EXPORT SIZE, or with EXPORT NULL set server-capacity
 * SIZE: the reply must echo the size asked for.
 */
static int
cmd_set_capacity (const char *path, const char *export, const char *size,
                  bool json, double timeout)
{
  json_object *reply;
  const char *warning;
  char q[1040], line[1100], num[32], a[32], b[32];
  const char *why, *where;
  int64_t sv;
  uint64_t v, cap, prev;
  char *raw;
  int rc;

  if (throttle_size_parse (size, &sv, &why, &where) == -1) {
    /* The filter would refuse it too (nbdkit_parse_size): say so here,
     * before anything is sent.
     */
    if (where != size)
      return usage_error ("bad size \"%s\": %s \"%s\" (%s)",
                          size, why, where, size_grammar);
    return usage_error ("bad size \"%s\": %s (%s)", size, why, size_grammar);
  }
  v = sv;
  if (v == 0)
    return usage_error ("bad size \"%s\": the capacity must be greater "
                        "than 0", size);
  /* Send the size as typed, less what cannot change its value (white
   * space, a sign, leading zeros: at most 19 digits and a suffix stay),
   * so that the server sees the suffix: under throttle-metric=pages or
   * requests it refuses one, as 1M would be a million pages.
   */
  {
    const char *t = size;

    while (*t == ' ' || (*t >= '\t' && *t <= '\r'))
      t++;
    if (*t == '+' || *t == '-')
      t++;
    while (t[0] == '0' && t[1] >= '0' && t[1] <= '9')
      t++;
    snprintf (num, sizeof num, "%s", t);
  }
  reply = ask_set (path, export ? "capacity" : "server-capacity", export,
                   num, timeout, line, sizeof line, &raw, &rc);
  if (reply == NULL)
    return rc;
  if (!reply_uint (reply, export ? "capacity" : "server_capacity", &cap) ||
      !reply_uint (reply, "previous", &prev) || cap != v) {
    unexpected (path, line, reply, raw);
    return 1;
  }
  /* Set, but more than the machine could ever have in flight: the
   * server says why.
   */
  warning = reply_string (reply, "warning");
  if (warning)
    fprintf (stderr, "throttle-ctl: warning: %s\n", warning);
  if (json)
    printf ("%s\n", raw);
  else if (export)
    printf ("export %s: capacity %" PRIu64 " (%s), was %" PRIu64 " (%s)\n",
            ctl_format_export (export, q, sizeof q), cap,
            ctl_format_units (cap, true, a, sizeof a), prev,
            ctl_format_units (prev, true, b, sizeof b));
  else
    printf ("server-wide capacity %" PRIu64 " (%s), was %" PRIu64 " (%s)\n",
            cap, ctl_format_units (cap, true, a, sizeof a), prev,
            ctl_format_units (prev, true, b, sizeof b));
  json_object_put (reply);
  free (raw);
  return fflush (stdout) == 0 ? 0 : 1;
}

/* The duration is checked here as the filter checks it (the same
 * parser, from lib/, and the same hour at most), so that a mistake
 * sends nothing.
 */
static int
cmd_set_latency_target (const char *path, const char *export,
                        const char *target, bool json, double timeout)
{
  json_object *reply, *prev;
  char q[1040], line[1100], was[32];
  const char *echo;
  uint64_t ns = 0;
  char *raw;
  int rc;

  if (strcmp (target, "off") != 0) {
    if (throttle_parse_duration (target, &ns) == -1 ||
        ns > 3600 * UINT64_C (1000000000))
      return usage_error ("bad duration \"%s\": expected a duration of at "
                          "most 1 hour: seconds, or with a unit s, ms, us "
                          "or ns (e.g. 5ms, 500us, 0.1), or off", target);
    if (ns == 0)
      return usage_error ("bad duration \"%s\": must be greater than 0 "
                          "(off for no target)", target);
  }
  reply = ask_set (path, "latency-target", export, target, timeout, line,
                   sizeof line, &raw, &rc);
  if (reply == NULL)
    return rc;
  /* previous_ns is null when there was no target: json-c gives a
   * member whose value is null as present, but NULL.
   */
  echo = reply_string (reply, "latency_target");
  if (echo == NULL || strcmp (echo, target) != 0 ||
      !json_object_object_get_ex (reply, "previous_ns", &prev) ||
      (prev != NULL && !reply_uint (reply, "previous_ns", &ns))) {
    unexpected (path, line, reply, raw);
    return 1;
  }
  if (json)
    printf ("%s\n", raw);
  else
    printf ("export %s: latency target %s, was %s\n",
            ctl_format_export (export, q, sizeof q), target,
            prev == NULL ? "off"
            : ctl_format_ns (ns, was, sizeof was));
  json_object_put (reply);
  free (raw);
  return fflush (stdout) == 0 ? 0 : 1;
}

/* The server's real-time mode: checked here too, so that a mistake
 * sends nothing.
 */
static int
cmd_set_rt (const char *path, const char *mode, bool json, double timeout)
{
  json_object *reply;
  char line[64], err[1024];
  const char *m;
  char *raw;

  if (strcmp (mode, "on") != 0 && strcmp (mode, "off") != 0 &&
      strcmp (mode, "auto") != 0)
    return usage_error ("set rt: bad mode \"%s\": expected on, off or auto",
                        mode);
  snprintf (line, sizeof line, "set rt %s", mode);
  reply = ctl_ask (path, line, timeout, &raw, err, sizeof err);
  if (reply == NULL) {
    fprintf (stderr, "throttle-ctl: %s\n", err);
    return 1;
  }
  m = reply_string (reply_member (reply, "rt", json_type_object), "mode");
  if (!reply_bool (reply, "ok", false) || m == NULL ||
      strcmp (m, mode) != 0) {
    unexpected (path, line, reply, raw);
    return 1;
  }
  if (json)
    printf ("%s\n", raw);
  else
    ctl_print_rt (reply);
  json_object_put (reply);
  free (raw);
  return fflush (stdout) == 0 ? 0 : 1;
}

/* The stats as OpenMetrics text, as the server wrote them. */
static int
cmd_metrics (const char *path, double timeout)
{
  char err[1024];
  char *text = ctl_ask_text (path, "metrics", timeout, err, sizeof err);

  if (text == NULL) {
    fprintf (stderr, "throttle-ctl: %s\n", err);
    return 1;
  }
  printf ("%s\n", text);
  free (text);
  return fflush (stdout) == 0 ? 0 : 1;
}

/* Run the command of WORDS, the N words of the command line that are
 * not options (SOCKET, the command, its arguments); returns the exit
 * status.
 */
static int
run_command (char **words, int n, bool json, double timeout)
{
  const char *path, *cmd;
  char **argv;

  if (n < 2)
    return usage_error ("%s", n == 0 ? "no SOCKET and no command"
                        : "no command");
  path = words[0];
  cmd = words[1];
  argv = words + 2;
  n -= 2;

  if (strcmp (cmd, "stats") == 0) {
    if (n > 1)
      return usage_error ("stats: too many arguments (one EXPORT at most; "
                          "the default export is \"\")");
    return ctl_stats (path, n == 1 ? argv[0] : NULL, json, timeout);
  }
  if (strcmp (cmd, "set") == 0) {
    if (n == 3 && strcmp (argv[0], "capacity") == 0)
      return cmd_set_capacity (path, argv[1], argv[2], json, timeout);
    if (n == 3 && strcmp (argv[0], "latency-target") == 0)
      return cmd_set_latency_target (path, argv[1], argv[2], json, timeout);
    if (n == 2 && strcmp (argv[0], "server-capacity") == 0)
      return cmd_set_capacity (path, NULL, argv[1], json, timeout);
    if (n == 2 && strcmp (argv[0], "rt") == 0)
      return cmd_set_rt (path, argv[1], json, timeout);
    return usage_error ("usage: set capacity EXPORT SIZE, or set "
                        "latency-target EXPORT DURATION|off (the default "
                        "export is \"\"), or set server-capacity SIZE, "
                        "or set rt on|off|auto");
  }
  if (strcmp (cmd, "watch") == 0) {
    double interval = 1;
    long count = 0;
    char *end;

    if (n > 2)
      return usage_error ("watch: too many arguments (INTERVAL and COUNT "
                          "at most)");
    if (n >= 1 && !parse_seconds (argv[0], &interval))
      return usage_error ("watch: bad INTERVAL \"%s\": expected a "
                          "duration from 0.01 to 86400 seconds (1, 0.5, "
                          "500ms)", argv[0]);
    if (n == 2) {
      count = strtol (argv[1], &end, 10);
      if (end == argv[1] || *end != '\0' || count < 1)
        return usage_error ("watch: bad COUNT \"%s\": expected a positive "
                            "number of samples", argv[1]);
    }
    return ctl_watch (path, interval, count, json, timeout);
  }
  if (strcmp (cmd, "metrics") == 0) {
    if (n > 0)
      return usage_error ("metrics: takes no arguments");
    return cmd_metrics (path, timeout);
  }
  return usage_error ("unknown command \"%s\": stats, set, watch or metrics",
                      cmd);
}

int
main (int argc, char *argv[])
{
  static const struct option long_options[] = {
    { "json", no_argument, NULL, 'j' },
    { "timeout", required_argument, NULL, 't' },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
  };
  double timeout = DEFAULT_TIMEOUT;
  bool json = false;
  char **words;
  int c, n = 0, rc;

  /* The words that are not options, in order.  Options may come
   * anywhere before "--", as GNU tools take them, but a word of a
   * dash and a digit is a word: set capacity "" -1 is a bad size, not
   * an unknown option -1.  So getopt ("+": it stops at a word) is
   * called only on what begins as an option.
   */
  words = calloc (argc + 1, sizeof *words);
  if (words == NULL) {
    perror ("throttle-ctl: calloc");
    return 1;
  }
  while (optind < argc) {
    const char *a = argv[optind];

    if (strcmp (a, "--") == 0) {
      while (++optind < argc)
        words[n++] = argv[optind];
      break;
    }
    if (a[0] != '-' || a[1] == '\0' || (a[1] >= '0' && a[1] <= '9')) {
      words[n++] = argv[optind++];
      continue;
    }
    c = getopt_long (argc, argv, "+jt:hV", long_options, NULL);
    switch (c) {
    case 'j':
      json = true;
      break;
    case 't':
      if (!parse_seconds (optarg, &timeout)) {
        free (words);
        return usage_error ("--timeout %s: expected a duration from 0.01 "
                            "to 86400 seconds (5, 0.5, 500ms)", optarg);
      }
      break;
    case 'h':
      printf ("%s", usage_text);
      free (words);
      return 0;
    case 'V':
      printf ("throttle-ctl %s\n", PACKAGE_VERSION);
      free (words);
      return 0;
    default:
      /* getopt_long has already said what was wrong. */
      fprintf (stderr, "Try 'throttle-ctl --help' for more information.\n");
      free (words);
      return 2;
    }
  }
  rc = run_command (words, n, json, timeout);
  free (words);
  return rc;
}
