/* SPDX-License-Identifier: BSD-3-Clause */
/* The simulated backend and clock that test-adapt.c drives the
 * latency-target controller (lib/throttle-adapt.c) with, so that every
 * run is the same.
 *
 * The backend: a request admitted when B bytes are in flight at the
 * backend (its own included) takes base + B * ns_per_byte, optionally
 * with a deterministic jitter.  Writers keep a fixed number of writes
 * outstanding, queued FIFO for the budget's credit as in
 * lib/throttle-budget.c (a write larger than the capacity runs alone,
 * charged in full); a reader, when present, keeps one 4K read
 * outstanding and is not charged, as with throttle-reads=false.
 */

#ifndef THROTTLE_ADAPT_BACKEND_H
#define THROTTLE_ADAPT_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "throttle-adapt.h"

#define MS 1000000ULL
#define S 1000000000ULL
/* Requests in flight at once; more fails the test that issues them. */
#define MAX_REQS 200

struct req {
  bool active, read;
  uint32_t bytes;
  uint64_t charged;
  uint64_t admitted, done;
};

struct sim {
  uint64_t now;
  struct throttle_adapt a;

  /* The backend. */
  uint64_t base_ns;
  double ns_per_byte;
  unsigned jitter_pct;        /* each latency off by up to +-this % */
  uint64_t rng;
  uint64_t backend_bytes;

  /* The budget and its clients. */
  struct req r[MAX_REQS];
  uint64_t charged;
  unsigned queued;            /* writes waiting for credit */
  uint32_t write_size;
  bool reader;
  bool waited;                /* a write waited since the last judgement */

  /* Measured since the last mark. */
  uint64_t reads, reads_over, read_max;
  uint64_t cap_min, cap_max;
  uint64_t down_at_mark, up_at_mark;
};

/* Start *s afresh at 1 s on the simulated clock: a controller with a
 * 100 ms window (a failed throttle_adapt_init fails the test), 'writes'
 * writes of 'write_size' queued and the reader's first read issued if
 * 'reader', and as much admitted as start_cap allows.  The backend
 * answers at once until sim_set_backend gives it a latency, so call
 * that before sim_run; set jitter_pct directly if wanted.
 */
void sim_init (struct sim *s, uint64_t floor, uint64_t ceiling,
               uint64_t target, uint64_t start_cap, uint32_t write_size,
               unsigned writes, bool reader);

/* The latency of requests admitted from now on; those in flight keep
 * theirs.
 */
void sim_set_backend (struct sim *s, uint64_t base_ns, double ns_per_byte);

/* Admit queued writes FIFO while the capacity has room, as the budget
 * does.  sim_run calls it after every completion; a test that adds to
 * s->queued or changes s->write_size must call it once itself, or the
 * new writes wait for the next completion.
 */
void sim_admit_writes (struct sim *s);

/* Advance the clock by 'ns', completing requests in order, feeding
 * their latencies to the controller and judging each window it closes,
 * then issuing the next read or queueing the next write.  Fails the
 * test if the capacity leaves [floor, ceiling].
 */
void sim_run (struct sim *s, uint64_t ns);

/* Restart the measurements (reads, capacity range, steps) so that what
 * a test asserts covers only the time after it settled.
 */
void sim_mark (struct sim *s);

/* Steps down and up the controller took since the last sim_mark. */
uint64_t sim_steps_since_mark (const struct sim *s);

/* Print the state and the measurements since the last mark under the
 * heading 'what', for the test log: the asserts say only that a bound
 * failed, this says by how much.
 */
void sim_report (const char *what, const struct sim *s);

#endif /* THROTTLE_ADAPT_BACKEND_H */
