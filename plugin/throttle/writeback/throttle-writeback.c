/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: write-behind's request hooks.
 *
 * The ordering engine (the queue, its records and buffers, barriers,
 * flushes and their errors) is lib/throttle-wbq.c; these hooks put
 * each request of a connection in its place there: a write queued or
 * passed through, a read, zero, trim or extents ordered against the
 * pending writes, a flush waiting for the writes acknowledged before
 * it.  They take no lock of their own (the queue's is inside
 * throttle_wbq_*).
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <nbdkit-filter.h>

#include "throttle-compat.h"
#include "throttle-config.h"
#include "throttle-export.h"
#include "throttle-parse.h"
#include "throttle-quit.h"
#include "throttle-serve.h"
#include "throttle-wbq.h"
#include "throttle-writeback.h"
#include "throttle-writeback-config.h"
#include "throttle-writeback-writers.h"

/* A connection's state: which background write failures it has been
 * told of, written by its open and its own flushes.
 */
struct throttle_wb_conn {
  struct throttle_export *exp;
  uint64_t seen_errors;
};

/* A request that goes to the backend directly takes its place in the
 * order: after older overlapping pending writes, before newer ones
 * ('write': a write not queued, counted).  Returns the queue to give
 * ordered_end after the backend call, or NULL if nothing is written
 * behind (the call then needs no order).
 */
static struct throttle_wbq *
ordered_begin (struct throttle_wbq_barrier *b, uint32_t count,
               uint64_t offset, bool write)
{
  struct throttle_wb *wb = throttle_wb_get ();

  if (wb == NULL)
    return NULL;
  throttle_wbq_barrier_begin (wb->q, b, offset, count, write);
  return wb->q;
}

static void
ordered_end (struct throttle_wbq *q, struct throttle_wbq_barrier *b)
{
  if (q)
    throttle_wbq_barrier_end (q, b);
}

/* Takes ownership of 'charged' units: they are credited to the
 * export's budget when the write is on the backend (or has failed),
 * also when this returns -1.
 */
static int
wb_pwrite (void *state, nbdkit_next *next, const void *buf, uint32_t count,
           uint64_t offset, uint32_t flags, uint64_t charged, int *err)
{
  struct throttle_wb_conn *c = state;
  struct throttle_export *exp = c->exp;
  struct throttle_wb *wb = throttle_wb_get ();
  struct throttle_wbq_barrier b;
  struct throttle_wbq *q;
  int res;

  /* A FUA write must be on the backend before its reply anyway, and
   * one larger than THROTTLE_WBQ_MAX_WRITE or the pool is not queued
   * (throttle_wbq_fits).
   */
  if (wb == NULL || (flags & NBDKIT_FLAG_FUA) ||
      !throttle_wbq_fits (wb->q, count)) {
    q = ordered_begin (&b, count, offset, true);
    res = next->pwrite (next, buf, count, offset, flags, err);
    ordered_end (q, &b);
    throttle_export_credit (exp, charged);
    return res;
  }

  throttle_abort_hold ();
  throttle_abort_pending (1);
  if (throttle_wbq_queue (wb->q, buf, count, offset, charged,
                          throttle_quit_cancelled, NULL) == -1) {
    throttle_abort_pending (-1);
    throttle_export_credit (exp, charged);
    nbdkit_error ("throttle: writeback: write of %" PRIu32 " bytes at %"
                  PRIu64 " abandoned while waiting for pool buffers: "
                  "server shutting down", count, offset);
    *err = ESHUTDOWN;
    return -1;
  }
  return 0;
}

/* A read, zero or trim: the core charges and credits it. */
static int
wb_call (void *state, nbdkit_next *next, enum throttle_op op, void *buf,
         uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  struct throttle_wb *wb = throttle_wb_get ();
  struct throttle_wbq_barrier b;
  struct throttle_wbq *q;
  int r;

  if (op == THROTTLE_OP_READ) {
    if (wb == NULL || !throttle_wbq_read_begin (wb->q, &b, offset, count))
      return next->pread (next, buf, count, offset, flags, err);
    r = next->pread (next, buf, count, offset, flags, err);
    throttle_wbq_read_end (wb->q, &b, buf, r == 0);
    return r;
  }
  q = ordered_begin (&b, count, offset, false);
  r = op == THROTTLE_OP_ZERO ? next->zero (next, count, offset, flags, err)
    : next->trim (next, count, offset, flags, err);
  ordered_end (q, &b);
  return r;
}

/* The backend's extents do not know about pending writes: a range being
 * written may still show as a hole, and a client that skips holes
 * would lose the data.  And the backend may describe more than was
 * asked, where writes may still be pending: only [offset,
 * offset+count) is passed on.  (Extents are not on a swap device's
 * writeout path: the allocation is harmless.)  Whether or not the
 * export has writes pending yet; writethrough (no ops) passes the
 * backend's answer on as it is.
 */
static int
wb_extents (void *state, nbdkit_next *next, uint32_t count, uint64_t offset,
            uint32_t flags, struct nbdkit_extents *extents, int *err)
{
  struct nbdkit_extents *mine = nbdkit_extents_new (offset, offset + count);
  struct throttle_wbq_barrier b;
  struct throttle_wbq *q;
  size_t i;
  int r;

  if (mine == NULL) {
    *err = errno ? errno : ENOMEM;
    return -1;
  }
  q = ordered_begin (&b, count, offset, false);
  r = next->extents (next, count, offset, flags, mine, err);
  ordered_end (q, &b);
  for (i = 0; r == 0 && i < nbdkit_extents_count (mine); ++i) {
    struct nbdkit_extent e = nbdkit_get_extent (mine, i);

    r = nbdkit_add_extent (extents, e.offset, e.length, e.type);
    if (r == -1)
      *err = errno ? errno : EIO;
  }
  nbdkit_extents_free (mine);
  return r;
}

static int
wb_flush (void *state, nbdkit_next *next, uint32_t flags, int *err)
{
  struct throttle_wb_conn *c = state;
  struct throttle_wb *wb = throttle_wb_get ();
  struct throttle_wbq_flush f;
  struct throttle_wbq_error last;
  uint64_t failures;
  char what[128];
  int res;

  if (wb == NULL)
    return next->flush (next, flags, err);

  /* Without multi-conn the plugin promises nothing about writes made
   * through other handles, so each writer flushes its own.
   */
  throttle_wbq_flush_begin (wb->q, &f);
  throttle_wbq_flush_wait (wb->q, &f, !wb->multi_conn && wb->writer_flush);

  res = next->flush (next, flags, err);

  /* A flush that fails anyway reports the failures too (with its own
   * error), so that a writer's failed flush, always awaited by some
   * flush, is always reported.
   */
  failures = throttle_wbq_flush_end (wb->q, &f, &c->seen_errors, &last);
  if (failures > 0) {
    if (res == 0) {
      *err = last.errnum;
      res = -1;
    }
    if (last.count == 0)
      snprintf (what, sizeof what, "a writer's flush: %s",
                throttle_errtext (last.errnum));
    else
      snprintf (what, sizeof what, "write of %" PRIu32 " bytes at %" PRIu64
                ": %s", last.count, last.offset,
                throttle_errtext (last.errnum));
    nbdkit_error ("throttle: writeback: flush of export \"%s\": %" PRIu64
                  " failure(s) of background writes or writers' flushes "
                  "since this flush arrived or this connection's last "
                  "report; last: %s", wb->exp->name, failures, what);
  }
  return res;
}

static const struct throttle_conn_ops wb_ops = {
  .pwrite = wb_pwrite,
  .call = wb_call,
  .flush = wb_flush,
  .extents = wb_extents,
};

/* The feature's .open: in writeback mode every connection (to "", the
 * one name it serves) goes through the hooks above, also a read-only
 * one, which creates nothing but must see the pending writes of the
 * others.
 */
int
throttle_writeback_conn_open (struct throttle_conn *conn,
                              nbdkit_context *nxdata, int readonly,
                              void **state)
{
  struct throttle_wb_conn *c;
  struct throttle_wb *wb;

  if (!throttle_writeback_enabled ())
    return 0;
  if (!readonly && throttle_writeback_make (conn->exp, nxdata) == -1)
    return -1;
  c = malloc (sizeof *c);
  if (c == NULL) {
    nbdkit_error ("malloc: %s", throttle_errtext (errno));
    return -1;
  }
  c->exp = conn->exp;
  wb = throttle_wb_get ();
  c->seen_errors = wb ? throttle_wbq_seen_at_open (wb->q) : 0;
  *state = c;
  conn->ops = &wb_ops;
  conn->ops_state = c;
  return 0;
}

int
throttle_writeback_conn_finalize (void *state)
{
  struct throttle_wb *wb = throttle_wb_get ();
  struct throttle_wbq_stats s;
  struct throttle_wbq_flush f;

  if (wb == NULL)
    return 0;
  if (throttle_debug_verbose) {
    throttle_wbq_get_stats (wb->q, &s);
    if (s.pending)
      nbdkit_debug ("throttle: writeback: disconnect waits for %" PRIu64
                    " pending writes", s.pending);
  }
  /* As a flush waits, without the writers' flushes. */
  throttle_wbq_flush_begin (wb->q, &f);
  throttle_wbq_flush_wait (wb->q, &f, false);
  return 0;
}

void
throttle_writeback_conn_close (void *state)
{
  free (state);
}
