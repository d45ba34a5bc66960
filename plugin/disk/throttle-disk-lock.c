/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle-disk-plugin: lock the plugin's own code and data.
 *
 * The plugin's variables and the code that reads them are in its own
 * mapping.  Its data pages are anonymous once written, so they can be
 * swapped out like any others, and a request that then reads the
 * descriptor would wait for a swap-in from the very device it serves
 * (seen in the swap guest: worker threads in do_swap_page on a
 * filter's GOT page).  So every segment of this object is locked.
 */

#include <config.h>

#include <errno.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/mman.h>

#include "throttle-disk.h"

struct self_lock {
  uintptr_t self;               /* an address inside this object */
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

int
throttle_disk_lock_self (size_t *locked)
{
  struct self_lock sl = { .self = (uintptr_t) &throttle_disk };

  dl_iterate_phdr (lock_object_of, &sl);
  if (sl.err) {
    errno = sl.err;
    return -1;
  }
  *locked = sl.locked;
  return 0;
}
