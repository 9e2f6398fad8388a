# Model names as data: the escapes of ir/names.c, and hostile names fed
# through ONNX, IR text and the language into model.so, model.h (compiled
# into a host program) and dlcc run --output-dir.
if HAVE_CHECK
check_PROGRAMS += tests/test_names
TESTS += tests/test_names
tests_test_names_SOURCES = tests/test_names.c
if HAVE_ONNX
tests_test_names_SOURCES += tests/onnxbuild.c tests/onnxbuild.h
endif
tests_test_names_CFLAGS = $(TEST_CFLAGS)
tests_test_names_LDADD = $(TEST_LIBS)
endif
