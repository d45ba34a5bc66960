/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-load --verify (see load-verify.h). */

#include <config.h>

#include <errno.h>
#include <stdlib.h>

#include "load-verify.h"

/* The seed goes in before the multiplication: after it, two seeds
 * that differ only in their lowest bit gave the same words (the "| 1"
 * below overwrote that bit), so one run could not see another's data.
 */
static inline uint64_t
pattern_word (uint64_t offset, uint64_t seed)
{
  uint64_t x = ((offset >> 3) ^ seed) * 0x9E3779B97F4A7C15ULL;

  x ^= x >> 29;
  return x | 1;
}

void
load_pattern_fill (void *buf, uint64_t offset, uint32_t size, uint64_t seed)
{
  uint64_t *w = buf;
  uint32_t i;

  for (i = 0; i < size / 8; i++)
    w[i] = pattern_word (offset + (uint64_t) i * 8, seed);
}

uint64_t
load_pattern_check (const void *buf, uint64_t offset, uint32_t size,
                    uint64_t seed, uint64_t *first)
{
  const uint64_t *w = buf;
  uint64_t bad = 0;
  uint32_t u, i;

  for (u = 0; u < size / LOAD_VERIFY_UNIT; u++) {
    for (i = 0; i < LOAD_VERIFY_UNIT / 8; i++) {
      uint64_t o = offset + (uint64_t) u * LOAD_VERIFY_UNIT + i * 8;
      if (w[u * (LOAD_VERIFY_UNIT / 8) + i] != pattern_word (o, seed)) {
        if (bad == 0)
          *first = offset + (uint64_t) u * LOAD_VERIFY_UNIT;
        bad++;
        break;
      }
    }
  }
  return bad;
}

int
load_written_init (struct load_written *w, uint64_t start, uint64_t len)
{
  w->start = start;
  w->units = len / LOAD_VERIFY_UNIT;
  w->next = 0;
  w->bits = calloc (w->units / 8 + 1, 1);
  if (w->bits == NULL) {
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

void
load_written_free (struct load_written *w)
{
  free (w->bits);
  w->bits = NULL;
}

static inline uint64_t
unit_of (const struct load_written *w, uint64_t offset)
{
  return (offset - w->start) / LOAD_VERIFY_UNIT;
}

static inline bool
is_written (const struct load_written *w, uint64_t u)
{
  return w->bits[u / 8] & (1 << (u % 8));
}

void
load_written_mark (struct load_written *w, uint64_t offset, uint32_t size)
{
  uint64_t u, end = unit_of (w, offset) + size / LOAD_VERIFY_UNIT;

  for (u = unit_of (w, offset); u < end; u++)
    w->bits[u / 8] |= 1 << (u % 8);
}

bool
load_written_all (const struct load_written *w, uint64_t offset,
                  uint32_t size)
{
  uint64_t u, end = unit_of (w, offset) + size / LOAD_VERIFY_UNIT;

  for (u = unit_of (w, offset); u < end; u++)
    if (!is_written (w, u))
      return false;
  return true;
}

bool
load_written_next (struct load_written *w, uint64_t *offset, uint32_t *size)
{
  uint64_t u = w->next, n = 0;

  while (u < w->units && !is_written (w, u))
    u++;
  if (u == w->units) {
    w->next = u;
    return false;
  }
  while (u + n < w->units && is_written (w, u + n) &&
         n < LOAD_VERIFY_CHUNK / LOAD_VERIFY_UNIT)
    n++;
  w->next = u + n;
  *offset = w->start + u * LOAD_VERIFY_UNIT;
  *size = n * LOAD_VERIFY_UNIT;
  return true;
}

uint64_t
load_written_count (const struct load_written *w)
{
  uint64_t n = 0, i;

  /* The bits past the last unit are never set. */
  for (i = 0; i < w->units / 8 + 1; i++)
    n += __builtin_popcount (w->bits[i]);
  return n;
}

bool
load_written_pending (const struct load_written *w)
{
  return w->next < w->units;
}
