/* The tensor-core instructions (codegen/emit_tc.c on the GPU, the emu
 * header's versions from the PTX ISA): hand-written CUDA kernels that
 * build fragments by the ISA's formulas or with ldmatrix from shared
 * memory filled by cp.async, run on the emu device against a plain C GEMM
 * on random inputs; kernels with a wrong fragment mapping, reads before
 * cp.async completes, and divergent warps, which must fail; and the same
 * text through NVRTC for sm_80, sm_90 and sm_90a.  `test_mma --cubin ARCH
 * FILE` writes the kernels' cubin instead (tests/tc_sass.sh). */
#include "check_quiet.h"
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel.h"
#include "runtime/device.h"
#include "runtime/runtime.h"
#include "tests/mma_kernels.h"
#include "tests/testutil.h"

static Ctx ctx;
static const char *source; /* the prelude with the tensor-core text, then MMA_KERNELS */
static RtDevice *dev;
static RtModule *mod;
static uint64_t seed;

static void setup(void) {
  ctx_init(&ctx);
  source = arena_printf(&ctx.arena, "%s\n%s", cg_cuda_prelude(&ctx, false, false, true), MMA_KERNELS);
  seed = 0x5eed0001;
}

static void teardown(void) { ctx_free(&ctx); }

/* The emu device with the kernels loaded (compiled once per run: the
 * cache is shared by the tests). */
static void open_emu(const RtKernel *ks) {
  char err[512];
  dev = rt_emu_open(err, sizeof err);
  ck_assert_msg(dev != NULL, "rt_emu_open: %s", err);
  RtPlan p = {.magic = RT_PLAN_MAGIC,
              .version = RT_PLAN_VERSION,
              .model_name = "test_mma",
              .source = source,
              .n_kernels = MK_COUNT,
              .kernels = ks};
  mod = NULL;
  ck_assert_msg(dev->ops->load(dev, &p, &mod) == 0, "load: %s", dev->error);
}

static void close_emu(void) {
  dev->ops->unload(dev, mod);
  dev->ops->destroy(dev);
}

static int launch(uint32_t kernel, uint32_t block, const void *const *args) {
  RtLaunch l = {.kernel = kernel, .grid = {1, 1, 1}, .block = {block, 1, 1}};
  return dev->ops->launch(dev, mod, &l, args);
}

static void launch_ok(uint32_t kernel, uint32_t block, const void *const *args) {
  ck_assert_msg(launch(kernel, block, args) == 0, "%s", dev->error);
}

static RtDevPtr ptr(const void *p) { return (RtDevPtr)(uintptr_t)p; }

static uint32_t rnd(void) { return (uint32_t)test_splitmix64(&seed); }

/* A random f16 or bf16 of magnitude 2^-3..2^3 (as bits), and its value. */
static uint16_t rnd_half(bool bf16) {
  uint32_t r = rnd(), sign = (r & 1u) << 15;
  if (bf16) return (uint16_t)(sign | (124u + r / 2 % 7) << 7 | (r >> 8 & 0x7fu));
  return (uint16_t)(sign | (12u + r / 2 % 7) << 10 | (r >> 8 & 0x3ffu));
}

static double half_value(bool bf16, uint16_t h) { return bf16 ? ir_bf16_to_double(h) : ir_f16_to_double(h); }

/* A multiple of 1/8 in [-2, 2]: every product and sum of these tests'
 * sizes is exact in f32, so any order of summation gives the same bits. */
static double rnd_dyadic(void) { return (double)((int)(rnd() % 33) - 16) / 8.0; }

static uint16_t half_bits(bool bf16, double v) { return bf16 ? ir_bf16_from_double(v) : ir_f16_from_double(v); }

/* got against the plain GEMM: |got - ref| <= tol * scale, scale being
 * |c| + sum |a b|, what an f32 sum of these terms may lose a few ulps of
 * (PTX leaves the order and rounding of the accumulation open). */
static double worst(const float *got, const double *ref, const double *scale, int n, int *at) {
  double w = 0;
  for (int i = 0; i < n; i++) {
    double e = fabs((double)got[i] - ref[i]) / scale[i];
    if (!(e <= w)) w = e, *at = i; /* NaN is the worst */
  }
  return w;
}

static void expect_near(const float *got, const double *ref, const double *scale, int n, double tol, const char *what) {
  int at = 0;
  double w = worst(got, ref, scale, n, &at);
  ck_assert_msg(w <= tol, "%s: element %d is %.9g, the plain GEMM gives %.9g (error %.3g of the scale, at most %.3g)", what,
                at, got[at], ref[at], w, tol);
}

/* Any order of an f32 sum of K + 1 terms is within about K units of
 * 2^-24 of the scale. */
#define SUM_TOL(k) ((k) + 1) * 5.9604644775390625e-8

/* ---- m16n8k16 f16 / bf16, by the ISA's formulas ---- */

typedef struct HalfCase {
  uint16_t A[16 * 32], B[32 * 8];
  float C[16 * 8], D[16 * 8];
  double ref[16 * 8], scale[16 * 8];
} HalfCase;

static void run_16816(HalfCase *h, bool bf16, bool dyadic, int wrong) {
  int K = 32, bf = bf16;
  for (int i = 0; i < 16 * K; i++) h->A[i] = dyadic ? half_bits(bf16, rnd_dyadic()) : rnd_half(bf16);
  for (int i = 0; i < K * 8; i++) h->B[i] = dyadic ? half_bits(bf16, rnd_dyadic()) : rnd_half(bf16);
  for (int i = 0; i < 128; i++) h->C[i] = (float)(dyadic ? rnd_dyadic() : half_value(false, rnd_half(false)));
  for (int m = 0; m < 16; m++)
    for (int n = 0; n < 8; n++) {
      double s = h->C[m * 8 + n], sc = fabs(s);
      for (int k = 0; k < K; k++) {
        double p = half_value(bf16, h->A[m * K + k]) * half_value(bf16, h->B[k * 8 + n]);
        s += p, sc += fabs(p);
      }
      h->ref[m * 8 + n] = s, h->scale[m * 8 + n] = sc;
    }
  RtDevPtr a = ptr(h->A), b = ptr(h->B), c = ptr(h->C), d = ptr(h->D);
  const void *args[] = {&bf, &a, &b, &c, &d, &K, &wrong};
  launch_ok(MK_16816, 32, args);
}

START_TEST(mma_f16_and_bf16_against_plain_gemm) {
  open_emu(mma_kernels);
  HalfCase h;
  for (int bf16 = 0; bf16 < 2; bf16++) {
    const char *name = bf16 ? "dl_mma_bf16" : "dl_mma_f16";
    for (int rep = 0; rep < 3; rep++) {
      run_16816(&h, bf16, false, 0);
      expect_near(h.D, h.ref, h.scale, 128, SUM_TOL(32), name);
    }
    run_16816(&h, bf16, true, 0);
    expect_near(h.D, h.ref, h.scale, 128, 0, name);
  }
  close_emu();
}
END_TEST

/* A generator that packs a fragment wrongly gets a wrong D on the CPU. */
START_TEST(wrong_fragment_mapping_gives_wrong_d) {
  open_emu(mma_kernels);
  HalfCase h;
  static const char *const what[] = {"", "rows g and g + 8 of A swapped", "halves of A's registers swapped",
                                     "B's fragment read transposed"};
  for (int wrong = 1; wrong <= 3; wrong++) {
    run_16816(&h, false, false, wrong);
    int at = 0;
    double w = worst(h.D, h.ref, h.scale, 128, &at);
    ck_assert_msg(w > 0.01, "%s: D still matches the plain GEMM (error %.3g of the scale)", what[wrong], w);
  }
  close_emu();
}
END_TEST

/* ---- m16n8k32 s8 ---- */

static void run_16832(const signed char *A, const signed char *B, const int *C, int *D, int K) {
  RtDevPtr a = ptr(A), b = ptr(B), c = ptr(C), d = ptr(D);
  const void *args[] = {&a, &b, &c, &d, &K};
  launch_ok(MK_16832, 32, args);
}

/* The products of s8 pairs summed into C in wrapping s32. */
static uint32_t s8_ref(const signed char *A, const signed char *B, const int *C, int K, int m, int n) {
  uint32_t s = (uint32_t)C[m * 8 + n];
  for (int k = 0; k < K; k++) s += (uint32_t)(A[m * K + k] * B[k * 8 + n]);
  return s;
}

START_TEST(mma_s8_exact_and_wrapping) {
  open_emu(mma_kernels);
  enum { K = 64 };
  signed char A[16 * K], B[K * 8];
  int C[128], D[128];
  for (int i = 0; i < 16 * K; i++) A[i] = (signed char)(rnd() & 0xff);
  for (int i = 0; i < K * 8; i++) B[i] = (signed char)(rnd() & 0xff);
  for (int i = 0; i < 128; i++) C[i] = (int)(rnd() % 2000001) - 1000000;
  run_16832(A, B, C, D, K);
  for (int i = 0; i < 128; i++) ck_assert_int_eq(D[i], (int)s8_ref(A, B, C, K, i / 8, i % 8));
  /* Past INT_MAX: no .satfinite, so it wraps. */
  for (int i = 0; i < 16 * K; i++) A[i] = (signed char)(100 + rnd() % 28);
  for (int i = 0; i < K * 8; i++) B[i] = (signed char)(100 + rnd() % 28);
  for (int i = 0; i < 128; i++) C[i] = i % 2 ? 2147000000 : -2147000000;
  run_16832(A, B, C, D, K);
  int wrapped = 0;
  for (int i = 0; i < 128; i++) {
    uint32_t r = s8_ref(A, B, C, K, i / 8, i % 8);
    int64_t wide = C[i];
    for (int k = 0; k < K; k++) wide += A[i / 8 * K + k] * B[k * 8 + i % 8];
    wrapped += wide != (int32_t)r;
    ck_assert_int_eq(D[i], (int)r);
  }
  ck_assert_int_gt(wrapped, 0);
  close_emu();
}
END_TEST

/* ---- tf32 ---- */

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* cvt.rna.tf32.f32 by distances: of the two tf32 values around x (10
 * fraction bits), the nearer, ties away from zero. */
static uint32_t tf32_ref(float x) {
  uint32_t u = f32_bits(x), lo = u & ~0x1fffu;
  if (isinf(x) || u == lo) return u;
  int e = (int)(u >> 23 & 0xff);
  double ulp = ldexp(1.0, (e ? e : 1) - 127 - 10), dlo = fabs((double)bits_f32(lo)), dx = fabs((double)x);
  return dx - dlo < dlo + ulp - dx ? lo : lo + 0x2000u;
}

START_TEST(tf32_rounds_to_nearest_ties_away) {
  open_emu(mma_kernels);
  enum { N = 4096 };
  static float x[N];
  static unsigned y[N];
  const float edge[] = {0.0f, -0.0f, 1.0f, bits_f32(0x3f801000u), bits_f32(0xbf801000u), bits_f32(0x3f803000u),
                        bits_f32(0x3f800fffu), FLT_MAX, -FLT_MAX, bits_f32(0x7f7ff000u), INFINITY, -INFINITY,
                        bits_f32(0x00001000u), bits_f32(0x00003000u), bits_f32(0x007ff000u), FLT_MIN, NAN};
  int n_edge = (int)(sizeof edge / sizeof *edge);
  for (int i = 0; i < N; i++) x[i] = i < n_edge ? edge[i] : bits_f32(rnd());
  int n = N;
  RtDevPtr px = ptr(x), py = ptr(y);
  const void *args[] = {&px, &py, &n};
  RtLaunch l = {.kernel = MK_TF32, .grid = {N / 128, 1, 1}, .block = {128, 1, 1}};
  ck_assert_msg(dev->ops->launch(dev, mod, &l, args) == 0, "%s", dev->error);
  for (int i = 0; i < N; i++) {
    if (isnan(x[i])) {
      ck_assert_msg(isnan(bits_f32(y[i])), "dl_tf32(NaN) is 0x%08x", y[i]);
      continue;
    }
    ck_assert_msg(y[i] == tf32_ref(x[i]), "dl_tf32(%a = 0x%08x) is 0x%08x, not 0x%08x", (double)x[i], f32_bits(x[i]),
                  y[i], tf32_ref(x[i]));
  }
  ck_assert_uint_eq(y[3], 0x3f802000u); /* a tie goes away from zero */
  ck_assert_uint_eq(y[4], 0xbf802000u);
  ck_assert_uint_eq(y[9], 0x7f800000u); /* past the largest tf32: infinity */
  close_emu();
}
END_TEST

START_TEST(mma_tf32_against_plain_gemm) {
  open_emu(mma_kernels);
  enum { K = 16 };
  float A[16 * K], B[K * 8], C[128], D[128];
  double ref[128], scale[128];
  for (int rep = 0; rep < 3; rep++) {
    for (int i = 0; i < 16 * K; i++) A[i] = (float)((double)(int32_t)rnd() / 536870912.0);
    for (int i = 0; i < K * 8; i++) B[i] = (float)((double)(int32_t)rnd() / 536870912.0);
    for (int i = 0; i < 128; i++) C[i] = (float)((double)(int32_t)rnd() / 536870912.0);
    for (int m = 0; m < 16; m++)
      for (int n = 0; n < 8; n++) {
        double s = C[m * 8 + n], sc = fabs(s);
        for (int k = 0; k < K; k++) {
          double p = (double)bits_f32(tf32_ref(A[m * K + k])) * bits_f32(tf32_ref(B[k * 8 + n]));
          s += p, sc += fabs(p);
        }
        ref[m * 8 + n] = s, scale[m * 8 + n] = sc;
      }
    int k = K;
    RtDevPtr a = ptr(A), b = ptr(B), c = ptr(C), d = ptr(D);
    const void *args[] = {&a, &b, &c, &d, &k};
    launch_ok(MK_1688, 32, args);
    expect_near(D, ref, scale, 128, SUM_TOL(K), "dl_mma_tf32");
  }
  close_emu();
}
END_TEST

/* ---- ldmatrix and cp.async ---- */

START_TEST(ldmatrix_x1_and_trans_layouts) {
  open_emu(mma_kernels);
  uint16_t M[64];
  unsigned out[64];
  for (int i = 0; i < 64; i++) M[i] = (uint16_t)rnd();
  RtDevPtr pm = ptr(M), po = ptr(out);
  const void *args[] = {&pm, &po};
  launch_ok(MK_LDSM_X1, 32, args);
  for (unsigned l = 0; l < 32; l++) {
    unsigned r = l >> 2, c = 2 * (l % 4);
    ck_assert_uint_eq(out[l], M[r * 8 + c] | (unsigned)M[r * 8 + c + 1] << 16);
    ck_assert_uint_eq(out[32 + l], M[c * 8 + r] | (unsigned)M[(c + 1) * 8 + r] << 16);
  }
  close_emu();
}
END_TEST

/* A 16x16x48 GEMM through cp.async double buffering and ldmatrix, A and B
 * each in both orientations, k >= 44 zero-filled in place of NaN. */
START_TEST(ldmatrix_and_cp_async_pipeline_against_plain_gemm) {
  open_emu(mma_kernels);
  enum { K = 48, KVALID = 44, LD_LONG = 56, LD_SHORT = 24 };
  static uint16_t A[K * LD_LONG], B[K * LD_LONG];
  float C[256], D[256];
  double ref[256], scale[256];
  for (int a_km = 0; a_km < 2; a_km++)
    for (int b_kn = 0; b_kn < 2; b_kn++) {
      int lda = a_km ? LD_SHORT : LD_LONG, ldb = b_kn ? LD_SHORT : LD_LONG;
      for (int i = 0; i < K * LD_LONG; i++) A[i] = B[i] = 0x7e00; /* NaN */
      for (int m = 0; m < 16; m++)
        for (int k = 0; k < KVALID; k++) A[a_km ? k * lda + m : m * lda + k] = rnd_half(false);
      for (int n = 0; n < 16; n++)
        for (int k = 0; k < KVALID; k++) B[b_kn ? k * ldb + n : n * ldb + k] = rnd_half(false);
      for (int i = 0; i < 256; i++) C[i] = (float)half_value(false, rnd_half(false));
      for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
          double s = C[m * 16 + n], sc = fabs(s);
          for (int k = 0; k < KVALID; k++) {
            double p = half_value(false, A[a_km ? k * lda + m : m * lda + k]) *
                       half_value(false, B[b_kn ? k * ldb + n : n * ldb + k]);
            s += p, sc += fabs(p);
          }
          ref[m * 16 + n] = s, scale[m * 16 + n] = sc;
        }
      int k = K, kvalid = KVALID;
      RtDevPtr pa = ptr(A), pb = ptr(B), pc = ptr(C), pd = ptr(D);
      const void *args[] = {&pa, &pb, &pc, &pd, &k, &kvalid, &lda, &ldb, &a_km, &b_kn};
      launch_ok(MK_PIPE, 64, args);
      char what[64];
      snprintf(what, sizeof what, "mma_pipe a_km %d b_kn %d", a_km, b_kn);
      expect_near(D, ref, scale, 256, SUM_TOL(K), what);
    }
  close_emu();
}
END_TEST

/* On the emu a thread sees its copies at the wait that retires their
 * group: not before, not at __syncthreads, not while the group is among
 * the N most recent, not before it is committed (the latest a GPU may
 * land them; the H200 landed some sooner, which PTX allows). */
START_TEST(cp_async_completes_at_its_wait) {
  open_emu(mma_kernels);
  unsigned src[96], out[224];
  for (int i = 0; i < 96; i++) src[i] = rnd();
  RtDevPtr ps = ptr(src), po = ptr(out);
  int raw = 1;
  const void *args[] = {&ps, &po, &raw};
  launch_ok(MK_CP_GROUPS, 32, args);
  static const char *const when[] = {"before any wait",        "after __syncthreads",     "after wait<1>",
                                     "after wait<1>",          "after wait<0>",           "after wait<0>",
                                     "after commit, wait<0>"};
  static const int group[] = {-1, -1, 0, -1, 1, -1, 2}; /* -1: still the sentinel */
  for (int step = 0; step < 7; step++)
    for (int t = 0; t < 32; t++) {
      unsigned want = group[step] < 0 ? 0xdeadbeefu : src[32 * group[step] + t];
      ck_assert_msg(out[32 * step + t] == want, "thread %d %s (step %d) reads 0x%08x, not 0x%08x", t, when[step], step,
                    out[32 * step + t], want);
    }
  /* rt_check's form (raw 0), compared byte for byte with the hardware:
   * where a group is still open the word says only "old or new". */
  raw = 0;
  launch_ok(MK_CP_GROUPS, 32, args);
  for (int step = 0; step < 7; step++)
    for (int t = 0; t < 32; t++) {
      unsigned want = group[step] < 0 ? 1u : src[32 * group[step] + t];
      ck_assert_msg(out[32 * step + t] == want, "raw 0: thread %d %s (step %d) reads 0x%08x, not 0x%08x", t,
                    when[step], step, out[32 * step + t], want);
    }
  close_emu();
}
END_TEST

START_TEST(cp_async_sizes_zero_fill_past_src_bytes) {
  open_emu(mma_kernels);
  unsigned char src[896], out[896];
  for (int i = 0; i < 896; i++) src[i] = (unsigned char)(rnd() | 1u);
  RtDevPtr ps = ptr(src), po = ptr(out);
  const void *args[] = {&ps, &po};
  launch_ok(MK_CP_SIZES, 32, args);
  for (int t = 0; t < 32; t++) {
    for (int i = 0; i < 16; i++) ck_assert_uint_eq(out[16 * t + i], i < t % 17 ? src[16 * t + i] : 0);
    for (int i = 0; i < 8; i++) ck_assert_uint_eq(out[512 + 8 * t + i], i < t % 9 ? src[512 + 8 * t + i] : 0);
    for (int i = 0; i < 4; i++) ck_assert_uint_eq(out[768 + 4 * t + i], i < t % 5 ? src[768 + 4 * t + i] : 0);
  }
  close_emu();
}
END_TEST

START_TEST(smem_addr_is_the_offset_in_shared_memory) {
  open_emu(mma_kernels);
  unsigned out[64];
  RtDevPtr po = ptr(out);
  const void *args[] = {&po};
  RtLaunch l = {.kernel = MK_SMEM_ADDR, .grid = {1, 1, 1}, .block = {32, 1, 1}, .dynamic_shared_bytes = 128};
  ck_assert_msg(dev->ops->launch(dev, mod, &l, args) == 0, "%s", dev->error);
  for (unsigned i = 0; i < 64; i++) ck_assert_uint_eq(out[i], 4 * (i % 32));
  close_emu();
}
END_TEST

/* ---- wgmma (sm_90a), on the emu ---- */

enum { WG_F16, WG_BF16, WG_TF32, WG_S8 };

typedef struct WgCase {
  int kind, n, kbytes, swz, depth, zero_first, wrong;
  _Alignas(16) unsigned char A[64 * 128], B[256 * 128];
  _Alignas(16) float C[64 * 256], D[64 * 256]; /* int32 for s8, the same bytes */
  double ref[64 * 256], scale[64 * 256];
} WgCase;

static int wg_size(int kind) { return kind == WG_S8 ? 1 : kind == WG_TF32 ? 4 : 2; }

/* Element k of row r of M (kbytes a row) as the instruction sees it: tf32
 * by its top 19 bits. */
static double wg_value(int kind, const unsigned char *M, int kbytes, int r, int k) {
  const unsigned char *p = M + r * kbytes + k * wg_size(kind);
  uint16_t h;
  uint32_t u;
  float f;
  switch (kind) {
  case WG_F16: memcpy(&h, p, 2); return ir_f16_to_double(h);
  case WG_BF16: memcpy(&h, p, 2); return ir_bf16_to_double(h);
  case WG_TF32: memcpy(&u, p, 4), u &= 0xffffe000u, memcpy(&f, &u, 4); return f;
  default: return (signed char)*p;
  }
}

/* Fills A, B and C at random (dyadic: every sum exact), runs wgmma_gemm
 * and computes the plain GEMM it must equal. */
static void run_wgmma(WgCase *w, bool dyadic) {
  int K = w->kbytes / wg_size(w->kind), N = w->n;
  for (int r = 0; r < 64 + N; r++) {
    unsigned char *row = r < 64 ? w->A + r * w->kbytes : w->B + (r - 64) * w->kbytes;
    for (int k = 0; k < K; k++) {
      unsigned char *p = row + k * wg_size(w->kind);
      if (w->kind == WG_S8) {
        *p = (unsigned char)(dyadic ? (int)(rnd() % 17) - 8 : (int)(rnd() & 0xff));
      } else if (w->kind == WG_TF32) {
        float f = (float)(dyadic ? rnd_dyadic() : half_value(false, rnd_half(false)) * (1.0 + (rnd() % 4096) / 8192.0));
        memcpy(p, &f, 4);
      } else {
        uint16_t h = dyadic ? half_bits(w->kind == WG_BF16, rnd_dyadic()) : rnd_half(w->kind == WG_BF16);
        memcpy(p, &h, 2);
      }
    }
  }
  for (int i = 0; i < 64 * N; i++) {
    if (w->kind == WG_S8) {
      int c = (int)(rnd() % 2000001) - 1000000;
      memcpy(&w->C[i], &c, 4);
    } else {
      w->C[i] = (float)(dyadic ? rnd_dyadic() : half_value(false, rnd_half(false)));
    }
  }
  for (int m = 0; m < 64; m++)
    for (int n = 0; n < N; n++) {
      int ci;
      memcpy(&ci, &w->C[m * N + n], 4);
      double c = w->zero_first ? 0 : w->kind == WG_S8 ? ci : w->C[m * N + n], s = c, sc = fabs(c);
      for (int k = 0; k < K; k++) {
        double p = wg_value(w->kind, w->A, w->kbytes, m, k) * wg_value(w->kind, w->B, w->kbytes, n, k);
        s += p, sc += fabs(p);
      }
      w->ref[m * N + n] = s, w->scale[m * N + n] = sc > 0 ? sc : 1;
    }
  for (int i = 0; i < 64 * N; i++) w->D[i] = NAN;
  RtDevPtr a = ptr(w->A), b = ptr(w->B), c = ptr(w->C), d = ptr(w->D);
  const void *args[] = {&w->kind, &a, &b, &c, &d, &w->n, &w->kbytes, &w->swz, &w->depth, &w->zero_first, &w->wrong};
  launch_ok(MK_WGMMA, 128, args);
}

/* D against the plain GEMM: exact for s8 (no wrap at these sizes) and
 * dyadic inputs, else within what an f32 sum may lose. */
static double wg_error(const WgCase *w, int *at) {
  int n = 64 * w->n;
  if (w->kind != WG_S8) return worst(w->D, w->ref, w->scale, n, at);
  double e = 0;
  for (int i = 0; i < n; i++) {
    int d;
    memcpy(&d, &w->D[i], 4);
    double x = fabs(d - w->ref[i]);
    if (x > e) e = x, *at = i;
  }
  return e;
}

START_TEST(wgmma_against_plain_gemm) {
  open_emu(mma_kernels);
  static WgCase w;
  static const char *const kinds[] = {"f16", "bf16", "tf32", "s8"};
  /* Every kind, N and swizzle mode, one or two groups in flight, C kept
   * or dropped by scale-d. */
  static const int shapes[][5] = {
      /* n, kbytes, swz, depth, zero_first */
      {16, 64, 0, 1, 0},  {32, 32, 32, 2, 0},  {64, 64, 64, 2, 1}, {128, 128, 128, 1, 0},
      {256, 64, 64, 2, 0}, {64, 128, 0, 2, 1}, {16, 128, 128, 2, 0}, {32, 64, 32, 1, 1},
  };
  for (int kind = 0; kind < 4; kind++)
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
      w.kind = kind, w.n = shapes[s][0], w.kbytes = shapes[s][1], w.swz = shapes[s][2];
      w.depth = shapes[s][3], w.zero_first = shapes[s][4], w.wrong = 0;
      for (int dyadic = 0; dyadic < 2; dyadic++) {
        run_wgmma(&w, dyadic);
        int at = 0, K = w.kbytes / wg_size(kind);
        double e = wg_error(&w, &at), tol = dyadic || kind == WG_S8 ? 0 : SUM_TOL(K);
        ck_assert_msg(e <= tol,
                      "wgmma %s n%d, %d bytes of K, swizzle %d, depth %d%s%s: element %d is off by %.3g (at most %.3g)",
                      kinds[kind], w.n, w.kbytes, w.swz, w.depth, w.zero_first ? ", scale-d 0 first" : "",
                      dyadic ? ", exact inputs" : "", at, e, tol);
      }
    }
  close_emu();
}
END_TEST

/* wgmma completes at the wait that retires its group, not before: a
 * kernel that reads the accumulators early, or overwrites a tile a
 * pending group reads, gets wrong numbers here as it may on the GPU. */
START_TEST(wgmma_completes_at_its_wait) {
  open_emu(mma_kernels);
  static WgCase w;
  w.kind = WG_F16, w.n = 64, w.kbytes = 64, w.swz = 64, w.zero_first = 0;
  int at = 0;
  w.depth = 2, w.wrong = 1; /* the last group still pending at the stores */
  run_wgmma(&w, true);
  ck_assert_msg(wg_error(&w, &at) > 0, "D read before the last wait still equals the GEMM");
  w.depth = 2, w.wrong = 2;
  run_wgmma(&w, true);
  ck_assert_msg(wg_error(&w, &at) > 0, "A overwritten under a pending group: D still equals the GEMM");
  w.depth = 1, w.wrong = 2; /* every group retired before the overwrite */
  run_wgmma(&w, true);
  ck_assert_msg(wg_error(&w, &at) == 0, "A overwritten after the last wait changed D (element %d)", at);
  close_emu();
}
END_TEST

/* ---- what must fail ---- */

static int line_of(const char *marker) {
  const char *p = strstr(source, marker);
  ck_assert_ptr_nonnull(p);
  int line = 1;
  for (const char *q = source; q < p; q++) line += *q == '\n';
  return line;
}

/* The launch fails with an error holding every needle (NULL-ended), and
 * the device runs the next launch. */
static void expect_error(uint32_t kernel, uint32_t block, const void *const *args, ...) {
  va_list ap;
  va_start(ap, args);
  const char *first = va_arg(ap, const char *);
  va_end(ap);
  ck_assert_msg(launch(kernel, block, args) == -1, "the launch did not fail with '%s'", first);
  va_start(ap, args);
  for (const char *needle; (needle = va_arg(ap, const char *));)
    ck_assert_msg(strstr(dev->error, needle), "error '%s' lacks '%s'", dev->error, needle);
  va_end(ap);
  unsigned out[64];
  RtDevPtr po = ptr(out);
  const void *ok[] = {&po};
  launch_ok(MK_SMEM_ADDR, 32, ok);
}

static char *fmt(const char *f, int line) { return arena_printf(&ctx.arena, f, line); }

START_TEST(divergent_warps_are_errors) {
  open_emu(mma_kernels);
  unsigned in[6] = {0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};
  float out[32];
  RtDevPtr pi = ptr(in), po = ptr(out);
  int how = 0;
  const void *args[] = {&pi, &po, &how};
  expect_error(MK_DIVERGE, 32, args, "thread (16,0,0): exited while others of its warp wait for it at ",
               fmt("dl_mma_f16 at line %d", line_of("@half")), NULL);
  how = 1;
  expect_error(MK_DIVERGE, 32, args, fmt("thread (16,0,0): waits at dl_mma_f16 at line %d", line_of("@site2")),
               fmt("while thread (0,0,0) of its warp waits at dl_mma_f16 at line %d", line_of("@site1")),
               "must reach a warp-collective instruction together", NULL);
  how = 2;
  expect_error(MK_DIVERGE, 32, args, "thread (16,0,0): waits at a warp shuffle or __syncwarp while thread (0,0,0)",
               fmt("waits at dl_mma_f16 at line %d", line_of("@beside_shfl")), NULL);
  how = 4;
  expect_error(MK_DIVERGE, 32, args,
               fmt("thread (16,0,0): waits at dl_mma_f16 at line %d for thread (0,0,0) of its warp, which has exited",
                   line_of("@upper")),
               NULL);
  how = 3;
  launch_ok(MK_DIVERGE, 32, args);
  ck_assert_float_eq(out[31], 0x1p-10f); /* 16 products of bf16 0x3c00 = 2^-7 */
  expect_error(MK_DIVERGE, 16, args,
               fmt("dl_mma_bf16 at line %d needs all 32 lanes of a warp, but this thread's warp has 16",
                   line_of("@whole")),
               NULL);
  close_emu();
  RtKernel ks[MK_COUNT];
  memcpy(ks, mma_kernels, sizeof ks);
  ks[MK_DIVERGE].uses_barriers = 0;
  open_emu(ks);
  expect_error(MK_DIVERGE, 32, args,
               fmt("kernel diverge uses dl_mma_bf16 (line %d) but the plan says it has no barriers", line_of("@whole")),
               NULL);
  close_emu();
}
END_TEST

START_TEST(bad_addresses_are_errors) {
  open_emu(mma_kernels);
  _Alignas(16) static uint16_t gmem[512];
  RtDevPtr pg = ptr(gmem);
  int how = 0;
  const void *args[] = {&pg, &how};
  expect_error(MK_BAD_ADDR, 32, args, fmt("thread (9,0,0): dl_ldmatrix_x4 at line %d: row address", line_of("@ldsm_align")),
               "is not 16-byte aligned", NULL);
  how = 1;
  expect_error(MK_BAD_ADDR, 32, args,
               fmt("thread (3,0,0): dl_ldmatrix_x2_trans at line %d: row address", line_of("@ldsm_global")),
               "is not shared memory", NULL);
  how = 2;
  expect_error(MK_BAD_ADDR, 32, args, fmt("thread (0,0,0): dl_cp_async8 at line %d: shared", line_of("@cp_align")),
               "is not 8-byte aligned", NULL);
  how = 3;
  expect_error(MK_BAD_ADDR, 32, args, fmt("dl_cp_async16 at line %d: destination", line_of("@cp_global")),
               "is not shared memory", NULL);
  how = 4;
  expect_error(MK_BAD_ADDR, 32, args,
               fmt("dl_cp_async4 at line %d: src_bytes 5 is more than the 4 bytes it copies", line_of("@cp_size")), NULL);
  how = 5;
  expect_error(MK_BAD_ADDR, 32, args, fmt("dl_cp_async16 at line %d: source", line_of("@cp_from_shared")),
               "is shared memory, not global", NULL);
  how = 6;
  expect_error(MK_BAD_ADDR, 32, args, fmt("dl_smem_addr at line %d: ", line_of("@smem_addr")), "is not shared memory",
               NULL);
  close_emu();
}
END_TEST

/* The emu takes the kernels' wgmma side, as the H200 does, and their
 * mma.sync side under DLCC_NO_WGMMA=1, as the cuda device does then. */
START_TEST(emu_takes_the_wgmma_side_unless_told) {
  for (int off = 0; off < 2; off++) {
    if (off) setenv("DLCC_NO_WGMMA", "1", 1);
    open_emu(mma_kernels);
    int side = -1;
    RtDevPtr p = ptr(&side);
    const void *args[] = {&p};
    launch_ok(MK_WG_SIDE, 1, args);
    ck_assert_int_eq(side, !off);
    close_emu();
  }
  unsetenv("DLCC_NO_WGMMA");
}
END_TEST

START_TEST(wgmma_misuse_is_an_error) {
  open_emu(mma_kernels);
  int how = 0;
  const void *args[] = {&how};
  expect_error(MK_WGMMA_BAD, 128, args, fmt("dl_wgmma_f16_n16 at line %d: no dl_wgmma_fence", line_of("@wg_plain")),
               NULL);
  how = 1;
  expect_error(MK_WGMMA_BAD, 128, args, fmt("thread (5,0,0): dl_wgmma_f16_n16 at line %d: ", line_of("@wg_lane")),
               "differ from lane 0's", NULL);
  how = 2;
  expect_error(MK_WGMMA_BAD, 128, args, fmt("dl_wgmma_f16_n16 at line %d: A starts 48 bytes", line_of("@wg_align")),
               "512-byte swizzle pattern", NULL);
  how = 3;
  expect_error(MK_WGMMA_BAD, 128, args, "exited with 1 wgmma operations no dl_wgmma_wait completed", NULL);
  how = 4;
  expect_error(MK_WGMMA_BAD, 96, args,
               fmt("dl_wgmma_fence at line %d: needs whole warpgroups (128 threads), but the block has 96",
                   line_of("@wg_fence")),
               NULL);
  how = 5;
  expect_error(MK_WGMMA_BAD, 128, args, fmt("dl_wgmma_f16_n16 at line %d: A's row 0, byte 0", line_of("@wg_far")),
               "past shared memory", NULL);
  how = 6;
  expect_error(MK_WGMMA_BAD, 128, args, fmt("waits at dl_wgmma_f16_n16 at line %d", line_of("@wg_half")), NULL);
  close_emu();
}
END_TEST

/* ---- the GPU's side ---- */

START_TEST(prelude_only_when_asked) {
  const char *with = cg_cuda_prelude(&ctx, false, false, true), *without = cg_cuda_prelude(&ctx, false, false, false);
  ck_assert_ptr_null(strstr(without, "dl_mma_f16"));
  const char *tc = strstr(with, cg_tc_prelude());
  ck_assert_ptr_nonnull(tc);
  ck_assert_ptr_null(strstr(tc + 1, cg_tc_prelude()));
}
END_TEST

/* The emu's text is the GPU's: every kernel above, the wrong and the
 * divergent ones too, compiles with NVRTC (tensor cores from sm_80; sm_90a
 * is the arch-specific target later wgmma mma_kernels need). */
START_TEST(same_text_compiles_with_nvrtc) {
  test_nvrtc(source, "sm_80");
  test_nvrtc(source, "sm_90");
  test_nvrtc(source, "sm_90a");
}
END_TEST

static TCase *add_tcase(Suite *s, const char *name) {
  TCase *t = tcase_create(name);
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 300);
  suite_add_tcase(s, t);
  return t;
}

static Suite *mma_suite(void) {
  Suite *s = suite_create("mma");
  TCase *m = add_tcase(s, "mma");
  tcase_add_test(m, mma_f16_and_bf16_against_plain_gemm);
  tcase_add_test(m, wrong_fragment_mapping_gives_wrong_d);
  tcase_add_test(m, mma_s8_exact_and_wrapping);
  tcase_add_test(m, tf32_rounds_to_nearest_ties_away);
  tcase_add_test(m, mma_tf32_against_plain_gemm);
  TCase *l = add_tcase(s, "ldmatrix_cp_async");
  tcase_add_test(l, ldmatrix_x1_and_trans_layouts);
  tcase_add_test(l, ldmatrix_and_cp_async_pipeline_against_plain_gemm);
  tcase_add_test(l, cp_async_completes_at_its_wait);
  tcase_add_test(l, cp_async_sizes_zero_fill_past_src_bytes);
  tcase_add_test(l, smem_addr_is_the_offset_in_shared_memory);
  TCase *w = add_tcase(s, "wgmma");
  tcase_add_test(w, wgmma_against_plain_gemm);
  tcase_add_test(w, wgmma_completes_at_its_wait);
  tcase_add_test(w, emu_takes_the_wgmma_side_unless_told);
  TCase *e = add_tcase(s, "errors");
  tcase_add_test(e, divergent_warps_are_errors);
  tcase_add_test(e, bad_addresses_are_errors);
  tcase_add_test(e, wgmma_misuse_is_an_error);
  TCase *g = add_tcase(s, "gpu");
  tcase_add_test(g, prelude_only_when_asked);
  tcase_add_test(g, same_text_compiles_with_nvrtc);
  return s;
}

/* tests/tc_sass.sh's half: the mma_kernels compiled by the runtime's NVRTC
 * for arch, the cubin written to path. */
static int write_cubin(const char *arch, const char *path) {
  setup();
  RtPlan p = {.magic = RT_PLAN_MAGIC, .version = RT_PLAN_VERSION, .model_name = "test_mma", .source = source};
  void *bin = NULL;
  size_t size = 0;
  char err[2048];
  int rc = rt_nvrtc_compile(&p, arch, &bin, &size, err, sizeof err);
  FILE *f = rc ? NULL : fopen(path, "wb");
  if (rc || !f || fwrite(bin, 1, size, f) != size || fclose(f)) {
    fprintf(stderr, "test_mma --cubin %s %s: %s\n", arch, path, rc ? err : "cannot write it");
    rc = 1;
  }
  free(bin);
  teardown();
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--cubin")) return write_cubin(argv[2], argv[3]);
  /* The header from the source tree, and a private kernel cache shared by
   * this run's tests (the mma_kernels compile once), gone afterwards. */
  const char *top = getenv("top_srcdir");
  static char header[512], cache[256];
  if (!getenv("DLCC_EMU_HEADER") && top) {
    snprintf(header, sizeof header, "%s/runtime/emu/dlcc_emu.h", top);
    setenv("DLCC_EMU_HEADER", header, 1);
  }
  snprintf(cache, sizeof cache, "%s/dlcc-test-mma-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(cache)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("DLCC_CACHE_DIR", cache, 1);
  SRunner *r = srunner_create(mma_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
  if (system(cmd)) fprintf(stderr, "test_mma: could not remove %s\n", cache);
  return failed ? 1 : 0;
}
