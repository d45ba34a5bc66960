/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: a preallocated pool of fixed-size buffers.
 *
 * The kernel's mempool keeps a reserve beside a normal allocator and
 * falls back to the reserve under pressure.  A userspace server that
 * must keep running while the machine swaps *through* it cannot call
 * the allocator at all once the pressure starts, so here the reserve
 * is the whole pool: every buffer, and the bookkeeping that tracks
 * them, lives in one mapping made, touched and locked at creation.
 * Afterwards alloc and free only move pointers under a mutex.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "throttle-lock.h"
#include "throttle-mempool.h"
#include "throttle-wait.h"

struct throttle_mempool {
  pthread_mutex_t lock;         /* the free stack, held[], the waiters;
                                   a leaf: HACKING.md, "Locks" */
  struct throttle_wait_queue queue;

  size_t nr;                    /* elements */
  size_t size;                  /* element size, page multiple */
  size_t nr_free;               /* entries of free_stack in use */
  void **free_stack;
  unsigned char *held;          /* held[i]: element i is out */
  unsigned char *buffers;       /* nr * size bytes, page aligned */

  void *map;                    /* the one mapping holding all of it */
  size_t map_len;
  size_t locked;
};

static size_t
round_up (size_t n, size_t to)
{
  return (n + to - 1) / to * to;
}

/* The compiler may drop stores to memory it can prove is never read, so
 * write through a volatile pointer: every page must really be faulted
 * in now.  MAP_POPULATE is not enough: under mlockall(MCL_ONFAULT) it
 * populates nothing.  Storing back the byte that is there keeps the
 * bookkeeping intact when this runs again after fork, and the store
 * (not just a read, which would map the shared zero page) gives the
 * process its own copy of every page.
 */
static void
prefault (void *p, size_t len, size_t page)
{
  volatile unsigned char *v = p;
  size_t i;

  for (i = 0; i < len; i += page)
    v[i] = v[i];
}

struct throttle_mempool *
throttle_mempool_create (size_t nr, size_t size, bool lock)
{
  long page_l = sysconf (_SC_PAGESIZE);
  size_t page = page_l > 0 ? (size_t) page_l : 4096;
  size_t meta, buf_bytes, map_len, i;
  struct throttle_mempool *pool;
  void *map;
  int err;

  if (nr == 0 || size == 0) {
    errno = EINVAL;
    return NULL;
  }
  if (size > SIZE_MAX - page) {
    errno = ENOMEM;
    return NULL;
  }
  size = round_up (size, page);
  if (nr > SIZE_MAX / size || nr > SIZE_MAX / sizeof (void *) / 2) {
    errno = ENOMEM;
    return NULL;
  }
  buf_bytes = nr * size;

  meta = sizeof *pool;
  meta = round_up (meta, sizeof (void *)) + nr * sizeof (void *);
  meta += nr;                   /* held[] */
  meta = round_up (meta, page);
  if (buf_bytes > SIZE_MAX - meta) {
    errno = ENOMEM;
    return NULL;
  }
  map_len = meta + buf_bytes;

  map = mmap (NULL, map_len, PROT_READ|PROT_WRITE,
              MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED)
    return NULL;
  prefault (map, map_len, page);

  if (lock && mlock (map, map_len) == -1) {
    err = errno;
    munmap (map, map_len);
    errno = err;
    return NULL;
  }

  pool = map;
  pool->free_stack = (void **) ((unsigned char *) map +
                                round_up (sizeof *pool, sizeof (void *)));
  pool->held = (unsigned char *) (pool->free_stack + nr);
  pool->buffers = (unsigned char *) map + meta;
  pool->nr = nr;
  pool->size = size;
  pool->map = map;
  pool->map_len = map_len;
  pool->locked = lock ? map_len : 0;

  /* Pop order is ascending address: the first buffers handed out are
   * the first in memory, which makes dumps easier to read.
   */
  for (i = 0; i < nr; ++i) {
    pool->free_stack[i] = pool->buffers + (nr - 1 - i) * size;
    pool->held[i] = 0;
  }
  pool->nr_free = nr;

  err = throttle_lock_init (&pool->lock);
  if (err != 0) {
    munmap (map, map_len);
    errno = err;
    return NULL;
  }
  throttle_wait_queue_init (&pool->queue, &pool->lock);
  return pool;
}

int
throttle_mempool_relock (struct throttle_mempool *pool)
{
  long page_l = sysconf (_SC_PAGESIZE);

  prefault (pool->map, pool->map_len, page_l > 0 ? (size_t) page_l : 4096);
  if (pool->locked && mlock (pool->map, pool->map_len) == -1)
    return -1;
  return 0;
}

void
throttle_mempool_destroy (struct throttle_mempool *pool)
{
  if (pool == NULL)
    return;
  pthread_mutex_destroy (&pool->lock);
  /* munmap also drops the lock on these pages. */
  munmap (pool->map, pool->map_len);
}

static size_t
index_of (struct throttle_mempool *pool, void *buf, const char *what)
{
  unsigned char *p = buf;
  size_t off;

  if (p < pool->buffers || p >= pool->buffers + pool->nr * pool->size ||
      (off = (size_t) (p - pool->buffers)) % pool->size != 0) {
    fprintf (stderr, "throttle_mempool_%s: %p is not a buffer of pool %p\n",
             what, buf, (void *) pool);
    abort ();
  }
  return off / pool->size;
}

/* Called with the lock held and nr_free > 0. */
static void *
pop (struct throttle_mempool *pool)
{
  void *buf;

  throttle_lock_assert_held (&pool->lock);
  buf = pool->free_stack[--pool->nr_free];
  pool->held[index_of (pool, buf, "alloc")] = 1;
  return buf;
}

/* Called with the lock held; 'buf' is marked held. */
static void
push (struct throttle_mempool *pool, void *buf)
{
  throttle_lock_assert_held (&pool->lock);
  pool->held[index_of (pool, buf, "free")] = 0;
  pool->free_stack[pool->nr_free++] = buf;
}

/* throttle_acquire_fn: called with the lock held (pop checks it). */
static bool
acquire (void *owner, struct throttle_waiter *w)
{
  struct throttle_mempool *pool = owner;

  if (pool->nr_free == 0)
    return false;
  w->item = pop (pool);
  return true;
}

void *
throttle_mempool_alloc (struct throttle_mempool *pool)
{
  /* Nothing ends a wait but a grant, so it is never abandoned and
   * needs no putback.
   */
  static const bool never = false;
  struct throttle_waiter w = { .want = 1 };
  void *buf;

  throttle_lock (&pool->lock);
  /* A free buffer implies an empty queue (free grants waiters first),
   * so taking it here overtakes nobody.
   */
  if (pool->nr_free > 0)
    buf = pop (pool);
  else {
    throttle_wait (&pool->queue, &w, &never, NULL, NULL, 0, acquire, NULL,
                   pool);
    buf = w.item;
  }
  throttle_unlock (&pool->lock);
  return buf;
}

void *
throttle_mempool_try_alloc (struct throttle_mempool *pool)
{
  void *buf = NULL;

  throttle_lock (&pool->lock);
  if (pool->nr_free > 0)
    buf = pop (pool);
  throttle_unlock (&pool->lock);
  return buf;
}

void
throttle_mempool_free (struct throttle_mempool *pool, void *buf)
{
  size_t i;

  if (buf == NULL)
    return;
  throttle_lock (&pool->lock);
  i = index_of (pool, buf, "free");
  if (!pool->held[i]) {
    fprintf (stderr, "throttle_mempool_free: buffer %p of pool %p freed "
             "but not held (double free?)\n", buf, (void *) pool);
    abort ();
  }
  push (pool, buf);
  throttle_wait_grant (&pool->queue, acquire, pool);
  throttle_unlock (&pool->lock);
}

size_t
throttle_mempool_size (const struct throttle_mempool *pool)
{
  return pool->size;
}

size_t
throttle_mempool_nr (const struct throttle_mempool *pool)
{
  return pool->nr;
}

size_t
throttle_mempool_in_use (struct throttle_mempool *pool)
{
  size_t n;

  throttle_lock (&pool->lock);
  n = pool->nr - pool->nr_free;
  throttle_unlock (&pool->lock);
  return n;
}

size_t
throttle_mempool_waiters (struct throttle_mempool *pool)
{
  size_t n;

  throttle_lock (&pool->lock);
  n = pool->queue.nr;
  throttle_unlock (&pool->lock);
  return n;
}

size_t
throttle_mempool_bytes_locked (const struct throttle_mempool *pool)
{
  return pool->locked;
}
