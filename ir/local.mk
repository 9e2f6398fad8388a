libdlcc_core_la_SOURCES += \
	ir/arena.c ir/arena.h \
	ir/diag.c ir/diag.h \
	ir/ir.c ir/ir.h ir/ops.def \
	ir/guard.c \
	ir/loop.c \
	ir/bounds.c \
	ir/shape.c \
	ir/verify.c \
	ir/print.c \
	ir/parse.c \
	ir/dot.c \
	ir/names.c ir/names.h \
	ir/tensor.c \
	ir/eval.c ir/eval.h ir/eval_impl.h \
	ir/eval_elem.c ir/eval_reduce.c ir/eval_conv.c ir/eval_data.c \
	ir/train_ops.c \
	ir/narrow.c \
	ir/grad.c ir/grad.h \
	ir/loss.c ir/loss.h \
	ir/indices.c \
	ir/cost.c
libdlcc_core_la_SOURCES += ir/init.c
