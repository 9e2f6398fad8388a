/* The cuda device: takes plans and runs them on an NVIDIA GPU through
 * the driver API, which is opened with dlopen so that a binary starts on
 * a machine without a driver and says so.  Kernels come from the plan's
 * cubin for this arch, else its PTX, else NVRTC (nvrtc.c, with the disk
 * cache); matrix products go to cuBLAS.  Every CUresult and cublasStatus
 * is checked and turned into "cuda: <call>(<what>): <NAME> (<text>)". */
#include "config.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

#ifndef HAVE_CUDA

RtDevice *rt_cuda_open(char *err, size_t errlen) {
  snprintf(err, errlen, "cuda: this libdlcrt was built without the CUDA toolkit (configure --with-cuda=DIR)");
  return NULL;
}

#else

#include <cublas_v2.h>
#include <cuda.h>
#include <dlfcn.h>

/* The driver entry points we use.  cuda.h maps several names to their
 * current versions (cuMemAlloc -> cuMemAlloc_v2), so the field names and
 * the strings given to dlsym both come from that mapping. */
#define CUDA_FNS(X)                                                                                \
  X(cuInit)                                                                                        \
  X(cuDriverGetVersion)                                                                            \
  X(cuDeviceGetCount)                                                                              \
  X(cuDeviceGet)                                                                                   \
  X(cuDeviceGetName)                                                                               \
  X(cuDeviceGetAttribute)                                                                          \
  X(cuDevicePrimaryCtxRetain)                                                                      \
  X(cuDevicePrimaryCtxRelease)                                                                     \
  X(cuCtxSetCurrent)                                                                               \
  X(cuModuleLoadData)                                                                              \
  X(cuModuleUnload)                                                                                \
  X(cuModuleGetFunction)                                                                           \
  X(cuFuncSetAttribute)                                                                            \
  X(cuLaunchKernel)                                                                                \
  X(cuMemAlloc)                                                                                    \
  X(cuMemFree)                                                                                     \
  X(cuMemcpyHtoD)                                                                                  \
  X(cuMemcpyDtoH)                                                                                  \
  X(cuMemcpyDtoDAsync)                                                                             \
  X(cuMemsetD8Async)                                                                               \
  X(cuStreamCreate)                                                                                \
  X(cuStreamDestroy)                                                                               \
  X(cuStreamSynchronize)                                                                           \
  X(cuGetErrorName)                                                                                \
  X(cuGetErrorString)

#define STR_(x) #x
#define STR(x) STR_(x)

typedef struct CudaApi {
#define FIELD(fn) __typeof__(fn) *fn;
  CUDA_FNS(FIELD)
#undef FIELD
} CudaApi;

typedef struct CudaDevice {
  RtDevice base;
  void *lib;
  CudaApi api;
  CUdevice dev;
  CUcontext ctx; /* the primary context, shared with cuBLAS */
  CUstream stream;
  cublasHandle_t blas;
  int cc_major, cc_minor;
  char arch[16]; /* "sm_90" */
} CudaDevice;

struct RtModule {
  CUmodule mod;
  uint32_t n;
  CUfunction *fns;
};

static const RtDeviceOps cuda_ops;

static bool is_sticky(CUresult r) {
  switch (r) {
  case CUDA_ERROR_ILLEGAL_ADDRESS:
  case CUDA_ERROR_ASSERT:
  case CUDA_ERROR_HARDWARE_STACK_ERROR:
  case CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case CUDA_ERROR_MISALIGNED_ADDRESS:
  case CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case CUDA_ERROR_INVALID_PC:
  case CUDA_ERROR_LAUNCH_FAILED: return true;
  default: return false;
  }
}

/* 0 for CUDA_SUCCESS; otherwise records "cuda: <what>: NAME (text)". */
static int check(CudaDevice *d, CUresult r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int check(CudaDevice *d, CUresult r, const char *fmt, ...) {
  if (r == CUDA_SUCCESS) return 0;
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  const char *name = NULL, *text = NULL;
  if (!d->api.cuGetErrorName || d->api.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  if (!d->api.cuGetErrorString || d->api.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
  char code[32];
  snprintf(code, sizeof code, "CUDA error %d", (int)r);
  rt_device_fail(&d->base, "cuda: %s: %s (%s)%s", what, name ? name : code, text ? text : "no description",
                 is_sticky(r) ? "; the GPU context is unusable now, close the model" : "");
  if (is_sticky(r)) d->base.broken = true;
  return -1;
}

static int check_blas(CudaDevice *d, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return 0;
  return rt_device_fail(&d->base, "cublas: %s: %s (%s)", what, cublasGetStatusName(s),
                        cublasGetStatusString(s));
}

/* Every entry point: refuse once broken, and make our context current on
 * whichever host thread calls. */
static int enter(CudaDevice *d) {
  if (d->base.broken) return -1;
  return check(d, d->api.cuCtxSetCurrent(d->ctx), "cuCtxSetCurrent");
}

static void cuda_destroy(RtDevice *base) {
  CudaDevice *d = (CudaDevice *)base;
  if (d->ctx) d->api.cuCtxSetCurrent(d->ctx);
  if (d->blas) cublasDestroy(d->blas);
  if (d->stream) d->api.cuStreamDestroy(d->stream);
  if (d->ctx) d->api.cuDevicePrimaryCtxRelease(d->dev);
  if (d->lib) dlclose(d->lib);
  free(d);
}

static int cuda_alloc(RtDevice *base, uint64_t nbytes, RtDevPtr *out) {
  CudaDevice *d = (CudaDevice *)base;
  CUdeviceptr p = 0;
  if (enter(d) || check(d, d->api.cuMemAlloc(&p, nbytes), "cuMemAlloc(%llu bytes)", (unsigned long long)nbytes))
    return -1;
  *out = (RtDevPtr)p;
  return 0;
}

/* Tried even on a broken context: whatever the driver still frees is
 * not leaked (the rest goes with the context). */
static int cuda_free(RtDevice *base, RtDevPtr p) {
  CudaDevice *d = (CudaDevice *)base;
  d->api.cuCtxSetCurrent(d->ctx);
  return check(d, d->api.cuMemFree((CUdeviceptr)p), "cuMemFree");
}

static int cuda_upload(RtDevice *base, RtDevPtr dst, const void *src, uint64_t nbytes) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  /* The synchronous copy runs on the legacy stream, which waits for our
   * (blocking) stream: no earlier kernel still reads dst. */
  return check(d, d->api.cuMemcpyHtoD((CUdeviceptr)dst, src, nbytes), "cuMemcpyHtoD(%llu bytes)",
               (unsigned long long)nbytes);
}

static int cuda_download(RtDevice *base, void *dst, RtDevPtr src, uint64_t nbytes) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  return check(d, d->api.cuMemcpyDtoH(dst, (CUdeviceptr)src, nbytes), "cuMemcpyDtoH(%llu bytes)",
               (unsigned long long)nbytes);
}

static int cuda_copy(RtDevice *base, RtDevPtr dst, RtDevPtr src, uint64_t nbytes) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  return check(d, d->api.cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, nbytes, d->stream),
               "cuMemcpyDtoDAsync(%llu bytes)", (unsigned long long)nbytes);
}

static int cuda_memset0(RtDevice *base, RtDevPtr dst, uint64_t nbytes) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  return check(d, d->api.cuMemsetD8Async((CUdeviceptr)dst, 0, nbytes, d->stream),
               "cuMemsetD8Async(%llu bytes)", (unsigned long long)nbytes);
}

/* The plan's binary for arch, or NULL. */
static const RtBinary *find_binary(const RtPlan *p, const char *arch) {
  for (uint32_t i = 0; i < p->n_binaries; i++)
    if (!strcmp(p->binaries[i].arch, arch)) return &p->binaries[i];
  return NULL;
}

static CUresult load_image(CudaDevice *d, const RtBinary *b, CUmodule *mod) {
  /* PTX must end in NUL; the plan's size may or may not count it. */
  if (!strncmp(b->arch, "compute_", 8) && ((const char *)b->data)[b->size - 1] != 0) {
    char *s = malloc(b->size + 1);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(s, b->data, b->size);
    s[b->size] = 0;
    CUresult r = d->api.cuModuleLoadData(mod, s);
    free(s);
    return r;
  }
  return d->api.cuModuleLoadData(mod, b->data);
}

static int load_module(CudaDevice *d, const RtPlan *p, CUmodule *mod) {
  const RtBinary *cubin = find_binary(p, d->arch);
  if (cubin && load_image(d, cubin, mod) == CUDA_SUCCESS) return 0;
  /* The newest PTX this GPU can JIT. */
  const RtBinary *ptx = NULL;
  int best = -1, cc = d->cc_major * 10 + d->cc_minor;
  for (uint32_t i = 0; i < p->n_binaries; i++) {
    int v;
    if (sscanf(p->binaries[i].arch, "compute_%d", &v) == 1 && v <= cc && v > best)
      best = v, ptx = &p->binaries[i];
  }
  if (ptx) {
    CUresult r = load_image(d, ptx, mod);
    if (r == CUDA_SUCCESS) return 0;
    if (!p->source) return check(d, r, "cuModuleLoadData(%s PTX)", ptx->arch);
  }
  void *bin;
  size_t size;
  if (rt_nvrtc_compile(p, d->arch, &bin, &size, d->base.error, sizeof d->base.error)) return -1;
  CUresult r = d->api.cuModuleLoadData(mod, bin);
  free(bin);
  return check(d, r, "cuModuleLoadData(%s cubin from NVRTC, %zu bytes)", d->arch, size);
}

static bool has_gemm(const RtPlan *p) {
  for (uint32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind == RT_STEP_GEMM) return true;
  return false;
}

static void cuda_unload(RtDevice *base, RtModule *m) {
  CudaDevice *d = (CudaDevice *)base;
  if (!m) return;
  if (m->mod) {
    d->api.cuCtxSetCurrent(d->ctx);
    d->api.cuModuleUnload(m->mod);
  }
  free(m->fns);
  free(m);
}

static int cuda_load(RtDevice *base, const RtPlan *p, RtModule **out) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  if (has_gemm(p) && !d->blas) {
    if (check_blas(d, cublasCreate(&d->blas), "cublasCreate")) return -1;
    if (check_blas(d, cublasSetStream(d->blas, (cudaStream_t)d->stream), "cublasSetStream")) return -1;
  }
  RtModule *m = calloc(1, sizeof *m);
  if (!m || !(m->fns = calloc(p->n_kernels ? p->n_kernels : 1, sizeof *m->fns))) {
    free(m);
    return rt_device_fail(base, "cuda: out of host memory loading the kernels");
  }
  m->n = p->n_kernels;
  if (p->n_kernels && load_module(d, p, &m->mod)) goto fail;
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    const char *name = p->kernels[i].name;
    if (check(d, d->api.cuModuleGetFunction(&m->fns[i], m->mod, name), "cuModuleGetFunction('%s')", name))
      goto fail;
    /* Above 48 KiB of dynamic shared memory a kernel must opt in. */
    uint32_t dyn = 0;
    for (uint32_t s = 0; s < p->n_steps; s++)
      if (p->steps[s].kind == RT_STEP_LAUNCH && p->steps[s].launch.kernel == i &&
          p->steps[s].launch.dynamic_shared_bytes > dyn)
        dyn = p->steps[s].launch.dynamic_shared_bytes;
    if (dyn > 48 * 1024 &&
        check(d, d->api.cuFuncSetAttribute(m->fns[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)dyn),
              "cuFuncSetAttribute('%s', %u bytes of dynamic shared memory)", name, dyn))
      goto fail;
  }
  *out = m;
  return 0;
fail:
  cuda_unload(base, m);
  return -1;
}

static int cuda_launch(RtDevice *base, RtModule *m, const RtLaunch *l, const void *const *args) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  if (l->kernel >= m->n) return rt_device_fail(base, "cuda: kernel index %u out of range", l->kernel);
  return check(d,
               d->api.cuLaunchKernel(m->fns[l->kernel], l->grid[0], l->grid[1], l->grid[2], l->block[0],
                                     l->block[1], l->block[2], l->dynamic_shared_bytes, d->stream,
                                     (void **)args, NULL),
               "cuLaunchKernel(grid %ux%ux%u, block %ux%ux%u)", l->grid[0], l->grid[1], l->grid[2],
               l->block[0], l->block[1], l->block[2]);
}

static bool fits_int(int64_t v) { return v >= 0 && v <= 0x7fffffff; }

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a
 * row-major matrix read as column-major is its transpose: so cuBLAS gets
 * B as its first operand, A as its second, m and n swapped. */
static int cuda_gemm(RtDevice *base, const RtGemm *g, RtDevPtr a, RtDevPtr b, RtDevPtr c) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  if (!d->blas) return rt_device_fail(base, "cuda: gemm before cuBLAS was set up (plan loaded?)");
  if (!fits_int(g->m) || !fits_int(g->n) || !fits_int(g->k) || !fits_int(g->lda) || !fits_int(g->ldb) ||
      !fits_int(g->ldc) || !fits_int(g->batch))
    return rt_device_fail(base, "cublas: gemm %lldx%lldx%lld (batch %lld) exceeds cuBLAS's int range",
                          (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch);
  cudaDataType t = g->dtype == RT_DT_F16 ? CUDA_R_16F : g->dtype == RT_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  /* f32 must stay f32 all the way (no TF32) to meet 1e-5; half types
   * may use tensor cores, accumulating in f32 either way. */
  cublasMath_t mode = g->dtype == RT_DT_F32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH;
  if (check_blas(d, cublasSetMathMode(d->blas, mode), "cublasSetMathMode")) return -1;
  float alpha = g->alpha, beta = g->beta;
  cublasStatus_t s = cublasGemmStridedBatchedEx(
      d->blas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)g->n,
      (int)g->m, (int)g->k, &alpha, (const void *)(uintptr_t)b, t, (int)g->ldb, g->stride_b,
      (const void *)(uintptr_t)a, t, (int)g->lda, g->stride_a, &beta, (void *)(uintptr_t)c, t, (int)g->ldc,
      g->stride_c, (int)g->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  char what[160];
  snprintf(what, sizeof what, "cublasGemmStridedBatchedEx(m=%lld n=%lld k=%lld batch=%lld)", (long long)g->m,
           (long long)g->n, (long long)g->k, (long long)g->batch);
  return check_blas(d, s, what);
}

static int cuda_synchronize(RtDevice *base) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  return check(d, d->api.cuStreamSynchronize(d->stream), "cuStreamSynchronize (a kernel or copy failed)");
}

static const RtDeviceOps cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .memset0 = cuda_memset0,
    .load = cuda_load,
    .unload = cuda_unload,
    .launch = cuda_launch,
    .gemm = cuda_gemm,
    .synchronize = cuda_synchronize,
};

RtDevice *rt_cuda_open(char *err, size_t errlen) {
  CudaDevice *d = calloc(1, sizeof *d);
  if (!d) {
    snprintf(err, errlen, "cuda: out of host memory");
    return NULL;
  }
  d->base.ops = &cuda_ops;
  /* DLCC_LIBCUDA: a driver outside the loader's path, or the tests' fake. */
  const char *lib = getenv("DLCC_LIBCUDA");
  if (!lib || !*lib) lib = "libcuda.so.1";
  d->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!d->lib) {
    const char *why = dlerror();
    snprintf(err, errlen, "cuda: cannot load %s (no NVIDIA driver on this machine): %s", lib, why ? why : "?");
    free(d);
    return NULL;
  }
#define LOAD(fn)                                                                                   \
  if (!(d->api.fn = (__typeof__(fn) *)dlsym(d->lib, STR(fn)))) {                                   \
    snprintf(err, errlen, "cuda: the NVIDIA driver's libcuda.so.1 lacks %s (driver too old?)", STR(fn)); \
    cuda_destroy(&d->base);                                                                        \
    return NULL;                                                                                   \
  }
  CUDA_FNS(LOAD)
#undef LOAD
  int count = 0, version = 0;
  if (check(d, d->api.cuInit(0), "cuInit") || check(d, d->api.cuDriverGetVersion(&version), "cuDriverGetVersion") ||
      check(d, d->api.cuDeviceGetCount(&count), "cuDeviceGetCount"))
    goto fail;
  if (count == 0) {
    rt_device_fail(&d->base, "cuda: the driver (version %d) sees no GPU", version);
    goto fail;
  }
  if (check(d, d->api.cuDeviceGet(&d->dev, 0), "cuDeviceGet(0)") ||
      check(d, d->api.cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev),
            "cuDeviceGetAttribute(compute capability)") ||
      check(d, d->api.cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev),
            "cuDeviceGetAttribute(compute capability)"))
    goto fail;
  snprintf(d->arch, sizeof d->arch, "sm_%d%d", d->cc_major, d->cc_minor);
  if (check(d, d->api.cuDevicePrimaryCtxRetain(&d->ctx, d->dev), "cuDevicePrimaryCtxRetain")) goto fail;
  if (check(d, d->api.cuCtxSetCurrent(d->ctx), "cuCtxSetCurrent") ||
      check(d, d->api.cuStreamCreate(&d->stream, CU_STREAM_DEFAULT), "cuStreamCreate"))
    goto fail;
  return &d->base;
fail:
  snprintf(err, errlen, "%s", d->base.error);
  cuda_destroy(&d->base);
  return NULL;
}

#endif
