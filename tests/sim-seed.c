/* SPDX-License-Identifier: BSD-3-Clause */
/* What the seeded simulations share (sim-seed.h). */

#include <config.h>

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "sim-seed.h"

uint64_t
sim_pick (uint64_t *state, uint64_t n)
{
  uint64_t z;

  if (n == 0)
    return 0;
  z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return (z ^ (z >> 31)) % n;
}

uint64_t
sim_env_u64 (const char *name, uint64_t def)
{
  const char *v = getenv (name);

  return v && *v ? strtoull (v, NULL, 0) : def;
}

void
sim_vfail (const char *who, uint64_t seed, unsigned step, const char *fmt,
           va_list ap)
{
  fprintf (stderr, "%s: step %u: ", who, step);
  vfprintf (stderr, fmt, ap);
  fputc ('\n', stderr);
  ck_abort_msg ("schedule of seed %" PRIu64 " failed at step %u", seed, step);
}
