# The passes: numbers (-O0 against -O1/-O2 on every example and on random
# graphs) and IR-in/IR-out golden tests per pass (tests/golden/passes).
if HAVE_CHECK
check_PROGRAMS += tests/test_passes
TESTS += tests/test_passes
tests_test_passes_SOURCES = tests/test_passes.c tests/randgraph.c tests/randgraph.h
tests_test_passes_CFLAGS = $(TEST_CFLAGS)
tests_test_passes_LDADD = $(TEST_LIBS)
endif
TESTS += tests/irtest.sh
EXTRA_DIST += tests/irtest.sh

# Thousands of random graphs instead of a few hundred.
check-long: tests/test_passes$(EXEEXT)
	RANDGRAPH_ITERS=$${RANDGRAPH_ITERS:-5000} top_srcdir='$(abs_top_srcdir)' tests/test_passes$(EXEEXT)
# Rewrites tests/golden/passes/*.expected from the current compiler.
update-golden-passes: dlcc$(EXEEXT)
	IRTEST_UPDATE=1 top_srcdir='$(abs_top_srcdir)' top_builddir='$(abs_top_builddir)' $(SHELL) $(srcdir)/tests/irtest.sh
.PHONY: check-long update-golden-passes
