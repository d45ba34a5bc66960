/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of throttle-load's pure parts: the --verify pattern and
 * map of written units (tools/load-verify.c), the workload stream
 * (tools/load-workload.c) and --progress's estimate and line
 * (tools/load-progress.c).  test-load.sh drives the whole tool.
 */

#include <config.h>

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"
#include "load-progress.h"
#include "load-verify.h"
#include "load-workload.h"
#include "check-main.h"

#define UNIT LOAD_VERIFY_UNIT

START_TEST (test_pattern)
{
  static uint64_t buf[4 * UNIT / 8];
  uint64_t first = 0;
  unsigned i;

  load_pattern_fill (buf, 8192, sizeof buf, 42);
  for (i = 0; i < sizeof buf / 8; i++)
    ck_assert_uint_ne (buf[i], 0);
  ck_assert_uint_eq (load_pattern_check (buf, 8192, sizeof buf, 42, &first),
                     0);
  /* Another seed (a previous run's data) or another place fails every
   * unit.
   */
  ck_assert_uint_eq (load_pattern_check (buf, 8192, sizeof buf, 43, &first),
                     4);
  ck_assert_uint_eq (first, 8192);
  ck_assert_uint_eq (load_pattern_check (buf, 8192 + UNIT, sizeof buf, 42,
                                         &first), 4);
  /* One damaged word: that unit, and its offset. */
  buf[2 * UNIT / 8 + 5] ^= 1;
  ck_assert_uint_eq (load_pattern_check (buf, 8192, sizeof buf, 42, &first),
                     1);
  ck_assert_uint_eq (first, 8192 + 2 * UNIT);
  /* A lost write (zeroes) never matches. */
  memset (buf, 0, sizeof buf);
  ck_assert_uint_eq (load_pattern_check (buf, 0, sizeof buf, 0, &first), 4);
}
END_TEST

START_TEST (test_written)
{
  struct load_written w;
  uint64_t off;
  uint32_t size;

  /* 4 MiB at 1 MiB: units 0..8191. */
  ck_assert_int_eq (load_written_init (&w, 1 << 20, 4 << 20), 0);
  ck_assert (!load_written_all (&w, 1 << 20, UNIT));
  load_written_mark (&w, (1 << 20) + 4 * UNIT, 2 * UNIT);
  ck_assert_uint_eq (load_written_count (&w), 2);
  ck_assert (load_written_all (&w, (1 << 20) + 4 * UNIT, 2 * UNIT));
  ck_assert (!load_written_all (&w, (1 << 20) + 4 * UNIT, 3 * UNIT));
  ck_assert (!load_written_all (&w, (1 << 20) + 3 * UNIT, 2 * UNIT));
  /* A stretch longer than a read-back chunk, at the very end. */
  load_written_mark (&w, (5 << 20) - LOAD_VERIFY_CHUNK - UNIT,
                     LOAD_VERIFY_CHUNK + UNIT);
  /* Marking again counts once; the last unit of the area counts. */
  load_written_mark (&w, (1 << 20) + 4 * UNIT, UNIT);
  ck_assert_uint_eq (load_written_count (&w),
                     2 + LOAD_VERIFY_CHUNK / UNIT + 1);

  ck_assert (load_written_pending (&w));
  ck_assert (load_written_next (&w, &off, &size));
  ck_assert_uint_eq (off, (1 << 20) + 4 * UNIT);
  ck_assert_uint_eq (size, 2 * UNIT);
  ck_assert (load_written_next (&w, &off, &size));
  ck_assert_uint_eq (off, (5 << 20) - LOAD_VERIFY_CHUNK - UNIT);
  ck_assert_uint_eq (size, LOAD_VERIFY_CHUNK);
  ck_assert (load_written_next (&w, &off, &size));
  ck_assert_uint_eq (off, (5 << 20) - UNIT);
  ck_assert_uint_eq (size, UNIT);
  ck_assert (!load_written_next (&w, &off, &size));
  ck_assert (!load_written_pending (&w));
  load_written_free (&w);
}
END_TEST

static struct load_config
config (bool sequential, unsigned read_pct)
{
  struct load_config cfg;

  memset (&cfg, 0, sizeof cfg);
  cfg.connections = 2;
  cfg.seed = 7;
  cfg.sequential = sequential;
  cfg.read_pct = read_pct;
  cfg.nr_sizes = 2;
  cfg.sizes[0].size = 4096;
  cfg.sizes[0].weight = 3;
  cfg.sizes[1].size = 65536;
  cfg.sizes[1].weight = 1;
  cfg.weight_total = 4;
  return cfg;
}

START_TEST (test_random)
{
  struct load_config cfg = config (false, 50);
  struct load_stream a, b;
  struct load_pick p, q;
  unsigned i, reads = 0, large = 0;

  load_stream_init (&a, &cfg, 1, 1 << 20, 16 << 20, 0);
  load_stream_init (&b, &cfg, 1, 1 << 20, 16 << 20, 0);
  for (i = 0; i < 4000; i++) {
    load_stream_next (&a, &cfg, &p);
    load_stream_next (&b, &cfg, &q);
    /* The same seed and connection replay the same requests. */
    ck_assert_uint_eq (p.offset, q.offset);
    ck_assert_uint_eq (p.size, q.size);
    ck_assert_int_eq (p.is_read, q.is_read);
    /* Inside the area, aligned to its own size, one of the sizes. */
    ck_assert_uint_eq (p.size, cfg.sizes[p.size_idx].size);
    ck_assert_uint_ge (p.offset, 1 << 20);
    ck_assert_uint_le (p.offset + p.size, 17 << 20);
    ck_assert_uint_eq ((p.offset - (1 << 20)) % p.size, 0);
    reads += p.is_read;
    large += p.size_idx == 1;
  }
  /* The weights and the read share, roughly (4000 draws). */
  ck_assert_uint_gt (reads, 1700);
  ck_assert_uint_lt (reads, 2300);
  ck_assert_uint_gt (large, 800);
  ck_assert_uint_lt (large, 1200);
}
END_TEST

/* Every bit of a seed counts: seeds from the clock are about 1.8e18,
 * and --seed gives them back whole, so a seed that differs only above
 * bit 31 must choose other requests.
 */
START_TEST (test_seed_64)
{
  struct load_config cfg = config (false, 50);
  struct load_stream a, b;
  struct load_pick p, q;
  unsigned i, same = 0;

  cfg.seed = UINT64_C (1796648021371766205);
  load_stream_init (&a, &cfg, 0, 0, 16 << 20, 0);
  cfg.seed ^= UINT64_C (1) << 40;
  load_stream_init (&b, &cfg, 0, 0, 16 << 20, 0);
  for (i = 0; i < 100; i++) {
    load_stream_next (&a, &cfg, &p);
    load_stream_next (&b, &cfg, &q);
    same += p.offset == q.offset;
  }
  ck_assert_uint_lt (same, 10);
}
END_TEST

START_TEST (test_sequential)
{
  struct load_config cfg = config (true, 0);
  struct load_stream s;
  struct load_pick p;
  uint64_t next, slice = 1 << 20, start = (1 << 20) + slice;
  unsigned i, wraps = 0;

  cfg.nr_sizes = 1;
  /* Connection 1 of 2 walks the second slice, in order, and wraps. */
  load_stream_init (&s, &cfg, 1, 1 << 20, 2 * slice, slice);
  next = start;
  for (i = 0; i < 600; i++) {
    load_stream_next (&s, &cfg, &p);
    ck_assert (!p.is_read);
    if (p.offset != next) {
      ck_assert_uint_eq (p.offset, start);
      ck_assert_uint_gt (next + p.size, start + slice);
      wraps++;
    }
    ck_assert_uint_le (p.offset + p.size, start + slice);
    next = p.offset + p.size;
  }
  ck_assert_uint_eq (wraps, 600 / (slice / 4096));
}
END_TEST

START_TEST (test_progress_estimate)
{
  struct load_progress p = { 0 };

  /* By time: as far as the time, the rest of it left; requests that
   * drain past the end stay at 100%.
   */
  load_progress_estimate (&p, 1.0, 4.0, 12345, 0);
  ck_assert_double_eq_tol (p.fraction, 0.25, 1e-9);
  ck_assert_double_eq_tol (p.eta, 3.0, 1e-9);
  load_progress_estimate (&p, 4.5, 4.0, 12345, 0);
  ck_assert_double_eq (p.fraction, 1);
  ck_assert_double_eq (p.eta, 0);

  /* By size: the rest at the mean rate so far. */
  load_progress_estimate (&p, 2.0, 0, 1 << 20, 4 << 20);
  ck_assert_double_eq_tol (p.fraction, 0.25, 1e-9);
  ck_assert_double_eq_tol (p.eta, 6.0, 1e-9);
  /* Nothing back yet: no rate, no ETA. */
  load_progress_estimate (&p, 0.5, 0, 0, 4 << 20);
  ck_assert_double_eq (p.fraction, 0);
  ck_assert (p.eta < 0);
  /* The last request goes past --bytes. */
  load_progress_estimate (&p, 3.0, 0, (4 << 20) + 4096, 4 << 20);
  ck_assert_double_eq (p.fraction, 1);
  ck_assert_double_eq (p.eta, 0);
  /* A read-back with nothing written is done at once. */
  load_progress_estimate (&p, 0, 0, 0, 0);
  ck_assert_double_eq (p.fraction, 1);
}
END_TEST

/* P's line, in BUF. */
static const char *
line (const struct load_progress *p, char *buf, size_t len)
{
  FILE *fp = fmemopen (buf, len, "w");

  ck_assert_ptr_nonnull (fp);
  load_progress_print (fp, p);
  ck_assert_int_eq (fclose (fp), 0);
  return buf;
}

START_TEST (test_progress_line)
{
  struct load_progress p = { .phase = "run", .elapsed = 1.0,
                             .fraction = 0.4, .eta = 1.5,
                             .bytes_per_s = 10 * 1048576.0,
                             .ops_per_s = 2560, .in_flight = 16 };
  char buf[256];

  ck_assert_str_eq (line (&p, buf, sizeof buf),
                    "throttle-load: run       1.0s  40.0%  ETA 1.5s"
                    "         10.0 MiB/s     2560 IOPS  in flight 16\n");
  /* Not done: never 100.0% however close. */
  p.fraction = 0.9996;
  p.eta = 0.01;
  ck_assert_ptr_nonnull (strstr (line (&p, buf, sizeof buf),
                                 " 99.9%  ETA 0.0s "));
  p.eta = -1;
  ck_assert_ptr_nonnull (strstr (line (&p, buf, sizeof buf), "%  ETA -  "));
  /* Long times in minutes and hours. */
  p.elapsed = 725;
  p.eta = 3 * 3600 + 7 * 60;
  ck_assert_ptr_nonnull (strstr (line (&p, buf, sizeof buf),
                                 "run     12m05s  99.9%  ETA 3h07m "));
  p.phase = "verify";
  p.elapsed = 0.3;
  p.fraction = 1;
  p.done = true;
  ck_assert_ptr_nonnull (strstr (line (&p, buf, sizeof buf),
                                 "throttle-load: verify    0.3s 100.0%  "
                                 "done "));
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("load-tool");
  TCase *tc = tcase_create ("core");

  tcase_add_test (tc, test_pattern);
  tcase_add_test (tc, test_written);
  tcase_add_test (tc, test_random);
  tcase_add_test (tc, test_seed_64);
  tcase_add_test (tc, test_sequential);
  tcase_add_test (tc, test_progress_estimate);
  tcase_add_test (tc, test_progress_line);
  suite_add_tcase (s, tc);
  return s;
}
