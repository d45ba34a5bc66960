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

/* Charge a request, or its first part, waiting for credit.  On success
 * *charged holds the units to credit back, exactly once, when the
 * plugin has returned (done), and *len the bytes they pay for: all of
 * count, or a page-aligned first part of it (throttle_admit_in_parts);
 * the caller serves that part and admits the rest again.
 */
static int
admit (struct throttle_serve_conn *c, enum throttle_op op,
       uint32_t count, uint64_t offset, uint32_t flags,
       uint64_t *charged, uint32_t *len, int *err)
{
  const struct throttle_request req = {
    .op = op, .count = count, .offset = offset, .flags = map_flags (flags),
    .exportname = c->exp->name,
  };
  struct throttle_admit a;
  uint64_t need;
  int r;

  *charged = 0;
  *len = count;
  need = throttle_config.metric.fn (&req);
  if (need == 0)
    return 0;

  r = throttle_admit_start (&a, &c->policy, &c->exp->budget,
                            throttle_config.server, op, count,
                            offset, need);
  if (r == 1) {
    if (throttle_debug_verbose)
      nbdkit_debug ("throttle: wait %s count=%" PRIu32 " offset=%" PRIu64
                    " units=%" PRIu64, op_name (op), count, offset, need);
    r = throttle_admit_wait (&a, throttle_quit_cancelled, NULL,
                             THROTTLE_WAIT_POLL_MS);
  }
  if (r == -1) {
    nbdkit_error ("throttle: %s of %" PRIu32 " bytes at %" PRIu64
                  " abandoned while waiting for credit: "
                  "server shutting down",
                  op_name (op), count, offset);
    *err = ESHUTDOWN;
    return -1;
  }
  *charged = a.charged;
  *len = a.len;
  if (throttle_debug_verbose)
    nbdkit_debug ("throttle: admit %s count=%" PRIu32 " offset=%" PRIu64
                  " units=%" PRIu64 "%s%s",
                  op_name (op), *len, offset, *charged,
                  a.waited ? " after waiting" : "",
                  *len < count ? " (a part)" : "");
  return 0;
}

/* The backend call of a read, zero or trim, or of a write in
 * writethrough.  The throttle_writeback_* hooks pass a request straight
 * down when nothing is written behind (writethrough, or no writable
 * connection has made the export's queue), and otherwise order it
 * among the pending writes.
 */
static int
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
static int
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
  for (;;) {
    uint64_t charged = 0;
    uint32_t len = count;

    if (charge &&
        admit (c, op, count, offset, flags, &charged, &len, err) == -1)
      return -1;
    if (serve_part (c, next, op, buf, len, offset, flags, charged,
                    err) == -1)
      return -1;
    if (len == count)
      return 0;
    buf = (char *) buf + len;
    offset += len;
    count -= len;
  }
}
