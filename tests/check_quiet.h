/* <check.h> for our suites, which include this instead.
 *
 * Check records each passing assertion with a write(2) to its message
 * file (_mark_point), so that a crash can name the last one passed.  Our
 * suites assert element by element over whole tensors: that was about
 * 800,000 writes a minute, a third of test_train's time.  A passing
 * assertion records nothing here; a failing one reports as Check's does.
 * A crash names the test (and, under the sanitizers, the stack);
 * mark_point() still records a place where one is wanted. */
#ifndef DLCC_TESTS_CHECK_QUIET_H
#define DLCC_TESTS_CHECK_QUIET_H

#include <check.h>

#undef ck_assert_msg
#define ck_assert_msg(expr, ...) \
  ((expr) ? (void)0 : _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed", ##__VA_ARGS__))

#endif
