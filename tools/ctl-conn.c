/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-ctl: one exchange with the control socket.  Blocking, but
 * every step is bounded by the timeout, so a server that accepts and
 * says nothing, or a full backlog, ends in an error instead of a hang.
 */

#include <config.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "ctl.h"

/* The filter queues at most 4 MiB of replies for a client. */
#define MAX_REPLY (4 * 1024 * 1024)

static double
now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Why connect failed, in words that say what to do about it. */
static void
connect_error (const char *path, int err, double timeout,
               char *msg, size_t len)
{
  struct stat st;

  switch (err) {
  case ENOENT:
    snprintf (msg, len, "%s: no such socket (is nbdkit running with "
              "throttle-control=%s?)", path, path);
    break;
  case EACCES:
  case EPERM:
    snprintf (msg, len, "%s: permission denied (the control socket has "
              "mode 0600: run throttle-ctl as the user nbdkit runs as, "
              "or as root)", path);
    break;
  case ECONNREFUSED:
    if (stat (path, &st) == 0 && !S_ISSOCK (st.st_mode))
      snprintf (msg, len, "%s: not a socket", path);
    else
      snprintf (msg, len, "%s: connection refused: nobody serves this "
                "socket (a stale socket left by an nbdkit that died?)", path);
    break;
  case EAGAIN:
  case ETIMEDOUT:
    snprintf (msg, len, "%s: no connection within %g s (the server "
              "accepts no more connections)", path, timeout);
    break;
  default:
    snprintf (msg, len, "%s: %s", path, strerror (err));
  }
}

/* Connect with the timeout.  Returns the descriptor or -1 with MSG. */
static int
ctl_connect (const char *path, double timeout, char *msg, size_t len)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  struct timeval tv;
  int fd;

  if (strlen (path) >= sizeof addr.sun_path) {
    snprintf (msg, len, "%s: path too long for a Unix socket (at most "
              "%zu bytes)", path, sizeof addr.sun_path - 1);
    return -1;
  }
  strcpy (addr.sun_path, path);
  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd == -1) {
    snprintf (msg, len, "socket: %s", strerror (errno));
    return -1;
  }
  /* A Unix socket's connect waits for room in the backlog for as long
   * as the send timeout allows.
   */
  tv.tv_sec = (time_t) timeout;
  tv.tv_usec = (suseconds_t) ((timeout - tv.tv_sec) * 1e6);
  setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect (fd, (struct sockaddr *) &addr, sizeof addr) == -1) {
    connect_error (path, errno, timeout, msg, len);
    close (fd);
    return -1;
  }
  return fd;
}

/* The end of a reply of several lines (the metrics'). */
static const char text_end[] = "\n# EOF\n";

/* Where the reply in BUF (GOT bytes, NEW of them just read) ends: its
 * first newline, or with TEXT the newline of its "# EOF" line, unless
 * its first line is JSON (an error).  NULL if it has not ended yet.
 */
static char *
reply_end (char *buf, size_t got, size_t new, bool text)
{
  size_t from = got - new, n = sizeof text_end - 1;
  char *p;

  if (!text || buf[0] == '{')
    return memchr (buf + from, '\n', got - from);
  if (got >= n - 1 && memcmp (buf, text_end + 1, n - 1) == 0)
    return buf + n - 2;
  /* The end may straddle two reads. */
  from = from >= n ? from - n : 0;
  p = memmem (buf + from, got - from, text_end, n);
  return p ? p + n - 1 : NULL;
}

/* Send LINE and a newline, read one line back (with TEXT, the lines up
 * to "# EOF").  Returns the reply without its last newline (to free)
 * or NULL with MSG.
 */
static char *
exchange (int fd, const char *path, const char *line, bool text,
          double timeout, char *msg, size_t len)
{
  double deadline = now () + timeout;
  size_t n = strlen (line), off = 0, got = 0;
  char *cmd, *buf = NULL, *nl = NULL;

  if (asprintf (&cmd, "%s\n", line) == -1) {
    snprintf (msg, len, "%s", strerror (errno));
    return NULL;
  }
  n++;
  while (off < n) {
    ssize_t r = send (fd, cmd + off, n - off, MSG_NOSIGNAL);

    if (r == -1) {
      if (errno == EINTR)
        continue;
      snprintf (msg, len, "%s: sending the command: %s", path,
                errno == EAGAIN ? "timed out" : strerror (errno));
      goto fail;
    }
    off += r;
  }

  buf = malloc (MAX_REPLY + 1);
  if (buf == NULL) {
    snprintf (msg, len, "%s", strerror (errno));
    goto fail;
  }
  while (nl == NULL) {
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    double left = deadline - now ();
    ssize_t r;

    if (got == MAX_REPLY) {
      snprintf (msg, len, "%s: the reply is longer than %d bytes: not a "
                "throttle control socket?", path, MAX_REPLY);
      goto fail;
    }
    r = left > 0 ? poll (&pfd, 1, (int) (left * 1000) + 1) : 0;
    if (r == -1 && errno == EINTR)
      continue;
    if (r == 0) {
      snprintf (msg, len, "%s: no reply within %g s (the server does "
                "not answer: not a throttle control socket, or stuck?)",
                path, timeout);
      goto fail;
    }
    r = r == -1 ? -1 : read (fd, buf + got, MAX_REPLY - got);
    if (r == -1 && errno == EINTR)
      continue;
    if (r == -1 && errno != ECONNRESET) {
      snprintf (msg, len, "%s: reading the reply: %s", path,
                strerror (errno));
      goto fail;
    }
    /* A server of another protocol may reset the connection on the
     * command it did not expect (an NBD server does).
     */
    if (r <= 0) {
      if (got == 0)
        snprintf (msg, len, "%s: the server %s the connection without "
                  "a reply: not a throttle control socket?", path,
                  r == 0 ? "closed" : "reset");
      else
        snprintf (msg, len, "%s: the server closed the connection in the "
                  "middle of a reply (%zu bytes, no newline): not a "
                  "throttle control socket?", path, got);
      goto fail;
    }
    got += r;
    nl = reply_end (buf, got, r, text);
  }
  *nl = '\0';
  if (memchr (buf, '\0', nl - buf) != NULL) {
    snprintf (msg, len, "%s: the reply holds a NUL byte: not a throttle "
              "control socket?", path);
    goto fail;
  }
  free (cmd);
  return buf;

 fail:
  free (cmd);
  free (buf);
  return NULL;
}

/* The first bytes of a reply, printable, for an error message. */
static const char *
excerpt (const char *s, char *buf, size_t len)
{
  size_t i, o = 0;

  for (i = 0; s[i] && o + 5 < len && i < 60; i++)
    if (s[i] >= 0x20 && s[i] < 0x7f)
      buf[o++] = s[i];
    else
      o += snprintf (buf + o, len - o, "\\x%02x", (unsigned char) s[i]);
  if (s[i] && o + 4 < len)
    o += snprintf (buf + o, len - o, "...");
  buf[o] = '\0';
  return buf;
}

json_object *
ctl_ask (const char *path, const char *line, double timeout, char **raw,
         char *err, size_t errlen)
{
  json_object *reply;
  const char *e;
  char why[256], ex[320];
  char *buf;
  int fd;

  *raw = NULL;
  fd = ctl_connect (path, timeout, err, errlen);
  if (fd == -1)
    return NULL;
  buf = exchange (fd, path, line, false, timeout, err, errlen);
  close (fd);
  if (buf == NULL)
    return NULL;

  reply = reply_parse (buf, why, sizeof why);
  if (reply == NULL) {
    snprintf (err, errlen, "%s: the reply is %s: \"%s\": not a throttle "
              "control socket?", path, why, excerpt (buf, ex, sizeof ex));
    goto fail;
  }
  if (json_object_object_get_ex (reply, "error", NULL)) {
    e = reply_string (reply, "error");
    snprintf (err, errlen, "%s: the server refused: %s", path,
              e ? e : "(no message)");
    goto fail;
  }
  *raw = buf;
  return reply;

 fail:
  json_object_put (reply);
  free (buf);
  return NULL;
}

char *
ctl_ask_text (const char *path, const char *line, double timeout,
              char *err, size_t errlen)
{
  char *buf;
  int fd;

  fd = ctl_connect (path, timeout, err, errlen);
  if (fd == -1)
    return NULL;
  buf = exchange (fd, path, line, true, timeout, err, errlen);
  close (fd);
  /* The error line whole, as the server wrote it: the text is the
   * reply as it is, and so is its refusal.
   */
  if (buf && buf[0] == '{') {
    snprintf (err, errlen, "%s: the server refused: %s", path, buf);
    free (buf);
    return NULL;
  }
  return buf;
}
