# Optimizers and a step's updates on the devices (docs/training.md): 3
# steps of SGD, Adam and AdamW on an MLP and a CNN with batch norm on ref
# and emu against the NumPy trajectories of tests/train_ref.py (its output
# committed as tests/train_ref.h), emu's weights read back after N runs
# against N interpreter steps, the plan's update steps.
if HAVE_CHECK
check_PROGRAMS += tests/test_optim
TESTS += tests/test_optim
tests_test_optim_SOURCES = tests/test_optim.c tests/train_ref.h tests/testutil.c tests/testutil.h
tests_test_optim_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_optim_CFLAGS = $(TEST_CFLAGS)
tests_test_optim_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
EXTRA_DIST += tests/train_ref.py
