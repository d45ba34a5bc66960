/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: serving one data request, part after part.
 * See throttle-serve.h.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include <nbdkit-filter.h>

#include "throttle-config.h"
#include "throttle-adapt-glue.h"
#include "throttle-admit.h"
#include "throttle-export.h"
#include "throttle-quit.h"
#include "throttle-serve.h"
#include "throttle-writeback.h"

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

/* Admission, in two steps, so that throttle_serve's path is one
 * straight line for the usual request.
 *
 * admit_start: start charging a request, or what is left of one, to
 * a (the caller's, alive until admit_finish).  Returns 0 (granted, or
 * nothing to charge), 1 (queued) or -1 (shut down), for admit_finish.
 *
 * These, serve_part and backend_call are inlined into throttle_serve,
 * the path of every request: called out of line they cost about 120
 * instructions a request more (make bench, case 1i).
 */
static inline __attribute__ ((always_inline)) int
admit_start (struct throttle_serve_conn *c, struct throttle_admit *a,
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

/* The backend call of a read, zero or trim, or of a write in
 * writethrough.  The throttle_writeback_* hooks pass a request straight
 * down when nothing is written behind (writethrough, or no writable
 * connection has made the export's queue), and otherwise order it
 * among the pending writes.
 */
static inline __attribute__ ((always_inline)) int
backend_call (struct throttle_serve_conn *c, nbdkit_next *next,
              enum throttle_op op, void *buf, uint32_t count,
              uint64_t offset, uint32_t flags, int *err)
{
  switch (op) {
  case THROTTLE_OP_READ:
    return throttle_writeback_pread (&c->wb, next, buf, count, offset, flags,
                                     err);
  case THROTTLE_OP_WRITE:
    return next->pwrite (next, buf, count, offset, flags, err);
  case THROTTLE_OP_ZERO:
    return throttle_writeback_zero (&c->wb, next, count, offset, flags, err);
  case THROTTLE_OP_TRIM:
    return throttle_writeback_trim (&c->wb, next, count, offset, flags, err);
  default:
    abort ();
  }
}

/* Serve one admitted part of a request; credits 'charged' once the
 * plugin has returned.  A write in writeback mode hands 'charged' over
 * instead, to be credited when it is on the backend, and its latency
 * is not sampled (its reply comes before the backend has it).
 */
static inline __attribute__ ((always_inline)) int
serve_part (struct throttle_serve_conn *c, nbdkit_next *next,
            enum throttle_op op, void *buf, uint32_t count, uint64_t offset,
            uint32_t flags, uint64_t charged, int *err)
{
  uint64_t start;
  int r;

  /* c->wb.exp: set in writeback mode alone (throttle_wb_conn). */
  if (op == THROTTLE_OP_WRITE && c->wb.exp != NULL)
    return throttle_writeback_pwrite (&c->wb, c->exp, next, buf, count, offset,
                                      flags, charged, err);
  start = throttle_adapt_start (c->exp);
  r = backend_call (c, next, op, buf, count, offset, flags, err);
  throttle_adapt_done (c->exp, start, op, r);
  throttle_export_credit (c->exp, charged);
  return r;
}

/* admit_start, then admit_finish. */
static inline __attribute__ ((always_inline)) int
admit (struct throttle_serve_conn *c, struct throttle_admit *a,
       enum throttle_op op, uint32_t count, uint64_t offset, uint32_t flags,
       bool rest, uint64_t *charged, uint32_t *len, int *err)
{
  return admit_finish (a, admit_start (c, a, op, count, offset, flags, rest),
                       op, count, offset, charged, len, err);
}

/* Serve a request in parts, from a granted part on: its first len of
 * the count bytes at offset, charged 'charged', then each rest in
 * turn, admitted as a new request would be, until all of it is served
 * or a part fails.  All in the request's own thread: a part is a call
 * to the plugin as nbdkit made it, so the plugin's error
 * (nbdkit_set_error), nbdkit_export_name and the peer calls answer as
 * for a request not split.  A failed part ends the request at once:
 * nothing after it is admitted, and its error is the request's.
 * Out of line: only large requests come here.
 */
static int __attribute__ ((noinline))
serve_parts (struct throttle_serve_conn *c, nbdkit_next *next,
             enum throttle_op op, void *buf, uint32_t count, uint64_t offset,
             uint32_t flags, uint32_t len, uint64_t charged, int *err)
{
  for (;;) {
    struct throttle_admit a;

    if (serve_part (c, next, op, buf, len, offset, flags, charged,
                    err) == -1)
      return -1;
    if (len == count)
      return 0;
    buf = (char *) buf + len;
    offset += len;
    count -= len;
    if (admit (c, &a, op, count, offset, flags, true, &charged, &len,
               err) == -1)
      return -1;
  }
}

/* Usually in one part; only reads and writes are split, see
 * throttle_admit_in_parts.  Each part carries the request's flags, so
 * a FUA write is on stable storage whole when it returns; a failed
 * part fails the request, which the NBD protocol allows to have
 * written some of it.
 */
int
throttle_serve (struct throttle_serve_conn *c, nbdkit_next *next,
                enum throttle_op op, bool charge, void *buf, uint32_t count,
                uint64_t offset, uint32_t flags, int *err)
{
  struct throttle_admit a;
  uint64_t charged = 0;
  uint32_t len = count;

  if (charge && admit (c, &a, op, count, offset, flags, false, &charged,
                       &len, err) == -1)
    return -1;
  if (len == count)
    return serve_part (c, next, op, buf, count, offset, flags, charged, err);
  return serve_parts (c, next, op, buf, count, offset, flags, len, charged,
                      err);
}
