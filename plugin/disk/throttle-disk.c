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
 */

#include <config.h>

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <linux/fs.h>
#include <linux/fiemap.h>
#include <linux/magic.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "throttle-mempool.h"

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

#define MIN_BLOCK        4096            /* O_DIRECT alignment we require */
#define DEFAULT_BUFFER   (256 * 1024)
#define MAX_BUFFER       (32 * 1024 * 1024)
#define DEFAULT_POOL     16
#define MAX_POOL         4096

/* Parameters. */
static char *filename;
static unsigned pool_nr = DEFAULT_POOL;
static uint32_t buffer_size = DEFAULT_BUFFER;
static bool want_mlock = true;
static bool want_trim = false;

/* Set up before the first connection, read-only afterwards. */
static bool is_block;
static int64_t size;
static uint32_t min_block = MIN_BLOCK;
static uint32_t pref_block = MIN_BLOCK;
static int fd = -1;             /* O_DIRECT */
static int fd_sync = -1;        /* O_DIRECT|O_DSYNC: FUA writes */
static bool writable;
static struct throttle_mempool *pool;
static struct throttle_mempool *zero_pool;
static void *zero_buf;          /* buffer_size zero bytes, never freed */

static void
throttle_disk_unload (void)
{
  if (zero_pool) {
    throttle_mempool_free (zero_pool, zero_buf);
    throttle_mempool_destroy (zero_pool);
  }
  throttle_mempool_destroy (pool);
  if (fd_sync >= 0)
    close (fd_sync);
  if (fd >= 0)
    close (fd);
  free (filename);
}

static int
throttle_disk_config (const char *key, const char *value)
{
  int64_t r;
  int b;

  if (strcmp (key, "file") == 0) {
    free (filename);
    filename = nbdkit_realpath (value);
    if (filename == NULL)
      return -1;
  }
  else if (strcmp (key, "pool") == 0) {
    if (nbdkit_parse_unsigned ("pool", value, &pool_nr) == -1)
      return -1;
    if (pool_nr < 1 || pool_nr > MAX_POOL) {
      nbdkit_error ("pool=%s: the number of buffers must be between 1 and %d",
                    value, MAX_POOL);
      return -1;
    }
  }
  else if (strcmp (key, "buffer-size") == 0) {
    r = nbdkit_parse_size (value);
    if (r == -1)
      return -1;
    if (r < MIN_BLOCK || r > MAX_BUFFER || r % MIN_BLOCK != 0) {
      nbdkit_error ("buffer-size=%s: must be a multiple of %d between "
                    "%d and %d bytes", value, MIN_BLOCK, MIN_BLOCK,
                    MAX_BUFFER);
      return -1;
    }
    buffer_size = r;
  }
  else if (strcmp (key, "mlock") == 0) {
    if ((b = nbdkit_parse_bool (value)) == -1)
      return -1;
    want_mlock = b;
  }
  else if (strcmp (key, "trim") == 0) {
    if ((b = nbdkit_parse_bool (value)) == -1)
      return -1;
    want_trim = b;
  }
  else {
    nbdkit_error ("unknown parameter '%s'", key);
    return -1;
  }
  return 0;
}

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

static int
check_regular_file (int rfd, const struct stat *st)
{
  int64_t hole, unwritten;
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
  if (size == 0 || size % MIN_BLOCK != 0) {
    nbdkit_error ("%s: size %" PRIi64 " is not a non-zero multiple of %d "
                  "(O_DIRECT needs whole blocks); resize it, "
                  "e.g. truncate -s SIZE then fallocate -l SIZE %s",
                  filename, size, MIN_BLOCK, filename);
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
  return 0;
}

static int
check_block_device (int rfd)
{
  uint64_t bytes;
  int lbs = 0;
  unsigned pbs = 0;

  if (ioctl (rfd, BLKGETSIZE64, &bytes) == -1) {
    nbdkit_error ("%s: BLKGETSIZE64: %m", filename);
    return -1;
  }
  if (ioctl (rfd, BLKSSZGET, &lbs) == 0 && lbs > MIN_BLOCK)
    min_block = lbs;
  pref_block = min_block;
  if (ioctl (rfd, BLKPBSZGET, &pbs) == 0 && pbs > pref_block &&
      pbs <= (unsigned) buffer_size)
    pref_block = pbs;
  if (buffer_size % min_block != 0) {
    nbdkit_error ("%s: logical block size %u does not divide "
                  "buffer-size=%" PRIu32, filename, min_block, buffer_size);
    return -1;
  }
  /* A partition may end on a 512 byte boundary; serve whole blocks. */
  if (bytes % min_block != 0)
    nbdkit_debug ("%s: serving %" PRIu64 " of %" PRIu64 " bytes "
                  "(whole %u byte blocks)", filename,
                  bytes / min_block * min_block, bytes, min_block);
  size = bytes / min_block * min_block;
  if (size == 0) {
    nbdkit_error ("%s: the device is smaller than one %u byte block",
                  filename, min_block);
    return -1;
  }
  return 0;
}

static int
throttle_disk_config_complete (void)
{
  struct stat st;
  int rfd, r;

  if (filename == NULL) {
    nbdkit_error ("the file=PATH parameter is required "
                  "(a block device or a fully allocated regular file)");
    return -1;
  }
  rfd = open (filename, O_RDONLY|O_CLOEXEC);
  if (rfd == -1) {
    nbdkit_error ("file=%s: %m", filename);
    return -1;
  }
  if (fstat (rfd, &st) == -1) {
    nbdkit_error ("file=%s: fstat: %m", filename);
    close (rfd);
    return -1;
  }
  if (S_ISBLK (st.st_mode)) {
    is_block = true;
    r = check_block_device (rfd);
  }
  else if (S_ISREG (st.st_mode)) {
    is_block = false;
    if (want_trim) {
      nbdkit_error ("trim=true needs a block device: on the regular file %s "
                    "trimming would punch holes, and the file must stay "
                    "fully allocated", filename);
      r = -1;
    }
    else
      r = check_regular_file (rfd, &st);
  }
  else {
    nbdkit_error ("file=%s: not a block device or a regular file", filename);
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
  int flags = O_DIRECT|O_CLOEXEC|extra|(excl && is_block ? O_EXCL : 0);
  int r;

  r = open (filename, O_RDWR|flags);
  if (r == -1 && (errno == EACCES || errno == EROFS || errno == EPERM) &&
      !(extra & O_DSYNC))
    r = open (filename, O_RDONLY|flags);
  return r;
}

static int
throttle_disk_get_ready (void)
{
  int acc;
  void *probe;
  ssize_t n;

  fd = open_direct (0, true);
  if (fd == -1) {
    if (errno == EINVAL)
      nbdkit_error ("%s: cannot open with O_DIRECT (this filesystem does "
                    "not support it): use a block device or a file on a "
                    "filesystem such as ext4 or xfs", filename);
    else if (errno == EBUSY)
      nbdkit_error ("%s: device is busy (mounted, used as swap, or opened "
                    "exclusively by another program)", filename);
    else
      nbdkit_error ("%s: open O_DIRECT: %m", filename);
    return -1;
  }
  acc = fcntl (fd, F_GETFL) & O_ACCMODE;
  writable = acc == O_RDWR;
  if (writable) {
    fd_sync = open_direct (O_DSYNC, false);
    if (fd_sync == -1) {
      nbdkit_error ("%s: open O_DIRECT|O_DSYNC: %m", filename);
      return -1;
    }
  }

  pool = throttle_mempool_create (pool_nr, buffer_size, want_mlock);
  if (pool == NULL) {
    nbdkit_error ("cannot %s a pool of %u x %" PRIu32 " bytes: %m%s",
                  want_mlock ? "lock" : "map", pool_nr, buffer_size,
                  want_mlock && (errno == ENOMEM || errno == EPERM ||
                                 errno == EAGAIN)
                  ? " (raise RLIMIT_MEMLOCK, ulimit -l, run with "
                    "CAP_IPC_LOCK, or lower pool= or buffer-size=)" : "");
    return -1;
  }
  zero_pool = throttle_mempool_create (1, buffer_size, want_mlock);
  if (zero_pool == NULL) {
    nbdkit_error ("cannot %s the zero buffer of %" PRIu32 " bytes: %m",
                  want_mlock ? "lock" : "map", buffer_size);
    return -1;
  }
  zero_buf = throttle_mempool_try_alloc (zero_pool);

  /* Some filesystems accept O_DIRECT at open and refuse it at I/O. */
  probe = throttle_mempool_try_alloc (pool);
  n = pread (fd, probe, min_block, 0);
  if (n == -1)
    nbdkit_error ("%s: O_DIRECT read of the first %u bytes failed: %m "
                  "(the device may need larger alignment)",
                  filename, min_block);
  throttle_mempool_free (pool, probe);
  if (n == -1)
    return -1;

  nbdkit_debug ("%s: %s of %" PRIi64 " bytes, %s, blocks %u/%u/%" PRIu32
                ", pool %u x %" PRIu32 " bytes, %zu bytes locked",
                filename, is_block ? "block device" : "regular file", size,
                writable ? "read-write" : "read-only",
                min_block, pref_block, buffer_size, pool_nr, buffer_size,
                throttle_mempool_bytes_locked (pool) +
                throttle_mempool_bytes_locked (zero_pool));
  return 0;
}

/* The variables above and the code that reads them are in this
 * plugin's own mapping.  Its data pages are anonymous once written, so
 * they can be swapped out like any others, and a request that then
 * reads 'fd' would wait for a swap-in from the very device it serves
 * (seen in the swap guest: worker threads in do_swap_page on a
 * filter's GOT page).  Lock every segment of this object.
 */
struct self_lock {
  uintptr_t self;
  size_t locked;
  int err;
};

static int
lock_object_of (struct dl_phdr_info *info, size_t sz, void *vp)
{
  struct self_lock *sl = vp;
  long page_l = sysconf (_SC_PAGESIZE);
  uintptr_t page = page_l > 0 ? (uintptr_t) page_l : 4096;
  uintptr_t start, end;
  bool mine = false;
  int i;

  for (i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

    if (ph->p_type == PT_LOAD &&
        sl->self >= info->dlpi_addr + ph->p_vaddr &&
        sl->self < info->dlpi_addr + ph->p_vaddr + ph->p_memsz)
      mine = true;
  }
  if (!mine)
    return 0;
  for (i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

    if (ph->p_type != PT_LOAD)
      continue;
    start = (info->dlpi_addr + ph->p_vaddr) & ~(page - 1);
    end = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz + page - 1) &
      ~(page - 1);
    /* mlock faults every page in (writing private writable ones, so
     * they stop being shared with the file or the parent).
     */
    if (mlock ((void *) start, end - start) == -1) {
      sl->err = errno;
      return 1;
    }
    sl->locked += end - start;
  }
  return 1;
}

static size_t self_locked;

static int
lock_self (void)
{
  struct self_lock sl = { .self = (uintptr_t) &fd };

  dl_iterate_phdr (lock_object_of, &sl);
  if (sl.err) {
    errno = sl.err;
    return -1;
  }
  self_locked = sl.locked;
  return 0;
}

/* nbdkit forks to daemonize after .get_ready: locks are not inherited,
 * and the pool is shared copy-on-write with the parent until it exits.
 */
static int
throttle_disk_after_fork (void)
{
  if (throttle_mempool_relock (pool) == -1 ||
      throttle_mempool_relock (zero_pool) == -1) {
    nbdkit_error ("cannot lock the pool again after fork: %m");
    return -1;
  }
  if (want_mlock) {
    if (lock_self () == -1) {
      nbdkit_error ("cannot lock the plugin's own code and data: %m");
      return -1;
    }
    nbdkit_debug ("locked after fork: pool %zu bytes, zero buffer %zu "
                  "bytes, plugin code and data %zu bytes",
                  throttle_mempool_bytes_locked (pool),
                  throttle_mempool_bytes_locked (zero_pool), self_locked);
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
  return size;
}

static int
throttle_disk_block_size (void *handle, uint32_t *minimum,
                          uint32_t *preferred, uint32_t *maximum)
{
  *minimum = min_block;
  *preferred = pref_block;
  *maximum = buffer_size;
  return 0;
}

static int
throttle_disk_can_write (void *handle)
{
  return writable;
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
  return want_trim && is_block;
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

static int
check_aligned (const char *op, uint32_t count, uint64_t offset)
{
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
    r = pread (fd, p, count, offset);
    if (r == -1) {
      if (errno == EINTR)
        continue;
      nbdkit_error ("%s: pread at %" PRIu64 ": %m", filename, offset);
      return -1;
    }
    if (r == 0) {
      nbdkit_error ("%s: unexpected end of file at %" PRIu64,
                    filename, offset);
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
      nbdkit_error ("%s: pwrite at %" PRIu64 ": %m", filename, offset);
      return -1;
    }
    if (r == 0) {
      nbdkit_error ("%s: no progress writing at %" PRIu64, filename, offset);
      errno = ENOSPC;
      return -1;
    }
    p += r;
    count -= r;
    offset += r;
  }
  return 0;
}

/* Only shutdown can fail the wait, and nbdkit never shuts the pool
 * down while requests run; a wait ends when another request finishes
 * its I/O.
 */
static void *
get_buffer (void)
{
  void *b = throttle_mempool_alloc (pool, NULL, NULL, 0);

  if (b == NULL)
    errno = ESHUTDOWN;
  return b;
}

static int
throttle_disk_pread (void *handle, void *buf, uint32_t count,
                     uint64_t offset, uint32_t flags)
{
  char *out = buf;
  void *bounce;
  uint32_t n;
  int r = 0;

  if (throttle_disk_debug_verbose)
    nbdkit_debug ("pread count=%" PRIu32 " offset=%" PRIu64, count, offset);
  if (check_aligned ("pread", count, offset) == -1)
    return -1;
  if ((bounce = get_buffer ()) == NULL)
    return -1;
  while (count > 0) {
    n = count < buffer_size ? count : buffer_size;
    if ((r = full_pread (bounce, n, offset)) == -1)
      break;
    memcpy (out, bounce, n);
    out += n;
    count -= n;
    offset += n;
  }
  throttle_mempool_free (pool, bounce);
  return r;
}

static int
throttle_disk_pwrite (void *handle, const void *buf, uint32_t count,
                      uint64_t offset, uint32_t flags)
{
  const char *in = buf;
  /* O_DSYNC makes each write durable before it returns: for a block
   * device that is a FUA write (or a write and a cache flush), not a
   * flush of everything the device caches.
   */
  int wfd = flags & NBDKIT_FLAG_FUA ? fd_sync : fd;
  void *bounce;
  uint32_t n;
  int r = 0;

  if (throttle_disk_debug_verbose)
    nbdkit_debug ("pwrite count=%" PRIu32 " offset=%" PRIu64 "%s",
                  count, offset, flags & NBDKIT_FLAG_FUA ? " fua" : "");
  if (check_aligned ("pwrite", count, offset) == -1)
    return -1;
  if ((bounce = get_buffer ()) == NULL)
    return -1;
  while (count > 0) {
    n = count < buffer_size ? count : buffer_size;
    memcpy (bounce, in, n);
    if ((r = full_pwrite (wfd, bounce, n, offset)) == -1)
      break;
    in += n;
    count -= n;
    offset += n;
  }
  throttle_mempool_free (pool, bounce);
  return r;
}

/* Written from the shared zero buffer: BLKZEROOUT and fallocate would
 * be faster, but BLKZEROOUT allocates its bios from fs_bio_set, and
 * fallocate(ZERO_RANGE/PUNCH_HOLE) changes the file's extents (and
 * PUNCH_HOLE makes it sparse).  No pool buffer is needed.
 */
static int
throttle_disk_zero (void *handle, uint32_t count, uint64_t offset,
                    uint32_t flags)
{
  int wfd = flags & NBDKIT_FLAG_FUA ? fd_sync : fd;
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
    if (full_pwrite (wfd, zero_buf, n, offset) == -1)
      return -1;
    count -= n;
    offset += n;
  }
  return 0;
}

static int
throttle_disk_flush (void *handle, uint32_t flags)
{
  if (throttle_disk_debug_verbose)
    nbdkit_debug ("flush");
  if (fdatasync (fd) == -1) {
    nbdkit_error ("%s: fdatasync: %m", filename);
    return -1;
  }
  return 0;
}

/* Only offered with trim=true on a block device (see the man page:
 * BLKDISCARD allocates its bios from the shared fs_bio_set).
 */
static int
throttle_disk_trim (void *handle, uint32_t count, uint64_t offset,
                    uint32_t flags)
{
  uint64_t range[2] = { offset, count };

  if (throttle_disk_debug_verbose)
    nbdkit_debug ("trim count=%" PRIu32 " offset=%" PRIu64, count, offset);
  if (check_aligned ("trim", count, offset) == -1)
    return -1;
  if (ioctl (fd, BLKDISCARD, range) == -1) {
    nbdkit_error ("%s: BLKDISCARD at %" PRIu64 ": %m", filename, offset);
    return -1;
  }
  if (flags & NBDKIT_FLAG_FUA)
    return throttle_disk_flush (handle, 0);
  return 0;
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
