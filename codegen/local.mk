# codegen: graph -> kernel IR -> CUDA C text and the launch plan.
libdlcc_la_SOURCES += \
	codegen/codegen.h \
	codegen/kernel.h codegen/kernel.c \
	codegen/lower_kernels.c \
	codegen/emit_cuda.c \
	codegen/plan_build.c \
	codegen/plan_print.c
