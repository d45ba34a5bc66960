/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: who is at the other end of a connection (see
 * throttle-peer.h).
 */

#include <config.h>

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <nbdkit-filter.h>

#include "throttle-peer.h"

/* Is the process named by /proc/PID one that hands its NBD socket to
 * the kernel's nbd driver?  By comm (what it was started as) or by
 * the executable's name.  Anyone can take either name: this only
 * tells a trusted peer's kernel client from its other clients.
 */
static bool
kernel_client_name (const char *name)
{
  return strcmp (name, "nbd-client") == 0 || strcmp (name, "qemu-nbd") == 0;
}

static bool
pid_is_kernel_client (int64_t pid, char *name, size_t len)
{
  char path[64], exe[PATH_MAX];
  const char *base;
  ssize_t r;
  int fd;

  snprintf (name, len, "?");
  snprintf (path, sizeof path, "/proc/%" PRIi64 "/comm", pid);
  fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    r = read (fd, name, len - 1);
    close (fd);
    if (r > 0) {
      name[r] = '\0';
      name[strcspn (name, "\n")] = '\0';
      if (kernel_client_name (name))
        return true;
    }
  }
  snprintf (path, sizeof path, "/proc/%" PRIi64 "/exe", pid);
  r = readlink (path, exe, sizeof exe - 1);
  if (r > 0) {
    exe[r] = '\0';
    base = strrchr (exe, '/');
    base = base ? base + 1 : exe;
    if (kernel_client_name (base)) {
      snprintf (name, len, "%.*s", (int) len - 1, base);
      return true;
    }
  }
  return false;
}

/* The owner of the TCP socket on this machine whose local address is
 * addr:port, from the socket tables of nbdkit's network namespace (a
 * loopback peer is in it).  The owner is whoever created the socket;
 * a kernel client's socket keeps it after nbd-client hands it over.
 */
static bool
tcp_peer_uid (const unsigned char *addr, size_t addrlen, uint16_t port,
              uid_t *uid)
{
  static const unsigned char v4mapped[12] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
  };
  unsigned char v4[4], v6[16];
  char want[2][THROTTLE_RT_TCP_ADDR_LEN + 1], line[512];
  const char *tables[2] = { "/proc/self/net/tcp", "/proc/self/net/tcp6" };
  bool found = false;
  size_t i;

  /* The peer's socket is in one table or the other, depending on its
   * family, not on ours: look for both spellings.
   */
  if (addrlen == 4) {
    memcpy (v4, addr, 4);
    memcpy (v6, v4mapped, 12);
    memcpy (v6 + 12, addr, 4);
  }
  else if (memcmp (addr, v4mapped, 12) == 0) {
    memcpy (v4, addr + 12, 4);
    memcpy (v6, addr, 16);
  }
  else {
    memcpy (v6, addr, 16);
    tables[0] = NULL;
  }
  if (tables[0])
    throttle_rt_tcp_addr (v4, 4, port, want[0]);
  throttle_rt_tcp_addr (v6, 16, port, want[1]);
  for (i = 0; i < 2 && !found; i++) {
    FILE *fp = tables[i] ? fopen (tables[i], "re") : NULL;

    if (fp == NULL)
      continue;
    while (!found && fgets (line, sizeof line, fp))
      found = throttle_rt_tcp_line_uid (line, want[i], uid);
    fclose (fp);
  }
  return found;
}

enum throttle_rt_peer
throttle_peer_classify (char *why, size_t len)
{
  struct sockaddr_storage ss;
  socklen_t sslen = sizeof ss;
  char name[64], addr[INET6_ADDRSTRLEN] = "?";
  const uid_t me = geteuid ();
  const unsigned char *a = NULL;
  size_t alen = 0;
  uint16_t port = 0;
  enum throttle_rt_peer c;
  int64_t pid, uid;
  uid_t tuid;
  bool loopback = false, kname;

  if (nbdkit_peer_name ((struct sockaddr *) &ss, &sslen) == -1) {
    snprintf (why, len, "peer unknown (not a socket)");
    return THROTTLE_RT_PEER_OTHER;
  }
  switch (ss.ss_family) {
  case AF_UNIX:
    pid = nbdkit_peer_pid ();
    uid = nbdkit_peer_uid ();
    if (pid <= 0 || uid < 0) {
      snprintf (why, len, "Unix socket peer without credentials");
      return THROTTLE_RT_PEER_OTHER;
    }
    kname = pid_is_kernel_client (pid, name, sizeof name);
    c = throttle_rt_classify (true, true, uid, me, kname);
    snprintf (why, len, "peer PID %" PRIi64 " is %s, uid %" PRIi64 ", %s",
              pid, name, uid,
              c == THROTTLE_RT_PEER_KERNEL ?
              "a kernel nbd client on this machine" :
              c == THROTTLE_RT_PEER_TRUSTED ?
              "not a kernel nbd client (real-time only under memory "
              "pressure)" :
              "neither root nor the server's uid: never real-time");
    return c;
  case AF_INET: {
    const struct sockaddr_in *sin = (const struct sockaddr_in *) &ss;

    inet_ntop (AF_INET, &sin->sin_addr, addr, sizeof addr);
    loopback = (ntohl (sin->sin_addr.s_addr) >> 24) == 127;
    a = (const unsigned char *) &sin->sin_addr;
    alen = 4;
    port = ntohs (sin->sin_port);
    break;
  }
  case AF_INET6: {
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *) &ss;

    inet_ntop (AF_INET6, &sin6->sin6_addr, addr, sizeof addr);
    loopback = IN6_IS_ADDR_LOOPBACK (&sin6->sin6_addr) ||
      (IN6_IS_ADDR_V4MAPPED (&sin6->sin6_addr) &&
       sin6->sin6_addr.s6_addr[12] == 127);
    a = sin6->sin6_addr.s6_addr;
    alen = 16;
    port = ntohs (sin6->sin6_port);
    break;
  }
  default:
    snprintf (why, len, "peer of address family %d, not on this machine",
              (int) ss.ss_family);
    return THROTTLE_RT_PEER_OTHER;
  }
  if (!loopback) {
    snprintf (why, len, "TCP peer %s, not on this machine", addr);
    return THROTTLE_RT_PEER_OTHER;
  }
  /* The owner of a loopback peer's socket can be known, its process
   * cannot (a kernel client's socket has none): at most trusted.
   */
  if (!tcp_peer_uid (a, alen, port, &tuid)) {
    snprintf (why, len, "TCP peer %s port %u on loopback, owner not found: "
              "never real-time", addr, (unsigned) port);
    return THROTTLE_RT_PEER_OTHER;
  }
  c = throttle_rt_classify (true, true, tuid, me, false);
  snprintf (why, len, "TCP peer %s port %u on loopback, uid %u, %s",
            addr, (unsigned) port, (unsigned) tuid,
            c == THROTTLE_RT_PEER_TRUSTED ?
            "which may be a kernel nbd client (real-time only under memory "
            "pressure)" :
            "neither root nor the server's uid: never real-time");
  return c;
}
