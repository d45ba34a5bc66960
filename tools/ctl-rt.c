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
str (const struct ctl_json *obj, const char *key)
{
  const struct ctl_json *v = ctl_json_get (obj, key);

  return v && v->type == CTL_JSON_STRING ? v->str : "?";
}

void
ctl_print_rt (const struct ctl_json *reply)
{
  const struct ctl_json *rt = ctl_json_get (reply, "rt");
  const struct ctl_json *on, *off_in;

  if (rt == NULL || rt->type != CTL_JSON_OBJECT)
    return;
  on = ctl_json_get (rt, "on");
  off_in = ctl_json_get (rt, "off_in_s");
  printf ("real-time %s (mode %s): %s",
          on && on->type == CTL_JSON_BOOL && on->boolean ? "on" : "off",
          str (rt, "mode"), str (rt, "why"));
  if (off_in && off_in->type == CTL_JSON_NUMBER)
    printf ("; off in %.1f s unless %s", off_in->num,
            "a kernel client connects or memory pressure recurs");
  printf ("\n");
}
