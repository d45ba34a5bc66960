/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: built-in metrics and user metrics.
 *
 * What zero and trim cost.  They carry no payload, so they pin no
 * buffer in the server, but each is work in flight at the backend
 * (a device discard or zero-out may take as long as a write), and a
 * flood of them must stay bounded like anything else.  So each is
 * charged as the smallest write would be: one page under "bytes"
 * (4096 units), one page under "pages", one request under
 * "requests".  Flush, cache and extents cost nothing: they hold no
 * data and the budget exists to bound data.  Reads are charged like
 * writes, but the filter only asks the metric about reads when reads
 * are throttled (see throttle-reads in the man page).
 */

#include <config.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "throttle-metric.h"

static uint64_t
pages_touched (uint64_t offset, uint32_t count)
{
  if (count == 0)
    return 0;
  return (offset + count - 1) / THROTTLE_PAGE_SIZE - offset / THROTTLE_PAGE_SIZE + 1;
}

uint64_t
throttle_metric_bytes (const struct throttle_request *req)
{
  switch (req->op) {
  case THROTTLE_OP_READ:
  case THROTTLE_OP_WRITE:
    return req->count;
  case THROTTLE_OP_ZERO:
  case THROTTLE_OP_TRIM:
    return THROTTLE_PAGE_SIZE;
  default:
    return 0;
  }
}

uint64_t
throttle_metric_pages (const struct throttle_request *req)
{
  switch (req->op) {
  case THROTTLE_OP_READ:
  case THROTTLE_OP_WRITE:
    return pages_touched (req->offset, req->count);
  case THROTTLE_OP_ZERO:
  case THROTTLE_OP_TRIM:
    return 1;
  default:
    return 0;
  }
}

uint64_t
throttle_metric_requests (const struct throttle_request *req)
{
  switch (req->op) {
  case THROTTLE_OP_READ:
  case THROTTLE_OP_WRITE:
  case THROTTLE_OP_ZERO:
  case THROTTLE_OP_TRIM:
    return 1;
  default:
    return 0;
  }
}

#define DEFAULT_BYTES (16 * 1024 * 1024)

static const struct throttle_metric builtins[] = {
  { "bytes", throttle_metric_bytes, .page_units = THROTTLE_PAGE_SIZE,
    .default_capacity = DEFAULT_BYTES },
  { "pages", throttle_metric_pages, .page_units = 1,
    .default_capacity = DEFAULT_BYTES / THROTTLE_PAGE_SIZE },
  { "requests", throttle_metric_requests,
    .default_capacity = DEFAULT_BYTES / (256 * 1024) },
};

int
throttle_metric_load (const char *spec, struct throttle_metric *m,
                      char *err, size_t errlen)
{
  const int *version;
  size_t i;
  void *dl;

  for (i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
    if (strcmp (spec, builtins[i].name) == 0) {
      *m = builtins[i];
      return 0;
    }
  }
  memset (m, 0, sizeof *m);

  /* Like nbdkit's plugin names: a name with a '/' is a path. */
  if (strchr (spec, '/') == NULL) {
    snprintf (err, errlen,
              "unknown metric: expected bytes, pages, requests "
              "or the path of a shared object");
    return -1;
  }

  dl = dlopen (spec, RTLD_NOW | RTLD_LOCAL);
  if (dl == NULL) {
    snprintf (err, errlen, "cannot load: %s", dlerror ());
    return -1;
  }
  dlerror ();
  m->fn = (throttle_metric_fn *) dlsym (dl, "throttle_metric");
  if (m->fn == NULL) {
    snprintf (err, errlen,
              "does not define the symbol throttle_metric");
    dlclose (dl);
    return -1;
  }
  version = dlsym (dl, "throttle_metric_api_version");
  if (version && *version != THROTTLE_METRIC_API_VERSION) {
    snprintf (err, errlen,
              "built for metric API version %d, "
              "this filter has version %d",
              *version, THROTTLE_METRIC_API_VERSION);
    dlclose (dl);
    return -1;
  }
  m->name = spec;
  m->dl = dl;
  m->default_capacity = DEFAULT_BYTES;
  return 0;
}

void
throttle_metric_unload (struct throttle_metric *m)
{
  if (m->dl)
    dlclose (m->dl);
  memset (m, 0, sizeof *m);
}
