# Losses (passes/loss.c, docs/training.md): every loss against NumPy's
# numbers from PyTorch's formulas (tests/loss_ref.py writes
# tests/loss_expected.h), gradients by finite differences, a step with
# every loss on emu against ref, dlcc --loss's graph and the errors.
if HAVE_CHECK
check_PROGRAMS += tests/test_loss
TESTS += tests/test_loss
tests_test_loss_SOURCES = tests/test_loss.c tests/loss_expected.h tests/testutil.c tests/testutil.h
tests_test_loss_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_loss_CFLAGS = $(TEST_CFLAGS)
tests_test_loss_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
TESTS += tests/loss_cli.sh
EXTRA_DIST += tests/loss_cli.sh
