/* nbdkit-throttle filter: the thread and process guards.
 *
 * A server whose client is its own kernel must never wait for memory
 * that only its own progress can free.  The budget bounds what is in
 * flight; these guards make nbdkit's process fit that bound: the
 * kernel is told not to recurse into I/O from the server's allocations
 * (PR_SET_IO_FLUSHER), may let its threads dip into the real-time
 * reserve (SCHED_FIFO), must not swap out or OOM-kill it, and the
 * memory nbdkit's core touches per request is faulted in and locked
 * before the pressure starts.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <nbdkit-filter.h>

#include "throttle-clock.h"
#include "throttle-config.h"
#include "throttle-control-proto.h"
#include "throttle-guards.h"
#include "throttle-json.h"
#include "throttle-parse.h"
#include "throttle-rtpolicy.h"

/* Linux 5.6 <linux/prctl.h>; Debian 12's glibc headers lack them. */
#ifndef PR_SET_IO_FLUSHER
#define PR_SET_IO_FLUSHER 57
#endif
#ifndef PR_GET_IO_FLUSHER
#define PR_GET_IO_FLUSHER 58
#endif
#ifndef MCL_ONFAULT
#define MCL_ONFAULT 4
#endif

#define CAP_IPC_LOCK_BIT 14

/* The largest request Linux's nbd driver sends with the default
 * max_sectors_kb of Debian 12's Linux 6.1; sizes the default reserve.
 */
#define KERNEL_REQUEST (1280 * 1024)
/* The default throttle-max-request: what newer kernels send at their
 * default max_sectors_kb (4 MiB), so a kernel client works unchanged.
 */
#define DEFAULT_MAX_REQUEST (4 * 1024 * 1024)
/* The bounds of throttle-max-request: the largest minimum block size a
 * plugin may set (so the maximum stays a multiple of it), and glibc's
 * largest M_MMAP_THRESHOLD on 64-bit (HEAP_MAX_SIZE / 2), which is
 * also the largest request Linux's nbd driver can send.
 */
#define MIN_MAX_REQUEST (64 * 1024)
#define MAX_MAX_REQUEST (32 * 1024 * 1024)
/* The largest read or write nbdkit itself receives (its
 * MAX_REQUEST_SIZE, 1.32 to 1.44): with throttle-max-request=plugin
 * the memory a request can pin.
 */
#define NBDKIT_MAX_REQUEST (64 * 1024 * 1024)
/* nbdkit's --threads default (DEFAULT_PARALLEL_REQUESTS). */
#define DEFAULT_THREADS 16
/* throttle-rt-hold: how long real-time outlasts its last reason. */
#define DEFAULT_RT_HOLD 60.0

enum guard_mode { GUARD_OFF, GUARD_AUTO, GUARD_ON };
enum lock_mode { LOCK_OFF, LOCK_POOL, LOCK_ONFAULT, LOCK_AUTO };

static enum guard_mode io_flusher_mode = GUARD_AUTO;
static enum guard_mode rt_mode = GUARD_AUTO;
static enum guard_mode oom_mode = GUARD_AUTO;
static enum lock_mode mlock_mode = LOCK_AUTO;
static int64_t reserve_param = -1;      /* -1 = computed */
static unsigned threads_param = DEFAULT_THREADS;
static uint32_t max_request = DEFAULT_MAX_REQUEST;
static bool max_request_plugin;         /* throttle-max-request=plugin */
static double rt_hold_param = DEFAULT_RT_HOLD;
static const char *psi_path = "/proc/pressure/memory";

/* Decided in get_ready, before any thread that reads them exists. */
static bool io_flusher_active;
static bool rt_active;                  /* SCHED_FIFO permitted (and wanted) */
static bool oom_active;
static bool lock_all;                   /* mlockall (MCL_ONFAULT) */
static size_t reserve_size;
static bool reserve_locked;

/* initial-exec: in a dlopen'ed object the default TLS model reaches a
 * variable through __tls_get_addr, which on a thread's first access
 * mallocs the thread's slot: an allocation on the writeout path, before
 * the guards are on.  One byte fits glibc's static TLS surplus.
 */
static __thread unsigned thread_gen
  __attribute__ ((tls_model ("initial-exec")));

/* throttle-rt: whether the process is real-time now, decided by the
 * state machine of lib/throttle-rtpolicy.h: with "auto", while a
 * kernel nbd client of root or the server's uid is connected, and for
 * throttle-rt-hold after it left or after memory pressure while such
 * a peer was connected.  Real-time priority makes the request threads
 * preempt every ordinary process on the same CPUs at every request
 * (see "REAL-TIME PRIORITY" in nbdkit-throttle-filter(1)): "auto" pays
 * that only where the server may be what the kernel waits for.
 *
 * Lock rule: rt_lock serializes every change of rt_state and rt_on
 * (rt_apply_locked: the walk over the tasks and its static buffer,
 * rt_why, rt_when).  rt_on and rt_gen are read without it.
 */
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;
static struct throttle_rt rt_state;
static atomic_bool rt_on;
/* Bumped after every switch: a thread whose thread_gen differs sets
 * its own policy at its next throttle_guards_thread_enter.  0 is a
 * thread that never entered.
 */
static atomic_uint rt_gen = 1;
static char rt_why[256];
static struct timespec rt_when;
/* The watcher thread, which stays SCHED_FIFO whatever the mode. */
static atomic_int psi_tid;

static void rt_stats_json (struct throttle_export *, char *, size_t);
static void set_rt (FILE *out, struct throttle_export *, const char *value);
static const struct throttle_control_setter rt_setter = {
  "rt", "set rt on|off|auto", false, set_rt
};

/* /proc/self/task, opened in after_fork: walking it must not allocate
 * (opendir does), since memory pressure is one reason to walk it.
 */
static int task_dir_fd = -1;
/* The watcher: a PSI trigger on psi_path (throttle-rt-pressure), and a
 * pipe that wakes it ("w": the hold may have changed) or stops it
 * ("x").
 */
static int psi_fd = -1;
static int psi_stop[2] = { -1, -1 };
static pthread_t psi_thread;
static bool psi_thread_started;

/* What a child of fork must write back to /proc/self/oom_score_adj:
 * the value nbdkit had before the filter lowered it.  Formatted in
 * advance, since the child of a multithreaded process may only make
 * async-signal-safe calls.
 */
static char oom_saved[16] = "0";

static void
warning (const char *fmt, ...)
{
  va_list ap;

  /* nbdkit 1.32 has no warning call; before nbdkit daemonizes stderr
   * is still the user's terminal.
   */
  fprintf (stderr, "nbdkit: throttle: warning: ");
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
}

/* The English text of an errno.  Not strerror or %m: their message
 * catalogue lookup makes nbdkit hang in exit under LD_PRELOAD=libasan
 * (p11-kit's destructor waits in freelocale).
 */
static const char *
errtext (int err)
{
  const char *s = strerrordesc_np (err);

  return s ? s : "unknown error";
}

/* In the order of enum guard_mode and enum lock_mode. */
static const char *const guard_words[] = { "off", "auto", "on", NULL };
static const char *const lock_words[] = {
  "off", "pool", "onfault", "auto", NULL
};

static int
parse_guard (const char *key, const char *value, enum guard_mode *mode)
{
  int i;

  if (throttle_parse_word (key, value, guard_words,
                           "expected auto, on or off", &i) == -1)
    return -1;
  *mode = i;
  return 1;
}

int
throttle_guards_config (const char *key, const char *value)
{
  int64_t size;
  int i;

  if (strcmp (key, "throttle-io-flusher") == 0)
    return parse_guard (key, value, &io_flusher_mode);
  if (strcmp (key, "throttle-rt") == 0)
    return parse_guard (key, value, &rt_mode);
  if (strcmp (key, "throttle-oom") == 0)
    return parse_guard (key, value, &oom_mode);
  if (strcmp (key, "throttle-rt-hold") == 0)
    return throttle_parse_seconds (key, value, 0, 86400,
                                   "expected a number of seconds from 0 to "
                                   "86400", &rt_hold_param);
  if (strcmp (key, "throttle-rt-pressure") == 0) {
    if (value[0] != '/') {
      nbdkit_error ("%s=%s: expected the absolute path of a PSI file "
                    "(/proc/pressure/memory, or a cgroup's memory.pressure)",
                    key, value);
      return -1;
    }
    psi_path = value;
    return 1;
  }
  if (strcmp (key, "throttle-mlock") == 0) {
    if (throttle_parse_word (key, value, lock_words,
                             "expected auto, onfault, pool or off", &i) == -1)
      return -1;
    mlock_mode = i;
    return 1;
  }
  if (strcmp (key, "throttle-reserve") == 0) {
    /* (nbdkit refuses what is not a size; every size is good.) */
    if (throttle_parse_size (key, value, 0, INT64_MAX, "", &size) == -1)
      return -1;
    reserve_param = size;
    return 1;
  }
  if (strcmp (key, "throttle-threads") == 0)
    return throttle_parse_unsigned (key, value, 1, 1024,
                                    " (nbdkit's --threads value)",
                                    &threads_param);
  if (strcmp (key, "throttle-max-request") == 0) {
    if (strcmp (value, "plugin") == 0) {
      max_request_plugin = true;
      max_request = NBDKIT_MAX_REQUEST;
      return 1;
    }
    if (throttle_parse_size (key, value, MIN_MAX_REQUEST, MAX_MAX_REQUEST,
                             "expected a size from 64K to 32M (the largest "
                             "read or write a client may send), or plugin",
                             &size) == -1)
      return -1;
    max_request_plugin = false;
    max_request = size;
    return 1;
  }
  return 0;
}

uint32_t
throttle_guards_max_request (void)
{
  return max_request_plugin ? 0 : max_request;
}

bool
throttle_guards_rt_active (void)
{
  return rt_active;
}

bool
throttle_guards_lock_pools (void)
{
  return mlock_mode != LOCK_OFF;
}

/* Reads "Key:   value..." from /proc/self/status into buf. */
static int
proc_status_field (const char *key, char *buf, size_t len)
{
  FILE *fp = fopen ("/proc/self/status", "r");
  char line[256];
  size_t klen = strlen (key);
  int r = -1;

  if (fp == NULL)
    return -1;
  while (fgets (line, sizeof line, fp)) {
    if (strncmp (line, key, klen) == 0 && line[klen] == ':') {
      const char *v = line + klen + 1;

      v += strspn (v, " \t");
      snprintf (buf, len, "%.*s", (int) strcspn (v, "\n"), v);
      r = 0;
      break;
    }
  }
  fclose (fp);
  return r;
}

static bool
have_cap (int bit)
{
  char buf[64];
  unsigned long long caps;

  if (proc_status_field ("CapEff", buf, sizeof buf) == -1 ||
      sscanf (buf, "%llx", &caps) != 1)
    return false;
  return caps & (1ULL << bit);
}

/* A guard the kernel refused: fatal for "on", a warning for "auto". */
static int
refused (enum guard_mode mode, const char *key, const char *what, int err,
         const char *consequence)
{
  if (mode == GUARD_ON) {
    nbdkit_error ("%s=on: %s: %s; use %s=auto or off to start without it",
                  key, what, errtext (err), key);
    return -1;
  }
  warning ("%s=auto: %s: %s: %s", key, what, errtext (err), consequence);
  return 0;
}

#define IO_FLUSHER_WHAT \
  "cannot set PR_SET_IO_FLUSHER (needs CAP_SYS_RESOURCE, Linux >= 5.6)"
#define IO_FLUSHER_CONSEQUENCE \
  "serving without it, NOT SAFE for swap on a device this server serves"
#define RT_WHAT \
  "cannot set SCHED_FIFO (needs CAP_SYS_NICE or RLIMIT_RTPRIO >= 1, " \
  "and real-time runtime in the cgroup)"
#define RT_CONSEQUENCE \
  "read replies may hang under memory pressure unless " \
  "vm.min_free_kbytes is raised"
#define OOM_WHAT \
  "cannot set oom_score_adj to -1000 (needs CAP_SYS_RESOURCE)"
#define OOM_CONSEQUENCE "the OOM killer may kill this server"

/* Each returns 0 or an errno. */
static int
set_io_flusher (int on)
{
  return prctl (PR_SET_IO_FLUSHER, on, 0, 0, 0) == 0 ? 0 : errno;
}

static const struct sched_param fifo_1 = { .sched_priority = 1 };

static int
set_policy (int policy, const struct sched_param *sp)
{
  return sched_setscheduler (0, policy, sp) == 0 ? 0 : errno;
}

/* Whether this thread may become SCHED_FIFO: tried, and undone at once
 * (rt=auto must not leave a thread real-time before it is needed).
 * Returns 0 or the errno that refused it.
 */
static int
rt_probe (void)
{
  int policy = sched_getscheduler (0), err;
  struct sched_param old;

  if (policy == -1 || sched_getparam (0, &old) == -1)
    return errno;
  err = set_policy (SCHED_FIFO, &fifo_1);
  if (err == 0)
    set_policy (policy, &old);
  return err;
}

static int
set_oom_score_adj (const char *value)
{
  int fd, err = 0;
  ssize_t len = strlen (value);

  fd = open ("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd == -1 || write (fd, value, len) != len)
    err = errno;
  if (fd >= 0)
    close (fd);
  return err;
}


/* -1 (RT throttling disabled), the runtime in us, or -2 if unknown. */
static long
rt_runtime_us (void)
{
  FILE *fp = fopen ("/proc/sys/kernel/sched_rt_runtime_us", "r");
  long v = -2;

  if (fp) {
    if (fscanf (fp, "%ld", &v) != 1)
      v = -2;
    fclose (fp);
  }
  return v;
}

/* Tries each process guard and undoes it at once: nbdkit forks the
 * --run command from this thread, which must not inherit them.  The
 * guards are set for real in after_fork; trying them here is what lets
 * "on" refuse to start, and "auto" warn, while stderr is still the
 * user's terminal.
 */
static int
probe_guards (void)
{
  int err;

  if (io_flusher_mode != GUARD_OFF) {
    err = set_io_flusher (1);
    if (err == 0) {
      set_io_flusher (0);
      io_flusher_active = true;
    }
    else if (refused (io_flusher_mode, "throttle-io-flusher",
                      IO_FLUSHER_WHAT, err, IO_FLUSHER_CONSEQUENCE) == -1)
      return -1;
  }

  if (rt_mode != GUARD_OFF) {
    /* With throttling off a runaway SCHED_FIFO thread owns its CPU. */
    if (rt_runtime_us () == -1) {
      if (rt_mode == GUARD_ON) {
        nbdkit_error ("throttle-rt=on: the kernel's real-time throttling is "
                      "disabled (kernel.sched_rt_runtime_us = -1): refusing "
                      "to run SCHED_FIFO threads that could starve the "
                      "machine; restore it (e.g. sysctl "
                      "kernel.sched_rt_runtime_us=950000)");
        return -1;
      }
      warning ("throttle-rt=auto: kernel.sched_rt_runtime_us = -1 "
               "(real-time throttling disabled): not using SCHED_FIFO");
    }
    else {
      err = rt_probe ();
      if (err == 0)
        rt_active = true;
      else if (refused (rt_mode, "throttle-rt", RT_WHAT, err,
                        RT_CONSEQUENCE) == -1)
        return -1;
    }
  }

  if (oom_mode != GUARD_OFF) {
    char old[32] = "0";
    FILE *fp = fopen ("/proc/self/oom_score_adj", "r");

    if (fp) {
      if (fscanf (fp, "%31s", old) != 1)
        strcpy (old, "0");
      fclose (fp);
    }
    err = set_oom_score_adj ("-1000");
    if (err == 0) {
      set_oom_score_adj (old);    /* raising it needs no privilege */
      snprintf (oom_saved, sizeof oom_saved, "%s", old);
      oom_active = true;
    }
    else if (refused (oom_mode, "throttle-oom", OOM_WHAT, err,
                      OOM_CONSEQUENCE) == -1)
      return -1;
  }
  return 0;
}

/* Sets on this thread (nbdkit's main thread, in after_fork) what the
 * probe found permitted.  fork and clone copy the task flags, the
 * policy and oom_score_adj, so every thread created later inherits
 * them; processes get rid of them (throttle_guards_thread_enter,
 * fork_child).  Fails only if an "on" guard is refused now, e.g. after
 * -u dropped the capabilities.
 */
static int
apply_guards (void)
{
  int err;

  if (io_flusher_active && (err = set_io_flusher (1)) != 0) {
    io_flusher_active = false;
    if (refused (io_flusher_mode, "throttle-io-flusher", IO_FLUSHER_WHAT,
                 err, IO_FLUSHER_CONSEQUENCE) == -1)
      return -1;
  }
  /* Still permitted (-u may have dropped CAP_SYS_NICE)?  rt_start
   * sets the policy, for "on" at once.
   */
  if (rt_active && (err = rt_probe ()) != 0) {
    rt_active = false;
    if (rt_mode == GUARD_ON) {
      nbdkit_error ("throttle-rt=on: %s: %s; use throttle-rt=auto or off "
                    "to start without it", RT_WHAT, errtext (err));
      return -1;
    }
    refused (rt_mode, "throttle-rt", RT_WHAT, err, RT_CONSEQUENCE);
  }
  if (oom_active && (err = set_oom_score_adj ("-1000")) != 0) {
    oom_active = false;
    if (refused (oom_mode, "throttle-oom", OOM_WHAT, err,
                 OOM_CONSEQUENCE) == -1)
      return -1;
  }
  return 0;
}

/* Runs in the child of every fork () in nbdkit once the guards are set
 * (pthread_atfork), until the child execs: what a plugin runs (the sh
 * and eval plugins fork a script for each method) must not be
 * real-time, an IO flusher nor OOM-proof.  Async-signal-safe calls
 * only.  A request thread's children are SCHED_OTHER already
 * (SCHED_RESET_ON_FORK); a child of another thread, such as the
 * connection thread running the plugin's .open, is not.  Lowering the
 * policy needs no privilege; clearing PR_SET_IO_FLUSHER needs
 * CAP_SYS_RESOURCE, which the child has since nbdkit had it to set the
 * flag; raising oom_score_adj needs nothing.  Children of posix_spawn,
 * vfork or system () run no fork handlers: see "WHAT THE PLUGIN RUNS"
 * in nbdkit-throttle-filter(1).
 */
static void
fork_child (void)
{
  static const struct sched_param other = { .sched_priority = 0 };
  int saved_errno = errno;

  if (rt_active && sched_getscheduler (0) != SCHED_OTHER)
    sched_setscheduler (0, SCHED_OTHER, &other);
  if (io_flusher_active)
    set_io_flusher (0);
  if (oom_active)
    set_oom_score_adj (oom_saved);
  errno = saved_errno;
}

static const char *
mlock_name (void)
{
  switch (mlock_mode) {
  case LOCK_OFF: return "off";
  case LOCK_POOL: return "pool";
  case LOCK_ONFAULT: return "onfault";
  default: return "auto";
  }
}

/* MCL_FUTURE over RLIMIT_MEMLOCK makes later mmap and brk fail, so
 * malloc would start failing at random in a running server: lock
 * everything only where no limit applies.
 */
static bool
can_lock_all (unsigned long long *limit_kib)
{
  struct rlimit rl;

  *limit_kib = 0;
  if (have_cap (CAP_IPC_LOCK_BIT))
    return true;
  if (getrlimit (RLIMIT_MEMLOCK, &rl) == 0) {
    if (rl.rlim_cur == RLIM_INFINITY)
      return true;
    *limit_kib = rl.rlim_cur / 1024;
  }
  return false;
}

/* Decides lock_all; fails for onfault without the permission. */
static int
decide_mlock (void)
{
  unsigned long long limit;

  lock_all = false;
  if (mlock_mode != LOCK_ONFAULT && mlock_mode != LOCK_AUTO)
    return 0;
  if (can_lock_all (&limit)) {
    lock_all = true;
    return 0;
  }
  if (mlock_mode == LOCK_ONFAULT) {
    nbdkit_error ("throttle-mlock=onfault: needs CAP_IPC_LOCK or an "
                  "unlimited RLIMIT_MEMLOCK (ulimit -l is %llu KiB): with a "
                  "limit the server's later allocations would fail; use "
                  "throttle-mlock=pool", limit);
    return -1;
  }
  warning ("throttle-mlock=auto: cannot lock all of nbdkit's memory (needs "
           "CAP_IPC_LOCK or an unlimited RLIMIT_MEMLOCK; ulimit -l is "
           "%llu KiB): locking only the pools and the heap reserve, NOT "
           "SAFE for swap on a device this server serves", limit);
  return 0;
}

static int
size_reserve (int thread_model)
{
  uint64_t workers, per_request, ram;

  if (reserve_param >= 0)
    reserve_size = reserve_param;
  else {
    /* nbdkit gives each worker thread its own request buffer, which
     * keeps the size of the largest request that worker has served.
     * Serialized models serve every request in the connection thread.
     */
    workers = thread_model >= NBDKIT_THREAD_MODEL_PARALLEL &&
      threads_param > 1 ? threads_param : 1;
    per_request = max_request < KERNEL_REQUEST ? max_request : KERNEL_REQUEST;
    reserve_size = workers * per_request;
  }
  ram = (uint64_t) sysconf (_SC_PHYS_PAGES) * sysconf (_SC_PAGESIZE);
  if (reserve_size > ram / 2) {
    nbdkit_error ("throttle-reserve: %zu bytes is more than half of RAM "
                  "(%" PRIu64 " bytes): set throttle-reserve (or "
                  "throttle-threads) to what nbdkit's workers can need, "
                  "or 0 for no reserve", reserve_size, ram);
    return -1;
  }
  return 0;
}

int
throttle_guards_get_ready (int thread_model)
{
  if (probe_guards () == -1 ||
      decide_mlock () == -1 ||
      size_reserve (thread_model) == -1)
    return -1;
  /* Before the control thread exists (throttle-control-proto.h). */
  throttle_control_add_extra_stats (rt_stats_json);
  throttle_control_add_setter (&rt_setter);
  if (throttle_debug_verbose)
    nbdkit_debug ("throttle: guards planned: io-flusher %s, SCHED_FIFO %s, "
                  "oom_score_adj %s, mlock %s (%s), reserve %zu bytes",
                  io_flusher_active ? "yes" : "no",
                  !rt_active ? "no" : rt_mode == GUARD_ON ? "yes" :
                  "for kernel clients and under memory pressure",
                  oom_active ? "-1000" : "unchanged",
                  mlock_name (),
                  lock_all ? "everything, on fault" :
                  mlock_mode == LOCK_OFF ? "nothing" : "pools and reserve",
                  reserve_size);
  return 0;
}

/* Sets the policy of every thread of the process but the watcher to
 * SCHED_FIFO (on) or SCHED_OTHER, and returns how many it changed.
 * Threads created later inherit it from their creator (the main thread
 * is among those walked); a thread the walk misses, or one that set
 * its own policy from a stale rt_on meanwhile, switches itself at its
 * next throttle_guards_thread_enter, which sees rt_gen change.  Caller
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
  bool want = throttle_rt_wanted (&rt_state, now, &recheck);
  struct timespec wall;
  unsigned n;

  if (want == atomic_load (&rt_on))
    return recheck;
  atomic_store (&rt_on, want);
  atomic_fetch_add (&rt_gen, 1);
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
                  errtext (errno));
}

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

/* The class of the calling thread's connection's peer; writes what was
 * found into why either way.
 */
static enum throttle_rt_peer
classify_peer (char *why, size_t len)
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

int
throttle_guards_open (void)
{
  char why[256];
  enum throttle_rt_peer c;

  if (!rt_active)
    return -1;
  c = classify_peer (why, sizeof why);
  pthread_mutex_lock (&rt_lock);
  throttle_rt_peer_open (&rt_state, c, throttle_now_ns ());
  rt_apply_locked (throttle_now_ns (), why);
  pthread_mutex_unlock (&rt_lock);
  if (throttle_debug_verbose)
    nbdkit_debug ("throttle: guards: throttle-rt peer: %s: real-time %s",
                  why, atomic_load (&rt_on) ? "on" : "off");
  return c;
}

void
throttle_guards_close (int peer)
{
  if (peer < 0)
    return;
  pthread_mutex_lock (&rt_lock);
  throttle_rt_peer_close (&rt_state, peer, throttle_now_ns ());
  rt_apply_locked (throttle_now_ns (), NULL);
  pthread_mutex_unlock (&rt_lock);
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

  for (i = 0; guard_words[i]; i++)
    if (strcmp (value, guard_words[i]) == 0)
      break;
  if (guard_words[i] == NULL) {
    snprintf (err, len, "set rt: bad mode \"%s\": expected on, off or auto",
              value);
    return -1;
  }
  if (!rt_active && i != GUARD_OFF) {
    snprintf (err, len, "set rt %s: this server cannot be real-time "
              "(started with throttle-rt=off, or SCHED_FIFO was refused: "
              "see its log)", value);
    return -1;
  }
  if (!rt_active)
    return 0;
  pthread_mutex_lock (&rt_lock);
  throttle_rt_set_mode (&rt_state,
                        i == GUARD_ON ? THROTTLE_RT_ON :
                        i == GUARD_OFF ? THROTTLE_RT_OFF : THROTTLE_RT_AUTO,
                        throttle_now_ns ());
  snprintf (event, sizeof event, "set rt %s (control socket)", value);
  rt_apply_locked (throttle_now_ns (), event);
  pthread_mutex_unlock (&rt_lock);
  nbdkit_debug ("throttle: guards: control: set rt %s", value);
  rt_wake_watcher ();
  return 0;
}

/* The JSON member "rt":{...} (mode, whether on and why, the peers,
 * the hold), NUL-terminated, or "" if it does not fit in len bytes.
 */
static void
rt_json (char *buf, size_t len)
{
  struct throttle_rt st;
  struct timespec now, when;
  char why[sizeof rt_why];
  uint64_t recheck = 0, t;
  bool on;
  FILE *fp;

  if (len > 0)
    buf[0] = '\0';
  pthread_mutex_lock (&rt_lock);
  on = atomic_load (&rt_on);
  st = rt_state;
  if (rt_active)
    throttle_rt_wanted (&st, throttle_now_ns (), &recheck);
  memcpy (why, rt_why, sizeof why);
  when = rt_when;
  pthread_mutex_unlock (&rt_lock);

  fp = fmemopen (buf, len, "w");
  if (fp == NULL)
    return;
  clock_gettime (CLOCK_MONOTONIC, &now);
  t = throttle_now_ns ();
  fprintf (fp, "\"rt\":{\"mode\":\"%s\",\"on\":%s,\"why\":",
           !rt_active ? "off" : throttle_rt_mode_name (st.mode),
           on ? "true" : "false");
  throttle_json_string (fp, !rt_active ?
                        "not permitted (throttle-rt=off at start, or "
                        "SCHED_FIFO refused)" :
                        why[0] ? why : st.reason);
  fputs (",\"decision\":", fp);
  throttle_json_string (fp, !rt_active ? "" : st.reason);
  fprintf (fp, ",\"since_s\":%.3f,\"peers\":{\"kernel\":%u,\"trusted\":%u,"
           "\"other\":%u},\"hold_s\":%.3f,\"pressure_signal\":%s",
           when.tv_sec || when.tv_nsec ?
           (now.tv_sec - when.tv_sec) + (now.tv_nsec - when.tv_nsec) / 1e9 :
           0.0,
           st.peers[THROTTLE_RT_PEER_KERNEL],
           st.peers[THROTTLE_RT_PEER_TRUSTED],
           st.peers[THROTTLE_RT_PEER_OTHER], rt_hold_param,
           st.no_pressure_signal ? "false" : "true");
  if (on && recheck > t)
    fprintf (fp, ",\"off_in_s\":%.3f}", (recheck - t) / 1e9);
  else
    fputs (",\"off_in_s\":null}", fp);
  /* Output that did not fit is dropped whole. */
  if (fclose (fp) == EOF || memchr (buf, '\0', len) == NULL ||
      strlen (buf) + 1 >= len)
    buf[0] = '\0';
}

/* The server's real-time mode (see throttle-guards.h). */
static void
set_rt (FILE *out, struct throttle_export *unused, const char *value)
{
  char err[256], rt[1024];

  if (rt_set_mode (value, err, sizeof err) == -1) {
    throttle_control_reply_error (out, "%s", err);
    return;
  }
  rt_json (rt, sizeof rt);
  fprintf (out, "{\"ok\":true%s%s}\n", rt[0] ? "," : "", rt);
}

/* The control socket's top-level stats member. */
static void
rt_stats_json (struct throttle_export *exp, char *buf, size_t len)
{
  if (len > 0)
    buf[0] = '\0';
  if (exp == NULL)
    rt_json (buf, len);
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

    psi_fd = open (psi_path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
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
            trigger ? trigger : "", psi_path);
  pthread_mutex_lock (&rt_lock);
  deadline = rt_apply_locked (throttle_now_ns (), NULL);
  pthread_mutex_unlock (&rt_lock);
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
    pthread_mutex_lock (&rt_lock);
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
    pthread_mutex_unlock (&rt_lock);
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

  throttle_rt_init (&rt_state, (uint64_t) (rt_hold_param * 1e9));
  rt_state.mode = rt_mode == GUARD_ON ? THROTTLE_RT_ON : THROTTLE_RT_AUTO;
  task_dir_fd = open ("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (task_dir_fd == -1)
    warning ("throttle-rt: cannot open /proc/self/task: %s: only threads "
             "that serve a request change policy", errtext (errno));
  err = psi_open (&trigger);
  if (err) {
    rt_state.no_pressure_signal = true;
    nbdkit_debug ("throttle: guards: no memory pressure trigger (%s: %s): "
                  "clients of root or the server's uid count as kernel "
                  "clients", psi_path, errtext (err));
  }
  pthread_mutex_lock (&rt_lock);
  rt_apply_locked (throttle_now_ns (), rt_mode == GUARD_ON ?
                   "throttle-rt=on" : NULL);
  pthread_mutex_unlock (&rt_lock);

  if (pipe2 (psi_stop, O_CLOEXEC | O_NONBLOCK) == -1) {
    warning ("throttle-rt: pipe: %s: real-time is switched off only at a "
             "connection's open or close", errtext (errno));
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
    warning ("throttle-rt: cannot start the real-time watcher: %s: memory "
             "pressure is not watched, and real-time is switched off only "
             "at a connection's open or close", errtext (err));
    pthread_mutex_lock (&rt_lock);
    rt_state.no_pressure_signal = true;
    pthread_mutex_unlock (&rt_lock);
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

/* Makes 'size' bytes of the main heap resident (and locked) so that
 * nbdkit's per-thread request buffers, grown by realloc + memset on a
 * worker's first large request, land on pages that are already there.
 */
static void
grow_reserve (size_t size)
{
  const long page = sysconf (_SC_PAGESIZE);
  volatile char *p;
  size_t i;

  /* While the reserve is grown: big blocks from the heap, not mmap
   * (they would vanish on free); no heap memory given back; one arena,
   * so every thread allocates from the heap grown here.  nbdkit has
   * only this thread now.
   */
  if (mallopt (M_MMAP_MAX, 0) != 1 ||
      mallopt (M_TRIM_THRESHOLD, -1) != 1 ||
      mallopt (M_ARENA_MAX, 1) != 1)
    warning ("throttle-reserve: mallopt refused a setting: the heap "
             "reserve may not cover nbdkit's request buffers");

  p = malloc (size);
  if (p == NULL) {
    warning ("throttle-reserve: cannot allocate %zu bytes: %s: "
             "running without the heap reserve", size, errtext (errno));
    return;
  }
  /* Through a volatile pointer: GCC deletes malloc + memset + free. */
  for (i = 0; i < size; i += page)
    p[i] = 0;
  p[size - 1] = 0;

  if (mlock_mode != LOCK_OFF) {
    uintptr_t start = ((uintptr_t) p + page - 1) & ~(uintptr_t) (page - 1);
    uintptr_t end = ((uintptr_t) p + size) & ~(uintptr_t) (page - 1);

    /* The lock belongs to the pages, not to the allocation: it stays
     * after free because the heap is trimmed only down to the
     * reserve's size of free memory above what is in use (M_TOP_PAD).
     */
    if (end > start) {
      if (mlock ((void *) start, end - start) == 0)
        reserve_locked = true;
      else
        warning ("throttle-mlock=%s: cannot lock the heap reserve of %zu "
                 "bytes: %s (needs CAP_IPC_LOCK or RLIMIT_MEMLOCK): it may "
                 "be swapped out", mlock_name (), size, errtext (errno));
    }
  }
  free ((void *) p);

  /* From now on, give back what a burst of requests takes beyond the
   * reserve (a client could otherwise leave nbdkit holding hundreds of
   * MiB, locked).  Free memory at the heap top beyond the reserve plus
   * one request is trimmed down to the reserve, whose pages stay
   * faulted and locked.  free () checks this whenever it merges a large
   * chunk into the top, but malloc_consolidate merges fastbin chunks
   * into it without checking: no fastbins (tcache still serves small
   * requests).  A request buffer larger than the filter accepts (only
   * a client ignoring the advertised maximum makes nbdkit allocate
   * one) gets a mapping of its own, unmapped when nbdkit frees it.
   */
  if (size <= (size_t) INT_MAX - max_request) {
    if (mallopt (M_TOP_PAD, size) != 1 ||
        mallopt (M_TRIM_THRESHOLD, size + max_request) != 1 ||
        mallopt (M_MXFAST, 0) != 1)
      warning ("throttle-reserve: mallopt refused a setting: memory beyond "
               "the reserve may not be given back");
  }
  else
    warning ("throttle-reserve: %zu bytes is too large for malloc's trim "
             "settings: memory beyond the reserve is never given back",
             size);
  if (mallopt (M_MMAP_THRESHOLD,
               max_request + page < MAX_MAX_REQUEST ?
               max_request + page : MAX_MAX_REQUEST) != 1 ||
      mallopt (M_MMAP_MAX, 65536) != 1)
    warning ("throttle-reserve: mallopt refused a setting: oversized "
             "request buffers stay in the heap");
}

int
throttle_guards_after_fork (void)
{
  char vmlck[64] = "?", vmrss[64] = "?";
  struct mallinfo2 mi;
  int err;

  if (apply_guards () == -1)
    return -1;
  if (rt_active || io_flusher_active || oom_active) {
    err = pthread_atfork (NULL, NULL, fork_child);
    if (err) {
      nbdkit_error ("throttle: pthread_atfork: %s: cannot keep the guards "
                    "out of the plugin's child processes", errtext (err));
      return -1;
    }
  }

  /* Locks are not inherited across fork, so not done in get_ready;
   * and -u may have dropped CAP_IPC_LOCK since.
   */
  if (lock_all) {
    unsigned long long limit;

    err = 0;
    if (!can_lock_all (&limit))
      err = EPERM;
    else if (mlockall (MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) == -1)
      err = errno;
    if (err) {
      lock_all = false;
      if (mlock_mode == LOCK_ONFAULT) {
        nbdkit_error ("throttle-mlock=onfault: mlockall: %s", errtext (err));
        return -1;
      }
      warning ("throttle-mlock=auto: mlockall: %s: locking only the pools "
               "and the heap reserve", errtext (err));
    }
  }

  if (reserve_size > 0)
    grow_reserve (reserve_size);
  /* After the locks and the reserve: the watcher's stack is locked
   * and takes nothing from the reserve.
   */
  if (rt_active)
    rt_start ();

  /* Under MCL_ONFAULT VmLck counts every locked mapping, touched or
   * not; what is pinned in RAM is at most VmRSS.
   */
  proc_status_field ("VmLck", vmlck, sizeof vmlck);
  proc_status_field ("VmRSS", vmrss, sizeof vmrss);
  mi = mallinfo2 ();
  nbdkit_debug ("throttle: guards: io-flusher %s, SCHED_FIFO %s, "
                "oom_score_adj %s, mlock %s (%s), heap reserve %zu bytes (%s), "
                "free at heap top %zu bytes, VmLck %s, VmRSS %s",
                io_flusher_active ? "set" : "not set",
                !rt_active ? "not set" :
                atomic_load (&rt_on) ? "set" :
                "on demand (a kernel nbd client of root or the server's "
                "uid, or memory pressure while a client of theirs is "
                "connected)",
                oom_active ? "-1000" : "unchanged",
                mlock_name (),
                lock_all ? "everything, on fault" :
                mlock_mode == LOCK_OFF ? "nothing" : "pools and reserve",
                reserve_size,
                reserve_size == 0 ? "none" :
                reserve_locked ? "faulted and locked" : "faulted, not locked",
                mi.keepcost, vmlck, vmrss);
  return 0;
}

void
throttle_guards_thread_enter (void)
{
  unsigned gen = atomic_load_explicit (&rt_gen, memory_order_acquire);
  bool rt, fifo;

  /* The cost on every request: one thread-local load and one atomic
   * load.
   */
  if (__builtin_expect (thread_gen == gen, true))
    return;

  /* Threads created after after_fork inherit the task flags, and the
   * policy of their creator; this catches a thread that existed before
   * (or code that cleared them), and a thread a switch of real-time
   * missed.  A real-time request thread also gets SCHED_RESET_ON_FORK:
   * whatever it starts (the plugin's script, helper process or
   * thread), however (fork, vfork, posix_spawn, pthread_create),
   * starts SCHED_OTHER.  A switch between the load of rt_gen and the
   * policy set here leaves this thread stale until its next call,
   * which sees rt_gen changed.
   */
  if (thread_gen == 0 && io_flusher_active &&
      prctl (PR_GET_IO_FLUSHER, 0, 0, 0, 0) != 1 &&
      prctl (PR_SET_IO_FLUSHER, 1, 0, 0, 0) == -1)
    nbdkit_debug ("throttle: PR_SET_IO_FLUSHER in thread %ld: %s",
                  (long) gettid (), errtext (errno));
  if (rt_active) {
    static const struct sched_param other = { .sched_priority = 0 };
    int policy = sched_getscheduler (0);

    rt = atomic_load (&rt_on);
    fifo = policy != -1 && (policy & ~SCHED_RESET_ON_FORK) == SCHED_FIFO;
    if (rt && policy != (SCHED_FIFO | SCHED_RESET_ON_FORK) &&
        sched_setscheduler (0, SCHED_FIFO | SCHED_RESET_ON_FORK,
                            &fifo_1) == -1)
      nbdkit_debug ("throttle: SCHED_FIFO in thread %ld: %s",
                    (long) gettid (), errtext (errno));
    if (!rt && fifo &&
        sched_setscheduler (0, SCHED_OTHER, &other) == -1)
      nbdkit_debug ("throttle: SCHED_OTHER in thread %ld: %s",
                    (long) gettid (), errtext (errno));
  }
  if (throttle_debug_verbose)
    nbdkit_debug ("throttle: guards: thread %ld: io-flusher %s, policy %s",
                  (long) gettid (),
                  !io_flusher_active ? "not set" :
                  prctl (PR_GET_IO_FLUSHER, 0, 0, 0, 0) == 1 ? "set" : "lost",
                  (sched_getscheduler (0) & ~SCHED_RESET_ON_FORK) ==
                  SCHED_FIFO ? "SCHED_FIFO" : "other");
  thread_gen = gen;
}

void
throttle_guards_unload (void)
{
  char vmlck[64] = "?";

  rt_stop ();
  if (rt_active) {
    pthread_mutex_lock (&rt_lock);
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
    pthread_mutex_unlock (&rt_lock);
  }

  if (throttle_debug_verbose) {
    proc_status_field ("VmLck", vmlck, sizeof vmlck);
    nbdkit_debug ("throttle: guards: at unload VmLck %s", vmlck);
  }
}
