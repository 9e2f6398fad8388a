# The memory planner: the solver on hand-made and generated problems, the
# plan builder's liveness and in-place rule, every example planned and run
# on emu, `dlcc memplan FILE.csv`.  The benchmark is for `make bench`.
if HAVE_CHECK
check_PROGRAMS += tests/test_memplan
TESTS += tests/test_memplan
tests_test_memplan_SOURCES = tests/test_memplan.c tests/testutil.c tests/testutil.h tests/bench/memplan.h driver/memplan.c
tests_test_memplan_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_memplan_CFLAGS = $(TEST_CFLAGS)
tests_test_memplan_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
EXTRA_PROGRAMS += tests/bench/memplan_bench
tests_bench_memplan_bench_SOURCES = tests/bench/memplan.c tests/bench/memplan.h
tests_bench_memplan_bench_LDADD = libdlcc_core.la $(CJSON_LIBS) -lm
BENCH_DEPS += tests/bench/memplan_bench dlcc
BENCHES += tests/bench/memplan.sh
CLEANFILES += tests/bench/memplan_bench
EXTRA_DIST += tests/memplan tests/bench/memplan.sh
