if HAVE_CHECK
check_PROGRAMS += tests/test_golden
TESTS += tests/test_golden
tests_test_golden_SOURCES = tests/test_golden.c
tests_test_golden_CFLAGS = $(TEST_CFLAGS)
tests_test_golden_LDADD = $(TEST_LIBS)
endif
TESTS += tests/cli.sh
EXTRA_DIST += tests/cli.sh tests/clilib.sh

GOLDEN_EXAMPLES = mlp lenet resnet18 resnet50 mobilenetv2 lstm transformer
# Rewrites the golden IR from the current compiler: review the diff after.
update-golden: dlcc$(EXEEXT)
	cd $(srcdir) && for e in $(GOLDEN_EXAMPLES); do \
	  $(abs_builddir)/dlcc$(EXEEXT) examples/$$e.dl -O0 --emit=ir -o tests/golden/$$e.ir || exit 1; \
	done
.PHONY: update-golden
