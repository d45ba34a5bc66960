/* SPDX-License-Identifier: BSD-3-Clause */
/* Drive the connections: one libev loop, one ev_io per libnbd handle,
 * libnbd's asynchronous API underneath.
 *
 * Phases: every handle connects; then requests are kept queued up to
 * the queue depth until the duration or the byte count is reached;
 * the requests in flight drain; with --verify, everything written is
 * read back.  Any failure ends the loop at once with a message: a run
 * that fails is never reported as a measurement.
 *
 * libnbd holds its lock while a completion callback runs, so callbacks
 * only record; new requests are issued after nbd_aio_notify_* returns.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>
#include <libnbd.h>

#include "throttle-clock.h"

#include "load.h"
#include "load-progress.h"
#include "load-verify.h"
#include "load-workload.h"

enum phase { CONNECTING, RUNNING, VERIFYING, DONE };

struct conn;

struct req {
  struct conn *conn;
  struct req *next_free;
  uint64_t offset;
  uint64_t start_ns;
  void *buf;                    /* owned only with --verify */
  uint32_t size;
  unsigned size_idx;
  bool is_read;
  bool check;                   /* compare what was read with the pattern */
};

struct conn {
  struct run *run;
  unsigned id;
  struct nbd_handle *nbd;
  ev_io io;
  bool ready;
  unsigned in_flight;
  struct req *slots, *free_list;
  struct load_stream stream;
  uint64_t ops, bytes;
  /* The first failed request seen inside a callback, reported once
   * nbd_aio_notify_* has returned and can say more about the cause.
   */
  int req_errno;
  char req_what[160];
};

struct run {
  const struct load_config *cfg;
  struct load_result *res;
  struct ev_loop *loop;
  ev_timer tick, deadline;
  ev_signal sigint, sigterm;
  enum phase phase;
  struct conn *conns;
  unsigned nr_ready;
  bool stop_issuing;
  bool failed;
  /* A second signal: stop at once, leaving the requests in flight. */
  bool abandoned;
  bool closing;                 /* no callback may touch state any more */
  /* The server is alive and answering, so let it finish what is in
   * flight before we leave (nbdkit 1.32 can abort when a client
   * vanishes with replies pending).
   */
  bool server_alive;

  uint64_t area_start, area_len;
  uint32_t max_size;
  uint64_t issued_bytes;

  uint64_t start_ns, end_ns, last_reply_ns, last_event_ns;
  /* --progress: what the current phase had done at the last line. */
  uint64_t tick_ops, tick_bytes, tick_ns;

  /* The read-back of --verify: since when, how much there is to read,
   * and how much has been.
   */
  uint64_t verify_start_ns, verify_total;
  uint64_t verify_ops, verify_bytes;

  void *shared_wbuf, *shared_rbuf;   /* without --verify */
  struct load_written written;       /* --verify */
  uint64_t first_mismatch;
};

static void __attribute__ ((format (printf, 2, 3)))
fail (struct run *run, const char *fmt, ...)
{
  va_list ap;

  if (!run->failed) {
    run->failed = true;
    va_start (ap, fmt);
    vsnprintf (run->res->error, sizeof run->res->error, fmt, ap);
    va_end (ap);
  }
  ev_break (run->loop, EVBREAK_ALL);
}

/* ---- requests --------------------------------------------------- */

static int
completed (void *opaque, int *error)
{
  struct req *req = opaque;
  struct conn *conn = req->conn;
  struct run *run = conn->run;
  struct load_result *res = run->res;
  uint64_t now, lat;

  if (run->closing)
    return 1;

  now = throttle_now_ns ();
  conn->in_flight--;
  run->last_event_ns = now;

  if (*error) {
    if (conn->req_errno == 0) {
      conn->req_errno = *error;
      snprintf (conn->req_what, sizeof conn->req_what,
                "%s of %" PRIu32 " bytes at offset %" PRIu64,
                req->is_read ? "read" : "write", req->size, req->offset);
    }
    goto out;
  }

  if (req->check) {
    uint64_t first = 0;
    uint64_t bad = load_pattern_check (req->buf, req->offset, req->size,
                                  run->cfg->seed, &first);
    if (bad && res->verify_mismatches == 0)
      run->first_mismatch = first;
    res->verify_mismatches += bad;
    res->verify_bytes += req->size;
  }

  if (run->phase == VERIFYING) {
    run->verify_ops++;
    run->verify_bytes += req->size;
    goto out;
  }

  if (!req->is_read && run->written.bits)
    load_written_mark (&run->written, req->offset, req->size);

  lat = now - req->start_ns;
  load_hist_add (res->all, lat);
  load_hist_add (req->is_read ? res->read : res->write, lat);
  load_hist_add (res->by_size[req->size_idx], lat);
  if (req->is_read) {
    res->read_ops++;
    res->read_bytes += req->size;
  }
  else {
    res->write_ops++;
    res->write_bytes += req->size;
  }
  res->ops++;
  res->bytes += req->size;
  conn->ops++;
  conn->bytes += req->size;
  run->last_reply_ns = now;

 out:
  if (run->cfg->verify) {
    free (req->buf);
    req->buf = NULL;
  }
  req->next_free = conn->free_list;
  conn->free_list = req;
  return 1;
}

static int
issue (struct conn *conn, struct req *req)
{
  struct run *run = conn->run;
  nbd_completion_callback cb = { .callback = completed, .user_data = req };
  int64_t r;

  conn->free_list = req->next_free;
  req->conn = conn;
  if (run->cfg->verify) {
    req->buf = malloc (req->size);
    if (req->buf == NULL) {
      fail (run, "out of memory for a %" PRIu32 "-byte buffer", req->size);
      return -1;
    }
    if (!req->is_read)
      load_pattern_fill (req->buf, req->offset, req->size, run->cfg->seed);
  }
  req->start_ns = throttle_now_ns ();
  if (req->is_read)
    r = nbd_aio_pread (conn->nbd, req->buf ? req->buf : run->shared_rbuf,
                       req->size, req->offset, cb, 0);
  else
    r = nbd_aio_pwrite (conn->nbd, req->buf ? req->buf : run->shared_wbuf,
                        req->size, req->offset, cb, 0);
  if (r == -1) {
    free (req->buf);
    req->buf = NULL;
    req->next_free = conn->free_list;
    conn->free_list = req;
    if (nbd_aio_is_dead (conn->nbd) || nbd_aio_is_closed (conn->nbd))
      fail (run, "connection %u: the connection was lost while sending "
            "(the server closed it or died; %u requests were in flight)",
            conn->id, conn->in_flight);
    else
      fail (run, "connection %u: cannot send a %s: %s", conn->id,
            req->is_read ? "read" : "write", nbd_get_error ());
    return -1;
  }
  conn->in_flight++;
  return 0;
}

/* The next request of the workload: the pattern's check only for a
 * read of what was written before.
 */
static void
next_workload_req (struct conn *conn, struct req *req)
{
  struct run *run = conn->run;
  struct load_pick p;

  load_stream_next (&conn->stream, run->cfg, &p);
  req->offset = p.offset;
  req->size = p.size;
  req->size_idx = p.size_idx;
  req->is_read = p.is_read;
  req->check = run->cfg->verify && req->is_read &&
    load_written_all (&run->written, req->offset, req->size);
}

static unsigned total_in_flight (struct run *run);

/* --progress: one line for the phase under way; DONE for its last,
 * whose rates are the phase's mean.  A run by time is as far as its
 * time; one by size (--bytes, and the read-back of --verify) as far
 * as the bytes that came back.
 */
static void
progress (struct run *run, bool done)
{
  const struct load_config *cfg = run->cfg;
  struct load_progress p = { .done = done,
                             .in_flight = total_in_flight (run) };
  uint64_t now = throttle_now_ns (), ops, bytes;
  double dt;

  if (run->phase == VERIFYING) {
    p.phase = "verify";
    ops = run->verify_ops;
    bytes = run->verify_bytes;
    load_progress_estimate (&p, (now - run->verify_start_ns) / 1e9, 0,
                            bytes, run->verify_total);
  }
  else {
    p.phase = "run";
    ops = run->res->ops;
    bytes = run->res->bytes;
    load_progress_estimate (&p, (now - run->start_ns) / 1e9, cfg->duration,
                            bytes, cfg->bytes);
  }
  if (done) {
    dt = p.elapsed;
    p.ops_per_s = dt > 0 ? ops / dt : 0;
    p.bytes_per_s = dt > 0 ? bytes / dt : 0;
  }
  else {
    dt = (now - run->tick_ns) / 1e9;
    p.ops_per_s = dt > 0 ? (ops - run->tick_ops) / dt : 0;
    p.bytes_per_s = dt > 0 ? (bytes - run->tick_bytes) / dt : 0;
  }
  load_progress_print (stderr, &p);
  run->tick_ns = now;
  run->tick_ops = ops;
  run->tick_bytes = bytes;
}

static void
refill (struct conn *conn)
{
  struct run *run = conn->run;
  const struct load_config *cfg = run->cfg;

  while (!run->failed && conn->ready && conn->free_list) {
    struct req *req = conn->free_list;

    if (run->phase == RUNNING) {
      if (run->stop_issuing)
        break;
      if (cfg->bytes && run->issued_bytes >= cfg->bytes) {
        run->stop_issuing = true;
        break;
      }
      next_workload_req (conn, req);
      run->issued_bytes += req->size;
    }
    else if (run->phase == VERIFYING) {
      if (!load_written_next (&run->written, &req->offset, &req->size))
        break;
      req->size_idx = 0;
      req->is_read = true;
      req->check = true;
    }
    else
      break;
    if (issue (conn, req) == -1)
      return;
  }
}

/* Keep the ev_io watcher on what libnbd waits for.  The fd can change
 * while connecting (libnbd tries each address in turn).
 */
static void
update_watch (struct conn *conn)
{
  struct run *run = conn->run;
  int fd = nbd_aio_get_fd (conn->nbd);
  unsigned dir = nbd_aio_get_direction (conn->nbd);
  int events = 0;

  if (dir & LIBNBD_AIO_DIRECTION_READ)
    events |= EV_READ;
  if (dir & LIBNBD_AIO_DIRECTION_WRITE)
    events |= EV_WRITE;
  if (fd == conn->io.fd && events == (conn->io.events & (EV_READ | EV_WRITE))
      && ev_is_active (&conn->io))
    return;
  ev_io_stop (run->loop, &conn->io);
  if (fd == -1 || events == 0)
    return;
  ev_io_set (&conn->io, fd, events);
  ev_io_start (run->loop, &conn->io);
}

static void
all_ready (struct run *run)
{
  const struct load_config *cfg = run->cfg;
  struct nbd_handle *nbd = run->conns[0].nbd;
  int64_t size = nbd_get_size (nbd);
  uint64_t per = 0;
  unsigned i;

  if (size == -1) {
    fail (run, "cannot get the export size: %s", nbd_get_error ());
    return;
  }
  run->res->export_size = size;
  if (cfg->read_pct < 100 && nbd_is_read_only (nbd) == 1) {
    fail (run, "the export is read-only: use --read-ratio 100");
    return;
  }
  if (cfg->offset >= (uint64_t) size) {
    fail (run, "--offset %" PRIu64 " is beyond the export size %" PRIi64,
          cfg->offset, size);
    return;
  }
  run->area_start = cfg->offset;
  run->area_len = cfg->span ? cfg->span : size - cfg->offset;
  if (run->area_start + run->area_len > (uint64_t) size) {
    fail (run, "--offset + --span (%" PRIu64 ") is beyond the export size %"
          PRIi64, run->area_start + run->area_len, size);
    return;
  }
  run->area_len -= run->area_len % LOAD_VERIFY_UNIT;
  if (run->area_len < run->max_size) {
    fail (run, "the area used (%" PRIu64 " bytes) is smaller than the "
          "largest block size %" PRIu32, run->area_len, run->max_size);
    return;
  }
  if (cfg->sequential) {
    per = run->area_len / cfg->connections;
    per -= per % LOAD_VERIFY_UNIT;
    if (per < run->max_size) {
      fail (run, "--sequential: a slice of %" PRIu64 " bytes per connection "
            "is smaller than the largest block size %" PRIu32,
            per, run->max_size);
      return;
    }
  }
  for (i = 0; i < cfg->connections; i++)
    load_stream_init (&run->conns[i].stream, cfg, i, run->area_start,
                      run->area_len, per);
  if (cfg->verify) {
    if (load_written_init (&run->written, run->area_start,
                           run->area_len) == -1) {
      fail (run, "out of memory for the verify bitmap");
      return;
    }
  }
  run->phase = RUNNING;
  run->res->started = true;
  run->start_ns = run->last_reply_ns = run->last_event_ns = run->tick_ns =
    throttle_now_ns ();
  if (cfg->duration > 0) {
    /* libev counts a timer from the loop's time, read when this
     * iteration began: without the update, the set-up above (slow under
     * ASan) would end the run that much before its duration.
     */
    ev_now_update (run->loop);
    ev_timer_set (&run->deadline, cfg->duration, 0);
    ev_timer_start (run->loop, &run->deadline);
  }
  for (i = 0; i < cfg->connections; i++) {
    refill (&run->conns[i]);
    if (run->failed)
      return;
    update_watch (&run->conns[i]);
  }
}

static unsigned
total_in_flight (struct run *run)
{
  unsigned i, n = 0;

  for (i = 0; i < run->cfg->connections; i++)
    n += run->conns[i].in_flight;
  return n;
}

static void
finish_phase (struct run *run)
{
  unsigned i;

  if (run->phase == RUNNING) {
    run->end_ns = run->last_reply_ns;
    /* A run ended early (^C) must not have its deadline end the
     * read-back.
     */
    ev_timer_stop (run->loop, &run->deadline);
    if (run->cfg->progress)
      progress (run, true);
    if (run->cfg->verify) {
      run->phase = VERIFYING;
      run->verify_start_ns = run->tick_ns = throttle_now_ns ();
      run->tick_ops = run->tick_bytes = 0;
      run->verify_total = load_written_count (&run->written) *
        LOAD_VERIFY_UNIT;
      for (i = 0; i < run->cfg->connections; i++) {
        refill (&run->conns[i]);
        if (run->failed)
          return;
        update_watch (&run->conns[i]);
      }
      if (total_in_flight (run) > 0)
        return;
    }
  }
  if (run->phase == VERIFYING && run->cfg->progress)
    progress (run, true);
  run->phase = DONE;
  ev_break (run->loop, EVBREAK_ALL);
}

static void
io_cb (struct ev_loop *loop, ev_io *w, int revents)
{
  struct conn *conn = w->data;
  struct run *run = conn->run;
  unsigned was_in_flight = conn->in_flight;
  int r = 0;

  if (revents & EV_READ)
    r = nbd_aio_notify_read (conn->nbd);
  if (r != -1 && (revents & EV_WRITE))
    r = nbd_aio_notify_write (conn->nbd);

  if (r == -1 || nbd_aio_is_dead (conn->nbd) || nbd_aio_is_closed (conn->nbd)) {
    const char *why = r == -1 ? nbd_get_error () : NULL;
    ev_io_stop (loop, &conn->io);
    if (run->phase == CONNECTING)
      fail (run, "connection %u: cannot connect: %s", conn->id,
            why ? why : "the server closed the connection");
    else
      fail (run, "connection %u: the connection was lost: %s "
            "(%u requests were in flight)", conn->id,
            why ? why : "the server closed it", was_in_flight);
    return;
  }
  if (conn->req_errno) {
    run->server_alive = true;
    fail (run, "connection %u: the server failed a %s: %s",
          conn->id, conn->req_what, strerror (conn->req_errno));
    return;
  }
  if (run->phase == CONNECTING) {
    if (!conn->ready && nbd_aio_is_ready (conn->nbd)) {
      conn->ready = true;
      run->last_event_ns = throttle_now_ns ();
      if (++run->nr_ready == run->cfg->connections)
        all_ready (run);
    }
  }
  else {
    refill (conn);
  }
  if (run->failed)
    return;
  update_watch (conn);
  if (run->phase != CONNECTING &&
      (run->stop_issuing || run->phase == VERIFYING) &&
      total_in_flight (run) == 0) {
    /* Verification may still have units to hand out to this conn. */
    if (run->phase == VERIFYING && load_written_pending (&run->written))
      return;
    finish_phase (run);
  }
}

static void
deadline_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  struct run *run = w->data;

  run->stop_issuing = true;
  if (total_in_flight (run) == 0)
    finish_phase (run);
}

/* SIGINT or SIGTERM.  The first ends the run early, as a deadline
 * would: what is in flight is waited for, --verify reads back what
 * was written, and the run is reported, marked interrupted.  Another
 * signal, or one while connecting or reading back, stops at once.
 */
static void
signal_cb (struct ev_loop *loop, ev_signal *w, int revents)
{
  struct run *run = w->data;

  if (run->res->signal == 0)
    run->res->signal = w->signum;
  if (run->phase == RUNNING && !run->stop_issuing) {
    run->stop_issuing = true;
    if (total_in_flight (run) == 0)
      finish_phase (run);
    return;
  }
  if (run->phase == RUNNING)
    run->end_ns = run->last_reply_ns;
  run->abandoned = true;
  ev_break (run->loop, EVBREAK_ALL);
}

static void
tick_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  struct run *run = w->data;
  const struct load_config *cfg = run->cfg;
  uint64_t now = throttle_now_ns ();
  unsigned in_flight = total_in_flight (run);

  if ((run->phase == CONNECTING || in_flight > 0) &&
      now - run->last_event_ns > cfg->timeout * 1e9) {
    if (run->phase == CONNECTING)
      fail (run, "no answer from the server within %g seconds while "
            "connecting (%u of %u connections ready)", cfg->timeout,
            run->nr_ready, cfg->connections);
    else
      fail (run, "no reply from the server for %g seconds "
            "(%u requests in flight); giving up", cfg->timeout, in_flight);
    return;
  }

  if (cfg->progress && (run->phase == RUNNING || run->phase == VERIFYING) &&
      now > run->tick_ns)
    progress (run, false);
}

static int
start_connect (struct run *run, struct conn *conn)
{
  const struct load_config *cfg = run->cfg;
  int r;

  conn->nbd = nbd_create ();
  if (conn->nbd == NULL) {
    fail (run, "nbd_create: %s", nbd_get_error ());
    return -1;
  }
  if (cfg->uri)
    r = nbd_aio_connect_uri (conn->nbd, cfg->uri);
  else {
    if (nbd_set_export_name (conn->nbd, cfg->export_name) == -1) {
      fail (run, "--export: %s", nbd_get_error ());
      return -1;
    }
    if (cfg->unix_path)
      r = nbd_aio_connect_unix (conn->nbd, cfg->unix_path);
    else
      r = nbd_aio_connect_tcp (conn->nbd, cfg->host, cfg->port);
  }
  if (r == -1) {
    fail (run, "connection %u: cannot connect to %s: %s", conn->id,
          cfg->uri ? cfg->uri : cfg->unix_path ? cfg->unix_path : cfg->host,
          nbd_get_error ());
    return -1;
  }
  ev_init (&conn->io, io_cb);
  conn->io.data = conn;
  conn->io.fd = -1;
  update_watch (conn);
  /* A Unix socket may be connected already. */
  if (nbd_aio_is_ready (conn->nbd)) {
    conn->ready = true;
    if (++run->nr_ready == cfg->connections)
      all_ready (run);
  }
  return 0;
}

/* NBD_CMD_DISC, then wait for the server to finish what is in flight
 * and close, but never longer than the timeout: nbd_shutdown would
 * wait forever for a server that stopped answering at this point.
 */
static void
disconnect (struct nbd_handle *nbd, double timeout)
{
  uint64_t deadline = throttle_now_ns () + timeout * 1e9;

  if (nbd_aio_disconnect (nbd, 0) == -1)
    return;
  while (!nbd_aio_is_closed (nbd) && !nbd_aio_is_dead (nbd)) {
    uint64_t now = throttle_now_ns ();

    if (now >= deadline || nbd_poll (nbd, (deadline - now) / 1000000 + 1) == -1)
      return;
  }
}

int
load_run (const struct load_config *cfg, struct load_result *res)
{
  struct run run = { .cfg = cfg, .res = res };
  unsigned i, j;
  int ret = 0;

  signal (SIGPIPE, SIG_IGN);

  run.conns = calloc (cfg->connections, sizeof *run.conns);
  if (load_result_init (res, cfg) == -1 || run.conns == NULL)
    goto oom;
  for (i = 0; i < cfg->nr_sizes; i++)
    if (cfg->sizes[i].size > run.max_size)
      run.max_size = cfg->sizes[i].size;
  if (!cfg->verify) {
    run.shared_wbuf = malloc (run.max_size);
    run.shared_rbuf = malloc (run.max_size);
    if (!run.shared_wbuf || !run.shared_rbuf)
      goto oom;
    /* Not zeroes: a server or filter may treat zeroes specially. */
    memset (run.shared_wbuf, 0xa5, run.max_size);
  }

  run.loop = ev_loop_new (EVFLAG_AUTO);
  if (run.loop == NULL) {
    snprintf (res->error, sizeof res->error, "cannot create the libev loop");
    return -1;
  }
  ev_timer_init (&run.deadline, deadline_cb, 0, 0);
  run.deadline.data = &run;
  ev_timer_init (&run.tick, tick_cb, 1, 1);
  run.tick.data = &run;
  ev_timer_start (run.loop, &run.tick);
  ev_signal_init (&run.sigint, signal_cb, SIGINT);
  run.sigint.data = &run;
  ev_signal_start (run.loop, &run.sigint);
  ev_signal_init (&run.sigterm, signal_cb, SIGTERM);
  run.sigterm.data = &run;
  ev_signal_start (run.loop, &run.sigterm);
  run.last_event_ns = throttle_now_ns ();

  for (i = 0; i < cfg->connections && !run.failed; i++) {
    struct conn *conn = &run.conns[i];

    conn->run = &run;
    conn->id = i;
    conn->slots = calloc (cfg->queue_depth, sizeof *conn->slots);
    if (conn->slots == NULL)
      goto oom;
    for (j = 0; j < cfg->queue_depth; j++) {
      conn->slots[j].next_free = conn->free_list;
      conn->free_list = &conn->slots[j];
    }
    start_connect (&run, conn);
  }

  if (!run.failed && run.phase != DONE)
    ev_run (run.loop, 0);

  /* A read-back cut short checked less, but what it checked counts. */
  if (!run.failed && res->verify_mismatches) {
    run.server_alive = true;
    fail (&run, "verify: %" PRIu64 " blocks of %d bytes hold wrong data "
          "(the first at offset %" PRIu64 ")", res->verify_mismatches,
          LOAD_VERIFY_UNIT, run.first_mismatch);
  }

  res->elapsed = (run.end_ns > run.start_ns ? run.end_ns - run.start_ns : 0)
    / 1e9;
  for (i = 0; i < cfg->connections; i++) {
    res->conns[i].ops = run.conns[i].ops;
    res->conns[i].bytes = run.conns[i].bytes;
  }

  /* Requests still queued in a failed run are abandoned, never counted. */
  run.closing = true;
  for (i = 0; i < cfg->connections; i++) {
    struct conn *conn = &run.conns[i];

    if (conn->nbd) {
      ev_io_stop (run.loop, &conn->io);
      if ((!(run.failed || run.abandoned) || run.server_alive) &&
          !nbd_aio_is_dead (conn->nbd) && !nbd_aio_is_closed (conn->nbd) &&
          !nbd_aio_is_connecting (conn->nbd))
        disconnect (conn->nbd, cfg->timeout);
      nbd_close (conn->nbd);
    }
    if (conn->slots) {
      for (j = 0; j < cfg->queue_depth; j++)
        free (conn->slots[j].buf);
      free (conn->slots);
    }
  }
  ev_loop_destroy (run.loop);
  free (run.conns);
  free (run.shared_wbuf);
  free (run.shared_rbuf);
  load_written_free (&run.written);
  ret = run.failed ? -1 : 0;
  return ret;

 oom:
  snprintf (res->error, sizeof res->error, "out of memory");
  return -1;
}
