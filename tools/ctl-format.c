/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-ctl: numbers, durations and export names out (sizes in are
 * lib/throttle-size.c's, as the filter reads them).
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

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
