/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: write-behind's parameters and sizes
 * (throttle-writeback-config.c; see throttle-writeback.h).
 */

#ifndef THROTTLE_WRITEBACK_CONFIG_H
#define THROTTLE_WRITEBACK_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "throttle-params.h"

/* The feature's hooks (throttle-features.c). */
extern const struct throttle_param throttle_writeback_param_table[];
/* After the metric, the capacities and the server's budget are known
 * (throttle_config): sizes the pool, refusing one RAM cannot hold.
 */
extern int throttle_writeback_config_complete (void);
/* Refuses writeback over a backend whose thread model forbids a write
 * from a thread that is not serving the connection; otherwise decides
 * the writers per export.
 */
extern int throttle_writeback_get_ready (int thread_model);

#define throttle_writeback_config_help \
  "throttle-mode=writethrough|writeback\n" \
  "                            Acknowledge writes once the backend has\n" \
  "                            them, or once copied (default writethrough).\n" \
  "throttle-writeback-pool=SIZE  Bytes of payload the writeback pool holds\n" \
  "                            per export (default: the capacity).\n" \
  "throttle-writeback-threads=N  Writer threads per export (default 16,\n" \
  "                            4 under serialize_requests)."

/* throttle-mode=writeback. */
extern bool throttle_writeback_enabled (void);

/* The sizes of each export's write-behind state: its pool's bytes (a
 * multiple of THROTTLE_WBQ_ELEM; set by config_complete), its writer
 * threads (set by get_ready) and each writer's bounce buffer (the
 * writers' together stay within 8 MiB, whatever their number).  Only
 * after get_ready.
 */
extern uint64_t throttle_writeback_pool_bytes (void);
extern unsigned throttle_writeback_writers (void);
extern size_t throttle_writeback_bounce_size (void);

#endif /* THROTTLE_WRITEBACK_CONFIG_H */
