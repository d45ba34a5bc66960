/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the public API for user metrics.
 *
 * A metric maps one NBD request to the number of units it holds in
 * flight.  To provide your own, build a shared object that exports
 *
 *   uint64_t throttle_metric (const struct throttle_request *req);
 *
 * and optionally
 *
 *   int throttle_metric_api_version = THROTTLE_METRIC_API_VERSION;
 *
 * then use throttle-metric=/path/to/metric.so.  The function is called
 * from many threads at once, once per request, before the request is
 * admitted: it must be thread-safe, must not block and should not
 * allocate memory (it runs on the writeout path of a swap device).
 * Returning 0 admits the request without charging it.
 */

#ifndef NBDKIT_THROTTLE_METRIC_H
#define NBDKIT_THROTTLE_METRIC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define THROTTLE_METRIC_API_VERSION 1

enum throttle_op {
  THROTTLE_OP_READ = 0,
  THROTTLE_OP_WRITE = 1,
  THROTTLE_OP_ZERO = 2,
  THROTTLE_OP_TRIM = 3,
  THROTTLE_OP_FLUSH = 4,
  THROTTLE_OP_CACHE = 5,
  THROTTLE_OP_EXTENTS = 6,
};

#define THROTTLE_FLAG_FUA       (1 << 0)
#define THROTTLE_FLAG_MAY_TRIM  (1 << 1)
#define THROTTLE_FLAG_FAST_ZERO (1 << 2)
#define THROTTLE_FLAG_REQ_ONE   (1 << 3)

struct throttle_request {
  enum throttle_op op;
  uint32_t count;             /* bytes; 0 for flush */
  uint64_t offset;
  uint32_t flags;             /* THROTTLE_FLAG_* */
  const char *exportname;     /* never NULL: the export whose budget is
                               * charged, "" for the default export and
                               * for any name the plugin has not listed */
};

typedef uint64_t throttle_metric_fn (const struct throttle_request *req);

#ifdef __cplusplus
}
#endif

#endif /* NBDKIT_THROTTLE_METRIC_H */
