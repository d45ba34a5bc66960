/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle-disk-plugin: the data callbacks.
 *
 * Every transfer goes through a bounce buffer of the pool made in
 * .get_ready (O_DIRECT needs aligned memory, and nbdkit's buffers are
 * not), zeroes are written from the one zero buffer: no request
 * allocates.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/types.h>
#include <linux/fs.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "throttle-mempool.h"
#include "throttle-disk.h"

static int
check_aligned (const char *op, uint32_t count, uint64_t offset)
{
  uint32_t min_block = throttle_disk.min_block;

  if (offset % min_block == 0 && count % min_block == 0)
    return 0;
  nbdkit_error ("%s: misaligned request: offset %" PRIu64 " count %" PRIu32
                " (O_DIRECT needs both to be multiples of %u)",
                op, offset, count, min_block);
  errno = EINVAL;
  return -1;
}

/* A short transfer is possible (a signal, the end of a device) but
 * always in whole blocks for O_DIRECT, so simply continue.
 */
static int
full_pread (void *buf, size_t count, uint64_t offset)
{
  char *p = buf;
  ssize_t r;

  while (count > 0) {
    r = pread (throttle_disk.fd, p, count, offset);
    if (r == -1) {
      if (errno == EINTR)
        continue;
      nbdkit_error ("%s: pread at %" PRIu64 ": %m",
                    throttle_disk.filename, offset);
      return -1;
    }
    if (r == 0) {
      nbdkit_error ("%s: unexpected end of file at %" PRIu64,
                    throttle_disk.filename, offset);
      errno = EIO;
      return -1;
    }
    p += r;
    count -= r;
    offset += r;
  }
  return 0;
}

static int
full_pwrite (int wfd, const void *buf, size_t count, uint64_t offset)
{
  const char *p = buf;
  ssize_t r;

  while (count > 0) {
    r = pwrite (wfd, p, count, offset);
    if (r == -1) {
      if (errno == EINTR)
        continue;
      nbdkit_error ("%s: pwrite at %" PRIu64 ": %m",
                    throttle_disk.filename, offset);
      return -1;
    }
    if (r == 0) {
      nbdkit_error ("%s: no progress writing at %" PRIu64,
                    throttle_disk.filename, offset);
      errno = ENOSPC;
      return -1;
    }
    p += r;
    count -= r;
    offset += r;
  }
  return 0;
}

int
throttle_disk_pread (void *handle, void *buf, uint32_t count,
                     uint64_t offset, uint32_t flags)
{
  const uint32_t buffer_size = throttle_disk.buffer_size;
  char *out = buf;
  void *bounce;
  uint32_t n;
  int r = 0;

  if (throttle_disk_debug_verbose)
    nbdkit_debug ("pread count=%" PRIu32 " offset=%" PRIu64, count, offset);
  if (check_aligned ("pread", count, offset) == -1)
    return -1;
  /* A wait for a buffer ends when another request finishes its I/O. */
  bounce = throttle_mempool_alloc (throttle_disk.pool);
  while (count > 0) {
    n = count < buffer_size ? count : buffer_size;
    if ((r = full_pread (bounce, n, offset)) == -1)
      break;
    memcpy (out, bounce, n);
    out += n;
    count -= n;
    offset += n;
  }
  throttle_mempool_free (throttle_disk.pool, bounce);
  return r;
}

int
throttle_disk_pwrite (void *handle, const void *buf, uint32_t count,
                      uint64_t offset, uint32_t flags)
{
  const uint32_t buffer_size = throttle_disk.buffer_size;
  const char *in = buf;
  /* O_DSYNC makes each write durable before it returns: for a block
   * device that is a FUA write (or a write and a cache flush), not a
   * flush of everything the device caches.
   */
  int wfd = flags & NBDKIT_FLAG_FUA ? throttle_disk.fd_sync : throttle_disk.fd;
  void *bounce;
  uint32_t n;
  int r = 0;

  if (throttle_disk_debug_verbose)
    nbdkit_debug ("pwrite count=%" PRIu32 " offset=%" PRIu64 "%s",
                  count, offset, flags & NBDKIT_FLAG_FUA ? " fua" : "");
  if (check_aligned ("pwrite", count, offset) == -1)
    return -1;
  bounce = throttle_mempool_alloc (throttle_disk.pool);
  while (count > 0) {
    n = count < buffer_size ? count : buffer_size;
    memcpy (bounce, in, n);
    if ((r = full_pwrite (wfd, bounce, n, offset)) == -1)
      break;
    in += n;
    count -= n;
    offset += n;
  }
  throttle_mempool_free (throttle_disk.pool, bounce);
  return r;
}

/* Written from the shared zero buffer: BLKZEROOUT and fallocate would
 * be faster, but BLKZEROOUT allocates its bios from fs_bio_set, and
 * fallocate(ZERO_RANGE/PUNCH_HOLE) changes the file's extents (and
 * PUNCH_HOLE makes it sparse).  No pool buffer is needed.
 */
int
throttle_disk_zero (void *handle, uint32_t count, uint64_t offset,
                    uint32_t flags)
{
  const uint32_t buffer_size = throttle_disk.buffer_size;
  int wfd = flags & NBDKIT_FLAG_FUA ? throttle_disk.fd_sync : throttle_disk.fd;
  uint32_t n;

  if (throttle_disk_debug_verbose)
    nbdkit_debug ("zero count=%" PRIu32 " offset=%" PRIu64 "%s",
                  count, offset, flags & NBDKIT_FLAG_FUA ? " fua" : "");
  if (flags & NBDKIT_FLAG_FAST_ZERO) {
    errno = ENOTSUP;
    return -1;
  }
  if (check_aligned ("zero", count, offset) == -1)
    return -1;
  while (count > 0) {
    n = count < buffer_size ? count : buffer_size;
    if (full_pwrite (wfd, throttle_disk.zero_buf, n, offset) == -1)
      return -1;
    count -= n;
    offset += n;
  }
  return 0;
}

int
throttle_disk_flush (void *handle, uint32_t flags)
{
  if (throttle_disk_debug_verbose)
    nbdkit_debug ("flush");
  if (fdatasync (throttle_disk.fd) == -1) {
    nbdkit_error ("%s: fdatasync: %m", throttle_disk.filename);
    return -1;
  }
  return 0;
}

/* Only offered with trim=true on a block device (see the man page:
 * BLKDISCARD allocates its bios from the shared fs_bio_set).
 */
int
throttle_disk_trim (void *handle, uint32_t count, uint64_t offset,
                    uint32_t flags)
{
  uint64_t range[2] = { offset, count };

  if (throttle_disk_debug_verbose)
    nbdkit_debug ("trim count=%" PRIu32 " offset=%" PRIu64, count, offset);
  if (check_aligned ("trim", count, offset) == -1)
    return -1;
  if (ioctl (throttle_disk.fd, BLKDISCARD, range) == -1) {
    nbdkit_error ("%s: BLKDISCARD at %" PRIu64 ": %m",
                  throttle_disk.filename, offset);
    return -1;
  }
  if (flags & NBDKIT_FLAG_FUA)
    return throttle_disk_flush (handle, 0);
  return 0;
}
