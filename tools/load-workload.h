/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-load: what each connection asks next (size, direction,
 * offset), from its own seeded stream, so that a run replays with
 * --seed.  No libnbd, no libev.
 */

#ifndef LOAD_WORKLOAD_H
#define LOAD_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "load.h"

/* One connection's stream.  Single-threaded. */
struct load_stream {
  uint64_t rng;
  uint64_t area_start, area_len;  /* random offsets fall in here */
  uint64_t seq_start, seq_end, seq_next;  /* --sequential: its slice */
};

struct load_pick {
  uint64_t offset;
  uint32_t size;
  unsigned size_idx;            /* index in cfg->sizes */
  bool is_read;
};

/* Connection 'id' of cfg->connections over [area_start, area_start +
 * area_len).  With cfg->sequential each connection walks its own
 * slice, 'slice' bytes long (the caller checked that the largest size
 * fits in it); otherwise slice is unused.
 */
extern void load_stream_init (struct load_stream *s,
                              const struct load_config *cfg, unsigned id,
                              uint64_t area_start, uint64_t area_len,
                              uint64_t slice);
extern void load_stream_next (struct load_stream *s,
                              const struct load_config *cfg,
                              struct load_pick *p);

#endif /* LOAD_WORKLOAD_H */
