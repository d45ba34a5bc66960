/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the thread and process guards, their
 * parameters, what is locked in RAM and the heap reserve (see
 * throttle-guards.h).
 *
 * Every guard goes the same way: off (by its own parameter or by
 * throttle-swap) it is missing; otherwise it is tried, and one the
 * kernel refuses is, with "on", kept for the one error line that
 * names every guard refused (say_refusals), and with "auto" missing.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <linux/capability.h>

#include <nbdkit-filter.h>

#include "throttle-config.h"
#include "throttle-guards.h"
#include "throttle-params.h"
#include "throttle-parse.h"
#include "throttle-reserve.h"
#include "throttle-serve.h"

/* The largest request Linux's nbd driver sends with the default
 * max_sectors_kb of Debian 12's Linux 6.1; sizes the default reserve.
 */
#define KERNEL_REQUEST (1280 * 1024)
/* The bounds of throttle-max-request: the largest minimum block size a
 * plugin may set (so the maximum stays a multiple of it), and glibc's
 * largest M_MMAP_THRESHOLD on 64-bit (HEAP_MAX_SIZE / 2), which is
 * also the largest request Linux's nbd driver can send.
 */
#define MIN_MAX_REQUEST (64 * 1024)
#define MAX_MAX_REQUEST (32 * 1024 * 1024)
/* The largest read or write nbdkit itself receives (its
 * MAX_REQUEST_SIZE, 1.32 to 1.44): with throttle-max-request=plugin
 * the memory a request can pin.
 */
#define NBDKIT_MAX_REQUEST (64 * 1024 * 1024)

struct throttle_guards_params throttle_guards_params = {
  .swap = THROTTLE_GUARD_AUTO,
  .threads = 16,                /* nbdkit's DEFAULT_PARALLEL_REQUESTS */
  /* What newer kernels send at their default max_sectors_kb (4 MiB), so
   * a kernel client works unchanged.
   */
  .max_request = 4 * 1024 * 1024,
  .rt_hold = 60.0,
};

static struct throttle_guards_params *const gp = &throttle_guards_params;

const char *const throttle_guard_words[] = { "off", "auto", "on", NULL };
/* In the order of enum throttle_lock_mode. */
static const char *const lock_words[] = {
  "off", "pool", "onfault", "auto", NULL
};
static const char *const plugin_word[] = { "plugin", NULL };

/* A guard that is auto, on or off. */
#define GUARD(key, field) \
  { key, THROTTLE_PARAM_WORD, &throttle_guards_params.field, \
    .words = throttle_guard_words, .why = "expected auto, on or off" }

const struct throttle_param throttle_guards_param_table[] = {
  { "throttle-swap", THROTTLE_PARAM_WORD, &throttle_guards_params.swap,
    .words = throttle_guard_words,
    .why = "expected auto, on (require every guard, for swap) or off (no "
    "guard, for ordinary throttling)" },
  GUARD ("throttle-io-flusher", io_flusher),
  GUARD ("throttle-rt", rt),
  GUARD ("throttle-oom", oom),
  { "throttle-rt-hold", THROTTLE_PARAM_SECONDS,
    &throttle_guards_params.rt_hold, .max = 86400 * THROTTLE_PARAM_S,
    .why = "expected a number of seconds from 0 to 86400" },
  { "throttle-mlock", THROTTLE_PARAM_WORD, &throttle_guards_params.mlock,
    .words = lock_words, .why = "expected auto, onfault, pool or off" },
  { "throttle-reserve", THROTTLE_PARAM_SIZE, &throttle_guards_params.reserve,
    .text = &throttle_guards_params.reserve_text, .max = INT64_MAX },
  { "throttle-threads", THROTTLE_PARAM_NUMBER,
    &throttle_guards_params.threads, .min = 1, .max = 1024,
    .why = " (nbdkit's --threads value)" },
  { "throttle-max-request", THROTTLE_PARAM_SIZE,
    &throttle_guards_params.max_request, .min = MIN_MAX_REQUEST,
    .max = MAX_MAX_REQUEST, .words = plugin_word,
    .why = "expected a size from 64K to 32M (the largest read or write a "
    "client may send), or plugin" },
  { NULL }
};

/* Linux 5.6 <linux/prctl.h>; Debian 12's glibc headers lack them. */
#ifndef PR_SET_IO_FLUSHER
#define PR_SET_IO_FLUSHER 57
#endif
#ifndef PR_GET_IO_FLUSHER
#define PR_GET_IO_FLUSHER 58
#endif
#ifndef MCL_ONFAULT
#define MCL_ONFAULT 4
#endif

#define RESERVE_UNLOCKED_WHY \
  "the heap reserve could not be locked: needs CAP_IPC_LOCK or " \
  "RLIMIT_MEMLOCK"
#define LOCK_ALL_WHY \
  "cannot lock all of nbdkit's memory: needs CAP_IPC_LOCK or an " \
  "unlimited RLIMIT_MEMLOCK"

/* What a child of fork must write back to /proc/self/oom_score_adj:
 * the value nbdkit had before the filter lowered it.  Formatted in
 * advance, since the child of a multithreaded process may only make
 * async-signal-safe calls.
 */
static char oom_saved[16] = "0";

int
throttle_guards_set_policy (pid_t tid, bool on, int fifo)
{
  static const struct sched_param fifo_1 = { .sched_priority = 1 };
  static const struct sched_param other = { .sched_priority = 0 };
  const int policy = sched_getscheduler (tid);
  const bool is_fifo = (policy & ~SCHED_RESET_ON_FORK) == SCHED_FIFO;

  if (policy == -1)
    return -1;
  if (on ? is_fifo && (policy & fifo) == fifo : !is_fifo)
    return 0;
  if (sched_setscheduler (tid, on ? fifo : SCHED_OTHER,
                          on ? &fifo_1 : &other) == -1)
    return -1;
  return 1;
}

/* Each sets its guard on the calling thread (on) or takes it off, also
 * in the child of fork: async-signal-safe.  0 or an errno.
 */
static int
set_io_flusher (bool on)
{
  return prctl (PR_SET_IO_FLUSHER, on, 0, 0, 0) == 0 ? 0 : errno;
}

static int
set_rt (bool on)
{
  return throttle_guards_set_policy (0, on, SCHED_FIFO) == -1 ? errno : 0;
}

static int
set_oom (bool on)
{
  const char *value = on ? "-1000" : oom_saved;
  ssize_t len = strlen (value);
  int fd, err = 0;

  fd = open ("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd == -1 || write (fd, value, len) != len)
    err = errno;
  if (fd >= 0)
    close (fd);
  return err;
}

const char *const throttle_guard_names[THROTTLE_GUARDS] = {
  "io-flusher", "rt", "oom", "mlock", "reserve",
};

/* The guards, by enum throttle_guard, and what their messages name. */
static const struct guard {
  const char *key;              /* its own parameter */
  const char *off;              /* the reason when key turned it off */
  /* What starts without it: when key required it, when throttle-swap
   * did.
   */
  const char *fix[2];
  /* The guards set on the main thread, which every later thread
   * inherits: their mode, what was refused and what it needs, the
   * reason when auto was refused, and how to set it.
   */
  enum throttle_guard_mode *mode;
  const char *what, *why;
  int (*set) (bool on);
} guards[THROTTLE_GUARDS] = {
  [THROTTLE_SWAP_IO_FLUSHER] = {
    "throttle-io-flusher", "throttle-io-flusher=off",
    { "throttle-io-flusher=auto", "throttle-io-flusher=off" },
    &throttle_guards_params.io_flusher,
    "cannot set PR_SET_IO_FLUSHER (needs CAP_SYS_RESOURCE, Linux >= 5.6)",
    "PR_SET_IO_FLUSHER refused: needs CAP_SYS_RESOURCE and Linux >= 5.6",
    set_io_flusher,
  },
  /* Tried only, and undone: rt=auto must not leave a thread real-time
   * before it is needed; the real-time switch sets it.
   */
  [THROTTLE_SWAP_RT] = {
    "throttle-rt", "throttle-rt=off", { "throttle-rt=auto", "throttle-rt=off" },
    &throttle_guards_params.rt,
    "cannot set SCHED_FIFO (needs CAP_SYS_NICE or RLIMIT_RTPRIO >= 1, "
    "and real-time runtime in the cgroup)",
    "SCHED_FIFO refused: needs CAP_SYS_NICE or RLIMIT_RTPRIO >= 1",
    set_rt,
  },
  [THROTTLE_SWAP_OOM] = {
    "throttle-oom", "throttle-oom=off",
    { "throttle-oom=auto", "throttle-oom=off" },
    &throttle_guards_params.oom,
    "cannot set oom_score_adj to -1000 (needs CAP_SYS_RESOURCE)",
    "oom_score_adj -1000 refused: needs CAP_SYS_RESOURCE",
    set_oom,
  },
  [THROTTLE_SWAP_MLOCK] = {
    "throttle-mlock", "throttle-mlock=off",
    { "throttle-mlock=pool", "throttle-mlock=pool" },
  },
  [THROTTLE_SWAP_RESERVE] = {
    "throttle-reserve", "throttle-reserve=0", { NULL, "throttle-reserve=0" },
  },
};

/* Decided in get_ready, before any thread that reads them exists, and
 * lost only in after_fork (-u may have dropped a capability).
 */
static bool active[THROTTLE_GUARDS]; /* io-flusher, rt, oom: permitted */
static bool lock_all;           /* mlockall (MCL_ONFAULT) */
static size_t reserve_size;
static bool reserve_locked;

/* The required guards refused since the last say_refusals, and what
 * refused each (main thread only).
 */
static unsigned refused_mask;
static char refused_what[THROTTLE_GUARDS][512];

/* Why each guard is missing, NULL if taken (throttle_guards_missing). */
static _Atomic (const char *) missing[THROTTLE_GUARDS];

const char *
throttle_guards_missing (enum throttle_guard guard)
{
  return atomic_load (&missing[guard]);
}

void
throttle_guards_set_missing (enum throttle_guard guard, const char *why)
{
  atomic_store (&missing[guard], why);
}

/* A guard turned off: why names who turned it off. */
static void
turned_off (enum throttle_guard r)
{
  throttle_guards_set_missing (r, throttle_params_given (guards[r].key) ?
                               guards[r].off : "throttle-swap=off");
}

/* A guard that could not be taken, fmt saying what refused it and
 * why: if required (its mode is on), kept for say_refusals; else a
 * debug line, and why, a string with static storage, is why it is
 * missing.
 */
static void __attribute__ ((format (printf, 4, 5)))
refuse (enum throttle_guard r, bool required, const char *why,
        const char *fmt, ...)
{
  const char *by = throttle_guards_key (guards[r].key);
  const char *value = throttle_params_given (by);
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (refused_what[r], sizeof refused_what[r], fmt, ap);
  va_end (ap);
  if (!required) {
    nbdkit_debug ("throttle: %s=%s: %s", by, value ? value : "auto",
                  refused_what[r]);
    throttle_guards_set_missing (r, why);
    return;
  }
  refused_mask |= 1u << r;
}

/* After every guard was tried: 0 if none required was refused, else
 * -1 after the one error line naming each (and forgets them).  Every
 * key=value that required one first, then each guard with what
 * refused it (and its key=value where they differ), then the
 * parameters that start without them.
 */
static int
say_refusals (void)
{
  char keys[256], line[4096], fixes[512];
  size_t i, j, k = 0, n = 0, f = 0, kvs = 0;
  unsigned count = __builtin_popcount (refused_mask), said = 0;
  const char *by[THROTTLE_GUARDS];
  bool all_swap = true;

  if (count == 0)
    return 0;
  keys[0] = line[0] = fixes[0] = '\0';
  for (i = 0; i < THROTTLE_GUARDS; i++) {
    if (!(refused_mask & (1u << i)))
      continue;
    by[i] = throttle_guards_key (guards[i].key);
    if (by[i] == guards[i].key)
      all_swap = false;
    for (j = 0; j < i; j++)
      if (refused_mask & (1u << j) && strcmp (by[j], by[i]) == 0)
        break;
    if (j == i && k < sizeof keys) {
      k += snprintf (keys + k, sizeof keys - k, "%s%s=%s", k ? " " : "",
                     by[i], throttle_params_given (by[i]));
      kvs++;
    }
    if (f < sizeof fixes)
      f += snprintf (fixes + f, sizeof fixes - f, "%s%s", f ? " " : "",
                     guards[i].fix[by[i] != guards[i].key]);
  }
  if (count > 1)
    n = snprintf (line, sizeof line, "%u required guards cannot be taken: ",
                  count);
  for (i = 0; i < THROTTLE_GUARDS && n < sizeof line; i++) {
    if (!(refused_mask & (1u << i)))
      continue;
    if (count == 1)
      n += snprintf (line + n, sizeof line - n, "%s", refused_what[i]);
    else if (kvs == 1)
      n += snprintf (line + n, sizeof line - n, "%s%s: %s",
                     said++ ? "; " : "", throttle_guard_names[i],
                     refused_what[i]);
    else
      n += snprintf (line + n, sizeof line - n, "%s%s (%s=%s): %s",
                     said++ ? "; " : "", throttle_guard_names[i], by[i],
                     throttle_params_given (by[i]), refused_what[i]);
  }
  refused_mask = 0;
  nbdkit_error ("%s: %s; use %s%s%s to start without %s", keys, line,
                all_swap ? "throttle-swap=auto, or " : "", fixes,
                all_swap ? "," : "", count > 1 ? "them" : "it");
  return -1;
}

int
throttle_guards_config_complete (void)
{
  enum throttle_guard_mode swap = gp->swap;
  size_t r;

  for (r = 0; r < THROTTLE_GUARDS; r++)
    if (guards[r].mode && !throttle_params_given (guards[r].key))
      *guards[r].mode = swap;
  if (!throttle_params_given ("throttle-mlock"))
    gp->mlock = swap == THROTTLE_GUARD_OFF ? THROTTLE_LOCK_OFF :
      swap == THROTTLE_GUARD_ON ? THROTTLE_LOCK_ONFAULT : THROTTLE_LOCK_AUTO;
  if (!gp->reserve_text)
    gp->reserve = swap == THROTTLE_GUARD_OFF ? 0 : -1;
  if (gp->max_request == 0) {
    gp->max_request_plugin = true;
    gp->max_request = NBDKIT_MAX_REQUEST;
  }
  return 0;
}

const char *
throttle_guards_key (const char *own_key)
{
  return throttle_params_given (own_key) ? own_key : "throttle-swap";
}

bool
throttle_guards_lock_pools (void)
{
  return gp->mlock != THROTTLE_LOCK_OFF;
}

bool
throttle_guards_rt_active (void)
{
  return active[THROTTLE_SWAP_RT];
}

/* The number a /proc file holds, or dflt if it cannot be read. */
static long
proc_number (const char *path, long dflt)
{
  FILE *fp = fopen (path, "r");
  long v = dflt;

  if (fp) {
    if (fscanf (fp, "%ld", &v) != 1)
      v = dflt;
    fclose (fp);
  }
  return v;
}

/* Tries the guards set on threads: in get_ready (!again) each one not
 * off, and undoes it; in after_fork (again) each one still active, and
 * keeps it but SCHED_FIFO (which the real-time switch sets), for every
 * thread created later and for fork_child to take off
 * (throttle-guards.h says why).  A guard refused then (e.g. after -u
 * dropped the capabilities) is lost.
 */
static void
try_thread_guards (bool again)
{
  size_t r;
  int err;

  for (r = 0; r < THROTTLE_GUARDS; r++) {
    const struct guard *g = &guards[r];

    if (g->set == NULL || (again && !active[r]))
      continue;
    if (*g->mode == THROTTLE_GUARD_OFF) {
      turned_off (r);
      continue;
    }
    /* -1, throttling off: a runaway SCHED_FIFO thread owns its CPU. */
    if (r == THROTTLE_SWAP_RT && !again &&
        proc_number ("/proc/sys/kernel/sched_rt_runtime_us", 0) == -1) {
      refuse (r, *g->mode == THROTTLE_GUARD_ON,
              "kernel.sched_rt_runtime_us is -1: real-time throttling "
              "disabled",
              "the kernel's real-time throttling is disabled "
              "(kernel.sched_rt_runtime_us = -1), and SCHED_FIFO threads "
              "could starve the machine: restore it (e.g. sysctl "
              "kernel.sched_rt_runtime_us=950000)");
      continue;
    }
    err = g->set (true);
    active[r] = err == 0;
    if (err)
      refuse (r, *g->mode == THROTTLE_GUARD_ON, g->why, "%s: %s", g->what,
              throttle_errtext (err));
    else if (!again || r == THROTTLE_SWAP_RT)
      g->set (false);
  }
}

/* Runs in the child of every fork () in nbdkit once the guards are set
 * (pthread_atfork), until the child execs: what a plugin runs (the sh
 * and eval plugins fork a script for each method) must not be
 * real-time, an IO flusher nor OOM-proof.  Async-signal-safe calls
 * only.  A request thread's children are SCHED_OTHER already
 * (SCHED_RESET_ON_FORK); a child of another thread, such as the
 * connection thread running the plugin's .open, is not.  Lowering the
 * policy needs no privilege; clearing PR_SET_IO_FLUSHER needs
 * CAP_SYS_RESOURCE, which the child has since nbdkit had it to set the
 * flag; raising oom_score_adj needs nothing.  Children of posix_spawn,
 * vfork or system () run no fork handlers: see "WHAT THE PLUGIN RUNS"
 * in nbdkit-throttle-design(1).
 */
static void
fork_child (void)
{
  int saved_errno = errno;
  size_t r;

  for (r = 0; r < THROTTLE_GUARDS; r++)
    if (active[r])
      guards[r].set (false);
  errno = saved_errno;
}

/* Reads "Key:   value..." from /proc/self/status into buf; 0, or -1 if
 * there is no such field.
 */
static int
proc_status_field (const char *key, char *buf, size_t len)
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

/* MCL_FUTURE over RLIMIT_MEMLOCK makes later mmap and brk fail, so
 * malloc would start failing at random in a running server: lock
 * everything only where no limit applies.
 */
static bool
can_lock_all (unsigned long long *limit_kib)
{
  char buf[64];
  unsigned long long caps;
  struct rlimit rl;

  *limit_kib = 0;
  if (proc_status_field ("CapEff", buf, sizeof buf) == 0 &&
      sscanf (buf, "%llx", &caps) == 1 && caps & (1ULL << CAP_IPC_LOCK))
    return true;
  if (getrlimit (RLIMIT_MEMLOCK, &rl) == 0) {
    if (rl.rlim_cur == RLIM_INFINITY)
      return true;
    *limit_kib = rl.rlim_cur / 1024;
  }
  return false;
}

/* Decides lock_all: onfault is mlock's on, pool as good as off. */
static void
decide_mlock (void)
{
  unsigned long long limit;

  if (gp->mlock == THROTTLE_LOCK_OFF)
    turned_off (THROTTLE_SWAP_MLOCK);
  else if (gp->mlock == THROTTLE_LOCK_POOL)
    throttle_guards_set_missing (THROTTLE_SWAP_MLOCK, "throttle-mlock=pool "
                              "locks only the pools and the heap reserve");
  else if (can_lock_all (&limit))
    lock_all = true;
  else
    refuse (THROTTLE_SWAP_MLOCK, gp->mlock == THROTTLE_LOCK_ONFAULT,
            LOCK_ALL_WHY, "cannot lock all of nbdkit's memory: needs "
            "CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK (ulimit -l is %llu "
            "KiB), else the server's later allocations would fail", limit);
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
  uint64_t ram = throttle_ram ();

  if (gp->reserve == 0)
    turned_off (THROTTLE_SWAP_RESERVE);
  if (gp->reserve >= 0)
    reserve_size = gp->reserve;
  else
    reserve_size =
      throttle_reserve_default (thread_model >= NBDKIT_THREAD_MODEL_PARALLEL,
                                gp->threads, gp->max_request,
                                KERNEL_REQUEST);
  if (throttle_reserve_fits (reserve_size, ram))
    return 0;
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
    throttle_guards_set_missing (THROTTLE_SWAP_RESERVE, "the heap reserve "
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
                      lock_words[gp->mlock], size, throttle_errtext (errno));
        throttle_guards_set_missing (THROTTLE_SWAP_RESERVE,
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
throttle_guards_get_ready (int thread_model)
{
  unsigned long long limit;
  int r;

  snprintf (oom_saved, sizeof oom_saved, "%ld",
            proc_number ("/proc/self/oom_score_adj", 0));
  try_thread_guards (false);
  decide_mlock ();
  r = size_reserve (thread_model);
  /* A reserve above RLIMIT_MEMLOCK will not be locked in after_fork,
   * which throttle-swap=on refuses: known now, and said with the other
   * guards refused while the verdict still reaches the user's terminal.
   */
  if (r == 0 && gp->mlock != THROTTLE_LOCK_OFF && !lock_all &&
      reserve_size > 0 && !can_lock_all (&limit) &&
      reserve_size / 1024 > limit)
    refuse (THROTTLE_SWAP_RESERVE, swap_requires_reserve (),
            RESERVE_UNLOCKED_WHY, "the heap reserve of %zu bytes cannot be "
            "locked: above RLIMIT_MEMLOCK (ulimit -l is %llu KiB), without "
            "CAP_IPC_LOCK", reserve_size, limit);
  if (say_refusals () == -1 || r == -1)
    return -1;
  throttle_max_request = gp->max_request_plugin ? 0 : gp->max_request;
  /* Real-time threads may draw on the allocator's reserve for their
   * replies; bounding reads keeps that draw bounded too.
   */
  if (active[THROTTLE_SWAP_RT] && !throttle_config.charge_reads) {
    throttle_config.charge_reads = true;
    nbdkit_debug ("throttle: request threads are or may become real-time: "
                  "reads are charged");
  }
  return 0;
}

int
throttle_guards_after_fork (void)
{
  char vmlck[64] = "?", vmrss[64] = "?";
  unsigned long long limit;
  int err;

  try_thread_guards (true);
  if (active[THROTTLE_SWAP_IO_FLUSHER] || active[THROTTLE_SWAP_RT] ||
      active[THROTTLE_SWAP_OOM]) {
    err = pthread_atfork (NULL, NULL, fork_child);
    if (err) {
      nbdkit_error ("throttle: pthread_atfork: %s: cannot keep the guards "
                    "out of the plugin's child processes",
                    throttle_errtext (err));
      return -1;
    }
  }
  /* Locks are not inherited across fork, so not taken in get_ready;
   * and -u may have dropped CAP_IPC_LOCK since.
   */
  if (lock_all) {
    err = !can_lock_all (&limit) ? EPERM :
      mlockall (MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) == -1 ? errno : 0;
    lock_all = err == 0;
    if (err)
      refuse (THROTTLE_SWAP_MLOCK, gp->mlock == THROTTLE_LOCK_ONFAULT,
              LOCK_ALL_WHY, "mlockall: %s", throttle_errtext (err));
  }
  if (reserve_size > 0 && grow_reserve (reserve_size) == -1 &&
      swap_requires_reserve ())
    refuse (THROTTLE_SWAP_RESERVE, true, NULL, "the heap reserve of %zu "
            "bytes could not be had (-v says why)", reserve_size);
  if (say_refusals () == -1)
    return -1;

  /* Under MCL_ONFAULT VmLck counts every locked mapping, touched or
   * not; what is pinned in RAM is at most VmRSS.
   */
  proc_status_field ("VmLck", vmlck, sizeof vmlck);
  proc_status_field ("VmRSS", vmrss, sizeof vmrss);
  nbdkit_debug ("throttle: guards: io-flusher %s, SCHED_FIFO %s, "
                "oom_score_adj %s, mlock %s (%s), heap reserve %zu bytes "
                "(%s), free at heap top %zu bytes, VmLck %s, VmRSS %s",
                active[THROTTLE_SWAP_IO_FLUSHER] ? "set" : "not set",
                !active[THROTTLE_SWAP_RT] ? "not set" :
                gp->rt == THROTTLE_GUARD_ON ? "set" :
                "on demand (while a kernel nbd client of root or the "
                "server's uid is connected)",
                active[THROTTLE_SWAP_OOM] ? "-1000" : "unchanged",
                lock_words[gp->mlock],
                lock_all ? "everything, on fault" :
                gp->mlock == THROTTLE_LOCK_OFF ? "nothing" :
                "pools and reserve", reserve_size,
                reserve_size == 0 ? "none" :
                reserve_locked ? "faulted and locked" : "faulted, not locked",
                mallinfo2 ().keepcost, vmlck, vmrss);
  return 0;
}

/* The guards' part of throttle_thread_enter (throttle-feature.h). */
void
throttle_guards_thread_enter (bool first)
{
  /* Threads created after after_fork inherit the task flags; this
   * catches a thread that existed before (or code that cleared them).
   * Real-time's thread_enter, after this one, does the same for the
   * policy.
   */
  if (first && active[THROTTLE_SWAP_IO_FLUSHER] &&
      prctl (PR_GET_IO_FLUSHER, 0, 0, 0, 0) != 1 &&
      set_io_flusher (true) != 0)
    nbdkit_debug ("throttle: PR_SET_IO_FLUSHER in thread %ld: %s",
                  (long) gettid (), throttle_errtext (errno));
}
