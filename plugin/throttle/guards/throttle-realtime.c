/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the real-time switch of throttle-rt (see
 * throttle-realtime.h), and whether the peer of a connection is a
 * kernel nbd client.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
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

/* The parameters, read only after .config. */
static const struct throttle_guards_params *const gp =
  &throttle_guards_params;

/* Whether the process is real-time now (rt_on), and the state machine
 * that decides it.  Lock rule: rt_lock serializes every change of
 * rt_state and rt_on (rt_apply_locked: the walk over the tasks and its
 * static buffer, rt_why, rt_since) and the timer's stop.  rt_on is
 * read without it.
 */
static pthread_mutex_t rt_lock = THROTTLE_LOCK_INITIALIZER;
static struct throttle_rt rt_state;
static atomic_bool rt_on;
static char rt_why[256];
static uint64_t rt_since;               /* throttle_now_ns () at the switch */

/* /proc/self/task, opened in after_fork: walking it must not allocate
 * (opendir does), since the walk runs while a kernel client may swap
 * to this server.
 */
static int task_dir_fd = -1;
/* The timer thread: signalled (under rt_lock) when the process
 * switches real-time on, and at its stop.
 */
static pthread_cond_t timer_cond;
static bool timer_stop;
static bool timer_running;
static pthread_t timer_thread;

/* Whether the calling thread's connection's peer is a kernel nbd
 * client: over a Unix socket, root's or the server's uid's, a process
 * that hands its NBD socket to the kernel's nbd driver, by its comm
 * (the name of the file it executed, unless it renamed itself).  What
 * was found goes into why (len bytes) either way.  Call from .open.
 */
static bool
peer_is_kernel_client (char *why, size_t len)
{
  struct sockaddr_storage ss;
  socklen_t sslen = sizeof ss;
  char path[64], name[64];
  int64_t pid, uid;
  ssize_t r = -1;
  bool kname, kernel;
  int fd;

  if (nbdkit_peer_name ((struct sockaddr *) &ss, &sslen) == -1) {
    snprintf (why, len, "peer unknown (not a socket)");
    return false;
  }
  /* Over TCP, even on loopback, which process holds the other end
   * cannot be known (a kernel client's socket has none).
   */
  if (ss.ss_family != AF_UNIX) {
    snprintf (why, len, "peer of address family %d, not a Unix socket: "
              "never real-time", (int) ss.ss_family);
    return false;
  }
  pid = nbdkit_peer_pid ();
  uid = nbdkit_peer_uid ();
  if (pid <= 0 || uid < 0) {
    snprintf (why, len, "Unix socket peer without credentials");
    return false;
  }
  snprintf (path, sizeof path, "/proc/%" PRIi64 "/comm", pid);
  fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    r = read (fd, name, sizeof name - 1);
    close (fd);
  }
  if (r > 0) {
    name[r] = '\0';
    name[strcspn (name, "\n")] = '\0';
  }
  else
    snprintf (name, sizeof name, "?");
  kname = strcmp (name, "nbd-client") == 0 || strcmp (name, "qemu-nbd") == 0;
  kernel = throttle_rt_kernel_client (uid, geteuid (), kname);
  snprintf (why, len, "peer PID %" PRIi64 " is %s, uid %" PRIi64 ", %s",
            pid, name, uid,
            kernel ? "a kernel nbd client on this machine" :
            kname ? "neither root nor the server's uid: never real-time" :
            "not a kernel nbd client");
  return kernel;
}

/* Sets the policy of every thread of the process to SCHED_FIFO (on)
 * or SCHED_OTHER, and returns how many it changed.  Threads created
 * later inherit it from their creator (the main thread is among those
 * walked); a thread the walk misses, or one that set its own policy
 * from a stale rt_on meanwhile, switches itself at its next
 * throttle_thread_enter (each switch renews the threads).  Caller
 * holds rt_lock (the buffer is static: nothing is allocated while the
 * device served may be swap).
 */
static unsigned
rt_set_all_threads (bool on)
{
  static char buf[4096] __attribute__ ((aligned (8)));
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
      if (tid > 0 && *name == '\0' &&
          throttle_guards_set_policy (tid, on, SCHED_FIFO) == 1)
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
 * real-time ones.  A switch on wakes the timer.  Caller holds rt_lock.
 * Allocates nothing unless nbdkit runs verbose (its debug message):
 * the timer calls it while the device served may be swap.
 */
static void
rt_apply_locked (uint64_t now, const char *event)
{
  uint64_t recheck;
  struct timespec wall;
  unsigned n;
  bool want;

  throttle_lock_assert_held (&rt_lock);
  want = throttle_rt_wanted (&rt_state, now, &recheck);
  if (want == atomic_load (&rt_on))
    return;
  if (want)
    pthread_cond_signal (&timer_cond);
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
}

int
throttle_realtime_open (const char *exportname, void **state)
{
  char why[256];
  bool kernel;

  /* Whatever real-time may do: the verdict speaks up when a kernel
   * client attaches to a server that is not safe for it.
   */
  kernel = peer_is_kernel_client (why, sizeof why);
  if (kernel)
    throttle_verdict_kernel_client (why);
  *state = (void *) (intptr_t) kernel;
  if (!throttle_guards_rt_active ())
    return 0;
  throttle_lock (&rt_lock);
  throttle_rt_peer_open (&rt_state, kernel);
  rt_apply_locked (throttle_now_ns (), why);
  throttle_unlock (&rt_lock);
  if (throttle_debug_verbose)
    nbdkit_debug ("throttle: guards: throttle-rt peer: %s: real-time %s",
                  why, atomic_load (&rt_on) ? "on" : "off");
  return 0;
}

void
throttle_realtime_close (void *state)
{
  if (!throttle_guards_rt_active ())
    return;
  throttle_lock (&rt_lock);
  throttle_rt_peer_close (&rt_state, (intptr_t) state != 0,
                          throttle_now_ns ());
  rt_apply_locked (throttle_now_ns (), NULL);
  throttle_unlock (&rt_lock);
}

/* The JSON member ,"rt":{...} (mode, whether on and why, the peers,
 * the hold), after its comma: a report's json (throttle-metrics.h), of
 * the top-level object alone.
 */
void
throttle_realtime_stats_json (FILE *fp, struct throttle_export *exp)
{
  const bool permitted = throttle_guards_rt_active ();
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
  fprintf (fp, ",\"since_s\":%.3f,\"peers\":{\"kernel\":%u,\"other\":%u},"
           "\"hold_s\":%.3f",
           since ? (now - since) / 1e9 : 0.0, st.peers[true], st.peers[false],
           gp->rt_hold);
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
  const bool permitted = throttle_guards_rt_active ();
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
  }
  fputs ("{\"ok\":true", out);
  throttle_realtime_stats_json (out, NULL);
  fputs ("}\n", out);
}

/* The timer: while the process is real-time, every second, ends the
 * hold once it is over and walks the threads.  A thread that a request
 * thread starts is SCHED_OTHER (request threads reset their policy on
 * fork, for the plugin's children), such as the reader that nbdkit's
 * nbd plugin starts when nbdkit's retry filter reopens it after the
 * storage went away, and it must not wait long behind the real-time
 * ones.  Otherwise it waits for a switch.  It waits on timer_cond
 * under rt_lock, and allocates nothing.
 */
static void *
rt_timer (void *unused)
{
  struct timespec tick;
  unsigned n;

  throttle_lock (&rt_lock);
  while (!timer_stop) {
    rt_apply_locked (throttle_now_ns (), NULL);
    if (!atomic_load (&rt_on)) {
      pthread_cond_wait (&timer_cond, &rt_lock);
      continue;
    }
    n = rt_set_all_threads (true);
    if (n > 0)
      nbdkit_debug ("throttle: guards: real-time: SCHED_FIFO set on %u "
                    "threads started since the switch", n);
    tick = throttle_deadline_ms (1000);
    pthread_cond_timedwait (&timer_cond, &rt_lock, &tick);
  }
  throttle_unlock (&rt_lock);
  return NULL;
}

int
throttle_realtime_start (void)
{
  const bool on = gp->rt == THROTTLE_GUARD_ON;
  int err;

  if (!throttle_guards_rt_active ())
    return 0;
  throttle_rt_init (&rt_state, (uint64_t) (gp->rt_hold * 1e9));
  rt_state.mode = (enum throttle_rt_mode) gp->rt;
  task_dir_fd = open ("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (task_dir_fd == -1)
    throttle_warning ("throttle-rt: cannot open /proc/self/task: %s: only "
                      "threads that serve a request change policy",
                      throttle_errtext (errno));
  throttle_cond_init_monotonic (&timer_cond);
  throttle_lock (&rt_lock);
  rt_apply_locked (throttle_now_ns (), on ? "throttle-rt=on" : NULL);
  throttle_unlock (&rt_lock);

  err = pthread_create (&timer_thread, NULL, rt_timer, NULL);
  if (err) {
    throttle_warning ("throttle-rt: cannot start the real-time timer: %s: "
                      "real-time is switched off only at a connection's "
                      "open or close", throttle_errtext (err));
    return 0;
  }
  timer_running = true;
  /* Named, so that it can be told from nbdkit's threads. */
  pthread_setname_np (timer_thread, "throttle-rt");
  return 0;
}

void
throttle_realtime_thread_enter (bool first)
{
  bool rt;

  if (!throttle_guards_rt_active ())
    return;
  rt = atomic_load (&rt_on);
  if (throttle_guards_set_policy (0, rt,
                                  SCHED_FIFO | SCHED_RESET_ON_FORK) == -1)
    nbdkit_debug ("throttle: %s in thread %ld: %s",
                  rt ? "SCHED_FIFO" : "SCHED_OTHER", (long) gettid (),
                  throttle_errtext (errno));
}

void
throttle_realtime_stop (void)
{
  if (timer_running) {
    throttle_lock (&rt_lock);
    timer_stop = true;
    pthread_cond_signal (&timer_cond);
    throttle_unlock (&rt_lock);
    pthread_join (timer_thread, NULL);
    timer_running = false;
  }
  if (task_dir_fd >= 0) {
    close (task_dir_fd);
    task_dir_fd = -1;
  }
}
