/* SPDX-License-Identifier: BSD-3-Clause */
/* Command line of throttle-load.  Every misuse exits with status 2 and
 * a message that names the option and the value that was wrong.
 */

#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "load.h"
#include "throttle-duration.h"
#include "throttle-size.h"

enum {
  OPT_RANDOM = 256, OPT_SEQUENTIAL, OPT_VERIFY, OPT_JSON, OPT_PROGRESS,
  OPT_OFFSET, OPT_SPAN, OPT_SEED, OPT_TIMEOUT, OPT_HISTOGRAM, OPT_CONTROL,
};

static const char short_opts[] = "c:q:b:r:t:n:U:H:p:e:hV";
static const struct option long_opts[] = {
  { "connections", required_argument, NULL, 'c' },
  { "queue-depth", required_argument, NULL, 'q' },
  { "block-size",  required_argument, NULL, 'b' },
  { "read-ratio",  required_argument, NULL, 'r' },
  { "random",      no_argument,       NULL, OPT_RANDOM },
  { "sequential",  no_argument,       NULL, OPT_SEQUENTIAL },
  { "duration",    required_argument, NULL, 't' },
  { "bytes",       required_argument, NULL, 'n' },
  { "offset",      required_argument, NULL, OPT_OFFSET },
  { "span",        required_argument, NULL, OPT_SPAN },
  { "seed",        required_argument, NULL, OPT_SEED },
  { "timeout",     required_argument, NULL, OPT_TIMEOUT },
  { "verify",      no_argument,       NULL, OPT_VERIFY },
  { "json",        no_argument,       NULL, OPT_JSON },
  { "progress",    no_argument,       NULL, OPT_PROGRESS },
  { "histogram",   required_argument, NULL, OPT_HISTOGRAM },
  { "control",     required_argument, NULL, OPT_CONTROL },
  { "unix",        required_argument, NULL, 'U' },
  { "host",        required_argument, NULL, 'H' },
  { "port",        required_argument, NULL, 'p' },
  { "export",      required_argument, NULL, 'e' },
  { "help",        no_argument,       NULL, 'h' },
  { "version",     no_argument,       NULL, 'V' },
  { NULL }
};

static void
usage (FILE *fp)
{
  fprintf (fp,
"Usage: throttle-load [OPTIONS] URI\n"
"       throttle-load [OPTIONS] --unix PATH | --host HOST [--port PORT]\n"
"Drive an NBD server with asynchronous requests and report throughput,\n"
"latency percentiles and fairness across connections.\n"
"\n"
"  -c, --connections N     connections to open (default 1)\n"
"  -q, --queue-depth N     requests in flight per connection (default 16)\n"
"  -b, --block-size SIZE   request size, or a weighted mix: 4k:95,1M:5\n"
"                          (multiples of 512; default 4k)\n"
"  -r, --read-ratio PCT    percentage of reads, 0..100 (default 0)\n"
"      --random            random aligned offsets (default)\n"
"      --sequential        each connection walks its own slice in order\n"
"  -t, --duration TIME     run this long (default 10 seconds)\n"
"  -n, --bytes SIZE        or transfer this much in total, then stop\n"
"      --offset SIZE       start of the area used (default 0)\n"
"      --span SIZE         length of the area used (default: to the end)\n"
"      --seed N            random seed, 0 to 18446744073709551615 (default:\n"
"                          from the clock; the report prints it)\n"
"      --timeout TIME      fail if no reply comes for TIME (default 30 seconds)\n"
"      --verify            write a checkable pattern, check every read,\n"
"                          then read back everything written\n"
"      --json              print the report as JSON\n"
"      --progress          print how far the run (and --verify's read-back)\n"
"                          is, with an ETA, every second on stderr\n"
"      --histogram FILE    write the latency distribution (CDF) to FILE\n"
"      --control SOCKET    after the run, ask the throttle filter's control\n"
"                          socket (throttle-control=) what the throttle did\n"
"                          (asked before the run too: a bad one is refused)\n"
"  -U, --unix PATH         connect to a Unix socket\n"
"  -H, --host HOST         connect over TCP (with --port, default 10809)\n"
"  -e, --export NAME       export name (default \"\")\n"
"  -h, --help, -V, --version\n"
"\n"
"Sizes are read as nbdkit reads them (nbdkit_parse_size): a whole number\n"
"with an optional suffix b, s (512), k, M, G, T, P or E (powers of 1024).\n"
"Durations are read as nbdkit reads delays (nbdkit_parse_delay): seconds\n"
"(5, 0.5), or with a unit s, ms, us or ns (2s, 500ms, 250us).\n"
"Exit status: 0 on success, 1 if the run failed (connection, request or\n"
"verify error), 2 on a usage error, 128+N when signal N (SIGINT: 130,\n"
"SIGTERM: 143) ended the run early.\n");
}

static void __attribute__ ((noreturn, format (printf, 1, 2)))
bad (const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "throttle-load: ");
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fprintf (stderr, "\nTry 'throttle-load --help' for more information.\n");
  exit (2);
}

static unsigned
parse_uint (const char *opt, const char *s, unsigned min, unsigned max)
{
  char *end;
  unsigned long v;

  errno = 0;
  v = strtoul (s, &end, 10);
  if (*s < '0' || *s > '9' || *end != '\0' || errno || v < min || v > max)
    bad ("%s: '%s' is not a whole number between %u and %u", opt, s, min, max);
  return v;
}

/* A seed: any the tool prints, which is any 64-bit number. */
static uint64_t
parse_seed (const char *opt, const char *s)
{
  char *end;
  unsigned long long v;

  errno = 0;
  v = strtoull (s, &end, 10);
  if (*s < '0' || *s > '9' || *end != '\0' || errno)
    bad ("%s: '%s' is not a whole number between 0 and %" PRIu64,
         opt, s, UINT64_MAX);
  return v;
}

/* A duration (lib/throttle-duration.h) of more than 0 and at most a
 * million seconds (11.6 days).
 */
static double
parse_seconds (const char *opt, const char *s)
{
  uint64_t ns;

  if (throttle_parse_duration (s, &ns) == -1 || ns == 0 ||
      ns > UINT64_C (1000000) * 1000000000)
    bad ("%s: '%s' is not a duration of more than 0 and at most 1000000 "
         "seconds: %s", opt, s, THROTTLE_DURATION_GRAMMAR);
  return ns / 1e9;
}

/* A size as the filter reads one (nbdkit_parse_size's grammar, from
 * lib/), so that a size typed to throttle-load means what it means in
 * throttle-capacity=; a usage error (exit 2) if it is not one.
 */
static uint64_t
parse_size_opt (const char *opt, const char *s)
{
  const char *why, *where;
  int64_t v;

  if (throttle_size_parse (s, &v, &why, &where) == -1) {
    if (where != s)
      bad ("%s: '%s' is not a size: %s '%s' (suffixes b, s, k, M, G, T, "
           "P, E, as nbdkit reads sizes)", opt, s, why, where);
    bad ("%s: '%s' is not a size: %s (examples: 4096, 4k, 1M, 2G)",
         opt, s, why);
  }
  return v;
}

/* "4k" or "4k:95,1M:5". */
static void
parse_mix (const char *s, struct load_config *cfg)
{
  char *copy = strdup (s), *save = NULL, *item;

  if (copy == NULL) {
    perror ("strdup");
    exit (1);
  }
  cfg->nr_sizes = 0;
  cfg->weight_total = 0;
  for (item = strtok_r (copy, ",", &save); item;
       item = strtok_r (NULL, ",", &save)) {
    char *colon = strchr (item, ':');
    unsigned weight = 1, i;
    uint64_t size;

    if (colon) {
      *colon = '\0';
      weight = parse_uint ("--block-size weight", colon + 1, 1, 1000000);
    }
    size = parse_size_opt ("--block-size", item);
    if (size == 0 || size % 512 != 0)
      bad ("--block-size: %s is not a positive multiple of 512", item);
    if (size > LOAD_MAX_BLOCK)
      bad ("--block-size: %s is larger than the NBD limit of 32M", item);
    for (i = 0; i < cfg->nr_sizes; i++)
      if (cfg->sizes[i].size == size)
        bad ("--block-size: size %s is listed twice", item);
    if (cfg->nr_sizes == LOAD_MAX_SIZES)
      bad ("--block-size: at most %d different sizes", LOAD_MAX_SIZES);
    cfg->sizes[cfg->nr_sizes].size = size;
    cfg->sizes[cfg->nr_sizes].weight = weight;
    cfg->nr_sizes++;
    cfg->weight_total += weight;
  }
  free (copy);
  if (cfg->nr_sizes == 0)
    bad ("--block-size: '%s' names no size", s);
}

void
load_parse_args (int argc, char **argv, struct load_config *cfg)
{
  int c;
  bool have_duration = false, have_pattern = false;
  struct timespec ts;

  memset (cfg, 0, sizeof *cfg);
  cfg->connections = 1;
  cfg->queue_depth = 16;
  cfg->sizes[0].size = 4096;
  cfg->sizes[0].weight = 1;
  cfg->nr_sizes = 1;
  cfg->weight_total = 1;
  cfg->duration = 10;
  cfg->timeout = 30;
  cfg->export_name = "";
  clock_gettime (CLOCK_REALTIME, &ts);
  cfg->seed = (uint64_t) ts.tv_sec * 1000000007u + ts.tv_nsec;

  while ((c = getopt_long (argc, argv, short_opts, long_opts, NULL)) != -1) {
    switch (c) {
    case 'c':
      cfg->connections = parse_uint ("--connections", optarg,
                                     1, LOAD_MAX_CONNECTIONS);
      break;
    case 'q':
      cfg->queue_depth = parse_uint ("--queue-depth", optarg,
                                     1, LOAD_MAX_QUEUE_DEPTH);
      break;
    case 'b':
      parse_mix (optarg, cfg);
      break;
    case 'r':
      cfg->read_pct = parse_uint ("--read-ratio", optarg, 0, 100);
      break;
    case OPT_RANDOM:
    case OPT_SEQUENTIAL:
      if (have_pattern && cfg->sequential != (c == OPT_SEQUENTIAL))
        bad ("--random and --sequential exclude each other");
      have_pattern = true;
      cfg->sequential = c == OPT_SEQUENTIAL;
      break;
    case 't':
      cfg->duration = parse_seconds ("--duration", optarg);
      have_duration = true;
      break;
    case 'n':
      cfg->bytes = parse_size_opt ("--bytes", optarg);
      if (cfg->bytes == 0)
        bad ("--bytes: must be more than 0");
      break;
    case OPT_OFFSET:
      cfg->offset = parse_size_opt ("--offset", optarg);
      break;
    case OPT_SPAN:
      cfg->span = parse_size_opt ("--span", optarg);
      if (cfg->span == 0)
        bad ("--span: must be more than 0");
      break;
    case OPT_SEED:
      cfg->seed = parse_seed ("--seed", optarg);
      break;
    case OPT_TIMEOUT:
      cfg->timeout = parse_seconds ("--timeout", optarg);
      break;
    case OPT_VERIFY:
      cfg->verify = true;
      break;
    case OPT_JSON:
      cfg->json = true;
      break;
    case OPT_PROGRESS:
      cfg->progress = true;
      break;
    case OPT_HISTOGRAM:
      cfg->histogram_file = optarg;
      break;
    case OPT_CONTROL:
      cfg->control_path = optarg;
      break;
    case 'U':
      cfg->unix_path = optarg;
      break;
    case 'H':
      cfg->host = optarg;
      break;
    case 'p':
      parse_uint ("--port", optarg, 1, 65535);
      cfg->port = optarg;
      break;
    case 'e':
      cfg->export_name = optarg;
      break;
    case 'h':
      usage (stdout);
      exit (0);
    case 'V':
      printf ("throttle-load %s\n", PACKAGE_VERSION);
      exit (0);
    default:
      /* getopt_long has already said what was wrong. */
      fprintf (stderr, "Try 'throttle-load --help' for more information.\n");
      exit (2);
    }
  }

  if (optind < argc)
    cfg->uri = argv[optind++];
  if (optind < argc)
    bad ("unexpected argument '%s' (only one URI)", argv[optind]);
  if (!!cfg->uri + !!cfg->unix_path + !!cfg->host != 1)
    bad ("name exactly one server: a URI, --unix PATH or --host HOST");
  if (cfg->port && !cfg->host)
    bad ("--port needs --host");
  if (cfg->uri && strcmp (cfg->export_name, "") != 0)
    bad ("--export: the export name goes into the URI");
  if (!cfg->port)
    cfg->port = "10809";
  if (cfg->bytes && have_duration)
    bad ("--duration and --bytes exclude each other");
  if (cfg->bytes)
    cfg->duration = 0;
}
