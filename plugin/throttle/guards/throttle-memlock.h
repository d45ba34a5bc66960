/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: what is locked in RAM (throttle-mlock) and
 * the heap reserve (throttle-reserve, throttle-threads).
 *
 * The reserve is a pre-grown, locked, never-trimmed part of the main
 * heap, so that nbdkit's own per-thread request buffers, grown on a
 * worker's first large request, land on pages that are already there
 * when the kernel waits for this server to free memory.  Its size
 * by default is lib/throttle-reserve.h's.
 *
 * When each hook is called, and why then: throttle-features.c.
 */

#ifndef THROTTLE_MEMLOCK_H
#define THROTTLE_MEMLOCK_H

#include <stddef.h>

/* get_ready: decides whether all of nbdkit's memory is locked and the
 * reserve's size.  -1 after the error line: throttle-mlock=onfault
 * without the permission, or a reserve above half of RAM.
 */
extern int throttle_memlock_get_ready (int thread_model);

/* after_fork, with nbdkit's main thread alone: mlockall, then the
 * reserve grown (and locked unless throttle-mlock=off), and malloc
 * told to keep it.  -1 after the error line if onfault is refused now.
 */
extern int throttle_memlock_after_fork (void);

/* For the guards' log lines: the plan ("mlock M (WHAT), reserve N
 * bytes"), and after after_fork what was done, with VmLck and VmRSS.
 */
extern void throttle_memlock_plan (char *buf, size_t len);
extern void throttle_memlock_summary (char *buf, size_t len);

/* Reads "Key:   value..." from /proc/self/status into buf; 0, or -1 if
 * there is no such field.
 */
extern int throttle_proc_status_field (const char *key, char *buf,
                                       size_t len);

#endif /* THROTTLE_MEMLOCK_H */
