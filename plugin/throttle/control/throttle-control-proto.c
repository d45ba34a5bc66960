/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the control socket's protocol (see
 * throttle-control-proto.h).  Replies are written to a stdio stream,
 * in the control thread an open_memstream(3) buffer per client.
 */

#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "throttle-control-proto.h"
#include "throttle-export.h"
#include "throttle-json.h"
#include "throttle-metrics.h"

/* --- replies ----------------------------------------------------------- */

/* The budget a command names, held for the command: an export whose
 * last connection closes meanwhile is freed only after it.  NULL after
 * the error reply if it has none.
 */
static struct throttle_export *
get_export (FILE *out, const char *name)
{
  struct throttle_export *exp = throttle_export_get (name);

  if (exp == NULL)
    throttle_json_error (out, "unknown export \"%s\": it has no budget "
                         "(only \"\" and the names of open connections "
                         "have one)", name);
  return exp;
}

/* Write text (len bytes), which it frees; or, if text is NULL or over
 * the output bound, an error saying why and what to ask instead: a
 * reply never just goes missing, and one of several lines is written
 * whole or not at all, since a client reads up to its end.
 */
static void
reply_whole (FILE *out, char *text, size_t len, const char *cmd)
{
  if (text == NULL || len > THROTTLE_CONTROL_MAX_OUTPUT)
    throttle_json_error (out, "%s: the reply does not fit in %d bytes or "
                         "memory ran out: ask for one export with stats "
                         "EXPORT, or read throttle-metrics-file", cmd,
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
cmd_help (FILE *out, int argc, char **argv)
{
  const struct throttle_setter *setter;

  fputs ("{\"commands\":[\"stats [EXPORT]\",\"metrics\"", out);
  for (setter = throttle_setters; setter->name; setter++) {
    putc (',', out);
    throttle_json_string (out, setter->usage);
  }
  fputs (",\"help\"]}\n", out);
}

static void
cmd_stats (FILE *out, int argc, char **argv)
{
  struct throttle_export *exp = NULL;
  char *line;

  if (argc > 2) {
    throttle_json_error (out, "usage: stats [EXPORT]");
    return;
  }
  if (argc == 2 && (exp = get_export (out, argv[1])) == NULL)
    return;
  line = throttle_metrics_stats (exp);
  reply_whole (out, line, line ? strlen (line) : 0, "stats");
  if (exp)
    throttle_export_put (exp);
}

static void
cmd_metrics (FILE *out, int argc, char **argv)
{
  char *text = NULL;
  size_t len = 0;
  FILE *fp = open_memstream (&text, &len);

  if (fp != NULL) {
    int r = throttle_metrics_write (fp, true);

    if (fclose (fp) == EOF || r == -1) {
      free (text);
      text = NULL;
    }
  }
  reply_whole (out, text, len, "metrics");
}

static void
cmd_set (FILE *out, int argc, char **argv)
{
  const struct throttle_setter *setter, *s;
  struct throttle_export *exp;
  char usage[1024];
  size_t len = 0;

  for (setter = throttle_setters; argc >= 2 && setter->name; setter++)
    if (strcmp (argv[1], setter->name) == 0)
      break;
  if (argc < 2 || setter->name == NULL ||
      argc != (setter->per_export ? 4 : 3)) {
    /* A usage that does not fit is cut, never overrun. */
    usage[0] = '\0';
    for (s = throttle_setters; s->name && len < sizeof usage; s++)
      len += snprintf (usage + len, sizeof usage - len, "%s%s",
                       s == throttle_setters ? "" : ", or ", s->usage);
    throttle_json_error (out, "usage: %s (the default export is \"\")",
                         usage);
    return;
  }
  if (!setter->per_export) {
    setter->set (out, NULL, argv[2]);
    return;
  }
  exp = get_export (out, argv[2]);
  if (exp == NULL)
    return;
  setter->set (out, exp, argv[3]);
  throttle_export_put (exp);
}

/* A bare command takes no argument: with one, its usage is its name. */
static const struct {
  const char *name;
  bool bare;
  void (*run) (FILE *out, int argc, char **argv);
} commands[] = {
  { "help", true, cmd_help },
  { "stats", false, cmd_stats },
  { "metrics", true, cmd_metrics },
  { "set", false, cmd_set },
};

void
throttle_control_execute (FILE *out, char *line)
{
  char *argv[MAX_ARGS + 1];
  const char *err = NULL;
  int argc = 0;
  char *p = line;
  size_t i;

  while (argc <= MAX_ARGS && next_token (&p, &argv[argc], &err) == 1)
    argc++;
  if (err) {
    throttle_json_error (out, "%s", err);
    return;
  }
  if (argc == 0)              /* a blank line: nothing to answer */
    return;
  if (argc > MAX_ARGS) {
    throttle_json_error (out, "too many arguments: try help");
    return;
  }
  for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp (argv[0], commands[i].name) == 0) {
      if (commands[i].bare && argc != 1)
        throttle_json_error (out, "usage: %s", argv[0]);
      else
        commands[i].run (out, argc, argv);
      return;
    }
  throttle_json_error (out, "unknown command \"%s\": try help", argv[0]);
}
