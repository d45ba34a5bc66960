/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the thread and process guards and their
 * parameters.
 *
 * A server whose client is its own kernel must never wait for memory
 * that only its own progress can free.  The budget bounds what is in
 * flight; these guards make nbdkit's process fit that bound: the
 * kernel is told not to recurse into I/O from the allocations of the
 * threads that serve requests (PR_SET_IO_FLUSHER), may let them dip
 * into the real-time reserve (SCHED_FIFO, which the real-time switch,
 * throttle-realtime.h, turns on and off), must not swap nbdkit out
 * (memory locking) or OOM-kill it, and a pre-grown, locked heap
 * reserve holds nbdkit's own per-thread request buffers before the
 * pressure starts.  See "WHICH GUARD PREVENTS WHICH DEADLOCK" in
 * nbdkit-throttle-design(1).
 *
 * The parameters (throttle-swap, throttle-io-flusher, throttle-rt and
 * its hold, throttle-oom, throttle-mlock, throttle-reserve,
 * throttle-threads, throttle-max-request) are set by .config and
 * .config_complete and read only after it.  throttle-swap is the
 * default of the five guards (io-flusher, rt, oom, mlock, reserve):
 * off turns them all off (ordinary throttling), on makes each
 * required, auto takes what can be taken.  A guard's own parameter, in
 * any order, overrides it for that guard.
 *
 * The guards sit below what reports on them: they keep why each one
 * is missing (throttle_guards_missing), and the swap verdict
 * (throttle-verdict.h) reads it.
 *
 * When each hook is called, and why then: throttle-features.c.
 */

#ifndef THROTTLE_GUARDS_H
#define THROTTLE_GUARDS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "throttle-params.h"

enum throttle_guard_mode {
  THROTTLE_GUARD_OFF, THROTTLE_GUARD_AUTO, THROTTLE_GUARD_ON
};
enum throttle_lock_mode {
  THROTTLE_LOCK_OFF, THROTTLE_LOCK_POOL, THROTTLE_LOCK_ONFAULT,
  THROTTLE_LOCK_AUTO
};

/* The guards, in the order the swap verdict names them: its first
 * reasons (throttle-verdict.h), whose names are the label values of
 * its metrics.
 */
enum throttle_guard {
  THROTTLE_SWAP_IO_FLUSHER,     /* "io-flusher" */
  THROTTLE_SWAP_RT,             /* "rt" */
  THROTTLE_SWAP_OOM,            /* "oom" */
  THROTTLE_SWAP_MLOCK,          /* "mlock" */
  THROTTLE_SWAP_RESERVE,        /* "reserve" */
  THROTTLE_GUARDS
};
extern const char *const throttle_guard_names[THROTTLE_GUARDS];

struct throttle_guards_params {
  enum throttle_guard_mode swap;        /* throttle-swap */
  enum throttle_guard_mode io_flusher, rt, oom;
  enum throttle_lock_mode mlock;
  int64_t reserve;              /* -1 = computed */
  const char *reserve_text;     /* throttle-reserve as written, or NULL */
  unsigned threads;             /* nbdkit's --threads, as the user says */
  uint64_t max_request;         /* 0 in .config: plugin */
  bool max_request_plugin;      /* throttle-max-request=plugin */
  double rt_hold;               /* seconds */
};
extern struct throttle_guards_params throttle_guards_params;

/* "off", "auto", "on", NULL: in the order of enum throttle_guard_mode. */
extern const char *const throttle_guard_words[];

extern const struct throttle_param throttle_guards_param_table[];
/* .config_complete (before_exports), before anything reads the
 * guards' parameters: throttle-swap's mode for each guard not given
 * its own (in whatever order the two came), and
 * throttle-max-request=plugin.  Returns 0.
 */
extern int throttle_guards_config_complete (void);

/* The parameter that decided a guard's mode: own_key if it was given,
 * else "throttle-swap".  For the messages that name what to change.
 */
extern const char *throttle_guards_key (const char *own_key);

/* True unless throttle-mlock=off: the filter's pools are to be locked. */
extern bool throttle_guards_lock_pools (void);

/* Tries PR_SET_IO_FLUSHER, SCHED_FIFO and oom_score_adj and undoes
 * them (nbdkit forks the --run command from this thread), checks
 * mlock limits and sizes the heap reserve.  Fails for an "on" guard
 * the kernel refuses, while errors and warnings still reach the user's
 * terminal, before nbdkit daemonizes: every guard is tried, then every
 * one refused is said in one error line, so that fixing them takes one
 * restart, not one per guard.  Then sets throttle_max_request
 * (throttle-serve.h: 0 with throttle-max-request=plugin), and has
 * reads charged if the request threads are or may become real-time.
 */
extern int throttle_guards_get_ready (int thread_model);

/* Sets the guards on the main thread (fork and clone copy task flags,
 * policy and oom_score_adj, so every thread created later inherits
 * them), a fork handler that takes them away from child processes,
 * mlockall(MCL_ONFAULT) (locks are not inherited across fork) and the
 * heap reserve.  Call in the main thread before any connection thread
 * exists.
 */
extern int throttle_guards_after_fork (void);

/* Applies the per-thread guards to the calling thread ('first': its
 * first time).  Only through throttle_thread_enter (throttle-feature.h),
 * which calls it once a thread, and again after the process switched
 * real-time on or off.
 */
extern void throttle_guards_thread_enter (bool first);

/* Sets thread tid's (0: the caller's) policy to SCHED_FIFO priority 1
 * with the flags fifo (on), or to SCHED_OTHER, unless it has it
 * already: the one setter of the guard and of the real-time switch.
 * Returns 1 if it changed it, 0 if not needed, -1 with errno.
 * Async-signal-safe (the child of fork calls it), needs no lock and
 * allocates nothing.
 */
extern int throttle_guards_set_policy (pid_t tid, bool on, int fifo);

/* True if the request-serving threads run SCHED_FIFO or may come to
 * (throttle-rt=auto): the filter must then charge reads too, so the
 * replies in flight (the allocator's real-time reserve is what they
 * draw on) stay bounded.  Valid from throttle_guards_get_ready on; it
 * can only turn false in after_fork (-u dropped CAP_SYS_NICE), and
 * charging reads then is harmless.
 */
extern bool throttle_guards_rt_active (void);

/* Why a guard is missing now (a string with static storage, e.g.
 * "PR_SET_IO_FLUSHER refused: needs CAP_SYS_RESOURCE"), or NULL if it
 * is taken.  Lock-free: set from nbdkit's main thread up to
 * .after_fork, and from the control thread (set rt: NULL after set rt
 * auto undoes set rt off); read from any thread.
 */
extern const char *throttle_guards_missing (enum throttle_guard guard);
extern void throttle_guards_set_missing (enum throttle_guard guard,
                                         const char *why);

#define throttle_guards_config_help \
  "throttle-swap=auto|on|off   The default of every guard below: on\n" \
  "                            requires each, off turns them off for\n" \
  "                            ordinary throttling (default auto: take\n" \
  "                            what can be taken).\n" \
  "throttle-io-flusher=auto|on|off  PR_SET_IO_FLUSHER for request threads\n" \
  "                            (default auto).\n" \
  "throttle-rt=auto|on|off     Request threads SCHED_FIFO priority 1\n" \
  "                            (default auto: while a kernel nbd client of\n" \
  "                            root or the server's uid is connected).\n" \
  "throttle-rt-hold=SECS       How long real-time outlasts its reason\n" \
  "                            (default 60).\n" \
  "throttle-mlock=auto|onfault|pool|off  What is locked in RAM\n" \
  "                            (default auto: onfault where permitted).\n" \
  "throttle-oom=auto|on|off    oom_score_adj -1000 (default auto).\n" \
  "throttle-reserve=SIZE       Heap reserve for nbdkit's request buffers\n" \
  "                            (default threads x 1280K).\n" \
  "throttle-threads=N          nbdkit's --threads, to size the reserve\n" \
  "                            (default 16).\n" \
  "throttle-max-request=SIZE|plugin  Largest read or write accepted\n" \
  "                            (default 4M; plugin: what the plugin allows)."

#endif /* THROTTLE_GUARDS_H */
