/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: built-in metrics and loading user metrics. */

#ifndef THROTTLE_METRIC_H
#define THROTTLE_METRIC_H

#include <stddef.h>

#include "nbdkit-throttle-metric.h"

#define THROTTLE_PAGE_SIZE 4096

struct throttle_metric {
  const char *name;           /* "bytes", "pages", "requests" or the path */
  throttle_metric_fn *fn;
  void *dl;                   /* dlopen handle of a user metric, or NULL */
  /* What a page-aligned read or write costs per THROTTLE_PAGE_SIZE
   * bytes if the metric is exactly proportional to its length (bytes:
   * 4096, pages: 1), so that it can be served in page-aligned parts
   * charged separately; 0 if not (requests, user metrics).
   */
  uint64_t page_units;
  /* The capacity when throttle-capacity is not given: 16 MiB of
   * payload, or the pages and requests of about that much at the
   * kernel's usual 256 KiB request.  A user metric's is 16M units.
   */
  uint64_t default_capacity;
};

/* Look up a built-in metric by name, or load a user metric if 'spec'
 * contains a '/'.  On error returns -1 and writes a message saying what
 * was wrong into err[0..errlen-1], without spec: the caller names it
 * ("throttle-metric=SPEC: " and the message).
 */
extern int throttle_metric_load (const char *spec, struct throttle_metric *m,
                                 char *err, size_t errlen);
extern void throttle_metric_unload (struct throttle_metric *m);

extern throttle_metric_fn throttle_metric_bytes;
extern throttle_metric_fn throttle_metric_pages;
extern throttle_metric_fn throttle_metric_requests;

#endif /* THROTTLE_METRIC_H */
