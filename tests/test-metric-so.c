/* SPDX-License-Identifier: BSD-3-Clause */
/* A user metric for the tests: charges writes one unit per started
 * MiB plus one, so the test can tell it from every built-in.  Built
 * a second time without the symbol to test that error.
 */

#include <config.h>

#include "nbdkit-throttle-metric.h"

#ifndef TEST_NO_SYMBOL
int throttle_metric_api_version = THROTTLE_METRIC_API_VERSION;

uint64_t
throttle_metric (const struct throttle_request *req)
{
  if (req->op != THROTTLE_OP_WRITE)
    return 0;
  return 1 + (req->count + 1048575) / 1048576;
}
#endif
