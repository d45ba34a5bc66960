/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the real-time switch (throttle-rt), a
 * feature of its own above the guards (which say whether it is
 * permitted) and the swap verdict (which it tells who the peer is):
 * whether the whole process runs SCHED_FIFO now, as
 * lib/throttle-rtpolicy.h decides (when, and why not always).  A timer
 * thread, while the process is real-time, ends the hold within a
 * second of its end and switches threads that were started since.
 */

#ifndef THROTTLE_REALTIME_H
#define THROTTLE_REALTIME_H

#include <stdbool.h>
#include <stdio.h>

struct throttle_export;

/* after_fork, after the guards' (so once they know whether SCHED_FIFO
 * is permitted, throttle_guards_rt_active, and once the locks and the
 * heap reserve are in place: the timer's stack is locked and takes
 * nothing from the reserve): where permitted opens /proc/self/task,
 * decides for the start mode and starts the timer.  Returns 0: what
 * cannot be had is logged.
 */
extern int throttle_realtime_start (void);
/* unload, last of all: stops the timer and closes what start opened. */
extern void throttle_realtime_stop (void);

/* .open, in the connection's thread, before the plugin's open: finds
 * whether the peer is a kernel nbd client (a Unix socket's
 * credentials, its process's name), tells the swap verdict of one
 * (throttle_verdict_kernel_client: a kernel client attaching to a
 * server that is not safe), and where real-time is permitted counts
 * the peer and switches the process if that changes the answer.  Keeps
 * in *state whether it is a kernel client, for throttle_realtime_close.
 * Returns 0: it refuses no one.  Opens a file under /proc: not for the
 * writeout path.
 */
extern int throttle_realtime_open (const char *exportname, void **state);
extern void throttle_realtime_close (void *state);

/* thread_enter: where real-time is permitted
 * (throttle_guards_rt_active), sets the calling thread's policy to
 * what the process's is now, whether or not it is the thread's first
 * request (a switch may have missed the thread): SCHED_FIFO
 * with SCHED_RESET_ON_FORK (whatever it starts, however, starts
 * SCHED_OTHER), or SCHED_OTHER.  A switch between the caller's
 * load of the generation (throttle_thread_enter) and this leaves the
 * thread stale until its next check, which sees the generation
 * changed.
 */
extern void throttle_realtime_thread_enter (bool first);

/* The control socket's rt member of the stats and its "set rt", from
 * the control thread (throttle-features.c lists them).
 */
extern void throttle_realtime_stats_json (FILE *fp,
                                          struct throttle_export *exp);
extern void throttle_realtime_set (FILE *out, struct throttle_export *unused,
                                   const char *value);

#endif /* THROTTLE_REALTIME_H */
