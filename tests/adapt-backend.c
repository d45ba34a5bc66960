/* SPDX-License-Identifier: BSD-3-Clause */
/* The simulated backend and clock of test-adapt.c (adapt-backend.h). */

#include <config.h>

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "throttle-adapt.h"
#include "adapt-backend.h"

static uint64_t
rnd (struct sim *s)
{
  /* xorshift64: the same sequence in every run. */
  s->rng ^= s->rng << 13;
  s->rng ^= s->rng >> 7;
  s->rng ^= s->rng << 17;
  return s->rng;
}

static void
issue (struct sim *s, bool read, uint32_t bytes, uint64_t charged)
{
  struct req *q = NULL;
  double lat;
  int i;

  for (i = 0; i < MAX_REQS; i++)
    if (!s->r[i].active) {
      q = &s->r[i];
      break;
    }
  ck_assert_ptr_nonnull (q);
  s->backend_bytes += bytes;
  lat = s->base_ns + s->backend_bytes * s->ns_per_byte;
  if (s->jitter_pct) {
    int j = (int) (rnd (s) % (2 * s->jitter_pct + 1)) - (int) s->jitter_pct;
    lat = lat * (100 + j) / 100;
  }
  *q = (struct req) { .active = true, .read = read, .bytes = bytes,
                      .charged = charged, .admitted = s->now,
                      .done = s->now + (uint64_t) lat };
}

void
sim_admit_writes (struct sim *s)
{
  uint64_t cap = s->a.capacity;

  while (s->queued > 0) {
    uint64_t need = s->write_size;

    /* Above the capacity: alone, charged in full. */
    if (s->charged + need > cap && s->charged > 0)
      break;
    s->charged += need;
    s->queued--;
    issue (s, false, s->write_size, need);
  }
  if (s->queued > 0)
    s->waited = true;
}

void
sim_mark (struct sim *s)
{
  s->reads = s->reads_over = s->read_max = 0;
  s->cap_min = s->cap_max = s->a.capacity;
  s->down_at_mark = s->a.steps_down;
  s->up_at_mark = s->a.steps_up;
}

void
sim_init (struct sim *s, uint64_t floor, uint64_t ceiling, uint64_t target,
          uint64_t start_cap, uint32_t write_size, unsigned writes,
          bool reader)
{
  memset (s, 0, sizeof *s);
  s->now = 1 * S;
  s->rng = 0x9e3779b97f4a7c15ULL;
  ck_assert_int_eq (throttle_adapt_init (&s->a, floor, ceiling, target,
                                         100 * MS, start_cap, s->now), 0);
  s->write_size = write_size;
  s->queued = writes;
  s->reader = reader;
  if (reader)
    issue (s, true, 4096, 0);
  sim_admit_writes (s);
  sim_mark (s);
}

void
sim_set_backend (struct sim *s, uint64_t base_ns, double ns_per_byte)
{
  s->base_ns = base_ns;
  s->ns_per_byte = ns_per_byte;
}

void
sim_run (struct sim *s, uint64_t ns)
{
  uint64_t end = s->now + ns;

  for (;;) {
    struct req *q = NULL, done;
    int i;

    for (i = 0; i < MAX_REQS; i++)
      if (s->r[i].active && (q == NULL || s->r[i].done < q->done))
        q = &s->r[i];
    if (q == NULL || q->done > end) {
      s->now = end;
      return;
    }
    done = *q;
    q->active = false;
    s->now = done.done;
    s->backend_bytes -= done.bytes;
    s->charged -= done.charged;
    if (done.read) {
      uint64_t lat = done.done - done.admitted;

      s->reads++;
      if (lat > s->a.target_ns)
        s->reads_over++;
      if (lat > s->read_max)
        s->read_max = lat;
    }

    if (throttle_adapt_sample (&s->a, s->now, done.done - done.admitted,
                               done.read)) {
      throttle_adapt_tick (&s->a, s->now, &(struct throttle_stats) {
          .waiters = s->waited || s->queued > 0 });
      s->waited = false;
      ck_assert_uint_ge (s->a.capacity, s->a.floor);
      ck_assert_uint_le (s->a.capacity, s->a.ceiling);
      if (s->a.capacity < s->cap_min)
        s->cap_min = s->a.capacity;
      if (s->a.capacity > s->cap_max)
        s->cap_max = s->a.capacity;
    }

    if (done.read)
      issue (s, true, 4096, 0);
    else
      s->queued++;
    sim_admit_writes (s);
  }
}

uint64_t
sim_steps_since_mark (const struct sim *s)
{
  return s->a.steps_down - s->down_at_mark + s->a.steps_up - s->up_at_mark;
}

void
sim_report (const char *what, const struct sim *s)
{
  printf ("%s: capacity %llu (range %llu-%llu since mark), steps %llu down "
          "%llu up (%llu since mark), reads %llu, over target %llu, "
          "max %.2f ms\n", what,
          (unsigned long long) s->a.capacity,
          (unsigned long long) s->cap_min, (unsigned long long) s->cap_max,
          (unsigned long long) s->a.steps_down,
          (unsigned long long) s->a.steps_up,
          (unsigned long long) sim_steps_since_mark (s),
          (unsigned long long) s->reads, (unsigned long long) s->reads_over,
          s->read_max / 1e6);
}
