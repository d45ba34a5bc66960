/* nbdkit-throttle filter: the thread and process guards.
 *
 * What keeps nbdkit itself from deadlocking when it serves a device
 * the same machine swaps to: PR_SET_IO_FLUSHER on the threads that
 * serve requests, SCHED_FIFO for them (the allocator's real-time
 * reserve), memory locking, OOM-killer protection, and a pre-grown,
 * locked, never-trimmed heap reserve for nbdkit's own per-thread
 * request buffers.  See "WHICH GUARD PREVENTS WHICH DEADLOCK" in
 * nbdkit-throttle-filter(1).
 *
 * When each hook is called, and why then: throttle-lifecycle.h.
 */

#ifndef THROTTLE_GUARDS_H
#define THROTTLE_GUARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Returns 1 if key is a guard parameter and value was valid, 0 if key
 * is not a guard parameter, -1 after the one error line of a bad
 * value (throttle-parse.h).
 */
extern int throttle_guards_config (const char *key, const char *value);

/* Tries PR_SET_IO_FLUSHER, SCHED_FIFO and oom_score_adj and undoes
 * them (nbdkit forks the --run command from this thread), checks
 * mlock limits and sizes the heap reserve.  Fails for an "on" guard
 * the kernel refuses, while errors and warnings still reach the user's
 * terminal, before nbdkit daemonizes.
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

/* throttle-rt: counts the calling thread's connection by its peer
 * (root or the server's uid, a kernel nbd client or not: see
 * lib/throttle-rtpolicy.h) and makes the process real-time if that
 * calls for it.  Call from .open, before nbdkit starts the
 * connection's worker threads (they inherit the policy).  Returns what
 * to pass to throttle_guards_close when the connection ends (also when
 * the open fails after this call).
 */
extern int throttle_guards_open (void);
extern void throttle_guards_close (int peer);

/* Applies the per-thread guards to the calling thread: once, and
 * again at its first call after the process switched real-time on or
 * off.  Otherwise it costs a thread-local load and an atomic load.
 * Call at the start of every request and of every background thread.
 */
extern void throttle_guards_thread_enter (void);

extern void throttle_guards_unload (void);

/* throttle-max-request: the largest read or write the filter passes
 * on, and advertises as the maximum block size; 0 with
 * throttle-max-request=plugin: the plugin's maximum is advertised, and
 * what is larger refused by whoever below would refuse it.  Valid from
 * .config on.
 */
extern uint32_t throttle_guards_max_request (void);

/* True if the request-serving threads run SCHED_FIFO or may come to
 * (throttle-rt=auto): the filter must then charge reads too, so the
 * replies in flight (the allocator's real-time reserve is what they
 * draw on) stay bounded.  Valid from throttle_guards_get_ready on; it
 * can only turn false in after_fork (-u dropped CAP_SYS_NICE), and
 * charging reads then is harmless.
 */
extern bool throttle_guards_rt_active (void);

/* True unless throttle-mlock=off: the filter's pools are to be locked. */
extern bool throttle_guards_lock_pools (void);

#define throttle_guards_config_help \
  "throttle-io-flusher=auto|on|off  PR_SET_IO_FLUSHER for request threads\n" \
  "                            (default auto).\n" \
  "throttle-rt=auto|on|off     Request threads SCHED_FIFO priority 1\n" \
  "                            (default auto: while a kernel nbd client of\n" \
  "                            root or the server's uid is connected, and\n" \
  "                            under memory pressure while a client of\n" \
  "                            theirs is).\n" \
  "throttle-rt-hold=SECS       How long real-time outlasts its reason\n" \
  "                            (default 60).\n" \
  "throttle-rt-pressure=FILE   The PSI file watched for memory pressure\n" \
  "                            (default /proc/pressure/memory).\n" \
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
