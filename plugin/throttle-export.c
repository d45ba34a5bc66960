/* nbdkit-throttle filter: the registry of per-export budgets.
 *
 * Budgets are created on first open and live until unload: a budget
 * outlives its connections so that the kernel's several connections
 * to one export (nbd-client -C N), opening and closing independently,
 * share one bound.  The number of distinct export names is small in
 * practice and bounded by what the plugin accepts.
 */

#include <config.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "throttle-export.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct throttle_export *exports;

static struct throttle_export *
find_locked (const char *name)
{
  struct throttle_export *exp;

  for (exp = exports; exp; exp = exp->next)
    if (strcmp (exp->name, name) == 0)
      return exp;
  return NULL;
}

struct throttle_export *
throttle_export_find (const char *name)
{
  struct throttle_export *exp;

  pthread_mutex_lock (&lock);
  exp = find_locked (name);
  pthread_mutex_unlock (&lock);
  return exp;
}

struct throttle_export *
throttle_export_get (const char *name, uint64_t capacity)
{
  struct throttle_export *exp;

  pthread_mutex_lock (&lock);
  exp = find_locked (name);
  if (exp == NULL) {
    exp = calloc (1, sizeof *exp);
    if (exp && (exp->name = strdup (name)) != NULL &&
        throttle_budget_init (&exp->budget, capacity) == 0) {
      exp->next = exports;
      exports = exp;
    }
    else if (exp) {
      free (exp->name);
      free (exp);
      exp = NULL;
    }
  }
  pthread_mutex_unlock (&lock);
  return exp;
}

void
throttle_export_foreach (throttle_export_fn fn, void *opaque)
{
  struct throttle_export *exp;

  pthread_mutex_lock (&lock);
  for (exp = exports; exp; exp = exp->next)
    fn (exp, opaque);
  pthread_mutex_unlock (&lock);
}

void
throttle_export_free_all (void)
{
  struct throttle_export *exp;

  pthread_mutex_lock (&lock);
  while ((exp = exports) != NULL) {
    exports = exp->next;
    throttle_budget_shutdown (&exp->budget);
    throttle_budget_destroy (&exp->budget);
    free (exp->name);
    free (exp);
  }
  pthread_mutex_unlock (&lock);
}
