# Check suites; each area keeps its own fragment.
TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
TEST_LIBS = libdlcc_core.la libdlcrt.la $(CHECK_LIBS) $(CJSON_LIBS) -lm
AM_TESTS_ENVIRONMENT = top_srcdir='$(abs_top_srcdir)' top_builddir='$(abs_top_builddir)'; export top_srcdir top_builddir;
# Leaks inside NVIDIA's libraries are theirs (tests/lsan.supp says which).
AM_TESTS_ENVIRONMENT += LSAN_OPTIONS="suppressions=$(abs_top_srcdir)/tests/lsan.supp$${LSAN_OPTIONS:+:$$LSAN_OPTIONS}"; \
	export LSAN_OPTIONS;
EXTRA_DIST += tests/lsan.supp tests/check_quiet.h
include tests/ir.mk
include tests/shape.mk
include tests/frontend.mk
include tests/lower.mk
include tests/eval.mk
include tests/golden.mk
include tests/codegen.mk
include tests/emu.mk
include tests/mma.mk
include tests/runtime.mk
include tests/models.mk
include tests/memplan.mk
include tests/passes.mk
include tests/onnx.mk
include tests/aot.mk
include tests/fuse.mk
include tests/initgraph.mk
include tests/precision.mk
include tests/int8.mk
include tests/bool.mk
include tests/ops2.mk
include tests/gemm_batch.mk
include tests/round.mk
include tests/dtypes.mk
include tests/quantize.mk
include tests/bench.mk
include tests/usermodels.mk
include tests/calibrate.mk
include tests/qdq.mk
include tests/conv3d.mk
include tests/resize.mk
include tests/cost.mk
include tests/bounds.mk
include tests/names.mk
include tests/files.mk
include tests/limits.mk
include tests/fuzz.mk
include tests/tsan.mk
include tests/grad.mk
include tests/loss.mk
include tests/xent.mk
EXTRA_DIST += tests/loss_ref.py
include tests/tcgemm.mk
include tests/nhwc.mk
include tests/depthwise.mk
include tests/sass.mk
include tests/gpubench.mk
include tests/reduce.mk
include tests/attention.mk
include tests/engine.mk
include tests/pytorch.mk
include tests/dot.mk
include tests/hf_blocks.mk
include tests/optim.mk
include tests/tensor_par.mk
include tests/train_cli.mk
include tests/dist.mk
include tests/scaleout.mk
include tests/pipeline.mk
