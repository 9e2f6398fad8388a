/* The attention op as one kernel in the FlashAttention style: takes an
 * attention node (ir/ops.def: q [B, Hq, Sq, d], k and v [B, Hkv, Sk, d],
 * an optional mask, causal and scale), returns nothing but appends its
 * launch to the plan.  No score matrix ever reaches global memory.
 * attention_lse (a training step's forward) also writes each row's
 * logsumexp, m + log l, for its backward (attention_grad.c).
 *
 * q, k and v are [B, H, S, d] or (layout "bshd") [B, S, H, d]: only
 * the rows' stride and a head's first row differ.
 *
 * One block per (batch, query head, 64 query rows), 4 warps; for Sq up
 * to 16 (decoding), 16 rows and one warp.  The block's
 * Q rows sit in shared memory; K and V pass through it BN keys at a time,
 * double-buffered: tile j + 1 is on its way (cp.async) while tile j is
 * computed.  Per tile: S = Q K^T; scale, mask, causality and the key
 * bound; the online softmax (a running max m and sum l per row):
 * P = exp(S - m_new), alpha = exp(m_old - m_new); then O = alpha O + P V
 * in registers.  On the tensor cores the scores are kept in base-2
 * units (the scale and an additive mask times log2 e), so that each
 * exponential is one exp2f, one MUFU.EX2, where expf is a range
 * reduction around one; P is rounded to f16 or bf16 for P V anyway.
 * The f32 path keeps expf.  At the end O / l is stored (0 where l is 0: a row with
 * every key masked).  Under causal, the tiles wholly above the diagonal
 * are never loaded nor computed.
 *
 * f16 and bf16 take the tensor cores, as FlashAttention-2: both
 * products are mma.sync m16n8k16 with f32 accumulators, fragments of Q,
 * K and V from ldmatrix (.trans for V, whose rows are the k dimension of
 * P V), and S never leaves the accumulators: each row's max and sum
 * over the four lanes that hold it by two shuffles, P packed to f16x2 or
 * bf16x2 straight into the A fragments of P V.  A warp's rows are its
 * own, so no barrier sits within a tile.  f32 under --tf32 takes the
 * same path with m16n8k8 tf32 products (mma_pb_tf32 says how P V gets
 * its operands).  f32 is otherwise the same loop on FMA, exact to f32
 * rounding, with S in shared memory and a thread per row for the
 * softmax. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "codegen.h"
#include "kernel.h"
#include "attn.h"
#include "kshort.h"

enum {
  BM = 64,        /* query rows a block */
  BM_SHORT = 16,  /* ... when Sq is at most this (decoding's one row) */
  CHUNK = 16,   /* bytes a cp.async moves */
  MAX_D = 256,  /* O's registers grow with d */
  SPAD = 4,     /* f32 elements padding a row of S (bank spread) */
};

typedef struct Attn {
  CgBuild *b;
  const Node *n;
  Kernel *k;
  bool tc;      /* mma.sync (f16, bf16) or FMA (f32) */
  KTcKind kind;
  DType dt;
  int es, epc;  /* element bytes, elements a chunk */
  /* Query rows a block (BM, or BM_SHORT for a short Sq) and its threads:
   * 2 per row, a warp per 16 rows on the tensor cores, two halves of
   * the keys and of O's columns a row on FMA. */
  int64_t bm, threads;
  int64_t B, H, Hkv, Sq, Sk, d, dp, ld, bn, kt;
  int64_t rsq, rskv; /* elements between rows of q (and the result), of k and v */
  KBuf *q, *kb, *vb, *out, *mask;
  KBuf *qs, *ks, *vs, *ss, *rowv;
  KBuf *sacc; /* tensor cores: S, then P, in the m16n8 accumulators of bn / 8 blocks of keys */
  int64_t sld;      /* S's row stride (FMA) */
  int64_t ms[4];    /* the mask's strides over [B, H, Sq, Sk] */
  KExpr *tid, *lane, *warp, *bz, *hy, *q0, *qbase, *kvbase;
  /* Split keys (flash-decoding): the key tiles in `splits` ranges of
   * `tps` tiles, each its own block writing an unnormalized part of O and
   * its rows' m and l; the last of a query block's splits to arrive
   * combines them (combine_parts). */
  int64_t splits, tps;
  KExpr *sp;
  KBuf *opart, *ml;
  /* attention_lse's second result: each row's logsumexp */
  KBuf *lse;
  /* Where store_out writes: the result (q's dtype) or O's part (f32). */
  KBuf *obuf;
  KExpr *obase;
  int64_t ors;
} Attn;


static int64_t round_up(int64_t a, int64_t b) { return cg_cdiv(a, b) * b; }

void cg_attn_load(const AttnTiles *t, KBlock *blk, KBuf *src, KExpr *base, int64_t rstride, KExpr *row0,
                  int64_t rows, int64_t S, KBuf *dst, KExpr *dst0) {
  Kernel *k = t->k;
  int64_t cpr = t->dp / t->epc, chunks = rows * cpr;
  KExpr *l;
  KBlock *lb = kloop(k, blk, "l", ki(k, cg_cdiv(chunks, t->threads)), KM_UNROLL, &l);
  KExpr *e = ilet(k, lb, "e", kmad(k, l, t->threads, t->tid));
  if (chunks % t->threads) lb = &cg_kif(k, lb, klt(k, e, ki(k, chunks)))->body;
  KExpr *r = ilet(k, lb, "r", kdiv(k, e, cpr)), *c = ilet(k, lb, "c", cg_kmul(k, kmod(k, e, cpr), ki(k, t->epc)));
  KExpr *grow = ilet(k, lb, "gr", cg_kadd(k, row0, r));
  KExpr *at = cg_kadd(k, dst0, kmad(k, r, t->ld, c));
  KExpr *src_at = cg_kadd(k, base, kmad(k, grow, rstride, c));
  KExpr *row_ok = S % rows || !S ? klt(k, grow, ki(k, S)) : NULL;
  if (cg_attn_async(t)) {
    KExpr *ok = cg_kand(k, row_ok, t->dp != t->d ? klt(k, c, ki(k, t->d)) : NULL);
    if (ok) {
      KExpr *okv = kv(k, cg_klet(k, lb, "ok", TY_I32, ok));
      src_at = cg_ksel(k, okv, src_at, ki(k, 0));
      cg_kcp_async(k, lb, CHUNK, dst, at, src, src_at, cg_ksel(k, okv, ki(k, CHUNK), ki(k, 0)));
    } else {
      cg_kcp_async(k, lb, CHUNK, dst, at, src, src_at, ki(k, CHUNK));
    }
    return;
  }
  KExpr *u;
  KBlock *ub = kloop(k, lb, "u", ki(k, t->epc), KM_UNROLL, &u);
  KExpr *col = ilet(k, ub, "col", cg_kadd(k, c, u));
  KExpr *ok = cg_kand(k, row_ok, klt(k, col, ki(k, t->d)));
  KExpr *x = cg_kload(k, src, cg_kadd(k, src_at, u));
  cg_kstore(k, ub, dst, cg_kadd(k, at, u), cg_ksel(k, ok, x, cg_kimm(k, 0, t->dt)));
}

static void load_tile(Attn *A, KBlock *blk, KBuf *src, KExpr *base, int64_t rstride, KExpr *row0, int64_t rows,
                      int64_t S, KBuf *dst, KExpr *dst0) {
  AttnTiles t = {A->k, A->dt, A->d, A->dp, A->ld, A->threads, A->epc, A->tid};
  cg_attn_load(&t, blk, src, base, rstride, row0, rows, S, dst, dst0);
}

/* Element (row, col) of stage st of the K or V tiles. */
static KExpr *kv_at(Attn *A, KExpr *st, KExpr *row, KExpr *col) {
  Kernel *k = A->k;
  return cg_kadd(k, cg_kmul(k, st, ki(k, A->bn * A->ld)), kmad(k, row, A->ld, col));
}

void cg_attn_mma_abt(Kernel *k, KBlock *blk, KTcKind kind, KExpr *lane, KBuf *acc, int64_t nb, KBuf *a, KExpr *a0,
                     int64_t lda, KBuf *b, KExpr *b0, int64_t ldb, int64_t kdim) {
  /* per mma k-step of kk elements (32 bytes: 16 f16/bf16, 8 tf32), A by
   * ldmatrix.x4 of rows lane % 16 at column ch (lane / 16), and two
   * blocks of 8 rows of B by another (rows 8 (lane / 16) + lane % 8 at
   * column ch ((lane / 8) % 2)), ch the elements of 16 bytes.  ldmatrix
   * moves 8x8 b16 matrices, a row 16 bytes a lane pair by pair: on f32
   * tiles lane (g, t) gets the 32-bit word t of row g, which is just the
   * m16n8k8 tf32 fragment (a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3
   * (g + 8, t + 4); b0 (k t, n g), b1 (k t + 4, n g)), so the same
   * addresses in 16-byte units serve both; tf32 operands are then
   * rounded (cvt.rna), as the convolutions' are. */
  bool tf32 = kind == KTC_TF32;
  int64_t kk = tf32 ? 8 : 16, ch = kk / 2;
  KBuf *af = cg_kfrag(k, "af", 4), *bf = cg_kfrag(k, "bf", 4);
  KExpr *z, *ks, *nj;
  KBlock *zb = kloop(k, blk, "z", ki(k, nb * 4), KM_UNROLL, &z);
  cg_kstore(k, zb, acc, z, kf32(k, 0));
  KBlock *kb = kloop(k, blk, "ks", ki(k, kdim / kk), KM_SERIAL, &ks);
  KExpr *acol = cg_kadd(k, cg_kmul(k, ks, ki(k, kk)), cg_kmul(k, kdiv(k, lane, 16), ki(k, ch)));
  cg_kldmatrix(k, kb, af, ki(k, 0), 4, false, a, cg_kadd(k, a0, kmad(k, kmod(k, lane, 16), lda, acol)));
  if (tf32) cg_ktf32_each(k, kb, af, 4);
  KBlock *nbk = kloop(k, kb, "nj", ki(k, nb / 2), KM_UNROLL, &nj);
  KExpr *brow = cg_kadd(k, cg_kmul(k, nj, ki(k, 16)),
                        cg_kadd(k, cg_kmul(k, kdiv(k, lane, 16), ki(k, 8)), kmod(k, lane, 8)));
  KExpr *bcol = cg_kadd(k, cg_kmul(k, ks, ki(k, kk)), cg_kmul(k, kmod(k, kdiv(k, lane, 8), 2), ki(k, ch)));
  cg_kldmatrix(k, nbk, bf, ki(k, 0), 4, false, b, cg_kadd(k, b0, kmad(k, brow, ldb, bcol)));
  if (tf32) cg_ktf32_each(k, nbk, bf, 4);
  cg_kmma(k, nbk, kind, acc, cg_kmul(k, nj, ki(k, 8)), af, ki(k, 0), bf, ki(k, 0));
  cg_kmma(k, nbk, kind, acc, cg_kadd(k, cg_kmul(k, nj, ki(k, 8)), ki(k, 4)), af, ki(k, 0), bf, ki(k, 2));
}

/* S = Q K^T of stage st into sacc: warp w takes query rows 16w ..
 * 16w + 15 and every key. */
static void scores_tc(Attn *A, KBlock *blk, KExpr *st) {
  Kernel *k = A->k;
  cg_attn_mma_abt(k, blk, A->kind, A->lane, A->sacc, A->bn / 8, A->qs, cg_kmul(k, A->warp, ki(k, 16 * A->ld)), A->ld,
                  A->ks, cg_kmul(k, st, ki(k, A->bn * A->ld)), A->ld, A->dp);
}

/* The same on FMA: thread t takes row t % bm and half t / bm of the keys. */
static void scores_fma(Attn *A, KBlock *blk, KExpr *st) {
  Kernel *k = A->k;
  int64_t half = A->bn / 2;
  KExpr *r = ilet(k, blk, "r", kmod(k, A->tid, A->bm)), *c0 = ilet(k, blk, "c0", cg_kmul(k, kdiv(k, A->tid, A->bm), ki(k, half)));
  KExpr *c, *i;
  KBlock *cb = kloop(k, blk, "c", ki(k, half), KM_SERIAL, &c);
  KExpr *key = ilet(k, cb, "kc", cg_kadd(k, c0, c));
  KVar *acc = cg_kvar(k, "dot", TY_F32), *iv = cg_kvar(k, "i", KT_INDEX);
  KStmt *red = cg_kreduce(k, cb, acc, kf32(k, 0), OP_ADD, iv, ki(k, A->dp));
  i = kv(k, iv);
  red->value = cg_kop2(k, OP_MUL, cg_kload(k, A->qs, kmad(k, r, A->ld, i)), cg_kload(k, A->ks, kv_at(A, st, key, i)));
  cg_kstore(k, cb, A->ss, kmad(k, r, A->sld, key), kv(k, acc));
}

/* What a row's exponentials subtract: its max m, or 0 while m is -inf
 * (nothing of the row is left yet, so every score is -inf too): then
 * each exp(s - 0) is 0, and so is alpha = exp(m_old - 0), with no select
 * per element (a select's arms are evaluated lazily: a branch each). */
static KExpr *exp_base(Kernel *k, KBlock *blk, KExpr *m) {
  KExpr *none = cg_kcmp(k, KC_EQ, m, kf32(k, -INFINITY));
  return kv(k, cg_klet(k, blk, "mb", TY_F32, cg_ksel(k, none, kf32(k, 0), m)));
}

/* e^x on FMA, 2^x on the tensor cores (their scores in base-2 units). */
static KExpr *exp_of(const Attn *A, Kernel *k, KExpr *x) { return A->tc ? cg_kexp2(k, x) : cg_kop1(k, OP_EXP, x); }

void cg_attn_mask_strides(const TensorType *t, int64_t ms[4]) {
  int64_t st = 1;
  for (int i = 0; i < 4; i++) ms[i] = 0;
  for (int i = t->rank - 1; i >= 0; st *= t->dims[i], i--) ms[4 - t->rank + i] = t->dims[i] == 1 ? 0 : st;
}

KExpr *cg_attn_score(Kernel *k, KBlock *blk, const AttnScore *sc, KExpr *x, KExpr *bz, KExpr *h, KExpr *qi,
                     KExpr *key, KExpr *keep) {
  KExpr *s = cg_kop2(k, OP_MUL, x, kf32(k, (float)(sc->scale * sc->unit)));
  KExpr *ok = keep;
  if (sc->causal) ok = cg_kand(k, ok, cg_kcmp(k, KC_LE, key, qi));
  if (sc->mask) {
    KExpr *in = cg_kand(k, klt(k, qi, ki(k, sc->Sq)), klt(k, key, ki(k, sc->Sk)));
    KExpr *at = cg_kadd(k, cg_kadd(k, cg_kmul(k, bz, ki(k, sc->ms[0])), cg_kmul(k, h, ki(k, sc->ms[1]))),
                        cg_kadd(k, cg_kmul(k, qi, ki(k, sc->ms[2])), cg_kmul(k, key, ki(k, sc->ms[3]))));
    KExpr *mv = cg_ksel(k, in, cg_kcast(k, cg_kload(k, sc->mask, at), TY_F32), kf32(k, 0));
    if (sc->mask->dtype == TY_BOOL)
      ok = cg_kand(k, ok, cg_kcmp(k, KC_NE, kv(k, cg_klet(k, blk, "mk", TY_F32, mv)), kf32(k, 0)));
    else
      s = cg_kop2(k, OP_ADD, s, sc->unit != 1 ? cg_kop2(k, OP_MUL, mv, kf32(k, (float)sc->unit)) : mv);
  }
  return kv(k, cg_klet(k, blk, "s", TY_F32, ok ? cg_ksel(k, ok, s, kf32(k, -INFINITY)) : s));
}

/* Score x of query row qi and key: the key bound where the last tile
 * is partial (lets into blk). */
static KExpr *masked_score(Attn *A, KBlock *blk, KExpr *x, KExpr *qi, KExpr *key) {
  Kernel *k = A->k;
  const Node *n = A->n;
  AttnScore sc = {A->mask, {A->ms[0], A->ms[1], A->ms[2], A->ms[3]}, A->Sq, A->Sk,
                  ir_attr(n, "scale") ? ir_attr_float(n, "scale") : 1 / sqrt((double)A->d), A->tc ? M_LOG2E : 1,
                  ir_attr_int(n, "causal") != 0};
  return cg_attn_score(k, blk, &sc, x, A->bz, A->hy, qi, key, A->Sk % A->bn ? klt(k, key, ki(k, A->Sk)) : NULL);
}

/* The online softmax of tile j on FMA, one thread per query row r: each
 * score masked, its row's new max m, P = exp(S - m) (0 when m is -inf:
 * nothing of the row is left yet), the row's alpha = exp(m_old - m) to
 * rowv[r] for O, and l = alpha l + sum P. */
static void softmax_tile(Attn *A, KBlock *blk, KExpr *j, KVar *m, KVar *l) {
  Kernel *k = A->k;
  KBlock *rb = &cg_kif(k, blk, klt(k, A->tid, ki(k, A->bm)))->body;
  KExpr *r = A->tid, *qi = ilet(k, rb, "qi", cg_kadd(k, A->q0, r));
  KVar *mt = cg_kvar(k, "mt", TY_F32);
  KStmt *red = cg_kreduce(k, rb, mt, kf32(k, -INFINITY), OP_MAXIMUM, cg_kvar(k, "c", KT_INDEX), ki(k, A->bn));
  KExpr *c = kv(k, red->rvar);
  KBlock *cb = &red->body;
  KExpr *key = ilet(k, cb, "key", kmad(k, j, A->bn, c));
  KExpr *at = ilet(k, cb, "sa", kmad(k, r, A->sld, c));
  KExpr *sv = masked_score(A, cb, cg_kload(k, A->ss, at), qi, key);
  cg_kstore(k, cb, A->ss, at, sv);
  red->value = sv;
  KExpr *mn = kv(k, cg_klet(k, rb, "mn", TY_F32, cg_kop2(k, OP_MAXIMUM, kv(k, m), kv(k, mt))));
  KExpr *base = exp_base(k, rb, mn);
  KExpr *av = kv(k, cg_klet(k, rb, "alpha", TY_F32, exp_of(A, k, cg_kop2(k, OP_SUB, kv(k, m), base))));
  cg_kstore(k, rb, A->rowv, r, av);
  KVar *sum = cg_kvar(k, "sum", TY_F32);
  KStmt *red2 = cg_kreduce(k, rb, sum, kf32(k, 0), OP_ADD, cg_kvar(k, "c", KT_INDEX), ki(k, A->bn));
  KBlock *pb = &red2->body;
  KExpr *c2 = kv(k, red2->rvar);
  KExpr *p = exp_of(A, k, cg_kop2(k, OP_SUB, cg_kload(k, A->ss, kmad(k, r, A->sld, c2)), base));
  KExpr *pv = kv(k, cg_klet(k, pb, "p", TY_F32, p));
  cg_kstore(k, pb, A->ss, kmad(k, r, A->sld, c2), pv);
  red2->value = pv;
  cg_kset(k, rb, l, cg_kop2(k, OP_ADD, cg_kop2(k, OP_MUL, kv(k, l), av), kv(k, sum)));
  cg_kset(k, rb, m, mn);
}

KExpr *cg_attn_quad(Kernel *k, KBlock *blk, KExpr *x, OpKind op) {
  for (int sh = 1; sh <= 2; sh *= 2) {
    KExpr *other = cg_kshfl_xor(k, x, sh, 4);
    KExpr *y = kv(k, cg_klet(k, blk, "sh", TY_F32, other));
    x = kv(k, cg_klet(k, blk, "q", TY_F32, op == OP_MAXIMUM ? cg_kfmax(k, x, y) : cg_kop2(k, op, x, y)));
  }
  return x;
}

/* The online softmax of tile j on the tensor cores, in the accumulators
 * where scores_tc left S: lane (g, t) of warp w holds rows 16w + g (h
 * 0) and 16w + g + 8 (h 1), columns 8 ni + 2 t and the next of each
 * block ni of 8 keys, in sacc[4 ni + 2 h ..].  Per row the lane's max,
 * then the quad's (cg_attn_quad); m_new, alpha and P = exp(S - m_new) as
 * on FMA, P back into sacc, O's rows times alpha.  mr and lr hold the
 * rows' m and the lane's part of l (its columns' P only: summed over
 * the quad once, after the last tile). */
static void softmax_tc(Attn *A, KBlock *blk, KExpr *j, KBuf *mr, KBuf *lr, KBuf *oacc) {
  Kernel *k = A->k;
  int64_t nb = A->bn / 8;
  KExpr *h, *c, *c2, *z, *e;
  KBlock *hb = kloop(k, blk, "h", ki(k, 2), KM_UNROLL, &h);
  KExpr *g = kdiv(k, A->lane, 4), *tq = kmod(k, A->lane, 4);
  KExpr *qi = ilet(k, hb, "qi", cg_kadd(k, A->q0, kmad(k, A->warp, 16, kmad(k, h, 8, g))));
  KVar *mt = cg_klet(k, hb, "mt", TY_F32, kf32(k, -INFINITY));
  KBlock *cb = kloop(k, hb, "c", ki(k, nb * 2), KM_UNROLL, &c);
  KExpr *slot = ilet(k, cb, "sl", kmad(k, kdiv(k, c, 2), 4, kmad(k, h, 2, kmod(k, c, 2))));
  KExpr *key = ilet(k, cb, "key", kmad(k, j, A->bn, kmad(k, kdiv(k, c, 2), 8, kmad(k, tq, 2, kmod(k, c, 2)))));
  KExpr *sv = masked_score(A, cb, cg_kload(k, A->sacc, slot), qi, key);
  cg_kstore(k, cb, A->sacc, slot, sv);
  /* maxima that skip a NaN score: its P is NaN, and so the row */
  cg_kset(k, cb, mt, cg_kfmax(k, kv(k, mt), sv));
  KExpr *mrow = cg_attn_quad(k, hb, kv(k, mt), OP_MAXIMUM);
  KExpr *mold = kv(k, cg_klet(k, hb, "mo", TY_F32, cg_kload(k, mr, h)));
  KExpr *mn = kv(k, cg_klet(k, hb, "mn", TY_F32, cg_kfmax(k, mold, mrow)));
  KExpr *base = exp_base(k, hb, mn);
  KExpr *av = kv(k, cg_klet(k, hb, "alpha", TY_F32, exp_of(A, k, cg_kop2(k, OP_SUB, mold, base))));
  KVar *sum = cg_klet(k, hb, "sum", TY_F32, kf32(k, 0));
  KBlock *pb = kloop(k, hb, "c", ki(k, nb * 2), KM_UNROLL, &c2);
  KExpr *ps = ilet(k, pb, "sl", kmad(k, kdiv(k, c2, 2), 4, kmad(k, h, 2, kmod(k, c2, 2))));
  KExpr *p = exp_of(A, k, cg_kop2(k, OP_SUB, cg_kload(k, A->sacc, ps), base));
  KExpr *pv = kv(k, cg_klet(k, pb, "p", TY_F32, p));
  cg_kstore(k, pb, A->sacc, ps, pv);
  cg_kset(k, pb, sum, cg_kop2(k, OP_ADD, kv(k, sum), pv));
  cg_kstore(k, hb, lr, h, cg_kop2(k, OP_ADD, cg_kop2(k, OP_MUL, cg_kload(k, lr, h), av), kv(k, sum)));
  cg_kstore(k, hb, mr, h, mn);
  /* O's rows of this h: elements 2h, 2h + 1 of each block of 8 columns */
  KBlock *zb = kloop(k, hb, "z", ki(k, A->dp / 8), KM_UNROLL, &z);
  KBlock *eb = kloop(k, zb, "e", ki(k, 2), KM_UNROLL, &e);
  KExpr *oa = kmad(k, z, 4, kmad(k, h, 2, e));
  cg_kstore(k, eb, oacc, oa, cg_kop2(k, OP_MUL, cg_kload(k, oacc, oa), av));
}

/* cg_attn_mma_pb in tf32 (m16n8k8), one accumulator block of P (8
 * columns) a k-step.  Lane (g, t) holds P's columns 2t and 2t + 1 of
 * rows g and g + 8, where the A fragment wants columns t and t + 4: the
 * sum over k does not care which k is which, so k = t stands for column
 * 2t and k = t + 4 for 2t + 1 (a0 a1 a2 a3 <- c0 c2 c1 c3), and B's
 * fragment follows: b0 = B[2t][g], b1 = B[2t + 1][g], two scalar loads
 * (ldmatrix.trans moves 16-bit elements, not 32), rounded to tf32.
 * With rows ldb = 16 m + 4 elements apart, rows 2t land 8t banks apart:
 * the warp's 32 loads hit 32 banks. */
static void mma_pb_tf32(Kernel *k, KBlock *blk, KExpr *lane, KBuf *acc, int64_t ncols, KBuf *pacc, int64_t kdim,
                        KBuf *b, KExpr *b0, int64_t ldb) {
  static const int order[4] = {0, 2, 1, 3};
  KBuf *pf = cg_kfrag(k, "pf", 4), *vf = cg_kfrag(k, "vf", 2);
  KExpr *ks, *nj;
  KBlock *kb = kloop(k, blk, "ks", ki(k, kdim / 8), KM_UNROLL, &ks);
  for (int r = 0; r < 4; r++)
    cg_kpack(k, kb, KTC_TF32, pf, ki(k, r), cg_kload(k, pacc, kmad(k, ks, 4, ki(k, order[r]))), NULL);
  KExpr *row = ilet(k, kb, "vr", kmad(k, ks, 8, cg_kmul(k, kmod(k, lane, 4), ki(k, 2))));
  KBlock *nb = kloop(k, kb, "nj", ki(k, ncols / 8), KM_UNROLL, &nj);
  KExpr *at = ilet(k, nb, "va", cg_kadd(k, b0, kmad(k, row, ldb, kmad(k, nj, 8, kdiv(k, lane, 4)))));
  cg_kpack(k, nb, KTC_TF32, vf, ki(k, 0), cg_kload(k, b, at), NULL);
  cg_kpack(k, nb, KTC_TF32, vf, ki(k, 1), cg_kload(k, b, cg_kadd(k, at, ki(k, ldb))), NULL);
  cg_kmma(k, nb, KTC_TF32, acc, cg_kmul(k, nj, ki(k, 4)), pf, ki(k, 0), vf, ki(k, 0));
}

void cg_attn_mma_pb(Kernel *k, KBlock *blk, KTcKind kind, KExpr *lane, KBuf *acc, int64_t ncols, KBuf *pacc,
                    int64_t kdim, KBuf *b, KExpr *b0, int64_t ldb) {
  if (kind == KTC_TF32) {
    mma_pb_tf32(k, blk, lane, acc, ncols, pacc, kdim, b, b0, ldb);
    return;
  }
  /* A is P packed from the accumulators as they are: the m16n8 layouts
   * of blocks 2 ks and 2 ks + 1 side by side are the m16k16 A layout
   * of columns 16 ks .. 16 ks + 15 (a0 a1 <- c0 c1 of the first, a2 a3
   * <- its c2 c3, a4 .. a7 the same of the second; docs/tensorcores.md).
   * B by ldmatrix.x4.trans (B's rows are the k dimension: matrices rows
   * 0-7 and 8-15 of columns 0-7, then of 8-15), two blocks of 8
   * columns of acc each. */
  KBuf *pf = cg_kfrag(k, "pf", 4), *vf = cg_kfrag(k, "vf", 4);
  KExpr *ks, *nj, *r;
  KBlock *kb = kloop(k, blk, "ks", ki(k, kdim / 16), KM_UNROLL, &ks);
  KBlock *rb = kloop(k, kb, "r", ki(k, 4), KM_UNROLL, &r);
  /* register r: block 2 ks + r / 2, elements 2 (r % 2) and the next */
  KExpr *at = ilet(k, rb, "pa", kmad(k, ks, 8, kmad(k, kdiv(k, r, 2), 4, cg_kmul(k, kmod(k, r, 2), ki(k, 2)))));
  cg_kpack(k, rb, kind, pf, r, cg_kload(k, pacc, at), cg_kload(k, pacc, cg_kadd(k, at, ki(k, 1))));
  KBlock *nb = kloop(k, kb, "nj", ki(k, ncols / 16), KM_UNROLL, &nj);
  KExpr *vrow = cg_kadd(k, cg_kmul(k, ks, ki(k, 16)),
                        cg_kadd(k, kmod(k, lane, 8), cg_kmul(k, kmod(k, kdiv(k, lane, 8), 2), ki(k, 8))));
  KExpr *vcol = cg_kadd(k, cg_kmul(k, nj, ki(k, 16)), cg_kmul(k, kdiv(k, lane, 16), ki(k, 8)));
  cg_kldmatrix(k, nb, vf, ki(k, 0), 4, true, b, cg_kadd(k, b0, kmad(k, vrow, ldb, vcol)));
  cg_kmma(k, nb, kind, acc, cg_kmul(k, nj, ki(k, 8)), pf, ki(k, 0), vf, ki(k, 0));
  cg_kmma(k, nb, kind, acc, cg_kadd(k, cg_kmul(k, nj, ki(k, 8)), ki(k, 4)), pf, ki(k, 0), vf, ki(k, 2));
}

/* O += P V (softmax_tc scaled O by alpha): warp w's rows of O are its
 * 16 rows of P. */
static void pv_tc(Attn *A, KBlock *blk, KExpr *st, KBuf *oacc) {
  Kernel *k = A->k;
  cg_attn_mma_pb(k, blk, A->kind, A->lane, oacc, A->dp, A->sacc, A->bn, A->vs, cg_kmul(k, st, ki(k, A->bn * A->ld)),
                 A->ld);
}

/* The same on FMA: thread t takes row t % bm and half t / bm of O's
 * columns, P being in S's tile. */
static void pv_fma(Attn *A, KBlock *blk, KExpr *st, KBuf *oacc) {
  Kernel *k = A->k;
  int64_t half = A->dp / 2;
  KExpr *r = ilet(k, blk, "r", kmod(k, A->tid, A->bm)), *u0 = ilet(k, blk, "u0", cg_kmul(k, kdiv(k, A->tid, A->bm), ki(k, half)));
  KExpr *a = kv(k, cg_klet(k, blk, "alpha", TY_F32, cg_kload(k, A->rowv, r)));
  KExpr *u, *c, *u2;
  KBlock *ub = kloop(k, blk, "u", ki(k, half), KM_UNROLL, &u);
  cg_kstore(k, ub, oacc, u, cg_kop2(k, OP_MUL, cg_kload(k, oacc, u), a));
  KBlock *cb = kloop(k, blk, "c", ki(k, A->bn), KM_SERIAL, &c);
  KExpr *p = kv(k, cg_klet(k, cb, "p", TY_F32, cg_kload(k, A->ss, kmad(k, r, A->sld, c))));
  KBlock *ub2 = kloop(k, cb, "u", ki(k, half), KM_UNROLL, &u2);
  KExpr *x = cg_kop2(k, OP_MUL, p, cg_kload(k, A->vs, kv_at(A, st, c, cg_kadd(k, u0, u2))));
  cg_kstore(k, ub2, oacc, u2, cg_kop2(k, OP_ADD, cg_kload(k, oacc, u2), x));
}

/* O times w (1 / l, 0 for a row with no key; 1 for a split's part) to
 * obuf. */
static void store_out(Attn *A, KBlock *blk, KExpr *row, KExpr *col, KExpr *o, KExpr *w) {
  Kernel *k = A->k;
  KExpr *qi = cg_kadd(k, A->q0, row);
  KExpr *ok = cg_kand(k, A->Sq % A->bm ? klt(k, qi, ki(k, A->Sq)) : NULL, A->dp != A->d ? klt(k, col, ki(k, A->d)) : NULL);
  KBlock *at = ok ? &cg_kif(k, blk, ok)->body : blk;
  KExpr *y = cg_kop2(k, OP_MUL, o, w);
  cg_kstore(k, at, A->obuf, cg_kadd(k, A->obase, kmad(k, qi, A->ors, col)), cg_kcast(k, y, A->obuf->dtype));
}

/* On the tensor cores w is the lane's rows' (inv[0] for row g, inv[1]
 * for g + 8), on FMA rowv's. */
static void store_all(Attn *A, KBlock *blk, KBuf *oacc, KBuf *inv) {
  Kernel *k = A->k;
  KExpr *nb, *e, *u;
  if (A->tc) {
    KBlock *bb = kloop(k, blk, "nb", ki(k, A->dp / 8), KM_UNROLL, &nb);
    KBlock *eb = kloop(k, bb, "e", ki(k, 4), KM_UNROLL, &e);
    KExpr *row = cg_kadd(k, cg_kmul(k, A->warp, ki(k, 16)), kmad(k, kdiv(k, e, 2), 8, kdiv(k, A->lane, 4)));
    KExpr *col = kmad(k, nb, 8, kmad(k, kmod(k, A->lane, 4), 2, kmod(k, e, 2)));
    store_out(A, eb, ilet(k, eb, "row", row), ilet(k, eb, "col", col), cg_kload(k, oacc, kmad(k, nb, 4, e)),
              cg_kload(k, inv, kdiv(k, e, 2)));
    return;
  }
  KExpr *r = ilet(k, blk, "r", kmod(k, A->tid, A->bm)), *u0 = ilet(k, blk, "u0", cg_kmul(k, kdiv(k, A->tid, A->bm), ki(k, A->dp / 2)));
  KBlock *ub = kloop(k, blk, "u", ki(k, A->dp / 2), KM_UNROLL, &u);
  store_out(A, ub, r, ilet(k, ub, "col", cg_kadd(k, u0, u)), cg_kload(k, oacc, u), cg_kload(k, A->rowv, r));
}

/* attention_lse's lse of query row qi from its max m (in base-2 units
 * on the tensor cores) and sum l: m + log l in base e, +inf for l = 0
 * (a row with no key left). */
static void store_lse(Attn *A, KBlock *blk, KExpr *qi, KExpr *m, KExpr *l) {
  Kernel *k = A->k;
  KExpr *mt = A->tc ? cg_kop2(k, OP_MUL, m, kf32(k, (float)M_LN2)) : m;
  KExpr *v = cg_ksel(k, cg_kcmp(k, KC_EQ, l, kf32(k, 0)), kf32(k, INFINITY), cg_kop2(k, OP_ADD, mt, cg_kop1(k, OP_LOG, l)));
  cg_kstore(k, blk, A->lse, kmad(k, kmad(k, A->bz, A->H, A->hy), A->Sq, qi), v);
}

/* Flash-decoding: when the grid would leave most of the GPU idle (few
 * query blocks: decoding's one query row, a small batch), the key tiles
 * go to `splits` blocks per query block instead of one, at least two
 * tiles each, up to about two blocks per SM of an H200; the last split
 * of a query block to arrive combines the parts.  Not for fewer than 4
 * key tiles, nor under --no-split-keys. */
static void split_keys(Attn *A, int64_t gx) {
  A->splits = 1, A->tps = A->kt;
  int64_t blocks = gx * A->H * A->B, target = 2 * CG_TC_TARGET_SMS;
  if (cg_options(A->b)->no_split_keys || A->kt < 4 || blocks >= target) return;
  int64_t splits = cg_cdiv(target, blocks);
  if (splits > A->kt / 2) splits = A->kt / 2;
  if (splits > 65535 / A->B) splits = 65535 / A->B;
  if (splits < 2) return;
  A->tps = cg_cdiv(A->kt, splits);
  A->splits = cg_cdiv(A->kt, A->tps);
}

/* The parts to the result, by the last of the query block's splits to
 * arrive (KS_LAST_ARRIVAL, a counter per query block, head and batch
 * row), its threads an element each in turn: with M the largest of the
 * rows' parts' m, O = sum O_s exp(m_s - M) / sum l_s exp(m_s - M) (0
 * for a row no part saw a key of), in split order, whichever split
 * came last. */
static void combine_parts(Attn *A, KBlock *body, KExpr *qx, int64_t gx) {
  CgBuild *b = A->b;
  const Node *n = A->n;
  Kernel *k = A->k;
  int64_t rows = A->B * A->H * A->Sq, tiles = gx * A->H * A->B;
  KExpr *tile = kmad(k, kmad(k, A->bz, A->H, A->hy), gx, qx);
  KBuf *arrived = cg_kglobal(k, "arrived", TY_I32, tiles, cg_sync_words(b, tiles));
  KVar *last = cg_klast_arrival(k, body, arrived, tile, A->splits);
  KBlock *fix = &cg_kif(k, body, cg_kcmp(k, KC_NE, kv(k, last), ki(k, 0)))->body;
  KBuf *out = cg_kglobal(k, "out", A->dt, rows * A->d, cg_ref(b, &n->out[0]));
  KExpr *it;
  KBlock *blk = kloop(k, fix, "ci", ki(k, cg_cdiv(A->bm * A->d, A->threads)), KM_SERIAL, &it);
  KExpr *e = ilet(k, blk, "ce", kmad(k, it, A->threads, A->tid));
  KExpr *qi = ilet(k, blk, "cq", cg_kadd(k, A->q0, kdiv(k, e, A->d))), *col = ilet(k, blk, "col", kmod(k, e, A->d));
  KExpr *ok = cg_kand(k, (A->bm * A->d) % A->threads ? klt(k, e, ki(k, A->bm * A->d)) : NULL,
                      A->Sq % A->bm ? klt(k, qi, ki(k, A->Sq)) : NULL);
  if (ok) blk = &cg_kif(k, blk, ok)->body;
  KExpr *row = ilet(k, blk, "row", kmad(k, kmad(k, A->bz, A->H, A->hy), A->Sq, qi));
  KStmt *mx = cg_kreduce(k, blk, cg_kvar(k, "mx", TY_F32), kf32(k, -INFINITY), OP_MAXIMUM,
                         cg_kvar(k, "s", KT_INDEX), ki(k, A->splits));
  mx->value = cg_kload(k, A->ml, cg_kmul(k, kmad(k, kv(k, mx->rvar), rows, row), ki(k, 2)));
  KExpr *base = exp_base(k, blk, kv(k, mx->var));
  KStmt *red[2];
  for (int w = 0; w < 2; w++) {
    red[w] = cg_kreduce(k, blk, cg_kvar(k, w ? "o" : "l", TY_F32), kf32(k, 0), OP_ADD, cg_kvar(k, "s", KT_INDEX),
                        ki(k, A->splits));
    KBlock *rb = &red[w]->body;
    KExpr *part = ilet(k, rb, "pr", kmad(k, kv(k, red[w]->rvar), rows, row));
    KExpr *ms = cg_kload(k, A->ml, cg_kmul(k, part, ki(k, 2)));
    KExpr *wt = kv(k, cg_klet(k, rb, "wt", TY_F32, exp_of(A, k, cg_kop2(k, OP_SUB, ms, base))));
    KExpr *x = w ? cg_kload(k, A->opart, kmad(k, part, A->d, col))
                 : cg_kload(k, A->ml, cg_kadd(k, cg_kmul(k, part, ki(k, 2)), ki(k, 1)));
    red[w]->value = cg_kop2(k, OP_MUL, x, wt);
  }
  KExpr *L = kv(k, red[0]->var), *O = kv(k, red[1]->var);
  KExpr *y = cg_ksel(k, cg_kcmp(k, KC_EQ, L, kf32(k, 0)), kf32(k, 0), cg_kop2(k, OP_DIV, O, L));
  if (A->lse) store_lse(A, &cg_kif(k, blk, cg_kcmp(k, KC_EQ, col, ki(k, 0)))->body, qi, base, L);
  /* [B, H, Sq, d]: row d + col; [B, Sq, H, d]: ((b Sq + q) H + h) d + col */
  KExpr *at = kmad(k, row, A->d, col);
  if (strcmp(ir_attr_str(n, "layout"), "bshd") == 0)
    at = kmad(k, kmad(k, kmad(k, A->bz, A->Sq, qi), A->H, A->hy), A->d, col);
  cg_kstore(k, blk, out, at, cg_kcast(k, y, A->dt));
}

static KBuf *operand(Attn *A, int i, const char *name) {
  const Value *v = A->n->in[i];
  return cg_kglobal(A->k, name, v->type.dtype, ir_type_numel(&v->type), cg_ref(A->b, v));
}

bool cg_lower_attention(CgBuild *b, const Node *n) {
  Ctx *c = cg_build_ctx(b);
  const TensorType *qt = &n->in[0]->type, *kt = &n->in[1]->type;
  Attn A0 = {.b = b, .n = n}, *A = &A0;
  bool bshd = strcmp(ir_attr_str(n, "layout"), "bshd") == 0;
  int hx = bshd ? 2 : 1, sx = bshd ? 1 : 2;
  A->dt = qt->dtype;
  A->B = qt->dims[0], A->H = qt->dims[hx], A->Sq = qt->dims[sx], A->d = qt->dims[3];
  A->Hkv = kt->dims[hx], A->Sk = kt->dims[sx];
  A->rsq = bshd ? A->H * A->d : A->d;
  A->rskv = bshd ? A->Hkv * A->d : A->d;
  if (A->dt != TY_F32 && A->dt != TY_F16 && A->dt != TY_BF16) {
    diag_error(c, n->loc, "codegen does not support attention on %s yet", ir_dtype_name(A->dt));
    return false;
  }
  if (A->d > MAX_D) {
    diag_error(c, n->loc, "attention: the fused kernel takes head dims up to %d, got %" PRId64, MAX_D, A->d);
    return false;
  }
  if (n->op == OP_ATTENTION_LSE && !A->d && A->B && A->H && A->Sq) {
    diag_error(c, n->loc, "attention_lse: a head dim of 0 (each row's lse would still depend on its keys)");
    return false;
  }
  /* nothing to compute: an empty result */
  if (!A->B || !A->H || !A->Sq || !A->d) return true;
  if (A->H > 65535 || A->B > 65535) { /* the grid's y and z */
    diag_error(c, n->loc, "attention: at most 65535 heads and batch rows, got %" PRId64 " and %" PRId64, A->H, A->B);
    return false;
  }
  /* f32 on the tensor cores only under --tf32 (its operands rounded to
   * tf32, as the convolutions'); else exact FMA */
  A->tc = !cg_options(b)->no_tensor_cores && cg_tc_kind(A->dt, cg_options(b)->tf32, &A->kind);
  A->es = ir_dtype_size(A->dt);
  A->epc = CHUNK / A->es;
  A->dp = round_up(A->d > 0 ? A->d : 1, 16);
  A->ld = A->dp + A->epc;
  /* f32 tiles are twice f16's bytes: past d = 64 (tf32) or 128 (FMA)
   * 32-key tiles keep the double-buffered K and V within shared memory */
  A->bn = A->dp > (A->tc ? (A->kind == KTC_TF32 ? 64 : 256) : 128) ? 32 : 64;
  A->kt = cg_cdiv(A->Sk, A->bn);
  A->sld = A->bn + SPAD;
  /* A decoding step's few query rows take a block of their own size,
   * not 63 empty rows of 64. */
  A->bm = A->Sq <= BM_SHORT ? BM_SHORT : BM;
  A->threads = 2 * A->bm;
  int64_t gx = cg_cdiv(A->Sq, A->bm);
  split_keys(A, gx);
  const char *what = arena_printf(&c->arena, "flash attention %s, %" PRId64 "x%" PRId64 " tiles, d %" PRId64 "%s",
                                  A->tc ? arena_printf(&c->arena, "mma %s", cg_tc_name(A->kind)) : "fma f32", A->bm, A->bn, A->d,
                                  A->splits > 1 ? arena_printf(&c->arena, ", keys in %" PRId64 " splits",
                                                               A->splits) : "");
  Kernel *k = A->k = cg_kernel_new(c, n, "attention", what);
  A->q = operand(A, 0, "q");
  A->kb = operand(A, 1, "k");
  A->vb = operand(A, 2, "v");
  if (n->n_in > 3) {
    A->mask = operand(A, 3, "mask");
    cg_attn_mask_strides(&n->in[3]->type, A->ms);
  }
  const Value *out = &n->out[0];
  if (n->op == OP_ATTENTION_LSE) A->lse = cg_kglobal(k, "lse", TY_F32, ir_type_numel(&n->out[1].type), cg_ref(b, &n->out[1]));
  /* split, the parts go to scratch and combine_parts writes the result */
  if (A->splits == 1) A->out = cg_kglobal(k, "out", A->dt, ir_type_numel(&out->type), cg_ref(b, out));
  RtRef opart = {0}, ml = {0};
  int64_t rows = A->B * A->H * A->Sq;
  if (A->splits > 1) {
    opart = cg_scratch(b, n, (uint64_t)(A->splits * rows * A->d) * 4);
    ml = cg_scratch(b, n, (uint64_t)(A->splits * rows * 2) * 4);
    A->opart = cg_kglobal(k, "opart", TY_F32, A->splits * rows * A->d, opart);
    A->ml = cg_kglobal(k, "ml", TY_F32, A->splits * rows * 2, ml);
  }
  uint32_t off = 0, bytes;
  A->qs = cg_kdynshared(k, "Qs", A->dt, A->bm * A->ld, off);
  off += (uint32_t)(A->bm * A->ld * A->es);
  A->ks = cg_kdynshared(k, "Ks", A->dt, 2 * A->bn * A->ld, off);
  off += bytes = (uint32_t)(2 * A->bn * A->ld * A->es);
  A->vs = cg_kdynshared(k, "Vs", A->dt, 2 * A->bn * A->ld, off);
  off += bytes;
  /* On the tensor cores S and P stay in registers (softmax_tc). */
  if (!A->tc) {
    A->ss = cg_kdynshared(k, "Ss", TY_F32, A->bm * A->sld, off);
    off += (uint32_t)(A->bm * A->sld * 4);
    A->rowv = cg_kdynshared(k, "rowv", TY_F32, A->bm, off);
  }

  KExpr *qx, *t;
  KBlock *body = kloop(k, &k->body, "qx", ki(k, gx), KM_GRID_X, &qx);
  body = kloop(k, body, "hy", ki(k, A->H), KM_GRID_Y, &A->hy);
  body = kloop(k, body, "bz", ki(k, A->B * A->splits), KM_GRID_Z, &A->bz);
  body = kloop(k, body, "t", ki(k, A->threads), KM_BLOCK_X, &t);
  A->tid = t;
  A->lane = ilet(k, body, "lane", kmod(k, t, 32));
  A->warp = ilet(k, body, "warp", kdiv(k, t, 32));
  A->q0 = ilet(k, body, "q0", cg_kmul(k, qx, ki(k, A->bm)));
  if (A->splits > 1) {
    KExpr *z = A->bz;
    A->bz = ilet(k, body, "bb", kdiv(k, z, A->splits));
    A->sp = ilet(k, body, "sp", kmod(k, z, A->splits));
  }
  /* a head's row 0: [B, H, S, d] (b H + h) S d, [B, S, H, d] (b S H + h) d */
  KExpr *kvh = kdiv(k, A->hy, A->H / A->Hkv);
  if (bshd) {
    A->qbase = ilet(k, body, "qb", cg_kmul(k, kmad(k, A->bz, A->Sq * A->H, A->hy), ki(k, A->d)));
    A->kvbase = ilet(k, body, "kvb", cg_kmul(k, kmad(k, A->bz, A->Sk * A->Hkv, kvh), ki(k, A->d)));
  } else {
    A->qbase = ilet(k, body, "qb", cg_kmul(k, kmad(k, A->bz, A->H, A->hy), ki(k, A->Sq * A->d)));
    A->kvbase = ilet(k, body, "kvb", cg_kmul(k, kmad(k, A->bz, A->Hkv, kvh), ki(k, A->Sk * A->d)));
  }
  KExpr *ntile = ki(k, A->kt);
  if (ir_attr_int(n, "causal")) {
    /* the last tile with a key j <= the block's last query row */
    KExpr *last = kdiv(k, cg_kadd(k, A->q0, ki(k, A->bm - 1)), A->bn);
    ntile = ilet(k, body, "nt", cg_kidx(k, KI_MIN, cg_kadd(k, last, ki(k, 1)), ki(k, A->kt)));
  }
  /* A row's running max m and sum l: one thread's registers on FMA; on
   * the tensor cores, for each of the lane's two rows, m and the lane's
   * part of l (mr, lr). */
  KVar *m = NULL, *l = NULL;
  KBuf *mr = NULL, *lr = NULL;
  KExpr *z;
  if (A->tc) {
    A->sacc = cg_klocal(k, "sacc", TY_F32, A->bn / 8 * 4, KSP_REGISTER);
    mr = cg_klocal(k, "mr", TY_F32, 2, KSP_REGISTER);
    lr = cg_klocal(k, "lr", TY_F32, 2, KSP_REGISTER);
    KBlock *hb = kloop(k, body, "h", ki(k, 2), KM_UNROLL, &z);
    cg_kstore(k, hb, mr, z, kf32(k, -INFINITY));
    cg_kstore(k, hb, lr, z, kf32(k, 0));
  } else {
    m = cg_klet(k, body, "m", TY_F32, kf32(k, -INFINITY));
    l = cg_klet(k, body, "l", TY_F32, kf32(k, 0));
  }
  int64_t n_acc = A->tc ? A->dp / 8 * 4 : A->dp / 2;
  KBuf *oacc = cg_klocal(k, "o", TY_F32, n_acc, KSP_REGISTER);
  KBlock *zb = kloop(k, body, "z", ki(k, n_acc), KM_UNROLL, &z);
  cg_kstore(k, zb, oacc, z, kf32(k, 0));
  /* this block's tiles: t0 .. t0 + count - 1 (a split past the causal
   * bound has none, and still writes its empty part) */
  KExpr *t0 = ki(k, 0), *count = ntile, *krow0 = ki(k, 0);
  KBlock *first = body;
  if (A->splits > 1) {
    t0 = ilet(k, body, "t0", cg_kmul(k, A->sp, ki(k, A->tps)));
    KExpr *t1 = cg_kidx(k, KI_MIN, cg_kadd(k, t0, ki(k, A->tps)), ntile);
    count = ilet(k, body, "nc", cg_kidx(k, KI_MAX, cg_kidx(k, KI_SUB, t1, t0), ki(k, 0)));
    krow0 = ilet(k, body, "kr0", cg_kmul(k, t0, ki(k, A->bn)));
    first = &cg_kif(k, body, klt(k, ki(k, 0), count))->body;
  }
  bool async = A->d % A->epc == 0;
  load_tile(A, body, A->q, A->qbase, A->rsq, A->q0, A->bm, A->Sq, A->qs, ki(k, 0));
  load_tile(A, first, A->kb, A->kvbase, A->rskv, krow0, A->bn, A->Sk, A->ks, ki(k, 0));
  load_tile(A, first, A->vb, A->kvbase, A->rskv, krow0, A->bn, A->Sk, A->vs, ki(k, 0));
  if (async) cg_kcp_commit(k, body);

  KExpr *j;
  KBlock *lb = kloop(k, body, "j", count, KM_SERIAL, &j);
  if (async) cg_kcp_wait(k, lb, 0);
  cg_kbarrier(k, lb);
  /* tile j + 1 into the other stage, which tile j - 1 left before the
   * barrier above, while tile j is computed */
  KExpr *nj = ilet(k, lb, "jn", cg_kadd(k, j, ki(k, 1)));
  KBlock *pre = &cg_kif(k, lb, klt(k, nj, count))->body;
  KExpr *row0 = ilet(k, pre, "k0", cg_kmul(k, A->splits > 1 ? cg_kadd(k, t0, nj) : nj, ki(k, A->bn)));
  KExpr *at = ilet(k, pre, "st0", cg_kmul(k, kmod(k, nj, 2), ki(k, A->bn * A->ld)));
  load_tile(A, pre, A->kb, A->kvbase, A->rskv, row0, A->bn, A->Sk, A->ks, at);
  load_tile(A, pre, A->vb, A->kvbase, A->rskv, row0, A->bn, A->Sk, A->vs, at);
  if (async) cg_kcp_commit(k, lb);
  KExpr *st = ilet(k, lb, "st", kmod(k, j, 2));
  KExpr *jt = A->splits > 1 ? ilet(k, lb, "jt", cg_kadd(k, t0, j)) : j;
  /* this split's part of [splits, B, H, Sq]: its head's first row */
  KExpr *head = A->splits > 1 ? ilet(k, body, "hd", kmad(k, kmad(k, A->sp, A->B, A->bz), A->H, A->hy)) : NULL;
  if (A->splits > 1)
    A->obuf = A->opart, A->obase = cg_kmul(k, head, ki(k, A->Sq * A->d)), A->ors = A->d;
  else
    A->obuf = A->out, A->obase = A->qbase, A->ors = A->rsq;
  if (A->tc) {
    /* no barrier within the tile: each warp's S and P are its own registers */
    scores_tc(A, lb, st);
    softmax_tc(A, lb, jt, mr, lr, oacc);
    pv_tc(A, lb, st, oacc);
    /* each row's l, summed over its quad; then w = 1 / l (0 for l = 0),
     * or for a split's part 1, its rows' m and l written by lane t = 0 */
    KBuf *inv = cg_klocal(k, "inv", TY_F32, 2, KSP_REGISTER);
    KExpr *h;
    KBlock *hb = kloop(k, body, "h", ki(k, 2), KM_UNROLL, &h);
    KExpr *lsum = cg_attn_quad(k, hb, kv(k, cg_klet(k, hb, "lt", TY_F32, cg_kload(k, lr, h))), OP_ADD);
    if (A->splits > 1) {
      cg_kstore(k, hb, inv, h, kf32(k, 1));
      KExpr *qi = ilet(k, hb, "qi", cg_kadd(k, A->q0, kmad(k, A->warp, 16, kmad(k, h, 8, kdiv(k, A->lane, 4)))));
      KExpr *w = cg_kcmp(k, KC_EQ, kmod(k, A->lane, 4), ki(k, 0));
      if (A->Sq % A->bm) w = cg_kand(k, w, klt(k, qi, ki(k, A->Sq)));
      KBlock *wb = &cg_kif(k, hb, w)->body;
      KExpr *mla = ilet(k, wb, "mla", cg_kmul(k, kmad(k, head, A->Sq, qi), ki(k, 2)));
      cg_kstore(k, wb, A->ml, mla, cg_kload(k, mr, h));
      cg_kstore(k, wb, A->ml, cg_kadd(k, mla, ki(k, 1)), lsum);
    } else {
      KExpr *none = cg_kcmp(k, KC_EQ, lsum, kf32(k, 0));
      cg_kstore(k, hb, inv, h, cg_ksel(k, none, kf32(k, 0), cg_kop2(k, OP_DIV, kf32(k, 1), lsum)));
      if (A->lse) {
        KExpr *qi = ilet(k, hb, "qi", cg_kadd(k, A->q0, kmad(k, A->warp, 16, kmad(k, h, 8, kdiv(k, A->lane, 4)))));
        KExpr *w = cg_kand(k, cg_kcmp(k, KC_EQ, kmod(k, A->lane, 4), ki(k, 0)), klt(k, qi, ki(k, A->Sq)));
        store_lse(A, &cg_kif(k, hb, w)->body, qi, cg_kload(k, mr, h), lsum);
      }
    }
    store_all(A, body, oacc, inv);
  } else {
    scores_fma(A, lb, st);
    cg_kbarrier(k, lb);
    softmax_tile(A, lb, jt, m, l);
    cg_kbarrier(k, lb);
    pv_fma(A, lb, st, oacc);
    cg_kbarrier(k, body);
    KBlock *rb = &cg_kif(k, body, klt(k, A->tid, ki(k, A->bm)))->body;
    if (A->splits > 1) {
      /* O unnormalized, and each row's m and l */
      cg_kstore(k, rb, A->rowv, A->tid, kf32(k, 1));
      KExpr *qi = cg_kadd(k, A->q0, A->tid);
      KBlock *wb = A->Sq % A->bm ? &cg_kif(k, rb, klt(k, qi, ki(k, A->Sq)))->body : rb;
      KExpr *mla = ilet(k, wb, "mla", cg_kmul(k, kmad(k, head, A->Sq, qi), ki(k, 2)));
      cg_kstore(k, wb, A->ml, mla, kv(k, m));
      cg_kstore(k, wb, A->ml, cg_kadd(k, mla, ki(k, 1)), kv(k, l));
    } else {
      KExpr *none = cg_kcmp(k, KC_EQ, kv(k, l), kf32(k, 0));
      cg_kstore(k, rb, A->rowv, A->tid, cg_ksel(k, none, kf32(k, 0), cg_kop2(k, OP_DIV, kf32(k, 1), kv(k, l))));
      if (A->lse) {
        KExpr *qi = ilet(k, rb, "qi", cg_kadd(k, A->q0, A->tid));
        store_lse(A, A->Sq % A->bm ? &cg_kif(k, rb, klt(k, qi, ki(k, A->Sq)))->body : rb, qi, kv(k, m), kv(k, l));
      }
    }
    cg_kbarrier(k, body);
    store_all(A, body, oacc, NULL);
  }
  if (A->splits > 1) combine_parts(A, body, qx, gx);

  k->grid[0] = (uint32_t)(gx < INT32_MAX ? gx : INT32_MAX);
  k->grid[1] = (uint32_t)(A->H < 65535 ? A->H : 65535);
  k->grid[2] = (uint32_t)(A->B * A->splits < 65535 ? A->B * A->splits : 65535);
  k->block[0] = A->threads;
  cg_launch(b, k);
  return true;
}
