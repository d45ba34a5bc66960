/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle: the metrics as OpenMetrics 1.0 text, written to a
 * stdio stream without allocating: the filter's control command
 * "metrics" and its metrics file.
 *
 * OpenMetrics rather than the Prometheus text format 0.0.4: the text
 * ends with "# EOF", which the control socket's clients read up to,
 * and that line makes it OpenMetrics, whose parsers (Prometheus's, and
 * Python's prometheus_client.openmetrics) refuse a counter declared as
 * 0.0.4 declares it.  The two formats differ in that alone for what is
 * written here: a counter's HELP and TYPE lines name its family
 * ("x"), its samples carry "_total" ("x_total").  A 0.0.4 parser
 * (node_exporter's textfile collector, Python's
 * prometheus_client.parser) reads the text, the counters as untyped.
 *
 * A family is its HELP and TYPE lines, then all its samples: the
 * format wants a family's samples together, so a writer walks its
 * sources once per family.  A name carries its unit (_bytes, _seconds).
 * The caller checks fp's error state, as for any other write.
 */

#ifndef THROTTLE_PROM_H
#define THROTTLE_PROM_H

#include <stdint.h>
#include <stdio.h>

/* The last line of a complete exposition: OpenMetrics' end, and the
 * end of the reply to a client of the control socket.
 */
#define THROTTLE_PROM_EOF "# EOF\n"

/* "# HELP family help" and "# TYPE family type" ("counter", "gauge").
 * name is the samples' name, the family's but for a counter's, which
 * ends in "_total" (the caller's duty), written here without it.
 * name and help are the caller's constants: a name of
 * [a-zA-Z_:][a-zA-Z0-9_:]*, a help without a backslash, a double
 * quote or a newline.
 */
extern void throttle_prom_family (FILE *fp, const char *name,
                                  const char *type, const char *help);

/* One sample line: name{label="value"} v, or name v if label is NULL.
 * value is quoted as a label value (throttle_quote), so any C string
 * is a valid one.
 */
extern void throttle_prom_sample (FILE *fp, const char *name,
                                  const char *label, const char *value,
                                  uint64_t v);
/* The same for a duration of ns nanoseconds, written in seconds as an
 * exact decimal (1.250000000), so that a reader's float of it is the
 * nearest to ns / 1e9, as a float of the JSON's nanoseconds divided
 * would be.
 */
extern void throttle_prom_sample_ns (FILE *fp, const char *name,
                                     const char *label, const char *value,
                                     uint64_t ns);

#endif /* THROTTLE_PROM_H */
