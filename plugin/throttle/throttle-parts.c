/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the part helpers.  See throttle-parts.h.
 *
 * An idle helper is a waiter for a job on one queue (lib/throttle-wait.h):
 * throttle_parts_give grants the job it offers to the head, the helper
 * idle longest, or finds the queue empty and refuses.  A request's
 * thread waits for its group on 'done', a condition of the pool's lock:
 * it joins work, it does not queue for a resource.
 */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <pthread.h>

#include <nbdkit-filter.h>

#include "throttle-parse.h"
#include "throttle-guards.h"
#include "throttle-lock.h"
#include "throttle-parts.h"
#include "throttle-wait.h"

struct helper {
  pthread_t thread;
  struct throttle_waiter w;     /* while idle; w.item is this helper */
  struct throttle_part_job job; /* granted: the part to serve */
  struct throttle_parts_group *group;
};

/* lock: the idle queue, what is offered, every helper's job and group,
 * every group's fields, 'stopping'.  Over a budget's lock only in
 * throttle_parts_give, whose job->start queues the rest (HACKING.md,
 * "Locks"); a part is served and waited for without it.
 */
static pthread_mutex_t lock = THROTTLE_LOCK_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;  /* a group's part */
static struct throttle_wait_queue idle;
static struct helper helpers[THROTTLE_PART_HELPERS];
static unsigned nr_helpers;                 /* started */
/* While give grants: the job and its group, taken by the first idle
 * helper (the head), NULL after.  Under lock.
 */
static const struct throttle_part_job *offered;
static struct throttle_parts_group *offered_group;
static bool stopping;                       /* every idle helper exits */
static const bool never = false;            /* a helper's wait has no shutdown */

/* The acquire of the idle queue: hand the head what is offered. */
static bool
take_job (void *owner, struct throttle_waiter *w)
{
  struct helper *h = w->item;

  if (stopping) {
    h->job.serve = NULL;
    return true;
  }
  if (offered == NULL)
    return false;
  h->job = *offered;
  h->group = offered_group;
  offered = NULL;
  h->job.start (&h->job);
  return true;
}

/* A helper's wait is never abandoned (no cancel, no shutdown flag), so
 * nothing granted is ever put back.
 */
static void
no_putback (void *owner, struct throttle_waiter *w)
{
  abort ();
}

static void *
helper_main (void *arg)
{
  struct helper *h = arg;

  throttle_lock (&lock);
  for (;;) {
    int err = 0;
    int r;

    if (stopping)
      break;
    h->w.item = h;
    throttle_wait (&idle, &h->w, &never, NULL, NULL, 0, take_job,
                   no_putback, NULL);
    if (h->job.serve == NULL)
      break;
    throttle_unlock (&lock);

    /* Before the part can fault or allocate, as every request thread. */
    throttle_guards_thread_enter ();
    r = h->job.serve (&h->job, h->group, &err);

    throttle_lock (&lock);
    if (r == -1 && h->group->err == 0)
      h->group->err = err ? err : EIO;
    /* The group lives on its request thread's stack: it may return as
     * soon as the lock is dropped, so it is not touched after.
     */
    if (--h->group->outstanding == 0)
      pthread_cond_broadcast (&done);
    h->group = NULL;
  }
  throttle_unlock (&lock);
  return NULL;
}

int
throttle_parts_start (unsigned n)
{
  if (n > THROTTLE_PART_HELPERS)
    n = THROTTLE_PART_HELPERS;
  throttle_wait_queue_init (&idle, &lock);
  for (nr_helpers = 0; nr_helpers < n; nr_helpers++) {
    int err = pthread_create (&helpers[nr_helpers].thread, NULL,
                              helper_main, &helpers[nr_helpers]);

    if (err != 0) {
      nbdkit_error ("throttle: part helpers: pthread_create: %s",
                    throttle_errtext (err));
      throttle_parts_stop ();
      return -1;
    }
  }
  return 0;
}

bool
throttle_parts_give (struct throttle_parts_group *g,
                     const struct throttle_part_job *job)
{
  bool given = false;

  if (nr_helpers == 0)
    return false;
  throttle_lock (&lock);
  if (idle.nr > 0 && g->err == 0) {
    offered = job;
    offered_group = g;
    throttle_wait_grant (&idle, take_job, NULL);
    given = offered == NULL;
    offered = NULL;
    g->outstanding += given;
  }
  throttle_unlock (&lock);
  return given;
}

bool
throttle_parts_failed (struct throttle_parts_group *g)
{
  bool failed;

  throttle_lock (&lock);
  failed = g->err != 0;
  throttle_unlock (&lock);
  return failed;
}

int
throttle_parts_wait (struct throttle_parts_group *g, int *err)
{
  int r = 0;

  throttle_lock (&lock);
  while (g->outstanding > 0)
    pthread_cond_wait (&done, &lock);
  if (g->err != 0) {
    *err = g->err;
    r = -1;
  }
  throttle_unlock (&lock);
  return r;
}

void
throttle_parts_stop (void)
{
  unsigned i;

  if (nr_helpers == 0)
    return;
  throttle_lock (&lock);
  stopping = true;
  throttle_wait_grant (&idle, take_job, NULL);
  throttle_unlock (&lock);
  for (i = 0; i < nr_helpers; i++)
    pthread_join (helpers[i].thread, NULL);
  nr_helpers = 0;
}
