/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-ctl: the server's real-time mode (the "rt" member of the
 * stats and of the reply to "set rt"; see REAL-TIME PRIORITY in
 * nbdkit-throttle-design(1)).
 */

#include <config.h>

#include <stdio.h>
#include <string.h>

#include "ctl.h"

static const char *
str (json_object *obj, const char *key)
{
  const char *s = reply_string (obj, key);

  return s ? s : "?";
}

void
ctl_print_rt (json_object *reply)
{
  json_object *rt = reply_member (reply, "rt", json_type_object);
  json_object *off_in;

  if (rt == NULL)
    return;
  printf ("real-time %s (mode %s): %s",
          reply_bool (rt, "on", false) ? "on" : "off",
          str (rt, "mode"), str (rt, "why"));
  /* A whole number of seconds reads as an integer. */
  off_in = reply_member (rt, "off_in_s", json_type_double);
  if (off_in == NULL)
    off_in = reply_member (rt, "off_in_s", json_type_int);
  if (off_in)
    printf ("; off in %.1f s unless a kernel client connects",
            json_object_get_double (off_in));
  printf ("\n");
}
