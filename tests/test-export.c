/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the registry of budgets (plugin/throttle/core/throttle-export.c)
 * without nbdkit: the budget a connection gets depends on its name
 * only, whatever was opened and closed before; a named budget lives
 * while a connection or a control command holds it; nothing is left
 * after the last close; a feature's state is made and freed with each
 * budget.  What the registry calls in nbdkit is stood in for here.
 *
 * THROTTLE_EXPORT_STEPS=N runs N random steps instead of 20000, and
 * THROTTLE_EXPORT_SEED=S replays the schedule of seed S (a failure
 * prints its seed and step).
 */

#include <config.h>

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "throttle-export.h"
#include "check-main.h"

/* --- nbdkit, as far as the registry and throttle-parse.c use it ------ */

static int errors_logged;

void
nbdkit_debug (const char *fmt, ...)
{
}

void
nbdkit_error (const char *fmt, ...)
{
  __atomic_add_fetch (&errors_logged, 1, __ATOMIC_RELAXED);
}

/* --- a feature with state per export --------------------------------- */

static long feature_live;       /* states attached and not detached */
static bool feature_fails;      /* the next attach fails */

static void *
feature_attach (struct throttle_export *exp)
{
  long *state;

  if (feature_fails) {
    errno = ENOMEM;
    return NULL;
  }
  state = malloc (sizeof *state);
  if (state) {
    *state = (long) throttle_budget_get_capacity (&exp->budget);
    __atomic_add_fetch (&feature_live, 1, __ATOMIC_RELAXED);
  }
  return state;
}

static void
feature_detach (void *state)
{
  ck_assert_ptr_nonnull (state);
  __atomic_sub_fetch (&feature_live, 1, __ATOMIC_RELAXED);
  free (state);
}

static const struct throttle_feature feature = {
  .export_attach = feature_attach,
  .export_detach = feature_detach,
};
/* A feature with no state per export before it, so that the state's
 * place is the feature's in the table.
 */
static const struct throttle_feature stateless;
const struct throttle_feature *const throttle_features[] = {
  &stateless, &feature, NULL
};
const size_t throttle_nr_features = 2;
/* The filter's (core/throttle.c). */
struct throttle_config throttle_config = { .split = true };
int throttle_debug_verbose;
static const unsigned feature_slot = 1;

/* --- helpers ------------------------------------------------------------ */

static void
setup (void)
{
  ck_assert_int_eq (throttle_export_init (1 << 20), 0);
  errors_logged = 0;
}

static void
teardown (void)
{
  throttle_export_free_all ();
  ck_assert_int_eq (feature_live, 0);
}

/* Whether 'name' has a budget now, without keeping it. */
static struct throttle_export *
peek (const char *name)
{
  struct throttle_export *exp = throttle_export_get (name);

  if (exp)
    throttle_export_put (exp);
  return exp;
}

struct collect {
  const char *names[64];
  size_t n;
};

static void
collect (struct throttle_export *exp, void *opaque)
{
  struct collect *c = opaque;

  if (c->n < 64)
    c->names[c->n++] = exp->name;
}

/* --- tests -------------------------------------------------------------- */

START_TEST (test_default)
{
  struct throttle_export *d = throttle_export_get ("");

  ck_assert_ptr_nonnull (d);
  ck_assert (d->permanent);
  ck_assert_uint_eq (throttle_budget_get_capacity (&d->budget), 1 << 20);
  throttle_export_put (d);
  /* Opened and closed: "" stays. */
  throttle_export_close (throttle_export_open (""));
  ck_assert_ptr_eq (peek (""), d);
  ck_assert_uint_eq (throttle_export_count (), 1);
  ck_assert_uint_eq (d->conns, 0);
}
END_TEST

START_TEST (test_named_lifetime)
{
  struct throttle_export *a1, *a2, *ctl, *again;

  ck_assert_ptr_null (peek ("a"));
  a1 = throttle_export_open ("a");
  ck_assert_ptr_nonnull (a1);
  ck_assert (!a1->permanent);
  ck_assert_str_eq (a1->name, "a");
  a2 = throttle_export_open ("a");
  ck_assert_ptr_eq (a1, a2);
  ck_assert_uint_eq (a1->conns, 2);
  ck_assert_uint_eq (throttle_export_count (), 2);
  /* A control command's reference keeps it past its connections. */
  ctl = throttle_export_get ("a");
  ck_assert_ptr_eq (ctl, a1);
  throttle_export_close (a1);
  throttle_export_close (a2);
  ck_assert_uint_eq (ctl->conns, 0);
  ck_assert_uint_eq (throttle_export_count (), 2);
  again = throttle_export_open ("a");
  ck_assert_ptr_eq (again, ctl);
  throttle_export_close (again);
  throttle_export_put (ctl);
  ck_assert_ptr_null (peek ("a"));
  ck_assert_uint_eq (throttle_export_count (), 1);
  ck_assert_int_eq (feature_live, 1);
  /* A new one starts at the configured capacity again. */
  a1 = throttle_export_open ("a");
  throttle_budget_set_capacity (&a1->budget, 4096);
  throttle_export_close (a1);
  a1 = throttle_export_open ("a");
  ck_assert_uint_eq (throttle_budget_get_capacity (&a1->budget), 1 << 20);
  throttle_export_close (a1);
  ck_assert_int_eq (errors_logged, 0);
}
END_TEST

START_TEST (test_order)
{
  struct throttle_export *e[4];
  struct collect c = { .n = 0 };
  char name[8];
  size_t i, total;

  for (i = 0; i < 4; i++) {
    snprintf (name, sizeof name, "n%zu", i);
    e[i] = throttle_export_open (name);
  }
  throttle_export_close (e[1]);          /* from the middle */
  throttle_export_close (e[3]);          /* the last */
  e[1] = throttle_export_open ("n1");    /* made again: now last */
  total = throttle_export_foreach_range (1, 2, collect, &c);
  ck_assert_uint_eq (total, 4);
  ck_assert_uint_eq (c.n, 2);
  ck_assert_str_eq (c.names[0], "n0");
  ck_assert_str_eq (c.names[1], "n2");
  c.n = 0;
  throttle_export_foreach_range (0, SIZE_MAX, collect, &c);
  ck_assert_uint_eq (c.n, 4);
  ck_assert_str_eq (c.names[0], "");
  ck_assert_str_eq (c.names[3], "n1");
  for (i = 0; i < 3; i++)
    throttle_export_close (e[i]);
  ck_assert_uint_eq (throttle_export_count (), 1);
  /* The tail is right after removing the last one: a new one links. */
  e[0] = throttle_export_open ("z");
  c.n = 0;
  throttle_export_foreach_range (0, SIZE_MAX, collect, &c);
  ck_assert_uint_eq (c.n, 2);
  ck_assert_str_eq (c.names[1], "z");
  throttle_export_close (e[0]);
}
END_TEST

/* Random opens, closes and control references over a few names: at
 * every step, every holder of a name has the same budget, a name has
 * a budget exactly while something holds it ("" always), and the
 * count agrees.  The budget a connection gets is thus a function of its
 * name alone, whatever the schedule before.
 */
#define NAMES 5
#define HOLDERS 64

START_TEST (test_random)
{
  static const char *names[NAMES] = { "", "a", "b", "a b", "\xff" };
  struct { struct throttle_export *exp; int name; bool conn; } h[HOLDERS];
  const char *env = getenv ("THROTTLE_EXPORT_STEPS");
  const char *seedenv = getenv ("THROTTLE_EXPORT_SEED");
  long steps = env ? atol (env) : 20000, step;
  unsigned seed = seedenv ? (unsigned) atol (seedenv) : 20261204;
  unsigned rs = seed;
  size_t nh = 0, i;
  int n;

  for (step = 0; step < steps; step++) {
    unsigned r = rand_r (&rs);

    if (nh < HOLDERS && (nh == 0 || r % 3 != 0)) {
      /* A connection (2 in 3) or a control command takes a name. */
      n = (r / 3) % NAMES;
      h[nh].name = n;
      h[nh].conn = (r / 16) % 3 != 0;
      h[nh].exp = h[nh].conn ? throttle_export_open (names[n])
        : throttle_export_get (names[n]);
      if (h[nh].exp)
        nh++;
      else
        ck_assert_msg (!h[nh].conn, "seed %u step %ld: open failed",
                       seed, step);
    }
    else {
      i = (r / 3) % nh;
      if (h[i].conn)
        throttle_export_close (h[i].exp);
      else
        throttle_export_put (h[i].exp);
      h[i] = h[--nh];
    }
    /* The invariant. */
    {
      struct throttle_export *of[NAMES] = { NULL };
      size_t conns[NAMES] = { 0 }, expect = 1;

      for (i = 0; i < nh; i++) {
        n = h[i].name;
        ck_assert_msg (of[n] == NULL || of[n] == h[i].exp,
                       "seed %u step %ld: two budgets for \"%s\"",
                       seed, step, names[n]);
        of[n] = h[i].exp;
        conns[n] += h[i].conn;
      }
      for (n = 0; n < NAMES; n++) {
        struct throttle_export *now = peek (names[n]);

        if (n > 0 && of[n])
          expect++;
        ck_assert_msg (n == 0 ? now != NULL : now == of[n],
                       "seed %u step %ld: \"%s\" has budget %p, held %p",
                       seed, step, names[n], (void *) now, (void *) of[n]);
        ck_assert_msg (now == NULL || now->conns == conns[n],
                       "seed %u step %ld: \"%s\": %zu connections, "
                       "counted %zu", seed, step, names[n], now->conns,
                       conns[n]);
      }
      ck_assert_msg (throttle_export_count () == expect,
                     "seed %u step %ld: %zu budgets, expected %zu",
                     seed, step, throttle_export_count (), expect);
    }
  }
  while (nh > 0) {
    if (h[nh - 1].conn)
      throttle_export_close (h[nh - 1].exp);
    else
      throttle_export_put (h[nh - 1].exp);
    nh--;
  }
  ck_assert_uint_eq (throttle_export_count (), 1);
  ck_assert_int_eq (feature_live, 1);
}
END_TEST

/* Threads opening and closing the same names at once: each sees one
 * budget per name while it holds it, and nothing is left after.
 */
static void *
churn (void *arg)
{
  static const char *names[] = { "a", "b", "a" };
  unsigned rs = (unsigned) (uintptr_t) arg;
  int i;

  for (i = 0; i < 20000; i++) {
    const char *name = names[rand_r (&rs) % 3];
    struct throttle_export *x = throttle_export_open (name);
    struct throttle_export *y = throttle_export_open (name);

    ck_assert_ptr_eq (x, y);
    ck_assert_str_eq (x->name, name);
    throttle_export_close (y);
    throttle_export_close (x);
  }
  return NULL;
}

/* The state attached to a budget is made with it, at its capacity, and
 * a budget whose state cannot be made is refused.
 */
START_TEST (test_feature)
{
  struct throttle_export *a = throttle_export_open ("a");

  ck_assert_ptr_nonnull (a);
  ck_assert_int_eq (feature_live, 2);
  ck_assert_int_eq (*(long *) a->state[feature_slot], 1 << 20);
  feature_fails = true;
  errno = 0;
  ck_assert_ptr_null (throttle_export_open ("b"));
  ck_assert_int_eq (errno, ENOMEM);
  ck_assert_ptr_eq (throttle_export_open ("a"), a);   /* made already */
  feature_fails = false;
  ck_assert_int_eq (feature_live, 2);
  ck_assert_ptr_null (peek ("b"));
  throttle_export_close (a);
  throttle_export_close (a);
  ck_assert_int_eq (feature_live, 1);
}
END_TEST

START_TEST (test_threads)
{
  pthread_t t[4];
  uintptr_t i;

  for (i = 0; i < 4; i++)
    ck_assert_int_eq (pthread_create (&t[i], NULL, churn, (void *) (i + 1)),
                      0);
  for (i = 0; i < 4; i++)
    pthread_join (t[i], NULL);
  ck_assert_uint_eq (throttle_export_count (), 1);
  ck_assert_int_eq (feature_live, 1);
}
END_TEST

Suite *
throttle_test_suite (void)
{
  Suite *s = suite_create ("export");
  TCase *tc = tcase_create ("core");

  tcase_add_checked_fixture (tc, setup, teardown);
  tcase_set_timeout (tc, 120);
  tcase_add_test (tc, test_default);
  tcase_add_test (tc, test_named_lifetime);
  tcase_add_test (tc, test_order);
  tcase_add_test (tc, test_random);
  tcase_add_test (tc, test_feature);
  tcase_add_test (tc, test_threads);
  suite_add_tcase (s, tc);
  return s;
}
