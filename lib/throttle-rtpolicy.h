/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: when the server is to be real-time (throttle-rt),
 * as pure decisions: which peer counts, and a state machine on a
 * clock the caller passes.  No locking: the caller serializes every
 * call on one struct throttle_rt (the filter holds its rt_lock).
 *
 * Real-time request threads are what keeps the server ahead of its
 * own kernel when it serves the machine's swap; they also pre-empt
 * every ordinary process on the host.  So only a peer that could have
 * attached a kernel nbd client (root, or the server's own uid) turns
 * them on, and they are turned off again a hold time after the last
 * reason went away.  See "REAL-TIME PRIORITY" in
 * nbdkit-throttle-design(1).
 */

#ifndef THROTTLE_RTPOLICY_H
#define THROTTLE_RTPOLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum throttle_rt_mode { THROTTLE_RT_OFF, THROTTLE_RT_AUTO, THROTTLE_RT_ON };

enum throttle_rt_peer {
  /* Not on this machine, or an owner that could not have attached a
   * kernel client, or an owner that cannot be known.
   */
  THROTTLE_RT_PEER_OTHER,
  /* On this machine, owned by root or the server's uid, but not known
   * to be a kernel client: counts only under memory pressure.
   */
  THROTTLE_RT_PEER_TRUSTED,
  /* A trusted peer whose process hands its socket to the kernel's nbd
   * driver: real-time while it is connected.
   */
  THROTTLE_RT_PEER_KERNEL,
};

/* The class of a peer on this machine (a Unix socket, or TCP on
 * loopback) whose owner the kernel recorded as peer_uid (SO_PEERCRED,
 * or the socket's owner in /proc/net/tcp); kernel_name: its process is
 * named like a kernel nbd client.  A peer not on this machine, or
 * whose owner cannot be known, is THROTTLE_RT_PEER_OTHER.
 */
extern enum throttle_rt_peer throttle_rt_classify (uid_t peer_uid,
                                                   uid_t server_uid,
                                                   bool kernel_name);

struct throttle_rt {
  enum throttle_rt_mode mode;
  uint64_t hold_ns;               /* the hysteresis */
  /* No pressure signal (no PSI): a trusted peer counts as a kernel
   * client, since nothing would say when it needs real-time.
   */
  bool no_pressure_signal;
  unsigned peers[3];              /* connected, by enum throttle_rt_peer */
  /* Until when a reason that went away still holds real-time: the last
   * counted memory pressure, or the last kernel client's leaving, plus
   * hold_ns.  0: none.
   */
  uint64_t hold_until;
  /* What the last decision was based on (for stats and the log). */
  const char *reason;
};

/* Mode auto, hold_ns, nothing connected. */
extern void throttle_rt_init (struct throttle_rt *, uint64_t hold_ns);

extern void throttle_rt_peer_open (struct throttle_rt *,
                                   enum throttle_rt_peer, uint64_t now);
/* A peer of that class (as classified at open) left. */
extern void throttle_rt_peer_close (struct throttle_rt *,
                                    enum throttle_rt_peer, uint64_t now);

/* Memory pressure was signalled at now.  It counts (and is held for
 * hold_ns) only while a trusted or kernel peer is connected: without
 * one the server serves no device of this machine.  Returns whether it
 * counted.
 */
extern bool throttle_rt_pressure (struct throttle_rt *, uint64_t now);

extern void throttle_rt_set_mode (struct throttle_rt *,
                                  enum throttle_rt_mode, uint64_t now);

/* Whether the server should be real-time at now; sets st->reason.
 * *recheck is when the answer may change without any call above (the
 * end of the hold), or 0 if only a call above can change it.
 */
extern bool throttle_rt_wanted (struct throttle_rt *, uint64_t now,
                                uint64_t *recheck);

/* /proc/net/tcp{,6}: the owner of a TCP socket on this machine.  An
 * address as the table writes it: addr is the address in network byte
 * order (4 or 16 bytes), port in host order.  buf has room for 42.
 */
#define THROTTLE_RT_TCP_ADDR_LEN 42
extern void throttle_rt_tcp_addr (const unsigned char *addr, size_t addrlen,
                                  uint16_t port, char *buf);
/* If line is a row of the table for an established socket whose local
 * address is want (from throttle_rt_tcp_addr), sets *uid and returns
 * true.
 */
extern bool throttle_rt_tcp_line_uid (const char *line, const char *want,
                                      uid_t *uid);

#endif /* THROTTLE_RTPOLICY_H */
