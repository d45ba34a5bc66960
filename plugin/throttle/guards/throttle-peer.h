/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: who is at the other end of a connection, as
 * throttle-rt judges it.  The judgement is lib/throttle-rtpolicy.h's
 * (throttle_rt_classify); this gathers its facts: the peer's address,
 * its credentials (SO_PEERCRED, through nbdkit), its process's name,
 * and for a loopback TCP peer the owner of its socket.
 */

#ifndef THROTTLE_PEER_H
#define THROTTLE_PEER_H

#include <stddef.h>

#include "throttle-rtpolicy.h"

/* The class of the calling thread's connection's peer: call from
 * .open, in the connection's thread.  Writes what was found into why
 * (len bytes) either way.  Opens files under /proc: not for the
 * writeout path.
 */
extern enum throttle_rt_peer throttle_peer_classify (char *why, size_t len);

#endif /* THROTTLE_PEER_H */
