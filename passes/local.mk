# passes: the pass manager and one file per graph pass.
libdlcc_core_la_SOURCES += \
	passes/pass.h passes/passes.def \
	passes/pipeline.c \
	passes/rewrite.c \
	passes/fold.c \
	passes/simplify.c \
	passes/cse.c \
	passes/dce.c \
	passes/bnfold.c \
	passes/attention.c \
	passes/nhwc.c \
	passes/precision.c \
	passes/quantize.c \
	passes/recompute.c \
	passes/xent.c \
	passes/remat.c \
	passes/fuse.c \
	passes/autodiff.c passes/autodiff.h \
	passes/train_mode.c \
	passes/eval_mode.c \
	passes/loss.c passes/loss.h \
	passes/optim.c passes/optim.h \
	passes/stages.c passes/stages.h \
	passes/tensor_par.c passes/tensor_par.h \
	passes/memplan.c passes/memplan.h
