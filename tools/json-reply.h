/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-ctl and throttle-load: the control socket's replies (one
 * JSON object a line), read with json-c.  Strictly: a server that
 * answers something else is reported, not half understood.  The
 * members are taken by type, so a caller never reads a number from a
 * string or a name from a number.
 */

#ifndef JSON_REPLY_H
#define JSON_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

/* Parse TEXT, which must hold exactly one JSON object (blanks around
 * it are allowed).  Returns it, for the caller to drop with
 * json_object_put, or NULL with ERR completing "the reply is ...":
 * "not JSON (WHAT at byte N)" or "not a JSON object".
 */
extern json_object *reply_parse (const char *text, char *err, size_t errlen);

/* The member KEY of OBJ if it is of TYPE, else NULL (OBJ not an
 * object, no such member, or another type).  OBJ keeps it: no
 * reference is taken.
 */
extern json_object *reply_member (json_object *obj, const char *key,
                                  json_type type);

/* The member KEY of OBJ as a non-negative integer.  Returns false if
 * it is missing or is not one (a fraction, a negative number, another
 * type).
 */
extern bool reply_uint (json_object *obj, const char *key, uint64_t *out);

/* The member KEY of OBJ, a string without a NUL in it, or NULL.  OBJ
 * keeps it.
 */
extern const char *reply_string (json_object *obj, const char *key);

/* The member KEY of OBJ, true or false, or DEF if it is not a boolean. */
extern bool reply_bool (json_object *obj, const char *key, bool def);

#endif /* JSON_REPLY_H */
