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
 *   SWAPTEST-START size_mib=N avail_mib=N swapfree_mib=N
 *   WRITEOUT-PROGRESS mib=N secs=S
 *   WRITEOUT-DONE S
 *   SWAPIN-PROGRESS mib=N secs=S    (N counts both passes)
 *   SWAPIN-DONE S
 *   VERIFY-FAILED page=N word=N got=X expected=X
 *
 * Usage: swaptest [SIZE_MIB]
 * Without SIZE_MIB the size is twice MemAvailable, capped at MemAvailable
 * plus three quarters of SwapFree so that a small swap device does not
 * turn the test into an OOM test.
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
#include <sys/mman.h>

#define MIB (1024UL * 1024UL)
#define PROGRESS_MIB 16

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

int
main (int argc, char *argv[])
{
  long page_size = sysconf (_SC_PAGESIZE);
  long avail_kib = meminfo_kib ("MemAvailable");
  long swap_kib = meminfo_kib ("SwapFree");
  size_t size_mib, npages, words, p, w, i, stride;
  uint64_t *mem;
  double t0, t, wo_secs;

  setvbuf (stdout, NULL, _IONBF, 0);

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

  /* Self-test of the verifier (check-swap.sh runs it on the host): damage
   * one word so that the swap-in phase must report it.
   */
  if (getenv ("SWAPTEST_CORRUPT_PAGE") != NULL) {
    p = strtoul (getenv ("SWAPTEST_CORRUPT_PAGE"), NULL, 10);
    if (p < npages)
      mem[p * words + words / 2] ^= 1;
  }

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
  return 0;
}
