/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/throttle-rtpolicy.c: who turns the server
 * real-time, and the hold, on a simulated clock.
 */

#include <config.h>

#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include <check.h>

#include "throttle-rtpolicy.h"
#include "check-main.h"

#define S 1000000000ULL

START_TEST (test_classify)
{
  /* Root and the server's own uid, on this machine. */
  ck_assert_int_eq (throttle_rt_classify (0, 1000, true),
                    THROTTLE_RT_PEER_KERNEL);
  ck_assert_int_eq (throttle_rt_classify (1000, 1000, true),
                    THROTTLE_RT_PEER_KERNEL);
  ck_assert_int_eq (throttle_rt_classify (0, 0, false),
                    THROTTLE_RT_PEER_TRUSTED);
  /* nobody naming itself nbd-client. */
  ck_assert_int_eq (throttle_rt_classify (65534, 0, true),
                    THROTTLE_RT_PEER_OTHER);
  ck_assert_int_eq (throttle_rt_classify (1001, 1000, true),
                    THROTTLE_RT_PEER_OTHER);
}
END_TEST

START_TEST (test_kernel_client_and_hold)
{
  struct throttle_rt st;
  uint64_t recheck;

  throttle_rt_init (&st, 60 * S);
  ck_assert (!throttle_rt_wanted (&st, 1 * S, &recheck));
  ck_assert_uint_eq (recheck, 0);
  throttle_rt_peer_open (&st, THROTTLE_RT_PEER_KERNEL, 2 * S);
  ck_assert (throttle_rt_wanted (&st, 2 * S, &recheck));
  ck_assert_uint_eq (recheck, 0);
  /* Held while connected, however long. */
  ck_assert (throttle_rt_wanted (&st, 100000 * S, &recheck));
  throttle_rt_peer_close (&st, THROTTLE_RT_PEER_KERNEL, 100000 * S);
  ck_assert (throttle_rt_wanted (&st, 100059 * S, &recheck));
  ck_assert_uint_eq (recheck, 100060 * S);
  ck_assert (!throttle_rt_wanted (&st, 100060 * S, &recheck));
  ck_assert_uint_eq (recheck, 0);
  /* A reconnect within the hold keeps it on throughout. */
  throttle_rt_peer_open (&st, THROTTLE_RT_PEER_KERNEL, 200000 * S);
  throttle_rt_peer_close (&st, THROTTLE_RT_PEER_KERNEL, 200001 * S);
  throttle_rt_peer_open (&st, THROTTLE_RT_PEER_KERNEL, 200030 * S);
  ck_assert (throttle_rt_wanted (&st, 200100 * S, &recheck));
  ck_assert_uint_eq (recheck, 0);
  /* Two connections: only the last one's leaving starts the hold. */
  throttle_rt_peer_open (&st, THROTTLE_RT_PEER_KERNEL, 200100 * S);
  throttle_rt_peer_close (&st, THROTTLE_RT_PEER_KERNEL, 200200 * S);
  ck_assert (throttle_rt_wanted (&st, 300000 * S, &recheck));
  throttle_rt_peer_close (&st, THROTTLE_RT_PEER_KERNEL, 300000 * S);
  ck_assert (throttle_rt_wanted (&st, 300059 * S, &recheck));
  ck_assert (!throttle_rt_wanted (&st, 300061 * S, &recheck));
}
END_TEST

START_TEST (test_other_peers_never)
{
  struct throttle_rt st;
  uint64_t recheck;

  throttle_rt_init (&st, 60 * S);
  throttle_rt_peer_open (&st, THROTTLE_RT_PEER_OTHER, 1 * S);
  ck_assert (!throttle_rt_wanted (&st, 1 * S, &recheck));
  /* Pressure with only others (or nobody) connected does not count. */
  ck_assert (!throttle_rt_pressure (&st, 2 * S));
  ck_assert (!throttle_rt_wanted (&st, 2 * S, &recheck));
  throttle_rt_peer_close (&st, THROTTLE_RT_PEER_OTHER, 3 * S);
  ck_assert (!throttle_rt_pressure (&st, 4 * S));
  ck_assert (!throttle_rt_wanted (&st, 4 * S, &recheck));
  /* Without a pressure signal either. */
  st.no_pressure_signal = true;
  throttle_rt_peer_open (&st, THROTTLE_RT_PEER_OTHER, 5 * S);
  ck_assert (!throttle_rt_wanted (&st, 5 * S, &recheck));
}
END_TEST

START_TEST (test_trusted_under_pressure)
{
  struct throttle_rt st;
  uint64_t recheck;

  throttle_rt_init (&st, 10 * S);
  throttle_rt_peer_open (&st, THROTTLE_RT_PEER_TRUSTED, 1 * S);
  ck_assert (!throttle_rt_wanted (&st, 1 * S, &recheck));
  ck_assert (throttle_rt_pressure (&st, 2 * S));
  ck_assert (throttle_rt_wanted (&st, 2 * S, &recheck));
  ck_assert_uint_eq (recheck, 12 * S);
  /* Pressure goes on: the hold moves with it. */
  ck_assert (throttle_rt_pressure (&st, 8 * S));
  ck_assert (throttle_rt_wanted (&st, 12 * S, &recheck));
  ck_assert_uint_eq (recheck, 18 * S);
  ck_assert (!throttle_rt_wanted (&st, 18 * S, &recheck));
  /* The hold outlasts the client too. */
  ck_assert (throttle_rt_pressure (&st, 20 * S));
  throttle_rt_peer_close (&st, THROTTLE_RT_PEER_TRUSTED, 21 * S);
  ck_assert (throttle_rt_wanted (&st, 29 * S, &recheck));
  ck_assert (!throttle_rt_wanted (&st, 30 * S, &recheck));
  /* No pressure signal: a trusted peer is real-time while connected. */
  st.no_pressure_signal = true;
  throttle_rt_peer_open (&st, THROTTLE_RT_PEER_TRUSTED, 40 * S);
  ck_assert (throttle_rt_wanted (&st, 40 * S, &recheck));
  throttle_rt_peer_close (&st, THROTTLE_RT_PEER_TRUSTED, 41 * S);
  ck_assert (throttle_rt_wanted (&st, 50 * S, &recheck));
  ck_assert (!throttle_rt_wanted (&st, 51 * S, &recheck));
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
  throttle_rt_peer_open (&st, THROTTLE_RT_PEER_KERNEL, 20 * S);
  throttle_rt_set_mode (&st, THROTTLE_RT_OFF, 21 * S);
  ck_assert (!throttle_rt_wanted (&st, 21 * S, &recheck));
  throttle_rt_peer_close (&st, THROTTLE_RT_PEER_KERNEL, 22 * S);
  throttle_rt_set_mode (&st, THROTTLE_RT_AUTO, 23 * S);
  ck_assert (!throttle_rt_wanted (&st, 23 * S, &recheck));
}
END_TEST

START_TEST (test_tcp_table)
{
  char want[THROTTLE_RT_TCP_ADDR_LEN + 1], want6[THROTTLE_RT_TCP_ADDR_LEN + 1];
  struct in_addr a;
  struct in6_addr a6;
  uid_t uid = 12345;

  inet_pton (AF_INET, "127.0.0.1", &a);
  throttle_rt_tcp_addr ((unsigned char *) &a, 4, 8080, want);
  inet_pton (AF_INET6, "::1", &a6);
  throttle_rt_tcp_addr (a6.s6_addr, 16, 443, want6);
  /* As Linux's /proc/net/tcp{,6} spell them on this host. */
  if (htonl (1) == 1) {
    ck_assert_str_eq (want, "7F000001:1F90");
    ck_assert_str_eq (want6, "00000000000000000000000000000001:01BB");
  }
  else {
    ck_assert_str_eq (want, "0100007F:1F90");
    ck_assert_str_eq (want6, "00000000000000000000000001000000:01BB");
  }
  ck_assert (throttle_rt_tcp_line_uid
             ("   3: 0100007F:1F90 0100007F:2710 01 00000000:00000000 "
              "00:00000000 00000000  1000        0 4242 1 0000 20 4 30 10 -1",
              "0100007F:1F90", &uid));
  ck_assert_uint_eq (uid, 1000);
  /* Listening, or another port, or the header line: no. */
  ck_assert (!throttle_rt_tcp_line_uid
             ("   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 "
              "00:00000000 00000000     0        0 17 1 0", "0100007F:1F90",
              &uid));
  ck_assert (!throttle_rt_tcp_line_uid
             ("   3: 0100007F:1F91 0100007F:2710 01 00000000:00000000 "
              "00:00000000 00000000  1000        0 4242 1 0", "0100007F:1F90",
              &uid));
  ck_assert (!throttle_rt_tcp_line_uid
             ("  sl  local_address rem_address   st tx_queue rx_queue tr "
              "tm->when retrnsmt   uid  timeout inode", "0100007F:1F90", &uid));
  ck_assert_uint_eq (uid, 1000);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("rtpolicy");
  TCase *tc = tcase_create ("core");

  tcase_add_test (tc, test_classify);
  tcase_add_test (tc, test_kernel_client_and_hold);
  tcase_add_test (tc, test_other_peers_never);
  tcase_add_test (tc, test_trusted_under_pressure);
  tcase_add_test (tc, test_modes);
  tcase_add_test (tc, test_tcp_table);
  suite_add_tcase (s, tc);
  return s;
}
