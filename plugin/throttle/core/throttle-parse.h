/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: one way to parse a parameter's value, and
 * to report a bad one.
 *
 * The rule: every bad value gets one error line, ours, which names
 * the parameter and its value as written: "KEY=VALUE: " followed by
 * what is wrong or what the parameter expects.  So nbdkit's own
 * parsers, which log a line of their own that names no parameter, are
 * not called: sizes are read by lib/throttle-size.h (nbdkit_parse_size's
 * grammar), booleans here in nbdkit_parse_bool's, whole numbers here as
 * decimal digits only.
 *
 * Each throttle_parse_* returns 1 when the value is good (what a
 * throttle_*_config function returns for a key of its own), -1 after
 * the one error line.  They are for the .config callbacks; the
 * control socket, which replies instead of logging, uses
 * throttle_size_in.
 */

#ifndef THROTTLE_PARSE_H
#define THROTTLE_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "throttle-metric.h"

/* What nbdkit_parse_bool takes (any case but the digits), for every
 * message that asks for a boolean.
 */
#define THROTTLE_BOOL_WORDS \
  "true or false (also on/off, yes/no, t/f, y/n, 1/0)"

extern int throttle_parse_size (const char *key, const char *value,
                                int64_t min, int64_t max,
                                const char *expect, int64_t *out);
/* Decimal digits only, from min to max; else the message is
 * "KEY=VALUE: expected a whole number from MIN to MAX" and what (e.g.
 * " (nbdkit's --threads value)", or "").
 */
extern int throttle_parse_unsigned (const char *key, const char *value,
                                    unsigned min, unsigned max,
                                    const char *what, unsigned *out);
extern int throttle_parse_bool (const char *key, const char *value,
                                bool *out);
/* *out is the index of value in words, a NULL-terminated list. */
extern int throttle_parse_word (const char *key, const char *value,
                                const char *const *words,
                                const char *expect, int *out);
/* An absolute path, kept as given (nbdkit keeps the value for the
 * server's life).
 */
extern int throttle_parse_path (const char *key, const char *value,
                                const char *expect, const char **out);
/* A duration from min to max seconds, in the grammar of every
 * duration the filter and the tools read (lib/throttle-duration.h:
 * seconds, or with a unit s, ms, us, ns; nbdkit 1.32 has no
 * nbdkit_parse_delay).
 */
extern int throttle_parse_seconds (const char *key, const char *value,
                                   double min, double max,
                                   const char *expect, double *out);

/* The value as a size: 0 if it is one from min to max; -1 if it is
 * not a size, with *why and *where as throttle_size_parse sets them
 * (lib/throttle-size.h), nothing logged; -2 if it is out of range.
 * The caller says which.
 */
extern int throttle_size_in (const char *value, int64_t min, int64_t max,
                             int64_t *out, const char **why,
                             const char **where);

/* The smallest capacity (and floor) under metric m: one that admits,
 * in one grant, the least a client's request can be charged that is
 * not served in smaller parts.  Under bytes and pages, a page: a read
 * or write served in parts is cut in whole pages, and a zero or trim
 * costs a page.  Under requests, one request; under a user metric,
 * one unit (a request charged more than the capacity is clamped: it
 * runs alone).
 */
extern uint64_t throttle_capacity_min (const struct throttle_metric *m);

/* Whether 'value' (a capacity or floor, given as 'text') is at least
 * throttle_capacity_min: 0 if so, else -1 with a message naming the
 * value and the minimum in err, for the caller to say after what it
 * names (the parameter, or the control command).
 */
extern int throttle_capacity_check (const struct throttle_metric *m,
                                    uint64_t value, const char *text,
                                    char *err, size_t errlen);

/* Under throttle-metric=pages or requests a capacity counts pages or
 * requests, yet nbdkit's size suffixes (k, M, G, ... and b, s) read as
 * bytes: throttle-capacity=1M would silently be 1048576 pages (4 GiB).
 * text is the capacity as written (already parsed to value by
 * throttle_size_in), what names it for the message.  0 if text has no
 * suffix or the metric counts bytes (bytes, or a user metric, whose
 * unit the filter cannot know); else -1 with the reason in err, for
 * the caller to say.
 */
extern int throttle_capacity_unit_check (const struct throttle_metric *m,
                                         const char *text, uint64_t value,
                                         const char *what,
                                         char *err, size_t errlen);

/* Whether 'value' (a capacity or server capacity, named by what) is
 * more than the machine could ever have in flight: 0 if not (or the
 * metric's unit is unknown: a user metric), 1 if so, with the reason
 * in err for the caller to warn with (a warning: such a capacity
 * works, it only never throttles).  Every unit in flight holds memory
 * of the server's own: a byte of data, a page of it, and a request
 * either a worker thread, whose stack is at least a page, or a
 * writeback buffer of at least a page.  So more than ram bytes,
 * ram / THROTTLE_PAGE_SIZE pages or requests, can never be in flight
 * at once.  ram is the machine's physical memory (throttle_ram), a
 * parameter so that the unit test can choose it.
 */
extern int throttle_capacity_ram_check (const struct throttle_metric *m,
                                        uint64_t value, uint64_t ram,
                                        const char *what,
                                        char *err, size_t errlen);
/* The machine's physical memory in bytes (not a cgroup's limit, which
 * can change while nbdkit runs).
 */
extern uint64_t throttle_ram (void);

/* The English text of an errno, the one way the filter spells one:
 * not strerror or %m, whose message catalogue lookup makes nbdkit hang
 * in exit under LD_PRELOAD=libasan (p11-kit's destructor waits in
 * freelocale).
 */
extern const char *throttle_errtext (int err);

/* "nbdkit: throttle: warning: " and the message, on stderr: nbdkit
 * 1.32 has no warning call, and before nbdkit daemonizes stderr is
 * still the user's terminal.
 */
extern void throttle_warning (const char *fmt, ...)
  __attribute__ ((format (printf, 1, 2)));

#endif /* THROTTLE_PARSE_H */
