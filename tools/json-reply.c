/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-ctl and throttle-load: the control socket's replies, read
 * with json-c (see json-reply.h).
 */

#include <config.h>

#include <stdio.h>
#include <string.h>

#include "json-reply.h"

/* Deeper than any reply of the filter; bounds json-c's recursion. */
#define MAX_DEPTH 32

json_object *
reply_parse (const char *text, char *err, size_t errlen)
{
  json_tokener *tok = json_tokener_new_ex (MAX_DEPTH);
  size_t len = strlen (text), end;
  enum json_tokener_error e;
  json_object *v;

  if (tok == NULL) {
    snprintf (err, errlen, "not read (out of memory)");
    return NULL;
  }
  /* Strict: no trailing commas, no text after the value, UTF-8 only.
   * The terminating NUL goes in too, so that a number at the very end
   * is complete rather than awaiting more digits.
   */
  json_tokener_set_flags (tok, JSON_TOKENER_STRICT |
                          JSON_TOKENER_VALIDATE_UTF8);
  v = json_tokener_parse_ex (tok, text, len + 1);
  e = json_tokener_get_error (tok);
  end = json_tokener_get_parse_end (tok);
  json_tokener_free (tok);
  if (e != json_tokener_success) {
    json_object_put (v);
    snprintf (err, errlen, "not JSON (%s at byte %zu)",
              e == json_tokener_continue ? "unexpected end"
              : json_tokener_error_desc (e), end < len ? end : len);
    return NULL;
  }
  if (end < len && strspn (text + end, " \t\r\n") != len - end) {
    json_object_put (v);
    snprintf (err, errlen, "not JSON (text after the value at byte %zu)",
              end);
    return NULL;
  }
  if (!json_object_is_type (v, json_type_object)) {
    json_object_put (v);
    snprintf (err, errlen, "not a JSON object");
    return NULL;
  }
  return v;
}

json_object *
reply_member (json_object *obj, const char *key, json_type type)
{
  json_object *m;

  if (!json_object_object_get_ex (obj, key, &m) ||
      !json_object_is_type (m, type))
    return NULL;
  return m;
}

bool
reply_uint (json_object *obj, const char *key, uint64_t *out)
{
  json_object *m = reply_member (obj, key, json_type_int);

  /* json-c keeps an integer above INT64_MAX as unsigned:
   * json_object_get_int64 then says INT64_MAX, never a negative.
   */
  if (m == NULL || json_object_get_int64 (m) < 0)
    return false;
  *out = json_object_get_uint64 (m);
  return true;
}

const char *
reply_string (json_object *obj, const char *key)
{
  json_object *m = reply_member (obj, key, json_type_string);
  const char *s;

  if (m == NULL)
    return NULL;
  s = json_object_get_string (m);
  /* "\u0000" decodes to a NUL, which a C string cannot carry. */
  if (strlen (s) != (size_t) json_object_get_string_len (m))
    return NULL;
  return s;
}

bool
reply_bool (json_object *obj, const char *key, bool def)
{
  json_object *m = reply_member (obj, key, json_type_boolean);

  return m ? json_object_get_boolean (m) : def;
}
