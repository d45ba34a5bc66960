/* SPDX-License-Identifier: BSD-3-Clause */
/* A test backend that records what the throttle let through: each
 * request sleeps, and the plugin tracks the peak bytes and requests in
 * flight across all connections.  At unload it writes them to
 * statefile=PATH.  Data is not stored (reads return zeroes) unless
 * file=PATH names a file to keep it in: a disk that is slow by the
 * delay, and whose data can be checked afterwards.
 *
 * flush-fail=K and flush-delay-ms=MS make a backend whose handles
 * differ, for the writeback flush tests: the first flush on the K-th
 * handle opened (counting from 1) waits delay-ms and fails with EIO,
 * its later flushes succeed at once; every flush on another handle
 * waits flush-delay-ms and succeeds.
 *
 * Without export= it lists only the default export, as a plugin without
 * .list_exports does, and serves any name.  Each export=NAME adds NAME
 * to its list (it still serves any name).
 *
 * bandwidth=SIZE (bytes per second, e.g. 100M): a backend whose latency
 * grows with what is in flight, as a disk's does under a queue: each
 * request, reads included, sleeps delay-ms plus the bytes in flight at
 * its arrival (its own included) divided by SIZE.  Without it reads
 * are instant and everything else sleeps delay-ms.
 *
 * gate=PATH: a backend that holds requests until the test lets them
 * go: while PATH exists, every request that sleeps waits (polling
 * every 10 ms, in flight all the while) before its delay.  So a test
 * can keep a write in flight for as long as it needs a state to hold,
 * however slow the machine, and end it by removing the file.
 *
 * gate-dir=DIR: the same for each request alone, by its offset: a
 * request at offset O writes DIR/arrived.O (the bytes and requests in
 * flight at the plugin once it is in, its own included:
 * "BYTES REQUESTS") and then waits while DIR/O exists.  So a test can
 * hold one request and let another go, and read what the plugin held
 * when each arrived.
 *
 * fail-above=OFFSET: a write that reaches past OFFSET fails at once
 * with nbdkit_set_error (ENOSPC), as most plugins report errors (no
 * errno_is_preserved): the statefile counts such failures
 * (failed_writes) and the writes that arrived after one had failed
 * (writes_after_failure).
 *
 * Every write asks nbdkit_export_name (), as a plugin serving names
 * does: the statefile counts those that got no answer
 * (export_name_errors), which nbdkit gives only in a thread of its own.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

static int64_t size = 1024 * 1024 * 1024;
static unsigned delay_ms = 20;
static bool plain_sleep;        /* sleep=plain: not cut short by nbdkit */
static const char *statefile;
static const char **exports;
static size_t nr_exports;
static const char *file;
static int fd = -1;
static unsigned flush_fail;             /* 0: no handle fails a flush */
static unsigned flush_delay_ms;
static int64_t bandwidth;               /* 0: no latency from the load */
static const char *gate;                /* hold requests while it exists */
static const char *gate_dir;            /* hold each request by offset */
static int64_t fail_above = -1;         /* -1: no write fails */
static atomic_llong failed_writes, writes_after_failure, export_name_errors;
static atomic_uint handles_opened;

struct flush_handle {                   /* only with flush-fail=K */
  unsigned nr;                          /* 1 for the first handle opened */
  atomic_bool flushed;
};

static atomic_llong bytes_now, bytes_peak;
static atomic_llong reqs_now, reqs_peak;
static atomic_llong writes, bytes_written, zeroes, trims;

static int
inflight_config (const char *key, const char *value)
{
  if (strcmp (key, "size") == 0) {
    if ((size = nbdkit_parse_size (value)) == -1)
      return -1;
  }
  else if (strcmp (key, "delay-ms") == 0) {
    if (nbdkit_parse_unsigned ("delay-ms", value, &delay_ms) == -1)
      return -1;
  }
  else if (strcmp (key, "statefile") == 0)
    statefile = value;
  else if (strcmp (key, "file") == 0)
    file = value;
  else if (strcmp (key, "export") == 0) {
    const char **p = realloc (exports, (nr_exports + 1) * sizeof *p);

    if (p == NULL) {
      nbdkit_error ("realloc: %m");
      return -1;
    }
    exports = p;
    exports[nr_exports++] = value;
  }
  else if (strcmp (key, "sleep") == 0) {
    if (strcmp (value, "plain") == 0)
      plain_sleep = true;
    else if (strcmp (value, "nbdkit") == 0)
      plain_sleep = false;
    else {
      nbdkit_error ("sleep=%s: expected plain or nbdkit", value);
      return -1;
    }
  }
  else if (strcmp (key, "flush-fail") == 0) {
    if (nbdkit_parse_unsigned ("flush-fail", value, &flush_fail) == -1)
      return -1;
  }
  else if (strcmp (key, "flush-delay-ms") == 0) {
    if (nbdkit_parse_unsigned ("flush-delay-ms", value, &flush_delay_ms) == -1)
      return -1;
  }
  else if (strcmp (key, "gate") == 0)
    gate = value;
  else if (strcmp (key, "gate-dir") == 0)
    gate_dir = value;
  else if (strcmp (key, "fail-above") == 0) {
    if ((fail_above = nbdkit_parse_size (value)) == -1)
      return -1;
  }
  else if (strcmp (key, "bandwidth") == 0) {
    if ((bandwidth = nbdkit_parse_size (value)) == -1)
      return -1;
  }
  else {
    nbdkit_error ("unknown parameter %s", key);
    return -1;
  }
  return 0;
}

static int
inflight_get_ready (void)
{
  if (file == NULL)
    return 0;
  fd = open (file, O_RDWR | O_CLOEXEC);
  if (fd == -1) {
    nbdkit_error ("open: %s: %m", file);
    return -1;
  }
  size = lseek (fd, 0, SEEK_END);
  return 0;
}

static void
inflight_unload (void)
{
  FILE *fp;

  free (exports);
  if (statefile == NULL || (fp = fopen (statefile, "w")) == NULL)
    return;
  fprintf (fp, "peak_bytes=%lld\npeak_requests=%lld\nwrites=%lld\n"
           "bytes_written=%lld\nzeroes=%lld\ntrims=%lld\nbytes_now=%lld\n"
           "failed_writes=%lld\nwrites_after_failure=%lld\n"
           "export_name_errors=%lld\n",
           atomic_load (&bytes_peak), atomic_load (&reqs_peak),
           atomic_load (&writes), atomic_load (&bytes_written),
           atomic_load (&zeroes), atomic_load (&trims),
           atomic_load (&bytes_now), atomic_load (&failed_writes),
           atomic_load (&writes_after_failure),
           atomic_load (&export_name_errors));
  fclose (fp);
}

static int
inflight_list_exports (int readonly, int is_tls,
                       struct nbdkit_exports *list)
{
  size_t i;

  if (nr_exports == 0)
    return nbdkit_use_default_export (list);
  for (i = 0; i < nr_exports; i++)
    if (nbdkit_add_export (list, exports[i], NULL) == -1)
      return -1;
  return 0;
}

static void *
inflight_open (int readonly)
{
  struct flush_handle *h;

  if (flush_fail == 0)
    return NBDKIT_HANDLE_NOT_NEEDED;
  h = calloc (1, sizeof *h);
  if (h == NULL) {
    nbdkit_error ("calloc: %m");
    return NULL;
  }
  h->nr = atomic_fetch_add (&handles_opened, 1) + 1;
  nbdkit_debug ("inflight: handle %u opened", h->nr);
  return h;
}

static void
inflight_close (void *handle)
{
  if (flush_fail != 0)
    free (handle);
}

static int64_t
inflight_get_size (void *handle)
{
  return size;
}

static void
raise_peak (atomic_llong *peak, long long now)
{
  long long p = atomic_load (peak);

  while (now > p && !atomic_compare_exchange_weak (peak, &p, now))
    ;
}

/* The time to move 'in_flight' bytes at bandwidth=, 0 without it. */
static uint64_t
queue_ns (long long in_flight)
{
  if (bandwidth <= 0)
    return 0;
  return (uint64_t) ((double) in_flight * 1e9 / bandwidth);
}

/* Hold 'bytes' in flight for the delay.  nbdkit_nanosleep ends early
 * (failing the request) on shutdown and once the client has sent
 * NBD_CMD_DISC, shut down its side or gone, as nbdkit's delay filter
 * does; sleep=plain is a disk that is slow whatever the client does.
 */
/* gate-dir: say what the plugin holds with this request in, then
 * wait while the request's own gate exists.  Returns -1 if the wait
 * was cut short (nbdkit_nanosleep).
 */
static int
gate_by_offset (uint64_t offset, long long in_flight, long long reqs)
{
  char path[4096], tmp[4096];
  FILE *fp;

  snprintf (tmp, sizeof tmp, "%s/.arrived.%" PRIu64, gate_dir, offset);
  snprintf (path, sizeof path, "%s/arrived.%" PRIu64, gate_dir, offset);
  /* Renamed into place: a test that sees the file reads all of it. */
  if ((fp = fopen (tmp, "w")) != NULL) {
    fprintf (fp, "%lld %lld\n", in_flight, reqs);
    fclose (fp);
    rename (tmp, path);
  }
  snprintf (path, sizeof path, "%s/%" PRIu64, gate_dir, offset);
  while (access (path, F_OK) == 0)
    if (nbdkit_nanosleep (0, 10000000) == -1)
      return -1;
  return 0;
}

static int
hold (long long bytes, uint64_t offset)
{
  long long in_flight = atomic_fetch_add (&bytes_now, bytes) + bytes;
  long long reqs = atomic_fetch_add (&reqs_now, 1) + 1;
  uint64_t ns;
  int r;

  raise_peak (&bytes_peak, in_flight);
  raise_peak (&reqs_peak, reqs);
  ns = delay_ms * UINT64_C (1000000) + queue_ns (in_flight);
  if (gate_dir && gate_by_offset (offset, in_flight, reqs) == -1) {
    atomic_fetch_sub (&bytes_now, bytes);
    atomic_fetch_sub (&reqs_now, 1);
    return -1;
  }
  while (gate && access (gate, F_OK) == 0)
    if (nbdkit_nanosleep (0, 10000000) == -1) {
      atomic_fetch_sub (&bytes_now, bytes);
      atomic_fetch_sub (&reqs_now, 1);
      return -1;
    }
  if (plain_sleep) {
    struct timespec ts = { .tv_sec = ns / 1000000000,
                           .tv_nsec = ns % 1000000000 };

    r = 0;
    while (nanosleep (&ts, &ts) == -1)
      ;
  }
  else
    r = nbdkit_nanosleep (ns / 1000000000, ns % 1000000000);
  atomic_fetch_sub (&bytes_now, bytes);
  atomic_fetch_sub (&reqs_now, 1);
  return r;
}

static int
inflight_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
                uint32_t flags)
{
  if (fd == -1)
    memset (buf, 0, count);
  else if (pread (fd, buf, count, offset) != (ssize_t) count) {
    nbdkit_error ("pread: %m");
    return -1;
  }
  /* Under gate-dir alone a read is held but not counted in the bytes:
   * the filter charges none by default.
   */
  if (bandwidth > 0)
    return hold (count, offset);
  return gate_dir ? hold (0, offset) : 0;
}

static int
inflight_pwrite (void *handle, const void *buf, uint32_t count,
                 uint64_t offset, uint32_t flags)
{
  atomic_fetch_add (&writes, 1);
  atomic_fetch_add (&bytes_written, count);
  if (nbdkit_export_name () == NULL)
    atomic_fetch_add (&export_name_errors, 1);
  if (atomic_load (&failed_writes) > 0)
    atomic_fetch_add (&writes_after_failure, 1);
  if (fail_above >= 0 && offset + count > (uint64_t) fail_above) {
    atomic_fetch_add (&failed_writes, 1);
    nbdkit_set_error (ENOSPC);
    return -1;
  }
  if (hold (count, offset) == -1)
    return -1;
  if (fd != -1 && pwrite (fd, buf, count, offset) != (ssize_t) count) {
    nbdkit_error ("pwrite: %m");
    return -1;
  }
  return 0;
}

static int
inflight_zero (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  atomic_fetch_add (&zeroes, 1);
  return hold (0, offset);
}

static int
inflight_trim (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  atomic_fetch_add (&trims, 1);
  return hold (0, offset);
}

static int
inflight_flush (void *handle, uint32_t flags)
{
  struct flush_handle *h = handle;
  unsigned ms = flush_delay_ms;

  if (flush_fail == 0)
    return 0;
  if (h->nr == flush_fail) {
    if (atomic_exchange (&h->flushed, true))
      return 0;
    ms = delay_ms;
  }
  if (nbdkit_nanosleep (ms / 1000, (ms % 1000) * 1000000) == -1)
    return -1;
  if (h->nr == flush_fail) {
    nbdkit_debug ("inflight: failing the first flush on handle %u", h->nr);
    nbdkit_set_error (EIO);
    return -1;
  }
  return 0;
}

static struct nbdkit_plugin plugin = {
  .name              = "inflight",
  .version           = PACKAGE_VERSION,
  .config            = inflight_config,
  .get_ready         = inflight_get_ready,
  .unload            = inflight_unload,
  .list_exports      = inflight_list_exports,
  .open              = inflight_open,
  .close             = inflight_close,
  .get_size          = inflight_get_size,
  .pread             = inflight_pread,
  .pwrite            = inflight_pwrite,
  .zero              = inflight_zero,
  .trim              = inflight_trim,
  .flush             = inflight_flush,
};

NBDKIT_REGISTER_PLUGIN (plugin)
