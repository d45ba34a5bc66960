/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the metrics file (see throttle-control.h). */

#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <nbdkit-filter.h>

#include "throttle-control.h"
#include "throttle-metrics.h"
#include "throttle-params.h"
#include "throttle-parse.h"

#define DEFAULT_INTERVAL 10.

static char *path;              /* absolute: nbdkit changes to / */
static const char *path_text;   /* as given, for its errors at start */
static char *tmp_template;      /* DIR/.NAME.XXXXXX */
static char *tmp;               /* mkostemp's copy of it */
static double interval = DEFAULT_INTERVAL;
static const char *interval_text;       /* given, for its error */
static mode_t file_mode;
static int last_err;            /* of the last write; 0: it succeeded */
static const char *last_step;   /* where it failed */

const struct throttle_param throttle_metrics_file_param_table[] = {
  { "throttle-metrics-file", THROTTLE_PARAM_FILE, &path, &path_text,
    .why = "expected the path of a file (in a directory nbdkit may write "
    "to)" },
  { "throttle-metrics-interval", THROTTLE_PARAM_SECONDS, &interval,
    .text = &interval_text, .min = THROTTLE_PARAM_S / 1000,
    .max = 86400 * THROTTLE_PARAM_S,
    .why = "expected a number of seconds from 0.001 to 86400" },
  { NULL }
};

/* Write the whole text (with the features' families: see
 * throttle_metrics_write) to a new file beside PATH and rename it over
 * PATH.  Returns 0, or the errno of the step that failed (the new file
 * removed); *step names it.
 */
static int
write_file (bool features, const char **step)
{
  FILE *fp;
  int fd, err = 0;

  strcpy (tmp, tmp_template);
  *step = "creating a temporary file beside it";
  fd = mkostemp (tmp, O_CLOEXEC);
  if (fd == -1)
    return errno;
  /* Readable as any file nbdkit makes: a monitor runs as another user. */
  if (fchmod (fd, file_mode) == -1 || (fp = fdopen (fd, "w")) == NULL) {
    err = errno;
    close (fd);
    unlink (tmp);
    return err;
  }
  *step = "writing";
  errno = 0;
  if (throttle_metrics_write (fp, features) == -1 || fflush (fp) == EOF ||
      ferror (fp))
    err = errno ? errno : EIO;
  if (fclose (fp) == EOF && err == 0)
    err = errno;
  if (err == 0) {
    *step = "renaming the new file over it";
    if (rename (tmp, path) == -1)
      err = errno;
  }
  if (err)
    unlink (tmp);
  return err;
}

int
throttle_metrics_file_config_complete (void)
{
  const char *slash, *step;
  mode_t mask;
  size_t dirlen;
  int err;

  if (path == NULL) {
    if (interval_text) {
      nbdkit_error ("throttle-metrics-interval=%s: no throttle-metrics-file "
                    "to write", interval_text);
      return -1;
    }
    return 0;
  }
  slash = strrchr (path, '/');          /* absolute: there is one */
  dirlen = slash - path + 1;
  tmp_template = malloc (strlen (path) + 9);
  tmp = malloc (strlen (path) + 9);
  if (tmp_template == NULL || tmp == NULL) {
    nbdkit_error ("malloc: %s", throttle_errtext (errno));
    return -1;
  }
  sprintf (tmp_template, "%.*s.%s.XXXXXX", (int) dirlen, path, slash + 1);
  /* Only the main thread runs now: nothing else reads the umask. */
  mask = umask (0);
  umask (mask);
  file_mode = 0666 & ~mask;

  err = write_file (false, &step);
  if (err) {
    nbdkit_error ("throttle-metrics-file=%s: %s: %s", path_text, step,
                  throttle_errtext (err));
    free (tmp);
    tmp = NULL;                 /* nothing to write at unload */
    return -1;
  }
  nbdkit_debug ("throttle: metrics file %s, rewritten every %g s",
                path, interval);
  return 0;
}

double
throttle_metrics_file_interval (void)
{
  return path ? interval : 0;
}

void
throttle_metrics_file_update (bool features)
{
  const char *step;
  int err;

  if (tmp == NULL)              /* none, or config_complete failed */
    return;
  err = write_file (features, &step);
  if (err && (err != last_err || step != last_step))
    nbdkit_error ("throttle-metrics-file=%s: %s: %s: it keeps its last "
                  "metrics until a write succeeds (tried every %g s)",
                  path, step, throttle_errtext (err), interval);
  else if (err == 0 && last_err)
    nbdkit_debug ("throttle: metrics file %s written again", path);
  last_err = err;
  last_step = step;
}

void
throttle_metrics_file_unload (void)
{
  throttle_metrics_file_update (false);
  free (path);
  free (tmp_template);
  free (tmp);
  path = tmp_template = tmp = NULL;
}
