# Weight-only subgraphs computed once (codegen/initgraph.c, the plan's
# init steps): codegen, plan validation, the executor on emu before and
# after the weights change, a model.so with init steps (test_initgraph).
if HAVE_CHECK
check_PROGRAMS += tests/test_initgraph
TESTS += tests/test_initgraph
tests_test_initgraph_SOURCES = tests/test_initgraph.c
tests_test_initgraph_CFLAGS = $(TEST_CFLAGS)
tests_test_initgraph_LDADD = $(TEST_LIBS) -ldl
endif
