/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-ctl: a minimal JSON reader, enough for the control
 * socket's replies (one object a line).  Values form a tree of nodes;
 * the members of an object and the elements of an array are a list
 * through 'next'.
 */

#ifndef CTL_JSON_H
#define CTL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ctl_json_type {
  CTL_JSON_NULL, CTL_JSON_BOOL, CTL_JSON_NUMBER, CTL_JSON_STRING,
  CTL_JSON_ARRAY, CTL_JSON_OBJECT,
};

struct ctl_json {
  enum ctl_json_type type;
  char *key;                  /* the member's name, in an object */
  struct ctl_json *next;      /* the next member or element */
  struct ctl_json *child;     /* the first member or element */
  char *str;                  /* STRING: UTF-8, NUL-terminated */
  bool boolean;
  bool is_uint;               /* NUMBER: a non-negative integer ... */
  uint64_t uint;              /* ... that fits in 64 bits, exactly */
  double num;                 /* NUMBER: any */
};

/* Parse TEXT, which must hold exactly one JSON value (blanks around it
 * are allowed).  Returns the tree, to free with ctl_json_free, or NULL
 * with a message in ERR saying what was wrong and at which byte.
 */
extern struct ctl_json *ctl_json_parse (const char *text,
                                        char *err, size_t errlen);
extern void ctl_json_free (struct ctl_json *v);

/* The member KEY of OBJ, or NULL if OBJ is not an object or has none. */
extern const struct ctl_json *ctl_json_get (const struct ctl_json *obj,
                                            const char *key);

/* The member KEY of OBJ as a non-negative integer.  Returns false if
 * it is missing or is not one.
 */
extern bool ctl_json_get_uint (const struct ctl_json *obj, const char *key,
                               uint64_t *out);

#endif /* CTL_JSON_H */
