/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the real-time switch (throttle-rt).
 *
 * Whether the whole process runs SCHED_FIFO now, decided by the state
 * machine of lib/throttle-rtpolicy.h: with "auto", while a kernel nbd
 * client of root or the server's uid is connected, and for
 * throttle-rt-hold after it left or after memory pressure while such a
 * peer was connected; "on" from the start.  Real-time priority makes
 * the request threads preempt every ordinary process on the same CPUs
 * at every request (nbdkit-throttle-design(1)): "auto" pays that only
 * where the server may be what the kernel waits for.  A watcher thread,
 * itself always SCHED_FIFO, counts memory pressure from a PSI trigger
 * and ends the hold on time.  The control socket's "set rt" and the rt
 * member of its stats are served from here.
 *
 * When each hook is called, and why then: throttle-features.c.
 */

#ifndef THROTTLE_REALTIME_H
#define THROTTLE_REALTIME_H

#include <stdbool.h>

/* after_fork, once the guards know whether SCHED_FIFO is permitted
 * (throttle-rt not off, and the probe allowed it): adds set rt and the
 * stats member to the control protocol, and where permitted opens
 * /proc/self/task and the PSI trigger of psi_path
 * (throttle-rt-pressure, kept), starts the watcher and decides for the
 * start mode (on: throttle-rt=on).  Never fails: what cannot be had is
 * logged.
 */
extern void throttle_realtime_start (bool permitted, bool on, double hold_s,
                                     const char *psi_path);
/* unload: stops the watcher, closes what start opened, and logs how
 * long the process was real-time and why.
 */
extern void throttle_realtime_stop (void);

/* .open, in the connection's thread, before the plugin's open:
 * classifies the peer (its address, its credentials, its process's
 * name, for a loopback TCP peer the owner of its socket), tells the
 * swap verdict (throttle_verdict_peer: a kernel client attaching to a
 * server that is not safe), and where real-time is permitted counts
 * the peer and switches the process if that changes the answer.  Keeps
 * in *peer the peer's class for throttle_realtime_close, or -1 where
 * real-time is not permitted.  Returns 0: it refuses no one.  Opens
 * files under /proc: not for the writeout path.
 */
extern int throttle_realtime_open (const char *exportname, void **peer);
extern void throttle_realtime_close (void *peer);

/* Whether the process is real-time now (for the log). */
extern bool throttle_realtime_is_on (void);
/* Sets the calling thread's policy to what the process's is now:
 * SCHED_FIFO with SCHED_RESET_ON_FORK (whatever it starts, however,
 * starts SCHED_OTHER), or SCHED_OTHER.  A switch between the caller's
 * load of the generation (throttle_thread_enter) and this leaves the
 * thread stale until its next check, which sees the generation
 * changed.
 */
extern void throttle_realtime_thread_policy (void);

#endif /* THROTTLE_REALTIME_H */
