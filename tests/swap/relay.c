/* SPDX-License-Identifier: BSD-3-Clause */
/* relay PORT: the host end of a remote configuration's guestfwd
 * (run-guest.sh).  qemu's user network runs it once for each
 * connection the guest opens to its storage address, with that
 * connection on standard input and output, and it relays the bytes
 * to and from the storage server on 127.0.0.1:PORT until either side
 * closes.
 *
 * Why not socat or nc: qemu's end of standard input and output is a
 * TCP socket on the loopback (slirp makes its socket pair that way,
 * for out-of-band data), on which qemu sets no TCP_NODELAY.  An NBD
 * write's header and payload reach it as two writes, and Nagle holds
 * the payload until the header is acknowledged, which the receiver's
 * delayed ACK puts off for up to 40 ms: under TCG a swap-in ran ten
 * times slower through socat than through this.  So this end turns
 * TCP_QUICKACK back on after every read (the kernel clears it), and
 * sets TCP_NODELAY on both of its sockets.
 */

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

static void
nodelay (int fd)
{
  int one = 1;

  /* Fails harmlessly where the fd is no TCP socket (a pipe in a test). */
  setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Copies what is readable on from to to.  Returns 0 at end of file or
 * on an error, 1 otherwise.
 */
static int
pump (int from, int to)
{
  static char buf[1 << 16];
  ssize_t n = read (from, buf, sizeof buf), off = 0;
  int one = 1;

  if (n <= 0)
    return n == -1 && errno == EINTR;
  setsockopt (from, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
  while (off < n) {
    ssize_t w = write (to, buf + off, n - off);

    if (w == -1 && errno == EINTR)
      continue;
    if (w <= 0)
      return 0;
    off += w;
  }
  return 1;
}

int
main (int argc, char *argv[])
{
  struct sockaddr_in sin = { .sin_family = AF_INET };
  struct pollfd p[2];
  int up;

  if (argc != 2 || (sin.sin_port = htons (atoi (argv[1]))) == 0) {
    fprintf (stderr, "usage: relay PORT\n");
    return 2;
  }
  sin.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
  up = socket (AF_INET, SOCK_STREAM, 0);
  if (up == -1 || connect (up, (struct sockaddr *) &sin, sizeof sin) == -1) {
    fprintf (stderr, "relay: 127.0.0.1:%s: %s\n", argv[1], strerror (errno));
    return 1;
  }
  nodelay (up);
  nodelay (0);
  nodelay (1);
  p[0] = (struct pollfd) { .fd = 0, .events = POLLIN };
  p[1] = (struct pollfd) { .fd = up, .events = POLLIN };
  for (;;) {
    if (poll (p, 2, -1) == -1) {
      if (errno == EINTR)
        continue;
      return 1;
    }
    if (p[0].revents && !pump (0, up))
      return 0;
    if (p[1].revents && !pump (up, 1))
      return 0;
  }
}
