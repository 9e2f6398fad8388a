# The scanner and parser are generated; their code is not ours, so it is
# compiled with the warnings it is known to trip turned off.
noinst_LTLIBRARIES += libdlfe_gen.la
libdlfe_gen_la_SOURCES = frontend/parser.y frontend/lexer.l frontend/parse_internal.h
libdlfe_gen_la_CFLAGS = $(AM_CFLAGS) -Wno-unused-function -Wno-sign-compare -Wno-missing-prototypes -Wno-unused-but-set-variable
BUILT_SOURCES += frontend/parser.h
libdlcc_core_la_LIBADD += libdlfe_gen.la
libdlcc_core_la_SOURCES += \
	frontend/ast.h frontend/ast.c frontend/dims.h frontend/dims.c frontend/pytorch.h frontend/pytorch.c \
	frontend/lower.c frontend/layers.c frontend/tensors.c frontend/subscript.c frontend/lower.h
