# IR tests: text printer and parser, DOT writer, verifier.
if HAVE_CHECK
check_PROGRAMS += tests/test_irtext
TESTS += tests/test_irtext
tests_test_irtext_SOURCES = tests/test_irtext.c
tests_test_irtext_CFLAGS = $(TEST_CFLAGS)
tests_test_irtext_LDADD = $(TEST_LIBS)
endif
