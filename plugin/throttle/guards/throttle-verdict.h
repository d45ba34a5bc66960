/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: is this server safe to serve swap now?
 *
 * One verdict, yes or no with every reason, instead of a warning per
 * guard: the guards (throttle-guards.c, -realtime) note here each
 * guard they could not take or were told not to take, and storage over
 * a network adds vm.min_free_kbytes below its least and watermark
 * boosting on (throttle-remote.h).  It is said at start (a debug line when safe;
 * else one warning line naming every reason and throttle-swap, unless
 * throttle-swap=off chose ordinary throttling), in the control
 * socket's stats ("swap") and in the metrics
 * (nbdkit_throttle_swap_safe, nbdkit_throttle_swap_unsafe), and,
 * whatever throttle-swap says, loudly whenever a kernel nbd client
 * attaches to a server that is not safe.
 *
 * When each hook is called, and why then: throttle-features.c.
 */

#ifndef THROTTLE_VERDICT_H
#define THROTTLE_VERDICT_H

#include "throttle-rtpolicy.h"

/* The reasons, fixed: their names are the label values of the metrics
 * and the keys of stats' "unsafe", a contract with every dashboard.
 */
enum throttle_swap_reason {
  THROTTLE_SWAP_IO_FLUSHER,     /* "io-flusher" */
  THROTTLE_SWAP_RT,             /* "rt" */
  THROTTLE_SWAP_OOM,            /* "oom" */
  THROTTLE_SWAP_MLOCK,          /* "mlock" */
  THROTTLE_SWAP_RESERVE,        /* "reserve" */
  /* Read when asked, in the order of enum throttle_remote_setting. */
  THROTTLE_SWAP_MIN_FREE,       /* "min-free-kbytes" */
  THROTTLE_SWAP_BOOST,          /* "watermark-boost" */
  THROTTLE_SWAP_REASONS
};

/* The reasons' names, in the order of enum throttle_swap_reason. */
extern const char *const throttle_swap_reason_names[THROTTLE_SWAP_REASONS];

/* A guard is missing: why (a string with static storage, which is
 * kept) says which and why, e.g. "PR_SET_IO_FLUSHER refused: needs
 * CAP_SYS_RESOURCE".  taken undoes it (set rt auto after set rt off).
 * Lock-free: from nbdkit's main thread up to .after_fork, and from the
 * control thread (set rt).  Not for THROTTLE_SWAP_MIN_FREE or
 * THROTTLE_SWAP_BOOST.
 */
extern void throttle_verdict_missing (enum throttle_swap_reason reason,
                                      const char *why);
extern void throttle_verdict_taken (enum throttle_swap_reason reason);

/* .get_ready, after every guard was tried and the storage judged: the
 * verdict at start, while stderr is still the user's terminal; adds
 * the stats member and the metrics families.
 */
extern int throttle_verdict_get_ready (int thread_model);

/* .after_fork, after the guards were set: the warning again if a
 * reason appeared since get_ready (-u dropped a capability, the heap
 * reserve could not be had).
 */
extern int throttle_verdict_after_fork (void);

/* .open, with the peer's class and what was found (throttle-realtime.c):
 * a kernel nbd client attaching to a server that is not safe is
 * logged with nbdkit_error (stderr, or syslog in the background),
 * naming every reason.  Reads vm.min_free_kbytes with the storage
 * remote: not for the writeout path.
 */
extern void throttle_verdict_peer (enum throttle_rt_peer peer,
                                   const char *why);

#endif /* THROTTLE_VERDICT_H */
