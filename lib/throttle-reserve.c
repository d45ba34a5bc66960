/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the size of the heap reserve (see throttle-reserve.h). */

#include <config.h>

#include "throttle-reserve.h"

uint64_t
throttle_reserve_default (bool parallel, unsigned threads,
                          uint64_t max_request, uint64_t kernel_request)
{
  uint64_t workers = parallel && threads > 1 ? threads : 1;
  uint64_t per_request =
    max_request < kernel_request ? max_request : kernel_request;

  return workers * per_request;
}

bool
throttle_reserve_fits (uint64_t size, uint64_t ram)
{
  return size <= ram / 2;
}
