/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-load: ask the throttle filter's control socket what the
 * throttle did.  A blocking exchange after the run, bounded by the
 * run's --timeout, so a stuck server cannot hang the report.
 */

#include <config.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "load.h"

#define MAX_REPLY (1024 * 1024)

char *
load_control_stats (const char *path, double timeout, char *err, size_t errlen)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  static const char cmd[] = "stats\n";
  char *buf = NULL, *nl = NULL;
  size_t len = 0;
  int fd = -1;

  if (strlen (path) >= sizeof addr.sun_path) {
    snprintf (err, errlen, "socket path too long");
    return NULL;
  }
  strcpy (addr.sun_path, path);
  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd == -1 || connect (fd, (struct sockaddr *) &addr, sizeof addr) == -1 ||
      write (fd, cmd, sizeof cmd - 1) != (ssize_t) sizeof cmd - 1) {
    snprintf (err, errlen, "%s", strerror (errno));
    goto fail;
  }
  buf = malloc (MAX_REPLY + 1);
  if (buf == NULL) {
    snprintf (err, errlen, "%s", strerror (errno));
    goto fail;
  }
  while (nl == NULL) {
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    ssize_t r;

    if (len == MAX_REPLY) {
      snprintf (err, errlen, "reply longer than %d bytes", MAX_REPLY);
      goto fail;
    }
    r = poll (&pfd, 1, (int) (timeout * 1000));
    if (r == 0) {
      snprintf (err, errlen, "no reply in %g s", timeout);
      goto fail;
    }
    r = r == -1 ? -1 : read (fd, buf + len, MAX_REPLY - len);
    if (r <= 0) {
      snprintf (err, errlen, "%s", r == 0 ? "connection closed before a reply"
                : strerror (errno));
      goto fail;
    }
    len += r;
    buf[len] = '\0';
    nl = strchr (buf, '\n');
  }
  *nl = '\0';
  close (fd);
  if (strncmp (buf, "{\"error\"", 8) == 0) {
    snprintf (err, errlen, "the throttle answered %s", buf);
    free (buf);
    return NULL;
  }
  return buf;

 fail:
  free (buf);
  if (fd >= 0)
    close (fd);
  return NULL;
}
