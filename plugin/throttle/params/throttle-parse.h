/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: what the parameters and the control socket
 * share: a capacity judged against the metric, the machine's RAM, an
 * errno's text, a warning.  The parameters
 * themselves are parsed by throttle-params.h.
 */

#ifndef THROTTLE_PARSE_H
#define THROTTLE_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "throttle-metric.h"

/* The smallest capacity (and floor) under metric m: one that admits,
 * in one grant, the least a client's request can be charged that is
 * not served in smaller parts.  Under bytes and pages, a page: a read
 * or write served in parts is cut in whole pages, and a zero or trim
 * costs a page.  Under requests, one request; under a user metric,
 * one unit (a request charged more than the capacity is clamped: it
 * runs alone).
 */
extern uint64_t throttle_capacity_min (const struct throttle_metric *m);

/* Judges 'value', a capacity (or floor) written as 'text', against
 * metric m, for the caller to say after 'what', which names it (the
 * parameter and its value, or the control command): -1 with the
 * reason in err if m cannot take it, 1 with the reason in err if m
 * takes it but it can never be reached, else 0.
 *
 * Refused: above THROTTLE_BUDGET_MAX_UNITS, the most a budget holds;
 * below throttle_capacity_min; and under throttle-metric=pages or
 * requests, a size suffix (k, M, G, ... and b, s), which reads as
 * bytes: throttle-capacity=1M would silently be 1048576 pages (4 GiB).
 *
 * Never reached (a warning, for such a capacity works, it only never
 * throttles): more than the machine's RAM could hold in flight.
 * Every unit in flight holds memory of the server's own: a byte of
 * data, a page of it, and a request either a worker thread, whose
 * stack is at least a page, or a writeback buffer of at least a page.
 * So more than throttle_ram bytes, or that over THROTTLE_PAGE_SIZE
 * pages or requests, can never be in flight at once.  A user metric's
 * unit is unknown: it is judged by its bounds alone.
 */
extern int throttle_capacity_judge (const struct throttle_metric *m,
                                    const char *what, const char *text,
                                    uint64_t value, char *err, size_t errlen);

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
