/* SPDX-License-Identifier: BSD-3-Clause */
/* swaptest: the workload of the swap-over-NBD guest test.
 *
 * Allocates more anonymous memory than the guest has, so that part of it
 * must live on swap, then runs two phases and times each:
 *
 *   writeout: write every page with a pattern derived from its index.
 *             Only swap-out happens here: pages are written once, never
 *             read back, so the kernel pushes the oldest ones to swap.
 *   swap-in:  read every page back, verify it word by word, and rewrite
 *             it with a second pattern, in address order; then once more
 *             in a scattered order (a stride coprime to the page count),
 *             where swap readahead helps little and every fault is a
 *             small random read.  Every swapped page has to come back
 *             from swap, and the rewrites dirty it again, so this phase
 *             swaps in and out at the same time.
 *
 * Markers on stdout (the host parses them from the serial console):
 *   SWAPTEST-PAD pad_mib=N avail_mib=N      (with AVAIL_MIB)
 *   SWAPTEST-SHORT avail_mib=N wanted_mib=N (AVAIL_MIB cannot be met)
 *   SWAPTEST-START size_mib=N avail_mib=N swapfree_mib=N
 *   WRITEOUT-PROGRESS mib=N secs=S
 *   WRITEOUT-DONE S
 *   WRITEOUT-SWAPPED out_mib=N in_mib=N     (pswpout, pswpin of the phase)
 *   SWAPIN-PROGRESS mib=N secs=S    (N counts both passes)
 *   SWAPIN-DONE S
 *   SWAPIN-SWAPPED out_mib=N in_mib=N
 *   WRITEOUT-CPU / SWAPIN-CPU user=P% sys=P% softirq=P% iowait=P% idle=P%
 *   VERIFY-FAILED page=N word=N got=X expected=X
 *   SWAPTEST-HOLDING swapused_kib=N        (with SWAPTEST_HOLD)
 *   HOLD-VERIFIED pages=N mib=N            (with SWAPTEST_HOLD)
 *
 * Usage: swaptest [SIZE_MIB [AVAIL_MIB]]
 * Without SIZE_MIB the size is twice MemAvailable, capped at MemAvailable
 * plus three quarters of SwapFree so that a small swap device does not
 * turn the test into an OOM test.  With AVAIL_MIB, memory above AVAIL_MIB
 * of MemAvailable is first locked away, so that a workload of SIZE_MIB
 * swaps the same amount whatever the server beside it holds (a writeback
 * pool, a memory plugin's disk, or no server at all); exit 3 when less
 * than AVAIL_MIB is available.
 *
 * With SWAPTEST_HOLD=FIFO in the environment, after the workload it
 * unlocks the pad (so that every page can come back into memory),
 * keeps the first SWAPTEST_HOLD_MIB (default 32) of its pages and
 * unmaps the rest (a swapoff of all of them costs TCG guests a minute),
 * creates FIFO.ready and waits until a line can be read from FIFO,
 * keeping those pages, most of them on swap, meanwhile: the guest stops
 * the swap service under them.  Then it verifies every kept page once
 * more (exit 1 on the first that differs).
 *
 * Built statically at test time (gcc -static -O2) so that the guest needs
 * no library for it.
 */

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/mman.h>

#define MIB (1024UL * 1024UL)
#define PROGRESS_MIB 16

struct swapped { long out, in; };
struct cpu { long long user, nice, sys, idle, iowait, irq, softirq; };

static long
meminfo_kib (const char *key)
{
  FILE *fp = fopen ("/proc/meminfo", "r");
  char line[256];
  size_t len = strlen (key);
  long val = -1;

  if (fp == NULL) {
    perror ("swaptest: /proc/meminfo");
    exit (2);
  }
  while (fgets (line, sizeof line, fp) != NULL) {
    if (strncmp (line, key, len) == 0 && line[len] == ':') {
      val = strtol (line + len + 1, NULL, 10);
      break;
    }
  }
  fclose (fp);
  return val;
}

/* Pages swapped out and in since boot (/proc/vmstat), or -1. */
static struct swapped
vmstat_swapped (void)
{
  struct swapped s = { -1, -1 };
  FILE *fp = fopen ("/proc/vmstat", "r");
  char key[64];
  long val;

  if (fp == NULL)
    return s;
  while (fscanf (fp, "%63s %ld", key, &val) == 2) {
    if (strcmp (key, "pswpout") == 0)
      s.out = val;
    else if (strcmp (key, "pswpin") == 0)
      s.in = val;
  }
  fclose (fp);
  return s;
}

/* The guest's CPU time so far, in ticks (first line of /proc/stat). */
static struct cpu
cpu_ticks (void)
{
  struct cpu c = { -1, -1, -1, -1, -1, -1, -1 };
  FILE *fp = fopen ("/proc/stat", "r");

  if (fp != NULL) {
    if (fscanf (fp, "cpu %lld %lld %lld %lld %lld %lld %lld", &c.user,
                &c.nice, &c.sys, &c.idle, &c.iowait, &c.irq,
                &c.softirq) != 7)
      c.user = -1;
    fclose (fp);
  }
  return c;
}

/* Prints what share of a phase the guest's CPU spent where: a path
 * that costs more CPU per request than another shows in busy time, one
 * that waits longer on its device in iowait.
 */
static void
print_cpu (const char *phase, struct cpu a)
{
  struct cpu b = cpu_ticks ();
  long long all;

  if (a.user < 0 || b.user < 0)
    return;
  all = (b.user - a.user) + (b.nice - a.nice) + (b.sys - a.sys) +
    (b.idle - a.idle) + (b.iowait - a.iowait) + (b.irq - a.irq) +
    (b.softirq - a.softirq);
  if (all <= 0)
    return;
  printf ("%s-CPU user=%lld%% sys=%lld%% softirq=%lld%% iowait=%lld%% "
          "idle=%lld%%\n", phase,
          100 * (b.user - a.user + b.nice - a.nice) / all,
          100 * (b.sys - a.sys + b.irq - a.irq) / all,
          100 * (b.softirq - a.softirq) / all,
          100 * (b.iowait - a.iowait) / all, 100 * (b.idle - a.idle) / all);
}

/* Prints what a phase swapped, from its START counters. */
static void
print_swapped (const char *phase, struct swapped start, long page_size)
{
  struct swapped end = vmstat_swapped ();

  if (start.out < 0 || end.out < 0)
    printf ("%s-SWAPPED unknown\n", phase);
  else
    printf ("%s-SWAPPED out_mib=%ld in_mib=%ld\n", phase,
            (end.out - start.out) * page_size / (long) MIB,
            (end.in - start.in) * page_size / (long) MIB);
}

/* Locks away what MemAvailable holds above AVAIL_MIB, so that the
 * workload meets the same free memory in every configuration.  Exits 3
 * when less than AVAIL_MIB is available: that configuration would swap
 * more than the others.
 */
static void *pad_mem;
static size_t pad_len;

static void
pad_to (long avail_mib)
{
  long have = meminfo_kib ("MemAvailable") / 1024;
  size_t pad;
  void *p;

  if (have < avail_mib) {
    printf ("SWAPTEST-SHORT avail_mib=%ld wanted_mib=%ld\n", have, avail_mib);
    exit (3);
  }
  pad = (size_t) (have - avail_mib) * MIB;
  if (pad > 0) {
    p = mmap (NULL, pad, PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED || mlock (p, pad) == -1) {
      perror ("swaptest: locking the pad");
      exit (2);
    }
    pad_mem = p;
    pad_len = pad;
  }
  printf ("SWAPTEST-PAD pad_mib=%zu avail_mib=%ld\n", pad / MIB,
          meminfo_kib ("MemAvailable") / 1024);
}

static double
now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A word that depends on the page, the word and the pass, so a page
 * returned from the wrong swap slot, a stale page or a page of zeroes
 * all fail the check.
 */
static inline uint64_t
pattern (uint64_t page, uint64_t word, uint64_t pass)
{
  uint64_t x = (page << 12 | word) * 0x9E3779B97F4A7C15ULL;

  return x ^ (pass * 0xD1B54A32D192ED03ULL) ^ (x >> 29);
}

/* Verifies page P against pass FROM and rewrites it with pass TO. */
static int
verify_rewrite (uint64_t *mem, size_t words, size_t p, int from, int to)
{
  uint64_t *pg = mem + p * words;
  size_t w;

  for (w = 0; w < words; w++) {
    uint64_t want = pattern (p, w, from);

    if (pg[w] != want) {
      printf ("VERIFY-FAILED page=%zu word=%zu pass=%d got=0x%016llx "
              "expected=0x%016llx\n", p, w, from,
              (unsigned long long) pg[w], (unsigned long long) want);
      return -1;
    }
    pg[w] = pattern (p, w, to);
  }
  return 0;
}

/* A stride near the golden ratio of N that shares no factor with N, so
 * that i * stride mod N visits every page once, far from the last one.
 */
static size_t
scatter_stride (size_t n)
{
  size_t s = (size_t) (n * 0.6180339887) | 1;
  size_t a, b, t;

  for (;; s += 2) {
    for (a = n, b = s; b != 0; t = a % b, a = b, b = t)
      ;
    if (a == 1)
      return s % n;
  }
}

/* SWAPTEST_HOLD: keeps the pages (every one holds pass 3) until a line
 * comes on FIFO, then verifies them all.
 */
static int
hold (const char *fifo, uint64_t *mem, size_t words, size_t npages,
      long page_size)
{
  char ready[4096], c;
  size_t p, w;
  int fd;

  const char *keep_env = getenv ("SWAPTEST_HOLD_MIB");
  size_t keep = (keep_env ? strtoul (keep_env, NULL, 10) : 32) * MIB
    / page_size;

  if (pad_mem != NULL && munmap (pad_mem, pad_len) == -1) {
    perror ("swaptest: releasing the pad");
    return 2;
  }
  if (keep < npages) {
    if (munmap (mem + keep * words, (npages - keep) * page_size) == -1) {
      perror ("swaptest: releasing the pages not kept");
      return 2;
    }
    npages = keep;
  }
  printf ("SWAPTEST-HOLDING swapused_kib=%ld\n",
          meminfo_kib ("SwapTotal") - meminfo_kib ("SwapFree"));
  snprintf (ready, sizeof ready, "%s.ready", fifo);
  fd = open (ready, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd == -1 || close (fd) == -1) {
    perror (ready);
    return 2;
  }
  fd = open (fifo, O_RDONLY);
  if (fd == -1 || read (fd, &c, 1) != 1) {
    perror (fifo);
    return 2;
  }
  close (fd);
  for (p = 0; p < npages; p++) {
    for (w = 0; w < words; w++) {
      uint64_t want = pattern (p, w, 3);

      if (mem[p * words + w] != want) {
        printf ("VERIFY-FAILED page=%zu word=%zu pass=hold got=0x%016llx "
                "expected=0x%016llx\n", p, w,
                (unsigned long long) mem[p * words + w],
                (unsigned long long) want);
        return 1;
      }
    }
  }
  printf ("HOLD-VERIFIED pages=%zu mib=%zu\n", npages,
          npages * page_size / MIB);
  return 0;
}

int
main (int argc, char *argv[])
{
  long page_size = sysconf (_SC_PAGESIZE);
  long avail_kib = meminfo_kib ("MemAvailable");
  long swap_kib = meminfo_kib ("SwapFree");
  size_t size_mib, npages, words, p, w, i, stride;
  uint64_t *mem;
  double t0, t, wo_secs;
  struct swapped sw;
  struct cpu cpu;

  setvbuf (stdout, NULL, _IONBF, 0);

  if (argc > 2) {
    pad_to (strtol (argv[2], NULL, 10));
    avail_kib = meminfo_kib ("MemAvailable");
    swap_kib = meminfo_kib ("SwapFree");
  }
  if (argc > 1)
    size_mib = strtoul (argv[1], NULL, 10);
  else {
    size_mib = 2 * avail_kib / 1024;
    if (swap_kib >= 0 &&
        size_mib > (size_t) (avail_kib + swap_kib * 3 / 4) / 1024)
      size_mib = (avail_kib + swap_kib * 3 / 4) / 1024;
  }
  if (size_mib == 0) {
    fprintf (stderr, "swaptest: size is 0 MiB\n");
    return 2;
  }

  npages = size_mib * MIB / page_size;
  words = page_size / sizeof (uint64_t);
  mem = mmap (NULL, size_mib * MIB, PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    perror ("swaptest: mmap");
    return 2;
  }

  printf ("SWAPTEST-START size_mib=%zu avail_mib=%ld swapfree_mib=%ld\n",
          size_mib, avail_kib / 1024, swap_kib / 1024);

  sw = vmstat_swapped ();
  cpu = cpu_ticks ();
  t0 = now ();
  for (p = 0; p < npages; p++) {
    uint64_t *pg = mem + p * words;

    for (w = 0; w < words; w++)
      pg[w] = pattern (p, w, 1);
    if ((p + 1) % (PROGRESS_MIB * MIB / page_size) == 0)
      printf ("WRITEOUT-PROGRESS mib=%zu secs=%.1f\n",
              (p + 1) * page_size / MIB, now () - t0);
  }
  wo_secs = now () - t0;
  printf ("WRITEOUT-DONE %.1f\n", wo_secs);
  print_swapped ("WRITEOUT", sw, page_size);
  print_cpu ("WRITEOUT", cpu);

  /* Self-test of the verifier (check-swap.sh runs it on the host): damage
   * one word so that the swap-in phase must report it.
   */
  if (getenv ("SWAPTEST_CORRUPT_PAGE") != NULL) {
    p = strtoul (getenv ("SWAPTEST_CORRUPT_PAGE"), NULL, 10);
    if (p < npages)
      mem[p * words + words / 2] ^= 1;
  }

  sw = vmstat_swapped ();
  cpu = cpu_ticks ();
  t0 = now ();
  stride = npages > 1 ? scatter_stride (npages) : 1;
  for (i = 0; i < 2 * npages; i++) {
    if (i < npages)
      p = i;
    else
      p = (i - npages) * stride % npages;
    if (verify_rewrite (mem, words, p, i < npages ? 1 : 2,
                        i < npages ? 2 : 3) == -1)
      return 1;
    if ((i + 1) % (PROGRESS_MIB * MIB / page_size) == 0)
      printf ("SWAPIN-PROGRESS mib=%zu secs=%.1f\n",
              (i + 1) * page_size / MIB, now () - t0);
  }
  t = now () - t0;
  printf ("SWAPIN-DONE %.1f\n", t);
  print_swapped ("SWAPIN", sw, page_size);
  print_cpu ("SWAPIN", cpu);
  if (getenv ("SWAPTEST_HOLD") != NULL)
    return hold (getenv ("SWAPTEST_HOLD"), mem, words, npages, page_size);
  return 0;
}
