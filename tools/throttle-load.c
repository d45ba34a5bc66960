/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-load: drive an NBD server and measure what it does. */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "json-reply.h"
#include "load.h"

/* --control is asked before the run too, so that a path that is not
 * the throttle's control socket is found before the run, not after
 * it: exits with status 1 after one line if it is not.
 */
static void
check_control (const struct load_config *cfg)
{
  struct stat st;
  json_object *reply;
  char err[512];

  if (stat (cfg->control_path, &st) == -1) {
    fprintf (stderr, "throttle-load: --control %s: %s (is nbdkit running "
             "with throttle-control=%s?)\n", cfg->control_path,
             strerror (errno), cfg->control_path);
    exit (1);
  }
  if (!S_ISSOCK (st.st_mode)) {
    fprintf (stderr, "throttle-load: --control %s: not a socket\n",
             cfg->control_path);
    exit (1);
  }
  reply = load_control_stats (cfg->control_path, cfg->timeout, err,
                              sizeof err);
  if (reply == NULL) {
    fprintf (stderr, "throttle-load: --control %s: %s\n",
             cfg->control_path, err);
    exit (1);
  }
  json_object_put (reply);
}

int
main (int argc, char **argv)
{
  struct load_config cfg;
  struct load_result res;
  int r, sig;

  load_parse_args (argc, argv, &cfg);
  if (cfg.control_path)
    check_control (&cfg);
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
   * the human table would only mislead.  So would a table of a run
   * interrupted before it began.
   */
  if (cfg.json && res.all && res.by_size[cfg.nr_sizes - 1])
    load_report_json (&cfg, &res, stdout);
  else if (r == 0 && res.started)
    load_report_human (&cfg, &res, stdout);
  else if (r == 0)
    fprintf (stderr, "throttle-load: interrupted before the run began\n");
  sig = res.signal;
  load_result_free (&res);
  /* Interrupted: as a program the signal ended (bash's 130 for ^C),
   * unless the run failed, which says more.
   */
  if (r == 0 && sig)
    return 128 + sig;
  return r == 0 ? 0 : 1;
}
