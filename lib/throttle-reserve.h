/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the size of the heap reserve for nbdkit's request
 * buffers (throttle-reserve), without nbdkit.
 *
 * nbdkit gives each worker thread its own request buffer, which keeps
 * the size of the largest request that worker has served; serialized
 * thread models serve every request in the connection thread.  So the
 * reserve that covers them is one buffer per worker, each as large as
 * the largest request a kernel client sends.
 */

#ifndef THROTTLE_RESERVE_H
#define THROTTLE_RESERVE_H

#include <stdbool.h>
#include <stdint.h>

/* The default reserve: 'threads' buffers (nbdkit's --threads) where
 * requests are served in parallel and threads > 1, else one; each of
 * max_request (throttle-max-request) or kernel_request (what the
 * kernel's nbd driver sends by default), whichever is smaller.
 */
static inline uint64_t
throttle_reserve_default (bool parallel, unsigned threads,
                          uint64_t max_request, uint64_t kernel_request)
{
  uint64_t workers = parallel && threads > 1 ? threads : 1;

  return workers * (max_request < kernel_request ? max_request :
                    kernel_request);
}

/* Whether a reserve of 'size' bytes may be taken on a machine with
 * 'ram' bytes: at most half of it, so that a mistaken
 * throttle-threads cannot lock the machine's memory away.
 */
static inline bool
throttle_reserve_fits (uint64_t size, uint64_t ram)
{
  return size <= ram / 2;
}

#endif /* THROTTLE_RESERVE_H */
