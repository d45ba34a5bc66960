/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-ctl: a minimal JSON reader (RFC 8259), for the control
 * socket's replies.  Strict: anything that is not JSON is an error
 * naming the byte where it went wrong, since a server that answers
 * garbage must be reported, not half understood.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl-json.h"

/* Deeper than any reply of the filter; bounds the recursion. */
#define MAX_DEPTH 32

struct parser {
  const char *start, *p;
  char *err;
  size_t errlen;
  bool failed;
};

static void
fail (struct parser *ps, const char *what)
{
  if (!ps->failed)
    snprintf (ps->err, ps->errlen, "%s at byte %zu", what,
              (size_t) (ps->p - ps->start));
  ps->failed = true;
}

static void
skip_blanks (struct parser *ps)
{
  while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
    ps->p++;
}

static struct ctl_json *parse_value (struct parser *ps, int depth);

static int
hex4 (const char *s)
{
  int v = 0, i;

  for (i = 0; i < 4; i++) {
    int c = s[i], d;

    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

static void
put_utf8 (char **d, unsigned cp)
{
  char *o = *d;

  if (cp < 0x80)
    *o++ = cp;
  else if (cp < 0x800) {
    *o++ = 0xc0 | (cp >> 6);
    *o++ = 0x80 | (cp & 0x3f);
  }
  else if (cp < 0x10000) {
    *o++ = 0xe0 | (cp >> 12);
    *o++ = 0x80 | ((cp >> 6) & 0x3f);
    *o++ = 0x80 | (cp & 0x3f);
  }
  else {
    *o++ = 0xf0 | (cp >> 18);
    *o++ = 0x80 | ((cp >> 12) & 0x3f);
    *o++ = 0x80 | ((cp >> 6) & 0x3f);
    *o++ = 0x80 | (cp & 0x3f);
  }
  *d = o;
}

/* A string at ps->p (on its opening quote), decoded.  \u0000 is
 * refused: the result is a C string.  The decoded form is never longer
 * than the escaped one, so the escaped length bounds the buffer.
 */
static char *
parse_string (struct parser *ps)
{
  const char *s = ps->p + 1, *e = s;
  char *out, *d;

  while (*e && *e != '"')
    e += e[0] == '\\' && e[1] ? 2 : 1;
  out = d = malloc (e - s + 1);
  if (out == NULL) {
    fail (ps, strerror (errno));
    return NULL;
  }
  for (;;) {
    unsigned char c = *s;

    if (c == '"')
      break;
    if (c == '\0') {
      ps->p = s;
      fail (ps, "unterminated string");
      goto err;
    }
    if (c < 0x20) {
      ps->p = s;
      fail (ps, "control character in a string");
      goto err;
    }
    if (c != '\\') {
      *d++ = c;
      s++;
      continue;
    }
    s++;
    switch (*s) {
    case '"': case '\\': case '/': *d++ = *s++; break;
    case 'b': *d++ = '\b'; s++; break;
    case 'f': *d++ = '\f'; s++; break;
    case 'n': *d++ = '\n'; s++; break;
    case 'r': *d++ = '\r'; s++; break;
    case 't': *d++ = '\t'; s++; break;
    case 'u': {
      int cp = hex4 (s + 1), lo;

      if (cp <= 0) {
        ps->p = s;
        fail (ps, cp == 0 ? "\\u0000 in a string" : "bad \\u escape");
        goto err;
      }
      s += 5;
      if (cp >= 0xd800 && cp <= 0xdbff) {
        if (s[0] != '\\' || s[1] != 'u' ||
            (lo = hex4 (s + 2)) < 0xdc00 || lo > 0xdfff) {
          ps->p = s;
          fail (ps, "unpaired surrogate in a string");
          goto err;
        }
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        s += 6;
      }
      else if (cp >= 0xdc00 && cp <= 0xdfff) {
        ps->p = s;
        fail (ps, "unpaired surrogate in a string");
        goto err;
      }
      put_utf8 (&d, cp);
      break;
    }
    default:
      ps->p = s;
      fail (ps, "bad escape in a string");
      goto err;
    }
  }
  *d = '\0';
  ps->p = s + 1;
  return out;

 err:
  free (out);
  return NULL;
}

/* Skip the digits at *s, of which there must be one at least: else
 * fail there and return false.
 */
static bool
skip_digits (struct parser *ps, const char **s)
{
  if (!(**s >= '0' && **s <= '9')) {
    ps->p = *s;
    fail (ps, "bad number");
    return false;
  }
  while (**s >= '0' && **s <= '9')
    (*s)++;
  return true;
}

static void
parse_number (struct parser *ps, struct ctl_json *v)
{
  const char *s = ps->p, *digits;
  bool integer = true;
  char *end;

  if (*s == '-')
    s++;
  digits = s;
  if (*s == '0')
    s++;
  else if (*s >= '1' && *s <= '9')
    while (*s >= '0' && *s <= '9')
      s++;
  else {
    fail (ps, "bad number");
    return;
  }
  if (*s == '.') {
    integer = false;
    s++;
    if (!skip_digits (ps, &s))
      return;
  }
  if (*s == 'e' || *s == 'E') {
    integer = false;
    s++;
    if (*s == '+' || *s == '-')
      s++;
    if (!skip_digits (ps, &s))
      return;
  }
  v->num = strtod (ps->p, NULL);
  if (integer && ps->p == digits) {
    errno = 0;
    v->uint = strtoumax (digits, &end, 10);
    v->is_uint = errno == 0 && end == s;
  }
  ps->p = s;
}

/* The members of an object or the elements of an array, ps->p on the
 * opening bracket.
 */
static void
parse_container (struct parser *ps, struct ctl_json *v, int depth)
{
  char close = v->type == CTL_JSON_OBJECT ? '}' : ']';
  struct ctl_json **tail = &v->child;

  ps->p++;
  skip_blanks (ps);
  if (*ps->p == close) {
    ps->p++;
    return;
  }
  for (;;) {
    char *key = NULL;
    struct ctl_json *m;

    skip_blanks (ps);
    if (v->type == CTL_JSON_OBJECT) {
      if (*ps->p != '"') {
        fail (ps, "expected a member name");
        return;
      }
      if ((key = parse_string (ps)) == NULL)
        return;
      skip_blanks (ps);
      if (*ps->p != ':') {
        free (key);
        fail (ps, "expected ':'");
        return;
      }
      ps->p++;
    }
    m = parse_value (ps, depth + 1);
    if (m == NULL) {
      free (key);
      return;
    }
    m->key = key;
    *tail = m;
    tail = &m->next;
    skip_blanks (ps);
    if (*ps->p == ',') {
      ps->p++;
      continue;
    }
    if (*ps->p == close) {
      ps->p++;
      return;
    }
    fail (ps, v->type == CTL_JSON_OBJECT ? "expected ',' or '}'"
          : "expected ',' or ']'");
    return;
  }
}

static struct ctl_json *
parse_value (struct parser *ps, int depth)
{
  struct ctl_json *v;

  if (depth > MAX_DEPTH) {
    fail (ps, "nested too deeply");
    return NULL;
  }
  skip_blanks (ps);
  v = calloc (1, sizeof *v);
  if (v == NULL) {
    fail (ps, strerror (errno));
    return NULL;
  }
  switch (*ps->p) {
  case '{':
    v->type = CTL_JSON_OBJECT;
    parse_container (ps, v, depth);
    break;
  case '[':
    v->type = CTL_JSON_ARRAY;
    parse_container (ps, v, depth);
    break;
  case '"':
    v->type = CTL_JSON_STRING;
    v->str = parse_string (ps);
    break;
  case 't':
  case 'f':
  case 'n': {
    static const char *const words[] = { "true", "false", "null" };
    size_t i;

    for (i = 0; i < 3; i++)
      if (strncmp (ps->p, words[i], strlen (words[i])) == 0)
        break;
    if (i == 3) {
      fail (ps, "unexpected word");
      break;
    }
    v->type = i == 2 ? CTL_JSON_NULL : CTL_JSON_BOOL;
    v->boolean = i == 0;
    ps->p += strlen (words[i]);
    break;
  }
  case '\0':
    fail (ps, "unexpected end");
    break;
  default:
    if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) {
      v->type = CTL_JSON_NUMBER;
      parse_number (ps, v);
    }
    else
      fail (ps, "unexpected character");
  }
  if (ps->failed) {
    ctl_json_free (v);
    return NULL;
  }
  return v;
}

struct ctl_json *
ctl_json_parse (const char *text, char *err, size_t errlen)
{
  struct parser ps = { .start = text, .p = text, .err = err,
                       .errlen = errlen };
  struct ctl_json *v;

  v = parse_value (&ps, 0);
  if (v == NULL)
    return NULL;
  skip_blanks (&ps);
  if (*ps.p != '\0') {
    fail (&ps, "text after the value");
    ctl_json_free (v);
    return NULL;
  }
  return v;
}

void
ctl_json_free (struct ctl_json *v)
{
  while (v) {
    struct ctl_json *next = v->next;

    ctl_json_free (v->child);
    free (v->key);
    free (v->str);
    free (v);
    v = next;
  }
}

const struct ctl_json *
ctl_json_get (const struct ctl_json *obj, const char *key)
{
  const struct ctl_json *m;

  if (obj == NULL || obj->type != CTL_JSON_OBJECT)
    return NULL;
  for (m = obj->child; m; m = m->next)
    if (strcmp (m->key, key) == 0)
      return m;
  return NULL;
}

bool
ctl_json_get_uint (const struct ctl_json *obj, const char *key,
                   uint64_t *out)
{
  const struct ctl_json *m = ctl_json_get (obj, key);

  if (m == NULL || m->type != CTL_JSON_NUMBER || !m->is_uint)
    return false;
  *out = m->uint;
  return true;
}
