/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: when the server is to be real-time (see
 * throttle-rtpolicy.h).
 */

#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "throttle-rtpolicy.h"

bool
throttle_rt_kernel_client (uid_t peer_uid, uid_t server_uid,
                           bool kernel_name)
{
  /* Attaching a kernel nbd client needs CAP_SYS_ADMIN: root's, or the
   * server's own uid (whatever that may do, it could make the server
   * real-time by restarting it with throttle-rt=on).  Anyone can take
   * the name: the uid is what tells.
   */
  return kernel_name && (peer_uid == 0 || peer_uid == server_uid);
}

void
throttle_rt_init (struct throttle_rt *st, uint64_t hold_ns)
{
  memset (st, 0, sizeof *st);
  st->mode = THROTTLE_RT_AUTO;
  st->hold_ns = hold_ns;
  st->reason = "no kernel nbd client";
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

void
throttle_rt_peer_open (struct throttle_rt *st, bool kernel)
{
  st->peers[kernel]++;
}

void
throttle_rt_peer_close (struct throttle_rt *st, bool kernel, uint64_t now)
{
  if (st->peers[kernel] == 0)
    abort ();                   /* a close without its open */
  st->peers[kernel]--;
  /* The last one gone: held, so that a client reconnecting does not
   * flap the policy.  Not in the other modes: "off" holds nothing, and
   * "on" holds from its own end.
   */
  if (st->mode == THROTTLE_RT_AUTO && kernel && st->peers[true] == 0)
    hold_from (st, now);
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
  if (st->peers[true] > 0) {
    st->reason = "a kernel nbd client of root or the server's uid "
      "is connected";
    return true;
  }
  if (now < st->hold_until) {
    st->reason = "held after a kernel client's leaving or set rt auto";
    *recheck = st->hold_until;
    return true;
  }
  st->hold_until = 0;
  st->reason = "no kernel nbd client";
  return false;
}
