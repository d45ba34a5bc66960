/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: mutexes whose rules are checked in checking builds.
 *
 * The lock rules (HACKING.md, "Locks") say which lock a function must
 * be called with, and which it must not: a hook called under a lock
 * must not call back into what holds it.  A plain mutex breaks such a
 * rule silently (a relock deadlocks, an unlock by the wrong thread
 * corrupts it, a function called without its lock races).  Built with
 * THROTTLE_LOCK_CHECKS (./configure --enable-lock-checks; on in every
 * sanitizer build) these mutexes are PTHREAD_MUTEX_ERRORCHECK and each
 * broken rule aborts with a message naming the file and line.  Without
 * it they are plain mutexes and the checks cost nothing.
 *
 * Only mutexes made by throttle_lock_init (or THROTTLE_LOCK_INITIALIZER)
 * may be given to throttle_lock_assert_held: of a plain mutex it cannot
 * tell whether the caller is the one holding it.
 */

#ifndef THROTTLE_LOCK_H
#define THROTTLE_LOCK_H

#include <pthread.h>

/* Returns 0 or the error of pthread_mutex_init. */
extern int throttle_lock_init (pthread_mutex_t *m);

/* The checking versions, which abort on a broken rule.  Call them
 * through the names below.
 */
extern void throttle_lock_checked (pthread_mutex_t *m,
                                   const char *file, int line);
extern void throttle_unlock_checked (pthread_mutex_t *m,
                                     const char *file, int line);
extern void throttle_lock_held_checked (pthread_mutex_t *m,
                                        const char *file, int line);

#ifdef THROTTLE_LOCK_CHECKS

/* For a static mutex (glibc's initializer, as nbdkit itself needs). */
#define THROTTLE_LOCK_INITIALIZER PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP

/* Aborts if this thread holds m already. */
#define throttle_lock(m) throttle_lock_checked ((m), __FILE__, __LINE__)
/* Aborts if this thread does not hold m. */
#define throttle_unlock(m) throttle_unlock_checked ((m), __FILE__, __LINE__)
/* Where a function is "called with m held": aborts if this thread does
 * not hold m.
 */
#define throttle_lock_assert_held(m) \
  throttle_lock_held_checked ((m), __FILE__, __LINE__)

#else

#define THROTTLE_LOCK_INITIALIZER PTHREAD_MUTEX_INITIALIZER
#define throttle_lock(m) pthread_mutex_lock (m)
#define throttle_unlock(m) pthread_mutex_unlock (m)
#define throttle_lock_assert_held(m) ((void) (m))

#endif

#endif /* THROTTLE_LOCK_H */
