/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: how many writer threads write-behind starts.
 *
 * Under sustained load the writers, not the clients, set the pace: a
 * full pool drains at (writers / backend latency) writes per second,
 * while writethrough puts as many writes on the backend at once as
 * nbdkit has request threads serving the connection.  So the default
 * gives writeback at least that many writers wherever the backend
 * could run them in parallel, and one where it could not.  Pure: no
 * nbdkit headers, the caller maps nbdkit's thread model.
 */

#ifndef THROTTLE_WBSIZE_H
#define THROTTLE_WBSIZE_H

#include <stddef.h>

/* nbdkit's thread models, strictest first (as NBDKIT_THREAD_MODEL_*). */
enum throttle_wbsize_model {
  THROTTLE_WBSIZE_SERIALIZE_CONNECTIONS,
  THROTTLE_WBSIZE_SERIALIZE_ALL_REQUESTS,
  THROTTLE_WBSIZE_SERIALIZE_REQUESTS,
  THROTTLE_WBSIZE_PARALLEL,
};

/* nbdkit's request threads per connection when -t is not given (a
 * filter cannot ask nbdkit for -t).
 */
#define THROTTLE_WBSIZE_NBDKIT_THREADS 16
/* Under serialize_requests each backend handle takes one request at a
 * time: writethrough gets one write per client connection on the
 * backend, and each writer is a handle of its own (for plugins with
 * this model, often a costly one: a session, a remote connection).
 * Four cover the usual multi-connection clients (nbd-client -C 4).
 */
#define THROTTLE_WBSIZE_SERIAL_WRITERS 4
#define THROTTLE_WBSIZE_MAX 64

/* The number of writers for an export, 1 to THROTTLE_WBSIZE_MAX.
 * requested: throttle-writeback-threads, 0 if not set (then the
 * default from model, the thread model nbdkit chose for the whole
 * stack).  *why (if why is not NULL) is set to
 * a static phrase saying what decided it, for a debug line.
 */
extern unsigned throttle_wbsize_writers (enum throttle_wbsize_model model,
                                         unsigned requested,
                                         const char **why);

/* Each writer copies a write spanning several pool buffers into a
 * bounce buffer of its own for one backend call.  The writers' bounce
 * buffers together hold at most THROTTLE_WBSIZE_BOUNCE_BYTES (what the
 * old default of 4 writers locked), so locked memory does not grow with
 * the writer count; a writer writes a record larger than its bounce
 * buffer in pieces of that size, in order.  Returns each writer's
 * bounce size: max_write (the largest write written behind) if that
 * fits, else the share of each writer rounded down to 4096 bytes,
 * never less than 4096.
 */
#define THROTTLE_WBSIZE_BOUNCE_BYTES (8 * 1024 * 1024)
extern size_t throttle_wbsize_bounce_size (unsigned writers, size_t max_write);

#endif /* THROTTLE_WBSIZE_H */
