/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: storage over a network needs
 * vm.min_free_kbytes raised and watermark boosting off.
 *
 * A plugin that forwards to remote storage (nbdkit's nbd plugin over
 * TCP, curl, ssh) sends every write it serves on a socket of its own,
 * and each send takes fresh pages from the kernel (tcp_sendmsg ->
 * sk_page_frag_refill): no user-space reserve of ours holds them, and
 * under swap the allocation waits in direct reclaim for the very
 * write it carries.  Only the kernel's free-page reserve, which
 * vm.min_free_kbytes sizes, lets it through.  The filter cannot raise
 * it; when the storage is remote and the setting is below
 * THROTTLE_REMOTE_MIN_FREE_KBYTES, the swap verdict
 * (throttle-verdict.h) says so.  See nbdkit-throttle-design(1),
 * "Kernel allocations for replies".
 *
 * Whether the storage is remote: throttle-remote=true or false, or
 * (auto, the default) the plugin's own parameters, which pass through
 * the filter's .config on their way to the plugin: the nbd plugin's
 * hostname=, or uri= with nbd:// or nbds://; curl's url= (but
 * file://); ssh's host=.
 */

#ifndef THROTTLE_REMOTE_H
#define THROTTLE_REMOTE_H

#include "throttle-params.h"

/* Watermark boosting (vm.watermark_boost_factor, Linux >= 5.0) must
 * be off: after a fragmentation event the kernel adds a boost to every
 * watermark of the zone, min included (wmark_pages in
 * include/linux/mmzone.h), and only GFP_ATOMIC allocations ignore it
 * (zone_watermark_fast, mm/page_alloc.c).  In the swap guest test the
 * boost took the DMA32 zone's min watermark from about 3.9 to 10-12.5
 * MiB, above its free memory, and the forwarded write's send waited
 * in throttle_direct_reclaim for kswapd, which waited for that write:
 * every boot at vm.min_free_kbytes 4096 hung with the boost and none
 * without it (nbdkit-throttle-design(1), REMOTE STORAGE).
 *
 * The least vm.min_free_kbytes for swap over a network: 8192, the
 * lowest value at which every boot of the swap guest test passed (320
 * and 512 MiB guests, the filter at its defaults over nbdkit's nbd
 * plugin with hostname=, tests/swap/ rows remote-*: some boots hang
 * at 4096 and 6144, all at 3072 and below; the sweep is in
 * nbdkit-throttle-design(1), REMOTE STORAGE), times 2 for safety.  It
 * is also the value the man pages recommend for any swap over NBD.
 * The swap helper (systemd/nbdkit-throttle-swap.in) raises the setting
 * to it: systemd/Makefile.am reads the number from this line.
 */
#define THROTTLE_REMOTE_MIN_FREE_KBYTES 16384

extern const struct throttle_param throttle_remote_param_table[];

/* A parameter on its way to the plugin (any key that is not the
 * filter's): notes whether it names remote storage.  Called from
 * .config, before the key is passed on; value is not kept.
 */
extern void throttle_remote_plugin_key (const char *key, const char *value);

/* In .get_ready: with the storage remote, logs at debug level the
 * setting and the least it needs, or why it cannot be read.  Refuses
 * nothing.
 */
extern int throttle_remote_get_ready (int thread_model);

/* The settings storage over a network needs. */
enum throttle_remote_setting {
  THROTTLE_REMOTE_MIN_FREE,     /* vm.min_free_kbytes, at least the least */
  THROTTLE_REMOTE_BOOST,        /* vm.watermark_boost_factor, 0 */
};

/* With the storage remote and the setting as it must not be: returns
 * 1 and writes into why (len bytes) what is wrong and what to set.
 * Else 0: not remote, as it should be, a kernel without the setting
 * (boosting: before Linux 5.0), or a file that cannot be read (of
 * which get_ready's debug line says why).  Reads the file at each
 * call, so the answer is for now: not for the writeout path.
 */
extern int throttle_remote_unsafe (enum throttle_remote_setting setting,
                                   char *why, size_t len);

#define throttle_remote_config_help \
  "throttle-remote=auto|true|false  The plugin's storage is reached over\n" \
  "                            a network: not safe for swap while\n" \
  "                            vm.min_free_kbytes is too low for that\n" \
  "                            (default auto: from the plugin's hostname=,\n" \
  "                            uri=, url= or host=)."

#endif /* THROTTLE_REMOTE_H */
