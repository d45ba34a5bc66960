/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the one string writer (see throttle-json.h). */

#include <config.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "throttle-json.h"

/* The length of the valid UTF-8 sequence that begins at s (1 to 4
 * bytes, s[0] >= 0x80), or 0 if none does.  s is NUL-terminated: the
 * check stops at the first byte that does not continue the sequence.
 */
static size_t
utf8_len (const unsigned char *s)
{
  unsigned char c = s[0];
  size_t n, i;

  if (c >= 0xc2 && c <= 0xdf)
    n = 2;
  else if (c >= 0xe0 && c <= 0xef)
    n = 3;
  else if (c >= 0xf0 && c <= 0xf4)
    n = 4;
  else
    return 0;
  for (i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80)
      return 0;
  /* Overlong forms, surrogates, and above U+10FFFF. */
  if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) ||
      (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))
    return 0;
  return n;
}

void
throttle_quote (FILE *fp, const char *str, bool json)
{
  const unsigned char *s = (const unsigned char *) str;
  size_t n;

  putc ('"', fp);
  while (*s) {
    if (*s == '"' || *s == '\\') {
      putc ('\\', fp);
      putc (*s++, fp);
    }
    else if (json && (*s < 0x20 || *s == 0x7f))
      fprintf (fp, "\\u%04x", *s++);
    else if (!json && *s == '\n') {
      fputs ("\\n", fp);
      s++;
    }
    else if (*s < 0x80)
      putc (*s++, fp);
    else if ((n = utf8_len (s)) > 0) {
      fwrite (s, 1, n, fp);
      s += n;
    }
    else {
      fputs (json ? "\\ufffd" : "\xef\xbf\xbd", fp);     /* U+FFFD */
      s++;
    }
  }
  putc ('"', fp);
}

void
throttle_json_error (FILE *fp, const char *fmt, ...)
{
  char msg[2048];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  fputs ("{\"error\":", fp);
  throttle_json_string (fp, msg);
  fputs ("}\n", fp);
}
