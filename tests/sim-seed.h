/* SPDX-License-Identifier: BSD-3-Clause */
/* What the seeded simulations (test-sim.c, test-wbq-sim.c) share: a
 * schedule's random numbers follow from its seed alone, so that the
 * seed a failure prints replays it step for step; their knobs, read
 * from the environment; and how a schedule fails.
 */

#ifndef THROTTLE_SIM_SEED_H
#define THROTTLE_SIM_SEED_H

#include <stdarg.h>
#include <stdint.h>

/* A number in [0, n) from the stream *state, which the caller seeds
 * and owns (splitmix64: one 64-bit word of state, every seed a stream
 * of its own).  n == 0 draws nothing and returns 0, so that an empty
 * choice leaves the rest of the schedule as it was: the seeds quoted
 * in the tests' comments depend on it.
 */
uint64_t sim_pick (uint64_t *state, uint64_t n);

/* The environment variable 'name' as a number (C's notation: 0x for
 * hexadecimal), or 'def' when it is unset or empty.
 */
uint64_t sim_env_u64 (const char *name, uint64_t def);

/* Fail the Check test: print "WHO: step STEP: " and the message to
 * stderr, then abort the test, naming the seed and the step.  Does
 * not return, so the caller prints first what replays the schedule
 * and forgets the schedule its signal handlers would print.
 */
void sim_vfail (const char *who, uint64_t seed, unsigned step,
                const char *fmt, va_list ap)
  __attribute__ ((format (printf, 4, 0), noreturn));

#endif /* THROTTLE_SIM_SEED_H */
