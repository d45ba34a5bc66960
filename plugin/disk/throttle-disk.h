/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle-disk-plugin: what its files share. */

#ifndef THROTTLE_DISK_H
#define THROTTLE_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define THROTTLE_DISK_MIN_BLOCK 4096    /* O_DIRECT alignment we require */

/* -D throttle-disk.verbose=1: one debug line per request. */
extern int throttle_disk_debug_verbose;

struct throttle_mempool;

/* The parameters (set by .config), then what .config_complete and
 * .get_ready set up before the first connection.  Read-only once
 * nbdkit serves, so the data callbacks read it without a lock.
 */
struct throttle_disk {
  char *filename;
  unsigned pool_nr;
  uint32_t buffer_size;
  bool want_mlock;
  bool want_trim;

  bool is_block;
  int64_t size;
  uint32_t min_block;
  uint32_t pref_block;
  int fd;                       /* O_DIRECT */
  int fd_sync;                  /* O_DIRECT|O_DSYNC: FUA writes */
  bool writable;
  struct throttle_mempool *pool;
  struct throttle_mempool *zero_pool;
  void *zero_buf;               /* buffer_size zero bytes, never freed */
};
extern struct throttle_disk throttle_disk;

/* throttle-disk-check.c: is the file safe to serve as swap?  rfd is
 * open on filename (for messages).  Each returns 0 with the size to
 * serve in *size, or -1 after nbdkit_error saying what to do about it.
 */
extern int throttle_disk_check_regular_file (const char *filename, int rfd,
                                             const struct stat *st,
                                             int64_t *size);
/* Also gives the block sizes to advertise: *min_block the device's
 * logical block size (at least THROTTLE_DISK_MIN_BLOCK), which must
 * divide buffer_size, *pref_block its physical one if that is larger
 * and fits in buffer_size.
 */
extern int throttle_disk_check_block_device (const char *filename, int rfd,
                                             uint32_t buffer_size,
                                             int64_t *size,
                                             uint32_t *min_block,
                                             uint32_t *pref_block);

/* throttle-disk-lock.c: mlock every segment of this plugin's own
 * object.  Call after nbdkit's fork (locks are not inherited).
 * Returns 0 with the bytes locked in *locked, or -1 with errno set.
 */
extern int throttle_disk_lock_self (size_t *locked);

/* throttle-disk-io.c: the data callbacks. */
extern int throttle_disk_pread (void *handle, void *buf, uint32_t count,
                                uint64_t offset, uint32_t flags);
extern int throttle_disk_pwrite (void *handle, const void *buf,
                                 uint32_t count, uint64_t offset,
                                 uint32_t flags);
extern int throttle_disk_zero (void *handle, uint32_t count, uint64_t offset,
                               uint32_t flags);
extern int throttle_disk_flush (void *handle, uint32_t flags);
extern int throttle_disk_trim (void *handle, uint32_t count, uint64_t offset,
                               uint32_t flags);

#endif /* THROTTLE_DISK_H */
