/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: is this server safe to serve swap now?
 *
 * One verdict, yes or no with every reason, instead of a warning per
 * guard: each guard not taken (throttle_guards_missing), and for
 * storage over a network vm.min_free_kbytes below its least and
 * watermark boosting on, read when asked.  It is said at start (a
 * debug line when safe; else one warning line naming every reason and
 * throttle-swap, unless throttle-swap=off chose ordinary throttling),
 * in the control socket's stats ("swap") and in the metrics
 * (nbdkit_throttle_swap_safe, nbdkit_throttle_swap_unsafe), and,
 * whatever throttle-swap says, loudly whenever a kernel nbd client
 * attaches to a server that is not safe.
 *
 * Storage over a network (throttle-remote): a plugin that forwards to
 * remote storage (nbdkit's nbd plugin over TCP, curl, ssh) sends every
 * write on a socket of its own, and each send takes fresh pages from
 * the kernel (tcp_sendmsg -> sk_page_frag_refill) that no user-space
 * reserve holds: under swap only the kernel's free-page reserve lets
 * it through, which the filter cannot raise, so the verdict names the
 * settings that shrink it.  See REMOTE STORAGE in
 * nbdkit-throttle-design(1).
 *
 * Whether the storage is remote: throttle-remote=true or false, or
 * (auto, the default) the plugin's own parameters, which pass through
 * the filter's .config on their way to the plugin: the nbd plugin's
 * hostname=, or uri= with nbd:// or nbds://; curl's url= (but
 * file://); ssh's host=.
 *
 * When each hook is called, and why then: throttle-features.c.
 */

#ifndef THROTTLE_VERDICT_H
#define THROTTLE_VERDICT_H

#include "throttle-guards.h"
#include "throttle-params.h"

struct throttle_export;

/* The least vm.min_free_kbytes for swap over a network: twice 8192,
 * the lowest value at which every boot of the swap guest test passed
 * with watermark boosting on (vm.watermark_boost_factor, Linux >= 5.0),
 * which must be off too: a boost raises every watermark of a zone, min
 * included, and only GFP_ATOMIC allocations ignore it, so a forwarded
 * write's send waits in reclaim for the write it carries.  The sweep
 * and the watermarks measured: tests/swap/README.md; why:
 * nbdkit-throttle-design(1), REMOTE STORAGE.  The swap helper
 * (systemd/nbdkit-throttle-swap.in) raises the setting to it:
 * systemd/Makefile.am reads the number from this line.
 */
#define THROTTLE_REMOTE_MIN_FREE_KBYTES 16384

/* throttle-remote. */
extern const struct throttle_param throttle_verdict_param_table[];

/* A parameter on its way to the plugin (any key that is not the
 * filter's): notes whether it names remote storage.  Called from
 * .config, before the key is passed on; value is not kept.
 */
extern void throttle_verdict_plugin_key (const char *key, const char *value);

/* .get_ready, after every guard was tried: with the storage remote, a
 * debug line with the vm settings and what they need (or why they
 * cannot be read); the verdict at start, while stderr is still the
 * user's terminal.
 */
extern int throttle_verdict_get_ready (int thread_model);

/* .after_fork, after the guards were set: the warning again if a
 * reason appeared since get_ready (-u dropped a capability, the heap
 * reserve could not be had).
 */
extern int throttle_verdict_after_fork (void);

/* .open of a kernel nbd client, with what was found about it
 * (throttle-realtime.c): if this server is not safe, logged with
 * nbdkit_error (stderr, or syslog in the background), naming every
 * reason.  Reads vm.min_free_kbytes with the storage remote: not for
 * the writeout path.
 */
extern void throttle_verdict_kernel_client (const char *why);

#define throttle_verdict_config_help \
  "throttle-remote=auto|true|false  The plugin's storage is reached over\n" \
  "                            a network: not safe for swap while\n" \
  "                            vm.min_free_kbytes is too low for that\n" \
  "                            (default auto: from the plugin's hostname=,\n" \
  "                            uri=, url= or host=)."

/* The control socket's stats member "swap" and the metrics families
 * (throttle-features.c lists them), from the control thread.
 */
extern void throttle_verdict_stats_json (FILE *fp,
                                         struct throttle_export *exp);
extern void throttle_verdict_metrics (FILE *fp);

#endif /* THROTTLE_VERDICT_H */
