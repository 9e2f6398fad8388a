# The models' kernels in SASS (tests/sass_check.sh): ResNet-50 at batch 64
# and the transformer in f16, bf16 and int8, the attention kernel
# (tests/sass_attention.dl) and its backward (tests/sass_attention_grad.ir)
# in f16 and bf16, depthwise convolutions and
# conv-transposes (tests/sass_convs.dl) in f16, bf16 and int8, through
# NVRTC and cuobjdump:
# tensor-core instructions, no spills, registers and shared memory within
# an SM; tests/sass_kernels compiles them.  Skipped without cuobjdump.
check_PROGRAMS += tests/sass_kernels
TESTS += tests/sass_check.sh
EXTRA_DIST += tests/sass_check.sh tests/find_cuobjdump.sh tests/sass_attention.dl tests/sass_attention_grad.ir tests/sass_convs.dl
tests_sass_kernels_SOURCES = tests/sass_kernels.c tests/modelbuild.c tests/modelbuild.h
tests_sass_kernels_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_sass_kernels_LDADD = libdlcc_core.la libdlcrt.la $(CJSON_LIBS) $(CUDA_LIBS) -lm
