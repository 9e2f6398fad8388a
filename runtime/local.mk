# libdlcrt: what a compiled model needs at run time, and nothing of the compiler.
lib_LTLIBRARIES += libdlcrt.la
libdlcrt_la_SOURCES = \
	runtime/tensorio.h \
	runtime/fileio.c \
	runtime/npy.c \
	runtime/safetensors.c \
	runtime/torchfile.c
libdlcrt_la_CPPFLAGS = $(AM_CPPFLAGS) $(CJSON_CFLAGS)
libdlcrt_la_LIBADD = $(CJSON_LIBS) -lm

# The executor, plan validation, device selection, the cuda device (driver
# API by dlopen, cuBLAS) and NVRTC with its kernel cache.
libdlcrt_la_SOURCES += \
	runtime/plan.h \
	runtime/device.h \
	runtime/runtime.h \
	runtime/plan.c \
	runtime/streams.c \
	runtime/seal.c \
	runtime/model.c \
	runtime/device.c \
	runtime/cuda.c \
	runtime/nvrtc.c \
	runtime/elf.c
libdlcrt_la_CPPFLAGS += $(CUDA_CPPFLAGS)
libdlcrt_la_LIBADD += $(CUDA_LIBS) -ldl -lpthread
include_HEADERS += include/dlcrt.h

# The emu device: kernels compiled by the host C++ compiler with
# dlcc_emu.h (installed to pkgdatadir; a build-tree library finds the
# source tree's), fibers for barriers, a CPU GEMM for RtGemm.
libdlcrt_la_SOURCES += \
	runtime/emu.c \
	runtime/emu_fiber.c \
	runtime/emu_fiber.h \
	runtime/emu_gemm.c
libdlcrt_la_CPPFLAGS += -DDLCC_EMU_INSTALLED_HEADER='"$(pkgdatadir)/dlcc_emu.h"' \
	-DDLCC_EMU_SRC_HEADER='"$(abs_top_srcdir)/runtime/emu/dlcc_emu.h"'
dist_pkgdata_DATA = runtime/emu/dlcc_emu.h

# plan.h is what a model.so's generated C is compiled against (dlcc
# passes -I$(includedir)/dlcrt); host programs need only dlcrt.h.
dlcrtplandir = $(includedir)/dlcrt
dlcrtplan_HEADERS = runtime/plan.h
