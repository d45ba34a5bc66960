/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-load --progress: how far a phase is, and its line on
 * stderr.  No libnbd, no libev: tested on its own
 * (tests/test-load-tool.c).
 */

#ifndef LOAD_PROGRESS_H
#define LOAD_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct load_progress {
  const char *phase;            /* "run" or "verify" */
  double elapsed;               /* seconds since the phase began */
  double fraction;              /* of the phase done, 0 to 1 */
  double eta;                   /* seconds left; < 0 while unknown */
  bool done;                    /* the phase's last line */
  double bytes_per_s;           /* over the last interval, or the phase */
  double ops_per_s;
  unsigned in_flight;
};

/* How far a phase is that began ELAPSED seconds ago.  One bounded by
 * time (DURATION > 0 seconds) is ELAPSED / DURATION of the way, with
 * the rest of DURATION left; one bounded by size, DONE of TOTAL bytes,
 * with the rest at the mean rate so far (unknown, eta < 0, until a
 * byte is done; an empty phase is done).  Sets P's fraction, clamped
 * to [0, 1], and eta.
 */
extern void load_progress_estimate (struct load_progress *p, double elapsed,
                                    double duration, uint64_t done,
                                    uint64_t total);

/* P as one line, with its newline:
 *   throttle-load: run       1.0s  40.0%  ETA 1.5s     863.9 MiB/s ...
 * Its percent never says 100.0 before the phase is done.
 */
extern void load_progress_print (FILE *fp, const struct load_progress *p);

#endif /* LOAD_PROGRESS_H */
