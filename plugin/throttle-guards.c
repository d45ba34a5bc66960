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

#include "throttle-guards.h"
#include "throttle-parse.h"

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
static __thread unsigned char thread_state
  __attribute__ ((tls_model ("initial-exec")));
enum { THREAD_NEW, THREAD_ENTERED, THREAD_DONE };

/* throttle-rt: whether the process is real-time now.  With "on" from
 * after_fork; with "auto" from the moment a connection's peer is a
 * kernel nbd client on this machine, or memory pressure begins
 * (rt_switch_on); it never goes back.  Real-time priority makes the
 * request threads preempt a client on the same CPUs at every request
 * (see "REAL-TIME PRIORITY" in nbdkit-throttle-filter(1)): "auto" pays
 * that only where the server may be what the kernel waits for.
 * Written under rt_lock, read without it.
 */
static atomic_bool rt_on;
/* Lock rule: rt_lock serializes rt_switch_on (the walk over the tasks
 * and its static buffer, rt_why, rt_when).
 */
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;
static char rt_why[160];
static struct timespec rt_when;

/* /proc/self/task, opened in after_fork: walking it must not allocate
 * (opendir does), since memory pressure is one reason to walk it.
 */
static int task_dir_fd = -1;
/* The memory pressure watcher: a PSI trigger on /proc/pressure/memory
 * and a pipe that tells the watcher to stop.
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
  /* "auto" leaves the main thread as it is: rt_switch_on sets the
   * policy when it is needed.
   */
  if (rt_active && rt_mode == GUARD_ON) {
    err = set_policy (SCHED_FIFO, &fifo_1);
    if (err != 0) {
      rt_active = false;
      nbdkit_error ("throttle-rt=on: %s: %s; use throttle-rt=auto or off "
                    "to start without it", RT_WHAT, errtext (err));
      return -1;
    }
    snprintf (rt_why, sizeof rt_why, "throttle-rt=on");
    clock_gettime (CLOCK_MONOTONIC, &rt_when);
    atomic_store (&rt_on, true);
  }
  else if (rt_active) {
    /* Still permitted (-u may have dropped CAP_SYS_NICE)? */
    err = rt_probe ();
    if (err != 0) {
      rt_active = false;
      refused (rt_mode, "throttle-rt", RT_WHAT, err, RT_CONSEQUENCE);
    }
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

/* Sets SCHED_FIFO on every thread of the process that is not
 * real-time yet, and returns how many it changed.  Threads created
 * later inherit it from their (now real-time) creator; a thread the
 * walk misses switches itself in throttle_guards_thread_enter, which
 * sees rt_on.  Caller holds rt_lock (the buffer is static: no
 * allocation under memory pressure).
 */
static unsigned
rt_set_all_threads (void)
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
      int policy;

      memcpy (&reclen, buf + off + 16, sizeof reclen);
      off += reclen;
      for (; *name >= '0' && *name <= '9'; name++)
        tid = tid * 10 + (*name - '0');
      if (tid <= 0 || *name != '\0')
        continue;
      policy = sched_getscheduler (tid);
      if (policy == -1 || (policy & ~SCHED_RESET_ON_FORK) == SCHED_FIFO)
        continue;
      if (sched_setscheduler (tid, SCHED_FIFO, &fifo_1) == 0)
        n++;
    }
  }
  return n;
}

/* throttle-rt=auto: makes the whole process real-time from now on, for
 * the reason 'why'.  The whole process, not one connection: writeback
 * writers and every connection's requests share the budget with the
 * connection that needs it, and a SCHED_OTHER thread holding it would
 * stall the real-time ones.  Allocates nothing unless nbdkit runs
 * verbose (its debug message): the memory pressure watcher calls it.
 */
static void
rt_switch_on (const char *why)
{
  unsigned n;
  struct timespec now;

  pthread_mutex_lock (&rt_lock);
  if (atomic_load (&rt_on)) {
    pthread_mutex_unlock (&rt_lock);
    return;
  }
  atomic_store (&rt_on, true);
  clock_gettime (CLOCK_MONOTONIC, &rt_when);
  snprintf (rt_why, sizeof rt_why, "%s", why);
  n = rt_set_all_threads ();
  pthread_mutex_unlock (&rt_lock);
  clock_gettime (CLOCK_REALTIME, &now);
  nbdkit_debug ("throttle: guards: real-time on: %s: SCHED_FIFO set on %u "
                "threads at %lld.%06ld", why, n,
                (long long) now.tv_sec, now.tv_nsec / 1000);
}

/* Is the process named by /proc/PID one that hands its NBD socket to
 * the kernel's nbd driver?  Then this server serves a block device of
 * this machine, possibly its swap.  By comm (what it was started as)
 * or by the executable's name.
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

/* Decides for the connection of the calling thread; writes the reason
 * into why either way.
 */
static bool
peer_is_local_kernel_client (char *why, size_t len)
{
  struct sockaddr_storage ss;
  socklen_t sslen = sizeof ss;
  char name[64], addr[INET6_ADDRSTRLEN] = "?";
  int64_t pid;

  if (nbdkit_peer_name ((struct sockaddr *) &ss, &sslen) == -1) {
    snprintf (why, len, "peer unknown (not a socket)");
    return false;
  }
  switch (ss.ss_family) {
  case AF_UNIX:
    pid = nbdkit_peer_pid ();
    if (pid <= 0) {
      snprintf (why, len, "Unix socket peer without a PID");
      return false;
    }
    if (pid_is_kernel_client (pid, name, sizeof name)) {
      snprintf (why, len, "peer PID %" PRIi64 " is %s, a kernel nbd client "
                "on this machine", pid, name);
      return true;
    }
    snprintf (why, len, "peer PID %" PRIi64 " is %s, not a kernel nbd client",
              pid, name);
    return false;
  case AF_INET: {
    const struct sockaddr_in *sin = (const struct sockaddr_in *) &ss;

    inet_ntop (AF_INET, &sin->sin_addr, addr, sizeof addr);
    /* Which process is at the other end cannot be told without
     * searching every process's sockets: a loopback peer may be the
     * kernel, so it is treated as one.
     */
    if ((ntohl (sin->sin_addr.s_addr) >> 24) == 127) {
      snprintf (why, len, "TCP peer %s on loopback, possibly a kernel nbd "
                "client on this machine", addr);
      return true;
    }
    break;
  }
  case AF_INET6: {
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *) &ss;

    inet_ntop (AF_INET6, &sin6->sin6_addr, addr, sizeof addr);
    if (IN6_IS_ADDR_LOOPBACK (&sin6->sin6_addr) ||
        (IN6_IS_ADDR_V4MAPPED (&sin6->sin6_addr) &&
         sin6->sin6_addr.s6_addr[12] == 127)) {
      snprintf (why, len, "TCP peer %s on loopback, possibly a kernel nbd "
                "client on this machine", addr);
      return true;
    }
    break;
  }
  default:
    snprintf (why, len, "peer of address family %d, not on this machine",
              (int) ss.ss_family);
    return false;
  }
  snprintf (why, len, "TCP peer %s, not on this machine", addr);
  return false;
}

void
throttle_guards_open (void)
{
  char why[160];
  bool kernel;

  if (!rt_active || rt_mode != GUARD_AUTO || atomic_load (&rt_on))
    return;
  kernel = peer_is_local_kernel_client (why, sizeof why);
  if (kernel)
    rt_switch_on (why);
  else if (throttle_debug_verbose)
    nbdkit_debug ("throttle: guards: throttle-rt=auto: %s: request threads "
                  "stay SCHED_OTHER until memory pressure begins", why);
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

    psi_fd = open ("/proc/pressure/memory", O_RDWR | O_NONBLOCK | O_CLOEXEC);
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

/* The watcher: waits for the PSI trigger (or the stop pipe), makes the
 * process real-time and ends.  Started real-time (rt_auto_start).
 */
static void *
psi_watch (void *arg)
{
  const char *trigger = arg;
  struct pollfd fds[2] = {
    { .fd = psi_fd, .events = POLLPRI },
    { .fd = psi_stop[0], .events = POLLIN },
  };
  char why[96];

  snprintf (why, sizeof why, "memory pressure (PSI trigger \"%s\")", trigger);
  for (;;) {
    if (poll (fds, 2, -1) == -1) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (fds[1].revents)
      break;
    if (fds[0].revents & POLLPRI) {
      rt_switch_on (why);
      break;
    }
    if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
      /* The trigger is gone (its cgroup was removed): nothing will
       * warn of memory pressure any more.
       */
      rt_switch_on ("the memory pressure trigger failed");
      break;
    }
  }
  return NULL;
}

/* throttle-rt=auto: opens /proc/self/task and starts the memory
 * pressure watcher, or, where no PSI trigger can be set, makes the
 * process real-time at once (as throttle-rt=on would).  Called in
 * after_fork.
 */
static void
rt_auto_start (void)
{
  static const char *trigger;
  pthread_attr_t attr;
  char why[160];
  int err;

  task_dir_fd = open ("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (task_dir_fd == -1) {
    snprintf (why, sizeof why, "cannot open /proc/self/task: %s",
              errtext (errno));
    goto always;
  }
  err = psi_open (&trigger);
  if (err) {
    snprintf (why, sizeof why, "no memory pressure trigger "
              "(/proc/pressure/memory: %s)", errtext (err));
    goto always;
  }
  if (pipe2 (psi_stop, O_CLOEXEC) == -1) {
    snprintf (why, sizeof why, "pipe: %s", errtext (errno));
    goto always;
  }
  /* Real-time from its creation (it sleeps until it matters), so that
   * it runs at once when memory gets short; named, so that it can be
   * told from nbdkit's threads.  Both before after_fork returns.
   */
  err = pthread_attr_init (&attr);
  if (err == 0) {
    if (pthread_attr_setinheritsched (&attr, PTHREAD_EXPLICIT_SCHED) != 0 ||
        pthread_attr_setschedpolicy (&attr, SCHED_FIFO) != 0 ||
        pthread_attr_setschedparam (&attr, &fifo_1) != 0)
      err = EINVAL;
    else
      err = pthread_create (&psi_thread, &attr, psi_watch, (void *) trigger);
    pthread_attr_destroy (&attr);
  }
  if (err)
    err = pthread_create (&psi_thread, NULL, psi_watch, (void *) trigger);
  if (err == 0)
    pthread_setname_np (psi_thread, "throttle-psi");
  if (err) {
    snprintf (why, sizeof why, "cannot start the memory pressure watcher: %s",
              errtext (err));
    goto always;
  }
  psi_thread_started = true;
  return;

 always:
  /* Cannot tell when memory gets short: real-time from the start. */
  rt_switch_on (why);
}

/* Stops the watcher; closes what rt_auto_start opened. */
static void
rt_auto_stop (void)
{
  if (psi_thread_started) {
    if (write (psi_stop[1], "x", 1) != 1)
      nbdkit_debug ("throttle: guards: cannot stop the pressure watcher");
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
  if (rt_active && rt_mode == GUARD_AUTO)
    rt_auto_start ();

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
                "on demand (a kernel nbd client or memory pressure)",
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
  bool rt;

  /* The cost on every request: one thread-local load, and until the
   * process is real-time one relaxed atomic load.
   */
  if (__builtin_expect (thread_state == THREAD_DONE, true) ||
      (thread_state == THREAD_ENTERED &&
       !atomic_load_explicit (&rt_on, memory_order_relaxed)))
    return;

  /* Threads created after after_fork inherit the task flags, and the
   * policy once the process is real-time; this catches a thread that
   * existed before (or code that cleared them), and with
   * throttle-rt=auto a thread the switch to real-time missed.  A
   * request thread also gets SCHED_RESET_ON_FORK: whatever it starts
   * (the plugin's script, helper process or thread), however (fork,
   * vfork, posix_spawn, pthread_create), starts SCHED_OTHER.
   */
  if (thread_state == THREAD_NEW && io_flusher_active &&
      prctl (PR_GET_IO_FLUSHER, 0, 0, 0, 0) != 1 &&
      prctl (PR_SET_IO_FLUSHER, 1, 0, 0, 0) == -1)
    nbdkit_debug ("throttle: PR_SET_IO_FLUSHER in thread %ld: %s",
                  (long) gettid (), errtext (errno));
  rt = rt_active && atomic_load (&rt_on);
  if (rt &&
      sched_getscheduler (0) != (SCHED_FIFO | SCHED_RESET_ON_FORK) &&
      sched_setscheduler (0, SCHED_FIFO | SCHED_RESET_ON_FORK, &fifo_1) == -1)
    nbdkit_debug ("throttle: SCHED_FIFO in thread %ld: %s",
                  (long) gettid (), errtext (errno));
  if (throttle_debug_verbose)
    nbdkit_debug ("throttle: guards: thread %ld: io-flusher %s, policy %s",
                  (long) gettid (),
                  !io_flusher_active ? "not set" :
                  prctl (PR_GET_IO_FLUSHER, 0, 0, 0, 0) == 1 ? "set" : "lost",
                  (sched_getscheduler (0) & ~SCHED_RESET_ON_FORK) ==
                  SCHED_FIFO ? "SCHED_FIFO" : "other");
  /* Nothing more can change once real-time (or never permitted). */
  thread_state = rt || !rt_active ? THREAD_DONE : THREAD_ENTERED;
}

void
throttle_guards_unload (void)
{
  char vmlck[64] = "?";

  rt_auto_stop ();
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
      nbdkit_debug ("throttle: guards: at exit: never real-time (no kernel "
                    "nbd client, no memory pressure)");
    pthread_mutex_unlock (&rt_lock);
  }

  if (throttle_debug_verbose) {
    proc_status_field ("VmLck", vmlck, sizeof vmlck);
    nbdkit_debug ("throttle: guards: at unload VmLck %s", vmlck);
  }
}
