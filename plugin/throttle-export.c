/* nbdkit-throttle filter: the registry of budgets.  See
 * throttle-export.h for which names have a budget of their own.
 *
 * Budgets live until unload: a budget outlives its connections so that
 * the kernel's several connections to one export (nbd-client -C N),
 * opening and closing independently, share one bound, and so that a
 * handle's pointer to its budget stays valid.
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <nbdkit-filter.h>

#include "throttle-adapt-glue.h"
#include "throttle-export.h"
#include "throttle-parse.h"

#define NR_BUCKETS 256

/* Lock rule: 'lock' guards the list, the hash, nr_exports and
 * said_full.  An export's fields other than its budget and wb never
 * change after it is made, and it is freed only at unload, so a
 * pointer to it may be used without the lock.
 *
 * Lock order: 'lock' is taken first of the filter's locks:
 * throttle_export_foreach_range calls its function with it held (the
 * control socket's stats), which takes an export's adapt lock
 * (throttle-adapt-glue.c), its write-behind queue's lock
 * (lib/throttle-wbq.c) and its budget's lock (lib/throttle-budget.c),
 * in that order; none of those calls back in here.
 */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct throttle_export *registry, **tail = &registry;
static struct throttle_export *buckets[NR_BUCKETS];
static size_t nr_exports;
static bool said_full;

/* Set once by throttle_export_init, before any connection. */
static struct throttle_export *default_exp;
static uint64_t capacity;

static unsigned
hash (const char *s)
{
  uint32_t h = 2166136261u;   /* FNV-1a */

  while (*s)
    h = (h ^ (unsigned char) *s++) * 16777619u;
  return h % NR_BUCKETS;
}

static struct throttle_export *
find_locked (const char *name)
{
  struct throttle_export *exp;

  for (exp = buckets[hash (name)]; exp; exp = exp->hnext)
    if (strcmp (exp->name, name) == 0)
      return exp;
  return NULL;
}

/* NULL with errno on allocation failure. */
static struct throttle_export *
create_locked (const char *name)
{
  struct throttle_export *exp = calloc (1, sizeof *exp);
  unsigned h = hash (name);

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
   * without it.
   */
  exp->adapt = throttle_adapt_export_new (&exp->budget, capacity);
  if (exp->adapt == NULL) {
    throttle_budget_destroy (&exp->budget);
    free (exp->name);
    free (exp);
    errno = ENOMEM;
    return NULL;
  }
  *tail = exp;
  tail = &exp->next;
  exp->hnext = buckets[h];
  buckets[h] = exp;
  nr_exports++;
  return exp;
}

int
throttle_export_init (uint64_t cap)
{
  pthread_mutex_lock (&lock);
  capacity = cap;
  default_exp = create_locked ("");
  pthread_mutex_unlock (&lock);
  return default_exp ? 0 : -1;
}

struct throttle_export *
throttle_export_for_name (const char *name)
{
  struct throttle_export *exp;

  pthread_mutex_lock (&lock);
  exp = find_locked (name);
  pthread_mutex_unlock (&lock);
  if (exp)
    return exp;
  nbdkit_debug ("throttle: export \"%s\" is not in the plugin's export "
                "list: charged to the default export's budget", name);
  return default_exp;
}

/* A name the plugin listed gets a budget.  Failing to make one is no
 * error: the name stays charged to the default budget, which only
 * bounds it more tightly.
 */
static void
learn (const char *name)
{
  pthread_mutex_lock (&lock);
  if (find_locked (name) == NULL) {
    if (nr_exports >= THROTTLE_MAX_EXPORTS) {
      if (!said_full)
        nbdkit_debug ("throttle: %d budgets exist: exports listed from now "
                      "on (\"%s\" first) are charged to the default "
                      "export's budget", THROTTLE_MAX_EXPORTS, name);
      said_full = true;
    }
    else if (create_locked (name) == NULL)
      nbdkit_debug ("throttle: no budget for listed export \"%s\": %s: "
                    "charged to the default export's budget", name,
                    throttle_errtext (errno));
  }
  pthread_mutex_unlock (&lock);
}

int
throttle_export_list_exports (nbdkit_next_list_exports *next,
                              nbdkit_backend *nxdata,
                              int readonly, int is_tls,
                              struct nbdkit_exports *exports)
{
  struct nbdkit_exports *listed = nbdkit_exports_new ();
  size_t i, n;
  int r = 0;

  if (listed == NULL)
    return -1;
  /* nbdkit has resolved the plugin's "default export" entry into a
   * name by the time next returns.
   */
  if (next (nxdata, readonly, listed) == -1)
    r = -1;
  n = r == 0 ? nbdkit_exports_count (listed) : 0;
  for (i = 0; i < n; i++) {
    const struct nbdkit_export e = nbdkit_get_export (listed, i);

    learn (e.name);
    if (nbdkit_add_export (exports, e.name, e.description) == -1) {
      r = -1;
      break;
    }
  }
  nbdkit_exports_free (listed);
  return r;
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

void
throttle_export_foreach (throttle_export_fn fn, void *opaque)
{
  throttle_export_foreach_range (0, SIZE_MAX, fn, opaque);
}

size_t
throttle_export_foreach_range (size_t from, size_t max,
                               throttle_export_fn fn, void *opaque)
{
  struct throttle_export *exp;
  size_t i = 0, total;

  pthread_mutex_lock (&lock);
  for (exp = registry; exp && max > 0; exp = exp->next, i++)
    if (i >= from) {
      fn (exp, opaque);
      max--;
    }
  total = nr_exports;
  pthread_mutex_unlock (&lock);
  return total;
}

size_t
throttle_export_count (void)
{
  size_t n;

  pthread_mutex_lock (&lock);
  n = nr_exports;
  pthread_mutex_unlock (&lock);
  return n;
}

void
throttle_export_free_all (void)
{
  struct throttle_export *exp;

  pthread_mutex_lock (&lock);
  while ((exp = registry) != NULL) {
    registry = exp->next;
    throttle_budget_shutdown (&exp->budget);
    throttle_budget_destroy (&exp->budget);
    throttle_adapt_export_free (exp->adapt);
    free (exp->name);
    free (exp);
  }
  tail = &registry;
  memset (buckets, 0, sizeof buckets);
  nr_exports = 0;
  default_exp = NULL;
  pthread_mutex_unlock (&lock);
}
