/* libcuda's events, cuBLAS and cuDNN for tests/gpu/layer_bench, all by
 * dlopen (vendor.h says what it takes and returns).  The driver's and
 * cuBLAS's types come from the toolkit's headers; cuDNN's are declared
 * here (the GPU machine's toolkit may lack cudnn.h) and checked against
 * cudnn.h where it is there. */
#include "config.h"

#include "tests/gpu/vendor.h"

#include <cublas_v2.h>
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/emu/dlcc_emu.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* ---- cuDNN's legacy convolution API, by hand ---- */

typedef void *DnnHandle, *DnnTensor, *DnnFilter, *DnnConv;
typedef struct DnnPerf { /* cudnnConvolutionFwdAlgoPerf_t */
  int algo, status;
  float time;
  size_t memory;
  int determinism, math_type, reserved[3];
} DnnPerf;
enum {
  DNN_FLOAT = 0, DNN_HALF = 2, DNN_INT8 = 3, DNN_INT32 = 4, DNN_BFLOAT16 = 9, /* cudnnDataType_t */
  DNN_NCHW = 0, DNN_NHWC = 1,                                          /* cudnnTensorFormat_t */
  DNN_CROSS_CORRELATION = 1,                                           /* cudnnConvolutionMode_t */
  DNN_DEFAULT_MATH = 0, DNN_TENSOR_OP_MATH = 1, DNN_FMA_MATH = 3,      /* cudnnMathType_t */
  DNN_MAX_ALGOS = 10
};
#if defined(__has_include)
#if __has_include(<cudnn.h>)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cudnn.h>
#define SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME(CUDNN_DATA_FLOAT, DNN_FLOAT) && SAME(CUDNN_DATA_HALF, DNN_HALF) && SAME(CUDNN_DATA_INT8, DNN_INT8) &&
                   SAME(CUDNN_DATA_INT32, DNN_INT32) && SAME(CUDNN_DATA_BFLOAT16, DNN_BFLOAT16),
               "cudnnDataType_t");
_Static_assert(SAME(CUDNN_TENSOR_NCHW, DNN_NCHW) && SAME(CUDNN_TENSOR_NHWC, DNN_NHWC), "cudnnTensorFormat_t");
_Static_assert(SAME(CUDNN_CROSS_CORRELATION, DNN_CROSS_CORRELATION), "cudnnConvolutionMode_t");
_Static_assert(SAME(CUDNN_DEFAULT_MATH, DNN_DEFAULT_MATH) && SAME(CUDNN_TENSOR_OP_MATH, DNN_TENSOR_OP_MATH) &&
                   SAME(CUDNN_FMA_MATH, DNN_FMA_MATH),
               "cudnnMathType_t");
_Static_assert(sizeof(cudnnConvolutionFwdAlgoPerf_t) == sizeof(DnnPerf), "cudnnConvolutionFwdAlgoPerf_t");
#pragma GCC diagnostic pop
#endif
#endif

#define DNN_FNS(X)                                                                                          \
  X(cudnnCreate, int (*)(DnnHandle *))                                                                      \
  X(cudnnDestroy, int (*)(DnnHandle))                                                                       \
  X(cudnnGetErrorString, const char *(*)(int))                                                              \
  X(cudnnCreateTensorDescriptor, int (*)(DnnTensor *))                                                      \
  X(cudnnDestroyTensorDescriptor, int (*)(DnnTensor))                                                       \
  X(cudnnSetTensor4dDescriptor, int (*)(DnnTensor, int, int, int, int, int, int))                           \
  X(cudnnCreateFilterDescriptor, int (*)(DnnFilter *))                                                      \
  X(cudnnDestroyFilterDescriptor, int (*)(DnnFilter))                                                       \
  X(cudnnSetFilter4dDescriptor, int (*)(DnnFilter, int, int, int, int, int, int))                           \
  X(cudnnCreateConvolutionDescriptor, int (*)(DnnConv *))                                                   \
  X(cudnnDestroyConvolutionDescriptor, int (*)(DnnConv))                                                    \
  X(cudnnSetConvolution2dDescriptor, int (*)(DnnConv, int, int, int, int, int, int, int, int))              \
  X(cudnnSetConvolutionMathType, int (*)(DnnConv, int))                                                     \
  X(cudnnFindConvolutionForwardAlgorithm, int (*)(DnnHandle, DnnTensor, DnnFilter, DnnConv, DnnTensor, int, \
                                                  int *, DnnPerf *))                                        \
  X(cudnnGetConvolutionForwardWorkspaceSize, int (*)(DnnHandle, DnnTensor, DnnFilter, DnnConv, DnnTensor, \
                                                     int, size_t *))                                        \
  X(cudnnConvolutionForward, int (*)(DnnHandle, const void *, DnnTensor, const void *, DnnFilter,        \
                                     const void *, DnnConv, int, void *, size_t, const void *, DnnTensor,   \
                                     void *))

/* The driver and cuBLAS: their own headers' types; the names given to
 * dlsym are the versioned ones those headers map to. */
#define CU_FNS(X)                                                                                           \
  X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)      \
  X(cuCtxSynchronize) X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)         \
  X(cuEventDestroy) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuGetErrorString)
#define BLAS_FNS(X) X(cublasCreate) X(cublasDestroy) X(cublasGemmEx) X(cublasGetStatusName)

struct Gpu {
  void *cu_lib, *blas_lib, *dnn_lib;
#define FIELD(fn) __typeof__(fn) *fn;
  CU_FNS(FIELD)
  BLAS_FNS(FIELD)
#undef FIELD
#define DNN_FIELD(fn, type) __typeof__(type) fn;
  DNN_FNS(DNN_FIELD)
#undef DNN_FIELD
  CUdevice dev;
  CUcontext ctx;
  CUevent start, stop;
  cublasHandle_t blas;
  DnnHandle dnn;
  char blas_error[512], dnn_error[512];
};

/* ---- opening the libraries ---- */

/* dlopen of name from the loader's path, then from the toolkit dlcc was
 * configured with, then from LAYER_BENCH_LIBS's folders. */
static void *open_lib(const char *name, char *err, size_t errlen) {
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h) return h;
  char dirs[4096], path[4600];
#ifdef DLCC_CUDA_DIR
  snprintf(dirs, sizeof dirs, "%s/lib64:%s/lib:%s", DLCC_CUDA_DIR, DLCC_CUDA_DIR,
           getenv("LAYER_BENCH_LIBS") ? getenv("LAYER_BENCH_LIBS") : "");
#else
  snprintf(dirs, sizeof dirs, "%s", getenv("LAYER_BENCH_LIBS") ? getenv("LAYER_BENCH_LIBS") : "");
#endif
  for (char *d = strtok(dirs, ":"); d && !h; d = strtok(NULL, ":")) {
    snprintf(path, sizeof path, "%s/%s", d, name);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) snprintf(err, errlen, "cannot load %s (not in the loader's path, the toolkit or LAYER_BENCH_LIBS)", name);
  return h;
}

static void *sym(void *lib, const char *name, char *missing, size_t len) {
  void *p = lib ? dlsym(lib, name) : NULL;
  if (!p && lib) {
    size_t used = strlen(missing);
    snprintf(missing + used, len - used, "%s%s", used ? ", " : "", name);
  }
  return p;
}

/* cuBLAS and cuDNN into g (or their errors); 0 when every symbol is found. */
static int open_vendors(Gpu *g) {
  char missing[1024] = "";
  g->blas_lib = open_lib("libcublas.so." STR(CUBLAS_VER_MAJOR), g->blas_error, sizeof g->blas_error);
#define LOAD(fn) g->fn = (__typeof__(fn) *)sym(g->blas_lib, STR(fn), missing, sizeof missing);
  BLAS_FNS(LOAD)
#undef LOAD
  if (missing[0]) snprintf(g->blas_error, sizeof g->blas_error, "cuBLAS lacks %s", missing);
  int rc = missing[0] || !g->blas_lib ? -1 : 0;
  missing[0] = 0;
  g->dnn_lib = open_lib("libcudnn.so.9", g->dnn_error, sizeof g->dnn_error);
#define DNN_LOAD(fn, type) g->fn = (type)sym(g->dnn_lib, #fn, missing, sizeof missing);
  DNN_FNS(DNN_LOAD)
#undef DNN_LOAD
  if (missing[0]) snprintf(g->dnn_error, sizeof g->dnn_error, "cuDNN lacks %s", missing);
  return rc || missing[0] || !g->dnn_lib ? -1 : 0;
}

int gpu_check_symbols(char *err, size_t errlen) {
  Gpu g;
  memset(&g, 0, sizeof g);
  int rc = open_vendors(&g);
  if (rc) snprintf(err, errlen, "%s%s%s", g.blas_error, g.blas_error[0] && g.dnn_error[0] ? "; " : "", g.dnn_error);
  if (g.blas_lib) dlclose(g.blas_lib);
  if (g.dnn_lib) dlclose(g.dnn_lib);
  return rc;
}

bool gpu_driver_loads(char *err, size_t errlen) {
  void *h = open_lib("libcuda.so.1", err, errlen);
  if (h) dlclose(h);
  return h != NULL;
}

static int cu_check(Gpu *g, CUresult r, const char *what, char *err, size_t errlen) {
  if (r == CUDA_SUCCESS) return 0;
  const char *text = NULL;
  if (g->cuGetErrorString) g->cuGetErrorString(r, &text);
  snprintf(err, errlen, "%s: CUDA error %d (%s)", what, (int)r, text ? text : "?");
  return -1;
}

Gpu *gpu_open(char *err, size_t errlen) {
  Gpu *g = calloc(1, sizeof *g);
  if (!g) {
    snprintf(err, errlen, "out of host memory");
    return NULL;
  }
  g->cu_lib = open_lib("libcuda.so.1", err, errlen);
  char missing[512] = "";
#define LOAD(fn) g->fn = (__typeof__(fn) *)sym(g->cu_lib, STR(fn), missing, sizeof missing);
  CU_FNS(LOAD)
#undef LOAD
  if (g->cu_lib && missing[0]) snprintf(err, errlen, "the driver lacks %s", missing);
  if (!g->cu_lib || missing[0] || cu_check(g, g->cuInit(0), "cuInit", err, errlen) ||
      cu_check(g, g->cuDeviceGet(&g->dev, 0), "cuDeviceGet", err, errlen) ||
      cu_check(g, g->cuDevicePrimaryCtxRetain(&g->ctx, g->dev), "cuDevicePrimaryCtxRetain", err, errlen) ||
      cu_check(g, g->cuCtxSetCurrent(g->ctx), "cuCtxSetCurrent", err, errlen) ||
      cu_check(g, g->cuEventCreate(&g->start, CU_EVENT_DEFAULT), "cuEventCreate", err, errlen) ||
      cu_check(g, g->cuEventCreate(&g->stop, CU_EVENT_DEFAULT), "cuEventCreate", err, errlen)) {
    gpu_close(g);
    return NULL;
  }
  open_vendors(g);
  cublasStatus_t bs;
  if (!g->blas_error[0] && (bs = g->cublasCreate(&g->blas)) != CUBLAS_STATUS_SUCCESS)
    snprintf(g->blas_error, sizeof g->blas_error, "cublasCreate: %s", g->cublasGetStatusName(bs));
  int ds;
  if (!g->dnn_error[0] && (ds = g->cudnnCreate(&g->dnn)) != 0)
    snprintf(g->dnn_error, sizeof g->dnn_error, "cudnnCreate: %s", g->cudnnGetErrorString(ds));
  return g;
}

void gpu_close(Gpu *g) {
  if (!g) return;
  if (g->ctx) g->cuCtxSetCurrent(g->ctx);
  if (g->blas) g->cublasDestroy(g->blas);
  if (g->dnn) g->cudnnDestroy(g->dnn);
  if (g->start) g->cuEventDestroy(g->start);
  if (g->stop) g->cuEventDestroy(g->stop);
  if (g->ctx) g->cuDevicePrimaryCtxRelease(g->dev);
  if (g->blas_lib) dlclose(g->blas_lib);
  if (g->dnn_lib) dlclose(g->dnn_lib);
  if (g->cu_lib) dlclose(g->cu_lib);
  free(g);
}

const char *gpu_lib_error(const Gpu *g, const char *lib) {
  return !strcmp(lib, "cublas") ? g->blas_error : g->dnn_error;
}

/* ---- timing ---- */

enum { TIMINGS = 5, TARGET_US = 2000, MAX_REPS = 2000 };

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One timing: reps calls of fn between the two events; microseconds a call. */
static double timed(Gpu *g, GpuWork fn, void *ud, int reps, char *err, size_t errlen) {
  if (cu_check(g, g->cuEventRecord(g->start, NULL), "cuEventRecord", err, errlen)) return -1;
  for (int r = 0; r < reps; r++)
    if (fn(ud, err, errlen)) return -1;
  float ms = 0;
  if (cu_check(g, g->cuEventRecord(g->stop, NULL), "cuEventRecord", err, errlen) ||
      cu_check(g, g->cuEventSynchronize(g->stop), "cuEventSynchronize (the work failed)", err, errlen) ||
      cu_check(g, g->cuEventElapsedTime(&ms, g->start, g->stop), "cuEventElapsedTime", err, errlen))
    return -1;
  return 1000.0 * ms / reps;
}

/* A warm-up call, a timing of one call to choose how many make about
 * TARGET_US, then the median of TIMINGS such timings. */
double gpu_time_us(Gpu *g, GpuWork fn, void *ud, char *err, size_t errlen) {
  if (cu_check(g, g->cuCtxSetCurrent(g->ctx), "cuCtxSetCurrent", err, errlen)) return -1;
  if (fn(ud, err, errlen) || cu_check(g, g->cuCtxSynchronize(), "cuCtxSynchronize", err, errlen)) return -1;
  double one = timed(g, fn, ud, 1, err, errlen);
  if (one < 0) return -1;
  int reps = one <= 0 ? MAX_REPS : (int)(TARGET_US / one) + 1;
  reps = reps > MAX_REPS ? MAX_REPS : reps;
  double t[TIMINGS];
  for (int i = 0; i < TIMINGS; i++)
    if ((t[i] = timed(g, fn, ud, reps, err, errlen)) < 0) return -1;
  qsort(t, TIMINGS, sizeof *t, cmp_double);
  return t[TIMINGS / 2];
}

/* ---- device buffers of random values ---- */

static size_t type_bytes(BenchType t) { return t == BT_I8 ? 1 : t == BT_F16 || t == BT_BF16 ? 2 : 4; }

/* n elements of t, uniform in [-1, 1) (int8: any byte), on the device. */
static int random_buffer(Gpu *g, BenchType t, size_t n, CUdeviceptr *out, char *err, size_t errlen) {
  size_t es = type_bytes(t);
  unsigned char *host = malloc(n * es + 1);
  if (!host) {
    snprintf(err, errlen, "out of host memory for %zu values", n);
    return -1;
  }
  uint64_t x = 0x9e3779b97f4a7c15ull ^ n;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    double v = (double)(x >> 11) * 0x1.0p-52 - 1.0;
    if (t == BT_F16) ((uint16_t *)host)[i] = dlcc_emu_f64_to_f16(v);
    else if (t == BT_BF16) ((uint16_t *)host)[i] = dlcc_emu_f64_to_bf16(v);
    else if (t == BT_I8) host[i] = (unsigned char)(x >> 56);
    else ((float *)host)[i] = (float)v;
  }
  int rc = cu_check(g, g->cuMemAlloc(out, n * es + 1), "cuMemAlloc", err, errlen) ||
           cu_check(g, g->cuMemcpyHtoD(*out, host, n * es), "cuMemcpyHtoD", err, errlen);
  free(host);
  return rc ? -1 : 0;
}

/* ---- cuBLAS ---- */

typedef struct BlasCall {
  Gpu *g;
  BenchType t;
  int m, n, k;
  CUdeviceptr a, b, c;
} BlasCall;

static int blas_work(void *ud, char *err, size_t errlen) {
  BlasCall *x = ud;
  Gpu *g = x->g;
  static const cudaDataType ab[] = {CUDA_R_16F, CUDA_R_16BF, CUDA_R_8I, CUDA_R_32F, CUDA_R_32F};
  static const cudaDataType cd[] = {CUDA_R_16F, CUDA_R_16BF, CUDA_R_32I, CUDA_R_32F, CUDA_R_32F};
  static const cublasComputeType_t ct[] = {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32I,
                                           CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
  float falpha = 1, fbeta = 0;
  int32_t ialpha = 1, ibeta = 0;
  bool i8 = x->t == BT_I8;
  cublasStatus_t s = g->cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, x->m, x->n, x->k,
                                     i8 ? (const void *)&ialpha : &falpha, (const void *)(uintptr_t)x->a, ab[x->t],
                                     x->k, (const void *)(uintptr_t)x->b, ab[x->t], x->k,
                                     i8 ? (const void *)&ibeta : &fbeta, (void *)(uintptr_t)x->c, cd[x->t], x->m,
                                     ct[x->t], CUBLAS_GEMM_DEFAULT);
  if (s == CUBLAS_STATUS_SUCCESS) return 0;
  snprintf(err, errlen, "cublasGemmEx: %s", g->cublasGetStatusName(s));
  return -1;
}

double gpu_cublas_us(Gpu *g, BenchType t, int m, int n, int k, char *err, size_t errlen) {
  if (g->blas_error[0]) {
    snprintf(err, errlen, "%s", g->blas_error);
    return -1;
  }
  if (t == BT_I8 && k % 4) {
    snprintf(err, errlen, "int8 needs k %% 4 == 0 (k = %d)", k);
    return -1;
  }
  /* dlrt_close unsets the context on this thread (runtime/cuda.c), and
   * the layer was timed just before: on the H200 every vendor row failed
   * with CUDA error 201 until this. */
  if (cu_check(g, g->cuCtxSetCurrent(g->ctx), "cuCtxSetCurrent", err, errlen)) return -1;
  BlasCall x = {.g = g, .t = t, .m = m, .n = n, .k = k};
  double us = -1;
  if (!random_buffer(g, t, (size_t)k * m, &x.a, err, errlen) && !random_buffer(g, t, (size_t)k * n, &x.b, err, errlen) &&
      !random_buffer(g, t == BT_I8 ? BT_F32 : t, (size_t)m * n, &x.c, err, errlen))
    us = gpu_time_us(g, blas_work, &x, err, errlen);
  if (x.a) g->cuMemFree(x.a);
  if (x.b) g->cuMemFree(x.b);
  if (x.c) g->cuMemFree(x.c);
  return us;
}

/* ---- cuDNN ---- */

typedef struct DnnCall {
  Gpu *g;
  DnnTensor x, y;
  DnnFilter w;
  DnnConv conv;
  int algo;
  CUdeviceptr xd, wd, yd, ws;
  size_t ws_bytes;
} DnnCall;

static int dnn_check(Gpu *g, int s, const char *what, char *err, size_t errlen) {
  if (s == 0) return 0;
  snprintf(err, errlen, "%s: %s", what, g->cudnnGetErrorString(s));
  return -1;
}

static int dnn_work(void *ud, char *err, size_t errlen) {
  DnnCall *c = ud;
  float alpha = 1, beta = 0;
  return dnn_check(c->g,
                   c->g->cudnnConvolutionForward(c->g->dnn, &alpha, c->x, (const void *)(uintptr_t)c->xd, c->w,
                                                 (const void *)(uintptr_t)c->wd, c->conv, c->algo,
                                                 (void *)(uintptr_t)c->ws, c->ws_bytes, &beta, c->y,
                                                 (void *)(uintptr_t)c->yd),
                   "cudnnConvolutionForward", err, errlen);
}

/* One layout: descriptors, the fastest algorithm, its timing. */
static double dnn_layout(Gpu *g, BenchType t, const ConvShape *s, int format, char *err, size_t errlen) {
  static const int data[] = {DNN_HALF, DNN_BFLOAT16, DNN_INT8, DNN_FLOAT, DNN_FLOAT};
  static const int math[] = {DNN_TENSOR_OP_MATH, DNN_TENSOR_OP_MATH, DNN_DEFAULT_MATH, DNN_FMA_MATH,
                             DNN_DEFAULT_MATH};
  DnnCall c = {.g = g};
  double us = -1;
  int found = 0;
  DnnPerf perf[DNN_MAX_ALGOS];
  if (dnn_check(g, g->cudnnCreateTensorDescriptor(&c.x), "cudnnCreateTensorDescriptor", err, errlen) ||
      dnn_check(g, g->cudnnCreateTensorDescriptor(&c.y), "cudnnCreateTensorDescriptor", err, errlen) ||
      dnn_check(g, g->cudnnCreateFilterDescriptor(&c.w), "cudnnCreateFilterDescriptor", err, errlen) ||
      dnn_check(g, g->cudnnCreateConvolutionDescriptor(&c.conv), "cudnnCreateConvolutionDescriptor", err, errlen) ||
      dnn_check(g, g->cudnnSetTensor4dDescriptor(c.x, format, data[t], s->n, s->c, s->h, s->w),
                "cudnnSetTensor4dDescriptor(x)", err, errlen) ||
      dnn_check(g, g->cudnnSetTensor4dDescriptor(c.y, format, t == BT_I8 ? DNN_FLOAT : data[t], s->n, s->k, s->oh, s->ow),
                "cudnnSetTensor4dDescriptor(y)", err, errlen) ||
      dnn_check(g, g->cudnnSetFilter4dDescriptor(c.w, data[t], format, s->k, s->c, s->r, s->s),
                "cudnnSetFilter4dDescriptor", err, errlen) ||
      dnn_check(g, g->cudnnSetConvolution2dDescriptor(c.conv, s->pad, s->pad, s->stride, s->stride, s->dilation,
                                                      s->dilation, DNN_CROSS_CORRELATION,
                                                      t == BT_I8 ? DNN_INT32 : DNN_FLOAT),
                "cudnnSetConvolution2dDescriptor", err, errlen) ||
      dnn_check(g, g->cudnnSetConvolutionMathType(c.conv, math[t]), "cudnnSetConvolutionMathType", err, errlen) ||
      random_buffer(g, t, (size_t)s->n * s->c * s->h * s->w, &c.xd, err, errlen) ||
      random_buffer(g, t, (size_t)s->k * s->c * s->r * s->s, &c.wd, err, errlen) ||
      random_buffer(g, t == BT_I8 ? BT_F32 : t, (size_t)s->n * s->k * s->oh * s->ow, &c.yd, err, errlen) ||
      dnn_check(g, g->cudnnFindConvolutionForwardAlgorithm(g->dnn, c.x, c.w, c.conv, c.y, DNN_MAX_ALGOS, &found, perf),
                "cudnnFindConvolutionForwardAlgorithm", err, errlen))
    goto done;
  int best = -1;
  for (int i = 0; i < found && best < 0; i++)
    if (perf[i].status == 0) best = i;
  if (best < 0) {
    snprintf(err, errlen, "cudnnFindConvolutionForwardAlgorithm: no algorithm runs this convolution");
    goto done;
  }
  c.algo = perf[best].algo;
  if (dnn_check(g, g->cudnnGetConvolutionForwardWorkspaceSize(g->dnn, c.x, c.w, c.conv, c.y, c.algo, &c.ws_bytes),
                "cudnnGetConvolutionForwardWorkspaceSize", err, errlen) ||
      (c.ws_bytes && cu_check(g, g->cuMemAlloc(&c.ws, c.ws_bytes), "cuMemAlloc(workspace)", err, errlen)))
    goto done;
  us = gpu_time_us(g, dnn_work, &c, err, errlen);
done:
  if (c.x) g->cudnnDestroyTensorDescriptor(c.x);
  if (c.y) g->cudnnDestroyTensorDescriptor(c.y);
  if (c.w) g->cudnnDestroyFilterDescriptor(c.w);
  if (c.conv) g->cudnnDestroyConvolutionDescriptor(c.conv);
  CUdeviceptr bufs[] = {c.xd, c.wd, c.yd, c.ws};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    if (bufs[i]) g->cuMemFree(bufs[i]);
  return us;
}

double gpu_cudnn_us(Gpu *g, BenchType t, const ConvShape *s, char *err, size_t errlen) {
  if (g->dnn_error[0]) {
    snprintf(err, errlen, "%s", g->dnn_error);
    return -1;
  }
  if (t == BT_I8 && (s->c % 4 || s->k % 4)) {
    snprintf(err, errlen, "int8 needs channels %% 4 == 0 (%d in, %d out)", s->c, s->k);
    return -1;
  }
  if (cu_check(g, g->cuCtxSetCurrent(g->ctx), "cuCtxSetCurrent", err, errlen)) return -1; /* as gpu_cublas_us */
  char why_nhwc[512], why_nchw[512];
  double nhwc = dnn_layout(g, t, s, DNN_NHWC, why_nhwc, sizeof why_nhwc);
  double nchw = t == BT_I8 ? -1 : dnn_layout(g, t, s, DNN_NCHW, why_nchw, sizeof why_nchw);
  if (nhwc < 0 && nchw < 0) {
    if (t == BT_I8) snprintf(err, errlen, "%s", why_nhwc);
    else snprintf(err, errlen, "NHWC: %s; NCHW: %s", why_nhwc, why_nchw);
  }
  return nhwc < 0 || (nchw >= 0 && nchw < nhwc) ? nchw : nhwc;
}
