# codegen: graph -> kernel IR -> CUDA C text and the launch plan.
libdlcc_core_la_SOURCES += \
	codegen/codegen.h \
	codegen/kernel.h codegen/kernel.c codegen/kshort.h codegen/attn.h \
	codegen/lower.h codegen/lower_kernels.c codegen/lower_gemm.c \
	codegen/lower_rnn.c \
	codegen/lower_window.c codegen/lower_move.c \
	codegen/lower_train.c \
	codegen/lower_rows.c \
	codegen/fuse_lower.c \
	codegen/conv_igemm.c \
	codegen/conv_depthwise.c \
	codegen/tc_gemm.c codegen/fma_gemm.c \
	codegen/attention.c \
	codegen/attention_grad.c \
	codegen/initgraph.c \
	codegen/gemm_batch.c \
	codegen/unroll.c \
	codegen/emit_cuda.c \
	codegen/emit_tc.c \
	codegen/plan_build.c \
	codegen/plan_cost.c \
	codegen/plan_print.c

# The AOT emitter (dlcc m.dl -o m.so): its own convenience library, so
# that only it is told where libdlcrt and plan.h live, in the build tree
# and once installed.
noinst_LTLIBRARIES += libdlaot.la
libdlaot_la_SOURCES = codegen/aot.c
libdlaot_la_CPPFLAGS = $(AM_CPPFLAGS) \
	-DDLCC_AOT_LIBDIR='"$(libdir)"' \
	-DDLCC_AOT_INCLUDEDIR='"$(includedir)/dlcrt"' \
	-DDLCC_AOT_SRC_INCLUDEDIR='"$(abs_top_srcdir)/runtime"'
libdlcc_core_la_LIBADD += libdlaot.la
