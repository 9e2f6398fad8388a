# runtime tests: plan validation, the missing driver, NVRTC and its cache,
# the executor on a fake device, cuda.c over a fake libcuda.so.1.
if HAVE_CHECK
check_PROGRAMS += tests/test_runtime
TESTS += tests/test_runtime
tests_test_runtime_SOURCES = tests/test_runtime.c
tests_test_runtime_CFLAGS = $(TEST_CFLAGS)
tests_test_runtime_LDADD = $(TEST_LIBS) -ldl
if HAVE_CUDA
# Built as a real shared object (-rpath) for cuda.c to dlopen.
check_LTLIBRARIES += tests/libfakecuda.la
tests_libfakecuda_la_SOURCES = tests/fake_cuda.c
tests_libfakecuda_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_libfakecuda_la_LDFLAGS = -module -avoid-version -shared -rpath $(abs_builddir)/tests
endif
endif

# libdlcrt on hand-built plans (cuBLAS in every dtype and layout, kernel
# argument sizes, big dynamic shared memory, the tensor-core instructions
# against the emu, a faulting kernel).  Needs
# no Check: tests/gpu/check.sh builds and runs it on the GPU machine
# (`make tests/gpu/rt_check`); here it checks itself on emu.
check_PROGRAMS += tests/gpu/rt_check
TESTS += tests/gpu/rt_check.sh
EXTRA_DIST += tests/gpu/rt_check.sh
# (emit_tc.c: the tensor-core prelude text; per-target flags keep its
# object apart from libdlcc_core's.)
tests_gpu_rt_check_SOURCES = tests/gpu/rt_check.c tests/mma_kernels.h codegen/emit_tc.c
tests_gpu_rt_check_CPPFLAGS = $(AM_CPPFLAGS)
tests_gpu_rt_check_LDADD = libdlcrt.la -lm
