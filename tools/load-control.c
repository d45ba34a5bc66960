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

#include "json-reply.h"
#include "load.h"

#define MAX_REPLY (1024 * 1024)

/* The counters report_server_human prints. */
static const char *const counters[] = {
  "capacity", "peak", "charged", "admitted", "waited", "wait_ns_total",
  "wait_ns_max",
};

/* Whether REPLY is the filter's answer to "stats"; else ERR says why. */
static bool
is_stats (json_object *reply, char *err, size_t errlen)
{
  json_object *exports = reply_member (reply, "exports", json_type_array);
  size_t i, j, n;
  uint64_t u;

  if (exports == NULL) {
    snprintf (err, errlen, "the reply has no \"exports\" array: not a "
              "throttle control socket?");
    return false;
  }
  n = json_object_array_length (exports);
  for (i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx (exports, i);

    if (reply_string (e, "name") == NULL) {
      snprintf (err, errlen, "export %zu of the reply has no name: not a "
                "throttle control socket?", i);
      return false;
    }
    for (j = 0; j < sizeof counters / sizeof counters[0]; j++)
      if (!reply_uint (e, counters[j], &u)) {
        snprintf (err, errlen, "export %zu of the reply has no \"%s\": "
                  "not a throttle control socket?", i, counters[j]);
        return false;
      }
  }
  return true;
}

json_object *
load_control_stats (const char *path, double timeout, char *err, size_t errlen)
{
  json_object *reply;
  const char *refused;
  char why[256];
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
  fd = -1;
  reply = reply_parse (buf, why, sizeof why);
  if (reply == NULL) {
    snprintf (err, errlen, "the reply is %s: not a throttle control "
              "socket?", why);
    goto fail;
  }
  if (json_object_object_get_ex (reply, "error", NULL)) {
    refused = reply_string (reply, "error");
    snprintf (err, errlen, "the throttle refused: %s",
              refused ? refused : "(no message)");
    json_object_put (reply);
    goto fail;
  }
  if (!is_stats (reply, err, errlen)) {
    json_object_put (reply);
    goto fail;
  }
  free (buf);
  return reply;

 fail:
  free (buf);
  if (fd >= 0)
    close (fd);
  return NULL;
}
