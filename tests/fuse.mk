# Fusion and the kernel-IR passes: groups, their IR text and verifier
# rules, fused kernels through NVRTC and on emu against ir_eval, unrolling
# and float4, the launch targets of the examples.  `make bench` prints the
# launch counts of every example (tests/bench/launches.sh).
if HAVE_CHECK
check_PROGRAMS += tests/test_fuse
TESTS += tests/test_fuse
tests_test_fuse_SOURCES = tests/test_fuse.c tests/testutil.c tests/testutil.h tests/randgraph.c tests/randgraph.h
tests_test_fuse_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_fuse_CFLAGS = $(TEST_CFLAGS)
tests_test_fuse_LDADD = $(TEST_LIBS) $(CUDA_LIBS)
endif
BENCHES += tests/bench/launches.sh
EXTRA_DIST += tests/bench/launches.sh
BENCHES += tests/bench/train_launches.sh
EXTRA_DIST += tests/bench/train_launches.sh tests/bench/train/mlp.dl tests/bench/train/lenet.dl \
	tests/bench/train/bn_cnn.dl tests/bench/train/lstm.dl tests/bench/train/gru.dl
