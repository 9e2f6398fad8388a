# Untrusted files (tests/test_files.c): ONNX external data, .npy and
# safetensors that are not what they claim, tables read in linear time
# (`make bench` has the figures: tests/bench/files.c), the ONNX importer
# under failing allocations; and dlcc run on inputs too large for the
# machine (tests/files_cli.sh).
if HAVE_CHECK
check_PROGRAMS += tests/test_files
TESTS += tests/test_files
tests_test_files_SOURCES = tests/test_files.c
if HAVE_ONNX
tests_test_files_SOURCES += tests/onnxbuild.c tests/onnxbuild.h
endif
tests_test_files_CFLAGS = $(TEST_CFLAGS)
tests_test_files_LDADD = $(TEST_LIBS)
endif
TESTS += tests/files_cli.sh
EXTRA_DIST += tests/files_cli.sh
EXTRA_PROGRAMS += tests/bench/files_bench
tests_bench_files_bench_SOURCES = tests/bench/files.c
tests_bench_files_bench_LDADD = libdlcc_core.la libdlcrt.la $(CJSON_LIBS) -lm
BENCH_DEPS += tests/bench/files_bench
BENCHES += tests/bench/files.sh
CLEANFILES += tests/bench/files_bench
EXTRA_DIST += tests/bench/files.sh
