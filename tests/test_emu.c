/* The emu device through its RtDeviceOps: hand-written CUDA kernels as
 * plan sources (grid-stride loops, shared-memory and warp reductions,
 * atomics, half types), the errors a GPU would hang on or get silently
 * wrong, the compile cache, and the CPU GEMM against a naive loop. */
#include "check_quiet.h"
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dlcrt.h"
#include "runtime/device.h"
#include "runtime/emu/dlcc_emu.h"

/* What codegen emits: the kernels, and under DLCC_EMU a launcher each. */
static const char MAIN_SRC[] =
    "#ifndef DLCC_EMU\n"
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "#include <assert.h>\n"
    "#endif\n"
    "extern \"C\" __global__ void axpb(const float *__restrict__ x, float *__restrict__ y, int n, float a, float b) {\n"
    "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)\n"
    "    y[i] = a * __ldg(&x[i]) + b;\n"
    "}\n"
    "extern \"C\" __global__ void block_sum(const float *x, float *out, int n) {\n"
    "  __shared__ float s[256];\n"
    "  int t = threadIdx.x;\n"
    "  float v = 0.0f;\n"
    "  for (int i = blockIdx.x * blockDim.x + t; i < n; i += blockDim.x * gridDim.x) v += x[i];\n"
    "  s[t] = v;\n"
    "  __syncthreads();\n"
    "  for (int w = blockDim.x / 2; w > 0; w /= 2) {\n"
    "    if (t < w) s[t] += s[t + w];\n"
    "    __syncthreads();\n"
    "  }\n"
    "  if (t == 0) out[blockIdx.x] = s[0];\n"
    "}\n"
    "extern \"C\" __global__ void warp_ops(const float *x, float *sum, float *bcast, float *scan, float *xsum,\n"
    "                                      unsigned *ballot) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31, warp = i / 32;\n"
    "  float v = x[i], s = v;\n"
    "  for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);\n"
    "  if (lane == 0) sum[warp] = s;\n"
    "  bcast[i] = __shfl_sync(0xffffffffu, v, 5);\n"
    "  float c = v;\n"
    "  for (int o = 1; o < 32; o *= 2) {\n"
    "    float u = __shfl_up_sync(0xffffffffu, c, o);\n"
    "    if (lane >= o) c += u;\n"
    "  }\n"
    "  scan[i] = c;\n"
    "  float xs = v;\n"
    "  for (int o = 16; o > 0; o /= 2) xs += __shfl_xor_sync(0xffffffffu, xs, o);\n"
    "  xsum[i] = xs;\n"
    "  unsigned b = __ballot_sync(0xffffffffu, v > 10.0f);\n"
    "  if (lane == 0) ballot[warp] = b;\n"
    "}\n"
    "extern \"C\" __global__ void histo(const int *x, unsigned *bins, int *mx, int n) {\n"
    "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {\n"
    "    atomicAdd(&bins[x[i] & 15], 1u);\n"
    "    atomicMax(mx, x[i]);\n"
    "  }\n"
    "}\n"
    "extern \"C\" __global__ void transpose(const float *in, float *out, int rows, int cols) {\n"
    "  __shared__ float tile[16][17];\n"
    "  int x = blockIdx.x * 16 + threadIdx.x, y = blockIdx.y * 16 + threadIdx.y;\n"
    "  if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];\n"
    "  __syncthreads();\n"
    "  x = blockIdx.y * 16 + threadIdx.x;\n"
    "  y = blockIdx.x * 16 + threadIdx.y;\n"
    "  if (x < rows && y < cols) out[y * rows + x] = tile[threadIdx.x][threadIdx.y];\n"
    "}\n"
    "extern \"C\" __global__ void f16_trip(const float *x, unsigned short *bits, float *back, unsigned short *twice,\n"
    "                                      int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i >= n) return;\n"
    "  __half h = __float2half(x[i]);\n"
    "  bits[i] = __half_as_ushort(h);\n"
    "  back[i] = __half2float(h);\n"
    "  twice[i] = __half_as_ushort(__hadd(h, h));\n"
    "}\n"
    "extern \"C\" __global__ void bf16_trip(const float *x, unsigned short *bits, float *back, unsigned short *twice,\n"
    "                                       int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i >= n) return;\n"
    "  __nv_bfloat16 h = __float2bfloat16(x[i]);\n"
    "  bits[i] = __bfloat16_as_ushort(h);\n"
    "  back[i] = __bfloat162float(h);\n"
    "  twice[i] = __bfloat16_as_ushort(h + h);\n"
    "}\n"
    "extern __shared__ float4 dyn_global[];\n"
    "extern \"C\" __global__ void dyn_rev(float *x) {\n"
    "  extern __shared__ float s[];\n"
    "  s[threadIdx.x] = x[threadIdx.x];\n"
    "  __syncthreads();\n"
    "  x[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];\n"
    "  if (threadIdx.x == 0) dyn_global[0] = make_float4(1, 2, 3, 4);\n"
    "}\n"
    /* Undefined behaviour the device must catch. */
    "extern \"C\" __global__ void early_exit(float *x, int n) {\n"
    "  __shared__ float s[64];\n"
    "  int i = threadIdx.x;\n"
    "  if (i >= n) return;\n"
    "  s[i] = x[i];\n"
    "  __syncthreads();\n"
    "  x[i] = s[(i + 1) % n];\n"
    "}\n"
    "extern \"C\" __global__ void split_barrier(float *x) {\n"
    "  if (threadIdx.x < 16) __syncthreads(); else __syncwarp();\n"
    "  x[threadIdx.x] = 1.0f;\n"
    "}\n"
    "extern \"C\" __global__ void warp_exit(float *x) {\n"
    "  float v = x[threadIdx.x];\n"
    "  if (threadIdx.x >= 16) return;\n"
    "  x[threadIdx.x] = __shfl_down_sync(0xffffffffu, v, 1);\n"
    "}\n"
    "extern \"C\" __global__ void checks(const float *x) {\n"
    "  assert(x[threadIdx.x] >= 0.0f);\n"
    "}\n"
    "#ifdef DLCC_EMU\n"
    "extern \"C\" void axpb__emu(void **a) {\n"
    "  axpb(*(const float **)a[0], *(float **)a[1], *(int *)a[2], *(float *)a[3], *(float *)a[4]);\n"
    "}\n"
    "extern \"C\" void block_sum__emu(void **a) { block_sum(*(const float **)a[0], *(float **)a[1], *(int *)a[2]); }\n"
    "extern \"C\" void warp_ops__emu(void **a) {\n"
    "  warp_ops(*(const float **)a[0], *(float **)a[1], *(float **)a[2], *(float **)a[3], *(float **)a[4],\n"
    "           *(unsigned **)a[5]);\n"
    "}\n"
    "extern \"C\" void histo__emu(void **a) { histo(*(const int **)a[0], *(unsigned **)a[1], *(int **)a[2], *(int *)a[3]); }\n"
    "extern \"C\" void transpose__emu(void **a) {\n"
    "  transpose(*(const float **)a[0], *(float **)a[1], *(int *)a[2], *(int *)a[3]);\n"
    "}\n"
    "extern \"C\" void f16_trip__emu(void **a) {\n"
    "  f16_trip(*(const float **)a[0], *(unsigned short **)a[1], *(float **)a[2], *(unsigned short **)a[3], *(int *)a[4]);\n"
    "}\n"
    "extern \"C\" void bf16_trip__emu(void **a) {\n"
    "  bf16_trip(*(const float **)a[0], *(unsigned short **)a[1], *(float **)a[2], *(unsigned short **)a[3], *(int *)a[4]);\n"
    "}\n"
    "extern \"C\" void dyn_rev__emu(void **a) { dyn_rev(*(float **)a[0]); }\n"
    "extern \"C\" void early_exit__emu(void **a) { early_exit(*(float **)a[0], *(int *)a[1]); }\n"
    "extern \"C\" void split_barrier__emu(void **a) { split_barrier(*(float **)a[0]); }\n"
    "extern \"C\" void warp_exit__emu(void **a) { warp_exit(*(float **)a[0]); }\n"
    "extern \"C\" void checks__emu(void **a) { checks(*(const float **)a[0]); }\n"
    "#endif\n";

enum {
  K_AXPB,
  K_BLOCK_SUM,
  K_WARP_OPS,
  K_HISTO,
  K_TRANSPOSE,
  K_F16,
  K_BF16,
  K_DYN,
  K_EARLY,
  K_SPLIT,
  K_WARP_EXIT,
  K_CHECKS,
  K_COUNT
};

static const RtKernel main_kernels[K_COUNT] = {
    {"axpb", 0, 0, 0, 0},         {"block_sum", 1, 1024, 0, 0},  {"warp_ops", 1, 0, 0, 0},  {"histo", 0, 0, 0, 0},
    {"transpose", 1, 1088, 0, 0}, {"f16_trip", 0, 0, 0, 0},      {"bf16_trip", 0, 0, 0, 0}, {"dyn_rev", 1, 0, 0, 0},
    {"early_exit", 1, 256, 0, 0}, {"split_barrier", 1, 0, 0, 0}, {"warp_exit", 1, 0, 0, 0}, {"checks", 0, 0, 0, 0},
};

static char cache_root[256];

static RtDevice *open_emu(void) {
  char err[512];
  RtDevice *d = rt_emu_open(err, sizeof err);
  ck_assert_msg(d != NULL, "rt_emu_open: %s", err);
  ck_assert_str_eq(d->ops->name, "emu");
  return d;
}

static RtPlan make_plan(const char *src, const RtKernel *kernels, uint32_t n) {
  return (RtPlan){.magic = RT_PLAN_MAGIC,
                  .version = RT_PLAN_VERSION,
                  .model_name = "test",
                  .source = src,
                  .n_kernels = n,
                  .kernels = kernels};
}

static RtModule *load_ok(RtDevice *d, const char *src, const RtKernel *kernels, uint32_t n) {
  RtPlan p = make_plan(src, kernels, n);
  RtModule *m = NULL;
  int rc = d->ops->load(d, &p, &m);
  ck_assert_msg(rc == 0, "load: %s", d->error);
  ck_assert_ptr_nonnull(m);
  return m;
}

static RtModule *load_main(RtDevice *d) { return load_ok(d, MAIN_SRC, main_kernels, K_COUNT); }

static RtDevPtr dev_ptr(void *p) { return (RtDevPtr)(uintptr_t)p; }

static void *dev_alloc(RtDevice *d, size_t n) {
  RtDevPtr p;
  ck_assert_int_eq(d->ops->alloc(d, n, &p), 0);
  ck_assert_int_eq(p % 256, 0);
  return (void *)(uintptr_t)p;
}

static int launch(RtDevice *d, RtModule *m, uint32_t kernel, uint32_t gx, uint32_t gy, uint32_t bx, uint32_t by,
                  uint32_t dyn, const void *const *args) {
  RtLaunch l = {.kernel = kernel, .grid = {gx, gy, 1}, .block = {bx, by, 1}, .dynamic_shared_bytes = dyn};
  return d->ops->launch(d, m, &l, args);
}

static void close_dev(RtDevice *d, RtModule *m) {
  if (m) d->ops->unload(d, m);
  d->ops->destroy(d);
}

/* ---- kernels ---- */

START_TEST(grid_stride_elementwise) {
  RtDevice *d = open_emu();
  RtModule *m = load_main(d);
  int n = 1000;
  float *x = dev_alloc(d, n * sizeof(float)), *y = dev_alloc(d, n * sizeof(float));
  float host[1000], out[1000];
  for (int i = 0; i < n; i++) host[i] = (float)i * 0.5f - 7.0f;
  ck_assert_int_eq(d->ops->upload(d, dev_ptr(x), host, sizeof host), 0);
  RtDevPtr px = dev_ptr(x), py = dev_ptr(y);
  float a = 3.0f, b = -1.25f;
  const void *args[] = {&px, &py, &n, &a, &b};
  /* 3 blocks of 128 threads cover 384 elements per sweep. */
  ck_assert_msg(launch(d, m, K_AXPB, 3, 1, 128, 1, 0, args) == 0, "%s", d->error);
  ck_assert_int_eq(d->ops->synchronize(d), 0);
  ck_assert_int_eq(d->ops->download(d, out, py, sizeof out), 0);
  for (int i = 0; i < n; i++) ck_assert_float_eq(out[i], 3.0f * host[i] - 1.25f);
  d->ops->free(d, px), d->ops->free(d, py);
  close_dev(d, m);
}
END_TEST

START_TEST(block_reduction_shared) {
  RtDevice *d = open_emu();
  RtModule *m = load_main(d);
  int n = 5000, blocks = 4;
  float *x = dev_alloc(d, n * sizeof(float)), *out = dev_alloc(d, blocks * sizeof(float));
  double total = 0;
  for (int i = 0; i < n; i++) x[i] = (float)(i % 17), total += i % 17;
  RtDevPtr px = dev_ptr(x), po = dev_ptr(out);
  const void *args[] = {&px, &po, &n};
  ck_assert_msg(launch(d, m, K_BLOCK_SUM, blocks, 1, 256, 1, 0, args) == 0, "%s", d->error);
  /* Each block sums the elements its threads' grid-stride loops visit. */
  for (int b = 0; b < blocks; b++) {
    double want = 0;
    for (int i = 0; i < n; i++)
      if ((i / 256) % blocks == b) want += i % 17;
    ck_assert_double_eq(out[b], want);
  }
  ck_assert_double_eq((double)out[0] + out[1] + out[2] + out[3], total);
  d->ops->free(d, px), d->ops->free(d, po);
  close_dev(d, m);
}
END_TEST

START_TEST(warp_shuffles) {
  RtDevice *d = open_emu();
  RtModule *m = load_main(d);
  enum { N = 128, W = N / 32 };
  float x[N], sum[W], bcast[N], scan[N], xsum[N];
  unsigned ballot[W];
  for (int i = 0; i < N; i++) x[i] = (float)((i * 7) % 23);
  RtDevPtr px = dev_ptr(x), ps = dev_ptr(sum), pb = dev_ptr(bcast), pc = dev_ptr(scan), pxs = dev_ptr(xsum),
           pba = dev_ptr(ballot);
  const void *args[] = {&px, &ps, &pb, &pc, &pxs, &pba};
  ck_assert_msg(launch(d, m, K_WARP_OPS, 2, 1, 64, 1, 0, args) == 0, "%s", d->error);
  for (int w = 0; w < W; w++) {
    float want = 0, run = 0;
    unsigned bits = 0;
    for (int l = 0; l < 32; l++) want += x[w * 32 + l], bits |= (unsigned)(x[w * 32 + l] > 10.0f) << l;
    ck_assert_float_eq(sum[w], want);
    ck_assert_uint_eq(ballot[w], bits);
    for (int l = 0; l < 32; l++) {
      run += x[w * 32 + l];
      ck_assert_float_eq(scan[w * 32 + l], run);
      ck_assert_float_eq(bcast[w * 32 + l], x[w * 32 + 5]);
      ck_assert_float_eq(xsum[w * 32 + l], want);
    }
  }
  close_dev(d, m);
}
END_TEST

START_TEST(atomic_histogram) {
  RtDevice *d = open_emu();
  RtModule *m = load_main(d);
  int n = 10000, mx = -1;
  int *x = malloc(n * sizeof(int));
  unsigned bins[16] = {0}, want[16] = {0};
  int want_max = 0;
  for (int i = 0; i < n; i++) {
    x[i] = (i * 2654435761u) >> 20;
    want[x[i] & 15]++;
    if (x[i] > want_max) want_max = x[i];
  }
  RtDevPtr px = dev_ptr(x), pb = dev_ptr(bins), pm = dev_ptr(&mx);
  const void *args[] = {&px, &pb, &pm, &n};
  ck_assert_msg(launch(d, m, K_HISTO, 8, 1, 128, 1, 0, args) == 0, "%s", d->error);
  for (int i = 0; i < 16; i++) ck_assert_uint_eq(bins[i], want[i]);
  ck_assert_int_eq(mx, want_max);
  free(x);
  close_dev(d, m);
}
END_TEST

START_TEST(tiled_transpose_2d_blocks) {
  RtDevice *d = open_emu();
  RtModule *m = load_main(d);
  int rows = 37, cols = 50;
  float *in = malloc(sizeof(float) * rows * cols), *out = malloc(sizeof(float) * rows * cols);
  for (int i = 0; i < rows * cols; i++) in[i] = (float)i, out[i] = -1;
  RtDevPtr pi = dev_ptr(in), po = dev_ptr(out);
  const void *args[] = {&pi, &po, &rows, &cols};
  ck_assert_msg(launch(d, m, K_TRANSPOSE, 4, 3, 16, 16, 0, args) == 0, "%s", d->error);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) ck_assert_float_eq(out[c * rows + r], in[r * cols + c]);
  free(in), free(out);
  close_dev(d, m);
}
END_TEST

START_TEST(dynamic_shared_memory) {
  RtDevice *d = open_emu();
  RtModule *m = load_main(d);
  float x[96];
  for (int i = 0; i < 96; i++) x[i] = (float)i;
  RtDevPtr px = dev_ptr(x);
  const void *args[] = {&px};
  ck_assert_msg(launch(d, m, K_DYN, 1, 1, 96, 1, 96 * sizeof(float), args) == 0, "%s", d->error);
  for (int i = 0; i < 96; i++) ck_assert_float_eq(x[i], (float)(95 - i));
  close_dev(d, m);
}
END_TEST

/* Blocks of more threads than any before grow the fiber array, which
 * realloc moves: a moved fiber must not restore its state from the old
 * block (the LeNet training step crashed so in a 512-thread reduction). */
START_TEST(fibers_survive_growing_blocks) {
  RtDevice *d = open_emu();
  RtModule *m = load_main(d);
  static float x[1024];
  for (int threads = 32; threads <= 1024; threads *= 2) {
    for (int i = 0; i < threads; i++) x[i] = (float)i;
    RtDevPtr px = dev_ptr(x);
    const void *args[] = {&px};
    ck_assert_msg(launch(d, m, K_DYN, 1, 1, (uint32_t)threads, 1, (uint32_t)(threads * sizeof(float)), args) == 0,
                  "%s", d->error);
    for (int i = 0; i < threads; i++) ck_assert_float_eq(x[i], (float)(threads - 1 - i));
  }
  close_dev(d, m);
}
END_TEST

/* Bits CUDA's __float2half gives (RNE, overflow at 65520, subnormals,
 * canonical NaN), and what __hadd(h, h) gives. */
static const struct {
  float in;
  unsigned short bits, twice;
} f16_cases[] = {
    {1.0f / 3.0f, 0x3555, 0x3955},
    {65504.0f, 0x7bff, 0x7c00},
    {65519.0f, 0x7bff, 0x7c00},
    {65520.0f, 0x7c00, 0x7c00},
    {-65520.0f, 0xfc00, 0xfc00},
    {0x1p-24f, 0x0001, 0x0002},
    {0x1p-25f, 0x0000, 0x0000},
    {0x1.8p-25f, 0x0001, 0x0002},
    {0x1.8p-24f, 0x0002, 0x0004}, /* tie between 1 and 2 units: even */
    {0x1.4p-23f, 0x0002, 0x0004}, /* 2.5 units: even */
    {0x1p-14f, 0x0400, 0x0800},
    {0x1.ff8p-15f, 0x03ff, 0x07fe},    /* largest subnormal */
    {1.0f + 0x1p-11f, 0x3c00, 0x4000}, /* tie: even */
    {1.0f + 0x1.8p-10f, 0x3c02, 0x4002},
    {0.1f, 0x2e66, 0x3266},
    {-0.0f, 0x8000, 0x8000},
    {3e-8f, 0x0001, 0x0002},
    {1e-8f, 0x0000, 0x0000},
};

START_TEST(half_bits_match_cuda) {
  RtDevice *d = open_emu();
  RtModule *m = load_main(d);
  enum { N = sizeof f16_cases / sizeof *f16_cases + 2 };
  float x[N], back[N];
  unsigned short bits[N], twice[N];
  int n = N;
  for (int i = 0; i < N - 2; i++) x[i] = f16_cases[i].in;
  x[N - 2] = INFINITY, x[N - 1] = NAN;
  RtDevPtr px = dev_ptr(x), pb = dev_ptr(bits), pk = dev_ptr(back), pt = dev_ptr(twice);
  const void *args[] = {&px, &pb, &pk, &pt, &n};
  ck_assert_msg(launch(d, m, K_F16, 1, 1, 32, 1, 0, args) == 0, "%s", d->error);
  for (int i = 0; i < N - 2; i++) {
    ck_assert_msg(bits[i] == f16_cases[i].bits, "__float2half(%a) = 0x%04x, CUDA gives 0x%04x", x[i], bits[i],
                  f16_cases[i].bits);
    ck_assert_msg(twice[i] == f16_cases[i].twice, "__hadd of %a: 0x%04x, want 0x%04x", x[i], twice[i],
                  f16_cases[i].twice);
  }
  ck_assert_float_eq(back[0], 0.333251953125f);
  ck_assert_float_eq(back[1], 65504.0f);
  ck_assert_float_eq(back[5], 0x1p-24f);
  ck_assert_uint_eq(bits[N - 2], 0x7c00);
  ck_assert_uint_eq(bits[N - 1], 0x7fff);
  ck_assert(isinf(back[3]) && isnan(back[N - 1]));
  close_dev(d, m);
}
END_TEST

static const struct {
  float in;
  unsigned short bits, twice;
} bf16_cases[] = {
    {1.0f / 3.0f, 0x3eab, 0x3f2b},
    {1.0f, 0x3f80, 0x4000},
    {1.0f + 0x1p-8f, 0x3f80, 0x4000}, /* tie: even */
    {1.0f + 0x1.8p-7f, 0x3f82, 0x4002},
    {FLT_MAX, 0x7f80, 0x7f80},     /* rounds up to inf */
    {0x1.fep127f, 0x7f7f, 0x7f80}, /* largest bf16 */
    {1e-40f, 0x0001, 0x0002},      /* float subnormal */
    {-2.5f, 0xc020, 0xc0a0},
    {65520.0f, 0x4780, 0x4800},
};

START_TEST(bf16_bits_match_cuda) {
  RtDevice *d = open_emu();
  RtModule *m = load_main(d);
  enum { N = sizeof bf16_cases / sizeof *bf16_cases + 1 };
  float x[N], back[N];
  unsigned short bits[N], twice[N];
  int n = N;
  for (int i = 0; i < N - 1; i++) x[i] = bf16_cases[i].in;
  x[N - 1] = -NAN;
  RtDevPtr px = dev_ptr(x), pb = dev_ptr(bits), pk = dev_ptr(back), pt = dev_ptr(twice);
  const void *args[] = {&px, &pb, &pk, &pt, &n};
  ck_assert_msg(launch(d, m, K_BF16, 1, 1, 16, 1, 0, args) == 0, "%s", d->error);
  for (int i = 0; i < N - 1; i++) {
    ck_assert_msg(bits[i] == bf16_cases[i].bits, "__float2bfloat16(%a) = 0x%04x, CUDA gives 0x%04x", x[i], bits[i],
                  bf16_cases[i].bits);
    ck_assert_msg(twice[i] == bf16_cases[i].twice, "bf16 %a + itself: 0x%04x, want 0x%04x", x[i], twice[i],
                  bf16_cases[i].twice);
  }
  ck_assert_float_eq(back[0], 0.333984375f);
  ck_assert_uint_eq(bits[N - 1], 0x7fff);
  close_dev(d, m);
}
END_TEST

/* The conversions are the same code in kernels and in the GEMM: check
 * them against the compiler's own correctly rounded _Float16 and against
 * a nearest-value search for bf16, over a sweep of all float bit patterns. */
START_TEST(conversions_exhaustive_sweep) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    uint16_t b = (uint16_t)h;
    float f = dlcc_emu_f16_to_f32(b);
    if (isnan(f))
      ck_assert_uint_eq(dlcc_emu_f32_to_f16(f), 0x7fff);
    else
      ck_assert_uint_eq(dlcc_emu_f32_to_f16(f), b);
    float g = dlcc_emu_bf16_to_f32(b);
    if (!isnan(g)) ck_assert_uint_eq(dlcc_emu_f32_to_bf16(g), b);
  }
  for (uint64_t u = 0; u < 0x100000000ull; u += 2053) {
    uint32_t x = (uint32_t)u;
    float f;
    memcpy(&f, &x, 4);
    if (isnan(f)) continue;
#ifdef __FLT16_MAX__
    _Float16 r = (_Float16)f;
    uint16_t want;
    memcpy(&want, &r, 2);
    ck_assert_msg(dlcc_emu_f32_to_f16(f) == want, "f16 of %a: 0x%04x, want 0x%04x", f, dlcc_emu_f32_to_f16(f), want);
#endif
    uint16_t lo = (uint16_t)(x >> 16), got = dlcc_emu_f32_to_bf16(f);
    double dlo = dlcc_emu_bf16_to_f32(lo), dhi = dlcc_emu_bf16_to_f32((uint16_t)(lo + 1));
    if ((lo & 0x7fff) == 0x7f7f) dhi = (f > 0 ? 1 : -1) * 0x1p128; /* the next step is inf */
    double el = fabs((double)f - dlo), eh = fabs((double)f - dhi);
    uint16_t want_bf = el < eh || (el == eh && !(lo & 1)) ? lo : (uint16_t)(lo + 1);
    if ((x & 0x7fffffff) == 0x7f800000) want_bf = lo; /* inf */
    ck_assert_msg(got == want_bf, "bf16 of %a: 0x%04x, want 0x%04x", f, got, want_bf);
  }
  /* double -> half rounds once: just above a tie must go up, where going
   * through float (which rounds the excess away) would tie to even. */
  ck_assert_uint_eq(dlcc_emu_f64_to_f16(1.0 + 0x1p-11 + 0x1p-40), 0x3c01);
  ck_assert_uint_eq(dlcc_emu_f64_to_bf16(1.0 + 0x1p-8 + 0x1p-40), 0x3f81);
  ck_assert_uint_eq(dlcc_emu_f64_to_f16(1.0 + 0x1p-11), 0x3c00);
}
END_TEST

/* ---- errors ---- */

static void expect_launch_error(uint32_t kernel, const RtKernel *kernels, uint32_t bx, const char *needle) {
  RtDevice *d = open_emu();
  RtModule *m = load_ok(d, MAIN_SRC, kernels, K_COUNT);
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = (float)i;
  int n = 40;
  RtDevPtr px = dev_ptr(x);
  const void *args[] = {&px, &n};
  ck_assert_int_eq(launch(d, m, kernel, 2, 1, bx, 1, 0, args), -1);
  ck_assert_msg(strstr(d->error, needle) != NULL, "error '%s' lacks '%s'", d->error, needle);
  /* The device stays usable: a good launch right after works. */
  float y[4];
  RtDevPtr py = dev_ptr(y);
  float a = 2, b = 1;
  int four = 4;
  const void *ok_args[] = {&px, &py, &four, &a, &b};
  ck_assert_msg(launch(d, m, K_AXPB, 1, 1, 4, 1, 0, ok_args) == 0, "%s", d->error);
  ck_assert_float_eq(y[3], 7.0f);
  close_dev(d, m);
}

START_TEST(barrier_in_kernel_the_plan_calls_barrier_free) {
  RtKernel ks[K_COUNT];
  memcpy(ks, main_kernels, sizeof ks);
  ks[K_BLOCK_SUM].uses_barriers = 0;
  RtDevice *d = open_emu();
  RtModule *m = load_ok(d, MAIN_SRC, ks, K_COUNT);
  float x[256] = {0}, out[1];
  int n = 256;
  RtDevPtr px = dev_ptr(x), po = dev_ptr(out);
  const void *args[] = {&px, &po, &n};
  ck_assert_int_eq(launch(d, m, K_BLOCK_SUM, 1, 1, 256, 1, 0, args), -1);
  ck_assert_msg(strstr(d->error, "kernel block_sum uses __syncthreads but the plan says it has no barriers"), "%s",
                d->error);
  close_dev(d, m);
}
END_TEST

START_TEST(shuffle_in_kernel_the_plan_calls_barrier_free) {
  RtKernel ks[K_COUNT];
  memcpy(ks, main_kernels, sizeof ks);
  ks[K_WARP_EXIT].uses_barriers = 0;
  expect_launch_error(K_WARP_EXIT, ks, 32,
                      "kernel warp_exit uses a warp shuffle or vote but the plan says it has no barriers");
}
END_TEST

START_TEST(thread_exits_while_others_wait) {
  expect_launch_error(K_EARLY, main_kernels, 64, "exited while others wait at __syncthreads");
}
END_TEST

START_TEST(lane_exits_while_warp_waits) { expect_launch_error(K_WARP_EXIT, main_kernels, 32, "exited"); }
END_TEST

START_TEST(threads_at_different_barriers_deadlock) { expect_launch_error(K_SPLIT, main_kernels, 32, "deadlock"); }
END_TEST

START_TEST(assert_in_kernel_is_an_error) {
  RtKernel ks[K_COUNT];
  memcpy(ks, main_kernels, sizeof ks);
  for (int fibered = 0; fibered < 2; fibered++) {
    ks[K_CHECKS].uses_barriers = (uint32_t)fibered;
    RtDevice *d = open_emu();
    RtModule *m = load_ok(d, MAIN_SRC, ks, K_COUNT);
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = i == 20 ? -1.0f : 1.0f;
    RtDevPtr px = dev_ptr(x);
    const void *args[] = {&px};
    ck_assert_int_eq(launch(d, m, K_CHECKS, 1, 1, 32, 1, 0, args), -1);
    ck_assert_msg(strstr(d->error, "assertion failed: x[threadIdx.x] >= 0.0f"), "%s", d->error);
    ck_assert_msg(strstr(d->error, "thread (20,0,0)"), "%s", d->error);
    x[20] = 1.0f;
    ck_assert_msg(launch(d, m, K_CHECKS, 1, 1, 32, 1, 0, args) == 0, "%s", d->error);
    close_dev(d, m);
  }
}
END_TEST

START_TEST(invalid_launch_configuration) {
  RtDevice *d = open_emu();
  RtModule *m = load_main(d);
  float x[4];
  RtDevPtr px = dev_ptr(x);
  int n = 4;
  float a = 1, b = 0;
  const void *args[] = {&px, &px, &n, &a, &b};
  ck_assert_int_eq(launch(d, m, K_AXPB, 1, 1, 2048, 1, 0, args), -1);
  ck_assert_msg(strstr(d->error, "block (2048,1,1)"), "%s", d->error);
  ck_assert_int_eq(launch(d, m, K_AXPB, 0, 1, 32, 1, 0, args), -1);
  ck_assert_msg(strstr(d->error, "grid (0,1,1)"), "%s", d->error);
  ck_assert_int_eq(launch(d, m, K_COUNT, 1, 1, 32, 1, 0, args), -1);
  ck_assert_msg(strstr(d->error, "kernel 12, but the module has 12"), "%s", d->error);
  ck_assert_int_eq(launch(d, m, K_DYN, 1, 1, 32, 1, 300000, args), -1);
  ck_assert_msg(strstr(d->error, "300000 bytes of dynamic shared memory"), "%s", d->error);
  close_dev(d, m);
}
END_TEST

START_TEST(compile_error_gives_compiler_message) {
  RtDevice *d = open_emu();
  static const RtKernel k[] = {{"broken", 0, 0, 0, 0}};
  RtPlan p = make_plan("extern \"C\" __global__ void broken(float *x) { x[0] = no_such_name; }\n", k, 1);
  RtModule *m = NULL;
  ck_assert_int_eq(d->ops->load(d, &p, &m), -1);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(d->error, "host compiler failed"), "%s", d->error);
  ck_assert_msg(strstr(d->error, "kernels.cu:1:"), "%s", d->error);
  ck_assert_msg(strstr(d->error, "no_such_name"), "%s", d->error);
  close_dev(d, NULL);
}
END_TEST

START_TEST(missing_launcher_is_named) {
  RtDevice *d = open_emu();
  static const RtKernel k[] = {{"axpb", 0, 0, 0, 0}, {"not_there", 0, 0, 0, 0}};
  RtPlan p = make_plan(MAIN_SRC, k, 2);
  RtModule *m = NULL;
  ck_assert_int_eq(d->ops->load(d, &p, &m), -1);
  ck_assert_msg(strstr(d->error, "not_there__emu"), "%s", d->error);
  close_dev(d, NULL);
}
END_TEST

/* ---- the compile cache ---- */

static int count_so(const char *dir) {
  DIR *dp = opendir(dir);
  int n = 0;
  if (!dp) return 0;
  for (struct dirent *e; (e = readdir(dp));) n += strstr(e->d_name, ".so") != NULL;
  closedir(dp);
  return n;
}

static void corrupt_so(const char *dir) {
  DIR *dp = opendir(dir);
  ck_assert_ptr_nonnull(dp);
  for (struct dirent *e; (e = readdir(dp));) {
    if (!strstr(e->d_name, ".so")) continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("not an ELF file", f);
    fclose(f);
  }
  closedir(dp);
}

START_TEST(cache_hit_on_second_load) {
  char dir[300], emu_dir[320], src[256];
  snprintf(dir, sizeof dir, "%s/cache-test", cache_root);
  snprintf(emu_dir, sizeof emu_dir, "%s/emu", dir);
  setenv("DLCC_CACHE_DIR", dir, 1);
  /* A source no earlier run has cached. */
  snprintf(src, sizeof src,
           "// %ld %d\nextern \"C\" __global__ void one(float *x) { x[threadIdx.x] = 1.0f + threadIdx.x; }\n"
           "#ifdef DLCC_EMU\nextern \"C\" void one__emu(void **a) { one(*(float **)a[0]); }\n#endif\n",
           (long)time(NULL), (int)getpid());
  static const RtKernel k[] = {{"one", 0, 0, 0, 0}};
  RtDevice *d = open_emu();
  RtModule *m = load_ok(d, src, k, 1);
  ck_assert_uint_eq(rt_emu_compile_count(d), 1);
  d->ops->unload(d, m);
  m = load_ok(d, src, k, 1);
  ck_assert_uint_eq(rt_emu_compile_count(d), 1);
  close_dev(d, m);

  d = open_emu(); /* a new process would find it the same way */
  m = load_ok(d, src, k, 1);
  ck_assert_uint_eq(rt_emu_compile_count(d), 0);
  float x[8];
  RtDevPtr px = dev_ptr(x);
  const void *args[] = {&px};
  ck_assert_msg(launch(d, m, 0, 1, 1, 8, 1, 0, args) == 0, "%s", d->error);
  ck_assert_float_eq(x[7], 8.0f);
  close_dev(d, m);
  ck_assert_int_eq(count_so(emu_dir), 1);

  /* A corrupted entry is rebuilt, not fatal. */
  corrupt_so(emu_dir);
  d = open_emu();
  m = load_ok(d, src, k, 1);
  ck_assert_uint_eq(rt_emu_compile_count(d), 1);
  ck_assert_msg(launch(d, m, 0, 1, 1, 8, 1, 0, args) == 0, "%s", d->error);
  ck_assert_float_eq(x[2], 3.0f);
  close_dev(d, m);
  ck_assert_uint_eq(rt_emu_compile_count(NULL), 0);
  setenv("DLCC_CACHE_DIR", cache_root, 1);
}
END_TEST

START_TEST(missing_compiler_fails_open) {
  char saved[512];
  snprintf(saved, sizeof saved, "%s", getenv("DLCC_EMU_HEADER") ? getenv("DLCC_EMU_HEADER") : "");
  setenv("DLCC_EMU_CXX", "/nonexistent/c++", 1);
  char err[256] = "";
  ck_assert_ptr_null(rt_emu_open(err, sizeof err));
  ck_assert_msg(strstr(err, "DLCC_EMU_CXX") && strstr(err, "/nonexistent/c++"), "%s", err);
  unsetenv("DLCC_EMU_CXX");
  setenv("DLCC_EMU_HEADER", "/nonexistent/dlcc_emu.h", 1);
  ck_assert_ptr_null(rt_emu_open(err, sizeof err));
  ck_assert_msg(strstr(err, "/nonexistent/dlcc_emu.h"), "%s", err);
  setenv("DLCC_EMU_HEADER", saved, 1);
}
END_TEST

/* ---- GEMM ---- */

typedef struct GemmCase {
  uint32_t dtype;
  int ta, tb;
  int64_t m, n, k, batch;
  int broadcast_a;
  float alpha, beta;
} GemmCase;

static double load_ref(uint32_t dt, const void *p, int64_t i) {
  if (dt == RT_DT_F16) return dlcc_emu_f16_to_f32(((const uint16_t *)p)[i]);
  if (dt == RT_DT_BF16) return dlcc_emu_bf16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}

static void store_in(uint32_t dt, void *p, int64_t i, float v) {
  if (dt == RT_DT_F16)
    ((uint16_t *)p)[i] = dlcc_emu_f32_to_f16(v);
  else if (dt == RT_DT_BF16)
    ((uint16_t *)p)[i] = dlcc_emu_f32_to_bf16(v);
  else
    ((float *)p)[i] = v;
}

static void run_gemm_case(RtDevice *d, const GemmCase *gc) {
  int64_t m = gc->m, n = gc->n, k = gc->k;
  /* Padded leading dimensions, so ld and the logical width differ. */
  int64_t a_rows = gc->ta ? k : m, a_cols = gc->ta ? m : k, b_rows = gc->tb ? n : k, b_cols = gc->tb ? k : n;
  int64_t lda = a_cols + 3, ldb = b_cols + 1, ldc = n + 2;
  int64_t sa = gc->broadcast_a ? 0 : a_rows * lda, sb = b_rows * ldb, sc = m * ldc;
  size_t es = gc->dtype == RT_DT_F32 ? 4 : 2;
  int64_t na = (gc->broadcast_a ? 1 : gc->batch) * a_rows * lda, nb = gc->batch * sb, nc = gc->batch * sc;
  void *a = malloc(na * es), *b = malloc(nb * es), *c = malloc(nc * es), *c0 = malloc(nc * es);
  uint32_t seed = 12345u + (uint32_t)(m * 7 + n * 13 + k);
  for (int64_t i = 0; i < na; i++)
    seed = seed * 1664525u + 1013904223u, store_in(gc->dtype, a, i, (float)(seed >> 8) / (1 << 24) - 0.5f);
  for (int64_t i = 0; i < nb; i++)
    seed = seed * 1664525u + 1013904223u, store_in(gc->dtype, b, i, (float)(seed >> 8) / (1 << 24) - 0.5f);
  for (int64_t i = 0; i < nc; i++) {
    seed = seed * 1664525u + 1013904223u;
    store_in(gc->dtype, c, i, gc->beta == 0.0f ? NAN : (float)(seed >> 8) / (1 << 24));
  }
  memcpy(c0, c, nc * es);
  RtGemm g = {.dtype = gc->dtype,
              .trans_a = (uint32_t)gc->ta,
              .trans_b = (uint32_t)gc->tb,
              .m = m,
              .n = n,
              .k = k,
              .lda = lda,
              .ldb = ldb,
              .ldc = ldc,
              .batch = gc->batch,
              .stride_a = sa,
              .stride_b = sb,
              .stride_c = sc,
              .alpha = gc->alpha,
              .beta = gc->beta};
  int rc = d->ops->gemm(d, &g, dev_ptr(a), dev_ptr(b), dev_ptr(c), g.beta != 0.0f ? dev_ptr(c) : 0, 0);
  ck_assert_msg(rc == 0, "%s", d->error);
  for (int64_t bi = 0; bi < gc->batch; bi++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0;
        for (int64_t p = 0; p < k; p++) {
          double av = load_ref(gc->dtype, a, bi * sa + (gc->ta ? p * lda + i : i * lda + p));
          double bv = load_ref(gc->dtype, b, bi * sb + (gc->tb ? j * ldb + p : p * ldb + j));
          acc += av * bv;
        }
        double want = gc->alpha * acc;
        if (gc->beta != 0.0f) want += gc->beta * load_ref(gc->dtype, c0, bi * sc + i * ldc + j);
        double got = load_ref(gc->dtype, c, bi * sc + i * ldc + j);
        double tol = gc->dtype == RT_DT_F32 ? 1e-5 : gc->dtype == RT_DT_F16 ? 1e-3 : 8e-3;
        ck_assert_msg(fabs(got - want) <= tol * fmax(1.0, fabs(want)),
                      "dtype %u ta %d tb %d m %lld n %lld k %lld: C[%lld][%lld][%lld] = %.9g, want %.9g", gc->dtype,
                      gc->ta, gc->tb, (long long)m, (long long)n, (long long)k, (long long)bi, (long long)i,
                      (long long)j, got, want);
      }
  /* Padding between rows of C is left alone. */
  if (ldc > n) ck_assert_mem_eq((char *)c + n * es, (char *)c0 + n * es, es);
  free(a), free(b), free(c), free(c0);
}

START_TEST(gemm_f32_transposes_and_odd_sizes) {
  RtDevice *d = open_emu();
  static const int64_t sizes[][3] = {{1, 1, 1}, {7, 33, 1}, {33, 7, 33}, {1, 7, 33}, {33, 33, 7}, {3, 300, 260}};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        GemmCase gc = {RT_DT_F32, ta, tb, sizes[s][0], sizes[s][1], sizes[s][2], 1, 0, 1.0f, 0.0f};
        run_gemm_case(d, &gc);
        gc.alpha = 0.5f, gc.beta = -2.0f;
        run_gemm_case(d, &gc);
      }
  close_dev(d, NULL);
}
END_TEST

START_TEST(gemm_batched_broadcast) {
  RtDevice *d = open_emu();
  GemmCase gc = {RT_DT_F32, 0, 1, 7, 33, 33, 3, 1, 1.0f, 1.0f};
  run_gemm_case(d, &gc);
  gc.broadcast_a = 0, gc.ta = 1;
  run_gemm_case(d, &gc);
  close_dev(d, NULL);
}
END_TEST

START_TEST(gemm_half_inputs) {
  RtDevice *d = open_emu();
  for (int ta = 0; ta < 2; ta++) {
    GemmCase gc = {RT_DT_F16, ta, 1 - ta, 33, 7, 33, 2, 0, 1.0f, 0.0f};
    run_gemm_case(d, &gc);
    gc.dtype = RT_DT_BF16, gc.beta = 0.25f;
    run_gemm_case(d, &gc);
  }
  close_dev(d, NULL);
}
END_TEST

/* cuBLASLt's epilogues as plan.h defines them: bias[j] added to the f32
 * sum (after alpha and beta times C_in, here apart from C), then relu or gelu's tanh form, rounded once
 * into the dtype; the bias shared by every batch, or (stride_bias, for
 * the bias and gelu epilogues here) one bias per batch.  Checked against those
 * formulas here, not against the code under test. */
START_TEST(gemm_epilogues) {
  RtDevice *d = open_emu();
  enum { M = 5, N = 7, K = 9, B = 2 };
  for (uint32_t dt = RT_DT_F32; dt <= RT_DT_BF16; dt++)
    for (uint32_t e = RT_EPILOGUE_BIAS; e < RT_EPILOGUE_BGRAD; e++) {
      float a[B * M * K], b[K * N], c[B * M * N], c0[B * M * N], bias[B * N]; /* room for f32; 16-bit use half */
      int64_t sbias = e == RT_EPILOGUE_RELU_BIAS ? 0 : N;
      uint32_t seed = 77 + e;
      for (int i = 0; i < B * M * K + K * N; i++) {
        seed = seed * 1664525u + 1013904223u;
        float v = (float)(seed >> 8) / (1 << 24) - 0.5f;
        if (i < B * M * K)
          store_in(dt, a, i, v);
        else
          store_in(dt, b, i - B * M * K, v);
      }
      for (int i = 0; i < B * N; i++) store_in(dt, bias, i, 0.25f * (float)(i - 3 - 2 * (i / N)));
      /* C_in apart from C (a residual): C's old values are never read */
      for (int i = 0; i < B * M * N; i++) store_in(dt, c0, i, 0.125f * (float)(i % 5)), store_in(dt, c, i, NAN);
      RtGemm g = {.dtype = dt, .m = M, .n = N, .k = K, .lda = K, .ldb = N, .ldc = N, .batch = B,
                  .stride_a = M * K, .stride_c = M * N, .alpha = 1.0f, .beta = 0.5f, .epilogue = e,
                  .stride_bias = sbias};
      ck_assert_msg(d->ops->gemm(d, &g, dev_ptr(a), dev_ptr(b), dev_ptr(c), dev_ptr(c0), dev_ptr(bias)) == 0, "%s",
                    d->error);
      int negatives = 0;
      for (int bi = 0; bi < B; bi++)
        for (int i = 0; i < M; i++)
          for (int j = 0; j < N; j++) {
            double x = 0;
            for (int p = 0; p < K; p++) x += load_ref(dt, a, (bi * M + i) * K + p) * load_ref(dt, b, p * N + j);
            x += 0.5 * load_ref(dt, c0, (bi * M + i) * N + j) + load_ref(dt, bias, (int)(bi * sbias) + j);
            negatives += x < 0;
            if (e == RT_EPILOGUE_RELU_BIAS) x = x > 0 ? x : 0;
            if (e == RT_EPILOGUE_GELU_BIAS) x = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
            double got = load_ref(dt, c, (bi * M + i) * N + j);
            double tol = dt == RT_DT_F32 ? 1e-6 : dt == RT_DT_F16 ? 1e-3 : 8e-3;
            ck_assert_msg(fabs(got - x) <= tol * fmax(1.0, fabs(x)),
                          "dtype %u epilogue %u: C[%d][%d][%d] = %.9g, want %.9g", dt, e, bi, i, j, got, x);
          }
      ck_assert_int_gt(negatives, 10); /* relu and gelu see both signs */
    }
  /* No epilogue on an int8 product; none without its bias. */
  int8_t q[4] = {0};
  int32_t r[4];
  RtGemm g = {.dtype = RT_DT_I8, .m = 1, .n = 1, .k = 1, .lda = 1, .ldb = 1, .ldc = 1, .batch = 1, .alpha = 1,
              .epilogue = RT_EPILOGUE_BIAS};
  ck_assert_int_eq(d->ops->gemm(d, &g, dev_ptr(q), dev_ptr(q), dev_ptr(r), 0, dev_ptr(r)), -1);
  ck_assert_str_eq(d->error, "emu gemm: epilogue 1 on an i8 gemm");
  close_dev(d, NULL);
  d = open_emu();
  float x[4] = {0};
  g.dtype = RT_DT_F32;
  ck_assert_int_eq(d->ops->gemm(d, &g, dev_ptr(x), dev_ptr(x), dev_ptr(x), 0, 0), -1);
  ck_assert_str_eq(d->error, "emu gemm: an epilogue without its bias");
  close_dev(d, NULL);
}
END_TEST

/* BGRAD: C = A^T B untouched by the epilogue, and bias[i] the sum of
 * A's column i (op(A)'s row), rounded once into the dtype: a linear's
 * weight and bias gradients from dy = A. */
START_TEST(gemm_bias_grad) {
  RtDevice *d = open_emu();
  enum { M = 6, N = 5, K = 11 };
  for (uint32_t dt = RT_DT_F32; dt <= RT_DT_BF16; dt++) {
    float a[K * M], b[K * N], c[M * N], bias[M + 1]; /* room for f32; 16-bit use half */
    uint32_t seed = 5 + dt;
    for (int i = 0; i < K * M + K * N; i++) {
      seed = seed * 1664525u + 1013904223u;
      float v = (float)(seed >> 8) / (1 << 24) - 0.5f;
      if (i < K * M)
        store_in(dt, a, i, v);
      else
        store_in(dt, b, i - K * M, v);
    }
    for (int i = 0; i <= M; i++) store_in(dt, bias, i, 99.0f); /* the one past m stays */
    RtGemm g = {.dtype = dt, .trans_a = 1, .m = M, .n = N, .k = K, .lda = M, .ldb = N, .ldc = N, .batch = 1,
                .alpha = 1.0f, .epilogue = RT_EPILOGUE_BGRAD};
    ck_assert_msg(d->ops->gemm(d, &g, dev_ptr(a), dev_ptr(b), dev_ptr(c), g.beta != 0.0f ? dev_ptr(c) : 0, dev_ptr(bias)) == 0, "%s", d->error);
    double tol = dt == RT_DT_F32 ? 1e-6 : dt == RT_DT_F16 ? 1e-3 : 8e-3;
    for (int i = 0; i < M; i++) {
      double s = 0;
      for (int p = 0; p < K; p++) s += load_ref(dt, a, p * M + i);
      ck_assert_msg(fabs(load_ref(dt, bias, i) - s) <= tol * fmax(1.0, fabs(s)), "dtype %u: bias[%d] = %.9g, want %.9g",
                    dt, i, load_ref(dt, bias, i), s);
      for (int j = 0; j < N; j++) {
        double x = 0;
        for (int p = 0; p < K; p++) x += load_ref(dt, a, p * M + i) * load_ref(dt, b, p * N + j);
        ck_assert_msg(fabs(load_ref(dt, c, i * N + j) - x) <= tol * fmax(1.0, fabs(x)), "dtype %u: C[%d][%d]", dt,
                      i, j);
      }
    }
    ck_assert_double_eq(load_ref(dt, bias, M), 99.0);
  }
  close_dev(d, NULL);
}
END_TEST

/* x rounded to tf32 by cvt.rna's rule, written out here: the sign kept,
 * the magnitude rounded to 10 fraction bits, ties away from zero. */
static double tf32_ref(float x) {
  int e;
  double f = frexp(fabs((double)x), &e); /* f in [0.5, 1): 11 bits of it */
  double r = floor(f * 2048 + 0.5) / 2048;
  return copysign(ldexp(r, e), (double)x);
}

/* A tf32 gemm (--tf32) multiplies its operands rounded to tf32 and sums
 * exactly: C equals that product to f32 rounding, and differs from the
 * exact f32 one by tf32's error (so the flag is not ignored); tf32 on a
 * 16-bit gemm is refused. */
START_TEST(gemm_tf32) {
  RtDevice *d = open_emu();
  enum { M = 7, N = 9, K = 33 };
  float a[M * K], b[K * N], c[M * N], exact[M * N];
  uint32_t seed = 11;
  for (int i = 0; i < M * K + K * N; i++) {
    seed = seed * 1664525u + 1013904223u;
    float v = (float)(seed >> 8) / (1 << 24) - 0.5f;
    if (i < M * K)
      a[i] = v;
    else
      b[i - M * K] = v;
  }
  RtGemm g = {.dtype = RT_DT_F32, .m = M, .n = N, .k = K, .lda = K, .ldb = N, .ldc = N, .batch = 1, .alpha = 1.0f};
  ck_assert_msg(d->ops->gemm(d, &g, dev_ptr(a), dev_ptr(b), dev_ptr(exact), 0, 0) == 0, "%s", d->error);
  g.tf32 = 1;
  ck_assert_msg(d->ops->gemm(d, &g, dev_ptr(a), dev_ptr(b), dev_ptr(c), 0, 0) == 0, "%s", d->error);
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double x = 0;
      for (int p = 0; p < K; p++) x += tf32_ref(a[i * K + p]) * tf32_ref(b[p * N + j]);
      ck_assert_msg(fabs(c[i * N + j] - x) <= 1e-6 * fmax(1.0, fabs(x)), "C[%d][%d] = %.9g, want %.9g", i, j,
                    (double)c[i * N + j], x);
      worst = fmax(worst, fabs(c[i * N + j] - exact[i * N + j]));
    }
  ck_assert_msg(worst > 1e-5 && worst < 1e-2, "tf32 against exact: %g", worst);
  g.dtype = RT_DT_F16;
  ck_assert_int_eq(d->ops->gemm(d, &g, dev_ptr(a), dev_ptr(b), dev_ptr(c), 0, 0), -1);
  ck_assert_str_eq(d->error, "emu gemm: tf32 on a gemm that is not f32 (dtype 1)");
  close_dev(d, NULL);
}
END_TEST

START_TEST(gemm_rejects_bad_arguments) {
  RtDevice *d = open_emu();
  float x[4] = {0};
  RtGemm g = {.dtype = RT_DT_I32, .m = 1, .n = 1, .k = 1, .lda = 1, .ldb = 1, .ldc = 1, .batch = 1, .alpha = 1};
  ck_assert_int_eq(d->ops->gemm(d, &g, dev_ptr(x), dev_ptr(x), dev_ptr(x), 0, 0), -1);
  ck_assert_msg(strstr(d->error, "dtype"), "%s", d->error);
  g.dtype = RT_DT_F32, g.k = 4;
  ck_assert_int_eq(d->ops->gemm(d, &g, dev_ptr(x), dev_ptr(x), dev_ptr(x), 0, 0), -1);
  ck_assert_msg(strstr(d->error, "leading dimension"), "%s", d->error);
  close_dev(d, NULL);
  d = open_emu();
  g.k = 1, g.beta = 1;
  ck_assert_int_eq(d->ops->gemm(d, &g, dev_ptr(x), dev_ptr(x), dev_ptr(x), 0, 0), -1);
  ck_assert_str_eq(d->error, "emu gemm: beta 1 without a C to read");
  close_dev(d, NULL);
}
END_TEST

/* ---- end to end through the plan executor (model.c) ---- */

/* y = relu(x @ w + b) and y_pre = x @ w + b: a GEMM into the arena, a
 * kernel reading the arena and the weights, a copy between spaces. */
static const char BIAS_RELU_SRC[] =
    "extern \"C\" __global__ void bias_relu(float *acc, const float *bias, float *y, int n, int cols) {\n"
    "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {\n"
    "    acc[i] += bias[i % cols];\n"
    "    y[i] = fmaxf(acc[i], 0.0f);\n"
    "  }\n"
    "}\n"
    "#ifdef DLCC_EMU\n"
    "extern \"C\" void bias_relu__emu(void **a) {\n"
    "  bias_relu(*(float **)a[0], *(const float **)a[1], *(float **)a[2], *(int *)a[3], *(int *)a[4]);\n"
    "}\n"
    "#endif\n";

START_TEST(plan_end_to_end_through_executor) {
  enum { B = 4, IN = 8, OUT = 6 };
  static float blob[128];
  float x[B * IN], y[B * OUT], y_pre[B * OUT];
  for (int i = 0; i < IN * OUT; i++) blob[i] = (float)((i * 5) % 7) - 3.0f;
  for (int j = 0; j < OUT; j++) blob[64 + j] = 0.5f * (float)j - 1.0f;
  for (int i = 0; i < B * IN; i++) x[i] = (float)((i * 3) % 5) - 2.0f;
  static const RtKernel kernels[] = {{"bias_relu", 0, 0, 0, 0}};
  static const RtTensorDesc weights[] = {
      {.name = "w", .dtype = RT_DT_F32, .rank = 2, .dims = {IN, OUT}, .nbytes = IN * OUT * 4,
       .where = {RT_SPACE_WEIGHTS, 0, 0}},
      {.name = "b", .dtype = RT_DT_F32, .rank = 1, .dims = {OUT}, .nbytes = OUT * 4, .where = {RT_SPACE_WEIGHTS, 0, 256}},
  };
  static const RtTensorDesc inputs[] = {
      {.name = "x", .dtype = RT_DT_F32, .rank = 2, .dims = {B, IN}, .nbytes = B * IN * 4, .where = {RT_SPACE_INPUT, 0, 0}}};
  static const RtTensorDesc outputs[] = {
      {.name = "y", .dtype = RT_DT_F32, .rank = 2, .dims = {B, OUT}, .nbytes = B * OUT * 4,
       .where = {RT_SPACE_OUTPUT, 0, 0}},
      {.name = "y_pre", .dtype = RT_DT_F32, .rank = 2, .dims = {B, OUT}, .nbytes = B * OUT * 4,
       .where = {RT_SPACE_OUTPUT, 1, 0}},
  };
  static const RtArg args[] = {
      {RT_ARG_PTR, {RT_SPACE_ARENA, 0, 64}, 0, 0},
      {RT_ARG_PTR, {RT_SPACE_WEIGHTS, 0, 256}, 0, 0},
      {RT_ARG_PTR, {RT_SPACE_OUTPUT, 0, 0}, 0, 0},
      {RT_ARG_I32, {0, 0, 0}, B * OUT, 0},
      {RT_ARG_I32, {0, 0, 0}, OUT, 0},
  };
  RtStep steps[3] = {{0}};
  steps[0].kind = RT_STEP_GEMM;
  steps[0].label = "linear";
  steps[0].gemm = (RtGemm){.dtype = RT_DT_F32,
                           .m = B,
                           .n = OUT,
                           .k = IN,
                           .lda = IN,
                           .ldb = OUT,
                           .ldc = OUT,
                           .batch = 1,
                           .alpha = 1.0f,
                           .a = {RT_SPACE_INPUT, 0, 0},
                           .b = {RT_SPACE_WEIGHTS, 0, 0},
                           .c = {RT_SPACE_ARENA, 0, 64}};
  steps[1].kind = RT_STEP_LAUNCH;
  steps[1].label = "bias relu";
  steps[1].launch = (RtLaunch){.kernel = 0, .grid = {2, 1, 1}, .block = {8, 1, 1}, .n_args = 5, .args = args};
  static const RtParam params[] = {
      {.kind = RT_ARG_PTR, .access = RT_ACCESS_READ | RT_ACCESS_WRITE, .nbytes = B * OUT * 4},
      {.kind = RT_ARG_PTR, .access = RT_ACCESS_READ, .nbytes = OUT * 4},
      {.kind = RT_ARG_PTR, .access = RT_ACCESS_WRITE, .nbytes = B * OUT * 4},
      {.kind = RT_ARG_I32, .lo = B * OUT, .hi = B * OUT},
      {.kind = RT_ARG_I32, .lo = OUT, .hi = OUT},
  };
  static const RtContract contract = {.grid = {2, 1, 1}, .block = {8, 1, 1}, .n_params = 5, .params = params};
  steps[2].kind = RT_STEP_COPY;
  steps[2].label = "copy";
  steps[2].copy = (RtCopy){.dst = {RT_SPACE_OUTPUT, 1, 0}, .src = {RT_SPACE_ARENA, 0, 64}, .nbytes = B * OUT * 4};
  RtPlan p = make_plan(BIAS_RELU_SRC, kernels, 1);
  p.model_name = "tiny";
  p.n_steps = 3, p.steps = steps;
  p.n_contracts = 1, p.contracts = &contract;
  p.arena_bytes = 256, p.weights_bytes = sizeof blob, p.weights_data = blob;
  p.n_weights = 2, p.weights = weights;
  p.n_inputs = 1, p.inputs = inputs;
  p.n_outputs = 2, p.outputs = outputs;

  DlrtModel *m = NULL;
  DlrtStatus s = dlrt_open(&p, "emu", &m);
  ck_assert_msg(s == DLRT_OK, "dlrt_open: %s", dlrt_error(m));
  ck_assert_str_eq(dlrt_backend(m), "emu");
  ck_assert_int_eq(dlrt_set_input(m, 0, x, sizeof x), DLRT_OK);
  ck_assert_msg(dlrt_run(m) == DLRT_OK, "%s", dlrt_error(m));
  ck_assert_int_eq(dlrt_get_output(m, 0, y, sizeof y), DLRT_OK);
  ck_assert_int_eq(dlrt_get_output_by_name(m, "y_pre", y_pre, sizeof y_pre), DLRT_OK);
  for (int i = 0; i < B; i++)
    for (int j = 0; j < OUT; j++) {
      float acc = 0;
      for (int k = 0; k < IN; k++) acc += x[i * IN + k] * blob[k * OUT + j];
      acc += blob[64 + j];
      ck_assert_float_eq_tol(y_pre[i * OUT + j], acc, 1e-5f);
      ck_assert_float_eq_tol(y[i * OUT + j], acc > 0 ? acc : 0.0f, 1e-5f);
    }
  dlrt_close(m);
}
END_TEST

/* ---- driver ---- */

static int rm_tree(const char *path) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  return system(cmd);
}

/* ---- cooperative grids ---- */

/* Each round, every block publishes its value and then sums everyone's:
 * without a real grid barrier a block reads values not yet written (or
 * already replaced), and without per-block shared memory `mine` is one
 * block's. */
static const char COOP_SRC[] =
    "extern \"C\" __global__ void coop_sum(const int *in, int *out, int *bar, int rounds) {\n"
    "  __shared__ int mine;\n"
    "  int b = blockIdx.x, nb = gridDim.x;\n"
    "  if (threadIdx.x == 0) mine = in[b];\n"
    "  __syncthreads();\n"
    "  for (int r = 0; r < rounds; r++) {\n"
    "    if (threadIdx.x == 0) out[b] = mine;\n"
    "    dl_grid_sync(bar);\n"
    "    int s = 0;\n"
    "    for (int i = 0; i < nb; i++) s += out[i];\n"
    "    if (threadIdx.x == nb % blockDim.x) mine = s + b;\n"
    "    dl_grid_sync(bar);\n"
    "  }\n"
    "  if (threadIdx.x == 0) out[b] = mine;\n"
    "}\n"
    "#ifdef DLCC_EMU\n"
    "extern \"C\" void coop_sum__emu(void **a) {\n"
    "  coop_sum(*(const int **)a[0], *(int **)a[1], *(int **)a[2], *(int *)a[3]);\n"
    "}\n"
    "#endif\n"
    "extern \"C\" __global__ void coop_exit(int *bar) {\n"
    "  if (blockIdx.x == 1) return;\n"
    "  dl_grid_sync(bar);\n"
    "}\n"
    "#ifdef DLCC_EMU\n"
    "extern \"C\" void coop_exit__emu(void **a) { coop_exit(*(int **)a[0]); }\n"
    "#endif\n";

enum { C_SUM, C_EXIT, C_COUNT };
static const RtKernel coop_kernels[C_COUNT] = {{"coop_sum", 1, 4, 1, 0}, {"coop_exit", 1, 0, 1, 0}};

START_TEST(cooperative_grid_barrier_and_shared_per_block) {
  enum { B = 6, ROUNDS = 3 };
  RtDevice *d = open_emu();
  RtModule *m = load_ok(d, COOP_SRC, coop_kernels, C_COUNT);
  int in[B], out[B], bar[2] = {0, 0}, rounds = ROUNDS;
  long long want[B];
  for (int b = 0; b < B; b++) in[b] = want[b] = 10 * b + 1;
  for (int r = 0; r < ROUNDS; r++) {
    long long s = 0;
    for (int b = 0; b < B; b++) s += want[b];
    for (int b = 0; b < B; b++) want[b] = s + b;
  }
  RtDevPtr pi = dev_ptr(in), po = dev_ptr(out), pb = dev_ptr(bar);
  const void *args[] = {&pi, &po, &pb, &rounds};
  ck_assert_msg(launch(d, m, C_SUM, B, 1, 64, 1, 0, args) == 0, "%s", d->error);
  for (int b = 0; b < B; b++) ck_assert_int_eq(out[b], want[b]);
  close_dev(d, m);
}
END_TEST

START_TEST(cooperative_grid_errors) {
  RtDevice *d = open_emu();
  RtModule *m = load_ok(d, COOP_SRC, coop_kernels, C_COUNT);
  int in[1] = {0}, out[300], bar[2] = {0, 0}, rounds = 1;
  RtDevPtr pi = dev_ptr(in), po = dev_ptr(out), pb = dev_ptr(bar);
  const void *args[] = {&pi, &po, &pb, &rounds};
  /* 1024 threads: two blocks per SM, so 264 fit and 265 do not. */
  ck_assert_int_eq(launch(d, m, C_SUM, 265, 1, 1024, 1, 0, args), -1);
  ck_assert_str_eq(d->error, "emu: kernel coop_sum: a cooperative grid of 265 blocks of 1024 threads (4 bytes of "
                             "shared memory) does not fit at once on the modelled GPU (132 SMs: at most 264)");
  const void *exit_args[] = {&pb};
  ck_assert_int_eq(launch(d, m, C_EXIT, 3, 1, 32, 1, 0, exit_args), -1);
  ck_assert_str_eq(d->error, "emu: kernel coop_exit: 1 blocks exited while 2 wait at the grid barrier (a hang on "
                             "the GPU)");
  close_dev(d, m);
  /* A grid barrier in a kernel the plan does not call cooperative. */
  RtKernel ks[C_COUNT];
  memcpy(ks, coop_kernels, sizeof ks);
  ks[C_EXIT].cooperative = 0;
  d = open_emu();
  m = load_ok(d, COOP_SRC, ks, C_COUNT);
  ck_assert_int_eq(launch(d, m, C_EXIT, 1, 1, 32, 1, 0, exit_args), -1);
  ck_assert_msg(strstr(d->error, "kernel coop_exit uses the grid barrier but the plan says it is not cooperative"),
                "%s", d->error);
  close_dev(d, m);
}
END_TEST

/* The fiber tests again on swapcontext, the path without the fast
 * switch (runtime/emu_fiber.h). */
static void use_swapcontext(void) { setenv("DLCC_EMU_SWITCH", "ucontext", 1); }
static void use_fast_switch(void) { unsetenv("DLCC_EMU_SWITCH"); }

static Suite *emu_suite(void) {
  Suite *s = suite_create("emu");
  TCase *k = tcase_create("kernels");
  tcase_set_timeout(k, 300);
  tcase_add_test(k, grid_stride_elementwise);
  tcase_add_test(k, block_reduction_shared);
  tcase_add_test(k, warp_shuffles);
  tcase_add_test(k, atomic_histogram);
  tcase_add_test(k, tiled_transpose_2d_blocks);
  tcase_add_test(k, dynamic_shared_memory);
  tcase_add_test(k, fibers_survive_growing_blocks);
  tcase_add_test(k, half_bits_match_cuda);
  tcase_add_test(k, bf16_bits_match_cuda);
  tcase_add_test(k, conversions_exhaustive_sweep);
  tcase_add_test(k, cooperative_grid_barrier_and_shared_per_block);
  tcase_add_test(k, cooperative_grid_errors);
  suite_add_tcase(s, k);
  TCase *e = tcase_create("errors");
  tcase_set_timeout(e, 300);
  tcase_add_test(e, barrier_in_kernel_the_plan_calls_barrier_free);
  tcase_add_test(e, shuffle_in_kernel_the_plan_calls_barrier_free);
  tcase_add_test(e, thread_exits_while_others_wait);
  tcase_add_test(e, lane_exits_while_warp_waits);
  tcase_add_test(e, threads_at_different_barriers_deadlock);
  tcase_add_test(e, assert_in_kernel_is_an_error);
  tcase_add_test(e, invalid_launch_configuration);
  tcase_add_test(e, compile_error_gives_compiler_message);
  tcase_add_test(e, missing_launcher_is_named);
  tcase_add_test(e, missing_compiler_fails_open);
  suite_add_tcase(s, e);
  TCase *u = tcase_create("swapcontext");
  tcase_set_timeout(u, 300);
  tcase_add_checked_fixture(u, use_swapcontext, use_fast_switch);
  tcase_add_test(u, block_reduction_shared);
  tcase_add_test(u, warp_shuffles);
  tcase_add_test(u, fibers_survive_growing_blocks);
  tcase_add_test(u, cooperative_grid_barrier_and_shared_per_block);
  tcase_add_test(u, threads_at_different_barriers_deadlock);
  tcase_add_test(u, lane_exits_while_warp_waits);
  suite_add_tcase(s, u);
  TCase *c = tcase_create("cache");
  tcase_set_timeout(c, 300);
  tcase_add_test(c, cache_hit_on_second_load);
  suite_add_tcase(s, c);
  TCase *g = tcase_create("gemm");
  tcase_set_timeout(g, 300);
  tcase_add_test(g, gemm_f32_transposes_and_odd_sizes);
  tcase_add_test(g, gemm_batched_broadcast);
  tcase_add_test(g, gemm_half_inputs);
  tcase_add_test(g, gemm_epilogues);
  tcase_add_test(g, gemm_bias_grad);
  tcase_add_test(g, gemm_tf32);
  tcase_add_test(g, gemm_rejects_bad_arguments);
  suite_add_tcase(s, g);
  TCase *x = tcase_create("executor");
  tcase_set_timeout(x, 300);
  tcase_add_test(x, plan_end_to_end_through_executor);
  suite_add_tcase(s, x);
  return s;
}

int main(void) {
  /* The header from the source tree unless the caller chose one. */
  const char *top = getenv("top_srcdir");
  static char header[512];
  if (!getenv("DLCC_EMU_HEADER") && top) {
    snprintf(header, sizeof header, "%s/runtime/emu/dlcc_emu.h", top);
    setenv("DLCC_EMU_HEADER", header, 1);
  }
  /* A private kernel cache: shared by this run's tests (the main source
   * compiles once), gone afterwards. */
  snprintf(cache_root, sizeof cache_root, "%s/dlcc-test-emu-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(cache_root)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("DLCC_CACHE_DIR", cache_root, 1);
  SRunner *r = srunner_create(emu_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  rm_tree(cache_root);
  return failed ? 1 : 0;
}
