/* The emu device's stand-in for cuBLAS: one RtGemm (row-major,
 * strided-batched, optional transposes) computed on host memory.  Inputs
 * are widened exactly to double, products accumulate in double (at least
 * as accurate as the GPU's f32 accumulation), the epilogue (bias, then
 * relu or tanh-gelu, as cuBLASLt's) applies to that sum, and C is rounded
 * once, to nearest even, into its dtype; a tf32 gemm's operands are
 * first rounded to tf32 (so a bias gradient sums the rounded rows).  int8 (RT_DT_I8: i8 A and B, i32 C) is
 * summed exactly in int32, wrapping as eval.c's integers do.  Returns 0,
 * or -1 with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "emu/dlcc_emu.h"

/* A KB x NB panel of B (256 KiB of doubles) stays in L2 while every row of
 * A streams past it; the NB accumulators of one row stay in L1. */
enum { KB = 128, NB = 256 };

static double load_elem(uint32_t dtype, const void *base, int64_t i) {
  switch (dtype) {
  case RT_DT_F16: return dlcc_emu_f16_to_f32(((const uint16_t *)base)[i]);
  case RT_DT_BF16: return dlcc_emu_bf16_to_f32(((const uint16_t *)base)[i]);
  default: return ((const float *)base)[i];
  }
}

static void store_elem(uint32_t dtype, void *base, int64_t i, double v) {
  switch (dtype) {
  case RT_DT_F16: ((uint16_t *)base)[i] = dlcc_emu_f64_to_f16(v); break;
  case RT_DT_BF16: ((uint16_t *)base)[i] = dlcc_emu_f64_to_bf16(v); break;
  default: ((float *)base)[i] = (float)v; break;
  }
}

static size_t elem_size(uint32_t dtype) { return dtype == RT_DT_F32 ? 4 : 2; }

/* x rounded to tf32 as cvt.rna.tf32.f32 rounds it (10 fraction bits,
 * nearest, ties away from zero): what a tf32 gemm multiplies. */
static double tf32_of(double x) {
  uint32_t bits = dlcc_emu_tf32_bits((float)x);
  float r;
  memcpy(&r, &bits, sizeof r);
  return r;
}

/* op(X) as a dense rows x cols row-major double matrix, its elements
 * rounded to tf32 for a tf32 gemm. */
static void pack(double *dst, const RtGemm *g, const void *x, int64_t ld, int trans, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      double v = load_elem(g->dtype, x, trans ? c * ld + r : r * ld + c);
      dst[r * cols + c] = g->tf32 ? tf32_of(v) : v;
    }
}

static int check_args(const RtGemm *g, char *err, size_t errlen) {
  if (g->dtype != RT_DT_F32 && g->dtype != RT_DT_F16 && g->dtype != RT_DT_BF16 && g->dtype != RT_DT_I8) {
    snprintf(err, errlen, "emu gemm: dtype %u is not f32, f16, bf16 or i8", g->dtype);
    return -1;
  }
  if (g->tf32 && g->dtype != RT_DT_F32) {
    snprintf(err, errlen, "emu gemm: tf32 on a gemm that is not f32 (dtype %u)", g->dtype);
    return -1;
  }
  if (g->epilogue >= RT_EPILOGUE_COUNT || (g->epilogue && g->dtype == RT_DT_I8)) {
    snprintf(err, errlen, "emu gemm: epilogue %u on %s gemm", g->epilogue, g->dtype == RT_DT_I8 ? "an i8" : "a float");
    return -1;
  }
  if (g->dtype == RT_DT_I8 && (g->alpha != 1.0f || g->beta != 0.0f)) {
    snprintf(err, errlen, "emu gemm: an int8 gemm takes alpha 1 and beta 0, not %g and %g", (double)g->alpha,
             (double)g->beta);
    return -1;
  }
  if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0) {
    snprintf(err, errlen, "emu gemm: negative size (m %lld, n %lld, k %lld, batch %lld)", (long long)g->m,
             (long long)g->n, (long long)g->k, (long long)g->batch);
    return -1;
  }
  int64_t min_lda = g->trans_a ? g->m : g->k, min_ldb = g->trans_b ? g->k : g->n;
  if (g->lda < (min_lda > 1 ? min_lda : 1) || g->ldb < (min_ldb > 1 ? min_ldb : 1) || g->ldc < (g->n > 1 ? g->n : 1)) {
    snprintf(
        err, errlen, "emu gemm: leading dimension too small (lda %lld, ldb %lld, ldc %lld for m %lld n %lld k %lld)",
        (long long)g->lda, (long long)g->ldb, (long long)g->ldc, (long long)g->m, (long long)g->n, (long long)g->k);
    return -1;
  }
  if (g->stride_a < 0 || g->stride_b < 0 || g->stride_c < 0 || g->stride_bias < 0) {
    snprintf(err, errlen, "emu gemm: negative batch stride");
    return -1;
  }
  /* Sizes of the double scratch: refuse what would overflow size_t. */
  const double limit = (double)(SIZE_MAX / 16);
  if ((double)g->m * (double)g->k > limit || (double)g->k * (double)g->n > limit ||
      (double)g->m * (double)g->n > limit) {
    snprintf(err, errlen, "emu gemm: %lld x %lld x %lld is too large", (long long)g->m, (long long)g->n,
             (long long)g->k);
    return -1;
  }
  return 0;
}

/* op(X)[r][c] of an int8 matrix. */
static int32_t i8_at(const int8_t *x, int64_t ld, int trans, int64_t r, int64_t c) {
  return trans ? x[c * ld + r] : x[r * ld + c];
}

/* C = op(A) op(B) in int32, unsigned so that a sum past 2^31 wraps as it
 * does on the GPU and in eval.c, with no undefined overflow. */
static void gemm_i8(const RtGemm *g, const int8_t *a, const int8_t *b, int32_t *c) {
  for (int64_t bi = 0; bi < g->batch; bi++) {
    const int8_t *ab = a + bi * g->stride_a, *bb = b + bi * g->stride_b;
    int32_t *cb = c + bi * g->stride_c;
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t j = 0; j < g->n; j++) {
        uint32_t acc = 0;
        for (int64_t p = 0; p < g->k; p++)
          acc += (uint32_t)(i8_at(ab, g->lda, g->trans_a, i, p) * i8_at(bb, g->ldb, g->trans_b, p, j));
        cb[i * g->ldc + j] = (int32_t)acc;
      }
  }
}

/* v after g's epilogue; j its column. */
static double epilogue(const RtGemm *g, const void *bias, int64_t j, double v) {
  if (g->epilogue == RT_EPILOGUE_NONE || g->epilogue == RT_EPILOGUE_BGRAD) return v;
  v += load_elem(g->dtype, bias, j);
  if (g->epilogue == RT_EPILOGUE_RELU_BIAS) return v > 0 || isnan(v) ? v : 0; /* eval.c keeps a NaN */
  if (g->epilogue == RT_EPILOGUE_GELU_BIAS)
    return 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  return v;
}

int rt_emu_gemm(const RtGemm *g, const void *a, const void *b, void *c, const void *c_in, void *bias, char *err,
                size_t errlen) {
  if (check_args(g, err, errlen)) return -1;
  if (g->epilogue && !bias) {
    snprintf(err, errlen, "emu gemm: an epilogue without its bias");
    return -1;
  }
  if (g->beta != 0.0f && !c_in) {
    snprintf(err, errlen, "emu gemm: beta %g without a C to read", (double)g->beta);
    return -1;
  }
  int64_t m = g->m, n = g->n, k = g->k;
  if (g->batch == 0 || m == 0 || n == 0) return 0;
  if (g->dtype == RT_DT_I8) {
    gemm_i8(g, a, b, c);
    return 0;
  }
  size_t es = elem_size(g->dtype);
  double *ad = malloc(sizeof(double) * (size_t)(m * k + 1));
  double *bd = malloc(sizeof(double) * (size_t)(k * n + 1));
  double *acc = malloc(sizeof(double) * (size_t)(m * n));
  if (!ad || !bd || !acc) {
    free(ad), free(bd), free(acc);
    snprintf(err, errlen, "emu gemm: out of host memory for %lld x %lld x %lld", (long long)m, (long long)n,
             (long long)k);
    return -1;
  }
  for (int64_t bi = 0; bi < g->batch; bi++) {
    const char *ab = (const char *)a + (size_t)(bi * g->stride_a) * es;
    const char *bb = (const char *)b + (size_t)(bi * g->stride_b) * es;
    char *cb = (char *)c + (size_t)(bi * g->stride_c) * es;
    const char *cib = g->beta != 0.0f ? (const char *)c_in + (size_t)(bi * g->stride_c) * es : NULL;
    const char *biasb = g->epilogue ? (const char *)bias + (size_t)(bi * g->stride_bias) * es : NULL;
    /* A batch stride of 0 broadcasts one operand: pack it once. */
    if (bi == 0 || g->stride_a) pack(ad, g, ab, g->lda, g->trans_a, m, k);
    if (bi == 0 || g->stride_b) pack(bd, g, bb, g->ldb, g->trans_b, k, n);
    if (g->epilogue == RT_EPILOGUE_BGRAD) /* the rows of op(A) summed: a bias gradient */
      for (int64_t i = 0; i < m; i++) {
        double s = 0;
        for (int64_t p = 0; p < k; p++) s += ad[i * k + p];
        store_elem(g->dtype, (char *)bias + (size_t)(bi * g->stride_bias) * es, i, s);
      }
    memset(acc, 0, sizeof(double) * (size_t)(m * n));
    for (int64_t j0 = 0; j0 < n; j0 += NB) {
      int64_t j1 = j0 + NB < n ? j0 + NB : n;
      for (int64_t p0 = 0; p0 < k; p0 += KB) {
        int64_t p1 = p0 + KB < k ? p0 + KB : k;
        for (int64_t i = 0; i < m; i++) {
          double *restrict row = acc + i * n;
          const double *arow = ad + i * k;
          for (int64_t p = p0; p < p1; p++) {
            double av = arow[p];
            const double *restrict brow = bd + p * n;
            for (int64_t j = j0; j < j1; j++) row[j] += av * brow[j];
          }
        }
      }
    }
    /* beta == 0 never reads C, as cuBLAS: C may hold NaN garbage.  C_in
     * is C or shares none of its bytes, so each element is read before
     * it is written. */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double v = (double)g->alpha * acc[i * n + j];
        if (g->beta != 0.0f) v += (double)g->beta * load_elem(g->dtype, cib, i * g->ldc + j);
        store_elem(g->dtype, cb, i * g->ldc + j, epilogue(g, biasb, j, v));
      }
  }
  free(ad), free(bd), free(acc);
  return 0;
}
