/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of plugin/disk/throttle-mempool.c (Check). */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/capability.h>

#include <check.h>

#include "throttle-mempool.h"
#include "check-main.h"

static void
sleep_ms (unsigned ms)
{
  struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000 };
  while (nanosleep (&ts, &ts) == -1 && errno == EINTR)
    ;
}

/* Wait (bounded) until the pool has 'n' waiters queued. */
static void
await_waiters (struct throttle_mempool *pool, size_t n)
{
  int i;

  for (i = 0; i < 5000; ++i) {
    if (throttle_mempool_waiters (pool) == n)
      return;
    sleep_ms (1);
  }
  ck_abort_msg ("expected %zu waiters, have %zu",
                n, throttle_mempool_waiters (pool));
}

/* kB from a line of /proc/self/status, -1 if absent. */
static long
status_kb (const char *field)
{
  FILE *fp = fopen ("/proc/self/status", "r");
  char line[256];
  size_t len = strlen (field);
  long kb = -1;

  if (fp == NULL)
    return -1;
  while (fgets (line, sizeof line, fp))
    if (strncmp (line, field, len) == 0 && line[len] == ':')
      kb = strtol (line + len + 1, NULL, 10);
  fclose (fp);
  return kb;
}

START_TEST (test_bad_args)
{
  errno = 0;
  ck_assert_ptr_null (throttle_mempool_create (0, 4096, false));
  ck_assert_int_eq (errno, EINVAL);
  errno = 0;
  ck_assert_ptr_null (throttle_mempool_create (4, 0, false));
  ck_assert_int_eq (errno, EINVAL);
  errno = 0;
  ck_assert_ptr_null (throttle_mempool_create (SIZE_MAX / 2, 4096, false));
  ck_assert_int_eq (errno, ENOMEM);
  errno = 0;
  ck_assert_ptr_null (throttle_mempool_create (2, SIZE_MAX - 10, false));
  ck_assert_int_eq (errno, ENOMEM);
  throttle_mempool_destroy (NULL);
}
END_TEST

START_TEST (test_alloc_free)
{
  struct throttle_mempool *pool = throttle_mempool_create (3, 4096, false);
  void *a, *b, *c;

  ck_assert_ptr_nonnull (pool);
  ck_assert_uint_eq (throttle_mempool_nr (pool), 3);
  ck_assert_uint_eq (throttle_mempool_size (pool), 4096);
  ck_assert_uint_eq (throttle_mempool_in_use (pool), 0);
  ck_assert_uint_eq (throttle_mempool_bytes_locked (pool), 0);

  a = throttle_mempool_alloc (pool);
  b = throttle_mempool_alloc (pool);
  c = throttle_mempool_try_alloc (pool);
  ck_assert_ptr_nonnull (a);
  ck_assert_ptr_nonnull (b);
  ck_assert_ptr_nonnull (c);
  ck_assert_ptr_ne (a, b);
  ck_assert_ptr_ne (b, c);
  ck_assert_ptr_ne (a, c);
  ck_assert_uint_eq (throttle_mempool_in_use (pool), 3);
  ck_assert_ptr_null (throttle_mempool_try_alloc (pool));

  throttle_mempool_free (pool, b);
  ck_assert_uint_eq (throttle_mempool_in_use (pool), 2);
  ck_assert_ptr_eq (throttle_mempool_try_alloc (pool), b);
  throttle_mempool_free (pool, a);
  throttle_mempool_free (pool, b);
  throttle_mempool_free (pool, c);
  throttle_mempool_free (pool, NULL);
  ck_assert_uint_eq (throttle_mempool_in_use (pool), 0);
  throttle_mempool_destroy (pool);
}
END_TEST

START_TEST (test_alignment)
{
  long page = sysconf (_SC_PAGESIZE);
  enum { NR = 8 };
  struct throttle_mempool *pool = throttle_mempool_create (NR, 5000, false);
  unsigned char *bufs[NR];
  size_t size, i, j;

  ck_assert_ptr_nonnull (pool);
  size = throttle_mempool_size (pool);
  ck_assert_uint_eq (size % page, 0);
  ck_assert_uint_ge (size, 5000);
  ck_assert_uint_lt (size, 5000 + page);

  for (i = 0; i < NR; ++i) {
    bufs[i] = throttle_mempool_try_alloc (pool);
    ck_assert_ptr_nonnull (bufs[i]);
    ck_assert_uint_eq ((uintptr_t) bufs[i] % page, 0);
    ck_assert_uint_eq ((uintptr_t) bufs[i] % 4096, 0);   /* O_DIRECT */
    memset (bufs[i], (int) i + 1, size);
  }
  /* Disjoint: filling each buffer entirely clobbered no other. */
  for (i = 0; i < NR; ++i)
    for (j = 0; j < size; ++j)
      ck_assert_int_eq (bufs[i][j], (int) i + 1);
  for (i = 0; i < NR; ++i)
    throttle_mempool_free (pool, bufs[i]);
  throttle_mempool_destroy (pool);
}
END_TEST

/* Every page is resident right after creation, without any lock. */
START_TEST (test_prefaulted)
{
  long page = sysconf (_SC_PAGESIZE);
  enum { NR = 16 };
  struct throttle_mempool *pool = throttle_mempool_create (NR, 64 * 1024, false);
  unsigned char vec[64 * 1024 / 4096 + 1];
  size_t i, j, pages;

  ck_assert_ptr_nonnull (pool);
  pages = throttle_mempool_size (pool) / page;
  ck_assert_uint_le (pages, sizeof vec);
  for (i = 0; i < NR; ++i) {
    void *b = throttle_mempool_try_alloc (pool);
    ck_assert_ptr_nonnull (b);
    ck_assert_int_eq (mincore (b, throttle_mempool_size (pool), vec), 0);
    for (j = 0; j < pages; ++j)
      ck_assert_msg (vec[j] & 1, "buffer %zu page %zu not resident", i, j);
  }
  throttle_mempool_destroy (pool);
}
END_TEST

struct waiter_arg {
  struct throttle_mempool *pool;
  void *got;
  atomic_int done;
  int id;
};

static void *
waiter_thread (void *vp)
{
  struct waiter_arg *a = vp;

  a->got = throttle_mempool_alloc (a->pool);
  atomic_store (&a->done, 1);
  return NULL;
}

START_TEST (test_exhaustion_blocks)
{
  struct throttle_mempool *pool = throttle_mempool_create (2, 4096, false);
  struct waiter_arg a = { .pool = pool };
  pthread_t t;
  void *x, *y;

  x = throttle_mempool_try_alloc (pool);
  y = throttle_mempool_try_alloc (pool);
  ck_assert_ptr_nonnull (y);
  ck_assert_ptr_null (throttle_mempool_try_alloc (pool));

  ck_assert_int_eq (pthread_create (&t, NULL, waiter_thread, &a), 0);
  await_waiters (pool, 1);
  sleep_ms (100);
  ck_assert_int_eq (atomic_load (&a.done), 0);   /* still blocked */

  throttle_mempool_free (pool, y);
  pthread_join (t, NULL);
  ck_assert_int_eq (atomic_load (&a.done), 1);
  ck_assert_ptr_eq (a.got, y);                   /* handed over directly */
  ck_assert_uint_eq (throttle_mempool_waiters (pool), 0);
  ck_assert_uint_eq (throttle_mempool_in_use (pool), 2);

  throttle_mempool_free (pool, x);
  throttle_mempool_free (pool, a.got);
  ck_assert_uint_eq (throttle_mempool_in_use (pool), 0);
  throttle_mempool_destroy (pool);
}
END_TEST

/* Waiters are served in the order they arrived, and try_alloc cannot
 * overtake them.
 */
static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static int order[8], norder;

static void *
fifo_thread (void *vp)
{
  struct waiter_arg *a = vp;

  a->got = throttle_mempool_alloc (a->pool);
  pthread_mutex_lock (&order_lock);
  order[norder++] = a->id;
  pthread_mutex_unlock (&order_lock);
  throttle_mempool_free (a->pool, a->got);
  return NULL;
}

START_TEST (test_fifo)
{
  struct throttle_mempool *pool = throttle_mempool_create (1, 4096, false);
  struct waiter_arg a[4];
  pthread_t t[4];
  void *held;
  int i;

  held = throttle_mempool_try_alloc (pool);
  ck_assert_ptr_nonnull (held);
  norder = 0;
  for (i = 0; i < 4; ++i) {
    a[i] = (struct waiter_arg) { .pool = pool, .id = i };
    ck_assert_int_eq (pthread_create (&t[i], NULL, fifo_thread, &a[i]), 0);
    await_waiters (pool, i + 1);
  }
  throttle_mempool_free (pool, held);
  for (i = 0; i < 4; ++i)
    pthread_join (t[i], NULL);
  ck_assert_int_eq (norder, 4);
  for (i = 0; i < 4; ++i)
    ck_assert_int_eq (order[i], i);
  ck_assert_uint_eq (throttle_mempool_in_use (pool), 0);
  throttle_mempool_destroy (pool);
}
END_TEST

/* Many threads, few buffers: a buffer is never held by two threads. */
enum { HAMMER_THREADS = 16, HAMMER_ITERS = 10000, HAMMER_NR = 4 };
static atomic_int holders, max_holders;
static atomic_int violations;

static void *
hammer_thread (void *vp)
{
  struct waiter_arg *a = vp;
  size_t words = throttle_mempool_size (a->pool) / sizeof (uint64_t);
  uint64_t me = (uint64_t) a->id + 1;
  int i, h, m;

  for (i = 0; i < HAMMER_ITERS; ++i) {
    volatile uint64_t *b;

    if (i % 3 == 0 && (b = throttle_mempool_try_alloc (a->pool)) != NULL)
      ;
    else
      b = throttle_mempool_alloc (a->pool);
    if (b == NULL) {
      atomic_fetch_add (&violations, 1);
      continue;
    }
    h = atomic_fetch_add (&holders, 1) + 1;
    m = atomic_load (&max_holders);
    while (h > m && !atomic_compare_exchange_weak (&max_holders, &m, h))
      ;
    b[0] = me;
    b[words - 1] = me;
    if (i % 16 == 0)
      sched_yield ();
    if (b[0] != me || b[words - 1] != me)
      atomic_fetch_add (&violations, 1);
    atomic_fetch_sub (&holders, 1);
    throttle_mempool_free (a->pool, (void *) b);
  }
  return NULL;
}

START_TEST (test_hammer)
{
  struct throttle_mempool *pool =
    throttle_mempool_create (HAMMER_NR, 4096, false);
  struct waiter_arg a[HAMMER_THREADS];
  pthread_t t[HAMMER_THREADS];
  int i;

  atomic_store (&holders, 0);
  atomic_store (&max_holders, 0);
  atomic_store (&violations, 0);
  for (i = 0; i < HAMMER_THREADS; ++i) {
    a[i] = (struct waiter_arg) { .pool = pool, .id = i };
    ck_assert_int_eq (pthread_create (&t[i], NULL, hammer_thread, &a[i]), 0);
  }
  for (i = 0; i < HAMMER_THREADS; ++i)
    pthread_join (t[i], NULL);
  ck_assert_int_eq (atomic_load (&violations), 0);
  ck_assert_int_le (atomic_load (&max_holders), HAMMER_NR);
  ck_assert_int_ge (atomic_load (&max_holders), 1);
  ck_assert_uint_eq (throttle_mempool_in_use (pool), 0);
  ck_assert_uint_eq (throttle_mempool_waiters (pool), 0);
  throttle_mempool_destroy (pool);
}
END_TEST

START_TEST (test_free_foreign_aborts)
{
  struct throttle_mempool *pool = throttle_mempool_create (2, 4096, false);
  static char not_ours[4096];

  throttle_mempool_free (pool, not_ours);
}
END_TEST

START_TEST (test_double_free_aborts)
{
  struct throttle_mempool *pool = throttle_mempool_create (2, 4096, false);
  void *b = throttle_mempool_try_alloc (pool);

  throttle_mempool_free (pool, b);
  throttle_mempool_free (pool, b);
}
END_TEST

/* Whether mlock can be used here; raises the soft RLIMIT_MEMLOCK if it
 * has to.  Sets *why when it cannot.
 */
static bool
can_lock (size_t bytes, const char **why)
{
  long before = status_kb ("VmLck");
  struct throttle_mempool *pool = throttle_mempool_create (1, bytes, true);
  struct rlimit rl;
  long after;

  if (pool) {
    after = status_kb ("VmLck");
    throttle_mempool_destroy (pool);
    /* The sanitizers' interceptors turn mlock into a no-op. */
    if (after - before < (long) (bytes / 1024)) {
      *why = "mlock succeeds but locks nothing (sanitizer build?)";
      return false;
    }
    return true;
  }
  if (errno != EPERM && errno != ENOMEM && errno != EAGAIN) {
    *why = strerror (errno);
    return false;
  }
  if (getrlimit (RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit (RLIMIT_MEMLOCK, &rl);
    pool = throttle_mempool_create (1, bytes, true);
    if (pool) {
      throttle_mempool_destroy (pool);
      return true;
    }
  }
  *why = "mlock refused (RLIMIT_MEMLOCK too low and no CAP_IPC_LOCK)";
  return false;
}

enum { LOCK_NR = 32, LOCK_SIZE = 128 * 1024 };   /* 4 MiB */

START_TEST (test_locked)
{
  long before, after;
  struct throttle_mempool *pool;
  size_t locked;

  before = status_kb ("VmLck");
  ck_assert_int_ge (before, 0);
  pool = throttle_mempool_create (LOCK_NR, LOCK_SIZE, true);
  ck_assert_msg (pool != NULL, "create locked: %s", strerror (errno));
  locked = throttle_mempool_bytes_locked (pool);
  ck_assert_uint_ge (locked, (size_t) LOCK_NR * LOCK_SIZE);
  after = status_kb ("VmLck");
  ck_assert_int_ge (after - before, (long) (locked / 1024));
  throttle_mempool_destroy (pool);
  ck_assert_int_eq (status_kb ("VmLck"), before);
}
END_TEST

/* Locks are not inherited across fork; relock restores them in the
 * child (nbdkit daemonizes after .get_ready) and keeps the pool usable.
 */
START_TEST (test_relock_after_fork)
{
  struct throttle_mempool *pool =
    throttle_mempool_create (LOCK_NR, LOCK_SIZE, true);
  size_t locked;
  pid_t pid;
  int status;

  ck_assert_ptr_nonnull (pool);
  locked = throttle_mempool_bytes_locked (pool);
  pid = fork ();
  ck_assert_int_ne (pid, -1);
  if (pid == 0) {
    long before = status_kb ("VmLck"), after;
    void *b;

    if (before >= (long) (locked / 1024))
      _exit (10);               /* the lock was inherited?? */
    if (throttle_mempool_relock (pool) == -1)
      _exit (11);
    after = status_kb ("VmLck");
    if (after - before < (long) (locked / 1024))
      _exit (12);
    b = throttle_mempool_try_alloc (pool);
    if (b == NULL || throttle_mempool_in_use (pool) != 1)
      _exit (13);
    throttle_mempool_free (pool, b);
    _exit (0);
  }
  ck_assert_int_eq (waitpid (pid, &status, 0), pid);
  ck_assert_msg (WIFEXITED (status) && WEXITSTATUS (status) == 0,
                 "child failed with status 0x%x", status);
  throttle_mempool_destroy (pool);
}
END_TEST

/* Relock of an unlocked pool just re-touches it. */
START_TEST (test_relock_unlocked)
{
  struct throttle_mempool *pool = throttle_mempool_create (4, 8192, false);
  void *b;

  ck_assert_int_eq (throttle_mempool_relock (pool), 0);
  ck_assert_uint_eq (throttle_mempool_bytes_locked (pool), 0);
  b = throttle_mempool_try_alloc (pool);
  ck_assert_ptr_nonnull (b);
  ck_assert_uint_eq (throttle_mempool_in_use (pool), 1);
  throttle_mempool_free (pool, b);
  throttle_mempool_destroy (pool);
}
END_TEST

/* Failing to lock is an error that leaves nothing mapped.  Forces the
 * failure by dropping CAP_IPC_LOCK (in this forked test only) and
 * lowering RLIMIT_MEMLOCK.
 */
START_TEST (test_lock_failure)
{
  struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct data[2];
  struct rlimit rl = { 64 * 1024, 64 * 1024 };
  long vm_before;
  int err;

  ck_assert_int_eq (syscall (SYS_capget, &hdr, data), 0);
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  ck_assert_int_eq (syscall (SYS_capset, &hdr, data), 0);
  ck_assert_int_eq (setrlimit (RLIMIT_MEMLOCK, &rl), 0);

  vm_before = status_kb ("VmSize");
  errno = 0;
  ck_assert_ptr_null (throttle_mempool_create (LOCK_NR, LOCK_SIZE, true));
  err = errno;
  ck_assert_msg (err == ENOMEM || err == EPERM || err == EAGAIN,
                 "errno %d (%s)", err, strerror (err));
  ck_assert_int_eq (status_kb ("VmSize"), vm_before);
}
END_TEST

/* Under mlockall(MCL_ONFAULT) only touched pages get locked, and
 * MAP_POPULATE populates nothing: the pool must still come out fully
 * resident.  (VmLck cannot show this: it counts whole VM_LOCKED
 * mappings, resident or not.)
 */
START_TEST (test_prefaulted_under_onfault)
{
  long page = sysconf (_SC_PAGESIZE);
  struct throttle_mempool *pool;
  unsigned char vec[LOCK_SIZE / 4096 + 1];
  size_t i, j, pages;
  int bad = 0;

  if (mlockall (MCL_CURRENT|MCL_FUTURE|MCL_ONFAULT) == -1) {
    fprintf (stderr, "test_prefaulted_under_onfault: mlockall: %s: "
             "not tested\n", strerror (errno));
    return;
  }
  pool = throttle_mempool_create (LOCK_NR, LOCK_SIZE, false);
  ck_assert_ptr_nonnull (pool);
  pages = throttle_mempool_size (pool) / page;
  for (i = 0; i < LOCK_NR; ++i) {
    void *b = throttle_mempool_try_alloc (pool);
    ck_assert_int_eq (mincore (b, throttle_mempool_size (pool), vec), 0);
    for (j = 0; j < pages; ++j)
      bad += !(vec[j] & 1);
  }
  munlockall ();
  ck_assert_msg (bad == 0, "%d pages of the pool not resident", bad);
  throttle_mempool_destroy (pool);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("mempool");
  TCase *tc = tcase_create ("core");
  const char *why = NULL;

  tcase_set_timeout (tc, 120);
  tcase_add_test (tc, test_bad_args);
  tcase_add_test (tc, test_alloc_free);
  tcase_add_test (tc, test_alignment);
  tcase_add_test (tc, test_prefaulted);
  tcase_add_test (tc, test_exhaustion_blocks);
  tcase_add_test (tc, test_fifo);
  tcase_add_test (tc, test_hammer);
  tcase_add_test_raise_signal (tc, test_free_foreign_aborts, SIGABRT);
  tcase_add_test_raise_signal (tc, test_double_free_aborts, SIGABRT);
  tcase_add_test (tc, test_prefaulted_under_onfault);
  tcase_add_test (tc, test_relock_unlocked);
  if (can_lock ((size_t) LOCK_NR * LOCK_SIZE, &why)) {
    tcase_add_test (tc, test_locked);
    tcase_add_test (tc, test_lock_failure);
    tcase_add_test (tc, test_relock_after_fork);
  }
  else
    printf ("SKIP: test_locked, test_lock_failure, test_relock_after_fork: "
            "%s\n", why);
  suite_add_tcase (s, tc);
  return s;
}
