/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the parameters, as one table (see
 * throttle-params.h).
 */

#include <config.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include <nbdkit-filter.h>

#include "throttle-duration.h"
#include "throttle-params.h"
#include "throttle-size.h"

/* The keys seen so far, with their values (nbdkit keeps both for the
 * server's life).  More than there are keys: an unknown one stops
 * nbdkit at once.
 */
#define MAX_KEYS 64
static struct { const char *key, *value; } seen[MAX_KEYS];
static size_t nr_seen;

const char *
throttle_params_given (const char *key)
{
  size_t i;

  for (i = 0; i < nr_seen; i++)
    if (strcmp (seen[i].key, key) == 0)
      return seen[i].value;
  return NULL;
}

/* Digits only (throttle_size_parse also takes blanks, a sign and a
 * suffix): 0 if value is a number from min to max.
 */
static int
parse_number (const char *value, int64_t min, int64_t max, unsigned *out)
{
  const char *why, *where;
  int64_t n;

  if (value[strspn (value, "0123456789")] != '\0' ||
      throttle_size_parse (value, &n, &why, &where) == -1 ||
      n < min || n > max)
    return -1;
  *out = n;
  return 0;
}

/* nbdkit_parse_bool's words (nbdkit 1.32 to 1.44), false then true:
 * 0 if value is one.
 */
static int
parse_bool (const char *value, bool *out)
{
  static const char *const words[] = {
    "0", "1", "false", "true", "f", "t", "no", "yes", "n", "y", "off", "on",
    NULL
  };
  size_t i;

  for (i = 0; words[i]; i++)
    if (strcasecmp (value, words[i]) == 0) {
      *out = i % 2;
      return 0;
    }
  return -1;
}

/* The value into p's storage: 0, or -1 after the one error line. */
static int
parse (const struct throttle_param *p, const char *value)
{
  const char *key = p->key, *why, *where;
  size_t n = strlen (value);
  int64_t size;
  uint64_t ns;
  int i;

  switch (p->kind) {
  case THROTTLE_PARAM_SIZE:
    if (p->words && strcmp (value, p->words[0]) == 0) {
      *(uint64_t *) p->out = 0;
      return 0;
    }
    if (throttle_size_parse (value, &size, &why, &where) == -1) {
      if (where != value)
        nbdkit_error ("%s=%s: not a size (%s '%s')", key, value, why, where);
      else
        nbdkit_error ("%s=%s: not a size (%s)", key, value, why);
      return -1;
    }
    if (size < p->min || size > p->max)
      break;
    *(uint64_t *) p->out = size;
    return 0;
  case THROTTLE_PARAM_NUMBER:
    if (parse_number (value, p->min, p->max, p->out) == 0)
      return 0;
    nbdkit_error ("%s=%s: expected a whole number from %" PRId64 " to %"
                  PRId64 "%s", key, value, p->min, p->max,
                  p->why ? p->why : "");
    return -1;
  case THROTTLE_PARAM_SECONDS:
    if (throttle_parse_duration (value, &ns) == -1 ||
        ns < (uint64_t) p->min || ns > (uint64_t) p->max)
      break;
    *(double *) p->out = ns / 1e9;
    return 0;
  case THROTTLE_PARAM_BOOL:
    if (parse_bool (value, p->out) == 0)
      return 0;
    nbdkit_error ("%s=%s: expected a boolean: true or false (also on/off, "
                  "yes/no, t/f, y/n, 1/0)", key, value);
    return -1;
  case THROTTLE_PARAM_WORD:
    for (i = 0; p->words[i]; i++)
      if (strcmp (value, p->words[i]) == 0) {
        *(int *) p->out = i;
        return 0;
      }
    break;
  case THROTTLE_PARAM_STRING:
    if (n == 0) {
      nbdkit_error ("%s=: empty value: %s", key, p->why);
      return -1;
    }
    *(const char **) p->out = value;
    return 0;
  case THROTTLE_PARAM_FILE:
    if (n == 0 || value[n - 1] == '/')
      break;
    *(char **) p->out = nbdkit_absolute_path (value);
    return *(char **) p->out ? 0 : -1;
  case THROTTLE_PARAM_OWN:
    return p->parse (key, value);
  }
  nbdkit_error ("%s=%s: %s", key, value, p->why);
  return -1;
}

/* key's row in table, or NULL. */
static const struct throttle_param *
find (const struct throttle_param *table, const char *key)
{
  for (; table && table->key; table++)
    if (strcmp (table->key, key) == 0)
      return table;
  return NULL;
}

int
throttle_params_config (const struct throttle_param *const *tables,
                        const char *key, const char *value)
{
  const struct throttle_param *p = NULL;
  const char *before = throttle_params_given (key);

  if (before) {
    nbdkit_error ("%s=%s: repeats %s=%s: give each parameter once",
                  key, value, key, before);
    return -1;
  }
  if (nr_seen < MAX_KEYS) {
    seen[nr_seen].key = key;
    seen[nr_seen++].value = value;
  }
  for (; p == NULL && *tables; tables++)
    p = find (*tables, key);
  if (p == NULL) {
    nbdkit_error ("%s=%s: unknown parameter: see nbdkit-throttle-filter(1)",
                  key, value);
    return -1;
  }
  if (parse (p, value) == -1)
    return -1;
  if (p->text)
    *p->text = value;
  return 0;
}
