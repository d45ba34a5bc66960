/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the registry of budgets.  See
 * throttle-export.h for which budget a connection is charged to, and
 * how long a budget lives.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <nbdkit-filter.h>

#include "throttle-admit.h"
#include "throttle-config.h"
#include "throttle-export.h"
#include "throttle-feature.h"
#include "throttle-lock.h"
#include "throttle-parse.h"

/* Lock rule: 'lock' guards the list, nr_exports and every
 * export's refs; conns is atomic.  An export's other fields but its budget
 * never change after it is made, and it is freed only once its
 * refs are 0, so a holder of a reference may use it without the lock.
 *
 * 'lock' is first in the filter's lock order (HACKING.md, "Locks"):
 * throttle_export_foreach_range calls its function with it held
 * (the stats, the latency target's clock, set server-capacity), and
 * throttle_export_free_all calls the features' detach with it held;
 * nothing under it calls back in here.  Otherwise an export is torn
 * down after it has left the registry, without 'lock', and the
 * features attach without it.
 */
static pthread_mutex_t lock = THROTTLE_LOCK_INITIALIZER;
/* In creation order, "" first.  A list, walked by .open and .close:
 * it holds the names of open connections only, and a connection costs
 * nbdkit a thread and a handshake already.
 */
static struct throttle_export *registry;
static size_t nr_exports;

/* Set once by throttle_export_init, before any connection. */
static uint64_t capacity;

/* Detach the features attached to exp (a state set), the last first. */
static void
detach_features (struct throttle_export *exp)
{
  size_t n = throttle_nr_features;

  while (n-- > 0)
    if (exp->state[n])
      throttle_features[n]->export_detach (exp->state[n]);
}

static struct throttle_export *
find_locked (const char *name)
{
  struct throttle_export *exp;

  throttle_lock_assert_held (&lock);
  for (exp = registry; exp; exp = exp->next)
    if (strcmp (exp->name, name) == 0)
      return exp;
  return NULL;
}

/* Made outside the lock: a long name, a budget and the features'
 * state.  NULL with errno on allocation failure.
 */
static struct throttle_export *
make (const char *name)
{
  struct throttle_export *exp = calloc (1, sizeof *exp);
  size_t i;

  if (exp == NULL)
    return NULL;
  exp->name = strdup (name);
  if (exp->name == NULL || throttle_budget_init (&exp->budget, capacity)) {
    free (exp->name);
    free (exp);
    errno = ENOMEM;
    return NULL;
  }
  /* With the budget, so that the control socket never finds an export
   * without its features' state.
   */
  for (i = 0; throttle_features[i]; i++) {
    if (throttle_features[i]->export_attach == NULL)
      continue;
    exp->state[i] = throttle_features[i]->export_attach (exp);
    if (exp->state[i] == NULL) {
      detach_features (exp);
      throttle_budget_destroy (&exp->budget);
      free (exp->name);
      free (exp);
      errno = ENOMEM;
      return NULL;
    }
  }
  return exp;
}

/* Its connections are closed: nothing is in flight or waiting. */
static void
unmake (struct throttle_export *exp)
{
  throttle_budget_shutdown (&exp->budget);
  throttle_budget_destroy (&exp->budget);
  detach_features (exp);
  free (exp->name);
  free (exp);
}

/* Bind every export by the server's budget once there are two: one
 * export within the server's capacity cannot exceed it, so until then
 * its requests are not charged to the server at all (throttle-admit.h).
 * Called with the registry lock held, after linking a new export and
 * before it admits anything; an export once bound stays bound.
 */
static void
bind_locked (void)
{
  struct throttle_export *exp;

  throttle_lock_assert_held (&lock);
  if (nr_exports < 2 || throttle_config.server == NULL)
    return;
  for (exp = registry; exp; exp = exp->next)
    throttle_admit_bind (&exp->budget, throttle_config.server);
}

static void
link_locked (struct throttle_export *exp)
{
  struct throttle_export **pp = &registry;

  throttle_lock_assert_held (&lock);
  while (*pp)
    pp = &(*pp)->next;
  *pp = exp;
  nr_exports++;
}

static void
unlink_locked (struct throttle_export *exp)
{
  struct throttle_export **pp = &registry;

  throttle_lock_assert_held (&lock);
  while (*pp != exp)
    pp = &(*pp)->next;
  *pp = exp->next;
  nr_exports--;
}

int
throttle_export_init (uint64_t cap)
{
  struct throttle_export *exp;

  capacity = cap;
  exp = make ("");
  if (exp == NULL)
    return -1;
  exp->permanent = true;
  throttle_lock (&lock);
  link_locked (exp);
  throttle_unlock (&lock);
  return 0;
}

struct throttle_export *
throttle_export_open (const char *name)
{
  struct throttle_export *exp, *made = NULL;
  bool made_here = false;

  for (;;) {
    throttle_lock (&lock);
    exp = find_locked (name);
    if (exp == NULL && made) {
      link_locked (made);
      bind_locked ();
      exp = made;
      made = NULL;
      made_here = true;
    }
    if (exp) {
      exp->refs++;
      /* Atomic too: the control thread reads it holding a reference. */
      __atomic_add_fetch (&exp->conns, 1, __ATOMIC_RELAXED);
    }
    throttle_unlock (&lock);
    if (exp)
      break;
    made = make (name);
    if (made == NULL) {
      nbdkit_error ("throttle: cannot make a budget for export \"%s\": %s",
                    name, throttle_errtext (errno));
      return NULL;
    }
  }
  /* Another connection made it meanwhile. */
  if (made)
    unmake (made);
  else if (made_here)
    nbdkit_debug ("throttle: export \"%s\": budget made by its first "
                  "connection", name);
  return exp;
}

void
throttle_export_put (struct throttle_export *exp)
{
  bool last;

  throttle_lock (&lock);
  last = --exp->refs == 0 && !exp->permanent;
  if (last)
    unlink_locked (exp);
  throttle_unlock (&lock);
  if (last) {
    nbdkit_debug ("throttle: export \"%s\": its last connection closed: "
                  "budget freed", exp->name);
    unmake (exp);
  }
}

void
throttle_export_close (struct throttle_export *exp)
{
  __atomic_sub_fetch (&exp->conns, 1, __ATOMIC_RELAXED);
  throttle_export_put (exp);
}

struct throttle_export *
throttle_export_get (const char *name)
{
  struct throttle_export *exp;

  throttle_lock (&lock);
  exp = find_locked (name);
  if (exp)
    exp->refs++;
  throttle_unlock (&lock);
  return exp;
}

size_t
throttle_export_foreach_range (size_t from, size_t max,
                               throttle_export_fn fn, void *opaque)
{
  struct throttle_export *exp;
  size_t i = 0, total;

  throttle_lock (&lock);
  for (exp = registry; exp && max > 0; exp = exp->next, i++)
    if (i >= from) {
      fn (exp, opaque);
      max--;
    }
  total = nr_exports;
  throttle_unlock (&lock);
  return total;
}

size_t
throttle_export_count (void)
{
  size_t n;

  throttle_lock (&lock);
  n = nr_exports;
  throttle_unlock (&lock);
  return n;
}

/* At unload, no connection is open, so only "" is left. */
void
throttle_export_free_all (void)
{
  struct throttle_export *exp;

  throttle_lock (&lock);
  while ((exp = registry) != NULL) {
    registry = exp->next;
    unmake (exp);
  }
  nr_exports = 0;
  throttle_unlock (&lock);
}
