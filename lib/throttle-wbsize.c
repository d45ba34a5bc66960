/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: how many writer threads write-behind starts.
 * See throttle-wbsize.h for why.
 */

#include <config.h>

#include <stddef.h>

#include "throttle-wbsize.h"

unsigned
throttle_wbsize_writers (enum throttle_wbsize_model model,
                         unsigned requested,
                         const char **why)
{
  const char *w;
  unsigned n;

  if (requested > 0) {
    w = "throttle-writeback-threads";
    n = requested;
  }
  else {
    switch (model) {
    case THROTTLE_WBSIZE_SERIALIZE_CONNECTIONS:
    case THROTTLE_WBSIZE_SERIALIZE_ALL_REQUESTS:
      /* The backend runs one request at a time whoever sends it. */
      w = "a serialized thread model: one request at a time";
      n = 1;
      break;
    case THROTTLE_WBSIZE_SERIALIZE_REQUESTS:
      w = "thread model serialize_requests: one request per handle";
      n = THROTTLE_WBSIZE_SERIAL_WRITERS;
      break;
    case THROTTLE_WBSIZE_PARALLEL:
    default:
      /* Fewer would drain a full pool slower than writethrough's
       * request threads write: writeback would lose under load.
       */
      w = "thread model parallel: as many as nbdkit's request threads "
        "per connection";
      n = THROTTLE_WBSIZE_NBDKIT_THREADS;
      break;
    }
  }
  if (n < 1)
    n = 1;
  if (n > THROTTLE_WBSIZE_MAX)
    n = THROTTLE_WBSIZE_MAX;
  if (why)
    *why = w;
  return n;
}

size_t
throttle_wbsize_bounce_size (unsigned writers, size_t max_write)
{
  size_t share;

  if (writers < 1)
    writers = 1;
  share = THROTTLE_WBSIZE_BOUNCE_BYTES / writers / 4096 * 4096;
  if (share < 4096)
    share = 4096;
  return max_write < share ? max_write : share;
}
