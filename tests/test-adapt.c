/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of lib/throttle-adapt.c: the latency-target controller,
 * driven by a simulated backend on a simulated clock (adapt-backend.h),
 * so that every run is the same, and fed windows of samples directly.
 */

#include <config.h>

#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "throttle-adapt.h"
#include "adapt-backend.h"
#include "check-main.h"

#define K 1024ULL
#define M (1024ULL * 1024)

/* The bench's case: 4 writers x 8 writes of 256K, a reader at depth 1,
 * a backend of 1 ms + 10 ns per byte in flight (100 MB/s).
 */
static void
bench_case (struct sim *s, uint64_t target)
{
  sim_init (s, 256 * K, 8 * M, target, 8 * M, 256 * K, 32, true);
  sim_set_backend (s, 1 * MS, 10);
}

START_TEST (test_params)
{
  struct throttle_adapt a;

  ck_assert_int_eq (throttle_adapt_init (&a, 0, 10, MS, MS, 10, 0), -1);
  ck_assert_int_eq (errno, EINVAL);
  ck_assert_int_eq (throttle_adapt_init (&a, 11, 10, MS, MS, 10, 0), -1);
  ck_assert_int_eq (throttle_adapt_init (&a, 1, 10, MS, 0, 10, 0), -1);
  /* The start is clamped to [floor, ceiling]. */
  ck_assert_int_eq (throttle_adapt_init (&a, 4, 10, MS, MS, 100, 0), 0);
  ck_assert_uint_eq (a.capacity, 10);
  ck_assert_int_eq (throttle_adapt_init (&a, 4, 10, MS, MS, 1, 0), 0);
  ck_assert_uint_eq (a.capacity, 4);
  ck_assert_int_eq (throttle_adapt_set_ceiling (&a, 3, 0), -1);
  ck_assert_uint_eq (a.ceiling, 10);
  /* Off: at the ceiling, which may then go below the floor, counting
   * no sample; on again only from a ceiling at the floor or above.
   */
  ck_assert_int_eq (throttle_adapt_set_target (&a, 0, 0), 0);
  ck_assert_uint_eq (a.capacity, 10);
  ck_assert (!throttle_adapt_sample (&a, 2 * MS, 1, true));
  ck_assert_uint_eq (a.all.n, 0);
  ck_assert_int_eq (throttle_adapt_set_ceiling (&a, 3, 0), 0);
  ck_assert_uint_eq (a.capacity, 3);
  ck_assert_int_eq (throttle_adapt_set_target (&a, MS, 0), -1);
  ck_assert_int_eq (throttle_adapt_init (&a, 11, 10, 0, MS, 1, 0), 0);
  ck_assert_uint_eq (a.capacity, 10);
  ck_assert_int_eq (throttle_adapt_init (&a, 4, 100, MS, MS, 100, 0), 0);
  ck_assert_int_eq (throttle_adapt_set_ceiling (&a, 50, 0), 0);
  ck_assert_uint_eq (a.capacity, 50);
}
END_TEST

/* A steady backend: the capacity comes down from the ceiling, then
 * stops moving, and the reader meets the target.  With 256K writes
 * and a 5 ms target one write at a time is what fits (3.6 ms for the
 * reader; two would be 6.2 ms).
 */
START_TEST (test_steady_settles)
{
  struct sim s;

  bench_case (&s, 5 * MS);
  sim_run (&s, 5 * S);
  sim_report ("steady, settling", &s);
  ck_assert_uint_lt (s.a.capacity, 512 * K);
  sim_mark (&s);
  sim_run (&s, 60 * S);
  sim_report ("steady, 60 s after", &s);
  ck_assert_uint_eq (sim_steps_since_mark (&s), 0);
  ck_assert_uint_eq (s.reads_over, 0);
  ck_assert_uint_gt (s.reads, 10000);
}
END_TEST

/* The same with every latency off by up to 10%: the band between 2/3
 * of the target and the target absorbs the noise.
 */
START_TEST (test_steady_noisy)
{
  struct sim s;

  bench_case (&s, 5 * MS);
  s.jitter_pct = 10;
  sim_run (&s, 5 * S);
  sim_mark (&s);
  sim_run (&s, 60 * S);
  sim_report ("steady with 10% jitter, 60 s after settling", &s);
  ck_assert_uint_eq (sim_steps_since_mark (&s), 0);
  ck_assert_uint_le (s.reads_over * 100, s.reads);
}
END_TEST

/* A target the size of requests makes bounce: at 6 ms one 256K write
 * (3.6 ms) allows a step up, two (6.2 ms) force one down.  The
 * controller must stop trying but for rare probes (each bounce doubles
 * the wait, up to 128 windows): without the hold it would step twice
 * every few windows, hundreds of times in a minute.
 */
START_TEST (test_steady_bounce_rare)
{
  struct sim s;

  bench_case (&s, 6 * MS);
  sim_run (&s, 30 * S);
  sim_report ("6 ms target, settling", &s);
  sim_mark (&s);
  sim_run (&s, 60 * S);
  sim_report ("6 ms target, 60 s after", &s);
  /* 600 windows: at most one probe and its undoing per 128. */
  ck_assert_uint_le (sim_steps_since_mark (&s), 2 * (600 / 128 + 1));
  ck_assert_uint_ge (s.cap_min, 256 * K);
  /* Only the probes' windows miss the target. */
  ck_assert_uint_le (s.reads_over * 50, s.reads);
}
END_TEST

/* The backend gets 10 times slower, then fast again: the capacity goes
 * down to what the target allows, then back up to where it was.
 * Fast: 0.2 ms + 2 ns per byte, so 5 ms allows 2.4M in flight (and
 * 1.56M is the band's lower edge); slow: 2 ms + 20 ns per byte, 150K.
 */
START_TEST (test_jump_10x_and_back)
{
  struct sim s;
  uint64_t fast_cap, slow_cap;

  sim_init (&s, 32 * K, 16 * M, 5 * MS, 16 * M, 32 * K, 128, true);
  sim_set_backend (&s, 200000, 2);
  sim_run (&s, 10 * S);
  sim_mark (&s);
  sim_run (&s, 10 * S);
  sim_report ("fast backend", &s);
  fast_cap = s.a.capacity;
  ck_assert_uint_le (fast_cap, 2560 * K);
  ck_assert_uint_ge (fast_cap, 1500 * K);
  ck_assert_uint_le (s.reads_over * 100, s.reads);

  sim_set_backend (&s, 2 * MS, 20);
  sim_run (&s, 10 * S);
  sim_mark (&s);
  sim_run (&s, 10 * S);
  sim_report ("10x slower", &s);
  slow_cap = s.a.capacity;
  ck_assert_uint_le (slow_cap, 160 * K);
  ck_assert_uint_ge (slow_cap, 32 * K);
  ck_assert_uint_le (s.reads_over * 100, s.reads);

  sim_set_backend (&s, 200000, 2);
  sim_run (&s, 10 * S);
  sim_mark (&s);
  sim_run (&s, 10 * S);
  sim_report ("fast again", &s);
  ck_assert_uint_ge (s.a.capacity, 1500 * K);
  ck_assert_uint_le (s.a.capacity, 2560 * K);
  ck_assert_uint_le (s.reads_over * 100, s.reads);
}
END_TEST

/* A target below the backend's own latency: the capacity goes to the
 * floor and stays there; it does not collapse below it, and steps
 * that would change nothing are not counted.
 */
START_TEST (test_unmeetable_settles_at_floor)
{
  struct sim s;
  uint64_t down;

  bench_case (&s, 5 * MS);
  sim_set_backend (&s, 10 * MS, 10);
  sim_run (&s, 5 * S);
  sim_report ("unmeetable target", &s);
  ck_assert_uint_eq (s.a.capacity, 256 * K);
  ck_assert_uint_ge (s.cap_min, 256 * K);
  down = s.a.steps_down;
  ck_assert_uint_le (down, 10);
  sim_mark (&s);
  sim_run (&s, 20 * S);
  ck_assert_uint_eq (s.a.capacity, 256 * K);
  ck_assert_uint_eq (s.cap_min, 256 * K);
  ck_assert_uint_eq (s.a.steps_down, down);
  ck_assert_uint_eq (s.a.steps_up, 0);
}
END_TEST

/* A floor below the size of a request: writes are clamped and run one
 * at a time, and the capacity still stops at the floor.
 */
START_TEST (test_floor_below_request)
{
  struct sim s;

  sim_init (&s, 64 * K, 8 * M, 5 * MS, 8 * M, 256 * K, 32, true);
  sim_set_backend (&s, 10 * MS, 10);
  sim_run (&s, 10 * S);
  ck_assert_uint_eq (s.a.capacity, 64 * K);
  ck_assert_uint_ge (s.cap_min, 64 * K);
  sim_mark (&s);
  sim_run (&s, 5 * S);
  /* Writes kept going. */
  ck_assert_uint_gt (s.reads, 0);
  ck_assert_uint_eq (s.cap_min, 64 * K);
}
END_TEST

/* Fast backend, but nothing waits for credit: a capacity that did not
 * bind says nothing about a larger one, so it does not grow.  When
 * writes start queueing it does.
 */
START_TEST (test_no_work_waiting_no_growth)
{
  struct sim s;

  sim_init (&s, 64 * K, 8 * M, 5 * MS, 64 * K, 4 * K, 1, true);
  sim_set_backend (&s, 100000, 1);
  sim_run (&s, 10 * S);
  sim_report ("no work waiting", &s);
  ck_assert_uint_eq (s.a.capacity, 64 * K);
  ck_assert_uint_eq (s.a.steps_up, 0);
  ck_assert_uint_eq (s.a.steps_down, 0);

  /* Now 64 writes of 64K want in. */
  s.write_size = 64 * K;
  s.queued += 63;
  sim_admit_writes (&s);
  sim_run (&s, 5 * S);
  sim_report ("then work waiting", &s);
  ck_assert_uint_gt (s.a.steps_up, 0);
  ck_assert_uint_gt (s.a.capacity, 64 * K);
}
END_TEST

static void
sample_n (struct throttle_adapt *a, uint64_t now, unsigned n,
          uint64_t lat, bool read)
{
  unsigned i;

  for (i = 0; i < n; i++)
    ck_assert (!throttle_adapt_sample (a, now, lat, read));
}

/* A window runs from its first sample: the windows below take their
 * samples 100 ms after the last judgement (so that samples of up to
 * 100 ms were admitted after it, and count), and close it with one
 * more sample 100 ms later.
 */
static void
close_window (struct throttle_adapt *a, uint64_t *t, uint64_t lat, bool read)
{
  *t += 100 * MS;
  ck_assert (throttle_adapt_sample (a, *t, lat, read));
}

/* End the window on a tick, requests waiting at its end or not. */
static enum throttle_adapt_step
judge (struct throttle_adapt *a, uint64_t t, bool waiting)
{
  return throttle_adapt_tick (a, t, &(struct throttle_stats) {
      .waiters = waiting });
}

static enum throttle_adapt_step
tick (struct throttle_adapt *a, uint64_t t, uint64_t waiters,
      uint64_t in_flight)
{
  return throttle_adapt_tick (a, t, &(struct throttle_stats) {
      .waiters = waiters, .in_flight = in_flight });
}

/* A window of two samples of the same latency. */
static enum throttle_adapt_step
uniform_window (struct throttle_adapt *a, uint64_t *t, uint64_t lat,
                bool read, bool waiting)
{
  *t += 100 * MS;
  sample_n (a, *t, 1, lat, read);
  close_window (a, t, lat, read);
  return judge (a, *t, waiting);
}

/* Reads decide when there are any: fast reads among slow writes step
 * up.  A window without reads while reads were seen recently decides
 * nothing; writes alone are judged only after 8 windows without reads.
 */
START_TEST (test_reads_decide)
{
  struct throttle_adapt a;
  uint64_t t = 10 * S;
  int i;

  throttle_adapt_init (&a, 1 * M, 16 * M, 5 * MS, 100 * MS, 8 * M, t);
  t += 100 * MS;
  sample_n (&a, t, 20, 50 * MS, false);
  sample_n (&a, t, 5, 1 * MS, true);
  close_window (&a, &t, 1 * MS, true);
  ck_assert_int_eq (judge (&a, t, true), THROTTLE_ADAPT_UP);
  ck_assert_uint_eq (a.capacity, 10 * M);
  ck_assert (a.last.reads);
  ck_assert_uint_eq (a.last.samples, 6);

  /* Slow writes, no reads: status quo for 8 windows. */
  for (i = 0; i < 8; i++) {
    ck_assert_int_eq (uniform_window (&a, &t, 50 * MS, false, true),
                      THROTTLE_ADAPT_NONE);
    ck_assert (!a.last.decided);
  }
  ck_assert_int_eq (uniform_window (&a, &t, 50 * MS, false, true),
                    THROTTLE_ADAPT_DOWN);
  ck_assert (a.last.decided);
  ck_assert (!a.last.reads);
  /* 50 ms is over twice the target for every sample: halved. */
  ck_assert_uint_eq (a.capacity, 5 * M);
  ck_assert_uint_eq (a.steps_down, 1);
  ck_assert_uint_eq (a.steps_up, 1);
}
END_TEST

/* The 90th percentile decides: one slow read in ten is within it, two
 * are not.  Between 2/3 of the target and the target nothing moves.
 * A step up undone at once (a bounce) holds the next for 4 windows.
 */
START_TEST (test_percentile_band_hold)
{
  struct throttle_adapt a;
  uint64_t t = 10 * S;
  int i;

  throttle_adapt_init (&a, 1 * M, 16 * M, 6 * MS, 100 * MS, 8 * M, t);
  t += 100 * MS;
  sample_n (&a, t, 9, 1 * MS, true);
  close_window (&a, &t, 7 * MS, true);
  ck_assert_int_eq (judge (&a, t, true), THROTTLE_ADAPT_UP);
  ck_assert_uint_eq (a.last.over_target, 1);
  ck_assert_uint_eq (a.capacity, 10 * M);

  t += 100 * MS;
  sample_n (&a, t, 8, 1 * MS, true);
  sample_n (&a, t, 1, 7 * MS, true);
  close_window (&a, &t, 7 * MS, true);
  ck_assert_int_eq (judge (&a, t, true), THROTTLE_ADAPT_DOWN);
  ck_assert_uint_eq (a.capacity, 10 * M - 10 * M / 4);
  ck_assert_uint_eq (a.hold, 4);

  /* All at 5 ms: within the target, above 4 ms: stays. */
  ck_assert_int_eq (uniform_window (&a, &t, 5 * MS, true, true),
                    THROTTLE_ADAPT_NONE);
  /* All at 4 ms, 2/3 of the target: up, but only 4 windows after the
   * bounce.
   */
  for (i = 0; i < 2; i++)
    ck_assert_int_eq (uniform_window (&a, &t, 4 * MS, true, true),
                      THROTTLE_ADAPT_NONE);
  ck_assert_int_eq (uniform_window (&a, &t, 4 * MS, true, true),
                    THROTTLE_ADAPT_UP);
  ck_assert_uint_eq (a.capacity, 7864320 + 7864320 / 4);
  /* Without work waiting, no step up. */
  ck_assert_int_eq (uniform_window (&a, &t, 1 * MS, true, false),
                    THROTTLE_ADAPT_NONE);
  ck_assert_uint_eq (a.steps_up, 2);
  ck_assert_uint_eq (a.steps_down, 1);
}
END_TEST

/* Work waited in a window when the budget's count of waits moved during
 * it, though none waits at its end; not when it did not move.
 */
START_TEST (test_waited_in_window)
{
  struct throttle_adapt a;
  struct throttle_stats st = { .waited = 5 };
  uint64_t t = 10 * S;

  throttle_adapt_init (&a, 1 * M, 16 * M, 5 * MS, 100 * MS, 8 * M, t);
  t += 100 * MS;
  sample_n (&a, t, 1, 1 * MS, true);
  close_window (&a, &t, 1 * MS, true);
  ck_assert_int_eq (throttle_adapt_tick (&a, t, &st), THROTTLE_ADAPT_UP);
  t += 100 * MS;
  sample_n (&a, t, 1, 1 * MS, true);
  close_window (&a, &t, 1 * MS, true);
  ck_assert_int_eq (throttle_adapt_tick (&a, t, &st), THROTTLE_ADAPT_NONE);
  ck_assert_uint_eq (a.capacity, 10 * M);
}
END_TEST

/* A request admitted before the last step measured the old capacity:
 * it is not counted, and a window with nothing else stays open.  A
 * window starts at its first counted sample: after a pause, one
 * sample does not close it.
 */
START_TEST (test_stale_samples_and_pauses)
{
  struct throttle_adapt a;
  uint64_t t = 10 * S, step_at;

  throttle_adapt_init (&a, 1 * M, 16 * M, 5 * MS, 100 * MS, 8 * M, t);
  ck_assert_int_eq (uniform_window (&a, &t, 50 * MS, true, true),
                    THROTTLE_ADAPT_DOWN);
  step_at = t;
  /* Slow requests admitted before the step complete for a long time. */
  t += 300 * MS;
  ck_assert (!throttle_adapt_sample (&a, t, t - step_at + 1, true));
  ck_assert (!throttle_adapt_sample (&a, t, t - step_at + 1, false));
  ck_assert_uint_eq (a.all.n, 0);
  /* A request admitted after it opens the window, 300 ms after the
   * step; a window later, another closes it.
   */
  sample_n (&a, t, 1, 2 * MS, true);
  close_window (&a, &t, 2 * MS, true);
  ck_assert_int_eq (judge (&a, t, true), THROTTLE_ADAPT_UP);
  /* A pause of 10 s, then one sample: no window of one. */
  t += 10 * S;
  ck_assert (!throttle_adapt_sample (&a, t, 2 * MS, true));
  close_window (&a, &t, 2 * MS, true);
  ck_assert_int_eq (judge (&a, t, true), THROTTLE_ADAPT_UP);
  ck_assert_uint_eq (a.last.samples, 2);
  ck_assert_uint_eq (a.last.length_ns, 100 * MS);
  /* Samples from before the controller started are not counted. */
  throttle_adapt_init (&a, 1 * M, 16 * M, 5 * MS, 100 * MS, 8 * M, t);
  ck_assert (!throttle_adapt_sample (&a, t + 200 * MS, 300 * MS, true));
  ck_assert_uint_eq (a.all.n, 0);
}
END_TEST

/* Requests wait and nothing is in flight (the capacity is too low for
 * the head, or the backend went quiet): no completion will end a
 * window, so the timer's tick does, and steps the capacity up every
 * window up to the ceiling, whatever the hold after bounces.  Not
 * while requests are in flight, nor when nobody waits.
 */
START_TEST (test_tick_stalled)
{
  struct throttle_adapt a;
  uint64_t t = 10 * S, cap;
  unsigned ticks = 0;

  throttle_adapt_init (&a, 4 * K, 1 * M, 1 * MS, 100 * MS, 1 * M, t);
  /* Down to the floor on slow windows. */
  while (a.capacity > 4 * K)
    ck_assert_int_eq (uniform_window (&a, &t, 50 * MS, true, true),
                      THROTTLE_ADAPT_DOWN);
  a.hold = 128;
  /* Within the window: nothing. */
  t += 50 * MS;
  ck_assert_int_eq (tick (&a, t, 8, 0), THROTTLE_ADAPT_NONE);
  t += 50 * MS;
  /* Over, but idle, or requests in flight that did not complete. */
  ck_assert_int_eq (tick (&a, t, 0, 0), THROTTLE_ADAPT_NONE);
  ck_assert_int_eq (tick (&a, t, 8, 4 * K),
                    THROTTLE_ADAPT_NONE);
  ck_assert_uint_eq (a.capacity, 4 * K);
  /* Stalled: a step up per window, ticked every 50 ms. */
  for (;;) {
    cap = a.capacity;
    if (tick (&a, t, 8, 0) == THROTTLE_ADAPT_UP)
      ck_assert_uint_gt (a.capacity, cap);
    else
      ck_assert_uint_eq (a.capacity, cap);
    if (a.capacity == 1 * M)
      break;
    t += 50 * MS;
    ticks++;
    ck_assert_uint_lt (ticks, 2 * 26);
  }
  ck_assert_int_eq (tick (&a, t + S, 8, 0),
                    THROTTLE_ADAPT_NONE);
  /* A window with samples that no completion closes: judged on time. */
  throttle_adapt_init (&a, 4 * K, 1 * M, 1 * MS, 100 * MS, 512 * K, t);
  sample_n (&a, t + 200 * MS, 10, 100 * MS, true);
  ck_assert_int_eq (tick (&a, t + 250 * MS, 8, 0),
                    THROTTLE_ADAPT_NONE);
  ck_assert_int_eq (tick (&a, t + 300 * MS, 8, 0),
                    THROTTLE_ADAPT_DOWN);
}
END_TEST

/* "set capacity" with a target: the new ceiling is the capacity at
 * once, raised or lowered, and the controller moves on from there.
 */
START_TEST (test_set_ceiling_at_once)
{
  struct throttle_adapt a;
  uint64_t t = 10 * S;

  throttle_adapt_init (&a, 4 * K, 1 * M, 1 * MS, 100 * MS, 1 * M, t);
  while (a.capacity > 64 * K)
    uniform_window (&a, &t, 50 * MS, true, true);
  ck_assert_int_eq (throttle_adapt_set_ceiling (&a, 2 * M, t), 0);
  ck_assert_uint_eq (a.capacity, 2 * M);
  ck_assert_int_eq (throttle_adapt_set_ceiling (&a, 256 * K, t), 0);
  ck_assert_uint_eq (a.capacity, 256 * K);
  ck_assert_int_eq (uniform_window (&a, &t, 50 * MS, true, true),
                    THROTTLE_ADAPT_DOWN);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("adapt");
  TCase *tc = tcase_create ("core");

  tcase_set_timeout (tc, 60);
  tcase_add_test (tc, test_params);
  tcase_add_test (tc, test_steady_settles);
  tcase_add_test (tc, test_steady_noisy);
  tcase_add_test (tc, test_steady_bounce_rare);
  tcase_add_test (tc, test_jump_10x_and_back);
  tcase_add_test (tc, test_unmeetable_settles_at_floor);
  tcase_add_test (tc, test_floor_below_request);
  tcase_add_test (tc, test_no_work_waiting_no_growth);
  tcase_add_test (tc, test_reads_decide);
  tcase_add_test (tc, test_percentile_band_hold);
  tcase_add_test (tc, test_waited_in_window);
  tcase_add_test (tc, test_stale_samples_and_pauses);
  tcase_add_test (tc, test_tick_stalled);
  tcase_add_test (tc, test_set_ceiling_at_once);
  suite_add_tcase (s, tc);
  return s;
}
