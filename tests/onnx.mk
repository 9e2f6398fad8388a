# ONNX import: the importer's own suite (models built with protobuf-c in
# the test), the ONNX backend node tests of libonnx-testdata on the
# reference interpreter and, for a subset, on emu, dlcc's command line on
# .onnx files (both skipped when the data is not installed), and whole
# models against onnxruntime (skipped without python3 with onnx,
# onnxruntime and numpy).
if HAVE_ONNX
if HAVE_CHECK
check_PROGRAMS += tests/test_onnx
TESTS += tests/test_onnx
tests_test_onnx_SOURCES = tests/test_onnx.c tests/onnxbuild.c tests/onnxbuild.h
tests_test_onnx_CFLAGS = $(TEST_CFLAGS)
tests_test_onnx_LDADD = $(TEST_LIBS)
# Bad input: refused with a located message, nothing imported.
check_PROGRAMS += tests/test_onnx_bad
TESTS += tests/test_onnx_bad
tests_test_onnx_bad_SOURCES = tests/test_onnx_bad.c tests/onnxbuild.c tests/onnxbuild.h
tests_test_onnx_bad_CFLAGS = $(TEST_CFLAGS)
tests_test_onnx_bad_LDADD = $(TEST_LIBS)
# onnxruntime's transformer-optimizer ops against its values.
check_PROGRAMS += tests/test_onnx_contrib
TESTS += tests/test_onnx_contrib
tests_test_onnx_contrib_SOURCES = tests/test_onnx_contrib.c tests/onnxbuild.c tests/onnxbuild.h
tests_test_onnx_contrib_CFLAGS = $(TEST_CFLAGS)
tests_test_onnx_contrib_LDADD = $(TEST_LIBS)
# onnxruntime's attention ops with a KV cache against its values.
check_PROGRAMS += tests/test_onnx_kv_cache
TESTS += tests/test_onnx_kv_cache
tests_test_onnx_kv_cache_SOURCES = tests/test_onnx_kv_cache.c tests/onnxbuild.c tests/onnxbuild.h
tests_test_onnx_kv_cache_CFLAGS = $(TEST_CFLAGS)
tests_test_onnx_kv_cache_LDADD = $(TEST_LIBS)
# The ML domain (trees, linear models, scalers) against onnxruntime's values.
check_PROGRAMS += tests/test_onnx_ml
TESTS += tests/test_onnx_ml
tests_test_onnx_ml_SOURCES = tests/test_onnx_ml.c tests/onnxbuild.c tests/onnxbuild.h
tests_test_onnx_ml_CFLAGS = $(TEST_CFLAGS)
tests_test_onnx_ml_LDADD = $(TEST_LIBS)
# DFT, STFT, Col2Im, MaxUnpool against direct loops, on emu too.
check_PROGRAMS += tests/test_onnx_signal
TESTS += tests/test_onnx_signal
tests_test_onnx_signal_SOURCES = tests/test_onnx_signal.c tests/onnxbuild.c tests/onnxbuild.h tests/testutil.c \
	tests/testutil.h
tests_test_onnx_signal_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_onnx_signal_CFLAGS = $(TEST_CFLAGS)
tests_test_onnx_signal_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
# NonZero and Compress of run-time values: outputs of run-time length.
check_PROGRAMS += tests/test_onnx_lengths
TESTS += tests/test_onnx_lengths
tests_test_onnx_lengths_SOURCES = tests/test_onnx_lengths.c tests/onnxbuild.c tests/onnxbuild.h tests/testutil.c \
	tests/testutil.h
tests_test_onnx_lengths_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_onnx_lengths_CFLAGS = $(TEST_CFLAGS)
tests_test_onnx_lengths_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
# If decided at run time: a refused branch checked, on emu too.
check_PROGRAMS += tests/test_onnx_if
TESTS += tests/test_onnx_if
tests_test_onnx_if_SOURCES = tests/test_onnx_if.c tests/onnxbuild.c tests/onnxbuild.h tests/testutil.c tests/testutil.h
tests_test_onnx_if_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_onnx_if_CFLAGS = $(TEST_CFLAGS)
tests_test_onnx_if_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
# Sequences and optionals resolved at import, and what is refused.
check_PROGRAMS += tests/test_onnx_seq
TESTS += tests/test_onnx_seq
tests_test_onnx_seq_SOURCES = tests/test_onnx_seq.c tests/onnxbuild.c tests/onnxbuild.h
tests_test_onnx_seq_CFLAGS = $(TEST_CFLAGS)
tests_test_onnx_seq_LDADD = $(TEST_LIBS)
endif
# tests/onnx_node.sh runs test_onnx_node on the newest node tests a
# python3's onnx can generate (into tests/onnx-node-latest/), else on
# libonnx-testdata's.
check_PROGRAMS += tests/test_onnx_node
TESTS += tests/onnx_node.sh
tests_test_onnx_node_SOURCES = tests/test_onnx_node.c
tests_test_onnx_node_LDADD = libdlcc_core.la libdlcrt.la $(CJSON_LIBS) -lm
TESTS += tests/onnx_cli.sh tests/onnx_models.sh tests/onnx_silero.sh
endif
EXTRA_DIST += tests/onnx_node.sh tests/onnx/node_tests.py tests/onnx_cli.sh tests/onnx_models.sh tests/onnx/models.py \
	tests/onnx/exporters/exporters.py tests/onnx/tree_ensembles.py tests/onnx/sklearn_models.py tests/onnx/ort_optimized.py \
	tests/onnx_silero.sh tests/onnx/silero/input.npy tests/onnx/silero/state.npy tests/onnx/silero/sr.npy \
	tests/onnx/silero/want_output.npy tests/onnx/silero/want_stateN.npy
clean-local: clean-onnx-node-latest
clean-onnx-node-latest:
	rm -rf tests/onnx-node-latest
.PHONY: clean-onnx-node-latest
