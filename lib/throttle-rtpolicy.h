/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: when the server is to be real-time (throttle-rt),
 * as pure decisions: which peer is a kernel client, and a state
 * machine on a clock the caller passes.  No locking: the caller
 * serializes every call on one struct throttle_rt (the filter holds
 * its rt_lock).
 *
 * Real-time request threads are what keeps the server ahead of its
 * own kernel when it serves the machine's swap; they also pre-empt
 * every ordinary process on the host.  So only a kernel nbd client
 * that root or the server's own uid attached turns them on, and they
 * are turned off again a hold time after the last one left.  See
 * "REAL-TIME PRIORITY" in nbdkit-throttle-design(1).
 */

#ifndef THROTTLE_RTPOLICY_H
#define THROTTLE_RTPOLICY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum throttle_rt_mode { THROTTLE_RT_OFF, THROTTLE_RT_AUTO, THROTTLE_RT_ON };

/* Whether a peer on this machine whose owner the kernel recorded as
 * peer_uid (SO_PEERCRED) counts as a kernel nbd client; kernel_name:
 * its process is named like one.
 */
extern bool throttle_rt_kernel_client (uid_t peer_uid, uid_t server_uid,
                                       bool kernel_name);

struct throttle_rt {
  enum throttle_rt_mode mode;
  uint64_t hold_ns;               /* the hysteresis */
  /* Connected peers: [true] kernel clients, [false] the others. */
  unsigned peers[2];
  /* Until when a reason that went away still holds real-time: the last
   * kernel client's leaving, or leaving "on" for "auto", plus hold_ns.
   * 0: none.
   */
  uint64_t hold_until;
  /* What the last decision was based on (for stats and the log). */
  const char *reason;
};

/* Mode auto, hold_ns, nothing connected. */
extern void throttle_rt_init (struct throttle_rt *, uint64_t hold_ns);

extern void throttle_rt_peer_open (struct throttle_rt *, bool kernel);
/* A peer (a kernel client or not, as found at open) left. */
extern void throttle_rt_peer_close (struct throttle_rt *, bool kernel,
                                    uint64_t now);

extern void throttle_rt_set_mode (struct throttle_rt *,
                                  enum throttle_rt_mode, uint64_t now);

/* Whether the server should be real-time at now; sets st->reason.
 * *recheck is when the answer may change without any call above (the
 * end of the hold), or 0 if only a call above can change it.
 */
extern bool throttle_rt_wanted (struct throttle_rt *, uint64_t now,
                                uint64_t *recheck);

#endif /* THROTTLE_RTPOLICY_H */
