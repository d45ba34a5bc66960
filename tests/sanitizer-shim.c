/* SPDX-License-Identifier: BSD-3-Clause */
/* Preloaded into nbdkit after the sanitizer runtime, in sanitizer
 * builds only (see nbdkit-sanitized.sh).  nbdkit itself is not built
 * with a sanitizer; these keep the reports about our code meaningful.
 */

#include <config.h>

#include <locale.h>
#include <stdlib.h>

/* nbdkit unloads the filter and plugins before it exits, and after
 * that LeakSanitizer can neither name their frames nor see their
 * globals, so memory they still point to would look leaked.
 */
int
dlclose (void *handle)
{
  (void) handle;
  return 0;
}

/* With a sanitizer runtime preloaded, a process linked with gnutls (as
 * nbdkit is) that once called strerror or printed %m hangs in exit:
 * p11-kit's destructor waits forever in freelocale.  The leak check
 * has run by then; the locale is freed by the exit anyway.
 */
void
freelocale (locale_t l)
{
  (void) l;
}

/* Commands nbdkit starts (--run, the sh plugin's scripts) would
 * inherit the preload, and an uninstrumented shell with the runtime
 * preloaded may crash or report on itself.  nbdkit is already loaded
 * by now, so the variable has done its work.
 */
static void __attribute__ ((constructor))
drop_preload (void)
{
  unsetenv ("LD_PRELOAD");
}
