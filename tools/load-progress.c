/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-load --progress (see load-progress.h). */

#include <config.h>

#include <math.h>
#include <stdio.h>

#include "load-progress.h"

void
load_progress_estimate (struct load_progress *p, double elapsed,
                        double duration, uint64_t done, uint64_t total)
{
  double f;

  p->elapsed = elapsed;
  if (duration > 0) {
    f = elapsed / duration;
    p->eta = duration - elapsed;
  }
  else if (total == 0) {
    f = 1;
    p->eta = 0;
  }
  else if (done == 0) {
    f = 0;
    p->eta = -1;
  }
  else {
    f = (double) done / total;
    p->eta = elapsed * (total - (double) done) / done;
  }
  /* Requests in flight at the end of a run by time, and the last
   * request of one by size, go past the end.
   */
  if (f >= 1) {
    f = 1;
    p->eta = 0;
  }
  p->fraction = f;
}

/* A duration as 4.2s, 12m05s or 3h07m. */
static const char *
fmt_time (double s, char *buf, size_t len)
{
  long t = lround (s);

  if (s < 60)
    snprintf (buf, len, "%.1fs", s);
  else if (t < 3600)
    snprintf (buf, len, "%ldm%02lds", t / 60, t % 60);
  else
    snprintf (buf, len, "%ldh%02ldm", t / 3600, t % 3600 / 60);
  return buf;
}

void
load_progress_print (FILE *fp, const struct load_progress *p)
{
  double pct = p->fraction * 100;
  char eta[32], el[32];

  /* 99.96% is not done: rounded, it would read 100.0 too early. */
  if (!p->done && pct > 99.9)
    pct = 99.9;
  if (p->done)
    snprintf (eta, sizeof eta, "done");
  else if (p->eta < 0)
    snprintf (eta, sizeof eta, "ETA -");
  else {
    char t[24];

    snprintf (eta, sizeof eta, "ETA %s", fmt_time (p->eta, t, sizeof t));
  }
  fprintf (fp, "throttle-load: %-6s %7s %5.1f%%  %-11s %9.1f MiB/s %8.0f "
           "IOPS  in flight %u\n",
           p->phase, fmt_time (p->elapsed, el, sizeof el), pct, eta,
           p->bytes_per_s / 1048576, p->ops_per_s, p->in_flight);
}
