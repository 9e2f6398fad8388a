# What keeps kernels inside their memory: index checks in the generated
# kernels on emu against ir_eval's messages, crafted plans (also resealed)
# against rt_plan_validate, the seal's hash and memory checks.
if HAVE_CHECK
check_PROGRAMS += tests/test_bounds
TESTS += tests/test_bounds
tests_test_bounds_SOURCES = tests/test_bounds.c tests/irjob.c tests/irjob.h tests/testutil.c tests/testutil.h
tests_test_bounds_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_bounds_CFLAGS = $(TEST_CFLAGS)
tests_test_bounds_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
