libdlcc_la_SOURCES += \
	ir/arena.c ir/arena.h \
	ir/diag.c ir/diag.h \
	ir/ir.c ir/ir.h ir/ops.def
