/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the real-time switch of throttle-rt (see
 * throttle-guards.h), and who is at the other end of a connection as
 * it judges them.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <nbdkit-filter.h>

#include "throttle-clock.h"
#include "throttle-config.h"
#include "throttle-feature.h"
#include "throttle-guards.h"
#include "throttle-json.h"
#include "throttle-lock.h"
#include "throttle-parse.h"
#include "throttle-realtime.h"
#include "throttle-rtpolicy.h"
#include "throttle-verdict.h"

/* throttle_guard_words names the modes of both. */
_Static_assert ((int) THROTTLE_RT_OFF == (int) THROTTLE_GUARD_OFF &&
                (int) THROTTLE_RT_AUTO == (int) THROTTLE_GUARD_AUTO &&
                (int) THROTTLE_RT_ON == (int) THROTTLE_GUARD_ON,
                "enum throttle_rt_mode is not enum throttle_guard_mode");

static const struct sched_param fifo_1 = { .sched_priority = 1 };
static const struct sched_param other = { .sched_priority = 0 };

/* The parameters, read only after .config. */
static const struct throttle_guards_params *const gp =
  &throttle_guards_params;

/* Whether SCHED_FIFO is permitted: set by throttle_realtime_start,
 * before any thread that reads it.
 */
static bool permitted;

/* Whether the process is real-time now (rt_on), and the state machine
 * that decides it.  Lock rule: rt_lock serializes every change of rt_state and rt_on
 * (rt_apply_locked: the walk over the tasks and its static buffer,
 * rt_why, rt_since).  rt_on is read without it.
 */
static pthread_mutex_t rt_lock = THROTTLE_LOCK_INITIALIZER;
static struct throttle_rt rt_state;
static atomic_bool rt_on;
static char rt_why[256];
static uint64_t rt_since;               /* throttle_now_ns () at the switch */
/* The watcher thread, which stays SCHED_FIFO whatever the mode. */
static atomic_int psi_tid;

/* /proc/self/task, opened in after_fork: walking it must not allocate
 * (opendir does), since memory pressure is one reason to walk it.
 */
static int task_dir_fd = -1;
/* The watcher: a PSI trigger on throttle-rt-pressure, and a pipe that wakes it
 * ("w": the hold may have changed) or stops it ("x").
 */
static int psi_fd = -1;
static int psi_stop[2] = { -1, -1 };
static pthread_t psi_thread;             /* running while psi_stop[1] >= 0 */

/* Is the process /proc/PID one that hands its NBD socket to the
 * kernel's nbd driver?  By its comm, the name of the file it executed
 * (unless it renamed itself), into name (len bytes).  Anyone can take
 * the name: this only tells a trusted peer's kernel client from its
 * other clients.
 */
static bool
pid_is_kernel_client (int64_t pid, char *name, size_t len)
{
  char path[64];
  ssize_t r = -1;
  int fd;

  snprintf (path, sizeof path, "/proc/%" PRIi64 "/comm", pid);
  fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    r = read (fd, name, len - 1);
    close (fd);
  }
  if (r <= 0) {
    snprintf (name, len, "?");
    return false;
  }
  name[r] = '\0';
  name[strcspn (name, "\n")] = '\0';
  return strcmp (name, "nbd-client") == 0 || strcmp (name, "qemu-nbd") == 0;
}

/* The owner of the TCP socket on this machine whose local address is
 * a6 (an IPv4 address mapped) port, from the socket tables of
 * nbdkit's network namespace (a loopback peer is in it).  The owner is
 * whoever created the socket; a kernel client's socket keeps it after
 * nbd-client hands it over.
 */
static bool
tcp_peer_uid (const struct in6_addr *a6, uint16_t port, uid_t *uid)
{
  char want[2][THROTTLE_RT_TCP_ADDR_LEN + 1], line[512];
  const char *tables[2] = { "/proc/self/net/tcp", "/proc/self/net/tcp6" };
  bool found = false;
  size_t i;

  /* The peer's socket is in one table or the other, depending on its
   * family, not on ours: look for both spellings of an IPv4 address.
   */
  if (IN6_IS_ADDR_V4MAPPED (a6))
    throttle_rt_tcp_addr (&a6->s6_addr[12], 4, port, want[0]);
  else
    tables[0] = NULL;
  throttle_rt_tcp_addr (a6->s6_addr, 16, port, want[1]);
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

/* The class of the calling thread's connection's peer, and what was
 * found, into why (len bytes) either way.  Call from .open.
 */
static enum throttle_rt_peer
classify_peer (char *why, size_t len)
{
  struct sockaddr_storage ss;
  socklen_t sslen = sizeof ss;
  char name[64], addr[INET6_ADDRSTRLEN] = "?", who[128];
  struct in6_addr a6 = { .s6_addr = { [10] = 0xff, [11] = 0xff } };
  uint16_t port = 0;
  enum throttle_rt_peer c;
  int64_t pid, uid;
  uid_t tuid;
  bool kname = false, tcp = true;

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
    snprintf (who, sizeof who, "peer PID %" PRIi64 " is %s", pid, name);
    tcp = false;
    break;
  case AF_INET: {
    const struct sockaddr_in *sin = (const struct sockaddr_in *) &ss;

    inet_ntop (AF_INET, &sin->sin_addr, addr, sizeof addr);
    memcpy (&a6.s6_addr[12], &sin->sin_addr, 4);
    port = ntohs (sin->sin_port);
    break;
  }
  case AF_INET6: {
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *) &ss;

    inet_ntop (AF_INET6, &sin6->sin6_addr, addr, sizeof addr);
    a6 = sin6->sin6_addr;
    port = ntohs (sin6->sin6_port);
    break;
  }
  default:
    snprintf (why, len, "peer of address family %d, not on this machine",
              (int) ss.ss_family);
    return THROTTLE_RT_PEER_OTHER;
  }
  if (tcp) {
    if (!IN6_IS_ADDR_LOOPBACK (&a6) &&
        !(IN6_IS_ADDR_V4MAPPED (&a6) && a6.s6_addr[12] == 127)) {
      snprintf (why, len, "TCP peer %s, not on this machine", addr);
      return THROTTLE_RT_PEER_OTHER;
    }
    snprintf (who, sizeof who, "TCP peer %s port %u on loopback", addr,
              (unsigned) port);
    if (!tcp_peer_uid (&a6, port, &tuid)) {
      snprintf (why, len, "%s, owner not found: never real-time", who);
      return THROTTLE_RT_PEER_OTHER;
    }
    uid = tuid;
  }
  /* A loopback TCP peer's process cannot be known (a kernel client's
   * socket has none): at most trusted.
   */
  c = throttle_rt_classify (uid, geteuid (), kname);
  snprintf (why, len, "%s, uid %" PRIi64 ", %s", who, uid,
            c == THROTTLE_RT_PEER_KERNEL ?
            "a kernel nbd client on this machine" :
            c == THROTTLE_RT_PEER_OTHER ?
            "neither root nor the server's uid: never real-time" :
            tcp ? "which may be a kernel nbd client (real-time only under "
            "memory pressure)" :
            "not a kernel nbd client (real-time only under memory "
            "pressure)");
  return c;
}

/* Sets thread tid's (0: the caller's) policy to SCHED_FIFO with the
 * flags fifo (on) or to SCHED_OTHER, unless it has it already.
 * Returns 1 if it changed it, 0 if not needed, -1 with errno.  Needs
 * no lock and allocates nothing.
 */
static int
rt_set_policy (pid_t tid, bool on, int fifo)
{
  const int policy = sched_getscheduler (tid);
  const bool is_fifo = (policy & ~SCHED_RESET_ON_FORK) == SCHED_FIFO;

  if (policy == -1)
    return -1;
  if (on ? is_fifo && (policy & fifo) == fifo : !is_fifo)
    return 0;
  if (sched_setscheduler (tid, on ? fifo : SCHED_OTHER,
                          on ? &fifo_1 : &other) == -1)
    return -1;
  return 1;
}

/* Sets the policy of every thread of the process but the watcher to
 * SCHED_FIFO (on) or SCHED_OTHER, and returns how many it changed.
 * Threads created later inherit it from their creator (the main thread
 * is among those walked); a thread the walk misses, or one that set
 * its own policy from a stale rt_on meanwhile, switches itself at its
 * next throttle_thread_enter (each switch renews the threads).  Caller
 * holds rt_lock (the buffer is static: no allocation under memory
 * pressure).
 */
static unsigned
rt_set_all_threads (bool on)
{
  static char buf[4096] __attribute__ ((aligned (8)));
  const pid_t watcher = atomic_load (&psi_tid);
  unsigned n = 0;
  long len, off;

  if (task_dir_fd == -1 || lseek (task_dir_fd, 0, SEEK_SET) == -1)
    return 0;
  while ((len = syscall (SYS_getdents64, task_dir_fd, buf, sizeof buf)) > 0) {
    for (off = 0; off < len;) {
      /* struct linux_dirent64: ino, off, reclen, type, name. */
      unsigned short reclen;
      const char *name = buf + off + 19;
      pid_t tid = 0;

      memcpy (&reclen, buf + off + 16, sizeof reclen);
      off += reclen;
      for (; *name >= '0' && *name <= '9'; name++)
        tid = tid * 10 + (*name - '0');
      if (tid > 0 && *name == '\0' && tid != watcher &&
          rt_set_policy (tid, on, SCHED_FIFO) == 1)
        n++;
    }
  }
  return n;
}

/* Decides from rt_state at now and switches the whole process if the
 * answer changed; event says what happened (for the log and stats).
 * The whole process, not one connection: writeback writers and every
 * connection's requests share the budget with the connection that
 * needs it, and a SCHED_OTHER thread holding it would stall the
 * real-time ones.  An event that finds it real-time already walks the
 * threads again: one started since the switch by a request thread is
 * SCHED_OTHER (request threads reset their policy on fork, for the
 * plugin's children), such as the reader that nbdkit's nbd plugin
 * starts when nbdkit's retry filter reopens it after the storage went
 * away, and memory pressure is when it must not wait behind the
 * real-time ones.  Returns when to decide again without an event (0:
 * never).  Caller holds rt_lock.  Allocates nothing unless nbdkit runs
 * verbose (its debug message): the watcher calls it under memory
 * pressure.
 */
static uint64_t
rt_apply_locked (uint64_t now, const char *event)
{
  uint64_t recheck;
  struct timespec wall;
  unsigned n;
  bool want;

  throttle_lock_assert_held (&rt_lock);
  want = throttle_rt_wanted (&rt_state, now, &recheck);
  if (want == atomic_load (&rt_on)) {
    if (want && event && (n = rt_set_all_threads (true)) > 0)
      nbdkit_debug ("throttle: guards: real-time: SCHED_FIFO set on %u "
                    "threads started since the switch", n);
    return recheck;
  }
  atomic_store (&rt_on, want);
  throttle_threads_renew ();
  rt_since = now;
  if (want && event)
    snprintf (rt_why, sizeof rt_why, "%s", event);
  else
    snprintf (rt_why, sizeof rt_why, "%s", rt_state.reason);
  n = rt_set_all_threads (want);
  clock_gettime (CLOCK_REALTIME, &wall);
  nbdkit_debug ("throttle: guards: real-time %s: %s: %s set on %u threads "
                "at %lld.%06ld", want ? "on" : "off", rt_why,
                want ? "SCHED_FIFO" : "SCHED_OTHER", n,
                (long long) wall.tv_sec, wall.tv_nsec / 1000);
  return recheck;
}

/* Tells the watcher to decide again (the hold may have changed). */
static void
rt_wake_watcher (void)
{
  if (psi_stop[1] >= 0 && write (psi_stop[1], "w", 1) != 1 &&
      errno != EAGAIN)
    nbdkit_debug ("throttle: guards: cannot wake the real-time watcher: %s",
                  throttle_errtext (errno));
}

int
throttle_realtime_open (const char *exportname, void **peer)
{
  char why[256];
  enum throttle_rt_peer c;

  /* Whatever real-time may do: the verdict speaks up when a kernel
   * client attaches to a server that is not safe for it.
   */
  c = classify_peer (why, sizeof why);
  throttle_verdict_peer (c, why);
  *peer = (void *) (intptr_t) -1;
  if (!permitted)
    return 0;
  throttle_lock (&rt_lock);
  throttle_rt_peer_open (&rt_state, c, throttle_now_ns ());
  rt_apply_locked (throttle_now_ns (), why);
  throttle_unlock (&rt_lock);
  if (throttle_debug_verbose)
    nbdkit_debug ("throttle: guards: throttle-rt peer: %s: real-time %s",
                  why, atomic_load (&rt_on) ? "on" : "off");
  *peer = (void *) (intptr_t) c;
  return 0;
}

void
throttle_realtime_close (void *state)
{
  int peer = (int) (intptr_t) state;

  if (peer < 0)
    return;
  throttle_lock (&rt_lock);
  throttle_rt_peer_close (&rt_state, peer, throttle_now_ns ());
  rt_apply_locked (throttle_now_ns (), NULL);
  throttle_unlock (&rt_lock);
  rt_wake_watcher ();
}

/* The JSON member ,"rt":{...} (mode, whether on and why, the peers,
 * the hold), after its comma: a report's json (throttle-metrics.h), of
 * the top-level object alone.
 */
void
throttle_realtime_stats_json (FILE *fp, struct throttle_export *exp)
{
  struct throttle_rt st;
  char why[sizeof rt_why];
  uint64_t recheck = 0, since, now = throttle_now_ns ();
  bool on;

  if (exp != NULL)
    return;
  throttle_lock (&rt_lock);
  on = atomic_load (&rt_on);
  st = rt_state;
  if (permitted)
    throttle_rt_wanted (&st, now, &recheck);
  memcpy (why, rt_why, sizeof why);
  since = rt_since;
  throttle_unlock (&rt_lock);

  fprintf (fp, ",\"rt\":{\"mode\":\"%s\",\"on\":%s,\"why\":",
           throttle_guard_words[permitted ? st.mode : THROTTLE_RT_OFF],
           on ? "true" : "false");
  throttle_json_string (fp, !permitted ?
                        "not permitted (throttle-rt=off at start, or "
                        "SCHED_FIFO refused)" :
                        why[0] ? why : st.reason);
  fputs (",\"decision\":", fp);
  throttle_json_string (fp, !permitted ? "" : st.reason);
  fprintf (fp, ",\"since_s\":%.3f,\"peers\":{\"kernel\":%u,\"trusted\":%u,"
           "\"other\":%u},\"hold_s\":%.3f,\"pressure_signal\":%s",
           since ? (now - since) / 1e9 : 0.0,
           st.peers[THROTTLE_RT_PEER_KERNEL],
           st.peers[THROTTLE_RT_PEER_TRUSTED],
           st.peers[THROTTLE_RT_PEER_OTHER], gp->rt_hold,
           st.no_pressure_signal ? "false" : "true");
  if (on && recheck > now)
    fprintf (fp, ",\"off_in_s\":%.3f}", (recheck - now) / 1e9);
  else
    fputs (",\"off_in_s\":null}", fp);
}

/* The control socket's "set rt on|off|auto": the server's real-time
 * mode; the reply has the rt member.
 */
void
throttle_realtime_set (FILE *out, struct throttle_export *unused,
                       const char *value)
{
  char event[64];
  enum throttle_rt_mode mode;

  for (mode = THROTTLE_RT_OFF; mode <= THROTTLE_RT_ON; mode++)
    if (strcmp (value, throttle_guard_words[mode]) == 0)
      break;
  if (mode > THROTTLE_RT_ON) {
    throttle_json_error (out, "set rt: bad mode \"%s\": expected on, off "
                         "or auto", value);
    return;
  }
  if (!permitted && mode != THROTTLE_RT_OFF) {
    throttle_json_error (out, "set rt %s: this server cannot be real-time "
                         "(started with throttle-rt=off, or SCHED_FIFO was "
                         "refused: see its log)", value);
    return;
  }
  if (permitted) {
    throttle_lock (&rt_lock);
    throttle_rt_set_mode (&rt_state, mode, throttle_now_ns ());
    snprintf (event, sizeof event, "set rt %s (control socket)", value);
    rt_apply_locked (throttle_now_ns (), event);
    throttle_unlock (&rt_lock);
    throttle_guards_set_missing (THROTTLE_SWAP_RT, mode == THROTTLE_RT_OFF ?
                                 "set rt off (control socket)" : NULL);
    nbdkit_debug ("throttle: guards: control: set rt %s", value);
    rt_wake_watcher ();
  }
  fputs ("{\"ok\":true", out);
  throttle_realtime_stats_json (out, NULL);
  fputs ("}\n", out);
}

/* Closes the n descriptors at fds that are open, and marks them closed. */
static void
close_fds (int *fds, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    if (fds[i] >= 0) {
      close (fds[i]);
      fds[i] = -1;
    }
}

/* The PSI trigger: a stall of 'some' task on memory for 10 ms within
 * 1 s (1%).  Without CAP_SYS_RESOURCE, Linux >= 6.5 accepts only
 * windows of whole multiples of 2 s.
 */
static const char *const psi_triggers[] = {
  "some 10000 1000000", "some 20000 2000000",
};

/* Opens psi_fd with a trigger; 0 or an errno. */
static int
psi_open (const char **trigger)
{
  size_t i;
  int err = 0;

  for (i = 0; i < sizeof psi_triggers / sizeof psi_triggers[0]; i++) {
    size_t len = strlen (psi_triggers[i]) + 1;

    psi_fd = open (gp->psi_path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (psi_fd == -1)
      return errno;
    if (write (psi_fd, psi_triggers[i], len) == (ssize_t) len) {
      *trigger = psi_triggers[i];
      return 0;
    }
    err = errno;
    close (psi_fd);
    psi_fd = -1;
  }
  return err;
}

/* Milliseconds from now until deadline (0: none), for poll. */
static int
poll_timeout (uint64_t deadline)
{
  uint64_t now = throttle_now_ns (), ms;

  if (deadline == 0)
    return -1;
  if (deadline <= now)
    return 0;
  ms = (deadline - now + 999999) / 1000000;
  return ms > INT_MAX ? INT_MAX : (int) ms;
}

/* The watcher: counts memory pressure (the PSI trigger) and switches
 * real-time off when the hold ends.  Real-time itself, whatever the
 * mode, so that it runs at once when memory gets short.
 */
static void *
rt_watch (void *arg)
{
  const char *trigger = arg;
  struct pollfd fds[2] = {
    { .fd = psi_stop[0], .events = POLLIN },
    { .fd = psi_fd, .events = POLLPRI },
  };
  nfds_t nfds = psi_fd >= 0 ? 2 : 1;
  const char *event;
  char why[320], buf[64];
  /* None yet: start decided with no hold, and whatever sets one since
   * wakes this thread (rt_wake_watcher).
   */
  uint64_t deadline = 0;

  atomic_store (&psi_tid, gettid ());
  /* Real-time whatever the mode; if refused, it is at least woken. */
  sched_setscheduler (0, SCHED_FIFO, &fifo_1);
  snprintf (why, sizeof why, "memory pressure (PSI trigger \"%s\" on %s)",
            trigger ? trigger : "", gp->psi_path);
  for (;;) {
    if (poll (fds, nfds, poll_timeout (deadline)) == -1) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (fds[0].revents) {
      /* Every wake-up queued so far at once (the pipe is non-blocking):
       * the stop's "x" must find room.
       */
      ssize_t r = read (psi_stop[0], buf, sizeof buf);

      if (r > 0 && memchr (buf, 'x', r) != NULL)
        break;
    }
    throttle_lock (&rt_lock);
    event = NULL;
    if (nfds == 2 && (fds[1].revents & POLLPRI)) {
      if (throttle_rt_pressure (&rt_state, throttle_now_ns ()))
        event = why;
      if (throttle_debug_verbose)
        nbdkit_debug ("throttle: guards: %s %s", why,
                      event ? "counted" : "ignored: no client of root or "
                      "the server's uid is connected");
    }
    if (nfds == 2 && (fds[1].revents & (POLLERR | POLLHUP | POLLNVAL))) {
      /* The trigger is gone (its cgroup was removed): nothing will
       * warn of memory pressure any more.
       */
      rt_state.no_pressure_signal = true;
      nfds = 1;
      nbdkit_debug ("throttle: guards: the memory pressure trigger failed: "
                    "clients of root or the server's uid count as kernel "
                    "clients from now on");
    }
    deadline = rt_apply_locked (throttle_now_ns (), event);
    throttle_unlock (&rt_lock);
  }
  return NULL;
}

/* Where permitted: opens /proc/self/task and the PSI trigger, decides
 * for the start mode and starts the watcher.  Where no PSI trigger can
 * be set, clients of root or the server's uid count as kernel clients
 * (nothing would tell when they need it); where no watcher can start,
 * the hold ends at the next connection's open or close.
 */
int
throttle_realtime_start (void)
{
  static const char *trigger;
  const bool on = gp->rt == THROTTLE_GUARD_ON;
  int err;

  permitted = throttle_guards_rt_active ();
  if (!permitted)
    return 0;
  throttle_rt_init (&rt_state, (uint64_t) (gp->rt_hold * 1e9));
  rt_state.mode = (enum throttle_rt_mode) gp->rt;
  task_dir_fd = open ("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (task_dir_fd == -1)
    throttle_warning ("throttle-rt: cannot open /proc/self/task: %s: only "
                      "threads that serve a request change policy",
                      throttle_errtext (errno));
  err = psi_open (&trigger);
  if (err) {
    rt_state.no_pressure_signal = true;
    nbdkit_debug ("throttle: guards: no memory pressure trigger (%s: %s): "
                  "clients of root or the server's uid count as kernel "
                  "clients", gp->psi_path, throttle_errtext (err));
  }
  throttle_lock (&rt_lock);
  rt_apply_locked (throttle_now_ns (), on ? "throttle-rt=on" : NULL);
  throttle_unlock (&rt_lock);

  err = pipe2 (psi_stop, O_CLOEXEC | O_NONBLOCK) == -1 ? errno :
    pthread_create (&psi_thread, NULL, rt_watch, (void *) trigger);
  if (err) {
    throttle_warning ("throttle-rt: cannot start the real-time watcher: %s: "
                      "memory pressure is not watched, and real-time is "
                      "switched off only at a connection's open or close",
                      throttle_errtext (err));
    close_fds (psi_stop, 2);
    throttle_lock (&rt_lock);
    rt_state.no_pressure_signal = true;
    throttle_unlock (&rt_lock);
    return 0;
  }
  /* Named, so that it can be told from nbdkit's threads. */
  pthread_setname_np (psi_thread, "throttle-psi");
  return 0;
}

void
throttle_realtime_thread_enter (bool first)
{
  bool rt;

  if (!permitted)
    return;
  rt = atomic_load (&rt_on);
  if (rt_set_policy (0, rt, SCHED_FIFO | SCHED_RESET_ON_FORK) == -1)
    nbdkit_debug ("throttle: %s in thread %ld: %s",
                  rt ? "SCHED_FIFO" : "SCHED_OTHER", (long) gettid (),
                  throttle_errtext (errno));
  if (throttle_debug_verbose)
    nbdkit_debug ("throttle: guards: thread %ld: policy %s",
                  (long) gettid (),
                  (sched_getscheduler (0) & ~SCHED_RESET_ON_FORK) ==
                  SCHED_FIFO ? "SCHED_FIFO" : "other");
}

void
throttle_realtime_stop (void)
{
  if (psi_stop[1] >= 0) {
    /* The pipe is non-blocking, but the watcher drains it at every
     * wake-up: there is room.
     */
    if (write (psi_stop[1], "x", 1) != 1)
      nbdkit_debug ("throttle: guards: cannot stop the real-time watcher");
    else
      pthread_join (psi_thread, NULL);
  }
  close_fds (psi_stop, 2);
  close_fds (&psi_fd, 1);
  close_fds (&task_dir_fd, 1);
  if (!permitted)
    return;
  throttle_lock (&rt_lock);
  if (atomic_load (&rt_on))
    nbdkit_debug ("throttle: guards: at exit: real-time for the last "
                  "%.3f s: %s", (throttle_now_ns () - rt_since) / 1e9,
                  rt_why);
  else
    nbdkit_debug ("throttle: guards: at exit: not real-time: %s",
                  rt_why[0] ? rt_why : rt_state.reason);
  throttle_unlock (&rt_lock);
}
