/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: when the server is to be real-time (see
 * throttle-rtpolicy.h).
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "throttle-rtpolicy.h"

enum throttle_rt_peer
throttle_rt_classify (uid_t peer_uid, uid_t server_uid, bool kernel_name)
{
  /* Attaching a kernel nbd client needs CAP_SYS_ADMIN: root's, or the
   * server's own uid (whatever that may do, it could make the server
   * real-time by restarting it with throttle-rt=on).
   */
  if (peer_uid != 0 && peer_uid != server_uid)
    return THROTTLE_RT_PEER_OTHER;
  return kernel_name ? THROTTLE_RT_PEER_KERNEL : THROTTLE_RT_PEER_TRUSTED;
}

void
throttle_rt_init (struct throttle_rt *st, uint64_t hold_ns)
{
  memset (st, 0, sizeof *st);
  st->mode = THROTTLE_RT_AUTO;
  st->hold_ns = hold_ns;
  st->reason = "no kernel nbd client, no memory pressure";
}

/* A reason that ends at now is held until now + hold_ns. */
static void
hold_from (struct throttle_rt *st, uint64_t now)
{
  uint64_t until = now + st->hold_ns;

  if (until < now)
    until = UINT64_MAX;
  if (until > st->hold_until)
    st->hold_until = until;
}

/* Peers that are real-time while connected. */
static unsigned
kernel_peers (const struct throttle_rt *st)
{
  return st->peers[THROTTLE_RT_PEER_KERNEL] +
    (st->no_pressure_signal ? st->peers[THROTTLE_RT_PEER_TRUSTED] : 0);
}

void
throttle_rt_peer_open (struct throttle_rt *st, enum throttle_rt_peer peer,
                       uint64_t now)
{
  st->peers[peer]++;
}

void
throttle_rt_peer_close (struct throttle_rt *st, enum throttle_rt_peer peer,
                        uint64_t now)
{
  unsigned before = kernel_peers (st);

  if (st->peers[peer] == 0)
    abort ();                   /* a close without its open */
  st->peers[peer]--;
  /* The last one gone: held, so that a client reconnecting does not
   * flap the policy.  Not in the other modes: "off" holds nothing, and
   * "on" holds from its own end.
   */
  if (st->mode == THROTTLE_RT_AUTO && before > 0 && kernel_peers (st) == 0)
    hold_from (st, now);
}

bool
throttle_rt_pressure (struct throttle_rt *st, uint64_t now)
{
  if (st->peers[THROTTLE_RT_PEER_KERNEL] +
      st->peers[THROTTLE_RT_PEER_TRUSTED] == 0)
    return false;
  hold_from (st, now);
  return true;
}

void
throttle_rt_set_mode (struct throttle_rt *st, enum throttle_rt_mode mode,
                      uint64_t now)
{
  /* Leaving "on" for "auto" is a reason going away like any other. */
  if (st->mode == THROTTLE_RT_ON && mode == THROTTLE_RT_AUTO)
    hold_from (st, now);
  /* "off" forgets what was held: "auto" after it starts afresh. */
  if (mode == THROTTLE_RT_OFF)
    st->hold_until = 0;
  st->mode = mode;
}

bool
throttle_rt_wanted (struct throttle_rt *st, uint64_t now, uint64_t *recheck)
{
  *recheck = 0;
  switch (st->mode) {
  case THROTTLE_RT_OFF:
    st->reason = "throttle-rt=off";
    return false;
  case THROTTLE_RT_ON:
    st->reason = "throttle-rt=on";
    return true;
  default:
    break;
  }
  if (st->peers[THROTTLE_RT_PEER_KERNEL] > 0) {
    st->reason = "a kernel nbd client of root or the server's uid "
      "is connected";
    return true;
  }
  if (kernel_peers (st) > 0) {
    st->reason = "a client of root or the server's uid is connected and "
      "there is no memory pressure signal";
    return true;
  }
  if (now < st->hold_until) {
    st->reason = "held after memory pressure or a kernel client's leaving";
    *recheck = st->hold_until;
    return true;
  }
  st->hold_until = 0;
  st->reason = st->peers[THROTTLE_RT_PEER_TRUSTED] > 0 ?
    "no kernel nbd client, no memory pressure" :
    "no client of root or the server's uid";
  return false;
}

void
throttle_rt_tcp_addr (const unsigned char *addr, size_t addrlen,
                      uint16_t port, char *buf)
{
  size_t i;
  uint32_t w;
  char *p = buf;

  /* The kernel prints each 32-bit word of the address as it lies in
   * memory, read as a native integer.
   */
  for (i = 0; i + 4 <= addrlen; i += 4) {
    memcpy (&w, addr + i, 4);
    p += sprintf (p, "%08" PRIX32, w);
  }
  sprintf (p, ":%04X", (unsigned) port);
}

bool
throttle_rt_tcp_line_uid (const char *line, const char *want, uid_t *uid)
{
  char local[THROTTLE_RT_TCP_ADDR_LEN + 1];
  unsigned st;
  unsigned long u;

  /* sl local_address rem_address st tx:rx tr:when retrnsmt uid ... */
  if (sscanf (line, " %*[0-9]: %42s %*s %x %*s %*s %*s %lu",
              local, &st, &u) != 3)
    return false;
  if (st != 1 || strcmp (local, want) != 0)  /* 1: TCP_ESTABLISHED */
    return false;
  *uid = u;
  return true;
}
