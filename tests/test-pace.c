/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the reply gate for nbdkit before 1.33.10
 * (plugin/throttle/compat/throttle-pace.c), with nbdkit stood in: which
 * replies ask nbdkit whether the connection is closing (a successful
 * one at most once per THROTTLE_PACE_PROBE_US, an error one every
 * time, none once the answer was "closing"), and that once it is
 * closing every reply, successful or not, passes the gate one at a
 * time: the next only when the thread that carried the one before is
 * back in a data callback.  test-client-done.sh shows the gate against
 * a real nbdkit 1.32; this pins down the common path it skips.
 *
 * The probe interval is set through next_probe_ns (an hour ahead, or
 * past) rather than waited for, so that no check depends on the
 * machine's speed.
 */

#include <config.h>

#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "throttle-compat.h"
#include "check-main.h"

/* --- nbdkit and throttle-quit.c, as far as the gate uses them --------- */

static int probes;              /* nbdkit_nanosleep calls */
static bool closing;            /* what nbdkit_nanosleep says */
bool throttle_quit_known;

void
nbdkit_debug (const char *fmt, ...)
{
}

int
nbdkit_nanosleep (unsigned sec, unsigned nsec)
{
  ck_assert_uint_eq (sec, 0);
  ck_assert_uint_eq (nsec, 0);
  __atomic_add_fetch (&probes, 1, __ATOMIC_SEQ_CST);
  return closing ? -1 : 0;
}

static const uint64_t HOUR_NS = 3600ull * 1000000000;

static void
probe_in (struct throttle_pace *p, uint64_t ns)
{
  atomic_store (&p->next_probe_ns, throttle_now_ns () + ns);
}

START_TEST (test_live_probes)
{
  struct throttle_pace p;

  closing = false;
  probes = 0;
  throttle_pace_init (&p);

  /* The first successful reply asks, and sets the next interval. */
  throttle_pace_reply (&p, 0);
  ck_assert_int_eq (probes, 1);
  ck_assert_uint_gt (atomic_load (&p.next_probe_ns), 1);

  /* Inside the interval a successful reply does not ask. */
  probe_in (&p, HOUR_NS);
  throttle_pace_reply (&p, 0);
  throttle_pace_reply (&p, 0);
  ck_assert_int_eq (probes, 1);

  /* An error reply asks every time, inside the interval too. */
  throttle_pace_reply (&p, -1);
  throttle_pace_reply (&p, -1);
  ck_assert_int_eq (probes, 3);

  /* Once the interval is over, one successful reply asks. */
  atomic_store (&p.next_probe_ns, 1);
  throttle_pace_reply (&p, 0);
  ck_assert_int_eq (probes, 4);
  throttle_pace_reply (&p, 0);
  ck_assert_int_eq (probes, 4);

  /* A live connection's replies never took the gate. */
  ck_assert (!p.out);
  ck_assert_ptr_null (throttle_pace_out_gate);
  throttle_pace_destroy (&p);
}
END_TEST

/* Once nbdkit said "closing", asking again would log an error line
 * each time: the answer is kept, and every reply takes the gate.
 */
START_TEST (test_closing_kept)
{
  struct throttle_pace p;

  closing = true;
  probes = 0;
  throttle_pace_init (&p);
  probe_in (&p, HOUR_NS);

  throttle_pace_reply (&p, -1);
  ck_assert_int_eq (probes, 1);
  ck_assert (p.out);
  ck_assert_ptr_eq (throttle_pace_out_gate, &p);

  /* Back in a data callback: the reply is sent, the gate open. */
  throttle_pace_enter ();
  ck_assert (!p.out);
  ck_assert_ptr_null (throttle_pace_out_gate);

  /* A successful reply takes the gate without asking, even where a
   * live connection's would not have looked.
   */
  closing = false;
  throttle_pace_reply (&p, 0);
  ck_assert_int_eq (probes, 1);
  ck_assert (p.out);
  throttle_pace_enter ();
  throttle_pace_reply (&p, -1);
  ck_assert_int_eq (probes, 1);
  ck_assert (p.out);
  throttle_pace_enter ();
  throttle_pace_destroy (&p);
}
END_TEST

/* The server shutting down gates a successful reply inside the
 * interval too.
 */
START_TEST (test_quitting)
{
  struct throttle_pace p;

  closing = false;
  probes = 0;
  throttle_pace_init (&p);
  probe_in (&p, HOUR_NS);
  __atomic_store_n (&throttle_quit_known, true, __ATOMIC_SEQ_CST);
  throttle_pace_reply (&p, 0);
  __atomic_store_n (&throttle_quit_known, false, __ATOMIC_SEQ_CST);
  ck_assert (p.out);
  ck_assert_int_eq (probes, 0);
  throttle_pace_enter ();
  throttle_pace_destroy (&p);
}
END_TEST

/* Two threads of a closing connection: the second reply leaves only
 * once the thread of the first is back (or after
 * THROTTLE_PACE_MAX_MS: the first comes back well before that here,
 * unless the machine stalls for a second, which only makes the check
 * weaker, never wrong).
 */
static struct throttle_pace two;
static bool first_back;         /* atomic */
static bool second_out;         /* atomic */

static void *
second_reply (void *arg)
{
  throttle_pace_reply (&two, 0);
  __atomic_store_n (&second_out, true, __ATOMIC_SEQ_CST);
  ck_assert (__atomic_load_n (&first_back, __ATOMIC_SEQ_CST));
  throttle_pace_enter ();
  return NULL;
}

START_TEST (test_one_at_a_time)
{
  struct timespec ts = { .tv_sec = 0, .tv_nsec = 50 * 1000000 };
  pthread_t t;

  closing = true;
  probes = 0;
  throttle_pace_init (&two);
  throttle_pace_reply (&two, -1);       /* waits the first 100 ms */
  ck_assert (two.out);

  ck_assert_int_eq (pthread_create (&t, NULL, second_reply, NULL), 0);
  nanosleep (&ts, NULL);
  ck_assert (!__atomic_load_n (&second_out, __ATOMIC_SEQ_CST));
  __atomic_store_n (&first_back, true, __ATOMIC_SEQ_CST);
  throttle_pace_enter ();
  ck_assert_int_eq (pthread_join (t, NULL), 0);
  ck_assert (__atomic_load_n (&second_out, __ATOMIC_SEQ_CST));
  ck_assert (!two.out);
  throttle_pace_destroy (&two);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("pace");
  TCase *tc = tcase_create ("core");

  tcase_set_timeout (tc, 30);
  tcase_add_test (tc, test_live_probes);
  tcase_add_test (tc, test_closing_kept);
  tcase_add_test (tc, test_quitting);
  tcase_add_test (tc, test_one_at_a_time);
  suite_add_tcase (s, tc);
  return s;
}
