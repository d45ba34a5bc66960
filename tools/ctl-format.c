/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-ctl: sizes in, numbers, durations and export names out. */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

bool
ctl_parse_size (const char *s, uint64_t *out, char *err, size_t errlen)
{
  static const char suffixes[] = "kmgtpe";
  const char *p;
  uint64_t scale = 1, v;
  char *end;

  /* As nbdkit_parse_size, which the filter uses for throttle-capacity;
   * the number sent is the result, so both sides agree on it.
   */
  if (!(s[0] >= '0' && s[0] <= '9')) {
    snprintf (err, errlen, "bad size \"%s\": expected a number with an "
              "optional suffix (4096, 256K, 64M, 1G)", s);
    return false;
  }
  errno = 0;
  v = strtoumax (s, &end, 10);
  if (errno || v > INT64_MAX) {
    snprintf (err, errlen, "bad size \"%s\": too large", s);
    return false;
  }
  if (*end != '\0') {
    if (end[1] != '\0') {
      snprintf (err, errlen, "bad size \"%s\": unknown suffix \"%s\" "
                "(b, s, K, M, G, T, P or E)", s, end);
      return false;
    }
    if (*end == 's' || *end == 'S')
      scale = 512;
    else if (*end == 'b' || *end == 'B')
      scale = 1;
    else if ((p = strchr (suffixes, *end | 0x20)) != NULL) {
      int i;

      for (i = 0; i <= p - suffixes; i++)
        scale *= 1024;
    }
    else {
      snprintf (err, errlen, "bad size \"%s\": unknown suffix \"%s\" "
                "(b, s, K, M, G, T, P or E)", s, end);
      return false;
    }
  }
  if (v > INT64_MAX / scale) {
    snprintf (err, errlen, "bad size \"%s\": too large", s);
    return false;
  }
  *out = v * scale;
  return true;
}

const char *
ctl_format_units (uint64_t v, bool bytes, char *buf, size_t len)
{
  static const char suffixes[] = "KMGTPE";
  uint64_t unit = 1024;
  int i = 0;

  if (!bytes || v < 1024) {
    snprintf (buf, len, "%" PRIu64, v);
    return buf;
  }
  /* The largest power of 1024 that is not above v. */
  while (i < 5 && v / unit >= 1024) {
    unit *= 1024;
    i++;
  }
  if (v % unit == 0)
    snprintf (buf, len, "%" PRIu64 "%c", v / unit, suffixes[i]);
  else
    snprintf (buf, len, "%.1f%c", (double) v / unit, suffixes[i]);
  return buf;
}

const char *
ctl_format_ns (double ns, char *buf, size_t len)
{
  if (ns < 1e6)
    snprintf (buf, len, "%.0fus", ns / 1e3);
  else if (ns < 1e9)
    snprintf (buf, len, "%.1fms", ns / 1e6);
  else
    snprintf (buf, len, "%.2fs", ns / 1e9);
  return buf;
}

const char *
ctl_format_export (const char *name, char *buf, size_t len)
{
  const unsigned char *s = (const unsigned char *) name;
  bool plain = *s != '\0';
  size_t o = 0;

  for (; *s; s++)
    if (*s <= ' ' || *s == '"' || *s == '\\' || *s == 0x7f)
      plain = false;
  if (plain) {
    snprintf (buf, len, "%s", name);
    return buf;
  }
  if (len < 3) {
    buf[0] = '\0';
    return buf;
  }
  buf[o++] = '"';
  for (s = (const unsigned char *) name; *s && o + 6 < len; s++) {
    if (*s == '"' || *s == '\\') {
      buf[o++] = '\\';
      buf[o++] = *s;
    }
    else if (*s < 0x20 || *s == 0x7f)
      o += snprintf (buf + o, len - o, "\\x%02x", *s);
    else
      buf[o++] = *s;
  }
  buf[o++] = '"';
  buf[o] = '\0';
  return buf;
}

bool
ctl_quote_export (const char *name, char *buf, size_t len)
{
  size_t o = 0;

  if (strpbrk (name, "\r\n") != NULL || len < 3)
    return false;
  buf[o++] = '"';
  for (; *name; name++) {
    if (o + 4 > len)
      return false;
    if (*name == '"' || *name == '\\')
      buf[o++] = '\\';
    buf[o++] = *name;
  }
  buf[o++] = '"';
  buf[o] = '\0';
  return true;
}
