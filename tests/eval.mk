# eval tests: the reference interpreter, parameter init, tensor files, weights
if HAVE_CHECK
check_PROGRAMS += tests/test_eval
TESTS += tests/test_eval
tests_test_eval_SOURCES = tests/test_eval.c
tests_test_eval_CFLAGS = $(TEST_CFLAGS)
tests_test_eval_LDADD = $(TEST_LIBS)

check_PROGRAMS += tests/test_tensorio
TESTS += tests/test_tensorio
tests_test_tensorio_SOURCES = tests/test_tensorio.c
tests_test_tensorio_CFLAGS = $(TEST_CFLAGS)
tests_test_tensorio_LDADD = $(TEST_LIBS)
endif
# torch.save files the tensor tests read (written by make.py with torch)
EXTRA_DIST += tests/torchfiles/make.py tests/torchfiles/fc.pt tests/torchfiles/ckpt.pt tests/torchfiles/views.pt \
	tests/torchfiles/whole.pt tests/torchfiles/complex.pt tests/torchfiles/legacy.pt tests/torchfiles/proto4.pt \
	tests/torchfiles/extras.pt tests/torchfiles/expand.pt
