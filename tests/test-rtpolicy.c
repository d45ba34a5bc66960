/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/throttle-rtpolicy.c: who turns the server
 * real-time, and the hold, on a simulated clock.
 */

#include <config.h>

#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "throttle-rtpolicy.h"
#include "check-main.h"

#define S 1000000000ULL

START_TEST (test_kernel_client)
{
  /* Root and the server's own uid, named like a kernel client. */
  ck_assert (throttle_rt_kernel_client (0, 1000, true));
  ck_assert (throttle_rt_kernel_client (1000, 1000, true));
  ck_assert (!throttle_rt_kernel_client (0, 0, false));
  /* nobody naming itself nbd-client. */
  ck_assert (!throttle_rt_kernel_client (65534, 0, true));
  ck_assert (!throttle_rt_kernel_client (1001, 1000, true));
}
END_TEST

START_TEST (test_kernel_client_and_hold)
{
  struct throttle_rt st;
  uint64_t recheck;

  throttle_rt_init (&st, 60 * S);
  ck_assert (!throttle_rt_wanted (&st, 1 * S, &recheck));
  ck_assert_uint_eq (recheck, 0);
  throttle_rt_peer_open (&st, true);
  ck_assert (throttle_rt_wanted (&st, 2 * S, &recheck));
  ck_assert_uint_eq (recheck, 0);
  /* Held while connected, however long. */
  ck_assert (throttle_rt_wanted (&st, 100000 * S, &recheck));
  throttle_rt_peer_close (&st, true, 100000 * S);
  ck_assert (throttle_rt_wanted (&st, 100059 * S, &recheck));
  ck_assert_uint_eq (recheck, 100060 * S);
  ck_assert (!throttle_rt_wanted (&st, 100060 * S, &recheck));
  ck_assert_uint_eq (recheck, 0);
  /* A reconnect within the hold keeps it on throughout. */
  throttle_rt_peer_open (&st, true);
  throttle_rt_peer_close (&st, true, 200001 * S);
  throttle_rt_peer_open (&st, true);
  ck_assert (throttle_rt_wanted (&st, 200100 * S, &recheck));
  ck_assert_uint_eq (recheck, 0);
  /* Two connections: only the last one's leaving starts the hold. */
  throttle_rt_peer_open (&st, true);
  throttle_rt_peer_close (&st, true, 200200 * S);
  ck_assert (throttle_rt_wanted (&st, 300000 * S, &recheck));
  throttle_rt_peer_close (&st, true, 300000 * S);
  ck_assert (throttle_rt_wanted (&st, 300059 * S, &recheck));
  ck_assert (!throttle_rt_wanted (&st, 300061 * S, &recheck));
}
END_TEST

START_TEST (test_other_peers_never)
{
  struct throttle_rt st;
  uint64_t recheck;

  throttle_rt_init (&st, 60 * S);
  throttle_rt_peer_open (&st, false);
  ck_assert (!throttle_rt_wanted (&st, 1 * S, &recheck));
  ck_assert_uint_eq (recheck, 0);
  /* Nor does one leaving start a hold. */
  throttle_rt_peer_close (&st, false, 2 * S);
  ck_assert (!throttle_rt_wanted (&st, 3 * S, &recheck));
  /* Beside a kernel client: its leaving is what the hold runs from. */
  throttle_rt_peer_open (&st, true);
  throttle_rt_peer_open (&st, false);
  throttle_rt_peer_close (&st, true, 4 * S);
  ck_assert (throttle_rt_wanted (&st, 63 * S, &recheck));
  ck_assert_uint_eq (recheck, 64 * S);
  throttle_rt_peer_close (&st, false, 10 * S);
  ck_assert (!throttle_rt_wanted (&st, 64 * S, &recheck));
}
END_TEST

START_TEST (test_modes)
{
  struct throttle_rt st;
  uint64_t recheck;

  throttle_rt_init (&st, 10 * S);
  throttle_rt_set_mode (&st, THROTTLE_RT_ON, 1 * S);
  ck_assert (throttle_rt_wanted (&st, 1 * S, &recheck));
  ck_assert_str_eq (st.reason, "throttle-rt=on");
  /* on -> auto with nothing connected: held, then off. */
  throttle_rt_set_mode (&st, THROTTLE_RT_AUTO, 5 * S);
  ck_assert (throttle_rt_wanted (&st, 14 * S, &recheck));
  ck_assert (!throttle_rt_wanted (&st, 15 * S, &recheck));
  /* off wins over a kernel client, and forgets the hold. */
  throttle_rt_peer_open (&st, true);
  throttle_rt_set_mode (&st, THROTTLE_RT_OFF, 21 * S);
  ck_assert (!throttle_rt_wanted (&st, 21 * S, &recheck));
  throttle_rt_peer_close (&st, true, 22 * S);
  throttle_rt_set_mode (&st, THROTTLE_RT_AUTO, 23 * S);
  ck_assert (!throttle_rt_wanted (&st, 23 * S, &recheck));
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("rtpolicy");
  TCase *tc = tcase_create ("core");

  tcase_add_test (tc, test_kernel_client);
  tcase_add_test (tc, test_kernel_client_and_hold);
  tcase_add_test (tc, test_other_peers_never);
  tcase_add_test (tc, test_modes);
  suite_add_tcase (s, tc);
  return s;
}
