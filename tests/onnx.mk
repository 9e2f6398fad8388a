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
endif
check_PROGRAMS += tests/test_onnx_node
TESTS += tests/test_onnx_node
tests_test_onnx_node_SOURCES = tests/test_onnx_node.c
tests_test_onnx_node_LDADD = libdlcc_core.la libdlcrt.la $(CJSON_LIBS) -lm
TESTS += tests/onnx_cli.sh tests/onnx_models.sh
endif
EXTRA_DIST += tests/onnx_cli.sh tests/onnx_models.sh tests/onnx/models.py
