/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: what is locked in RAM and the heap reserve
 * (see throttle-memlock.h).
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <nbdkit-filter.h>

#include "throttle-guards-config.h"
#include "throttle-memlock.h"
#include "throttle-parse.h"
#include "throttle-reserve.h"
#include "throttle-verdict.h"

/* The parameters, read only after .config. */
static const struct throttle_guards_params *const gp =
  &throttle_guards_params;

#ifndef MCL_ONFAULT
#define MCL_ONFAULT 4
#endif

#define CAP_IPC_LOCK_BIT 14

/* Decided in get_ready, before any thread that reads them exists. */
static bool lock_all;                   /* mlockall (MCL_ONFAULT) */
static size_t reserve_size;
static bool reserve_locked;

int
throttle_proc_status_field (const char *key, char *buf, size_t len)
{
  FILE *fp = fopen ("/proc/self/status", "r");
  char line[256];
  size_t klen = strlen (key);
  int r = -1;

  if (fp == NULL)
    return -1;
  while (fgets (line, sizeof line, fp)) {
    if (strncmp (line, key, klen) == 0 && line[klen] == ':') {
      const char *v = line + klen + 1;

      v += strspn (v, " \t");
      snprintf (buf, len, "%.*s", (int) strcspn (v, "\n"), v);
      r = 0;
      break;
    }
  }
  fclose (fp);
  return r;
}

static bool
have_cap (int bit)
{
  char buf[64];
  unsigned long long caps;

  if (throttle_proc_status_field ("CapEff", buf, sizeof buf) == -1 ||
      sscanf (buf, "%llx", &caps) != 1)
    return false;
  return caps & (1ULL << bit);
}

static const char *
mlock_name (void)
{
  switch (gp->mlock) {
  case THROTTLE_LOCK_OFF: return "off";
  case THROTTLE_LOCK_POOL: return "pool";
  case THROTTLE_LOCK_ONFAULT: return "onfault";
  default: return "auto";
  }
}

/* MCL_FUTURE over RLIMIT_MEMLOCK makes later mmap and brk fail, so
 * malloc would start failing at random in a running server: lock
 * everything only where no limit applies.
 */
static bool
can_lock_all (unsigned long long *limit_kib)
{
  struct rlimit rl;

  *limit_kib = 0;
  if (have_cap (CAP_IPC_LOCK_BIT))
    return true;
  if (getrlimit (RLIMIT_MEMLOCK, &rl) == 0) {
    if (rl.rlim_cur == RLIM_INFINITY)
      return true;
    *limit_kib = rl.rlim_cur / 1024;
  }
  return false;
}

/* mlock's "on" refused: kept for the verdict's one error line, naming
 * throttle-mlock=onfault or throttle-swap=on, whichever asked for it.
 */
static void
onfault_refused (const char *what)
{
  if (throttle_params_given ("throttle-mlock"))
    throttle_verdict_refused (THROTTLE_SWAP_MLOCK, "throttle-mlock",
                              "onfault", "throttle-mlock=pool", "%s", what);
  else
    throttle_verdict_refused (THROTTLE_SWAP_MLOCK, "throttle-swap", "on",
                              "throttle-mlock=pool", "%s", what);
}

#define RESERVE_UNLOCKED_WHY \
  "the heap reserve could not be locked: needs CAP_IPC_LOCK or " \
  "RLIMIT_MEMLOCK"
#define LOCK_ALL_WHY \
  "cannot lock all of nbdkit's memory: needs CAP_IPC_LOCK or an " \
  "unlimited RLIMIT_MEMLOCK"

/* Decides lock_all; onfault without the permission is refused
 * (onfault_refused).
 */
static void
decide_mlock (void)
{
  unsigned long long limit;

  lock_all = false;
  if (gp->mlock == THROTTLE_LOCK_OFF)
    throttle_verdict_missing (THROTTLE_SWAP_MLOCK,
                              throttle_params_given ("throttle-mlock") ?
                              "throttle-mlock=off" : "throttle-swap=off");
  if (gp->mlock == THROTTLE_LOCK_POOL)
    throttle_verdict_missing (THROTTLE_SWAP_MLOCK, "throttle-mlock=pool "
                              "locks only the pools and the heap reserve");
  if (gp->mlock != THROTTLE_LOCK_ONFAULT && gp->mlock != THROTTLE_LOCK_AUTO)
    return;
  if (can_lock_all (&limit)) {
    lock_all = true;
    return;
  }
  if (gp->mlock == THROTTLE_LOCK_ONFAULT) {
    char what[256];

    snprintf (what, sizeof what, "cannot lock all of nbdkit's memory: "
              "needs CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK (ulimit -l "
              "is %llu KiB), else the server's later allocations would "
              "fail", limit);
    onfault_refused (what);
    return;
  }
  nbdkit_debug ("throttle: throttle-mlock=auto: cannot lock all of nbdkit's "
                "memory (needs CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK; "
                "ulimit -l is %llu KiB): locking only the pools and the heap "
                "reserve", limit);
  throttle_verdict_missing (THROTTLE_SWAP_MLOCK, LOCK_ALL_WHY);
}

/* throttle-swap=on requires the reserve it sizes (one the user sized,
 * or none, is the user's choice).
 */
static bool
swap_requires_reserve (void)
{
  return gp->swap == THROTTLE_GUARD_ON && !gp->reserve_text;
}

static int
size_reserve (int thread_model)
{
  uint64_t ram;

  if (gp->reserve == 0)
    throttle_verdict_missing (THROTTLE_SWAP_RESERVE,
                              gp->reserve_text ?
                              "throttle-reserve=0" : "throttle-swap=off");
  if (gp->reserve >= 0)
    reserve_size = gp->reserve;
  else
    reserve_size =
      throttle_reserve_default (thread_model >= NBDKIT_THREAD_MODEL_PARALLEL,
                                gp->threads, gp->max_request,
                                KERNEL_REQUEST);
  ram = (uint64_t) sysconf (_SC_PHYS_PAGES) * sysconf (_SC_PAGESIZE);
  if (!throttle_reserve_fits (reserve_size, ram)) {
    if (gp->reserve_text)
      nbdkit_error ("throttle-reserve=%s: more than half of RAM (%" PRIu64
                    " bytes): set it to what nbdkit's workers can need, "
                    "or 0 for no reserve", gp->reserve_text, ram);
    else
      nbdkit_error ("throttle-threads=%u: the default throttle-reserve, "
                    "%zu bytes for as many workers, is more than half of "
                    "RAM (%" PRIu64 " bytes): set throttle-threads (or "
                    "throttle-reserve) to what nbdkit's workers can need, "
                    "or throttle-reserve=0 for no reserve",
                    gp->threads, reserve_size, ram);
    return -1;
  }
  return 0;
}

/* Makes 'size' bytes of the main heap resident (and locked) so that
 * nbdkit's per-thread request buffers, grown by realloc + memset on a
 * worker's first large request, land on pages that are already there.
 * Returns 0, or -1 if the reserve could not be had (allocated, or
 * locked unless throttle-mlock=off): a reason of the verdict.
 */
static int
grow_reserve (size_t size)
{
  const long page = sysconf (_SC_PAGESIZE);
  volatile char *p;
  size_t i;
  int r = 0;

  /* While the reserve is grown: big blocks from the heap, not mmap
   * (they would vanish on free); no heap memory given back; one arena,
   * so every thread allocates from the heap grown here.  nbdkit has
   * only this thread now.
   */
  if (mallopt (M_MMAP_MAX, 0) != 1 ||
      mallopt (M_TRIM_THRESHOLD, -1) != 1 ||
      mallopt (M_ARENA_MAX, 1) != 1)
    throttle_warning ("throttle-reserve: mallopt refused a setting: the heap "
                      "reserve may not cover nbdkit's request buffers");

  p = malloc (size);
  if (p == NULL) {
    nbdkit_debug ("throttle: throttle-reserve: cannot allocate %zu bytes: "
                  "%s: running without the heap reserve", size,
                  throttle_errtext (errno));
    throttle_verdict_missing (THROTTLE_SWAP_RESERVE, "the heap reserve "
                              "could not be allocated");
    return -1;
  }
  /* Through a volatile pointer: GCC deletes malloc + memset + free. */
  for (i = 0; i < size; i += page)
    p[i] = 0;
  p[size - 1] = 0;

  if (gp->mlock != THROTTLE_LOCK_OFF) {
    uintptr_t start = ((uintptr_t) p + page - 1) & ~(uintptr_t) (page - 1);
    uintptr_t end = ((uintptr_t) p + size) & ~(uintptr_t) (page - 1);

    /* The lock belongs to the pages, not to the allocation: it stays
     * after free because the heap is trimmed only down to the
     * reserve's size of free memory above what is in use (M_TOP_PAD).
     */
    if (end > start) {
      if (mlock ((void *) start, end - start) == 0)
        reserve_locked = true;
      else {
        nbdkit_debug ("throttle: throttle-mlock=%s: cannot lock the heap "
                      "reserve of %zu bytes: %s (needs CAP_IPC_LOCK or "
                      "RLIMIT_MEMLOCK): it may be swapped out",
                      mlock_name (), size, throttle_errtext (errno));
        throttle_verdict_missing (THROTTLE_SWAP_RESERVE,
                                  RESERVE_UNLOCKED_WHY);
        r = -1;
      }
    }
  }
  free ((void *) p);

  /* From now on, give back what a burst of requests takes beyond the
   * reserve (a client could otherwise leave nbdkit holding hundreds of
   * MiB, locked).  Free memory at the heap top beyond the reserve plus
   * one request is trimmed down to the reserve, whose pages stay
   * faulted and locked.  free () checks this whenever it merges a large
   * chunk into the top, but malloc_consolidate merges fastbin chunks
   * into it without checking: no fastbins (tcache still serves small
   * requests).  A request buffer larger than the filter accepts (only
   * a client ignoring the advertised maximum makes nbdkit allocate
   * one) gets a mapping of its own, unmapped when nbdkit frees it.
   */
  if (size <= (size_t) INT_MAX - gp->max_request) {
    if (mallopt (M_TOP_PAD, size) != 1 ||
        mallopt (M_TRIM_THRESHOLD, size + gp->max_request) != 1 ||
        mallopt (M_MXFAST, 0) != 1)
      throttle_warning ("throttle-reserve: mallopt refused a setting: memory "
                        "beyond the reserve may not be given back");
  }
  else
    throttle_warning ("throttle-reserve: %zu bytes is too large for malloc's "
                      "trim settings: memory beyond the reserve is never "
                      "given back", size);
  if (mallopt (M_MMAP_THRESHOLD,
               gp->max_request + page < MAX_MAX_REQUEST ?
               gp->max_request + page : MAX_MAX_REQUEST) != 1 ||
      mallopt (M_MMAP_MAX, 65536) != 1)
    throttle_warning ("throttle-reserve: mallopt refused a setting: oversized "
                      "request buffers stay in the heap");
  return r;
}

int
throttle_memlock_get_ready (int thread_model)
{
  unsigned long long limit;

  decide_mlock ();
  if (size_reserve (thread_model) == -1)
    return -1;
  /* Known now, while the verdict still reaches the user's terminal:
   * a reserve above RLIMIT_MEMLOCK will not be locked in after_fork,
   * which throttle-swap=on refuses (there): said now with the other
   * guards refused.
   */
  if (gp->mlock != THROTTLE_LOCK_OFF && !lock_all && reserve_size > 0 &&
      !can_lock_all (&limit) && reserve_size / 1024 > limit) {
    throttle_verdict_missing (THROTTLE_SWAP_RESERVE, RESERVE_UNLOCKED_WHY);
    if (swap_requires_reserve ())
      throttle_verdict_refused (THROTTLE_SWAP_RESERVE, "throttle-swap", "on",
                                "throttle-reserve=0", "the heap reserve of "
                                "%zu bytes cannot be locked: above "
                                "RLIMIT_MEMLOCK (ulimit -l is %llu KiB), "
                                "without CAP_IPC_LOCK", reserve_size, limit);
  }
  return 0;
}

int
throttle_memlock_after_fork (void)
{
  /* Locks are not inherited across fork, so not done in get_ready;
   * and -u may have dropped CAP_IPC_LOCK since.
   */
  if (lock_all) {
    unsigned long long limit;
    int err = 0;

    if (!can_lock_all (&limit))
      err = EPERM;
    else if (mlockall (MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) == -1)
      err = errno;
    if (err) {
      lock_all = false;
      if (gp->mlock == THROTTLE_LOCK_ONFAULT) {
        char what[128];

        snprintf (what, sizeof what, "mlockall: %s", throttle_errtext (err));
        onfault_refused (what);
        return 0;
      }
      nbdkit_debug ("throttle: throttle-mlock=auto: mlockall: %s: locking "
                    "only the pools and the heap reserve",
                    throttle_errtext (err));
      throttle_verdict_missing (THROTTLE_SWAP_MLOCK, LOCK_ALL_WHY);
    }
  }
  /* throttle-swap=on requires the reserve it sizes. */
  if (reserve_size > 0 && grow_reserve (reserve_size) == -1 &&
      swap_requires_reserve ())
    throttle_verdict_refused (THROTTLE_SWAP_RESERVE, "throttle-swap", "on",
                              "throttle-reserve=0", "the heap reserve of "
                              "%zu bytes could not be had (-v says why)",
                              reserve_size);
  return 0;
}

static const char *
what_is_locked (void)
{
  return lock_all ? "everything, on fault" :
    gp->mlock == THROTTLE_LOCK_OFF ? "nothing" :
    "pools and reserve";
}

void
throttle_memlock_plan (char *buf, size_t len)
{
  snprintf (buf, len, "mlock %s (%s), reserve %zu bytes",
            mlock_name (), what_is_locked (), reserve_size);
}

void
throttle_memlock_summary (char *buf, size_t len)
{
  char vmlck[64] = "?", vmrss[64] = "?";
  struct mallinfo2 mi = mallinfo2 ();

  /* Under MCL_ONFAULT VmLck counts every locked mapping, touched or
   * not; what is pinned in RAM is at most VmRSS.
   */
  throttle_proc_status_field ("VmLck", vmlck, sizeof vmlck);
  throttle_proc_status_field ("VmRSS", vmrss, sizeof vmrss);
  snprintf (buf, len, "mlock %s (%s), heap reserve %zu bytes (%s), free at "
            "heap top %zu bytes, VmLck %s, VmRSS %s",
            mlock_name (), what_is_locked (), reserve_size,
            reserve_size == 0 ? "none" :
            reserve_locked ? "faulted and locked" : "faulted, not locked",
            mi.keepcost, vmlck, vmrss);
}
