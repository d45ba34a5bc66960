/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the Prometheus text exposition format (see
 * throttle-prom.h).
 */

#include <config.h>

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "throttle-json.h"
#include "throttle-prom.h"

void
throttle_prom_family (FILE *fp, const char *name, const char *type,
                      const char *help)
{
  int len = strlen (name);

  /* A counter's family: its samples' name less "_total". */
  if (strcmp (type, "counter") == 0) {
    assert (len > 6 && strcmp (name + len - 6, "_total") == 0);
    len -= 6;
  }
  fprintf (fp, "# HELP %.*s %s\n# TYPE %.*s %s\n",
           len, name, help, len, name, type);
}

static void
sample_name (FILE *fp, const char *name, const char *label,
             const char *value)
{
  fputs (name, fp);
  if (label) {
    fprintf (fp, "{%s=", label);
    throttle_quote (fp, value, false);
    putc ('}', fp);
  }
  putc (' ', fp);
}

void
throttle_prom_sample (FILE *fp, const char *name, const char *label,
                      const char *value, uint64_t v)
{
  sample_name (fp, name, label, value);
  fprintf (fp, "%" PRIu64 "\n", v);
}

void
throttle_prom_sample_ns (FILE *fp, const char *name, const char *label,
                         const char *value, uint64_t ns)
{
  sample_name (fp, name, label, value);
  fprintf (fp, "%" PRIu64 ".%09" PRIu64 "\n",
           ns / 1000000000, ns % 1000000000);
}
