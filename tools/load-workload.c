/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-load: what each connection asks next (see load-workload.h). */

#include <config.h>

#include "load-workload.h"

/* splitmix64: cheap and good enough to spread offsets and pick sizes. */
static uint64_t
rng_next (uint64_t *s)
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);

  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void
load_stream_init (struct load_stream *s, const struct load_config *cfg,
                  unsigned id, uint64_t area_start, uint64_t area_len,
                  uint64_t slice)
{
  s->rng = cfg->seed ^ (0x9E3779B97F4A7C15ULL * (id + 1));
  s->area_start = area_start;
  s->area_len = area_len;
  s->seq_start = area_start + id * slice;
  s->seq_end = s->seq_start + slice;
  s->seq_next = s->seq_start;
}

void
load_stream_next (struct load_stream *s, const struct load_config *cfg,
                  struct load_pick *p)
{
  unsigned i = 0;

  if (cfg->nr_sizes > 1) {
    unsigned w = rng_next (&s->rng) % cfg->weight_total;
    while (w >= cfg->sizes[i].weight) {
      w -= cfg->sizes[i].weight;
      i++;
    }
  }
  p->size_idx = i;
  p->size = cfg->sizes[i].size;
  p->is_read = cfg->read_pct == 100 ||
    (cfg->read_pct > 0 && rng_next (&s->rng) % 100 < cfg->read_pct);

  if (cfg->sequential) {
    if (s->seq_next + p->size > s->seq_end)
      s->seq_next = s->seq_start;
    p->offset = s->seq_next;
    s->seq_next += p->size;
  }
  else {
    /* Aligned to its own size within the area, as fio does. */
    uint64_t slots = s->area_len / p->size;
    p->offset = s->area_start + rng_next (&s->rng) % slots * p->size;
  }
}
