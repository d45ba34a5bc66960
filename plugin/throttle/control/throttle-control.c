/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the control socket and the metrics file's
 * timer.
 *
 * One thread runs a libev loop that serves line-oriented commands on a
 * Unix socket (see CONTROL SOCKET in nbdkit-throttle-filter(1)); this
 * file is the socket, throttle-control-proto.c the commands.  The
 * loop never blocks: sockets are non-blocking, each client has a
 * bounded input line and a bounded output, a client that stops reading
 * is no longer read from and is dropped when idle, and the commands
 * take only locks that no thread holds across a plugin call or a wait:
 * the registry's, then per export its adapt lock, its write-behind
 * queue's and pool's and its budget's, and the server's budget, the
 * clock's and the real-time lock (HACKING.md, "Locks").  So no
 * operator's client can stall the data path or the other operators.
 * Nor lock them out: at MAX_CLIENTS a new client takes the place of
 * the one idle longest (evict_longest_idle), so that an operator gets
 * in whatever the others do, without waiting for their idle timeout.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <ev.h>

#include <nbdkit-filter.h>

#include "throttle-config.h"
#include "throttle-control.h"
#include "throttle-control-proto.h"
#include "throttle-export.h"
#include "throttle-json.h"
#include "throttle-metrics.h"
#include "throttle-params.h"
#include "throttle-parse.h"

/* A command line, without its newline, is at most this long. */
#define MAX_LINE 1024
#define MAX_CLIENTS 32
#define DEFAULT_IDLE_TIMEOUT 30

/* -D throttle.control_timeout=SECS: the idle timeout of a control
 * client (default 30 s).  Tests shorten it.
 */
NBDKIT_DLL_PUBLIC int throttle_debug_control_timeout = 0;

static char *socket_path;
static const char *socket_text;         /* as given, for its errors */

static int listen_fd = -1;
static pid_t owner_pid;            /* the process that may remove the socket */
static dev_t socket_dev;
static ino_t socket_ino;

static struct ev_loop *control_loop;
static ev_async stop_watcher;
static ev_io accept_watcher;
static ev_timer accept_retry;
static ev_timer metrics_timer;
static pthread_t thread;

/* --- clients ----------------------------------------------------------- */

struct client {
  struct client *prev, *next;
  int fd;
  ev_io rio, wio;
  ev_timer idle;
  bool closing;               /* close once the output is flushed */
  /* Replies not yet sent: an open_memstream(3) stream, opened at the
   * first reply and closed once all of it is sent.  buf and len are
   * those of the last fflush.
   */
  FILE *out;
  char *buf;
  size_t len;
  size_t outoff;              /* how much of buf was sent */
  size_t inlen;
  char in[MAX_LINE + 2];      /* a line, its '\n', and a NUL */
};

static struct client *clients;
static unsigned nclients;

static void
drop_client (struct client *c, const char *why)
{
  if (why)
    nbdkit_debug ("throttle: control: client dropped: %s", why);
  ev_io_stop (control_loop, &c->rio);
  ev_io_stop (control_loop, &c->wio);
  ev_timer_stop (control_loop, &c->idle);
  close (c->fd);
  if (c->prev)
    c->prev->next = c->next;
  else
    clients = c->next;
  if (c->next)
    c->next->prev = c->prev;
  nclients--;
  if (c->out)
    fclose (c->out);
  free (c->buf);
  free (c);
}

/* Drop C with LINE, an error reply, sent first if it can be without
 * waiting (the rest of it lost if only a part fits) and only when no
 * reply of C's is pending: a line after part of a reply would read as
 * garbage, and a reply pending means its socket was full at the last
 * send.
 */
static void
drop_client_saying (struct client *c, const char *line, const char *why)
{
  if (c->len == c->outoff)
    (void) !send (c->fd, line, strlen (line), MSG_DONTWAIT | MSG_NOSIGNAL);
  drop_client (c, why);
}

/* Send what can be sent now; drops the client on an error, or once
 * all is sent if it is closing.
 */
static void
flush_client (struct client *c)
{
  while (c->outoff < c->len) {
    ssize_t n = send (c->fd, c->buf + c->outoff, c->len - c->outoff,
                      MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == -1) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        break;
      drop_client (c, throttle_errtext (errno));
      return;
    }
    c->outoff += n;
    ev_timer_again (control_loop, &c->idle);
  }

  if (c->outoff == c->len) {
    if (c->out)
      fclose (c->out);
    free (c->buf);
    c->out = NULL;
    c->buf = NULL;
    c->len = c->outoff = 0;
    ev_io_stop (control_loop, &c->wio);
    if (c->closing)
      drop_client (c, NULL);
    else
      ev_io_start (control_loop, &c->rio);
  }
  else {
    /* Read no more commands from a client that does not read its
     * replies: its output stays bounded, and the idle timer drops it.
     */
    ev_io_stop (control_loop, &c->rio);
    ev_io_start (control_loop, &c->wio);
  }
}

/* Execute the complete lines received, and answer a line too long
 * with an error and closing.  Returns false if memory ran out or the
 * replies not yet sent are over the bound: checked after each line, so
 * they never grow past it by more than one reply.  The stream of the
 * replies is opened at the first.
 */
static bool
process_lines (struct client *c)
{
  char *nl;

  while (!c->closing) {
    nl = memchr (c->in, '\n', c->inlen);
    if (nl == NULL && c->inlen <= MAX_LINE)
      break;
    if (c->out == NULL &&
        (c->out = open_memstream (&c->buf, &c->len)) == NULL)
      return false;
    if (nl == NULL) {
      throttle_json_error (c->out, "line too long (more than %d bytes): "
                           "closing", MAX_LINE);
      c->inlen = 0;
      c->closing = true;
      return fflush (c->out) != EOF;
    }
    if (memchr (c->in, '\0', nl - c->in) != NULL)
      throttle_json_error (c->out, "NUL byte in a command");
    else {
      *nl = '\0';
      if (nl > c->in && nl[-1] == '\r')
        nl[-1] = '\0';
      throttle_control_execute (c->out, c->in);
    }
    c->inlen -= nl + 1 - c->in;
    memmove (c->in, nl + 1, c->inlen);
    if (fflush (c->out) == EOF || c->len > THROTTLE_CONTROL_MAX_OUTPUT)
      return false;
  }
  return true;
}

static void
client_read_cb (struct ev_loop *loop, ev_io *w, int revents)
{
  struct client *c = w->data;
  ssize_t n;

  n = recv (c->fd, c->in + c->inlen, MAX_LINE + 1 - c->inlen, MSG_DONTWAIT);
  if (n == -1) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      drop_client (c, throttle_errtext (errno));
    return;
  }
  if (n == 0) {
    /* A half-written last line is dropped: it may be cut anywhere. */
    c->closing = true;
    if (c->len == c->outoff)
      drop_client (c, c->inlen ? "closed in the middle of a line" : NULL);
    else
      ev_io_stop (loop, &c->rio);
    return;
  }
  c->inlen += n;
  ev_timer_again (loop, &c->idle);
  if (!process_lines (c)) {
    drop_client (c, "its replies back up");
    return;
  }
  flush_client (c);
}

static void
client_write_cb (struct ev_loop *loop, ev_io *w, int revents)
{
  flush_client (w->data);
}

static void
client_idle_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  drop_client_saying (w->data,
                      "{\"error\":\"idle for too long: closing\"}\n",
                      "idle");
}

/* The socket is full and a new client is in: close the client idle
 * longest, so that an operator gets in whatever the others do
 * (a script hung with its connection open, or one that sends commands
 * and never reads the replies), long before their idle timeout.  The
 * socket is its owner's only (0600): these are stuck clients, not an
 * attacker, who could as well send "set capacity" itself.
 *
 * Idle longest: its idle timer is due first.  That timer starts again
 * at each byte read from the client or sent to it, with the same
 * timeout for all, on the monotonic clock, so no time need be kept
 * beside it.  A client whose replies are blocked because it does not
 * read them is idle since the last send that made progress, however
 * much is pending.  A command of its not read in full, even one that
 * came in this same turn of the loop, is not run (a command runs once
 * its whole line is read, and its reply goes out before any error
 * line): its client gets the error line, or with replies pending only
 * the close, instead of a reply.  Timers started again in the same
 * turn are due at the same time: of those, the client accepted first
 * goes (the list is newest first, and <= keeps the last of equals).
 * The new client is not in the list yet, so it is not the one closed
 * now; later it is like any other: if all the others have been active
 * since its accept, the next newcomer closes it, even before its first
 * command is read.
 */
static void
evict_longest_idle (void)
{
  struct client *c, *oldest = clients;

  for (c = clients; c; c = c->next)
    if (ev_timer_remaining (control_loop, &c->idle) <=
        ev_timer_remaining (control_loop, &oldest->idle))
      oldest = c;
  drop_client_saying (oldest,
                      "{\"error\":\"closed: the control socket is full "
                      "and this client was idle longest\"}\n",
                      "idle longest with the socket full");
}

static void
accept_cb (struct ev_loop *loop, ev_io *w, int revents)
{
  static const char nomem[] = "{\"error\":\"out of memory: closing\"}\n";
  struct client *c;
  int fd;

  fd = accept4 (listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd == -1) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
        errno == ENOMEM) {
      /* The connection stays queued and the socket readable: stop
       * watching for a while instead of spinning.  Closing a client to
       * free a descriptor would be no cure: the limit is the process's,
       * spent by NBD connections and the plugin, whose threads may
       * take the one freed before this accept does.  Meanwhile the
       * backlog (bind_socket) keeps new connections, whose clients wait
       * (throttle-ctl up to its --timeout): the one case where an
       * operator waits, for a descriptor, not for a place.
       */
      nbdkit_debug ("throttle: control: accept: %s: pausing for 1 s",
                    throttle_errtext (errno));
      ev_io_stop (loop, &accept_watcher);
      ev_timer_start (loop, &accept_retry);
    }
    return;
  }
  c = calloc (1, sizeof *c);
  if (c == NULL) {
    (void) !send (fd, nomem, sizeof nomem - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    close (fd);
    return;
  }
  if (nclients >= MAX_CLIENTS)
    evict_longest_idle ();
  c->fd = fd;
  ev_io_init (&c->rio, client_read_cb, fd, EV_READ);
  ev_io_init (&c->wio, client_write_cb, fd, EV_WRITE);
  ev_init (&c->idle, client_idle_cb);
  c->idle.repeat = throttle_debug_control_timeout > 0 ?
    throttle_debug_control_timeout : DEFAULT_IDLE_TIMEOUT;
  c->rio.data = c->wio.data = c->idle.data = c;
  ev_io_start (loop, &c->rio);
  ev_timer_again (loop, &c->idle);
  c->next = clients;
  if (clients)
    clients->prev = c;
  clients = c;
  nclients++;
}

static void
accept_retry_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  ev_io_start (loop, &accept_watcher);
}

/* A file write on the loop: the file is small, and where it is (a
 * local directory, not the device this server serves) is the
 * operator's choice (nbdkit-throttle-filter(1)).
 */
static void
metrics_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  throttle_metrics_file_update (true);
}

static void
stop_cb (struct ev_loop *loop, ev_async *w, int revents)
{
  ev_break (loop, EVBREAK_ALL);
}

static void *
control_thread (void *arg)
{
  ev_run (control_loop, 0);
  return NULL;
}

/* --- configuration and life cycle -------------------------------------- */

const struct throttle_param throttle_control_param_table[] = {
  { "throttle-control", THROTTLE_PARAM_STRING, &socket_text,
    .why = "expected the path of a Unix socket" },
  { NULL }
};

/* Bind now, before nbdkit forks, so that a bad path stops the server
 * with an error instead of leaving a daemon without its socket.
 */
static int
bind_socket (void)
{
  struct sockaddr_un sun = { .sun_family = AF_UNIX };
  struct stat st;
  mode_t old_umask;
  int fd, r, err;

  strcpy (sun.sun_path, socket_path);

  if (lstat (socket_path, &st) == 0) {
    if (!S_ISSOCK (st.st_mode)) {
      nbdkit_error ("throttle-control=%s: exists and is not a socket: "
                    "refusing to replace it", socket_text);
      return -1;
    }
    /* A socket somebody serves is not stale.  Non-blocking, so that a
     * server whose backlog is full fails the probe (EAGAIN) instead of
     * holding up the start.
     */
    fd = socket (AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1) {
      nbdkit_error ("throttle-control=%s: socket: %s", socket_text,
                    throttle_errtext (errno));
      return -1;
    }
    r = connect (fd, (struct sockaddr *) &sun, sizeof sun);
    err = errno;
    close (fd);
    if (r == 0) {
      nbdkit_error ("throttle-control=%s: another process is serving "
                    "this socket", socket_text);
      return -1;
    }
    /* Only ECONNREFUSED says that nobody listens (and ENOENT that it
     * is gone already).  Any other failure leaves it unknown: EACCES
     * is another user's socket, maybe served, in a directory we may
     * write to; never remove that.
     */
    if (err != ECONNREFUSED && err != ENOENT) {
      nbdkit_error ("throttle-control=%s: cannot tell whether another "
                    "process is serving this socket (connect: %s): "
                    "refusing to replace it",
                    socket_text, throttle_errtext (err));
      return -1;
    }
    if (unlink (socket_path) == -1 && errno != ENOENT) {
      nbdkit_error ("throttle-control=%s: cannot remove the stale socket: %s",
                    socket_text, throttle_errtext (errno));
      return -1;
    }
  }
  else if (errno != ENOENT) {
    nbdkit_error ("throttle-control=%s: %s", socket_text,
                  throttle_errtext (errno));
    return -1;
  }

  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd == -1) {
    nbdkit_error ("throttle-control=%s: socket: %s", socket_text,
                  throttle_errtext (errno));
    return -1;
  }
  /* Whoever can connect can change the capacity: owner only, from the
   * first instant the name exists (the umask), and 0600 once bound.
   */
  old_umask = umask (0077);
  r = bind (fd, (struct sockaddr *) &sun, sizeof sun);
  umask (old_umask);
  if (r == -1) {
    nbdkit_error ("throttle-control=%s: bind: %s", socket_text,
                  throttle_errtext (errno));
    close (fd);
    return -1;
  }
  /* The backlog holds the connections not accepted yet: a burst that
   * comes between two turns of the loop, or all that come during a
   * pause of accept (accept_cb).  Beyond it a blocking connect waits
   * (throttle-ctl's up to its --timeout) and a non-blocking one fails
   * with EAGAIN.  MAX_CLIENTS does not bound it: every connection
   * queued is accepted, in turn, closing the client idle longest.  So
   * as large as the kernel allows (net.core.somaxconn), so that a burst
   * queues; each connection queued costs the kernel a socket pair,
   * charged to the socket's owner, the only user who can connect.
   */
  if (chmod (socket_path, 0600) == -1 || lstat (socket_path, &st) == -1 ||
      listen (fd, SOMAXCONN) == -1) {
    nbdkit_error ("throttle-control=%s: %s", socket_text,
                  throttle_errtext (errno));
    unlink (socket_path);
    close (fd);
    return -1;
  }
  socket_dev = st.st_dev;
  socket_ino = st.st_ino;
  owner_pid = getpid ();
  listen_fd = fd;
  nbdkit_debug ("throttle: control socket %s", socket_path);
  return 0;
}

int
throttle_control_config_complete (void)
{
  struct sockaddr_un sun;

  if (socket_text == NULL)
    return 0;
  /* nbdkit changes to / when it forks into the background. */
  socket_path = nbdkit_absolute_path (socket_text);
  if (socket_path == NULL)
    return -1;
  if (strlen (socket_path) >= sizeof sun.sun_path) {
    nbdkit_error ("throttle-control=%s: path too long for a Unix socket "
                  "(at most %zu bytes)", socket_text, sizeof sun.sun_path - 1);
    return -1;
  }
  return bind_socket ();
}

int
throttle_control_after_fork (void)
{
  double metrics_interval = throttle_metrics_file_interval ();
  sigset_t all, old;
  int err;

  if (listen_fd == -1 && metrics_interval == 0)
    return 0;

  owner_pid = getpid ();
  control_loop = ev_loop_new (EVFLAG_AUTO | EVFLAG_NOSIGMASK);
  if (control_loop == NULL) {
    nbdkit_error ("throttle: cannot create the control thread's event loop");
    return -1;
  }
  ev_async_init (&stop_watcher, stop_cb);
  ev_async_start (control_loop, &stop_watcher);
  if (listen_fd >= 0) {
    ev_io_init (&accept_watcher, accept_cb, listen_fd, EV_READ);
    ev_io_start (control_loop, &accept_watcher);
    ev_timer_init (&accept_retry, accept_retry_cb, 1., 0.);
  }
  if (metrics_interval > 0) {
    /* At once (the process that serves may be a fork of the one that
     * wrote the first), then every interval.
     */
    ev_timer_init (&metrics_timer, metrics_cb, 0., metrics_interval);
    ev_timer_start (control_loop, &metrics_timer);
  }

  /* Signals are nbdkit's business: the thread inherits a full mask. */
  sigfillset (&all);
  pthread_sigmask (SIG_SETMASK, &all, &old);
  err = pthread_create (&thread, NULL, control_thread, NULL);
  pthread_sigmask (SIG_SETMASK, &old, NULL);
  if (err) {
    nbdkit_error ("throttle: cannot start the control thread: %s",
                  throttle_errtext (err));
    ev_loop_destroy (control_loop);
    control_loop = NULL;
    return -1;
  }
  return 0;
}

void
throttle_control_cleanup (void)
{
  struct stat st;

  /* The loop exists while its thread runs (throttle_control_after_fork). */
  if (control_loop) {
    ev_async_send (control_loop, &stop_watcher);
    pthread_join (thread, NULL);
    while (clients)
      drop_client (clients, NULL);
    ev_loop_destroy (control_loop);
    control_loop = NULL;
  }
  if (listen_fd >= 0) {
    close (listen_fd);
    listen_fd = -1;
    /* Only ours: not a socket another server has since put there. */
    if (getpid () == owner_pid && lstat (socket_path, &st) == 0 &&
        st.st_dev == socket_dev && st.st_ino == socket_ino)
      unlink (socket_path);
  }
  free (socket_path);
  socket_path = NULL;
}
