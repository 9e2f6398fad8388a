/* A stand-in for libcuda.so.1 so that runtime/cuda.c runs on machines
 * without a GPU: the driver entry points cuda.c loads, over host memory.
 * Kernels do not run (launches are counted); copies and memsets are
 * real.  Failures on demand through the environment:
 *   FAKECUDA_MEM_LIMIT=N   cuMemAlloc beyond N bytes in total: out of memory
 *   FAKECUDA_SYNC_ERROR=E  cuStreamSynchronize returns CUresult E */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

struct CUctx_st {
  int unused;
};
struct CUstream_st {
  int unused;
};
struct CUmod_st {
  void *image;
  size_t size;
};
struct CUfunc_st {
  int unused;
};

static struct CUctx_st ctx;
static struct CUstream_st stream;
static struct CUfunc_st func;
static size_t allocated;
static int launches;

/* For the tests: how many kernels were launched. */
int fakecuda_launches(void);
int fakecuda_launches(void) { return launches; }

CUresult CUDAAPI cuInit(unsigned int flags) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuDriverGetVersion(int *v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetCount(int *n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGet(CUdevice *d, int ordinal) {
  *d = ordinal;
  return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice d) {
  strncpy(name, "fake", (size_t)len);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 : 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  *c = &ctx;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice d) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxSetCurrent(CUcontext c) { return CUDA_SUCCESS; }

CUresult CUDAAPI cuModuleLoadData(CUmodule *m, const void *image) {
  /* A cubin is an ELF file; PTX is text starting with a comment or .version. */
  if (memcmp(image, "\x7f" "ELF", 4) && !strstr(image, ".version")) return CUDA_ERROR_INVALID_IMAGE;
  struct CUmod_st *mod = calloc(1, sizeof *mod);
  /* The image's size: PTX up to its NUL, an ELF file up to the end of
   * its last section or of the section table. */
  size_t size = strlen(image);
  if (!memcmp(image, "\x7f" "ELF", 4)) {
    const unsigned char *e = image;
    uint64_t shoff;
    memcpy(&shoff, e + 0x28, 8);
    uint16_t shentsize, shnum;
    memcpy(&shentsize, e + 0x3a, 2);
    memcpy(&shnum, e + 0x3c, 2);
    size = shoff + (size_t)shentsize * shnum;
    for (uint16_t i = 0; i < shnum; i++) {
      uint64_t off, sz;
      uint32_t type;
      memcpy(&type, e + shoff + (size_t)i * shentsize + 0x04, 4);
      if (type == 8) continue; /* SHT_NOBITS: no bytes in the file */
      memcpy(&off, e + shoff + (size_t)i * shentsize + 0x18, 8);
      memcpy(&sz, e + shoff + (size_t)i * shentsize + 0x20, 8);
      if (off + sz > size) size = off + sz;
    }
  }
  mod->image = malloc(size);
  memcpy(mod->image, image, size);
  mod->size = size;
  *m = mod;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleUnload(CUmodule m) {
  free(m->image);
  free(m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  if (!memmem(m->image, m->size, name, strlen(name) + 1)) return CUDA_ERROR_NOT_FOUND;
  *f = &func;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned shared, CUstream s, void **params, void **extra) {
  launches++;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *p, size_t n) {
  const char *lim = getenv("FAKECUDA_MEM_LIMIT");
  if (lim && allocated + n > strtoull(lim, NULL, 10)) return CUDA_ERROR_OUT_OF_MEMORY;
  void *m = malloc(n + sizeof(size_t));
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  memcpy(m, &n, sizeof n);
  allocated += n;
  *p = (CUdeviceptr)(uintptr_t)((char *)m + sizeof(size_t));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr p) {
  char *m = (char *)(uintptr_t)p - sizeof(size_t);
  size_t n;
  memcpy(&n, m, sizeof n);
  allocated -= n;
  free(m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
  memcpy((void *)(uintptr_t)dst, src, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  memcpy(dst, (void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  memcpy((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  memset((void *)(uintptr_t)dst, v, n);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *s, unsigned int flags) {
  *s = &stream;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream s) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamSynchronize(CUstream s) {
  const char *e = getenv("FAKECUDA_SYNC_ERROR");
  return e ? (CUresult)atoi(e) : CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult r, const char **s) {
  switch (r) {
  case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return CUDA_SUCCESS;
  case CUDA_ERROR_ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; return CUDA_SUCCESS;
  case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; return CUDA_SUCCESS;
  default: *s = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
}
CUresult CUDAAPI cuGetErrorString(CUresult r, const char **s) {
  switch (r) {
  case CUDA_ERROR_OUT_OF_MEMORY: *s = "out of memory"; return CUDA_SUCCESS;
  case CUDA_ERROR_ILLEGAL_ADDRESS: *s = "an illegal memory access was encountered"; return CUDA_SUCCESS;
  case CUDA_ERROR_NOT_FOUND: *s = "named symbol not found"; return CUDA_SUCCESS;
  default: *s = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
}
