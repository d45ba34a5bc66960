/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: what the parameters and the control socket
 * share (see throttle-parse.h).
 */

#include <config.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nbdkit-filter.h>

#include "throttle-budget.h"
#include "throttle-parse.h"

uint64_t
throttle_capacity_min (const struct throttle_metric *m)
{
  return m->page_units ? m->page_units : 1;
}

int
throttle_capacity_judge (const struct throttle_metric *m, const char *what,
                         const char *text, uint64_t value,
                         char *err, size_t errlen)
{
  static const char units[] = "KMGTPE";
  uint64_t min = throttle_capacity_min (m), ram, max;
  bool pages = strcmp (m->name, "pages") == 0;
  bool requests = strcmp (m->name, "requests") == 0;
  size_t n = strlen (text);
  /* A size was parsed from text: a letter can only be its suffix, last. */
  bool suffix = n > 0 && ((text[n - 1] >= 'a' && text[n - 1] <= 'z') ||
                          (text[n - 1] >= 'A' && text[n - 1] <= 'Z'));
  double bytes;
  int i;

  if (value > THROTTLE_BUDGET_MAX_UNITS) {
    snprintf (err, errlen, "%s: above %" PRIu64 ", the largest capacity "
              "a budget holds", what, (uint64_t) THROTTLE_BUDGET_MAX_UNITS);
    return -1;
  }
  if (value < min) {
    if (m->page_units)
      snprintf (err, errlen, "%s: below %" PRIu64 ", the smallest capacity "
                "under throttle-metric=%s (a page: requests are served in "
                "whole pages, and less could never be granted)",
                what, min, m->name);
    else
      snprintf (err, errlen, "%s: below %" PRIu64 ", the smallest capacity "
                "under throttle-metric=%s", what, min, m->name);
    return -1;
  }
  if (!pages && !requests && strcmp (m->name, "bytes") != 0)
    return 0;                   /* a user metric: its unit is unknown */
  if (requests && suffix) {
    snprintf (err, errlen, "%s: under throttle-metric=requests the "
              "capacity counts requests, not bytes: %s would be %" PRIu64
              " requests in flight; write the number of requests",
              what, text, value);
    return -1;
  }
  if (pages && suffix) {
    /* What the pages would hold, in the largest binary unit below it. */
    bytes = (double) value * THROTTLE_PAGE_SIZE;
    for (i = 0; i < 5 && bytes >= 1024.0 * 1024.0; i++)
      bytes /= 1024.0;
    snprintf (err, errlen, "%s: under throttle-metric=pages the capacity "
              "counts pages, not bytes: %s would be %" PRIu64 " pages "
              "(%.0f %ciB); write the number of pages",
              what, text, value, bytes / 1024.0, units[i]);
    return -1;
  }
  ram = throttle_ram ();
  max = pages || requests ? ram / THROTTLE_PAGE_SIZE : ram;
  if (value <= max)
    return 0;
  snprintf (err, errlen, "%s: above %" PRIu64 " %s, the most this machine's "
            "RAM (%" PRIu64 " bytes) could hold in flight (%s): this "
            "capacity can never be reached, so it never throttles",
            what, max, m->name, ram,
            requests ? "each request in flight holds at least a page: a "
            "worker thread's stack or a writeback buffer" :
            pages ? "each page in flight is held in the server's memory" :
            "each byte in flight is held in the server's memory");
  return 1;
}

uint64_t
throttle_ram (void)
{
  long pages = sysconf (_SC_PHYS_PAGES), size = sysconf (_SC_PAGESIZE);

  if (pages <= 0 || size <= 0)
    return UINT64_MAX;          /* unknown: never warn */
  return (uint64_t) pages * size;
}

const char *
throttle_errtext (int err)
{
  const char *s = strerrordesc_np (err);

  return s ? s : "unknown error";
}

void
throttle_warning (const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "nbdkit: throttle: warning: ");
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
}
