# The cost model: every op's FLOPs and minimum bytes against hand
# formulas, fused groups, each kind of plan step, the examples' plans
# against their nodes and ResNet-18/50 against the published counts,
# the --emit=plan and --stats text (docs/cost.md).
if HAVE_CHECK
check_PROGRAMS += tests/test_cost
TESTS += tests/test_cost
tests_test_cost_SOURCES = tests/test_cost.c tests/irjob.c tests/irjob.h tests/randgraph.c tests/randgraph.h
tests_test_cost_CFLAGS = $(TEST_CFLAGS)
tests_test_cost_LDADD = $(TEST_LIBS)
endif
