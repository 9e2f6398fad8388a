# ONNX import.  frontend/onnx.pb-c.[ch] come from the installed onnx
# package's onnx.proto through protoc-c and ship in the dist tarball, as
# the bison output does, so a tarball build needs only libprotobuf-c.
# Without it (configure says so) frontend/onnx.c is a stub that refuses
# .onnx files and the importer's other files are not built.
AM_CPPFLAGS += $(PROTOBUF_C_CFLAGS)
libdlcc_core_la_SOURCES += frontend/onnx.c frontend/onnx.h
if HAVE_ONNX
libdlcc_core_la_SOURCES += frontend/onnx_internal.h frontend/onnx_tensor.c frontend/onnx_build.c \
	frontend/onnx_ops.c frontend/onnx_shape.c frontend/onnx_resize.c frontend/onnx_rnn.c \
	frontend/onnx_quant.c frontend/onnx_attention.c frontend/onnx_control.c \
	frontend/onnx_newer.c frontend/onnx_einsum.c frontend/onnx_signal.c frontend/onnx_select.c \
	frontend/onnx_seq.c frontend/onnx_text.c frontend/onnx_training.c \
	frontend/onnx_ml.c frontend/onnx_trees.c frontend/onnx_contrib.c frontend/onnx_kv_cache.c frontend/onnx_random.c
noinst_LTLIBRARIES += libdlonnx_gen.la
libdlonnx_gen_la_SOURCES = frontend/onnx.pb-c.c frontend/onnx.pb-c.h
BUILT_SOURCES += frontend/onnx.pb-c.c frontend/onnx.pb-c.h
libdlcc_core_la_LIBADD += libdlonnx_gen.la $(PROTOBUF_C_LIBS)
MAINTAINERCLEANFILES = frontend/onnx.pb-c.c frontend/onnx.pb-c.h
endif
if ONNX_REGEN
# protoc-c names its outputs after the .proto, so compile a copy named
# onnx.proto whatever the installed file is called.
frontend/onnx.pb-c.c frontend/onnx.pb-c.h: $(ONNX_PROTO)
	$(AM_V_GEN)$(MKDIR_P) frontend/onnx-proto.tmp && \
	cp '$(ONNX_PROTO)' frontend/onnx-proto.tmp/onnx.proto && \
	$(PROTOC_C) --proto_path=frontend/onnx-proto.tmp --c_out=frontend frontend/onnx-proto.tmp/onnx.proto && \
	rm -rf frontend/onnx-proto.tmp
endif
