/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle-disk-plugin: refuse a file that is not safe to serve
 * as swap.
 *
 * A write that makes the filesystem allocate (into a hole, a shared
 * extent, a copy-on-write file) needs memory on the swap-out path, so
 * the file must be fully allocated and unshared; O_DIRECT needs whole
 * blocks.  Each refusal says how to make the file right.
 */

#include <config.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <linux/fs.h>
#include <linux/fiemap.h>
#include <linux/magic.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "throttle-disk.h"

/* A hole in a regular file means that a write there allocates blocks
 * inside the filesystem, on the swap-out path; so does a write to an
 * extent shared with another file (reflink), which the filesystem must
 * copy first.  SEEK_HOLE cannot tell us: ext4 reports fallocated
 * (unwritten) extents as holes.  FIEMAP can.  Returns 1 if there is a
 * hole or a shared extent (its offset in *hole), 0 if not, -1 if
 * FIEMAP is not supported.
 */
static int
find_hole (int rfd, int64_t len, int64_t *hole, int64_t *unwritten,
           bool *shared)
{
  enum { N = 256 };
  struct fiemap *fm;
  uint64_t pos = 0;
  unsigned i;
  bool last = false;

  *unwritten = 0;
  *shared = false;
  fm = calloc (1, sizeof *fm + N * sizeof (struct fiemap_extent));
  if (fm == NULL)
    return -1;
  while (!last && pos < (uint64_t) len) {
    memset (fm, 0, sizeof *fm);
    fm->fm_start = pos;
    fm->fm_length = (uint64_t) len - pos;
    fm->fm_flags = FIEMAP_FLAG_SYNC;
    fm->fm_extent_count = N;
    if (ioctl (rfd, FS_IOC_FIEMAP, fm) == -1) {
      free (fm);
      return -1;
    }
    if (fm->fm_mapped_extents == 0)
      break;
    for (i = 0; i < fm->fm_mapped_extents; ++i) {
      struct fiemap_extent *e = &fm->fm_extents[i];

      if (e->fe_logical > pos || (e->fe_flags & FIEMAP_EXTENT_SHARED)) {
        *shared = e->fe_logical <= pos;
        *hole = pos;
        free (fm);
        return 1;
      }
      if (e->fe_flags & FIEMAP_EXTENT_UNWRITTEN)
        *unwritten += e->fe_length;
      pos = e->fe_logical + e->fe_length;
      if (e->fe_flags & FIEMAP_EXTENT_LAST)
        last = true;
    }
  }
  free (fm);
  if (pos < (uint64_t) len) {
    *hole = pos;
    return 1;
  }
  return 0;
}

int
throttle_disk_check_regular_file (const char *filename, int rfd,
                                  const struct stat *st, int64_t *size_out)
{
  int64_t size, hole, unwritten;
  bool shared;
  struct statfs sfs;
  int attr = 0;
  off_t h;
  int r;

  /* btrfs copies on every write unless the file is NOCOW. */
  if (fstatfs (rfd, &sfs) == 0 && sfs.f_type == BTRFS_SUPER_MAGIC &&
      (ioctl (rfd, FS_IOC_GETFLAGS, &attr) == -1 ||
       !(attr & FS_NOCOW_FL))) {
    nbdkit_error ("%s: a copy-on-write btrfs file allocates on every "
                  "write; create it empty with chattr +C, then allocate "
                  "it with fallocate", filename);
    return -1;
  }

  size = st->st_size;
  if (size == 0 || size % THROTTLE_DISK_MIN_BLOCK != 0) {
    nbdkit_error ("%s: size %" PRIi64 " is not a non-zero multiple of %d "
                  "(O_DIRECT needs whole blocks); resize it, "
                  "e.g. truncate -s SIZE then fallocate -l SIZE %s",
                  filename, size, THROTTLE_DISK_MIN_BLOCK, filename);
    return -1;
  }

  r = find_hole (rfd, size, &hole, &unwritten, &shared);
  if (r == 1 && shared) {
    nbdkit_error ("%s: the extent at offset %" PRIi64 " is shared with "
                  "another file (reflink or snapshot): writing it makes "
                  "the filesystem allocate a copy; serve a copy made "
                  "without --reflink", filename, hole);
    return -1;
  }
  if (r == -1) {
    /* No FIEMAP here: a hole is certain only if SEEK_HOLE finds one
     * and the blocks allocated do not cover the size.
     */
    h = lseek (rfd, 0, SEEK_HOLE);
    if (h >= 0 && h < size &&
        (int64_t) st->st_blocks * 512 < size) {
      hole = h;
      r = 1;
    }
  }
  if (r == 1) {
    nbdkit_error ("%s: the file has holes (the first at offset %" PRIi64
                  "): writing into a hole allocates filesystem blocks, "
                  "which is not safe for swap; allocate the whole file "
                  "first, e.g. fallocate -l %" PRIi64 " %s",
                  filename, hole, size, filename);
    return -1;
  }
  if (r == 0 && unwritten > 0)
    nbdkit_debug ("%s: %" PRIi64 " bytes are allocated but unwritten "
                  "(fallocate): the first write to each extent converts "
                  "it in the filesystem", filename, unwritten);
  *size_out = size;
  return 0;
}

int
throttle_disk_check_block_device (const char *filename, int rfd,
                                  uint32_t buffer_size, int64_t *size,
                                  uint32_t *min_block, uint32_t *pref_block)
{
  uint64_t bytes;
  int lbs = 0;
  unsigned pbs = 0;
  uint32_t min = THROTTLE_DISK_MIN_BLOCK, pref;

  if (ioctl (rfd, BLKGETSIZE64, &bytes) == -1) {
    nbdkit_error ("%s: BLKGETSIZE64: %m", filename);
    return -1;
  }
  if (ioctl (rfd, BLKSSZGET, &lbs) == 0 && lbs > THROTTLE_DISK_MIN_BLOCK)
    min = lbs;
  pref = min;
  if (ioctl (rfd, BLKPBSZGET, &pbs) == 0 && pbs > pref &&
      pbs <= (unsigned) buffer_size)
    pref = pbs;
  if (buffer_size % min != 0) {
    nbdkit_error ("%s: logical block size %u does not divide "
                  "buffer-size=%" PRIu32, filename, min, buffer_size);
    return -1;
  }
  /* A partition may end on a 512 byte boundary; serve whole blocks. */
  if (bytes % min != 0)
    nbdkit_debug ("%s: serving %" PRIu64 " of %" PRIu64 " bytes "
                  "(whole %u byte blocks)", filename,
                  bytes / min * min, bytes, min);
  if (bytes / min == 0) {
    nbdkit_error ("%s: the device is smaller than one %u byte block",
                  filename, min);
    return -1;
  }
  *size = bytes / min * min;
  *min_block = min;
  *pref_block = pref;
  return 0;
}
