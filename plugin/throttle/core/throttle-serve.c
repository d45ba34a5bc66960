/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: a connection's data requests, from nbdkit's
 * callbacks to the plugin and back.  See throttle-serve.h.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include <nbdkit-filter.h>

#include "throttle-config.h"
#include "throttle-admit.h"
#include "throttle-clock.h"
#include "throttle-export.h"
#include "throttle-quit.h"
#include "throttle-serve.h"

uint32_t throttle_max_request;

static const char *
op_name (enum throttle_op op)
{
  switch (op) {
  case THROTTLE_OP_READ: return "read";
  case THROTTLE_OP_WRITE: return "write";
  case THROTTLE_OP_ZERO: return "zero";
  case THROTTLE_OP_TRIM: return "trim";
  default: return "other";
  }
}

static uint32_t
map_flags (uint32_t flags)
{
  return (flags & NBDKIT_FLAG_FUA ? THROTTLE_FLAG_FUA : 0) |
    (flags & NBDKIT_FLAG_MAY_TRIM ? THROTTLE_FLAG_MAY_TRIM : 0) |
    (flags & NBDKIT_FLAG_FAST_ZERO ? THROTTLE_FLAG_FAST_ZERO : 0) |
    (flags & NBDKIT_FLAG_REQ_ONE ? THROTTLE_FLAG_REQ_ONE : 0);
}

/* Admission, in two steps, so that serve's path is one straight line
 * for the usual request.
 *
 * admit_start: start charging a request, or what is left of one, to
 * a (the caller's, alive until admit_finish).  Returns 0 (granted, or
 * nothing to charge), 1 (queued) or -1 (shut down), for admit_finish.
 *
 * These and plugin_call are inlined into serve, the path of every
 * request: called out of line they cost about 120 instructions a
 * request more (make bench, case 1i).
 */
static inline __attribute__ ((always_inline)) int
admit_start (struct throttle_conn *c, struct throttle_admit *a,
             enum throttle_op op, uint32_t count, uint64_t offset,
             uint32_t flags, bool rest)
{
  const struct throttle_request req = {
    .op = op, .count = count, .offset = offset, .flags = map_flags (flags),
    .exportname = c->exp->name,
  };
  uint64_t need = throttle_config.metric.fn (&req);
  int r;

  if (need == 0) {
    a->charged = 0;
    a->len = count;
    a->waited = false;
    return 0;
  }
  r = throttle_admit_start (a, &c->policy, &c->exp->budget,
                            throttle_config.server, op, count, offset, need,
                            rest);
  if (r == 1 && throttle_debug_verbose)
    nbdkit_debug ("throttle: wait %s count=%" PRIu32 " offset=%" PRIu64
                  " units=%" PRIu64, op_name (op), count, offset, need);
  return r;
}

/* admit_finish: wait for credit if admit_start queued (r == 1).  On
 * success *charged holds the units to credit back, exactly once, when
 * the plugin has returned, and *len the bytes they pay for: all of
 * count, or a page-aligned first part of it (throttle_admit_in_parts),
 * after which the caller admits the rest as a new request.
 */
static inline __attribute__ ((always_inline)) int
admit_finish (struct throttle_admit *a, int r, enum throttle_op op,
              uint32_t count, uint64_t offset, uint64_t *charged,
              uint32_t *len, int *err)
{
  if (r == 1)
    r = throttle_admit_wait (a, throttle_quit_cancelled, NULL,
                             THROTTLE_WAIT_POLL_MS);
  if (r == -1) {
    nbdkit_error ("throttle: %s of %" PRIu32 " bytes at %" PRIu64
                  " abandoned while waiting for credit: "
                  "server shutting down",
                  op_name (op), count, offset);
    *err = ESHUTDOWN;
    return -1;
  }
  *charged = a->charged;
  *len = a->len;
  if (throttle_debug_verbose && *charged > 0)
    nbdkit_debug ("throttle: admit %s count=%" PRIu32 " offset=%" PRIu64
                  " units=%" PRIu64 "%s%s",
                  op_name (op), *len, offset, *charged,
                  a->waited ? " after waiting" : "",
                  *len < count ? " (a part)" : "");
  return 0;
}

/* The plugin's own call of a read, write, zero or trim. */
static inline __attribute__ ((always_inline)) int
plugin_call (nbdkit_next *next, enum throttle_op op, void *buf,
             uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  switch (op) {
  case THROTTLE_OP_READ:
    return next->pread (next, buf, count, offset, flags, err);
  case THROTTLE_OP_WRITE:
    return next->pwrite (next, buf, count, offset, flags, err);
  case THROTTLE_OP_ZERO:
    return next->zero (next, count, offset, flags, err);
  case THROTTLE_OP_TRIM:
    return next->trim (next, count, offset, flags, err);
  default:
    abort ();
  }
}

/* Serve one request of connection c: charged (if 'charge') and passed
 * down part after part until all of count is served or a part fails;
 * a part is admitted as a new request would be, only once the one
 * before it has returned.  All in the request's own thread: a part is
 * a call to the plugin as nbdkit made it, so the plugin's error
 * (nbdkit_set_error), nbdkit_export_name and the peer calls answer as
 * for a request not split.  A failed part ends the request at once:
 * nothing after it is admitted, and its error is the request's, which
 * the NBD protocol allows to have written some of it.  Each part
 * carries the request's flags, so a FUA write is on stable storage
 * whole when it returns.  Only reads and writes are split, see
 * throttle_admit_in_parts.
 *
 * Each part's units are credited once the plugin has returned, except
 * a write that the connection's ops take over with its units.  The
 * export's sampler (the latency target) hears each part that the
 * plugin served and that succeeded: a write taken over is acknowledged
 * before the plugin has it, and an error can be quick or slow for
 * reasons that have nothing to do with the load.
 */
static inline __attribute__ ((always_inline)) int
serve (struct throttle_conn *c, nbdkit_next *next, enum throttle_op op,
       bool charge, void *buf, uint32_t count, uint64_t offset,
       uint32_t flags, int *err)
{
  bool rest = false;

  for (;;) {
    struct throttle_admit a;
    uint64_t charged = 0, start = 0;
    uint32_t len = count;
    throttle_sample_fn *sample;
    int r;

    if (charge &&
        admit_finish (&a, admit_start (c, &a, op, count, offset, flags, rest),
                      op, count, offset, &charged, &len, err) == -1)
      return -1;
    if (c->ops && op == THROTTLE_OP_WRITE)
      r = c->ops->pwrite (c->ops_state, next, buf, len, offset, flags,
                          charged, err);
    else {
      sample = __atomic_load_n (&c->exp->sample, __ATOMIC_RELAXED);
      if (sample)
        start = throttle_now_ns ();
      r = c->ops ? c->ops->call (c->ops_state, next, op, buf, len, offset,
                                 flags, err)
        : plugin_call (next, op, buf, len, offset, flags, err);
      if (sample && r == 0)
        sample (c->exp, start, op);
      throttle_export_credit (c->exp, charged);
    }
    if (r == -1 || len == count)
      return r;
    buf = buf ? (char *) buf + len : NULL;
    offset += len;
    count -= len;
    rest = true;
  }
}

/* nbdkit 1.32 does not hold clients to the advertised maximum: it
 * receives a write's payload before any filter sees the request.  A
 * larger read or write is refused before it reaches the plugin, unless
 * throttle-max-request=plugin leaves that to the layers below.
 */
static int
too_large (struct throttle_conn *c, const char *op, uint32_t count,
           uint64_t offset, int *err)
{
  uint32_t max = c->max_request;

  if (max == 0 || count <= max)
    return 0;
  nbdkit_error ("throttle: %s of %" PRIu32 " bytes at %" PRIu64 " refused: "
                "larger than throttle-max-request (%" PRIu32 " bytes), the "
                "maximum block size advertised to clients",
                op, count, offset, max);
  *err = EINVAL;
  return -1;
}

/* Every callback starts with throttle_thread_enter, before the thread
 * can fault or allocate, whether or not its request is charged, and
 * throttle_pace_enter; and ends with throttle_pace_reply, whatever the
 * result: built against nbdkit before 1.33.10, a reply of a closing
 * connection must not reach nbdkit together with another
 * (throttle-compat.h).
 */
static inline __attribute__ ((always_inline)) int
request (struct throttle_conn *c, nbdkit_next *next, enum throttle_op op,
         bool charge, void *buf, uint32_t count, uint64_t offset,
         uint32_t flags, int *err)
{
  int r = 0;

  throttle_thread_enter ();
  throttle_pace_enter ();
  if (op == THROTTLE_OP_READ || op == THROTTLE_OP_WRITE)
    r = too_large (c, op == THROTTLE_OP_READ ? "read" : "write", count,
                   offset, err);
  if (r == 0)
    r = serve (c, next, op, charge, buf, count, offset, flags, err);
  throttle_pace_reply (&c->pace, r);
  return r;
}

int
throttle_pread (nbdkit_next *next, void *handle, void *buf,
                uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  return request (handle, next, THROTTLE_OP_READ, throttle_config.charge_reads,
                  buf, count, offset, flags, err);
}

/* The buffer is only read (serve passes it on as const). */
int
throttle_pwrite (nbdkit_next *next, void *handle, const void *buf,
                 uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  return request (handle, next, THROTTLE_OP_WRITE, true, (void *) buf, count,
                  offset, flags, err);
}

int
throttle_zero (nbdkit_next *next, void *handle,
               uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  return request (handle, next, THROTTLE_OP_ZERO, true, NULL, count, offset,
                  flags, err);
}

int
throttle_trim (nbdkit_next *next, void *handle,
               uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  return request (handle, next, THROTTLE_OP_TRIM, true, NULL, count, offset,
                  flags, err);
}

/* Flush and extents are not charged. */
int
throttle_flush (nbdkit_next *next, void *handle, uint32_t flags, int *err)
{
  struct throttle_conn *c = handle;
  int r;

  throttle_thread_enter ();
  throttle_pace_enter ();
  r = c->ops ? c->ops->flush (c->ops_state, next, flags, err)
    : next->flush (next, flags, err);
  throttle_pace_reply (&c->pace, r);
  return r;
}

int
throttle_extents (nbdkit_next *next, void *handle, uint32_t count,
                  uint64_t offset, uint32_t flags,
                  struct nbdkit_extents *extents, int *err)
{
  struct throttle_conn *c = handle;
  int r;

  throttle_thread_enter ();
  throttle_pace_enter ();
  r = c->ops ? c->ops->extents (c->ops_state, next, count, offset, flags,
                                extents, err)
    : next->extents (next, count, offset, flags, extents, err);
  throttle_pace_reply (&c->pace, r);
  return r;
}
