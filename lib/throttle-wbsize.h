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

/* How many writers can hold a bounce buffer (a contiguous copy of a
 * write spanning several pool buffers) at once: the writers share
 * this many, so locked memory does not grow with the writer count.
 * Four, as many as the old default of four writers each held.
 */
#define THROTTLE_WBSIZE_BOUNCE_MAX 4
extern unsigned throttle_wbsize_bounce (unsigned writers);

#endif /* THROTTLE_WBSIZE_H */
