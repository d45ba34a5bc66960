/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the part helpers, threads that serve the
 * rest of a large request while the thread granted its part serves
 * that part.
 *
 * A request served in parts (lib/throttle-admit.h) would otherwise have
 * one part in flight at a time: while a part is at the plugin its rest
 * is not queued, and units that nobody queues for stay idle.  With
 * helpers the thread granted a part queues the rest at once, at the
 * tail, as a new request would, in the copy an idle helper takes; it
 * serves its part while the helper waits for the rest's credit and,
 * granted a part of it, does the same.  The request's own thread waits
 * for every rest it handed off before the request returns.  When no
 * helper is idle the thread serves its part and then the rest itself,
 * as without helpers.
 *
 * The helpers are made in .after_fork (no thread is made on the data
 * path, where memory may be short) and only where nbdkit's final thread
 * model is parallel: several parts of one request at the plugin at once
 * are concurrent requests on one connection.  Each takes the guards
 * (throttle_guards_thread_enter) before it serves a part.
 */

#ifndef THROTTLE_PARTS_H
#define THROTTLE_PARTS_H

#include <stdbool.h>
#include <stdint.h>

#include "throttle-admit.h"

struct throttle_parts_group;

/* The rest of a request, as a thread that was granted a part hands it
 * over: copied into the helper, whose copy is given to start (in the
 * giver's thread, under the pool's lock: it may take a budget's lock,
 * never the pool's) and then to serve (job, group, &err) in the
 * helper, which records a failure in the request's group.  The fields
 * are the serve module's (throttle-serve.c).
 */
struct throttle_part_job {
  void (*start) (struct throttle_part_job *job);
  int (*serve) (struct throttle_part_job *job,
                struct throttle_parts_group *g, int *err);
  struct throttle_admit a;      /* the rest's admission, from start */
  int admit_r;
  void *conn;
  void *next;
  int op;
  void *buf;
  uint32_t count;
  uint64_t offset;
  uint32_t flags;
};

/* The rests of one request handed to helpers.  On the request thread's
 * stack, zeroed before its first part.  Its fields are the pool's,
 * under its lock.
 */
struct throttle_parts_group {
  unsigned outstanding;         /* handed off, not yet served */
  int err;                      /* the first failed rest's error, or 0 */
};

/* How many helpers the filter starts where parts may be concurrent. */
#define THROTTLE_PART_HELPERS 16

/* Start n helpers (from .after_fork).  Returns -1 after nbdkit_error. */
extern int throttle_parts_start (unsigned n);

/* Hand 'job' to an idle helper, counting it in g: true.  false if no
 * helper is idle (or none was started, or a rest of g has failed): the
 * caller serves it itself.  A helper may hand on a rest of its own in
 * the same group.
 */
extern bool throttle_parts_give (struct throttle_parts_group *g,
                                 const struct throttle_part_job *job);

/* Whether a rest handed off from g has failed (a thread that gave one
 * asks before it admits another part: a failed request stops early).
 */
extern bool throttle_parts_failed (struct throttle_parts_group *g);

/* Block until every rest handed off to g is served.  Returns 0, or -1
 * with *err the first failure's error.  The request's thread must call
 * it before the request returns whenever it handed a rest to g: the
 * helpers use the request's buffer.
 */
extern int throttle_parts_wait (struct throttle_parts_group *g, int *err);

/* Stop and join the helpers (from .cleanup, after the last request). */
extern void throttle_parts_stop (void);

#endif /* THROTTLE_PARTS_H */
