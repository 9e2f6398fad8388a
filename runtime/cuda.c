/* The cuda device: takes plans and runs them on an NVIDIA GPU through
 * the driver API, which is opened with dlopen so that a binary starts on
 * a machine without a driver and says so.  Kernels come from the plan's
 * cubin for this arch, else its PTX, else NVRTC (nvrtc.c, with the disk
 * cache); float matrix products go to cuBLASLt (with their bias and
 * activation epilogues), int8 ones to cuBLAS.  Every CUresult and
 * cublasStatus is checked and turned into "cuda: <call>(<what>): <NAME>
 * (<text>)" ("cublas: ..." and "cublasLt: ..." for those libraries).
 *
 * Ordering.  Everything of a model goes to one stream created with
 * CU_STREAM_NON_BLOCKING, so that no other work in the process (the
 * legacy default stream of a framework beside us) serializes with it:
 * kernels, cuBLAS, device copies, memsets, the async copies of inputs
 * and outputs (from and to pinned staging, runtime/model.c) and CUDA
 * graph launches.  Stream order is the only order the model relies on;
 * the few synchronous transfers (weights, an output bound to the device
 * read back by the host) are an async copy on the stream and a
 * synchronization.
 *
 * Contexts.  The primary context is made current on a host thread the
 * first time that thread calls us (a thread-local remembers it), not
 * before every call; a host program that makes another context current
 * on a thread it shares with us must make ours current again. */
#include "config.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

/* Row-major C = op(A) op(B) (m x n) as column-major cuBLAS.  A row-major
 * matrix with leading dimension ld, read column-major with the same ld,
 * is its transpose; so cuBLAS, reading C's bytes, sees C^T (n x m, ldc),
 * and C^T = op(B)^T op(A)^T.  Reading B's bytes it sees B^T, which is
 * op(B)^T when B is not transposed (op N) and whose transpose it is when
 * it is (op T); the same for A.  So: cuBLAS's A is our B (ldb, stride_b,
 * trans_b), its B is our A, its m is our n and its n our m; k stays.
 *
 * Worked example: A 2x3 (lda 3), B 3x4 (ldb 4), no transposes, C 2x4
 * (ldc 4).  cuBLAS gets (N, N, m=4, n=2, k=3, A=B lda=4, B=A ldb=3, C
 * ldc=4): its A is 4x3 with ld 4, element (i, l) at B + i + 4l, which is
 * our B[l][i]; its B is 3x2 with ld 3, element (l, j) at A + l + 3j, our
 * A[j][l]; it writes (i, j) at C + i + 4j, our C[j][i] = sum_l A[j][l]
 * B[l][i].  cuBLAS's bounds hold too: its lda >= its m (ldb >= n) for op
 * N, >= k for op T (B stored n x k).  Batch strides pass through; a
 * stride of 0 reuses one operand for every batch. */
static bool fits_int(int64_t v) { return v >= 0 && v <= 0x7fffffff; }

int rt_gemm_to_blas(const RtGemm *g, RtBlasGemm *o, char *err, size_t errlen) {
  if (!fits_int(g->m) || !fits_int(g->n) || !fits_int(g->k) || !fits_int(g->lda) || !fits_int(g->ldb) ||
      !fits_int(g->ldc) || !fits_int(g->batch)) {
    snprintf(err, errlen, "cublas: gemm %lldx%lldx%lld (batch %lld, ld %lld,%lld,%lld) exceeds cuBLAS's int range",
             (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch, (long long)g->lda,
             (long long)g->ldb, (long long)g->ldc);
    return -1;
  }
  *o = (RtBlasGemm){.trans_a = g->trans_b != 0,
                    .trans_b = g->trans_a != 0,
                    .m = (int)g->n,
                    .n = (int)g->m,
                    .k = (int)g->k,
                    .lda = (int)g->ldb,
                    .ldb = (int)g->lda,
                    .ldc = (int)g->ldc,
                    .stride_a = g->stride_b,
                    .stride_b = g->stride_a,
                    .stride_c = g->stride_c,
                    .batch = (int)g->batch};
  return 0;
}

#ifndef HAVE_CUDA

RtDevice *rt_cuda_open(char *err, size_t errlen) {
  snprintf(err, errlen, "cuda: this libdlcrt was built without the CUDA toolkit (configure --with-cuda=DIR)");
  return NULL;
}

#else

/* cublasLt.h declares cublasLtLoggerForceDisable() without a prototype. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <cublas_v2.h>
#include <cuda.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>

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
  X(cuDevicePrimaryCtxReset)                                                                       \
  X(cuCtxSetCurrent)                                                                               \
  X(cuModuleLoadDataEx)                                                                            \
  X(cuModuleUnload)                                                                                \
  X(cuModuleGetFunction)                                                                           \
  X(cuFuncGetAttribute)                                                                            \
  X(cuFuncSetAttribute)                                                                            \
  X(cuLaunchKernel)                                                                                \
  X(cuLaunchCooperativeKernel)                                                                     \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)                                                   \
  X(cuMemAlloc)                                                                                    \
  X(cuMemFree)                                                                                     \
  X(cuMemHostAlloc)                                                                                \
  X(cuMemFreeHost)                                                                                 \
  X(cuMemcpyHtoDAsync)                                                                             \
  X(cuMemcpyDtoHAsync)                                                                             \
  X(cuStreamBeginCapture)                                                                          \
  X(cuStreamEndCapture)                                                                            \
  X(cuGraphInstantiate)                                                                            \
  X(cuGraphLaunch)                                                                                 \
  X(cuGraphExecDestroy)                                                                            \
  X(cuGraphDestroy)                                                                                \
  X(cuEventCreate)                                                                                 \
  X(cuEventDestroy)                                                                                \
  X(cuEventRecord)                                                                                 \
  X(cuStreamWaitEvent)                                                                             \
  X(cuEventSynchronize)                                                                            \
  X(cuEventElapsedTime)                                                                            \
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
  CUstream stream;      /* non-blocking: every call of the model goes here */
  CUevent joined, done; /* ordering with a caller's stream (cuda_wait_on, cuda_signal) */
  CUstream copy;        /* lane 1 (dlrt_run_batches), made at first use */
  CUevent marks[RT_EVENTS];
  CUevent *clock; /* the step clock's points (timing events), made at first use */
  uint32_t n_clock;
  cublasHandle_t blas; /* int8 products */
  cublasLtHandle_t lt;  /* float products */
  CUdeviceptr lt_workspace; /* cuBLASLt's and cuBLAS's on the device's stream: one call at a time */
  /* Side streams of a capture (cuda_use_stream): stream b > 0's stream
   * and cuBLAS workspace, made by cuda_prepare_streams; the events; the
   * stream the model's calls go to now, and the one cuBLAS is set to. */
  CUstream side_stream[RT_SIDE_STREAMS];
  CUdeviceptr side_workspace[RT_SIDE_STREAMS];
  CUevent *stream_events;
  int n_stream_events;
  int side, blas_stream; /* the side stream calls go to now (0: the device's), cuBLAS's */
  struct LtGemm *lt_gemms; /* one setup per distinct GEMM (cuda_lt_gemm) */
  int n_lt_gemms, cap_lt_gemms;
  int cc_major, cc_minor;
  int driver_version; /* 13000 for CUDA 13.0 */
  int max_block[3], max_grid[3];
  int shared_optin; /* most shared memory a block may opt in to */
  int sms, cooperative; /* multiprocessors; whether cooperative launches work */
  char arch[16];    /* "sm_90": what the plan's cubin must be built for */
} CudaDevice;

struct RtModule {
  CUmodule mods[RT_MAX_CODE_PARTS]; /* by code part (RtKernel.part) */
  uint32_t n;
  CUfunction *fns;
  const char *const *names; /* the plan's kernel names, for messages */
  /* Launched with cuLaunchCooperativeKernel when nonzero: on at most
   * this many blocks (a chain's, RT_COOP_STRIDE: what the GPU holds at
   * once) or, UINT32_MAX, on the launch's grid as it is. */
  uint32_t *cooperative;
};

static const RtDeviceOps cuda_ops;

/* cuda devices open in this process, all on the one primary context. */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static int open_devices;
/* Whether a sticky error ended a context of this process, and whether
 * the reset after it failed: CUDA documents these errors as needing a
 * new process, and on the H200's driver a retain after the reset still
 * answered ILLEGAL_ADDRESS, so a later open says so plainly. */
static bool process_faulted;
static CUresult reset_result;

/* Errors after which the context is unusable: the driver's cuda.h says
 * so for each ("the context cannot be used anymore", "any further CUDA
 * work will return the same error"); the numbers, so that an older
 * cuda.h without the newer names still builds. */
static bool is_sticky(CUresult r) {
  switch ((int)r) {
  case 214: /* ECC_UNCORRECTABLE */
  case 226: /* CONTAINED */
  case 700: /* ILLEGAL_ADDRESS */
  case 702: /* LAUNCH_TIMEOUT */
  case 710: /* ASSERT */
  case 714: /* HARDWARE_STACK_ERROR */
  case 715: /* ILLEGAL_INSTRUCTION */
  case 716: /* MISALIGNED_ADDRESS */
  case 717: /* INVALID_ADDRESS_SPACE */
  case 718: /* INVALID_PC */
  case 719: /* LAUNCH_FAILED */
  case 721: /* TENSOR_MEMORY_LEAK */
  case 810: /* MPS_CLIENT_TERMINATED */
  case 911: /* EXTERNAL_DEVICE */ return true;
  default: return false;
  }
}

/* 0 for CUDA_SUCCESS; otherwise records "cuda: <what>: NAME (text)". */
static int check(CudaDevice *d, CUresult r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int check(CudaDevice *d, CUresult r, const char *fmt, ...) {
  if (r == CUDA_SUCCESS) return 0;
  char what[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  const char *name = NULL, *text = NULL;
  if (!d->api.cuGetErrorName || d->api.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  if (!d->api.cuGetErrorString || d->api.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
  char code[32];
  snprintf(code, sizeof code, "CUDA error %d", (int)r);
  /* Kernels run asynchronously: the call that reports a fault is often
   * not the one that caused it. */
  rt_device_fail(&d->base, "cuda: %s: %s (%s)%s", what, name ? name : code, text ? text : "no description",
                 is_sticky(r) ? "; the GPU context is unusable now, close the model (the fault may lie in an earlier "
                                "step: CUDA_LAUNCH_BLOCKING=1 names it)"
                              : "");
  if (is_sticky(r)) d->base.broken = true;
  return -1;
}

static int check_blas(CudaDevice *d, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return 0;
  return rt_device_fail(&d->base, "cublas: %s: %s (%s)", what, cublasGetStatusName(s),
                        cublasGetStatusString(s));
}

static int check_lt(CudaDevice *d, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return 0;
  return rt_device_fail(&d->base, "cublasLt: %s: %s (%s)", what, cublasGetStatusName(s),
                        cublasGetStatusString(s));
}

static void lt_release(CudaDevice *d);

/* The context this host thread has current, as far as we made it so. */
static _Thread_local CUcontext current_ctx;

static CUresult make_current(CudaDevice *d) {
  if (current_ctx == d->ctx) return CUDA_SUCCESS;
  CUresult r = d->api.cuCtxSetCurrent(d->ctx);
  if (r == CUDA_SUCCESS) current_ctx = d->ctx;
  return r;
}

/* Every entry point: refuse once broken, and make our context current on
 * this host thread if it is not yet. */
static int enter(CudaDevice *d) {
  if (d->base.broken) return -1;
  return check(d, make_current(d), "cuCtxSetCurrent");
}

static void cuda_destroy(RtDevice *base) {
  CudaDevice *d = (CudaDevice *)base;
  if (d->ctx) make_current(d);
  if (d->blas) cublasDestroy(d->blas);
  lt_release(d);
  for (int i = 0; i < RT_EVENTS; i++)
    if (d->marks[i]) d->api.cuEventDestroy(d->marks[i]);
  for (int i = 0; i < d->n_stream_events; i++) d->api.cuEventDestroy(d->stream_events[i]);
  free(d->stream_events);
  for (uint32_t i = 0; i < d->n_clock; i++) d->api.cuEventDestroy(d->clock[i]);
  free(d->clock);
  for (int b = 1; b < RT_SIDE_STREAMS; b++) {
    if (d->side_stream[b]) d->api.cuStreamDestroy(d->side_stream[b]);
    if (d->side_workspace[b]) d->api.cuMemFree(d->side_workspace[b]);
  }
  if (d->copy) d->api.cuStreamDestroy(d->copy);
  if (d->joined) d->api.cuEventDestroy(d->joined);
  if (d->done) d->api.cuEventDestroy(d->done);
  if (d->stream) d->api.cuStreamDestroy(d->stream);
  /* The last release resets the primary context (its memory and modules
   * go with it); it stays current on this thread, unlike after
   * cuCtxDestroy, so unset it.  cudart (under cuBLAS) holds its own
   * reference until the process ends, so a context a fault broke would
   * outlive us and fail every later model: reset it, once no other model
   * of ours has pointers into it (they would dangle silently).  A
   * framework in the same process shares the broken context already. */
  if (d->ctx) {
    pthread_mutex_lock(&open_lock);
    bool last = --open_devices == 0;
    pthread_mutex_unlock(&open_lock);
    d->api.cuDevicePrimaryCtxRelease(d->dev);
    if (d->base.broken) {
      CUresult r = last ? d->api.cuDevicePrimaryCtxReset(d->dev) : CUDA_SUCCESS;
      pthread_mutex_lock(&open_lock);
      process_faulted = true;
      if (r != CUDA_SUCCESS) reset_result = r;
      pthread_mutex_unlock(&open_lock);
    }
    d->api.cuCtxSetCurrent(NULL);
    current_ctx = NULL;
  }
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
  make_current(d);
  return check(d, d->api.cuMemFree((CUdeviceptr)p), "cuMemFree");
}

static int cuda_upload_async(RtDevice *base, RtDevPtr dst, const void *src, uint64_t nbytes) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  return check(d, d->api.cuMemcpyHtoDAsync((CUdeviceptr)dst, src, nbytes, d->stream),
               "cuMemcpyHtoDAsync(%llu bytes)", (unsigned long long)nbytes);
}

static int cuda_download_async(RtDevice *base, void *dst, RtDevPtr src, uint64_t nbytes) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  return check(d, d->api.cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, nbytes, d->stream),
               "cuMemcpyDtoHAsync(%llu bytes)", (unsigned long long)nbytes);
}

static int cuda_synchronize(RtDevice *base) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  return check(d, d->api.cuStreamSynchronize(d->stream), "cuStreamSynchronize (a kernel or copy failed)");
}

/* Synchronous transfers (weights; a bound output read by the host): on
 * the stream, after what is queued there, and waited for. */
static int cuda_upload(RtDevice *base, RtDevPtr dst, const void *src, uint64_t nbytes) {
  return cuda_upload_async(base, dst, src, nbytes) || cuda_synchronize(base) ? -1 : 0;
}

static int cuda_download(RtDevice *base, void *dst, RtDevPtr src, uint64_t nbytes) {
  return cuda_download_async(base, dst, src, nbytes) || cuda_synchronize(base) ? -1 : 0;
}

static int cuda_host_alloc(RtDevice *base, uint64_t nbytes, void **out, char *why, size_t whylen) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  CUresult r = d->api.cuMemHostAlloc(out, nbytes ? nbytes : 1, 0);
  if (r == CUDA_SUCCESS) return 0;
  /* Pinned memory is a limited resource (ulimit -l, containers): pageable
   * staging still works, only slower. */
  const char *name = NULL;
  if (d->api.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  snprintf(why, whylen, "cuMemHostAlloc(%llu bytes): %s", (unsigned long long)nbytes, name ? name : "error");
  *out = malloc(nbytes ? nbytes : 1);
  return *out ? 1 : rt_device_fail(base, "cuda: out of host memory for %llu bytes of staging",
                                    (unsigned long long)nbytes);
}

static void cuda_host_free(RtDevice *base, void *p, bool pinned) {
  CudaDevice *d = (CudaDevice *)base;
  if (!pinned) {
    free(p);
    return;
  }
  make_current(d);
  d->api.cuMemFreeHost(p);
}

struct RtGraph {
  CUgraphExec exec;
};

/* Where the model's calls go: the device's stream, or during a capture
 * the stream the executor chose. */
static CUstream now_stream(const CudaDevice *d) { return d->side ? d->side_stream[d->side] : d->stream; }
static CUdeviceptr now_workspace(const CudaDevice *d) {
  return d->side ? d->side_workspace[d->side] : d->lt_workspace;
}

/* Thread-local mode: only this thread's calls are held to the rules of
 * capture, so another model capturing on another thread is no concern. */
static int cuda_capture_begin(RtDevice *base) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  d->side = 0; /* a capture starts, and ends, on the device's stream */
  return check(d, d->api.cuStreamBeginCapture(d->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
               "cuStreamBeginCapture");
}

static int cuda_capture_end(RtDevice *base, RtGraph **out) {
  CudaDevice *d = (CudaDevice *)base;
  if (d->base.broken) return -1;
  d->side = 0;
  CUgraph graph = NULL;
  if (check(d, d->api.cuStreamEndCapture(d->stream, &graph), "cuStreamEndCapture")) return -1;
  RtGraph *g = calloc(1, sizeof *g);
  if (!g) {
    d->api.cuGraphDestroy(graph);
    return rt_device_fail(base, "cuda: out of host memory for a CUDA graph");
  }
  int rc = check(d, d->api.cuGraphInstantiate(&g->exec, graph, 0), "cuGraphInstantiate");
  d->api.cuGraphDestroy(graph); /* the executable graph is a copy */
  if (rc) {
    free(g);
    return -1;
  }
  *out = g;
  return 0;
}

static int cuda_graph_launch(RtDevice *base, RtGraph *g) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  return check(d, d->api.cuGraphLaunch(g->exec, d->stream), "cuGraphLaunch");
}

static void cuda_graph_destroy(RtDevice *base, RtGraph *g) {
  CudaDevice *d = (CudaDevice *)base;
  if (!g) return;
  make_current(d);
  d->api.cuGraphExecDestroy(g->exec);
  free(g);
}

static int cuda_wait_on(RtDevice *base, void *stream) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  return check(d, d->api.cuEventRecord(d->joined, (CUstream)stream), "cuEventRecord(the caller's stream)") ||
                 check(d, d->api.cuStreamWaitEvent(d->stream, d->joined, 0), "cuStreamWaitEvent(the caller's stream)")
             ? -1
             : 0;
}

static int cuda_signal(RtDevice *base, void *stream) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  return check(d, d->api.cuEventRecord(d->done, d->stream), "cuEventRecord(the model's stream)") ||
                 check(d, d->api.cuStreamWaitEvent((CUstream)stream, d->done, 0),
                       "cuStreamWaitEvent(the caller's stream on the model's)")
             ? -1
             : 0;
}

static int cuda_copy(RtDevice *base, RtDevPtr dst, RtDevPtr src, uint64_t nbytes) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  return check(d, d->api.cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, nbytes, now_stream(d)),
               "cuMemcpyDtoDAsync(%llu bytes)", (unsigned long long)nbytes);
}

static int cuda_memset0(RtDevice *base, RtDevPtr dst, uint64_t nbytes) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  return check(d, d->api.cuMemsetD8Async((CUdeviceptr)dst, 0, nbytes, now_stream(d)),
               "cuMemsetD8Async(%llu bytes)", (unsigned long long)nbytes);
}

/* The version in "sm_90", "compute_90a": 90, its suffix ('a', 'f' or
 * 0) in *suffix; -1 when arch does not start with prefix. */
static int arch_version(const char *arch, const char *prefix, char *suffix) {
  size_t n = strlen(prefix);
  int v, used = 0;
  if (strncmp(arch, prefix, n) || sscanf(arch + n, "%d%n", &v, &used) != 1) return -1;
  *suffix = arch[n + (size_t)used];
  return v;
}

/* The plan's cubin of code part for this GPU: sm_90, else sm_90a
 * (arch-specific features; runs on 9.0 alone), or NULL. */
static const RtBinary *find_cubin(const RtPlan *p, int cc, uint32_t part) {
  const RtBinary *found = NULL;
  for (uint32_t i = 0; i < p->n_binaries; i++) {
    char suffix;
    if (p->binaries[i].part != part || arch_version(p->binaries[i].arch, "sm_", &suffix) != cc) continue;
    if (!suffix) return &p->binaries[i];
    if (suffix == 'a') found = &p->binaries[i];
  }
  return found;
}

/* cuModuleLoadDataEx with the JIT's error log, which says why PTX (or a
 * cubin for another arch) was refused; the log lands in log. */
static CUresult load_data(CudaDevice *d, const void *image, CUmodule *mod, char *log, size_t loglen) {
  log[0] = 0;
  CUjit_option opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *val[2] = {log, (void *)(uintptr_t)loglen};
  CUresult r = d->api.cuModuleLoadDataEx(mod, image, 2, opt, val);
  log[loglen - 1] = 0;
  return r;
}

static CUresult load_image(CudaDevice *d, const RtBinary *b, CUmodule *mod, char *log, size_t loglen) {
  /* PTX must end in NUL; the plan's size may or may not count it. */
  if (!strncmp(b->arch, "compute_", 8) && b->size && ((const char *)b->data)[b->size - 1] != 0) {
    char *s = malloc(b->size + 1);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(s, b->data, b->size);
    s[b->size] = 0;
    CUresult r = load_data(d, s, mod, log, loglen);
    free(s);
    return r;
  }
  return load_data(d, b->data, mod, log, loglen);
}

/* A failed load: the call, the driver's words, its JIT log, and the
 * versions, since a driver older than the toolkit refuses newer code. */
static int load_failed(CudaDevice *d, CUresult r, const char *what, const char *log) {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return check(d, r, "cuModuleLoadDataEx(%s; driver for CUDA %d.%d, NVRTC %d.%d)%s%.300s", what,
               d->driver_version / 1000, d->driver_version % 1000 / 10, major, minor, *log ? ": " : "", log);
}

/* Each code part's module: a matching cubin, else the newest PTX this
 * GPU can JIT, else NVRTC (the parts that need it compiled side by
 * side); the last refusal is reported when nothing else is left to try. */
static int load_modules(CudaDevice *d, const RtPlan *p, RtModule *m) {
  char log[2048] = "";
  int cc = d->cc_major * 10 + d->cc_minor;
  uint32_t parts = p->n_code_parts > 1 ? p->n_code_parts : 1;
  RtNvrtcJob *jobs = NULL;
  int n_jobs = 0, rc = -1;
  char target[16];
  for (uint32_t q = 0; q < parts; q++) {
    CUresult r = CUDA_SUCCESS;
    char tried[64] = "";
    const RtBinary *cubin = find_cubin(p, cc, q);
    if (cubin) {
      if ((r = load_image(d, cubin, &m->mods[q], log, sizeof log)) == CUDA_SUCCESS) continue;
      snprintf(tried, sizeof tried, "%.20s cubin", cubin->arch);
    }
    /* PTX JITs forward to newer GPUs, except arch-specific PTX
     * (compute_90a), which is for its own arch alone. */
    const RtBinary *ptx = NULL;
    int best = -1;
    for (uint32_t i = 0; i < p->n_binaries; i++) {
      char suffix;
      int v = arch_version(p->binaries[i].arch, "compute_", &suffix);
      if (p->binaries[i].part == q && v >= 0 && (suffix ? v == cc : v <= cc) && v > best)
        best = v, ptx = &p->binaries[i];
    }
    if (ptx) {
      if ((r = load_image(d, ptx, &m->mods[q], log, sizeof log)) == CUDA_SUCCESS) continue;
      snprintf(tried, sizeof tried, "%.20s PTX", ptx->arch);
    }
    if (!p->source) {
      if (tried[0]) {
        load_failed(d, r, tried, log);
        goto done;
      }
      rt_device_fail(&d->base, "cuda: the model has no code for this GPU (%s): no %s cubin, no PTX at or "
                               "below compute_%d, no source to compile",
                     d->arch, d->arch, cc);
      goto done;
    }
    if (!jobs) {
      if (rt_nvrtc_target(cc, target, sizeof target, d->base.error, sizeof d->base.error)) goto done;
      if (!(jobs = calloc(parts, sizeof *jobs))) {
        rt_device_fail(&d->base, "cuda: out of host memory compiling the kernels");
        goto done;
      }
    }
    jobs[n_jobs++] = (RtNvrtcJob){.arch = target, .part = (int)q};
  }
  rt_nvrtc_run_jobs(p, jobs, n_jobs);
  rc = 0;
  for (int i = 0; i < n_jobs; i++) {
    RtNvrtcJob *j = &jobs[i];
    if (rc == 0 && j->rc) rc = rt_device_fail(&d->base, "%s", j->err);
    if (rc == 0) {
      CUresult r = load_data(d, j->bin, &m->mods[j->part], log, sizeof log);
      if (r != CUDA_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "%s %s from NVRTC, %zu bytes", target,
                 strncmp(target, "sm_", 3) ? "PTX" : "cubin", j->size);
        rc = load_failed(d, r, what, log);
      }
    }
    free(j->bin);
  }
done:
  free(jobs);
  return rc;
}

/* Every step the model runs: the init steps (numbered first), then a
 * run's steps; what is checked at open holds for both lists. */
static uint32_t all_steps(const RtPlan *p) { return p->n_init_steps + p->n_steps; }
static const RtStep *step_at(const RtPlan *p, uint32_t s) {
  return s < p->n_init_steps ? &p->init_steps[s] : &p->steps[s - p->n_init_steps];
}

/* Whether the plan has an int8 GEMM (int8 true) or a float one. */
static bool has_gemm(const RtPlan *p, bool int8) {
  for (uint32_t i = 0; i < all_steps(p); i++)
    if (step_at(p, i)->kind == RT_STEP_GEMM && (step_at(p, i)->gemm.dtype == RT_DT_I8) == int8) return true;
  return false;
}

/* Grid and block within what this GPU launches (gridDim.y and .z stop
 * at 65535, blockDim.z at 64): said here, at open, with the kernel's
 * name, rather than as a bare CUDA_ERROR_INVALID_VALUE at run. */
static int check_launch_dims(CudaDevice *d, const RtPlan *p) {
  static const char axis[] = "xyz";
  for (uint32_t s = 0; s < all_steps(p); s++) {
    if (step_at(p, s)->kind != RT_STEP_LAUNCH) continue;
    const RtLaunch *l = &step_at(p, s)->launch;
    for (int a = 0; a < 3; a++) {
      if (l->grid[a] > (uint32_t)d->max_grid[a] || l->block[a] > (uint32_t)d->max_block[a])
        return rt_device_fail(&d->base,
                              "cuda: step %u launches '%s' with grid %ux%ux%u, block %ux%ux%u: %s.%c exceeds this "
                              "GPU's %d",
                              s, p->kernels[l->kernel].name, l->grid[0], l->grid[1], l->grid[2], l->block[0],
                              l->block[1], l->block[2], l->grid[a] > (uint32_t)d->max_grid[a] ? "gridDim" : "blockDim",
                              axis[a], l->grid[a] > (uint32_t)d->max_grid[a] ? d->max_grid[a] : d->max_block[a]);
    }
  }
  return 0;
}

/* Static plus dynamic shared memory above 48 KiB needs the kernel's
 * opt-in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, whose sum with
 * the static size may not exceed MAX_SHARED_MEMORY_PER_BLOCK_OPTIN). */
static int opt_in_shared(CudaDevice *d, const RtPlan *p, uint32_t k, CUfunction fn) {
  uint32_t dyn = 0;
  for (uint32_t s = 0; s < all_steps(p); s++)
    if (step_at(p, s)->kind == RT_STEP_LAUNCH && step_at(p, s)->launch.kernel == k &&
        step_at(p, s)->launch.dynamic_shared_bytes > dyn)
      dyn = step_at(p, s)->launch.dynamic_shared_bytes;
  if (!dyn) return 0;
  const char *name = p->kernels[k].name;
  int stat = 0;
  if (check(d, d->api.cuFuncGetAttribute(&stat, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn),
            "cuFuncGetAttribute('%s', static shared memory)", name))
    return -1;
  uint64_t total = (uint64_t)dyn + (uint64_t)stat;
  if (total <= 48 * 1024) return 0;
  if (total > (uint64_t)d->shared_optin)
    return rt_device_fail(&d->base,
                          "cuda: kernel '%s' needs %u bytes of dynamic and %d of static shared memory; a block on "
                          "this GPU may have %d",
                          name, dyn, stat, d->shared_optin);
  return check(d, d->api.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)dyn),
               "cuFuncSetAttribute('%s', %u bytes of dynamic shared memory)", name, dyn);
}

/* A kernel's registers bound its block (65536 per SM): the compiled
 * limit, against every launch of it, before a launch fails with
 * CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES. */
static int check_block_limit(CudaDevice *d, const RtPlan *p, uint32_t k, CUfunction fn) {
  int most = 0, regs = 0;
  const char *name = p->kernels[k].name;
  if (check(d, d->api.cuFuncGetAttribute(&most, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn),
            "cuFuncGetAttribute('%s', max threads per block)", name))
    return -1;
  for (uint32_t s = 0; s < all_steps(p); s++) {
    const RtLaunch *l = &step_at(p, s)->launch;
    if (step_at(p, s)->kind != RT_STEP_LAUNCH || l->kernel != k) continue;
    uint64_t threads = (uint64_t)l->block[0] * l->block[1] * l->block[2];
    if (threads > (uint64_t)most) {
      d->api.cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
      return rt_device_fail(&d->base,
                            "cuda: step %u launches '%s' with %llu threads a block; compiled with %d registers a "
                            "thread, it may have %d",
                            s, name, (unsigned long long)threads, regs, most);
    }
  }
  return 0;
}

/* A cooperative kernel's blocks must be resident at once, or
 * cuLaunchCooperativeKernel fails (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
 * mid-run: checked at load against the occupancy the driver computes
 * from the compiled kernel's registers and shared memory.  A chain
 * (RT_COOP_STRIDE) runs on any grid up to its launch's, so *most_blocks
 * is what the GPU holds at once (every launch of one kernel has the same
 * block); any other must fit with every launch's grid as it is
 * (*most_blocks UINT32_MAX). */
static int check_cooperative(CudaDevice *d, const RtPlan *p, uint32_t k, CUfunction fn, uint32_t *most_blocks) {
  const char *name = p->kernels[k].name;
  bool stride = p->kernels[k].cooperative == RT_COOP_STRIDE;
  if (!d->cooperative)
    return rt_device_fail(&d->base, "cuda: kernel '%s' needs a cooperative launch, which this GPU does not support%s",
                          name, stride ? " (dlcc --no-chain-launches builds its kernels as separate launches)" : "");
  *most_blocks = UINT32_MAX;
  for (uint32_t s = 0; s < all_steps(p); s++) {
    const RtLaunch *l = &step_at(p, s)->launch;
    if (step_at(p, s)->kind != RT_STEP_LAUNCH || l->kernel != k) continue;
    int per = 0, threads = (int)(l->block[0] * l->block[1] * l->block[2]);
    if (check(d, d->api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per, fn, threads, l->dynamic_shared_bytes),
              "cuOccupancyMaxActiveBlocksPerMultiprocessor('%s')", name))
      return -1;
    uint64_t blocks = (uint64_t)l->grid[0] * l->grid[1] * l->grid[2], most = (uint64_t)per * (uint64_t)d->sms;
    if (stride && per < 1)
      return rt_device_fail(&d->base,
                            "cuda: step %u launches cooperative kernel '%s' on blocks of %d threads, of which this "
                            "GPU cannot hold even one per SM; dlcc --no-chain-launches builds it as separate launches",
                            s, name, threads);
    if (stride) {
      *most_blocks = most < UINT32_MAX ? (uint32_t)most : UINT32_MAX - 1;
      return 0;
    }
    if (blocks > most)
      return rt_device_fail(&d->base,
                            "cuda: step %u launches cooperative kernel '%s' on %llu blocks of %d threads, but this "
                            "GPU holds %llu at once (%d SMs x %d); dlcc --no-persistent-rnn builds recurrent "
                            "layers without cooperative kernels",
                            s, name, (unsigned long long)blocks, threads, (unsigned long long)most, d->sms, per);
  }
  return 0;
}

static void cuda_unload(RtDevice *base, RtModule *m) {
  CudaDevice *d = (CudaDevice *)base;
  if (!m) return;
  for (uint32_t q = 0; q < RT_MAX_CODE_PARTS; q++)
    if (m->mods[q]) {
      make_current(d);
      d->api.cuModuleUnload(m->mods[q]);
    }
  free(m->fns);
  free((void *)m->names);
  free(m->cooperative);
  free(m);
}

/* The workspace of cuBLASLt and cuBLAS: allocated once, so that no call
 * allocates and the plan's calls can be captured in a CUDA graph (the
 * cuBLAS guide's condition for capture).  32 MiB is what the cuBLAS
 * guide recommends on Hopper. */
enum { LT_WORKSPACE_BYTES = 32 << 20 };

static int workspace(CudaDevice *d) {
  if (d->lt_workspace) return 0;
  return check(d, d->api.cuMemAlloc(&d->lt_workspace, LT_WORKSPACE_BYTES),
               "cuMemAlloc(%d bytes of cuBLAS workspace)", LT_WORKSPACE_BYTES);
}

/* cuBLAS works in whichever context is current when it is created (our
 * primary one), on our stream; alpha and beta are host floats. */
static int blas_setup(CudaDevice *d) {
  if (check_blas(d, cublasCreate(&d->blas), "cublasCreate")) return -1;
  return check_blas(d, cublasSetStream(d->blas, (cudaStream_t)d->stream), "cublasSetStream") ||
         check_blas(d, cublasSetPointerMode(d->blas, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode") ||
         workspace(d) ||
         check_blas(d, cublasSetWorkspace(d->blas, (void *)(uintptr_t)d->lt_workspace, LT_WORKSPACE_BYTES),
                    "cublasSetWorkspace");
}

static int lt_setup(CudaDevice *d) {
  if (check_lt(d, cublasLtCreate(&d->lt), "cublasLtCreate")) return -1;
  return workspace(d);
}

static int cuda_load(RtDevice *base, const RtPlan *p, RtModule **out) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d) || check_launch_dims(d, p)) return -1;
  RtModule *m = calloc(1, sizeof *m);
  uint32_t nk = p->n_kernels ? p->n_kernels : 1;
  if (!m || !(m->fns = calloc(nk, sizeof *m->fns)) || !(m->names = calloc(nk, sizeof *m->names)) ||
      !(m->cooperative = calloc(nk, sizeof *m->cooperative))) {
    if (m) free(m->fns), free((void *)m->names);
    free(m);
    return rt_device_fail(base, "cuda: out of host memory loading the kernels");
  }
  m->n = p->n_kernels;
  const char **names = (const char **)m->names;
  if (p->n_kernels && load_modules(d, p, m)) goto fail;
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    const char *name = names[i] = p->kernels[i].name;
    if (check(d, d->api.cuModuleGetFunction(&m->fns[i], m->mods[p->kernels[i].part], name),
              "cuModuleGetFunction('%s')", name) ||
        check_block_limit(d, p, i, m->fns[i]) || opt_in_shared(d, p, i, m->fns[i]))
      goto fail;
    if (p->kernels[i].cooperative && check_cooperative(d, p, i, m->fns[i], &m->cooperative[i])) goto fail;
  }
  if (has_gemm(p, true) && !d->blas && blas_setup(d)) goto fail;
  if (has_gemm(p, false) && !d->lt && lt_setup(d)) goto fail;
  *out = m;
  return 0;
fail:
  cuda_unload(base, m);
  return -1;
}

/* args[i] points at the value of parameter i, with the parameter's exact
 * size (an int is 4 bytes, a long long or pointer 8): the driver copies
 * each from there at the call, so they need not outlive it. */
static int cuda_launch(RtDevice *base, RtModule *m, const RtLaunch *l, const void *const *args) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  if (l->kernel >= m->n) return rt_device_fail(base, "cuda: kernel index %u out of range", l->kernel);
  uint32_t most = m->cooperative[l->kernel];
  if (most) {
    uint32_t gx = l->grid[0] < most ? l->grid[0] : most; /* a chain's blocks walk the launch's */
    return check(d,
                 d->api.cuLaunchCooperativeKernel(m->fns[l->kernel], gx, l->grid[1], l->grid[2], l->block[0],
                                                  l->block[1], l->block[2], l->dynamic_shared_bytes, now_stream(d),
                                                  (void **)args),
                 "cuLaunchCooperativeKernel('%s', grid %ux%ux%u, block %ux%ux%u, %u bytes of dynamic shared memory)",
                 m->names[l->kernel], gx, l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2],
                 l->dynamic_shared_bytes);
  }
  return check(d,
               d->api.cuLaunchKernel(m->fns[l->kernel], l->grid[0], l->grid[1], l->grid[2], l->block[0],
                                     l->block[1], l->block[2], l->dynamic_shared_bytes, now_stream(d),
                                     (void **)args, NULL),
               "cuLaunchKernel('%s', grid %ux%ux%u, block %ux%ux%u, %u bytes of dynamic shared memory)",
               m->names[l->kernel], l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2],
               l->dynamic_shared_bytes);
}

/* int8: i8 A and B, i32 C, exact int32 sums (CUBLAS_COMPUTE_32I, int32
 * alpha and beta).  cuBLAS takes this only with alpha and beta 0 or 1, A
 * and B 32-bit aligned and lda, ldb multiples of 4 (the cuBLAS guide on
 * cublasGemmEx); codegen gives every other shape a kernel of its own, so
 * a GEMM here that breaks them is a bad plan, said before cuBLAS would
 * answer NOT_SUPPORTED.  x is in cuBLAS's terms: its A is our B. */
static int cuda_gemm_i8(CudaDevice *d, const RtGemm *g, const RtBlasGemm *x, RtDevPtr a, RtDevPtr b,
                        RtDevPtr c) {
  bool strides_ok = x->batch <= 1 || (x->stride_a % 4 == 0 && x->stride_b % 4 == 0);
  if (x->lda % 4 || x->ldb % 4 || a % 4 || b % 4 || !strides_ok || g->alpha != 1.0f || g->beta != 0.0f)
    return rt_device_fail(&d->base,
                          "cublas: int8 gemm m=%lld n=%lld k=%lld (ld %lld,%lld, batch strides %lld,%lld) breaks "
                          "cuBLAS's int8 rules: lda, ldb and strides multiples of 4, A and B 4-byte aligned, "
                          "alpha 1, beta 0",
                          (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->lda, (long long)g->ldb,
                          (long long)g->stride_a, (long long)g->stride_b);
  if (d->blas_stream != d->side) { /* cuBLAS follows the stream: its stream and workspace */
    if (check_blas(d, cublasSetStream(d->blas, (cudaStream_t)now_stream(d)), "cublasSetStream") ||
        check_blas(d, cublasSetWorkspace(d->blas, (void *)(uintptr_t)now_workspace(d), LT_WORKSPACE_BYTES),
                   "cublasSetWorkspace"))
      return -1;
    d->blas_stream = d->side;
  }
  int32_t alpha = 1, beta = 0;
  cublasStatus_t s = cublasGemmStridedBatchedEx(
      d->blas, x->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, x->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, x->m, x->n, x->k,
      &alpha, (const void *)(uintptr_t)b, CUDA_R_8I, x->lda, x->stride_a, (const void *)(uintptr_t)a, CUDA_R_8I,
      x->ldb, x->stride_b, &beta, (void *)(uintptr_t)c, CUDA_R_32I, x->ldc, x->stride_c, x->batch,
      CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
  char what[160];
  snprintf(what, sizeof what, "cublasGemmStridedBatchedEx(int8, m=%lld n=%lld k=%lld batch=%lld)", (long long)g->m,
           (long long)g->n, (long long)g->k, (long long)g->batch);
  return check_blas(d, s, what);
}

/* ---- float products on cuBLASLt ----
 * One setup per distinct GEMM (its descriptor, layouts and the
 * heuristic's algorithm), made at its first call and reused: the
 * heuristic costs tens of microseconds, and fixed setups are what a CUDA
 * graph captures.  Distinct means the same sizes, types and epilogue,
 * and the same alignment of every pointer: the heuristic is told each
 * (its default assumes 256 bytes), so that no algorithm is chosen that
 * would read a less aligned matrix wrongly. */
typedef struct LtKey {
  uint32_t dtype, epilogue, trans_a, trans_b; /* cuBLAS's terms (RtBlasGemm) */
  int32_t m, n, k, lda, ldb, ldc, batch, tf32;
  int64_t stride_a, stride_b, stride_c;
  int64_t stride_bias; /* the plan's, in elements (cuBLASLt's BIAS_BATCH_STRIDE) */
  uint32_t align[4];   /* of cuBLAS's A, B, C and the bias, in bytes */
} LtKey;
_Static_assert(sizeof(LtKey) == 96, "LtKey has no padding: keys compare with memcmp");

typedef struct LtGemm {
  LtKey key;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
} LtGemm;

static void lt_gemm_free(LtGemm *e) {
  if (e->desc) cublasLtMatmulDescDestroy(e->desc);
  if (e->a) cublasLtMatrixLayoutDestroy(e->a);
  if (e->b) cublasLtMatrixLayoutDestroy(e->b);
  if (e->c) cublasLtMatrixLayoutDestroy(e->c);
}

static void lt_release(CudaDevice *d) {
  for (int i = 0; i < d->n_lt_gemms; i++) lt_gemm_free(&d->lt_gemms[i]);
  free(d->lt_gemms);
  if (d->lt) cublasLtDestroy(d->lt);
  if (d->lt_workspace) d->api.cuMemFree(d->lt_workspace);
}

/* The largest power of two up to 256 dividing the address of every
 * batch's matrix: p, and p plus multiples of the batch stride. */
static uint32_t alignment(RtDevPtr p, long long stride, int batch, size_t esize) {
  uint64_t bits = (uint64_t)p | (batch > 1 ? (uint64_t)stride * esize : 0) | 256;
  return (uint32_t)(bits & (~bits + 1));
}

static cublasLtEpilogue_t lt_epilogue(uint32_t e) {
  switch (e) {
  case RT_EPILOGUE_BIAS: return CUBLASLT_EPILOGUE_BIAS;
  case RT_EPILOGUE_RELU_BIAS: return CUBLASLT_EPILOGUE_RELU_BIAS;
  case RT_EPILOGUE_GELU_BIAS: return CUBLASLT_EPILOGUE_GELU_BIAS;
  /* cuBLAS's B is the plan's A (rt_gemm_to_blas): the sums over k of its
   * columns, one per column of cuBLAS's D */
  case RT_EPILOGUE_BGRAD: return CUBLASLT_EPILOGUE_BGRADB;
  default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

static const char *const epilogue_names[] = {"none", "bias", "relu+bias", "gelu+bias", "bgrad"};
_Static_assert(sizeof epilogue_names / sizeof epilogue_names[0] == RT_EPILOGUE_COUNT, "a name per epilogue");

/* A column-major rows x cols layout with leading dimension ld, batched. */
static int lt_layout(CudaDevice *d, cublasLtMatrixLayout_t *l, cudaDataType t, int rows, int cols, int ld,
                     int batch, long long stride) {
  if (check_lt(d, cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld), "cublasLtMatrixLayoutCreate"))
    return -1;
  if (batch <= 1) return 0;
  int32_t count = batch;
  int64_t offset = stride;
  return check_lt(d, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                  "cublasLtMatrixLayoutSetAttribute(batch count)") ||
         check_lt(d,
                  cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
                                                   sizeof offset),
                  "cublasLtMatrixLayoutSetAttribute(batch stride)");
}

static int lt_desc_set(CudaDevice *d, LtGemm *e, cublasLtMatmulDescAttributes_t attr, const void *v, size_t size,
                       const char *what) {
  char call[96];
  snprintf(call, sizeof call, "cublasLtMatmulDescSetAttribute(%s)", what);
  return check_lt(d, cublasLtMatmulDescSetAttribute(e->desc, attr, v, size), call);
}

/* f32, f16, bf16 in and out, f32 compute and scale.  CUBLAS_COMPUTE_32F
 * never uses TF32, so f32 meets 1e-5, unless the plan's gemm says tf32
 * (--tf32): then CUBLAS_COMPUTE_32F_FAST_TF32; f16 and bf16 run on
 * tensor cores.  Split-K partial sums are kept
 * in the compute type (the reduction scheme mask), never rounded to the
 * half output type on the way. */
static int lt_gemm_make(CudaDevice *d, LtGemm *e, const void *bias) {
  const LtKey *k = &e->key;
  cudaDataType t = k->dtype == RT_DT_F16 ? CUDA_R_16F : k->dtype == RT_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasComputeType_t compute = k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  if (check_lt(d, cublasLtMatmulDescCreate(&e->desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate"))
    return -1;
  int32_t ta = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  uint32_t epi = (uint32_t)lt_epilogue(k->epilogue);
  /* cublasLt.h: int64_t, in elements, read when D is batched. */
  int64_t bias_stride = k->stride_bias;
  if (lt_desc_set(d, e, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta, "transa") ||
      lt_desc_set(d, e, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb, "transb") ||
      (k->epilogue && (lt_desc_set(d, e, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, "epilogue") ||
                       lt_desc_set(d, e, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias, "bias"))) ||
      (k->epilogue && k->batch > 1 &&
       lt_desc_set(d, e, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride, sizeof bias_stride, "bias batch stride")))
    return -1;
  /* Column-major: A is m x k (stored k x m with op T), B k x n, C m x n. */
  if (lt_layout(d, &e->a, t, k->trans_a ? k->k : k->m, k->trans_a ? k->m : k->k, k->lda, k->batch, k->stride_a) ||
      lt_layout(d, &e->b, t, k->trans_b ? k->n : k->k, k->trans_b ? k->k : k->n, k->ldb, k->batch, k->stride_b) ||
      lt_layout(d, &e->c, t, k->m, k->n, k->ldc, k->batch, k->stride_c))
    return -1;
  cublasLtMatmulPreference_t pref = NULL;
  if (check_lt(d, cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate")) return -1;
  uint64_t ws = LT_WORKSPACE_BYTES;
  uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  const struct {
    cublasLtMatmulPreferenceAttributes_t attr;
    const void *v;
    size_t size;
  } prefs[] = {{CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws},
               {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof reduction},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->align[0], sizeof k->align[0]},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->align[1], sizeof k->align[1]},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->align[2], sizeof k->align[2]},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->align[2], sizeof k->align[2]}};
  int rc = 0;
  for (size_t i = 0; i < sizeof prefs / sizeof prefs[0] && !rc; i++)
    rc = check_lt(d, cublasLtMatmulPreferenceSetAttribute(pref, prefs[i].attr, prefs[i].v, prefs[i].size),
                  "cublasLtMatmulPreferenceSetAttribute");
  cublasLtMatmulHeuristicResult_t found;
  int n_found = 0;
  if (!rc)
    rc = check_lt(d, cublasLtMatmulAlgoGetHeuristic(d->lt, e->desc, e->a, e->b, e->c, e->c, pref, 1, &found, &n_found),
                  "cublasLtMatmulAlgoGetHeuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  if (rc) return -1;
  if (n_found < 1 || found.state != CUBLAS_STATUS_SUCCESS)
    return rt_device_fail(&d->base,
                          "cublasLt: no algorithm for a %s gemm m=%d n=%d k=%d (cuBLAS's terms, trans %c%c, "
                          "ld %d,%d,%d, batch %d, epilogue %s, alignments %u,%u,%u,%u bytes)",
                          k->dtype == RT_DT_F16 ? "f16" : k->dtype == RT_DT_BF16 ? "bf16" : "f32", k->m, k->n, k->k,
                          k->trans_a ? 'T' : 'N', k->trans_b ? 'T' : 'N', k->lda, k->ldb, k->ldc, k->batch,
                          epilogue_names[k->epilogue], k->align[0], k->align[1], k->align[2], k->align[3]);
  e->algo = found.algo;
  return 0;
}

static LtGemm *lt_gemm_for(CudaDevice *d, const LtKey *key, const void *bias) {
  for (int i = 0; i < d->n_lt_gemms; i++)
    if (!memcmp(&d->lt_gemms[i].key, key, sizeof *key)) return &d->lt_gemms[i];
  if (d->n_lt_gemms == d->cap_lt_gemms) {
    int cap = d->cap_lt_gemms ? 2 * d->cap_lt_gemms : 16;
    LtGemm *grown = realloc(d->lt_gemms, sizeof *grown * (size_t)cap);
    if (!grown) {
      rt_device_fail(&d->base, "cuda: out of host memory for cuBLASLt's setups");
      return NULL;
    }
    d->lt_gemms = grown;
    d->cap_lt_gemms = cap;
  }
  LtGemm *e = &d->lt_gemms[d->n_lt_gemms];
  memset(e, 0, sizeof *e);
  e->key = *key;
  if (lt_gemm_make(d, e, bias)) {
    lt_gemm_free(e);
    return NULL;
  }
  d->n_lt_gemms++;
  return e;
}

static int cuda_gemm(RtDevice *base, const RtGemm *g, RtDevPtr a, RtDevPtr b, RtDevPtr c, RtDevPtr c_in,
                     RtDevPtr bias) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  RtBlasGemm x;
  if (rt_gemm_to_blas(g, &x, d->base.error, sizeof d->base.error)) return -1;
  if (g->dtype == RT_DT_I8) {
    if (!d->blas) return rt_device_fail(base, "cuda: gemm before cuBLAS was set up (plan loaded?)");
    return cuda_gemm_i8(d, g, &x, a, b, c);
  }
  if (!d->lt) return rt_device_fail(base, "cuda: gemm before cuBLASLt was set up (plan loaded?)");
  if (g->epilogue >= RT_EPILOGUE_COUNT) return rt_device_fail(base, "cuda: gemm epilogue %u is unknown", g->epilogue);
  size_t es = g->dtype == RT_DT_F32 ? 4 : 2;
  /* cuBLASLt reads C (c_in: a residual, or D itself) and writes D (c)
   * through one layout; one alignment serves both, the lesser. */
  if (g->beta == 0.0f) c_in = c;
  uint32_t align_c = alignment(c, x.stride_c, x.batch, es), align_cin = alignment(c_in, x.stride_c, x.batch, es);
  LtKey key = {.dtype = g->dtype, .epilogue = g->epilogue, .trans_a = (uint32_t)x.trans_a,
                .trans_b = (uint32_t)x.trans_b, .m = x.m, .n = x.n, .k = x.k, .lda = x.lda, .ldb = x.ldb,
                .ldc = x.ldc, .batch = x.batch, .tf32 = g->tf32 != 0, .stride_a = x.stride_a, .stride_b = x.stride_b,
                .stride_c = x.stride_c, .stride_bias = g->epilogue ? g->stride_bias : 0,
                /* cuBLAS's A is the plan's b, its B the plan's a */
                .align = {alignment(b, x.stride_a, x.batch, es), alignment(a, x.stride_b, x.batch, es),
                          align_c < align_cin ? align_c : align_cin,
                          g->epilogue ? alignment(bias, g->stride_bias, x.batch, es) : 0}};
  const void *bias_p = (const void *)(uintptr_t)bias;
  LtGemm *e = lt_gemm_for(d, &key, bias_p);
  if (!e) return -1;
  /* The setup may be another step's of the same shape: its bias pointer. */
  if (g->epilogue && lt_desc_set(d, e, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_p, sizeof bias_p, "bias"))
    return -1;
  float alpha = g->alpha, beta = g->beta;
  cublasStatus_t s =
      cublasLtMatmul(d->lt, e->desc, &alpha, (const void *)(uintptr_t)b, e->a, (const void *)(uintptr_t)a, e->b, &beta,
                     (const void *)(uintptr_t)c_in, e->c, (void *)(uintptr_t)c, e->c, &e->algo,
                     (void *)(uintptr_t)now_workspace(d), LT_WORKSPACE_BYTES, (cudaStream_t)now_stream(d));
  char what[200];
  snprintf(what, sizeof what, "cublasLtMatmul(%s, m=%lld n=%lld k=%lld batch=%lld, epilogue %s%s)",
           g->dtype == RT_DT_F16 ? "f16" : g->dtype == RT_DT_BF16 ? "bf16" : g->tf32 ? "f32 tf32" : "f32", (long long)g->m, (long long)g->n,
           (long long)g->k, (long long)g->batch, epilogue_names[g->epilogue], c_in != c ? ", + C" : "");
  return check_lt(d, s, what);
}

/* ---- side streams (device.h): made before a capture, used in it ---- */

static int cuda_prepare_streams(RtDevice *base, int streams, int events) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  if (streams > RT_SIDE_STREAMS || events > RT_STREAM_EVENTS)
    return rt_device_fail(base, "cuda: %d streams and %d events (at most %d and %d)", streams, events, RT_SIDE_STREAMS,
                          RT_STREAM_EVENTS);
  for (int b = 1; b < streams; b++) {
    if (!d->side_stream[b] &&
        check(d, d->api.cuStreamCreate(&d->side_stream[b], CU_STREAM_NON_BLOCKING), "cuStreamCreate(stream %d)", b))
      return -1;
    /* two GEMMs side by side may not share a workspace */
    if ((d->blas || d->lt) && !d->side_workspace[b] &&
        check(d, d->api.cuMemAlloc(&d->side_workspace[b], LT_WORKSPACE_BYTES),
              "cuMemAlloc(%d bytes of cuBLAS workspace for stream %d)", LT_WORKSPACE_BYTES, b))
      return -1;
  }
  if (!d->stream_events && !(d->stream_events = calloc(RT_STREAM_EVENTS, sizeof *d->stream_events)))
    return rt_device_fail(base, "cuda: out of host memory for stream events");
  for (; d->n_stream_events < events; d->n_stream_events++)
    if (check(d, d->api.cuEventCreate(&d->stream_events[d->n_stream_events], CU_EVENT_DISABLE_TIMING),
              "cuEventCreate(stream event %d)", d->n_stream_events))
      return -1;
  return 0;
}

static int stream_ok(CudaDevice *d, int b, int e) {
  if (d->base.broken) return -1;
  if (b < 0 || b >= RT_SIDE_STREAMS || (b && !d->side_stream[b]))
    return rt_device_fail(&d->base, "cuda: stream %d was not prepared", b);
  if (e >= d->n_stream_events) return rt_device_fail(&d->base, "cuda: stream event %d was not prepared", e);
  return 0;
}

static int cuda_use_stream(RtDevice *base, int b) {
  CudaDevice *d = (CudaDevice *)base;
  if (stream_ok(d, b, -1)) return -1;
  d->side = b;
  return 0;
}

static int cuda_stream_mark(RtDevice *base, int e, int b) {
  CudaDevice *d = (CudaDevice *)base;
  if (stream_ok(d, b, e) || e < 0) return e < 0 ? rt_device_fail(base, "cuda: stream event %d", e) : -1;
  return check(d, d->api.cuEventRecord(d->stream_events[e], b ? d->side_stream[b] : d->stream),
               "cuEventRecord(stream %d, event %d)", b, e);
}

static int cuda_stream_wait(RtDevice *base, int e, int b) {
  CudaDevice *d = (CudaDevice *)base;
  if (stream_ok(d, b, e) || e < 0) return e < 0 ? rt_device_fail(base, "cuda: stream event %d", e) : -1;
  return check(d, d->api.cuStreamWaitEvent(b ? d->side_stream[b] : d->stream, d->stream_events[e], 0),
               "cuStreamWaitEvent(stream %d, event %d)", b, e);
}

/* Lane 1 and the events, made at the first overlapped run. */
static int lanes(CudaDevice *d) {
  if (enter(d)) return -1;
  if (!d->copy && check(d, d->api.cuStreamCreate(&d->copy, CU_STREAM_NON_BLOCKING), "cuStreamCreate(copies)"))
    return -1;
  for (int i = 0; i < RT_EVENTS; i++)
    if (!d->marks[i] && check(d, d->api.cuEventCreate(&d->marks[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate"))
      return -1;
  return 0;
}

static CUstream lane_stream(CudaDevice *d, int lane) { return lane ? d->copy : d->stream; }

static int cuda_lane_copy(RtDevice *base, bool up, void *host, RtDevPtr dev, uint64_t nbytes) {
  CudaDevice *d = (CudaDevice *)base;
  if (lanes(d)) return -1;
  if (up)
    return check(d, d->api.cuMemcpyHtoDAsync((CUdeviceptr)dev, host, nbytes, d->copy),
                 "cuMemcpyHtoDAsync(%llu bytes, copy stream)", (unsigned long long)nbytes);
  return check(d, d->api.cuMemcpyDtoHAsync(host, (CUdeviceptr)dev, nbytes, d->copy),
               "cuMemcpyDtoHAsync(%llu bytes, copy stream)", (unsigned long long)nbytes);
}

static int cuda_mark(RtDevice *base, int e, int lane) {
  CudaDevice *d = (CudaDevice *)base;
  if (lanes(d)) return -1;
  return check(d, d->api.cuEventRecord(d->marks[e], lane_stream(d, lane)), "cuEventRecord(event %d)", e);
}

static int cuda_wait_mark(RtDevice *base, int e, int lane) {
  CudaDevice *d = (CudaDevice *)base;
  if (lanes(d)) return -1;
  return check(d, d->api.cuStreamWaitEvent(lane_stream(d, lane), d->marks[e], 0), "cuStreamWaitEvent(event %d)", e);
}

static int cuda_sync_mark(RtDevice *base, int e) {
  CudaDevice *d = (CudaDevice *)base;
  if (lanes(d)) return -1;
  return check(d, d->api.cuEventSynchronize(d->marks[e]), "cuEventSynchronize(event %d: a kernel or copy failed)", e);
}

/* The step clock (dlrt_profile): timing events on the device's stream,
 * one per point, kept for the next profile. */
static int cuda_clock_mark(RtDevice *base, uint32_t i) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  if (i >= d->n_clock) {
    CUevent *grown = realloc(d->clock, (i + 1) * sizeof *grown);
    if (!grown) return rt_device_fail(base, "cuda: out of host memory for %u timing events", i + 1);
    d->clock = grown;
    while (d->n_clock <= i) {
      if (check(d, d->api.cuEventCreate(&d->clock[d->n_clock], CU_EVENT_DEFAULT), "cuEventCreate (timing)"))
        return -1;
      d->n_clock++;
    }
  }
  return check(d, d->api.cuEventRecord(d->clock[i], now_stream(d)), "cuEventRecord (step clock %u)", i);
}

static int cuda_clock_read(RtDevice *base, uint32_t n, double *us) {
  CudaDevice *d = (CudaDevice *)base;
  if (enter(d)) return -1;
  if (n >= d->n_clock && n) return rt_device_fail(base, "cuda: the step clock has %u points, not %u", d->n_clock, n + 1);
  for (uint32_t i = 0; i < n; i++) {
    float ms = 0;
    if (check(d, d->api.cuEventElapsedTime(&ms, d->clock[i], d->clock[i + 1]), "cuEventElapsedTime (step clock %u)",
              i))
      return -1;
    us[i] = 1000.0 * (double)ms;
  }
  return 0;
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
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .upload_async = cuda_upload_async,
    .download_async = cuda_download_async,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .wait_on = cuda_wait_on,
    .signal = cuda_signal,
    .lane_copy = cuda_lane_copy,
    .mark = cuda_mark,
    .wait_mark = cuda_wait_mark,
    .sync_mark = cuda_sync_mark,
    .prepare_streams = cuda_prepare_streams,
    .use_stream = cuda_use_stream,
    .stream_mark = cuda_stream_mark,
    .stream_wait = cuda_stream_wait,
    .clock_mark = cuda_clock_mark,
    .clock_read = cuda_clock_read,
};

static int attribute(CudaDevice *d, int *v, CUdevice_attribute a, const char *what) {
  return check(d, d->api.cuDeviceGetAttribute(v, a, d->dev), "cuDeviceGetAttribute(%s)", what);
}

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
  int count = 0;
  if (check(d, d->api.cuInit(0), "cuInit") ||
      check(d, d->api.cuDriverGetVersion(&d->driver_version), "cuDriverGetVersion") ||
      check(d, d->api.cuDeviceGetCount(&count), "cuDeviceGetCount"))
    goto fail;
  if (count == 0) {
    rt_device_fail(&d->base, "cuda: the driver (version %d) sees no GPU", d->driver_version);
    goto fail;
  }
  if (check(d, d->api.cuDeviceGet(&d->dev, 0), "cuDeviceGet(0)") ||
      attribute(d, &d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability") ||
      attribute(d, &d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability") ||
      attribute(d, &d->max_block[0], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, "max block x") ||
      attribute(d, &d->max_block[1], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, "max block y") ||
      attribute(d, &d->max_block[2], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, "max block z") ||
      attribute(d, &d->max_grid[0], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, "max grid x") ||
      attribute(d, &d->max_grid[1], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, "max grid y") ||
      attribute(d, &d->max_grid[2], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, "max grid z") ||
      attribute(d, &d->shared_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "shared memory opt-in") ||
      attribute(d, &d->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessors") ||
      attribute(d, &d->cooperative, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, "cooperative launch"))
    goto fail;
  snprintf(d->arch, sizeof d->arch, "sm_%d%d", d->cc_major, d->cc_minor);
  CUresult retained = d->api.cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
  pthread_mutex_lock(&open_lock);
  bool faulted = process_faulted;
  CUresult reset = reset_result;
  pthread_mutex_unlock(&open_lock);
  if (retained != CUDA_SUCCESS && is_sticky(retained) && faulted) {
    const char *name = NULL;
    if (!d->api.cuGetErrorName || d->api.cuGetErrorName(retained, &name) != CUDA_SUCCESS) name = NULL;
    char after_reset[64] = "";
    if (reset) snprintf(after_reset, sizeof after_reset, "; resetting the context failed: CUDA error %d", (int)reset);
    d->ctx = NULL;
    rt_device_fail(&d->base,
                   "cuda: the GPU is unusable to this process since an earlier model's kernel fault (%s%s): CUDA "
                   "recovers from such an error only in a new process; run again",
                   name ? name : "a sticky error", after_reset);
    goto fail;
  }
  if (check(d, retained, "cuDevicePrimaryCtxRetain")) goto fail;
  pthread_mutex_lock(&open_lock);
  open_devices++;
  pthread_mutex_unlock(&open_lock);
  if (check(d, make_current(d), "cuCtxSetCurrent") ||
      check(d, d->api.cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
      check(d, d->api.cuEventCreate(&d->joined, CU_EVENT_DISABLE_TIMING), "cuEventCreate") ||
      check(d, d->api.cuEventCreate(&d->done, CU_EVENT_DISABLE_TIMING), "cuEventCreate"))
    goto fail;
  return &d->base;
fail:
  snprintf(err, errlen, "%s", d->base.error);
  cuda_destroy(&d->base);
  return NULL;
}

#endif
