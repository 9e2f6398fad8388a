/* A stand-in for libcuda.so.1 so that runtime/cuda.c runs on machines
 * without a GPU: the driver entry points cuda.c loads, over host memory,
 * with an H200's limits (compute capability 9.0, 227 KiB of opt-in
 * shared memory per block, gridDim.y/z up to 65535).  Kernels do not run
 * (launches are counted); copies and memsets are real.  Failures and
 * kernel properties on demand through the environment:
 *   FAKECUDA_MEM_LIMIT=N      cuMemAlloc beyond N bytes in total: out of memory
 *   FAKECUDA_SYNC_ERROR=E     cuStreamSynchronize returns CUresult E
 *   FAKECUDA_STATIC_SHARED=N  every kernel has N bytes of static shared memory
 *   FAKECUDA_MAX_THREADS=N    ... and launches at most N threads a block (1024)
 *   FAKECUDA_NUM_REGS=N       ... using N registers a thread (32)
 *   FAKECUDA_NO_PINNED=1      cuMemHostAlloc fails (out of memory)
 *   FAKECUDA_CAPTURE_ERROR=E  cuStreamEndCapture returns CUresult E
 *   FAKECUDA_FAIL_CAPTURED_LAUNCH=N  the Nth launch inside a capture fails
 *                             (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
 * Stream capture records kernels, device copies and memsets into a
 * graph instead of running them; cuGraphLaunch runs the copies and
 * memsets and counts the kernels.  Streams the fake made take part in a
 * capture as CUDA's do: the origin, and any stream that waits for an
 * event recorded on a stream taking part; the capture ends with
 * CUDA_ERROR_STREAM_CAPTURE_UNJOINED unless the origin follows every
 * call of every such stream through its waits.  Stricter than the
 * driver: a call on another stream during a capture (CUDA would run it
 * at once, outside the graph) fails with
 * CUDA_ERROR_STREAM_CAPTURE_ISOLATION.  Every entry point of interest counts
 * its calls (fakecuda_calls("cuLaunchKernel")). */
#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct CUctx_st {
  int unused;
};
enum { MAX_STREAMS = 64, MAX_EVENTS = 8192 };
/* clock[k]: the last call of stream k this stream is known to follow. */
struct CUstream_st {
  bool used, capturing;
  int calls;
  int clock[MAX_STREAMS];
};
struct CUmod_st {
  void *image;
  size_t size;
};
struct CUfunc_st {
  int unused;
};
struct CUevent_st {
  bool captured;
  int clock[MAX_STREAMS];
};
static struct CUstream_st streams[MAX_STREAMS];
static int n_streams;
static struct CUevent_st events[MAX_EVENTS];
static int n_events;
/* One of ours, or NULL (the caller's, or the legacy default). */
static struct CUstream_st *ours(CUstream s) {
  return s >= streams && s < streams + n_streams ? s : NULL;
}

/* One recorded call of a capture. */
typedef struct Node {
  int kind; /* 0 kernel, 1 copy, 2 memset */
  void *dst;
  const void *src;
  size_t n;
} Node;
struct CUgraph_st {
  Node *nodes;
  int n;
};
struct CUgraphExec_st {
  struct CUgraph_st g;
};
static struct CUgraph_st *capturing;
static int graph_kernels;
/* Launches outside a capture on a stream other than the last capture's
 * origin (the device's stream): work the host would not wait for. */
static CUstream origin;
static int stray_launches, captured_launches;

/* A call queued on s during a capture: s must take part. */
static CUresult captured_call(CUstream s) {
  struct CUstream_st *st = ours(s);
  if (!st || !st->capturing) return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  st->clock[st - streams] = ++st->calls;
  return CUDA_SUCCESS;
}

/* Calls counted by name, for the tests. */
static const char *const counted[] = {"cuCtxSetCurrent",   "cuLaunchKernel",       "cuGraphLaunch",
                                      "cuStreamSynchronize", "cuMemcpyHtoDAsync",  "cuMemcpyDtoHAsync",
                                      "cuMemcpyDtoDAsync", "cuStreamBeginCapture", "cuGraphInstantiate",
                                      "cuMemHostAlloc",    "cuStreamWaitEvent",    "cuEventRecord",
                                      "cuEventSynchronize", "cuLaunchCooperativeKernel",
                                      "cuOccupancyMaxActiveBlocksPerMultiprocessor"};
enum { N_COUNTED = sizeof counted / sizeof counted[0] };
static int counts[N_COUNTED];
static void count(const char *name) {
  for (int i = 0; i < N_COUNTED; i++)
    if (!strcmp(counted[i], name)) counts[i]++;
}
/* Calls of name so far (-1: not counted); kernels run by graphs ("graph
 * kernels"); launches outside a capture on a stream other than the last
 * capture's origin ("stray launches"). */
int fakecuda_calls(const char *name);
int fakecuda_calls(const char *name) {
  if (!strcmp(name, "graph kernels")) return graph_kernels;
  if (!strcmp(name, "stray launches")) return stray_launches;
  for (int i = 0; i < N_COUNTED; i++)
    if (!strcmp(counted[i], name)) return counts[i];
  return -1;
}
static void record(int kind, void *dst, const void *src, size_t n) {
  struct CUgraph_st *g = capturing;
  Node *grown = realloc(g->nodes, sizeof *grown * (size_t)(g->n + 1));
  if (!grown) return;
  g->nodes = grown;
  g->nodes[g->n++] = (Node){kind, dst, src, n};
}

static struct CUctx_st ctx;
static struct CUfunc_st func;
static size_t allocated;
static int launches;
static int max_dynamic_shared = -1;
static int resets;

/* For the tests: how many kernels were launched; the last opt-in to
 * dynamic shared memory (-1: none). */
int fakecuda_launches(void);
int fakecuda_launches(void) { return launches; }
int fakecuda_max_dynamic_shared(void);
int fakecuda_max_dynamic_shared(void) { return max_dynamic_shared; }
int fakecuda_resets(void);
int fakecuda_resets(void) { return resets; }

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
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 0x7fffffff; break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
  case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: *v = 1; break;
  default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  *c = &ctx;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice d) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice d) {
  resets++;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSetCurrent(CUcontext c) {
  count("cuCtxSetCurrent");
  return CUDA_SUCCESS;
}

/* Honours the error log options as the driver does: the log, and its
 * length written back into the size option's slot. */
CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n, CUjit_option *opt, void **val) {
  /* A cubin is an ELF file; PTX is text starting with a comment or .version. */
  if (memcmp(image, "\x7f" "ELF", 4) && !strstr(image, ".version")) {
    char *log = NULL;
    size_t cap = 0;
    for (unsigned i = 0; i < n; i++) {
      if (opt[i] == CU_JIT_ERROR_LOG_BUFFER) log = val[i];
      if (opt[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) cap = (size_t)(uintptr_t)val[i];
    }
    if (log && cap) {
      snprintf(log, cap, "fake: the image is neither ELF nor PTX");
      for (unsigned i = 0; i < n; i++)
        if (opt[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) val[i] = (void *)(uintptr_t)(strlen(log) + 1);
    }
    return CUDA_ERROR_INVALID_IMAGE;
  }
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
/* A cubin's symbol table holds "name\0"; PTX declares ".entry name(". */
CUresult CUDAAPI cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  char entry[512];
  snprintf(entry, sizeof entry, ".entry %s(", name);
  bool elf = !memcmp(m->image, "\x7f" "ELF", 4);
  if (elf ? !memmem(m->image, m->size, name, strlen(name) + 1) : !strstr(m->image, entry)) return CUDA_ERROR_NOT_FOUND;
  *f = &func;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
  const char *e = getenv(a == CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES ? "FAKECUDA_STATIC_SHARED"
                         : a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? "FAKECUDA_MAX_THREADS"
                         : "FAKECUDA_NUM_REGS");
  switch (a) {
  case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = e ? atoi(e) : 0; return CUDA_SUCCESS;
  case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = e ? atoi(e) : 1024; return CUDA_SUCCESS;
  case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = e ? atoi(e) : 32; return CUDA_SUCCESS;
  default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}
CUresult CUDAAPI cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  if (a != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return CUDA_ERROR_NOT_SUPPORTED;
  max_dynamic_shared = v;
  return CUDA_SUCCESS;
}
/* A launch, recorded while capturing, else counted under name. */

static CUresult launch(const char *name, CUstream s) {
  if (capturing) {
    const char *fail = getenv("FAKECUDA_FAIL_CAPTURED_LAUNCH");
    if (fail && ++captured_launches == atoi(fail)) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    CUresult r = captured_call(s);
    if (r == CUDA_SUCCESS) record(0, NULL, NULL, 0);
    return r;
  }
  count(name);
  launches++;
  if (origin && s != origin) stray_launches++;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned shared, CUstream s, void **params, void **extra) {
  return launch("cuLaunchKernel", s);
}

/* FAKECUDA_BLOCKS_PER_SM: the occupancy the driver reports (default 1). */
CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int threads, size_t shared) {
  const char *e = getenv("FAKECUDA_BLOCKS_PER_SM");
  count("cuOccupancyMaxActiveBlocksPerMultiprocessor");
  *n = e ? atoi(e) : 1;
  return CUDA_SUCCESS;
}
/* The x of the last cooperative launch's grid (fakecuda_coop_grid_x). */
static unsigned coop_grid_x;
unsigned fakecuda_coop_grid_x(void);
unsigned fakecuda_coop_grid_x(void) { return coop_grid_x; }
CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                           unsigned by, unsigned bz, unsigned shared, CUstream s, void **params) {
  coop_grid_x = gx;
  return launch("cuLaunchCooperativeKernel", s);
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
CUresult CUDAAPI cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
  count("cuMemHostAlloc");
  if (getenv("FAKECUDA_NO_PINNED")) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = malloc(n);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult CUDAAPI cuMemFreeHost(void *p) {
  free(p);
  return CUDA_SUCCESS;
}
/* Copies with the host run at once: nothing here runs late. */
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  count("cuMemcpyHtoDAsync");
  if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  memcpy((void *)(uintptr_t)dst, src, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  count("cuMemcpyDtoHAsync");
  if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  memcpy(dst, (void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  count("cuMemcpyDtoDAsync");
  if (capturing) {
    CUresult r = captured_call(s);
    if (r == CUDA_SUCCESS) record(1, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return r;
  }
  memcpy((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  if (capturing) {
    CUresult r = captured_call(s);
    if (r == CUDA_SUCCESS) record(2, (void *)(uintptr_t)dst, NULL, n);
    return r;
  }
  memset((void *)(uintptr_t)dst, v, n);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode) {
  count("cuStreamBeginCapture");
  if (capturing || !ours(s)) return CUDA_ERROR_ILLEGAL_STATE;
  capturing = calloc(1, sizeof *capturing);
  origin = s;
  for (int i = 0; i < n_streams; i++) streams[i].capturing = false;
  ours(s)->capturing = true;
  return capturing ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult CUDAAPI cuStreamEndCapture(CUstream s, CUgraph *g) {
  if (!capturing || !ours(s) || !ours(s)->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  const char *e = getenv("FAKECUDA_CAPTURE_ERROR");
  CUresult r = e ? (CUresult)atoi(e) : CUDA_SUCCESS;
  for (int i = 0; i < n_streams && r == CUDA_SUCCESS; i++)
    if (streams[i].capturing && ours(s)->clock[i] < streams[i].calls) r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  for (int i = 0; i < n_streams; i++) streams[i].capturing = false;
  if (r != CUDA_SUCCESS) {
    free(capturing->nodes);
    free(capturing);
    capturing = NULL;
    return r;
  }
  *g = capturing;
  capturing = NULL;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *out, CUgraph g, unsigned long long flags) {
  count("cuGraphInstantiate");
  struct CUgraphExec_st *x = calloc(1, sizeof *x);
  if (!x) return CUDA_ERROR_OUT_OF_MEMORY;
  x->g.n = g->n;
  x->g.nodes = malloc(sizeof *g->nodes * (size_t)(g->n + 1));
  if (!x->g.nodes) {
    free(x);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (g->n) memcpy(x->g.nodes, g->nodes, sizeof *g->nodes * (size_t)g->n);
  *out = x;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphDestroy(CUgraph g) {
  free(g->nodes);
  free(g);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec x) {
  free(x->g.nodes);
  free(x);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphLaunch(CUgraphExec x, CUstream s) {
  count("cuGraphLaunch");
  for (int i = 0; i < x->g.n; i++) {
    const Node *n = &x->g.nodes[i];
    if (n->kind == 0) graph_kernels++;
    else if (n->kind == 1) memcpy(n->dst, n->src, n->n);
    else memset(n->dst, 0, n->n);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent *e, unsigned int flags) {
  if (n_events == MAX_EVENTS) return CUDA_ERROR_OUT_OF_MEMORY;
  *e = &events[n_events++];
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy(CUevent e) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s) {
  count("cuEventRecord");
  struct CUstream_st *st = ours(s);
  e->captured = capturing && st && st->capturing;
  if (e->captured) memcpy(e->clock, st->clock, sizeof e->clock);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
  *ms = start == end ? 0.0f : 0.001f;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventSynchronize(CUevent e) {
  count("cuEventSynchronize");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  count("cuStreamWaitEvent");
  struct CUstream_st *st = ours(s);
  if (capturing && e->captured && st) {
    st->capturing = true; /* a fork joins the capture */
    for (int k = 0; k < MAX_STREAMS; k++)
      if (e->clock[k] > st->clock[k]) st->clock[k] = e->clock[k];
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *s, unsigned int flags) {
  int i = 0;
  while (i < n_streams && streams[i].used) i++;
  if (i == MAX_STREAMS) return CUDA_ERROR_OUT_OF_MEMORY;
  if (i == n_streams) n_streams++;
  memset(&streams[i], 0, sizeof streams[i]);
  streams[i].used = true;
  *s = &streams[i];
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream s) {
  if (ours(s)) s->used = false;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamSynchronize(CUstream s) {
  count("cuStreamSynchronize");
  const char *e = getenv("FAKECUDA_SYNC_ERROR");
  return e ? (CUresult)atoi(e) : CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult r, const char **s) {
  switch (r) {
  case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return CUDA_SUCCESS;
  case CUDA_ERROR_ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; return CUDA_SUCCESS;
  case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; return CUDA_SUCCESS;
  case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: *s = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; return CUDA_SUCCESS;
  case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: *s = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"; return CUDA_SUCCESS;
  default: *s = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
}
CUresult CUDAAPI cuGetErrorString(CUresult r, const char **s) {
  switch (r) {
  case CUDA_ERROR_OUT_OF_MEMORY: *s = "out of memory"; return CUDA_SUCCESS;
  case CUDA_ERROR_ILLEGAL_ADDRESS: *s = "an illegal memory access was encountered"; return CUDA_SUCCESS;
  case CUDA_ERROR_NOT_FOUND: *s = "named symbol not found"; return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_IMAGE: *s = "device kernel image is invalid"; return CUDA_SUCCESS;
  case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: *s = "operation not permitted when stream is capturing"; return CUDA_SUCCESS;
  default: *s = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
}
