/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/throttle-lock.c (Check): a broken lock rule
 * aborts.
 *
 * The helper's checking versions are tested in every build (this file
 * calls them whatever the configuration).  That lib/ itself checks the
 * rules its headers state (a queue's hook that calls the queue back, a
 * wait queue used without its owner's lock) is tested only in a build
 * with THROTTLE_LOCK_CHECKS (./configure --enable-lock-checks, or any
 * sanitizer build); elsewhere those tests are skipped, saying so.
 */

#include <config.h>

#ifdef THROTTLE_LOCK_CHECKS
#define LIB_CHECKS 1
#else
#define LIB_CHECKS 0
/* This file calls the checking versions whatever lib/ was built with. */
#define THROTTLE_LOCK_CHECKS 1
#endif

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <check.h>

#include "throttle-lock.h"
#include "throttle-wait.h"
#include "throttle-wbq.h"
#include "check-main.h"

/* An error-checking mutex whatever lib/ was built with. */
static pthread_mutex_t m = THROTTLE_LOCK_INITIALIZER;

START_TEST (test_rules_kept)
{
  throttle_lock (&m);
  throttle_lock_assert_held (&m);
  throttle_unlock (&m);
  /* Free again: another thread could take it now. */
  ck_assert_int_eq (pthread_mutex_trylock (&m), 0);
  pthread_mutex_unlock (&m);
}
END_TEST

START_TEST (test_relock_aborts)
{
  throttle_lock (&m);
  throttle_lock (&m);
}
END_TEST

/* Under TSan its own report ("unlock of an unlocked mutex") comes
 * first: it checks unlocks too.
 */
START_TEST (test_unlock_not_held_aborts)
{
  throttle_unlock (&m);
}
END_TEST

START_TEST (test_assert_free_aborts)
{
  throttle_lock_assert_held (&m);
}
END_TEST

static pthread_mutex_t holder_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t holder_cond = PTHREAD_COND_INITIALIZER;
static bool holding, release_it;

static void *
holder (void *arg)
{
  throttle_lock (&m);
  pthread_mutex_lock (&holder_lock);
  holding = true;
  pthread_cond_broadcast (&holder_cond);
  while (!release_it)
    pthread_cond_wait (&holder_cond, &holder_lock);
  pthread_mutex_unlock (&holder_lock);
  throttle_unlock (&m);
  return NULL;
}

/* Held, but by another thread: the assertion aborts at once rather
 * than waiting for the holder (which never lets go here).
 */
START_TEST (test_assert_other_holder_aborts)
{
  pthread_t t;

  ck_assert_int_eq (pthread_create (&t, NULL, holder, NULL), 0);
  pthread_mutex_lock (&holder_lock);
  while (!holding)
    pthread_cond_wait (&holder_cond, &holder_lock);
  pthread_mutex_unlock (&holder_lock);
  throttle_lock_assert_held (&m);
}
END_TEST

/* --- lib/'s own rules ------------------------------------------------ */

/* throttle_lock_init makes a mutex the checks work on. */
START_TEST (test_init_relock_aborts)
{
  pthread_mutex_t l;

  ck_assert_int_eq (throttle_lock_init (&l), 0);
  throttle_lock (&l);
  throttle_lock (&l);
}
END_TEST

/* throttle-wait.h: every function is called with the owner's lock. */
static bool
never (void *owner, struct throttle_waiter *w)
{
  return false;
}

START_TEST (test_wait_without_lock_aborts)
{
  pthread_mutex_t l;
  struct throttle_wait_queue q;

  ck_assert_int_eq (throttle_lock_init (&l), 0);
  throttle_wait_queue_init (&q, &l);
  throttle_lock (&l);
  throttle_wait_grant (&q, never, NULL);      /* with it: fine */
  throttle_unlock (&l);
  throttle_wait_grant (&q, never, NULL);
}
END_TEST

/* throttle-wbq.h: the retired hook must not call any function of the
 * queue (it runs under the queue's lock).
 */
static struct throttle_wbq *hooked;

static void
retired_calls_back (void *opaque, uint64_t charged)
{
  throttle_wbq_seen_at_open (hooked);
}

START_TEST (test_wbq_hook_calls_back_aborts)
{
  static char buf[THROTTLE_WBQ_ELEM];
  struct throttle_wbq_job j;

  hooked = throttle_wbq_create (4, 1, THROTTLE_WBQ_ELEM, false,
                                retired_calls_back, NULL);
  ck_assert_ptr_nonnull (hooked);
  throttle_wbq_queue (hooked, buf, sizeof buf, 0, 1, NULL, NULL);
  throttle_wbq_next (hooked, 0, &j);
  throttle_wbq_write_done (hooked, &j, 0);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("lock");
  TCase *tc = tcase_create ("helper");
  TCase *tl = tcase_create ("lib");

  tcase_set_timeout (tc, 60);
  tcase_add_test (tc, test_rules_kept);
  tcase_add_test_raise_signal (tc, test_relock_aborts, SIGABRT);
  tcase_add_test_raise_signal (tc, test_unlock_not_held_aborts, SIGABRT);
  tcase_add_test_raise_signal (tc, test_assert_free_aborts, SIGABRT);
  tcase_add_test_raise_signal (tc, test_assert_other_holder_aborts, SIGABRT);
  suite_add_tcase (s, tc);

  tcase_set_timeout (tl, 60);
  if (LIB_CHECKS) {
    tcase_add_test_raise_signal (tl, test_init_relock_aborts, SIGABRT);
    tcase_add_test_raise_signal (tl, test_wait_without_lock_aborts, SIGABRT);
    tcase_add_test_raise_signal (tl, test_wbq_hook_calls_back_aborts,
                                 SIGABRT);
    suite_add_tcase (s, tl);
  }
  else
    printf ("SKIP: test_init_relock_aborts, test_wait_without_lock_aborts, "
            "test_wbq_hook_calls_back_aborts: lib/ was built without lock "
            "checks (./configure --enable-lock-checks)\n");
  return s;
}
