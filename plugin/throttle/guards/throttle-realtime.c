/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the real-time switch of throttle-rt (see
 * throttle-realtime.h).
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
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
#include <sys/syscall.h>

#include <nbdkit-filter.h>

#include "throttle-clock.h"
#include "throttle-config.h"
#include "throttle-feature.h"
#include "throttle-report.h"
#include "throttle-guards-config.h"
#include "throttle-json.h"
#include "throttle-lock.h"
#include "throttle-parse.h"
#include "throttle-peer.h"
#include "throttle-realtime.h"
#include "throttle-rtpolicy.h"
#include "throttle-verdict.h"

/* The parameters, read only after .config. */
static const struct throttle_guards_params *const gp =
  &throttle_guards_params;

static const struct sched_param fifo_1 = { .sched_priority = 1 };

/* Set by throttle_realtime_start, before any thread that reads it. */
static bool permitted;

/* throttle-rt: whether the process is real-time now, decided by the
 * state machine of lib/throttle-rtpolicy.h: with "auto", while a
 * kernel nbd client of root or the server's uid is connected, and for
 * throttle-rt-hold after it left or after memory pressure while such
 * a peer was connected.  Real-time priority makes the request threads
 * preempt every ordinary process on the same CPUs at every request
 * (see "REAL-TIME PRIORITY" in nbdkit-throttle-design(1)): "auto" pays
 * that only where the server may be what the kernel waits for.
 *
 * Lock rule: rt_lock serializes every change of rt_state and rt_on
 * (rt_apply_locked: the walk over the tasks and its static buffer,
 * rt_why, rt_when).  rt_on is read without it.
 */
static pthread_mutex_t rt_lock = THROTTLE_LOCK_INITIALIZER;
static struct throttle_rt rt_state;
static atomic_bool rt_on;
static char rt_why[256];
static struct timespec rt_when;
/* The watcher thread, which stays SCHED_FIFO whatever the mode. */
static atomic_int psi_tid;

/* /proc/self/task, opened in after_fork: walking it must not allocate
 * (opendir does), since memory pressure is one reason to walk it.
 */
static int task_dir_fd = -1;
/* The watcher: a PSI trigger on gp->psi_path (throttle-rt-pressure), and a
 * pipe that wakes it ("w": the hold may have changed) or stops it
 * ("x").
 */
static int psi_fd = -1;
static int psi_stop[2] = { -1, -1 };
static pthread_t psi_thread;
static bool psi_thread_started;

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
  static const struct sched_param other = { .sched_priority = 0 };
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
      int policy;

      memcpy (&reclen, buf + off + 16, sizeof reclen);
      off += reclen;
      for (; *name >= '0' && *name <= '9'; name++)
        tid = tid * 10 + (*name - '0');
      if (tid <= 0 || *name != '\0' || tid == watcher)
        continue;
      policy = sched_getscheduler (tid);
      if (policy == -1 ||
          ((policy & ~SCHED_RESET_ON_FORK) == SCHED_FIFO) == on)
        continue;
      if (sched_setscheduler (tid, on ? SCHED_FIFO : SCHED_OTHER,
                              on ? &fifo_1 : &other) == 0)
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
  if (want == atomic_load (&rt_on))
    return recheck;
  atomic_store (&rt_on, want);
  throttle_threads_renew ();
  clock_gettime (CLOCK_MONOTONIC, &rt_when);
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
  c = throttle_peer_classify (why, sizeof why);
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

/* The control socket's "set rt on|off|auto".  Returns 0, or -1 with
 * the reply's error message in err.
 */
static int
rt_set_mode (const char *value, char *err, size_t len)
{
  char event[64];
  int i;

  for (i = 0; throttle_guard_words[i]; i++)
    if (strcmp (value, throttle_guard_words[i]) == 0)
      break;
  if (throttle_guard_words[i] == NULL) {
    snprintf (err, len, "set rt: bad mode \"%s\": expected on, off or auto",
              value);
    return -1;
  }
  if (!permitted && i != THROTTLE_GUARD_OFF) {
    snprintf (err, len, "set rt %s: this server cannot be real-time "
              "(started with throttle-rt=off, or SCHED_FIFO was refused: "
              "see its log)", value);
    return -1;
  }
  if (!permitted)
    return 0;
  throttle_lock (&rt_lock);
  throttle_rt_set_mode (&rt_state,
                        i == THROTTLE_GUARD_ON ? THROTTLE_RT_ON :
                        i == THROTTLE_GUARD_OFF ? THROTTLE_RT_OFF :
                        THROTTLE_RT_AUTO,
                        throttle_now_ns ());
  snprintf (event, sizeof event, "set rt %s (control socket)", value);
  rt_apply_locked (throttle_now_ns (), event);
  throttle_unlock (&rt_lock);
  if (i == THROTTLE_GUARD_OFF)
    throttle_verdict_missing (THROTTLE_SWAP_RT, "set rt off (control socket)");
  else
    throttle_verdict_taken (THROTTLE_SWAP_RT);
  nbdkit_debug ("throttle: guards: control: set rt %s", value);
  rt_wake_watcher ();
  return 0;
}

/* The JSON member ,"rt":{...} (mode, whether on and why, the peers,
 * the hold), after its comma: a throttle_report_json_fn, of the
 * top-level object alone.
 */
static void
rt_json (FILE *fp, struct throttle_export *exp)
{
  struct throttle_rt st;
  struct timespec now, when;
  char why[sizeof rt_why];
  uint64_t recheck = 0, t;
  bool on;

  if (exp != NULL)
    return;
  throttle_lock (&rt_lock);
  on = atomic_load (&rt_on);
  st = rt_state;
  if (permitted)
    throttle_rt_wanted (&st, throttle_now_ns (), &recheck);
  memcpy (why, rt_why, sizeof why);
  when = rt_when;
  throttle_unlock (&rt_lock);

  clock_gettime (CLOCK_MONOTONIC, &now);
  t = throttle_now_ns ();
  fprintf (fp, ",\"rt\":{\"mode\":\"%s\",\"on\":%s,\"why\":",
           !permitted ? "off" : throttle_rt_mode_name (st.mode),
           on ? "true" : "false");
  throttle_json_string (fp, !permitted ?
                        "not permitted (throttle-rt=off at start, or "
                        "SCHED_FIFO refused)" :
                        why[0] ? why : st.reason);
  fputs (",\"decision\":", fp);
  throttle_json_string (fp, !permitted ? "" : st.reason);
  fprintf (fp, ",\"since_s\":%.3f,\"peers\":{\"kernel\":%u,\"trusted\":%u,"
           "\"other\":%u},\"hold_s\":%.3f,\"pressure_signal\":%s",
           when.tv_sec || when.tv_nsec ?
           (now.tv_sec - when.tv_sec) + (now.tv_nsec - when.tv_nsec) / 1e9 :
           0.0,
           st.peers[THROTTLE_RT_PEER_KERNEL],
           st.peers[THROTTLE_RT_PEER_TRUSTED],
           st.peers[THROTTLE_RT_PEER_OTHER], gp->rt_hold,
           st.no_pressure_signal ? "false" : "true");
  if (on && recheck > t)
    fprintf (fp, ",\"off_in_s\":%.3f}", (recheck - t) / 1e9);
  else
    fputs (",\"off_in_s\":null}", fp);
}

/* The control socket's "set rt": the server's real-time mode. */
static void
set_rt (FILE *out, struct throttle_export *unused, const char *value)
{
  char err[256];

  if (rt_set_mode (value, err, sizeof err) == -1) {
    throttle_report_error (out, "%s", err);
    return;
  }
  fputs ("{\"ok\":true", out);
  rt_json (out, NULL);
  fputs ("}\n", out);
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
 * real-time off when the hold ends.  Real-time itself from its
 * creation (rt_start), whatever the mode, so that it runs at once when
 * memory gets short.
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
  uint64_t deadline;

  atomic_store (&psi_tid, gettid ());
  snprintf (why, sizeof why, "memory pressure (PSI trigger \"%s\" on %s)",
            trigger ? trigger : "", gp->psi_path);
  throttle_lock (&rt_lock);
  deadline = rt_apply_locked (throttle_now_ns (), NULL);
  throttle_unlock (&rt_lock);
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
    /* A thread started since the switch by a request thread is
     * SCHED_OTHER (request threads reset their policy on fork, for the
     * plugin's children): the reader that nbdkit's nbd plugin starts
     * when nbdkit's retry filter reopens it after the storage went
     * away.  Pressure is when it must not wait behind the real-time
     * ones; the walk allocates nothing.
     */
    if (event && atomic_load (&rt_on)) {
      unsigned n = rt_set_all_threads (true);

      if (n > 0)
        nbdkit_debug ("throttle: guards: real-time: SCHED_FIFO set on %u "
                      "threads started since the switch", n);
    }
    throttle_unlock (&rt_lock);
  }
  return NULL;
}

/* A real-time server: opens /proc/self/task, the PSI trigger and
 * starts the watcher; decides for the start mode.  Where no PSI
 * trigger can be set, clients of root or the server's uid count as
 * kernel clients (nothing would tell when they need it); where no
 * watcher can start, the hold ends at the next connection's open or
 * close.  Called in after_fork.
 */
static void
rt_start (void)
{
  static const char *trigger;
  pthread_attr_t attr;
  int err;

  throttle_rt_init (&rt_state, (uint64_t) (gp->rt_hold * 1e9));
  rt_state.mode =
    gp->rt == THROTTLE_GUARD_ON ? THROTTLE_RT_ON : THROTTLE_RT_AUTO;
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
  rt_apply_locked (throttle_now_ns (), gp->rt == THROTTLE_GUARD_ON ?
                   "throttle-rt=on" : NULL);
  throttle_unlock (&rt_lock);

  if (pipe2 (psi_stop, O_CLOEXEC | O_NONBLOCK) == -1) {
    throttle_warning ("throttle-rt: pipe: %s: real-time is switched off only "
                      "at a connection's open or close",
                      throttle_errtext (errno));
    return;
  }
  /* Named, so that it can be told from nbdkit's threads. */
  err = pthread_attr_init (&attr);
  if (err == 0) {
    if (pthread_attr_setinheritsched (&attr, PTHREAD_EXPLICIT_SCHED) != 0 ||
        pthread_attr_setschedpolicy (&attr, SCHED_FIFO) != 0 ||
        pthread_attr_setschedparam (&attr, &fifo_1) != 0)
      err = EINVAL;
    else
      err = pthread_create (&psi_thread, &attr, rt_watch, (void *) trigger);
    pthread_attr_destroy (&attr);
  }
  if (err)
    err = pthread_create (&psi_thread, NULL, rt_watch, (void *) trigger);
  if (err) {
    throttle_warning ("throttle-rt: cannot start the real-time watcher: %s: "
                      "memory pressure is not watched, and real-time is "
                      "switched off only at a connection's open or close",
                      throttle_errtext (err));
    throttle_lock (&rt_lock);
    rt_state.no_pressure_signal = true;
    throttle_unlock (&rt_lock);
    return;
  }
  pthread_setname_np (psi_thread, "throttle-psi");
  psi_thread_started = true;
}

/* Stops the watcher; closes what rt_start opened. */
static void
rt_stop (void)
{
  if (psi_thread_started) {
    /* The pipe is non-blocking, but the watcher drains it at every
     * wake-up: there is room.
     */
    if (write (psi_stop[1], "x", 1) != 1)
      nbdkit_debug ("throttle: guards: cannot stop the real-time watcher");
    else
      pthread_join (psi_thread, NULL);
    psi_thread_started = false;
  }
  if (psi_stop[0] >= 0) {
    close (psi_stop[0]);
    close (psi_stop[1]);
    psi_stop[0] = psi_stop[1] = -1;
  }
  if (psi_fd >= 0) {
    close (psi_fd);
    psi_fd = -1;
  }
  if (task_dir_fd >= 0) {
    close (task_dir_fd);
    task_dir_fd = -1;
  }
}

/* The control socket's set rt, and the rt member of its stats. */
static const struct throttle_report_setter rt_setter = {
  "rt", "set rt on|off|auto", false, set_rt
};

void
throttle_realtime_start (bool real_time_permitted)
{
  permitted = real_time_permitted;
  /* Before the control thread exists (throttle-report.h). */
  throttle_report_add (rt_json, NULL);
  throttle_report_add_setter (&rt_setter);
  if (permitted)
    rt_start ();
}

bool
throttle_realtime_is_on (void)
{
  return atomic_load (&rt_on);
}

void
throttle_realtime_thread_policy (void)
{
  static const struct sched_param other = { .sched_priority = 0 };
  int policy = sched_getscheduler (0);
  bool rt = atomic_load (&rt_on);
  bool fifo = policy != -1 && (policy & ~SCHED_RESET_ON_FORK) == SCHED_FIFO;

  if (!permitted)
    return;
  if (rt && policy != (SCHED_FIFO | SCHED_RESET_ON_FORK) &&
      sched_setscheduler (0, SCHED_FIFO | SCHED_RESET_ON_FORK,
                          &fifo_1) == -1)
    nbdkit_debug ("throttle: SCHED_FIFO in thread %ld: %s",
                  (long) gettid (), throttle_errtext (errno));
  if (!rt && fifo &&
      sched_setscheduler (0, SCHED_OTHER, &other) == -1)
    nbdkit_debug ("throttle: SCHED_OTHER in thread %ld: %s",
                  (long) gettid (), throttle_errtext (errno));
}

void
throttle_realtime_stop (void)
{
  rt_stop ();
  if (!permitted)
    return;
  throttle_lock (&rt_lock);
  if (atomic_load (&rt_on)) {
    struct timespec now;

    clock_gettime (CLOCK_MONOTONIC, &now);
    nbdkit_debug ("throttle: guards: at exit: real-time for the last "
                  "%.3f s: %s",
                  (now.tv_sec - rt_when.tv_sec) +
                  (now.tv_nsec - rt_when.tv_nsec) / 1e9, rt_why);
  }
  else
    nbdkit_debug ("throttle: guards: at exit: not real-time: %s",
                  rt_why[0] ? rt_why : rt_state.reason);
  throttle_unlock (&rt_lock);
}
