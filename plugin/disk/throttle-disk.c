/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle-disk-plugin: an allocation-free disk backend.
 *
 * Serves a block device or a fully allocated regular file with O_DIRECT
 * through bounce buffers from a locked, prefaulted pool.  It exists so
 * that the server of a locally attached swap device never needs memory
 * on the path of a request once it is running:
 *
 * - no page cache: nbdkit's file plugin writes into the page cache,
 *   which needs fresh pages, and its writeback needs bios from the
 *   kernel's shared fs_bio_set, whose reserve the swap writes in flight
 *   already hold.  O_DIRECT on a block device takes its bios from the
 *   block layer's own dio bioset instead;
 * - no allocation per request: every buffer comes from the pool made
 *   before the first connection, and zeroes are written from one
 *   preallocated zero buffer;
 * - no ioctl that draws on fs_bio_set (BLKZEROOUT, BLKDISCARD) unless
 *   the user asks for trim explicitly.
 *
 * This file: the parameters, the set-up before the first connection
 * and what the plugin advertises.  throttle-disk-check.c refuses a
 * file that is unsafe to serve, throttle-disk-lock.c locks the
 * plugin's own pages, throttle-disk-io.c serves the requests.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/types.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "throttle-mempool.h"
#include "throttle-disk.h"

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

/* One debug line per request.  nbdkit 1.32 looks the flag up as
 * NAME_debug_FLAG with the plugin's name as is, dash included, so the
 * variable also gets that (assembler-only) name: -D throttle-disk.verbose=1.
 * Newer servers may map the dash to '_', hence the C name.
 */
NBDKIT_DLL_PUBLIC int throttle_disk_debug_verbose = 0;
__asm__ (".globl \"throttle-disk_debug_verbose\"\n"
         ".type \"throttle-disk_debug_verbose\", @object\n"
         ".set \"throttle-disk_debug_verbose\", throttle_disk_debug_verbose\n");

#define DEFAULT_BUFFER   (256 * 1024)
#define MAX_BUFFER       (32 * 1024 * 1024)
#define DEFAULT_POOL     16
#define MAX_POOL         4096

struct throttle_disk throttle_disk = {
  .pool_nr = DEFAULT_POOL,
  .buffer_size = DEFAULT_BUFFER,
  .want_mlock = true,
  .want_trim = false,
  .min_block = THROTTLE_DISK_MIN_BLOCK,
  .pref_block = THROTTLE_DISK_MIN_BLOCK,
  .fd = -1,
  .fd_sync = -1,
};

static void
throttle_disk_unload (void)
{
  if (throttle_disk.zero_pool) {
    throttle_mempool_free (throttle_disk.zero_pool, throttle_disk.zero_buf);
    throttle_mempool_destroy (throttle_disk.zero_pool);
  }
  throttle_mempool_destroy (throttle_disk.pool);
  if (throttle_disk.fd_sync >= 0)
    close (throttle_disk.fd_sync);
  if (throttle_disk.fd >= 0)
    close (throttle_disk.fd);
  free (throttle_disk.filename);
}

static int
throttle_disk_config (const char *key, const char *value)
{
  int64_t r;
  int b;

  if (strcmp (key, "file") == 0) {
    free (throttle_disk.filename);
    throttle_disk.filename = nbdkit_realpath (value);
    if (throttle_disk.filename == NULL)
      return -1;
  }
  else if (strcmp (key, "pool") == 0) {
    if (nbdkit_parse_unsigned ("pool", value, &throttle_disk.pool_nr) == -1)
      return -1;
    if (throttle_disk.pool_nr < 1 || throttle_disk.pool_nr > MAX_POOL) {
      nbdkit_error ("pool=%s: the number of buffers must be between 1 and %d",
                    value, MAX_POOL);
      return -1;
    }
  }
  else if (strcmp (key, "buffer-size") == 0) {
    r = nbdkit_parse_size (value);
    if (r == -1) {
      /* nbdkit's parser says why, not which parameter. */
      nbdkit_error ("buffer-size=%s: not a size", value);
      return -1;
    }
    if (r < THROTTLE_DISK_MIN_BLOCK || r > MAX_BUFFER ||
        r % THROTTLE_DISK_MIN_BLOCK != 0) {
      nbdkit_error ("buffer-size=%s: must be a multiple of %d between "
                    "%d and %d bytes", value, THROTTLE_DISK_MIN_BLOCK,
                    THROTTLE_DISK_MIN_BLOCK, MAX_BUFFER);
      return -1;
    }
    throttle_disk.buffer_size = r;
  }
  else if (strcmp (key, "mlock") == 0) {
    if ((b = nbdkit_parse_bool (value)) == -1) {
      nbdkit_error ("mlock=%s: expected a boolean (on or off)", value);
      return -1;
    }
    throttle_disk.want_mlock = b;
  }
  else if (strcmp (key, "trim") == 0) {
    if ((b = nbdkit_parse_bool (value)) == -1) {
      nbdkit_error ("trim=%s: expected a boolean (on or off)", value);
      return -1;
    }
    throttle_disk.want_trim = b;
  }
  else {
    nbdkit_error ("unknown parameter '%s'", key);
    return -1;
  }
  return 0;
}

static int
throttle_disk_config_complete (void)
{
  struct stat st;
  int rfd, r;

  if (throttle_disk.filename == NULL) {
    nbdkit_error ("the file=PATH parameter is required "
                  "(a block device or a fully allocated regular file)");
    return -1;
  }
  rfd = open (throttle_disk.filename, O_RDONLY|O_CLOEXEC);
  if (rfd == -1) {
    nbdkit_error ("file=%s: %m", throttle_disk.filename);
    return -1;
  }
  if (fstat (rfd, &st) == -1) {
    nbdkit_error ("file=%s: fstat: %m", throttle_disk.filename);
    close (rfd);
    return -1;
  }
  if (S_ISBLK (st.st_mode)) {
    throttle_disk.is_block = true;
    r = throttle_disk_check_block_device (throttle_disk.filename, rfd,
                                          throttle_disk.buffer_size,
                                          &throttle_disk.size,
                                          &throttle_disk.min_block,
                                          &throttle_disk.pref_block);
  }
  else if (S_ISREG (st.st_mode)) {
    throttle_disk.is_block = false;
    if (throttle_disk.want_trim) {
      nbdkit_error ("trim=true needs a block device: on the regular file %s "
                    "trimming would punch holes, and the file must stay "
                    "fully allocated", throttle_disk.filename);
      r = -1;
    }
    else
      r = throttle_disk_check_regular_file (throttle_disk.filename, rfd, &st,
                                            &throttle_disk.size);
  }
  else {
    nbdkit_error ("file=%s: not a block device or a regular file",
                  throttle_disk.filename);
    r = -1;
  }
  close (rfd);
  return r;
}

#define throttle_disk_config_help \
  "file=<PATH>        (required) Block device or fully allocated file.\n" \
  "pool=<N>           Bounce buffers (default 16).\n" \
  "buffer-size=<SIZE> Size of each buffer and the largest request\n" \
  "                   advertised (default 256K).\n" \
  "mlock=<BOOL>       Lock the buffers in memory (default true).\n" \
  "trim=<BOOL>        Serve trim with BLKDISCARD, block devices only\n" \
  "                   (default false: BLKDISCARD allocates from the\n" \
  "                   kernel's shared fs_bio_set)."

/* O_EXCL on a block device refuses one that is mounted or in use as
 * swap: serving it would corrupt it.  The claim belongs to the first
 * descriptor, so the second one is opened without O_EXCL.
 */
static int
open_direct (int extra, bool excl)
{
  int flags = O_DIRECT|O_CLOEXEC|extra|
    (excl && throttle_disk.is_block ? O_EXCL : 0);
  int r;

  r = open (throttle_disk.filename, O_RDWR|flags);
  if (r == -1 && (errno == EACCES || errno == EROFS || errno == EPERM) &&
      !(extra & O_DSYNC))
    r = open (throttle_disk.filename, O_RDONLY|flags);
  return r;
}

static int
throttle_disk_get_ready (void)
{
  struct throttle_disk *d = &throttle_disk;
  int acc;
  void *probe;
  ssize_t n;

  d->fd = open_direct (0, true);
  if (d->fd == -1) {
    if (errno == EINVAL)
      nbdkit_error ("%s: cannot open with O_DIRECT (this filesystem does "
                    "not support it): use a block device or a file on a "
                    "filesystem such as ext4 or xfs", d->filename);
    else if (errno == EBUSY)
      nbdkit_error ("%s: device is busy (mounted, used as swap, or opened "
                    "exclusively by another program)", d->filename);
    else
      nbdkit_error ("%s: open O_DIRECT: %m", d->filename);
    return -1;
  }
  acc = fcntl (d->fd, F_GETFL) & O_ACCMODE;
  d->writable = acc == O_RDWR;
  if (d->writable) {
    d->fd_sync = open_direct (O_DSYNC, false);
    if (d->fd_sync == -1) {
      nbdkit_error ("%s: open O_DIRECT|O_DSYNC: %m", d->filename);
      return -1;
    }
  }

  d->pool = throttle_mempool_create (d->pool_nr, d->buffer_size,
                                     d->want_mlock);
  if (d->pool == NULL) {
    nbdkit_error ("cannot %s a pool of %u x %" PRIu32 " bytes: %m%s",
                  d->want_mlock ? "lock" : "map", d->pool_nr,
                  d->buffer_size,
                  d->want_mlock && (errno == ENOMEM || errno == EPERM ||
                                    errno == EAGAIN)
                  ? " (raise RLIMIT_MEMLOCK, ulimit -l, run with "
                    "CAP_IPC_LOCK, or lower pool= or buffer-size=)" : "");
    return -1;
  }
  d->zero_pool = throttle_mempool_create (1, d->buffer_size,
                                          d->want_mlock);
  if (d->zero_pool == NULL) {
    nbdkit_error ("cannot %s the zero buffer of %" PRIu32 " bytes: %m",
                  d->want_mlock ? "lock" : "map", d->buffer_size);
    return -1;
  }
  d->zero_buf = throttle_mempool_try_alloc (d->zero_pool);

  /* Some filesystems accept O_DIRECT at open and refuse it at I/O. */
  probe = throttle_mempool_try_alloc (d->pool);
  n = pread (d->fd, probe, d->min_block, 0);
  if (n == -1)
    nbdkit_error ("%s: O_DIRECT read of the first %u bytes failed: %m "
                  "(the device may need larger alignment)",
                  d->filename, d->min_block);
  throttle_mempool_free (d->pool, probe);
  if (n == -1)
    return -1;

  nbdkit_debug ("%s: %s of %" PRIi64 " bytes, %s, blocks %u/%u/%" PRIu32
                ", pool %u x %" PRIu32 " bytes, %zu bytes locked",
                d->filename, d->is_block ? "block device" : "regular file",
                d->size, d->writable ? "read-write" : "read-only",
                d->min_block, d->pref_block, d->buffer_size, d->pool_nr,
                d->buffer_size,
                throttle_mempool_bytes_locked (d->pool) +
                throttle_mempool_bytes_locked (d->zero_pool));
  return 0;
}

/* nbdkit forks to daemonize after .get_ready: locks are not inherited,
 * and the pool is shared copy-on-write with the parent until it exits.
 */
static int
throttle_disk_after_fork (void)
{
  size_t self_locked;

  if (throttle_mempool_relock (throttle_disk.pool) == -1 ||
      throttle_mempool_relock (throttle_disk.zero_pool) == -1) {
    nbdkit_error ("cannot lock the pool again after fork: %m");
    return -1;
  }
  if (throttle_disk.want_mlock) {
    if (throttle_disk_lock_self (&self_locked) == -1) {
      nbdkit_error ("cannot lock the plugin's own code and data: %m");
      return -1;
    }
    nbdkit_debug ("locked after fork: pool %zu bytes, zero buffer %zu "
                  "bytes, plugin code and data %zu bytes",
                  throttle_mempool_bytes_locked (throttle_disk.pool),
                  throttle_mempool_bytes_locked (throttle_disk.zero_pool),
                  self_locked);
  }
  return 0;
}

static void *
throttle_disk_open (int readonly)
{
  return NBDKIT_HANDLE_NOT_NEEDED;
}

static int64_t
throttle_disk_get_size (void *handle)
{
  return throttle_disk.size;
}

static int
throttle_disk_block_size (void *handle, uint32_t *minimum,
                          uint32_t *preferred, uint32_t *maximum)
{
  *minimum = throttle_disk.min_block;
  *preferred = throttle_disk.pref_block;
  *maximum = throttle_disk.buffer_size;
  return 0;
}

static int
throttle_disk_can_write (void *handle)
{
  return throttle_disk.writable;
}

static int
throttle_disk_can_flush (void *handle)
{
  return 1;
}

static int
throttle_disk_can_fua (void *handle)
{
  return NBDKIT_FUA_NATIVE;
}

static int
throttle_disk_can_zero (void *handle)
{
  return 1;
}

/* Zeroes are written, never faked, so a fast zero is never faster. */
static int
throttle_disk_can_fast_zero (void *handle)
{
  return 0;
}

static int
throttle_disk_can_trim (void *handle)
{
  return throttle_disk.want_trim && throttle_disk.is_block;
}

/* All connections share one descriptor, and flush is fdatasync on it. */
static int
throttle_disk_can_multi_conn (void *handle)
{
  return 1;
}

static int
throttle_disk_can_cache (void *handle)
{
  return NBDKIT_CACHE_NONE;
}

static struct nbdkit_plugin plugin = {
  .name               = "throttle-disk",
  .longname           = "nbdkit throttle allocation-free disk plugin",
  .version            = PACKAGE_VERSION,
  .unload             = throttle_disk_unload,
  .config             = throttle_disk_config,
  .config_complete    = throttle_disk_config_complete,
  .config_help        = throttle_disk_config_help,
  .magic_config_key   = "file",
  .get_ready          = throttle_disk_get_ready,
  .after_fork         = throttle_disk_after_fork,
  .open               = throttle_disk_open,
  .get_size           = throttle_disk_get_size,
  .block_size         = throttle_disk_block_size,
  .can_write          = throttle_disk_can_write,
  .can_flush          = throttle_disk_can_flush,
  .can_fua            = throttle_disk_can_fua,
  .can_zero           = throttle_disk_can_zero,
  .can_fast_zero      = throttle_disk_can_fast_zero,
  .can_trim           = throttle_disk_can_trim,
  .can_multi_conn     = throttle_disk_can_multi_conn,
  .can_cache          = throttle_disk_can_cache,
  .pread              = throttle_disk_pread,
  .pwrite             = throttle_disk_pwrite,
  .zero               = throttle_disk_zero,
  .flush              = throttle_disk_flush,
  .trim               = throttle_disk_trim,
  .errno_is_preserved = 1,
};

NBDKIT_REGISTER_PLUGIN (plugin)
