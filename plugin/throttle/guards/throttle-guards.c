/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the thread and process guards.
 *
 * A server whose client is its own kernel must never wait for memory
 * that only its own progress can free.  The budget bounds what is in
 * flight; these guards make nbdkit's process fit that bound: the
 * kernel is told not to recurse into I/O from the server's allocations
 * (PR_SET_IO_FLUSHER), may let its threads dip into the real-time
 * reserve (SCHED_FIFO), must not swap out or OOM-kill it, and the
 * memory nbdkit's core touches per request is faulted in and locked
 * before the pressure starts.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>

#include <nbdkit-filter.h>

#include "throttle-config.h"
#include "throttle-guards.h"
#include "throttle-guards-config.h"
#include "throttle-memlock.h"
#include "throttle-parse.h"
#include "throttle-realtime.h"
#include "throttle-serve.h"
#include "throttle-verdict.h"

/* The parameters, read only after .config. */
static const struct throttle_guards_params *const gp =
  &throttle_guards_params;

/* Linux 5.6 <linux/prctl.h>; Debian 12's glibc headers lack them. */
#ifndef PR_SET_IO_FLUSHER
#define PR_SET_IO_FLUSHER 57
#endif
#ifndef PR_GET_IO_FLUSHER
#define PR_GET_IO_FLUSHER 58
#endif

/* Decided in get_ready, before any thread that reads them exists. */
static bool io_flusher_active;
static bool rt_active;                  /* SCHED_FIFO permitted (and wanted) */
static bool oom_active;

/* What a child of fork must write back to /proc/self/oom_score_adj:
 * the value nbdkit had before the filter lowered it.  Formatted in
 * advance, since the child of a multithreaded process may only make
 * async-signal-safe calls.
 */
static char oom_saved[16] = "0";

bool
throttle_guards_rt_active (void)
{
  return rt_active;
}

/* A process guard, as its messages and the verdict name it. */
struct guard {
  const char *key;              /* its own parameter */
  const char *fix[2];           /* starts without it: by key, by throttle-swap */
  enum throttle_swap_reason reason;
  const char *what;             /* what was refused, and what it needs */
  const char *why;              /* the verdict's reason */
  const char *off_why[2];       /* ... when off: by key, by throttle-swap */
};

static const struct guard io_flusher = {
  "throttle-io-flusher",
  { "throttle-io-flusher=auto", "throttle-io-flusher=off" },
  THROTTLE_SWAP_IO_FLUSHER,
  "cannot set PR_SET_IO_FLUSHER (needs CAP_SYS_RESOURCE, Linux >= 5.6)",
  "PR_SET_IO_FLUSHER refused: needs CAP_SYS_RESOURCE and Linux >= 5.6",
  { "throttle-io-flusher=off", "throttle-swap=off" },
};
static const struct guard rt = {
  "throttle-rt", { "throttle-rt=auto", "throttle-rt=off" },
  THROTTLE_SWAP_RT,
  "cannot set SCHED_FIFO (needs CAP_SYS_NICE or RLIMIT_RTPRIO >= 1, "
  "and real-time runtime in the cgroup)",
  "SCHED_FIFO refused: needs CAP_SYS_NICE or RLIMIT_RTPRIO >= 1",
  { "throttle-rt=off", "throttle-swap=off" },
};
static const struct guard oom = {
  "throttle-oom", { "throttle-oom=auto", "throttle-oom=off" },
  THROTTLE_SWAP_OOM,
  "cannot set oom_score_adj to -1000 (needs CAP_SYS_RESOURCE)",
  "oom_score_adj -1000 refused: needs CAP_SYS_RESOURCE",
  { "throttle-oom=off", "throttle-swap=off" },
};

/* A guard turned off: the verdict's reason names who turned it off. */
static void
turned_off (const struct guard *g)
{
  throttle_verdict_missing (g->reason,
                            g->off_why[throttle_guards_key (g->key)
                                       != g->key]);
}

/* The guard's "on" refused: kept for the one error line naming every
 * guard refused (throttle_verdict_refusals), with the parameter that
 * asked for it.
 */
static void
required (const struct guard *g, const char *what)
{
  const char *by = throttle_guards_key (g->key);

  throttle_verdict_refused (g->reason, by, "on", g->fix[by != g->key],
                            "%s", what);
}

/* A guard the kernel refused: for "on" fatal, once every guard was
 * tried (required); for "auto" a reason of the verdict, which says it
 * once for all of them, and a debug line with the errno.
 */
static void
refused (const struct guard *g, enum throttle_guard_mode mode, int err)
{
  char what[256];

  if (mode == THROTTLE_GUARD_ON) {
    snprintf (what, sizeof what, "%s: %s", g->what, throttle_errtext (err));
    required (g, what);
    return;
  }
  nbdkit_debug ("throttle: %s=auto: %s: %s",
                throttle_guards_key (g->key), g->what,
                throttle_errtext (err));
  throttle_verdict_missing (g->reason, g->why);
}

/* Each returns 0 or an errno. */
static int
set_io_flusher (int on)
{
  return prctl (PR_SET_IO_FLUSHER, on, 0, 0, 0) == 0 ? 0 : errno;
}

static const struct sched_param fifo_1 = { .sched_priority = 1 };

static int
set_policy (int policy, const struct sched_param *sp)
{
  return sched_setscheduler (0, policy, sp) == 0 ? 0 : errno;
}

/* Whether this thread may become SCHED_FIFO: tried, and undone at once
 * (rt=auto must not leave a thread real-time before it is needed).
 * Returns 0 or the errno that refused it.
 */
static int
rt_probe (void)
{
  int policy = sched_getscheduler (0), err;
  struct sched_param old;

  if (policy == -1 || sched_getparam (0, &old) == -1)
    return errno;
  err = set_policy (SCHED_FIFO, &fifo_1);
  if (err == 0)
    set_policy (policy, &old);
  return err;
}

static int
set_oom_score_adj (const char *value)
{
  int fd, err = 0;
  ssize_t len = strlen (value);

  fd = open ("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd == -1 || write (fd, value, len) != len)
    err = errno;
  if (fd >= 0)
    close (fd);
  return err;
}


/* -1 (RT throttling disabled), the runtime in us, or -2 if unknown. */
static long
rt_runtime_us (void)
{
  FILE *fp = fopen ("/proc/sys/kernel/sched_rt_runtime_us", "r");
  long v = -2;

  if (fp) {
    if (fscanf (fp, "%ld", &v) != 1)
      v = -2;
    fclose (fp);
  }
  return v;
}

/* Tries each process guard and undoes it at once: nbdkit forks the
 * --run command from this thread, which must not inherit them.  The
 * guards are set for real in after_fork; trying them here is what lets
 * "on" refuse to start, and the verdict warn, while stderr is still
 * the user's terminal.  An "on" refused is kept for the verdict's one
 * error line (throttle_verdict_refusals): every guard is tried.
 */
static void
probe_guards (void)
{
  int err;

  if (gp->io_flusher == THROTTLE_GUARD_OFF)
    turned_off (&io_flusher);
  else {
    err = set_io_flusher (1);
    if (err == 0) {
      set_io_flusher (0);
      io_flusher_active = true;
    }
    else
      refused (&io_flusher, gp->io_flusher, err);
  }

  if (gp->rt == THROTTLE_GUARD_OFF)
    turned_off (&rt);
  else {
    /* With throttling off a runaway SCHED_FIFO thread owns its CPU. */
    if (rt_runtime_us () == -1) {
      if (gp->rt == THROTTLE_GUARD_ON)
        required (&rt, "the kernel's real-time throttling is disabled "
                  "(kernel.sched_rt_runtime_us = -1), and SCHED_FIFO "
                  "threads could starve the machine: restore it (e.g. "
                  "sysctl kernel.sched_rt_runtime_us=950000)");
      else {
        nbdkit_debug ("throttle: throttle-rt=auto: "
                      "kernel.sched_rt_runtime_us = -1 (real-time "
                      "throttling disabled): not using SCHED_FIFO");
        throttle_verdict_missing (THROTTLE_SWAP_RT,
                                  "kernel.sched_rt_runtime_us is -1: "
                                  "real-time throttling disabled");
      }
    }
    else {
      err = rt_probe ();
      if (err == 0)
        rt_active = true;
      else
        refused (&rt, gp->rt, err);
    }
  }

  if (gp->oom == THROTTLE_GUARD_OFF)
    turned_off (&oom);
  else {
    char old[32] = "0";
    FILE *fp = fopen ("/proc/self/oom_score_adj", "r");

    if (fp) {
      if (fscanf (fp, "%31s", old) != 1)
        strcpy (old, "0");
      fclose (fp);
    }
    err = set_oom_score_adj ("-1000");
    if (err == 0) {
      set_oom_score_adj (old);    /* raising it needs no privilege */
      snprintf (oom_saved, sizeof oom_saved, "%s", old);
      oom_active = true;
    }
    else
      refused (&oom, gp->oom, err);
  }
}

/* Sets on this thread (nbdkit's main thread, in after_fork) what the
 * probe found permitted.  fork and clone copy the task flags, the
 * policy and oom_score_adj, so every thread created later inherits
 * them; processes get rid of them (throttle_guards_thread_enter,
 * fork_child).  An "on" guard refused now (e.g. after -u dropped the
 * capabilities) is kept for the verdict's one error line.
 */
static void
apply_guards (void)
{
  int err;

  if (io_flusher_active && (err = set_io_flusher (1)) != 0) {
    io_flusher_active = false;
    refused (&io_flusher, gp->io_flusher, err);
  }
  /* Still permitted (-u may have dropped CAP_SYS_NICE)?  rt_start
   * sets the policy, for "on" at once.
   */
  if (rt_active && (err = rt_probe ()) != 0) {
    rt_active = false;
    refused (&rt, gp->rt, err);
  }
  if (oom_active && (err = set_oom_score_adj ("-1000")) != 0) {
    oom_active = false;
    refused (&oom, gp->oom, err);
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
  static const struct sched_param other = { .sched_priority = 0 };
  int saved_errno = errno;

  if (rt_active && sched_getscheduler (0) != SCHED_OTHER)
    sched_setscheduler (0, SCHED_OTHER, &other);
  if (io_flusher_active)
    set_io_flusher (0);
  if (oom_active)
    set_oom_score_adj (oom_saved);
  errno = saved_errno;
}

int
throttle_guards_get_ready (int thread_model)
{
  char mem[256];
  int r;

  /* Every guard tried, then every one refused said in one line. */
  probe_guards ();
  r = throttle_memlock_get_ready (thread_model);
  if (throttle_verdict_refusals () == -1 || r == -1)
    return -1;
  if (throttle_debug_verbose) {
    throttle_memlock_plan (mem, sizeof mem);
    nbdkit_debug ("throttle: guards planned: io-flusher %s, SCHED_FIFO %s, "
                  "oom_score_adj %s, %s",
                  io_flusher_active ? "yes" : "no",
                  !rt_active ? "no" : gp->rt == THROTTLE_GUARD_ON ? "yes" :
                  "for kernel clients and under memory pressure",
                  oom_active ? "-1000" : "unchanged", mem);
  }
  throttle_max_request = throttle_guards_max_request ();
  /* Real-time threads may draw on the allocator's reserve for their
   * replies; bounding reads keeps that draw bounded too.
   */
  if (rt_active && !throttle_config.charge_reads) {
    throttle_config.charge_reads = true;
    nbdkit_debug ("throttle: request threads are or may become real-time: "
                  "reads are charged");
  }
  return 0;
}

int
throttle_guards_after_fork (void)
{
  char mem[512];
  int err, r;

  apply_guards ();
  if (rt_active || io_flusher_active || oom_active) {
    err = pthread_atfork (NULL, NULL, fork_child);
    if (err) {
      nbdkit_error ("throttle: pthread_atfork: %s: cannot keep the guards "
                    "out of the plugin's child processes",
                    throttle_errtext (err));
      return -1;
    }
  }
  /* An "on" refused now (apply_guards, or the memory locks): every
   * one in one line.
   */
  r = throttle_memlock_after_fork ();
  if (throttle_verdict_refusals () == -1 || r == -1)
    return -1;
  /* After the locks and the reserve: the watcher's stack is locked
   * and takes nothing from the reserve.
   */
  throttle_realtime_start (rt_active);

  throttle_memlock_summary (mem, sizeof mem);
  nbdkit_debug ("throttle: guards: io-flusher %s, SCHED_FIFO %s, "
                "oom_score_adj %s, %s",
                io_flusher_active ? "set" : "not set",
                !rt_active ? "not set" :
                throttle_realtime_is_on () ? "set" :
                "on demand (a kernel nbd client of root or the server's "
                "uid, or memory pressure while a client of theirs is "
                "connected)",
                oom_active ? "-1000" : "unchanged", mem);
  return 0;
}

/* The guards' part of throttle_thread_enter (throttle-feature.h). */
void
throttle_guards_thread_enter (bool first)
{
  /* Threads created after after_fork inherit the task flags, and the
   * policy of their creator; this catches a thread that existed before
   * (or code that cleared them), and a thread a switch of real-time
   * missed (throttle_realtime_thread_policy).
   */
  if (first && io_flusher_active &&
      prctl (PR_GET_IO_FLUSHER, 0, 0, 0, 0) != 1 &&
      prctl (PR_SET_IO_FLUSHER, 1, 0, 0, 0) == -1)
    nbdkit_debug ("throttle: PR_SET_IO_FLUSHER in thread %ld: %s",
                  (long) gettid (), throttle_errtext (errno));
  if (rt_active)
    throttle_realtime_thread_policy ();
  if (throttle_debug_verbose)
    nbdkit_debug ("throttle: guards: thread %ld: io-flusher %s, policy %s",
                  (long) gettid (),
                  !io_flusher_active ? "not set" :
                  prctl (PR_GET_IO_FLUSHER, 0, 0, 0, 0) == 1 ? "set" : "lost",
                  (sched_getscheduler (0) & ~SCHED_RESET_ON_FORK) ==
                  SCHED_FIFO ? "SCHED_FIFO" : "other");
}

void
throttle_guards_unload (void)
{
  char vmlck[64] = "?";

  throttle_realtime_stop ();
  if (throttle_debug_verbose) {
    throttle_proc_status_field ("VmLck", vmlck, sizeof vmlck);
    nbdkit_debug ("throttle: guards: at unload VmLck %s", vmlck);
  }
}
