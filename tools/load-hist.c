/* SPDX-License-Identifier: BSD-3-Clause */
/* Latency histogram with constant memory and bounded relative error. */

#include <config.h>

#include <inttypes.h>
#include <string.h>

#include "load.h"

void
load_hist_init (struct load_hist *h)
{
  memset (h, 0, sizeof *h);
  h->min_ns = UINT64_MAX;
}

/* Values below LOAD_HIST_SUB land in octave 0 exactly; above, the
 * octave is the position of the top bit and the next
 * LOAD_HIST_SUB_BITS bits pick the sub-bucket.
 */
static unsigned
bucket_of (uint64_t ns)
{
  unsigned octave, sub;

  if (ns < LOAD_HIST_SUB)
    return ns;
  octave = 63 - __builtin_clzll (ns) - LOAD_HIST_SUB_BITS + 1;
  if (octave >= LOAD_HIST_OCTAVES)
    return LOAD_HIST_BUCKETS - 1;
  sub = (ns >> (octave - 1)) & (LOAD_HIST_SUB - 1);
  return octave * LOAD_HIST_SUB + sub;
}

/* The largest value that falls in bucket b: quantiles round up, so a
 * reported p99 is never better than the truth.
 */
static uint64_t
bucket_top (unsigned b)
{
  unsigned octave = b / LOAD_HIST_SUB, sub = b % LOAD_HIST_SUB;

  if (octave == 0)
    return sub;
  return (((uint64_t) LOAD_HIST_SUB + sub + 1) << (octave - 1)) - 1;
}

void
load_hist_add (struct load_hist *h, uint64_t ns)
{
  h->bucket[bucket_of (ns)]++;
  h->count++;
  h->sum_ns += ns;
  if (ns > h->max_ns)
    h->max_ns = ns;
  if (ns < h->min_ns)
    h->min_ns = ns;
}

uint64_t
load_hist_quantile (const struct load_hist *h, double q)
{
  uint64_t rank, seen = 0;
  unsigned i;

  if (h->count == 0)
    return 0;
  if (q >= 1)
    return h->max_ns;
  /* The smallest value with at least q of the samples at or below it. */
  rank = (uint64_t) (q * h->count);
  if ((double) rank < q * h->count)
    rank++;
  if (rank == 0)
    rank = 1;
  for (i = 0; i < LOAD_HIST_BUCKETS; i++) {
    seen += h->bucket[i];
    if (seen >= rank) {
      uint64_t top = bucket_top (i);
      return top < h->max_ns ? top : h->max_ns;
    }
  }
  return h->max_ns;
}

int
load_hist_write_cdf (const struct load_hist *h, FILE *fp)
{
  uint64_t seen = 0;
  unsigned i;

  fprintf (fp, "# latency_us count cumulative_fraction\n");
  for (i = 0; i < LOAD_HIST_BUCKETS; i++) {
    uint64_t top;

    if (h->bucket[i] == 0)
      continue;
    seen += h->bucket[i];
    top = bucket_top (i);
    if (top > h->max_ns)
      top = h->max_ns;
    fprintf (fp, "%.3f %" PRIu64 " %.9f\n",
             top / 1000.0, h->bucket[i], (double) seen / h->count);
  }
  return ferror (fp) ? -1 : 0;
}
