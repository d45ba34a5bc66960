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
 * text is the capacity as written (already parsed to value as a
 * size), what names it for the message.  0 if text has no
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
