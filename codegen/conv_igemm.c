/* Convolutions as implicit GEMMs: takes a conv2d or conv3d of a fusion
 * group (the anchor, or the group alone), or a conv_transpose the tensor
 * cores take or in layout nhwc (by stride phases, else a gather per
 * element of B), appends one kernel that
 * computes C[Co][N*OHW] = W[Co][C*KK] x cols without storing cols (the
 * im2col indexing sits in the loads, where the group's prologue members
 * are evaluated) and runs the group's epilogue in its stores
 * (cg_fused_store).  f16, bf16 and int8 (and f32 under --tf32) go to the
 * tensor-core GEMM (tc_gemm.c), grouped ones too when a group has
 * channels enough; f32 and everything under --no-tensor-cores to the
 * same GEMM on the CUDA cores (fma_gemm.c): exact in f32, int8 summed
 * in int32. */
#include <inttypes.h>
#include <string.h>

#include "codegen.h"
#include "kernel.h"

static KExpr *kv(Kernel *k, KVar *v) { return cg_kv(k, v); }
static KExpr *ki(Kernel *k, int64_t v) { return cg_kint(k, v); }
static KExpr *kdiv(Kernel *k, KExpr *a, int64_t d) { return cg_kidx(k, KI_DIV, a, ki(k, d)); }
static KExpr *kmod(Kernel *k, KExpr *a, int64_t d) { return cg_kidx(k, KI_MOD, a, ki(k, d)); }
static KExpr *klt(Kernel *k, KExpr *a, int64_t v) { return cg_kcmp(k, KC_LT, a, ki(k, v)); }

/* Coordinate d of a position p (linear over dims[0 .. count)): p
 * divided by the dims inside d, modulo dims[d] but for the outermost. */
static KExpr *coord_of(Kernel *k, KExpr *p, const int64_t *dims, int count, int d) {
  int64_t inner = 1;
  for (int j = d + 1; j < count; j++) inner *= dims[j];
  KExpr *e = kdiv(k, p, inner);
  return d > 0 ? kmod(k, e, dims[d]) : e;
}

/* ---- on tensor cores ----
 * The same product as a CgTcGemm per group g (z): A = W[g*Cog + m][k]
 * (K contiguous: cp.async when it is a plain aligned array), B = the
 * im2col matrix, row n an output pixel, element k = (ci, taps) read from
 * x in NCHW, so register-staged.  In layout nhwc k = (taps, ci) and W is
 * [Co][kH][kW][C]: with C a multiple of a 16-byte chunk each chunk of a
 * B row is 16 contiguous bytes of one tap, loaded by cp.async too. */

typedef struct ConvTc {
  CgBuild *b;
  const Node *n;
  const Value *x, *w, *out;
  int nsp;
  const int64_t *in, *kern, *od, *stride, *pad, *dil;
  int64_t C, Co, Cg, Cog, KK, Kg, OHW; /* Cg: input channels a group */
  bool padded;
  bool nhwc; /* layout nhwc: k = (tap, ci), W [Co][taps][Cg] */
  /* conv_transpose: W is [C][Cog][taps] (nchw), and tap r of output o reads
   * input (o + pad - r * dil) / stride where that divides; off keeps the
   * dividend non-negative (a multiple of the stride) */
  bool transpose;
  int64_t off[3];
  /* conv_transpose by stride phase: output pixel o = phi + s j reads
   * only the taps r = r0(phi) + s q (dilation prime to the stride):
   * each phase a dense product, the phases a batch of the GEMM (z =
   * group * P + phase), none of the gather's zeros multiplied.  Every
   * phase gets ceil(kern / s) taps and ceil(od / s) pixels; when s does
   * not divide the kernel or the output (ragged: a 3x3 kernel at stride
   * 2), a phase's taps past the kernel read zeros (weight and input)
   * and its pixels past the output are not stored, so only those few
   * zeros are multiplied, against the gather's s^d - 1 of every s^d. */
  bool phased, ragged;
  int64_t P, TQ, OPP;             /* phases, taps and output pixels a phase */
  int64_t tq[3], opp[3], inv[3];  /* per dim: taps, pixels a phase; dil^-1 mod s */
  DType acc_t;
} ConvTc;

/* The output pixel a row of B is: its image and, per spatial dim, the
 * input position of tap 0 (conv_transpose: o + pad + off). */
typedef struct ConvRow {
  KExpr *img, *base[3];
} ConvRow;

static void conv_geometry(ConvTc *cv, const Node *n) {
  int cnt;
  cv->n = n;
  cv->x = n->in[0], cv->w = n->in[1], cv->out = &n->out[0];
  cv->nsp = cv->x->type.rank - 2;
  cv->stride = ir_attr_ints(n, "stride", &cnt);
  cv->pad = ir_attr_ints(n, "pad", &cnt);
  cv->dil = ir_attr_ints(n, "dilation", &cnt);
  cv->nhwc = ir_conv_nhwc(n);
  int sx = cv->nhwc ? 1 : 2, cx = cv->nhwc ? 1 + cv->nsp : 1;
  cv->in = cv->x->type.dims + sx, cv->kern = cv->w->type.dims + sx, cv->od = cv->out->type.dims + sx;
  int64_t groups = ir_attr_int(n, "groups");
  cv->transpose = n->op == OP_CONV_TRANSPOSE2D || n->op == OP_CONV_TRANSPOSE3D;
  cv->C = cv->x->type.dims[cx], cv->Co = cv->out->type.dims[cx], cv->Cg = cv->C / groups;
  cv->Cog = cv->Co / groups;
  cv->KK = 1, cv->OHW = 1;
  for (int d = 0; d < cv->nsp; d++) {
    cv->KK *= cv->kern[d], cv->OHW *= cv->od[d];
    cv->padded = cv->padded || cv->pad[d] || cv->pad[cv->nsp + d] ||
                 (cv->od[d] - 1) * cv->stride[d] + (cv->kern[d] - 1) * cv->dil[d] >= cv->in[d];
    cv->off[d] = cv->stride[d] * (((cv->kern[d] - 1) * cv->dil[d] + cv->stride[d] - 1) / cv->stride[d]);
  }
  cv->Kg = cv->Cg * cv->KK;
  cv->phased = cv->transpose;
  cv->P = cv->TQ = cv->OPP = 1;
  for (int d = 0; d < cv->nsp && cv->phased; d++) {
    int64_t st = cv->stride[d];
    cv->ragged = cv->ragged || cv->kern[d] % st || cv->od[d] % st;
    cv->inv[d] = -1;
    for (int64_t v = 0; v < st && cv->phased; v++)
      if (cv->dil[d] * v % st == 1 % st) cv->inv[d] = v;
    cv->phased = cv->inv[d] >= 0;
    cv->tq[d] = (cv->kern[d] + st - 1) / st, cv->opp[d] = (cv->od[d] + st - 1) / st;
    cv->P *= st, cv->TQ *= cv->tq[d], cv->OPP *= cv->opp[d];
  }
  /* a stride of 1 everywhere has one phase: the gather has no zeros */
  cv->phased = cv->phased && cv->P > 1;
}

/* Phase z's offset along dim d (z = group * P + phase, the phase's dims
 * row-major over the strides). */
static KExpr *phase_of(ConvTc *cv, Kernel *k, KExpr *z, int d) {
  KExpr *ph = kmod(k, z, cv->P);
  return coord_of(k, ph, cv->stride, cv->nsp, d);
}

/* The first tap r0 of phase phi along dim d: (phi + pad - r0 dil) a
 * multiple of the stride. */
static KExpr *first_tap(ConvTc *cv, Kernel *k, KExpr *phi, int d) {
  int64_t st = cv->stride[d];
  return kmod(k, cg_kmul(k, cg_kadd(k, phi, ki(k, cv->pad[d] % st)), ki(k, cv->inv[d])), st);
}

bool cg_conv_on_tc(CgBuild *b, const Node *n) {
  const CgOptions *o = cg_options(b);
  KTcKind tc;
  DType dt = n->in[0]->type.dtype;
  if (o->no_tensor_cores || n->in[1]->type.dtype != dt || !cg_tc_kind(dt, o->tf32, &tc)) return false;
  if (dt == TY_I8 && n->out[0].type.dtype != TY_I32) return false;
  ConvTc cv = {0};
  conv_geometry(&cv, n);
  /* a group's product must fill an mma's rows and a k-step at the least */
  return ir_attr_int(n, "groups") == 1 || (cv.Cog >= 16 && cv.Kg >= 16);
}

/* Tap r = r0 + s q of phase z along dim d, q the tap's coordinate
 * there; with a ragged split, *valid gains r < kern. */
static KExpr *phase_tap(ConvTc *cv, Kernel *k, KExpr *z, KExpr *q, int d, KExpr **valid) {
  KExpr *r = cg_kadd(k, first_tap(cv, k, phase_of(cv, k, z, d), d),
                     cg_kmul(k, coord_of(k, q, cv->tq, cv->nsp, d), ki(k, cv->stride[d])));
  if (cv->ragged && cv->kern[d] % cv->stride[d]) *valid = cg_kand(k, *valid, klt(k, r, cv->kern[d]));
  return r;
}

/* A[z][row][kk]: W[z*Cog + row][kk], or conv_transpose's
 * W[z*Cg + kk / KK][row][kk % KK]; *valid (phases) NULL or the
 * condition that the tap is inside the kernel.  Channels last W is
 * [Co][taps][Cg] either way, and a phase's kk = (q..., ci). */
static KExpr *w_index(ConvTc *cv, Kernel *k, KExpr *z, KExpr *row, KExpr *kk, KExpr **valid) {
  *valid = NULL;
  if (cv->phased && cv->nhwc) {
    KExpr *q = kdiv(k, kk, cv->Cg), *at = cg_kadd(k, cg_kmul(k, kdiv(k, z, cv->P), ki(k, cv->Cog)), row);
    for (int d = 0; d < cv->nsp; d++)
      at = cg_kadd(k, cg_kmul(k, at, ki(k, cv->kern[d])), phase_tap(cv, k, z, q, d, valid));
    return cg_kadd(k, cg_kmul(k, at, ki(k, cv->Cg)), kmod(k, kk, cv->Cg));
  }
  if (cv->phased) {
    /* kk = (ci, q...): tap r = r0 + s q of W[g Cg + ci][row][taps] */
    KExpr *ci = cg_kadd(k, cg_kmul(k, kdiv(k, z, cv->P), ki(k, cv->Cg)), kdiv(k, kk, cv->TQ));
    KExpr *q = kmod(k, kk, cv->TQ), *at = cg_kadd(k, cg_kmul(k, ci, ki(k, cv->Cog)), row);
    for (int d = 0; d < cv->nsp; d++)
      at = cg_kadd(k, cg_kmul(k, at, ki(k, cv->kern[d])), phase_tap(cv, k, z, q, d, valid));
    return at;
  }
  if (cv->transpose && !cv->nhwc) {
    KExpr *ci = cg_kadd(k, cg_kmul(k, z, ki(k, cv->Cg)), kdiv(k, kk, cv->KK));
    return cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, ci, ki(k, cv->Cog)), row), ki(k, cv->KK)), kmod(k, kk, cv->KK));
  }
  return cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, z, ki(k, cv->Cog)), row), ki(k, cv->Kg)), kk);
}

static KBuf *w_async(void *ctx, Kernel *k) {
  ConvTc *cv = ctx;
  double c;
  /* conv_transpose's K runs across W's rows: not contiguous; channels
   * last a phase's taps are apart, each a run of Cg */
  if (cv->transpose && (!cv->nhwc || cv->Cg % (16 / ir_dtype_size(cv->w->type.dtype)))) return NULL;
  if (cg_is_fused(cv->b, cv->w) || cg_const_of(cv->b, cv->w, &c)) return NULL;
  RtRef r = cg_ref(cv->b, cv->w);
  if (r.offset % 16) return NULL;
  return cg_kglobal(k, "w", cv->w->type.dtype, ir_type_numel(&cv->w->type), r);
}

static KExpr *w_chunk(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row, KExpr *kk, KExpr **ok) {
  (void)blk;
  return w_index(ctx, k, z, row, kk, ok); /* a ragged phase's taps past the kernel do not exist */
}

static void *w_row(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row) {
  (void)ctx, (void)k, (void)blk, (void)z;
  return row;
}

/* A[z][row][kk], 0 at a phase's taps past the kernel. */
static KExpr *w_element(void *ctx, void *row, Kernel *k, KBlock *blk, KExpr *z, KExpr *kk) {
  ConvTc *cv = ctx;
  KExpr *valid, *at = w_index(cv, k, z, row, kk, &valid);
  if (!valid) return cg_operand_load(cv->b, k, blk, cv->w, "w", at);
  return cg_operand_load_or(cv->b, k, blk, cv->w, "w", at, valid, 0); /* with x at its zero point: no term */
}

static KExpr *let_index(Kernel *k, KBlock *blk, const char *stem, KExpr *e) {
  return e->kind == KE_INT || e->kind == KE_VAR ? e : kv(k, cg_klet(k, blk, stem, KT_INDEX, e));
}

static void *x_row(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row) {
  ConvTc *cv = ctx;
  ConvRow *r = ARENA_NEW(&k->ctx->arena, ConvRow);
  if (cv->phased) {
    /* pixel j of the phase: input (phi + pad + off - r0 dil) / s - off / s
     * + j at its first tap, dil less for each later one */
    r->img = let_index(k, blk, "img", kdiv(k, row, cv->OPP));
    KExpr *p = let_index(k, blk, "p", kmod(k, row, cv->OPP));
    for (int d = 0; d < cv->nsp; d++) {
      int64_t st = cv->stride[d];
      KExpr *phi = let_index(k, blk, "ph", phase_of(cv, k, z, d));
      KExpr *t = cg_kidx(k, KI_SUB, cg_kadd(k, phi, ki(k, cv->pad[d] + cv->off[d])),
                         cg_kmul(k, first_tap(cv, k, phi, d), ki(k, cv->dil[d])));
      KExpr *i0 = cg_kidx(k, KI_SUB, kdiv(k, t, st), ki(k, cv->off[d] / st));
      r->base[d] = let_index(k, blk, "i0", cg_kadd(k, i0, coord_of(k, p, cv->opp, cv->nsp, d)));
    }
    return r;
  }
  r->img = let_index(k, blk, "img", kdiv(k, row, cv->OHW));
  KExpr *p = let_index(k, blk, "p", kmod(k, row, cv->OHW));
  for (int d = 0; d < cv->nsp; d++) {
    KExpr *o = coord_of(k, p, cv->od, cv->nsp, d);
    r->base[d] = let_index(k, blk, "i0", cv->transpose ? cg_kadd(k, o, ki(k, cv->pad[d] + cv->off[d]))
                                                       : cg_kidx(k, KI_SUB, cg_kmul(k, o, ki(k, cv->stride[d])), ki(k, cv->pad[d])));
  }
  return r;
}

/* conv_transpose's input position along dim d for the row's pixel at
 * this tap, and whether the tap hits one: t = o + pad + off - tap * dil
 * a multiple of the stride in [off, off + in * stride). */
static KExpr *x_hit(ConvTc *cv, Kernel *k, KBlock *blk, ConvRow *r, int d, KExpr *tap, KExpr **hit) {
  KExpr *t = let_index(k, blk, "th", cg_kidx(k, KI_SUB, r->base[d], cg_kmul(k, tap, ki(k, cv->dil[d]))));
  int64_t s = cv->stride[d];
  KExpr *c = s > 1 ? cg_kcmp(k, KC_EQ, kmod(k, t, s), ki(k, 0)) : NULL;
  c = cg_kand(k, c, cg_kcmp(k, KC_GE, t, ki(k, cv->off[d])));
  *hit = cg_kand(k, *hit, cg_kand(k, c, klt(k, t, cv->off[d] + cv->in[d] * s)));
  return cg_kidx(k, KI_SUB, kdiv(k, t, s), ki(k, cv->off[d] / s));
}

/* nhwc: the index of x at element kk = (tap, ci) of the row's pixel
 * (a phase's tap q of a conv_transpose), and in *inside (NULL: always)
 * whether it lies in the image (and a ragged phase's tap in the
 * kernel). */
static KExpr *nhwc_at(ConvTc *cv, ConvRow *r, Kernel *k, KBlock *blk, KExpr *z, KExpr *kk, KExpr **inside) {
  KExpr *tap = let_index(k, blk, "tap", kdiv(k, kk, cv->Cg)), *at = r->img;
  *inside = NULL;
  for (int d = 0; d < cv->nsp; d++) {
    KExpr *pos;
    if (cv->phased) {
      KExpr *qd = coord_of(k, tap, cv->tq, cv->nsp, d);
      pos = let_index(k, blk, "ip", cg_kidx(k, KI_SUB, r->base[d], cg_kmul(k, qd, ki(k, cv->dil[d]))));
      *inside = cg_kand(k, *inside, cg_kand(k, cg_kcmp(k, KC_GE, pos, ki(k, 0)), klt(k, pos, cv->in[d])));
      if (cv->ragged) phase_tap(cv, k, z, tap, d, inside);
    } else if (cv->transpose) {
      pos = let_index(k, blk, "ip", x_hit(cv, k, blk, r, d, coord_of(k, tap, cv->kern, cv->nsp, d), inside));
    } else {
      KExpr *td = coord_of(k, tap, cv->kern, cv->nsp, d);
      pos = let_index(k, blk, "ip", cg_kadd(k, r->base[d], cg_kmul(k, td, ki(k, cv->dil[d]))));
      if (cv->padded)
        *inside = cg_kand(k, *inside, cg_kand(k, cg_kcmp(k, KC_GE, pos, ki(k, 0)), klt(k, pos, cv->in[d])));
    }
    at = cg_kadd(k, cg_kmul(k, at, ki(k, cv->in[d])), pos);
  }
  /* group z's channels, Cg of the pixel's C */
  KExpr *ci = kmod(k, kk, cv->Cg);
  if (cv->Cg != cv->C) ci = cg_kadd(k, cg_kmul(k, cv->phased ? kdiv(k, z, cv->P) : z, ki(k, cv->Cg)), ci);
  return cg_kadd(k, cg_kmul(k, at, ki(k, cv->C)), ci);
}

static KExpr *x_nhwc(ConvTc *cv, ConvRow *r, Kernel *k, KBlock *blk, KExpr *z, KExpr *kk) {
  KExpr *inside, *at = nhwc_at(cv, r, k, blk, z, kk, &inside);
  if (!inside) return cg_operand_load(cv->b, k, blk, cv->x, "x", at);
  return cg_operand_load_or(cv->b, k, blk, cv->x, "x", at, inside, (double)cg_zero_point(cv->n));
}

/* nhwc's B by whole 16-byte chunks: x a plain aligned array whose
 * channels (a group's) fill them (a chunk never straddles two taps); the padding
 * reads the operand's fill (int8's zero point), cp.async's zeros where
 * that is 0. */
static KBuf *x_async(void *ctx, Kernel *k) {
  ConvTc *cv = ctx;
  double c;
  int64_t per_chunk = 16 / ir_dtype_size(cv->x->type.dtype);
  if (!cv->nhwc || cv->Cg % per_chunk || cg_is_fused(cv->b, cv->x) || cg_const_of(cv->b, cv->x, &c)) return NULL;
  RtRef ref = cg_ref(cv->b, cv->x);
  if (ref.offset % 16) return NULL;
  return cg_kglobal(k, "x", cv->x->type.dtype, ir_type_numel(&cv->x->type), ref);
}

static void *x_row(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row);

static KExpr *x_chunk(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row, KExpr *kk, KExpr **ok) {
  ConvTc *cv = ctx;
  return nhwc_at(cv, x_row(ctx, k, blk, z, row), k, blk, z, kk, ok);
}

/* x at tap kk of the row's pixel, the zero point (int8's real 0) in the
 * padding. */
static KExpr *x_element(void *ctx, void *row, Kernel *k, KBlock *blk, KExpr *z, KExpr *kk) {
  ConvTc *cv = ctx;
  ConvRow *r = row;
  if (cv->nhwc) return x_nhwc(cv, r, k, blk, z, kk);
  int64_t per = cv->phased ? cv->TQ : cv->KK;
  KExpr *ci = cg_kadd(k, cg_kmul(k, cv->phased ? kdiv(k, z, cv->P) : z, ki(k, cv->Cg)), kdiv(k, kk, per));
  KExpr *tap = let_index(k, blk, "tap", kmod(k, kk, per));
  KExpr *at = cg_kadd(k, cg_kmul(k, r->img, ki(k, cv->C)), ci), *inside = NULL;
  for (int d = 0; d < cv->nsp && cv->phased; d++) {
    KExpr *pos = let_index(k, blk, "ip", cg_kidx(k, KI_SUB, r->base[d],
                                                  cg_kmul(k, coord_of(k, tap, cv->tq, cv->nsp, d), ki(k, cv->dil[d]))));
    inside = cg_kand(k, inside, cg_kand(k, cg_kcmp(k, KC_GE, pos, ki(k, 0)), klt(k, pos, cv->in[d])));
    /* a tap past the kernel reads 0, not x (0 * inf would be NaN) */
    if (cv->ragged) phase_tap(cv, k, z, tap, d, &inside);
    at = cg_kadd(k, cg_kmul(k, at, ki(k, cv->in[d])), pos);
  }
  for (int d = 0; d < cv->nsp && !cv->phased; d++) {
    KExpr *td = coord_of(k, tap, cv->kern, cv->nsp, d), *pos;
    if (cv->transpose) {
      pos = let_index(k, blk, "ip", x_hit(cv, k, blk, r, d, td, &inside));
    } else {
      pos = let_index(k, blk, "ip", cg_kadd(k, r->base[d], cg_kmul(k, td, ki(k, cv->dil[d]))));
      if (cv->padded)
        inside = cg_kand(k, inside, cg_kand(k, cg_kcmp(k, KC_GE, pos, ki(k, 0)), klt(k, pos, cv->in[d])));
    }
    at = cg_kadd(k, cg_kmul(k, at, ki(k, cv->in[d])), pos);
  }
  if (!inside) return cg_operand_load(cv->b, k, blk, cv->x, "x", at);
  return cg_operand_load_or(cv->b, k, blk, cv->x, "x", at, inside, (double)cg_zero_point(cv->n));
}

static void conv_store(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *m, KExpr *n, KExpr *acc) {
  ConvTc *cv = ctx;
  KExpr *co = let_index(k, blk, "co", cg_kadd(k, cg_kmul(k, cv->phased ? kdiv(k, z, cv->P) : z, ki(k, cv->Cog)), m));
  KExpr *pix = kmod(k, n, cv->OHW), *img = kdiv(k, n, cv->OHW);
  KExpr *stored = NULL; /* a ragged phase's pixels past the output are not */
  if (cv->phased) {
    /* pixel j of phase phi: output phi + s j */
    KExpr *p = let_index(k, blk, "pj", kmod(k, n, cv->OPP));
    img = kdiv(k, n, cv->OPP);
    pix = ki(k, 0);
    for (int d = 0; d < cv->nsp; d++) {
      KExpr *o = cg_kadd(k, phase_of(cv, k, z, d), cg_kmul(k, coord_of(k, p, cv->opp, cv->nsp, d), ki(k, cv->stride[d])));
      if (cv->ragged && cv->od[d] % cv->stride[d]) {
        o = let_index(k, blk, "od", o);
        stored = cg_kand(k, stored, klt(k, o, cv->od[d]));
      }
      pix = cg_kadd(k, cg_kmul(k, pix, ki(k, cv->od[d])), o);
    }
  }
  if (stored) blk = &cg_kif(k, blk, stored)->body;
  /* (channels last a phase's pixel is not its row n) */
  KExpr *o = cv->nhwc ? cg_kadd(k, cg_kmul(k, cv->phased ? cg_kadd(k, cg_kmul(k, img, ki(k, cv->OHW)), pix) : n,
                                            ki(k, cv->Co)), co)
                      : cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, img, ki(k, cv->Co)), co), ki(k, cv->OHW)), pix);
  KExpr *oi = let_index(k, blk, "o", o), *val = acc;
  if (cv->n->n_in > 2)
    val = cg_kop2(k, OP_ADD, val, cg_kcast(k, cg_operand_load(cv->b, k, blk, cv->n->in[2], "bias", co), cv->acc_t));
  if (!cg_fused_store(cv->b, k, blk, cv->out, oi, val)) {
    KBuf *ob = cg_kglobal(k, "out", cv->out->type.dtype, ir_type_numel(&cv->out->type), cg_ref(cv->b, cv->out));
    cg_kstore(k, blk, ob, oi, cg_kcast(k, val, cv->out->type.dtype));
  }
}

/* The convolution as a CgTcGemm, on the tensor cores or (fma) the CUDA
 * cores' GEMM (fma_gemm.c), which takes every operand by its element
 * callbacks. */
static void conv_gemm(CgBuild *b, const Node *n, bool fma) {
  Ctx *c = cg_build_ctx(b);
  ConvTc *cv = ARENA_NEW(&c->arena, ConvTc);
  cv->b = b;
  conv_geometry(cv, n);
  const CgGroup *grp = cg_group(b);
  KTcKind tc = KTC_TF32; /* the FMA kernel's f32, unless int8 */
  cg_tc_kind(cv->x->type.dtype, true, &tc);
  cv->acc_t = tc == KTC_S8 ? TY_I32 : TY_F32;
  const char *gemm = cv->phased      ? "implicit gemm (stride phases)"
                     : cv->transpose ? "implicit gemm (gather)"
                     : cv->nhwc      ? "implicit gemm (nhwc)"
                                     : "implicit gemm";
  CgTcGemm g = {
      .node = n,
      .hint = arena_printf(&c->arena, "%s_igemm", grp && grp->n > 1 ? cg_group_hint(c, grp) : ir_ops[n->op].name),
      .what = grp ? arena_printf(&c->arena, "#k%d %s", grp->id, gemm) : gemm,
      .tc = tc,
      .m = cv->Cog,
      .n = cv->x->type.dims[0] * (cv->phased ? cv->OPP : cv->OHW),
      .k = cv->phased ? cv->Cg * cv->TQ : cv->Kg,
      .batch = ir_attr_int(n, "groups") * (cv->phased ? cv->P : 1),
      .a = {.rows = cv->Cog, .k_major = true, .async_buf = w_async, .chunk_at = w_chunk, .row_begin = w_row,
            .element = w_element},
      .b = {.rows = cv->x->type.dims[0] * (cv->phased ? cv->OPP : cv->OHW), .k_major = cv->nhwc,
            .async_buf = cv->nhwc ? x_async : NULL, .chunk_at = x_chunk, .row_begin = x_row, .element = x_element,
            .fill = cv->padded ? (double)cg_zero_point(n) : 0},
      .ctx = cv,
      .store_m_major = cv->nhwc,
      .store = conv_store,
  };
  if (fma)
    cg_fma_gemm(b, &g);
  else
    cg_tc_gemm(b, &g);
}

bool cg_lower_conv_igemm(CgBuild *b, const Node *n) {
  if (ir_type_numel(&n->out[0].type) == 0) return true;
  conv_gemm(b, n, !cg_conv_on_tc(b, n));
  return true;
}

/* A float conv_transpose off the tensor cores (f32 without --tf32: a
 * training step's data gradient) as the same GEMM on the FMA kernel,
 * where a group fills enough of a tile; false, having done nothing,
 * otherwise (the direct gather of lower_window.c takes it). */
bool cg_lower_conv_transpose_fma(CgBuild *b, const Node *n) {
  DType dt = n->in[0]->type.dtype;
  if (n->op != OP_CONV_TRANSPOSE2D && n->op != OP_CONV_TRANSPOSE3D) return false;
  if (!ir_dtype_is_float(dt) || dt == TY_F64 || n->in[1]->type.dtype != dt || ir_type_numel(&n->out[0].type) == 0)
    return false;
  ConvTc cv = {0};
  conv_geometry(&cv, n);
  if (ir_attr_int(n, "groups") != 1 && (cv.Cog < 16 || cv.Kg < 16)) return false;
  conv_gemm(b, n, true);
  return true;
}
