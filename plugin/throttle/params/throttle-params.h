/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the parameters, as one table.
 *
 * The core and each feature (struct throttle_feature's params) list
 * their throttle-* parameters as rows, beside their help text: the
 * key, the kind of value, where it is stored, its bounds or words, and
 * why a bad one is refused.  One function parses
 * every row, so every bad value gets the same one error line, ours,
 * which names the parameter and its value as written: "KEY=VALUE: "
 * followed by what is wrong or what the parameter expects.  nbdkit's
 * own parsers, which log a line of their own naming no parameter, are
 * not called.  What a value means beside another's is judged in
 * .config_complete, by the feature that reads both.
 *
 * String values are kept as given: nbdkit keeps them for the server's
 * life.
 */

#ifndef THROTTLE_PARAMS_H
#define THROTTLE_PARAMS_H

#include <stdint.h>

enum throttle_param_kind {
  /* uint64_t (or int64_t: the same bits below 2^63), in
   * nbdkit_parse_size's grammar (lib/throttle-size.h), from min to
   * max, else why; or words[0], if words is set, for 0.
   */
  THROTTLE_PARAM_SIZE,
  /* unsigned, decimal digits only (no sign, space or base prefix, which
   * strtoul would take), from min to max: else "expected a whole number
   * from MIN to MAX" and why, if set, after it.
   */
  THROTTLE_PARAM_NUMBER,
  /* double: seconds, in the grammar of every duration the filter and
   * the tools read (lib/throttle-duration.h: seconds, or with a unit
   * s, ms, us, ns; nbdkit 1.32 has no nbdkit_parse_delay), from min to
   * max nanoseconds (THROTTLE_PARAM_S in a second), else why.
   */
  THROTTLE_PARAM_SECONDS,
  /* bool, in nbdkit_parse_bool's words. */
  THROTTLE_PARAM_BOOL,
  /* int, or an enum listed in the same order: the index of the value
   * in words, else why.
   */
  THROTTLE_PARAM_WORD,
  /* const char *, not empty: else "empty value: " and why. */
  THROTTLE_PARAM_STRING,
  /* char *, the path of a file, neither empty nor ending in '/' (else
   * why), made absolute: nbdkit changes to / when it forks.
   */
  THROTTLE_PARAM_FILE,
  /* parse does it all: 0, or -1 after the one error line. */
  THROTTLE_PARAM_OWN,
};

#define THROTTLE_PARAM_S INT64_C(1000000000)

/* A table is an array of rows ending with one whose key is NULL. */
struct throttle_param {
  const char *key;
  enum throttle_param_kind kind;
  void *out;                    /* where the value goes: the kind's type */
  /* If set, gets the value as written, for the messages that name it
   * later: an error echoes a value as written, not as parsed.
   */
  const char **text;
  int64_t min, max;
  const char *const *words;     /* NULL-terminated */
  const char *why;
  int (*parse) (const char *key, const char *value);
};

/* .config for a key starting "throttle-": refuses a key given before
 * (the first value may be the one meant) and one that no table in
 * 'tables' (the core's, then each feature's; NULL-terminated) has (a
 * typo must not reach the plugin); else parses the value into its row.
 * 0, or -1 after the one error line.
 */
extern int throttle_params_config (const struct throttle_param *const *tables,
                                   const char *key, const char *value);

/* key's value as written, NULL if it was not given: for a default
 * that depends on which parameters were given.  From .config on.
 */
extern const char *throttle_params_given (const char *key);

#endif /* THROTTLE_PARAMS_H */
