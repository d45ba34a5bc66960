/* SPDX-License-Identifier: BSD-3-Clause */
/* The main () of every Check unit test: it runs the one suite the test
 * defines, with what the environment asks of Check (CK_FORK,
 * CK_RUN_CASE, CK_VERBOSITY, ...), and exits non-zero if a test
 * failed.  Include it once, in the test's own file. */

#ifndef THROTTLE_CHECK_MAIN_H
#define THROTTLE_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

/* The test's suite, built once, before any of its tests run; anything
 * the tests share that must exist before they fork is set up here. */
Suite *throttle_test_suite (void);

int
main (void)
{
  SRunner *sr = srunner_create (throttle_test_suite ());
  int failed;

  srunner_run_all (sr, CK_NORMAL);
  failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif /* THROTTLE_CHECK_MAIN_H */
