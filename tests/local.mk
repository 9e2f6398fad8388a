# Check suites; each area keeps its own fragment.
TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
TEST_LIBS = libdlcc.la $(CHECK_LIBS) $(CJSON_LIBS) -lm
AM_TESTS_ENVIRONMENT = top_srcdir='$(top_srcdir)' top_builddir='$(top_builddir)'; export top_srcdir top_builddir;
include tests/ir.mk
include tests/frontend.mk
