# tests/gpu/layer_bench, the benchmark tests/gpu/check.sh runs on the GPU
# (each layer against cuBLAS and cuDNN, whole models): built here, run on
# emu and its cuBLAS and cuDNN symbols resolved (tests/gpu/layer_bench.sh).
if HAVE_CUDA
check_PROGRAMS += tests/gpu/layer_bench
TESTS += tests/gpu/layer_bench.sh
endif
EXTRA_DIST += tests/gpu/layer_bench.sh
tests_gpu_layer_bench_SOURCES = tests/gpu/layer_bench.c tests/gpu/vendor.c tests/gpu/vendor.h tests/modelbuild.c \
	tests/modelbuild.h
tests_gpu_layer_bench_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_layer_bench_LDADD = libdlcc_core.la libdlcrt.la $(CJSON_LIBS) $(CUDA_LIBS) -ldl -lm
