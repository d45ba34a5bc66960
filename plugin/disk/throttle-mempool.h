/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: a preallocated pool of fixed-size buffers.
 *
 * Modelled on the kernel's mempool (mm/mempool.c), but the reserve is
 * the whole pool: every element is allocated, prefaulted and (optionally)
 * locked at creation, so that taking one under memory pressure never
 * faults in a page or calls the allocator.  Buffers are page-aligned, so
 * they can be used for O_DIRECT.
 *
 * Waiters are served in FIFO order: a freed buffer is handed straight
 * to the oldest waiter, so a later caller can never take it first.
 * No function here allocates memory after throttle_mempool_create.
 */

#ifndef THROTTLE_MEMPOOL_H
#define THROTTLE_MEMPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "throttle-wait.h"

struct throttle_mempool;

/* Create a pool of 'nr' buffers of 'size' bytes (rounded up to the page
 * size).  If 'lock' is true the pool is mlock'd; failure to lock is an
 * error (errno set, e.g. EPERM or ENOMEM from RLIMIT_MEMLOCK).  Returns
 * NULL on error with errno set (EINVAL if nr or size is 0, ENOMEM if
 * nr * size overflows or cannot be mapped).
 */
extern struct throttle_mempool *throttle_mempool_create (size_t nr, size_t size,
                                                         bool lock);
/* Touch every page again with a write, and mlock the pool again if it
 * was created locked.  Memory locks are not inherited across fork, and
 * after fork the pages are shared copy-on-write with the parent: call
 * this in the child (e.g. nbdkit's .after_fork) so that the first use
 * of a buffer under pressure neither faults nor copies.  Call it while
 * no buffer is held.  Returns 0, or -1 with errno set if mlock failed.
 */
extern int throttle_mempool_relock (struct throttle_mempool *pool);
/* Unmaps everything.  The caller ensures nobody waits or holds a buffer. */
extern void throttle_mempool_destroy (struct throttle_mempool *pool);

/* Take a buffer, waiting while none is free (see throttle_wait) until
 * another holder frees one: the caller ensures every holder does.
 */
extern void *throttle_mempool_alloc (struct throttle_mempool *pool);
/* Take a buffer only if one is free now; NULL otherwise. */
extern void *throttle_mempool_try_alloc (struct throttle_mempool *pool);
/* Give a buffer back (it goes to the oldest waiter, if any).  Freeing a
 * pointer that is not a buffer of this pool, or a buffer that is not
 * held, aborts: it is a bug that would otherwise hand one buffer to two
 * holders.
 */
extern void throttle_mempool_free (struct throttle_mempool *pool, void *buf);

extern size_t throttle_mempool_size (const struct throttle_mempool *pool);   /* element size */
extern size_t throttle_mempool_nr (const struct throttle_mempool *pool);
extern size_t throttle_mempool_in_use (struct throttle_mempool *pool);
extern size_t throttle_mempool_waiters (struct throttle_mempool *pool);
/* Bytes mlock'd by this pool (buffers and bookkeeping), 0 if unlocked. */
extern size_t throttle_mempool_bytes_locked (const struct throttle_mempool *pool);

#endif /* THROTTLE_MEMPOOL_H */
