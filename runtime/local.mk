# libdlcrt: what a compiled model needs at run time, and nothing of the compiler.
lib_LTLIBRARIES += libdlcrt.la
libdlcrt_la_SOURCES = \
	runtime/tensorio.h \
	runtime/npy.c \
	runtime/safetensors.c
libdlcrt_la_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS)
libdlcrt_la_LIBADD = $(CJSON_LIBS) -lm
