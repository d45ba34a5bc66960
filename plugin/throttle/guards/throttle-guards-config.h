/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the guards' parameters (throttle-swap,
 * throttle-io-flusher, throttle-rt and its hold and pressure file,
 * throttle-oom, throttle-mlock, throttle-reserve, throttle-threads,
 * throttle-max-request).  Set by .config and .config_complete; read
 * only after it, by the guards, the real-time switch and the memory
 * locks.
 *
 * throttle-swap is the default of the five guards (io-flusher, rt,
 * oom, mlock, reserve): off turns them all off (ordinary throttling),
 * on makes each required, auto takes what can be taken.  A guard's
 * own parameter, in any order, overrides it for that guard.
 */

#ifndef THROTTLE_GUARDS_CONFIG_H
#define THROTTLE_GUARDS_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "throttle-params.h"

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

enum throttle_guard_mode {
  THROTTLE_GUARD_OFF, THROTTLE_GUARD_AUTO, THROTTLE_GUARD_ON
};
enum throttle_lock_mode {
  THROTTLE_LOCK_OFF, THROTTLE_LOCK_POOL, THROTTLE_LOCK_ONFAULT,
  THROTTLE_LOCK_AUTO
};

struct throttle_guards_params {
  enum throttle_guard_mode swap;        /* throttle-swap */
  enum throttle_guard_mode io_flusher, rt, oom;
  enum throttle_lock_mode mlock;
  int64_t reserve;              /* -1 = computed */
  const char *reserve_text;     /* throttle-reserve as written, or NULL */
  unsigned threads;             /* nbdkit's --threads, as the user says */
  uint64_t max_request;         /* 0 in .config: plugin */
  bool max_request_plugin;      /* throttle-max-request=plugin */
  double rt_hold;               /* seconds */
  const char *psi_path;
};
extern struct throttle_guards_params throttle_guards_params;

/* "off", "auto", "on", NULL: in the order of enum throttle_guard_mode. */
extern const char *const throttle_guard_words[];

extern const struct throttle_param throttle_guards_param_table[];
/* .config_complete (before_exports), before anything reads the
 * guards' parameters: throttle-swap's mode for each guard not given
 * its own (in whatever order the two came), and
 * throttle-max-request=plugin.  Returns 0.
 */
extern int throttle_guards_config_complete (void);

/* The parameter that decided a guard's mode: own_key if it was given,
 * else "throttle-swap".  For the messages that
 * name what to change.
 */
extern const char *throttle_guards_key (const char *own_key);

/* throttle-max-request: the largest read or write the filter passes
 * on, and advertises as the maximum block size; 0 with
 * throttle-max-request=plugin: the plugin's maximum is advertised, and
 * what is larger refused by whoever below would refuse it.  Valid from
 * .config on.
 */
extern uint32_t throttle_guards_max_request (void);

/* True unless throttle-mlock=off: the filter's pools are to be locked. */
extern bool throttle_guards_lock_pools (void);

#define throttle_guards_config_help \
  "throttle-swap=auto|on|off   The default of every guard below: on\n" \
  "                            requires each, off turns them off for\n" \
  "                            ordinary throttling (default auto: take\n" \
  "                            what can be taken).\n" \
  "throttle-io-flusher=auto|on|off  PR_SET_IO_FLUSHER for request threads\n" \
  "                            (default auto).\n" \
  "throttle-rt=auto|on|off     Request threads SCHED_FIFO priority 1\n" \
  "                            (default auto: while a kernel nbd client of\n" \
  "                            root or the server's uid is connected, and\n" \
  "                            under memory pressure while a client of\n" \
  "                            theirs is).\n" \
  "throttle-rt-hold=SECS       How long real-time outlasts its reason\n" \
  "                            (default 60).\n" \
  "throttle-rt-pressure=FILE   The PSI file watched for memory pressure\n" \
  "                            (default /proc/pressure/memory).\n" \
  "throttle-mlock=auto|onfault|pool|off  What is locked in RAM\n" \
  "                            (default auto: onfault where permitted).\n" \
  "throttle-oom=auto|on|off    oom_score_adj -1000 (default auto).\n" \
  "throttle-reserve=SIZE       Heap reserve for nbdkit's request buffers\n" \
  "                            (default threads x 1280K).\n" \
  "throttle-threads=N          nbdkit's --threads, to size the reserve\n" \
  "                            (default 16).\n" \
  "throttle-max-request=SIZE|plugin  Largest read or write accepted\n" \
  "                            (default 4M; plugin: what the plugin allows)."

#endif /* THROTTLE_GUARDS_CONFIG_H */
