/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-load: drive an NBD server and measure what it does. */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"

int
main (int argc, char **argv)
{
  struct load_config cfg;
  struct load_result res;
  int r;

  load_parse_args (argc, argv, &cfg);
  r = load_run (&cfg, &res);

  if (r == -1)
    fprintf (stderr, "throttle-load: %s\n", res.error);
  else if (cfg.histogram_file) {
    FILE *fp = fopen (cfg.histogram_file, "w");

    if (fp == NULL || load_hist_write_cdf (res.all, fp) == -1 ||
        fclose (fp) == EOF) {
      fprintf (stderr, "throttle-load: --histogram %s: %s\n",
               cfg.histogram_file, strerror (errno));
      r = -1;
    }
  }

  if (r == 0 && cfg.control_path) {
    res.server_stats = load_control_stats (cfg.control_path, cfg.timeout,
                                           res.error, sizeof res.error);
    if (res.server_stats == NULL) {
      fprintf (stderr, "throttle-load: --control %s: %s\n",
               cfg.control_path, res.error);
      r = -1;
    }
  }

  /* A failed run still gets a JSON answer, so scripts can tell why;
   * the human table would only mislead.
   */
  if (cfg.json && res.all && res.by_size[cfg.nr_sizes - 1])
    load_report_json (&cfg, &res, stdout);
  else if (r == 0)
    load_report_human (&cfg, &res, stdout);
  load_result_free (&res);
  return r == 0 ? 0 : 1;
}
