# Reductions and normalizations across threads, vectorized maps: every
# kernel on emu against ir_eval in f32, f16 and bf16, through NVRTC for
# sm_90, and the kernels' text (tests/test_reduce.c).
if HAVE_CHECK
check_PROGRAMS += tests/test_reduce
TESTS += tests/test_reduce
tests_test_reduce_SOURCES = tests/test_reduce.c tests/testutil.c tests/testutil.h
tests_test_reduce_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_reduce_CFLAGS = $(TEST_CFLAGS)
tests_test_reduce_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
# The memory-bound kernels' GB/s against the copy bandwidth on a GPU
# (tests/gpu/check.sh runs it; make check only builds it, so that it
# keeps compiling).
check_PROGRAMS += tests/gpu/bw_bench
tests_gpu_bw_bench_SOURCES = tests/gpu/bw_bench.c
tests_gpu_bw_bench_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_gpu_bw_bench_LDADD = libdlcc_core.la libdlcrt.la $(CJSON_LIBS) $(CUDA_LIBS) -ldl -lm
