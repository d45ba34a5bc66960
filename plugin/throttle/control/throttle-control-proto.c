/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the control socket's protocol (see
 * throttle-control-proto.h).  Replies are written to a stdio stream,
 * in the control thread an open_memstream(3) buffer per client.
 */

#include <config.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "throttle-control-proto.h"
#include "throttle-export.h"
#include "throttle-json.h"
#include "throttle-metrics.h"
#include "throttle-report.h"

/* --- replies ----------------------------------------------------------- */

static void
reply_unknown_export (FILE *out, const char *name)
{
  throttle_report_error (out, "unknown export \"%s\": it has no "
                                "budget (only \"\" and the names of open "
                                "connections have one)", name);
}

/* Reply with the stats, or with an error saying why they cannot be
 * given: a reply never just goes missing.
 */
static void
reply_stats (FILE *out, struct throttle_export *exp, size_t from)
{
  char *line = throttle_metrics_stats (exp, from);

  if (line == NULL || strlen (line) > THROTTLE_CONTROL_MAX_OUTPUT)
    throttle_report_error (out, "stats: the reply does not fit in "
                                  "%d bytes or memory ran out: ask for one "
                                  "export, or a page with stats from N",
                                  THROTTLE_CONTROL_MAX_OUTPUT);
  else {
    fputs (line, out);
    putc ('\n', out);
  }
  free (line);
}

/* The metrics, or an error line if they do not fit the output bound:
 * written whole or not at all, since a client reads up to "# EOF".
 */
static void
reply_metrics (FILE *out)
{
  char *text = NULL;
  size_t len = 0;
  FILE *fp = open_memstream (&text, &len);

  if (fp != NULL) {
    int r = throttle_metrics_write (fp, true);

    if (fclose (fp) == EOF || r == -1)
      len = SIZE_MAX;
  }
  if (fp == NULL || len > THROTTLE_CONTROL_MAX_OUTPUT)
    throttle_report_error (out, "metrics: the reply does not fit in "
                                  "%d bytes or memory ran out: use "
                                  "throttle-metrics-file, or stats from N",
                                  THROTTLE_CONTROL_MAX_OUTPUT);
  else
    fwrite (text, 1, len, out);
  free (text);
}

/* --- the tokenizer ----------------------------------------------------- */

/* Split off the next word of *p, in place.  A word is a run of
 * non-blanks, or a double-quoted string in which \" and \\ stand for
 * " and \ (so "" is the default export's empty name).  Returns 1 and
 * sets *tok, 0 at the end, -1 with *err on a malformed quote.
 */
static int
next_token (char **p, char **tok, const char **err)
{
  char *s = *p, *d;

  while (*s == ' ' || *s == '\t')
    s++;
  if (*s == '\0') {
    *p = s;
    return 0;
  }
  if (*s != '"') {
    *tok = s;
    while (*s && *s != ' ' && *s != '\t')
      s++;
    if (*s)
      *s++ = '\0';
    *p = s;
    return 1;
  }

  *tok = d = ++s;
  for (;;) {
    if (*s == '\0') {
      *err = "unterminated quoted string";
      return -1;
    }
    if (*s == '"') {
      s++;
      break;
    }
    if (*s == '\\') {
      s++;
      if (*s != '"' && *s != '\\') {
        *err = "bad escape in a quoted string: only \\\" and \\\\";
        return -1;
      }
    }
    *d++ = *s++;
  }
  if (*s != '\0' && *s != ' ' && *s != '\t') {
    *err = "no blank after a quoted string";
    return -1;
  }
  *d = '\0';                  /* d < s: the quotes were consumed */
  *p = s;
  return 1;
}

/* --- commands ---------------------------------------------------------- */

#define MAX_ARGS 4

static void
reply_set_usage (FILE *out)
{
  const struct throttle_report_setter *setter;
  char usage[1024];
  size_t i, len = 0;

  usage[0] = '\0';
  /* A usage that does not fit is cut, never overrun. */
  for (i = 0; (setter = throttle_report_setter (i)) != NULL &&
         len < sizeof usage; i++)
    len += snprintf (usage + len, sizeof usage - len, "%s%s",
                     i ? ", or " : "", setter->usage);
  throttle_report_error (out, "usage: %s (the default export is "
                                "\"\")", usage);
}

/* The budget a per-export command names is held for the command: an
 * export whose last connection closes meanwhile is freed only after it.
 */
static void
cmd_set (FILE *out, int argc, char **argv)
{
  const struct throttle_report_setter *setter = NULL, *s;
  struct throttle_export *exp;
  size_t i;

  for (i = 0; argc >= 2 && (s = throttle_report_setter (i)) != NULL; i++)
    if (strcmp (argv[1], s->name) == 0)
      setter = s;
  if (setter == NULL || argc != (setter->per_export ? 4 : 3)) {
    reply_set_usage (out);
    return;
  }
  if (!setter->per_export) {
    setter->set (out, NULL, argv[2]);
    return;
  }
  exp = throttle_export_get (argv[2]);
  if (exp == NULL) {
    reply_unknown_export (out, argv[2]);
    return;
  }
  setter->set (out, exp, argv[3]);
  throttle_export_put (exp);
}

static void
reply_help (FILE *out)
{
  const struct throttle_report_setter *setter;
  size_t i;

  fputs ("{\"commands\":[\"stats [EXPORT]\",\"stats from N\",\"metrics\"",
         out);
  for (i = 0; (setter = throttle_report_setter (i)) != NULL; i++) {
    putc (',', out);
    throttle_json_string (out, setter->usage);
  }
  fputs (",\"help\"]}\n", out);
}

static void
cmd_stats (FILE *out, int argc, char **argv)
{
  struct throttle_export *exp = NULL;
  unsigned long long from = 0;
  char *end;

  if (argc == 3 && strcmp (argv[1], "from") == 0) {
    errno = 0;
    from = strtoull (argv[2], &end, 10);
    if (argv[2][0] < '0' || argv[2][0] > '9' || *end != '\0' ||
        errno || from > SIZE_MAX) {
      throttle_report_error (out, "bad number \"%s\": expected the "
                                    "index of the first export of the page "
                                    "(0, or the \"next\" of the page "
                                    "before)", argv[2]);
      return;
    }
  }
  else if (argc > 2) {
    throttle_report_error (out, "usage: stats [EXPORT] or "
                                  "stats from N");
    return;
  }
  else if (argc == 2 && (exp = throttle_export_get (argv[1])) == NULL) {
    reply_unknown_export (out, argv[1]);
    return;
  }
  reply_stats (out, exp, from);
  if (exp)
    throttle_export_put (exp);
}

void
throttle_control_execute (FILE *out, char *line)
{
  char *argv[MAX_ARGS + 1];
  const char *err = NULL;
  int argc = 0;
  char *p = line;

  while (argc <= MAX_ARGS && next_token (&p, &argv[argc], &err) == 1)
    argc++;
  if (err) {
    throttle_report_error (out, "%s", err);
    return;
  }
  if (argc == 0)              /* a blank line: nothing to answer */
    return;
  if (argc > MAX_ARGS) {
    throttle_report_error (out, "too many arguments: try help");
    return;
  }

  if (strcmp (argv[0], "help") == 0) {
    if (argc != 1)
      throttle_report_error (out, "usage: help");
    else
      reply_help (out);
  }
  else if (strcmp (argv[0], "stats") == 0)
    cmd_stats (out, argc, argv);
  else if (strcmp (argv[0], "metrics") == 0) {
    if (argc != 1)
      throttle_report_error (out, "usage: metrics");
    else
      reply_metrics (out);
  }
  else if (strcmp (argv[0], "set") == 0)
    cmd_set (out, argc, argv);
  else
    throttle_report_error (out, "unknown command \"%s\": try help",
                                  argv[0]);
}
