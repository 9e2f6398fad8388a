/* attention_grad (ir/ops.def) as two kernels in the FlashAttention-2
 * style: no Sq x Sk matrix ever reaches global memory, the probabilities
 * are recomputed tile by tile from q, k and the forward's lse (each
 * query row's logsumexp, attention_lse's second result).
 *
 *   dq: one block per (batch, query head, tile of query rows): D =
 *       rowsum(dy * out) per row, to a scratch for the second kernel;
 *       then a walk over the key tiles computes S, P = exp(S - lse), dP =
 *       dy V^T and dS = P (dP - D) per tile, and dq += dS K in registers.
 *   dk, dv: one block per (batch, key/value head, tile of key rows),
 *       walking the query tiles of every query head that reads this
 *       key/value head (grouped and multi-query attention: the sum over
 *       heads is in the accumulators, in head order, so it is the same
 *       run to run): P and dS again, transposed, then dv += P^T dy and dk
 *       += dS^T q.  Under causal the query tiles wholly above the
 *       diagonal are skipped (and, in the dq kernel, the key tiles past
 *       it).
 *
 * FlashAttention-2 adds dq with atomics from the dk/dv kernel instead;
 * dq as its own walk keeps the sums in one order (the same bits every
 * run) at the price of computing S and dP twice (ir/cost.c counts what
 * is computed).
 *
 * f16 and bf16 up to d = 128 (and f32 under --tf32, its products
 * m16n8k8 on f32 tiles: attention.c's mma_pb_tf32) take the tensor cores (dq_kernel_tc,
 * dkdv_kernel_tc), FlashAttention-2's structure: a warp owns 16 rows of
 * the block's 64 and every product of them is mma.sync m16n8k16 with
 * f32 accumulators (codegen/attn.h's two shapes: A B^T from shared
 * memory, and P B with P the accumulators of the one before, rounded to
 * f16/bf16 in registers), so no barrier sits within a tile, and the
 * walked tiles are double-buffered (cp.async): dq's walk
 * computes S = Q K^T and dP = dy V^T, dS in their accumulators, dq +=
 * dS K; the dk/dv walk computes S^T = K Q^T and dP^T = V dy^T, so that
 * P^T and dS^T are already A operands for dv += P^T dy and dk += dS^T
 * q.  Scores are in base-2 units there (exp2, as the forward's).
 *
 * f32 without --tf32 (and d past 128, where the accumulators would spill) computes on
 * FMA: the tiles are converted to f32 in shared memory as they load,
 * with an odd row stride so that a warp walking 32 rows (one each) hits
 * 32 banks.  A thread owns one row of its block's tile and `tpr`
 * threads share it: in the dot-product phase each takes 1/tpr of the
 * other side's rows, in the accumulation phase 1/tpr of the columns (at
 * most COLS accumulators of each kind). */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "codegen.h"
#include "attn.h"
#include "kernel.h"
#include "kshort.h"

enum {
  MAX_D = 256, /* as the forward's */
  BM = 64,     /* the tensor cores: the block's own rows, 16 a warp */
  MAX_TC_D = 128, /* past it, the tensor cores' accumulators spill: FMA */
  COLS = 32,   /* accumulators of each kind a thread at most */
};

typedef struct Bwd {
  CgBuild *b;
  const Node *n;
  Kernel *k;
  DType dt;
  bool bshd, causal;
  int64_t B, H, Hkv, G, Sq, Sk, d, dp, ld;
  int64_t rsq, rskv; /* elements between rows of q (out, dy, dq), of k (v, dk, dv) */
  int64_t tile;      /* rows of every tile, queries and keys alike */
  int64_t tpr, cols; /* threads sharing a row; columns each accumulates */
  int64_t threads, sld;
  int64_t ms[4]; /* the mask's strides over [B, H, Sq, Sk] */
  double scale;
  /* the tensor cores (f16, bf16 up to d = 128): the block's own tile of
   * 64 rows, a warp per 16, the other side's tiles bn rows; tiles in
   * dt, rows ld = dp + a chunk apart; scores in base-2 units (exp2) */
  bool tc;
  KTcKind kind;
  int64_t bn;           /* the other side's tile rows in the kernel being built */
  int64_t qtile, ktile; /* rows of its query and key tiles */
  KExpr *lane, *warp;
  RtRef stats;   /* per query row (b, h, i): D, f32 */
  KBuf *mask, *lse, *st;
  KExpr *tid, *row, *part, *bz;
} Bwd;

static KBuf *operand(Bwd *W, const Value *v, const char *name) {
  return cg_kglobal(W->k, name, v->type.dtype, ir_type_numel(&v->type), cg_ref(W->b, v));
}

/* Row 0 of head h of batch row bz in a q-like (heads H, rows Sq) or
 * k-like (Hkv, Sk) tensor. */
static KExpr *head_base(Bwd *W, KBlock *blk, KExpr *h, int64_t heads, int64_t len) {
  Kernel *k = W->k;
  if (W->bshd) return ilet(k, blk, "hb", cg_kmul(k, kmad(k, W->bz, len * heads, h), ki(k, W->d)));
  return ilet(k, blk, "hb", cg_kmul(k, kmad(k, W->bz, heads, h), ki(k, len * W->d)));
}

/* Rows row0 .. row0 + tile of a head (row 0 at base, rows rstride apart,
 * S of them) into shared f32 dst, dp columns (those past d and the rows
 * past S zero). */
static void load_tile(Bwd *W, KBlock *blk, KBuf *src, KExpr *base, int64_t rstride, KExpr *row0, int64_t S,
                      KBuf *dst) {
  Kernel *k = W->k;
  int64_t total = W->tile * W->dp;
  KExpr *it;
  KBlock *lb = kloop(k, blk, "l", ki(k, cg_cdiv(total, W->threads)), KM_SERIAL, &it);
  KExpr *e = ilet(k, lb, "e", kmad(k, it, W->threads, W->tid));
  if (total % W->threads) lb = &cg_kif(k, lb, klt(k, e, ki(k, total)))->body;
  KExpr *r = ilet(k, lb, "r", kdiv(k, e, W->dp)), *c = ilet(k, lb, "c", kmod(k, e, W->dp));
  KExpr *grow = ilet(k, lb, "gr", cg_kadd(k, row0, r));
  KExpr *ok = cg_kand(k, S % W->tile || !S ? klt(k, grow, ki(k, S)) : NULL,
                      W->dp != W->d ? klt(k, c, ki(k, W->d)) : NULL);
  KExpr *x = cg_kcast(k, cg_kload(k, src, cg_kadd(k, base, kmad(k, grow, rstride, c))), TY_F32);
  cg_kstore(k, lb, dst, kmad(k, r, W->ld, c), ok ? cg_ksel(k, ok, x, kf32(k, 0)) : x);
}

/* The dot product of row a of shared A and row b of shared B over dp. */
static KExpr *dot(Bwd *W, KBlock *blk, KBuf *A, KExpr *a, KBuf *B, KExpr *b) {
  Kernel *k = W->k;
  KVar *acc = cg_kvar(k, "dot", TY_F32), *iv = cg_kvar(k, "i", KT_INDEX);
  KStmt *red = cg_kreduce(k, blk, acc, kf32(k, 0), OP_ADD, iv, ki(k, W->dp));
  KExpr *i = kv(k, iv);
  red->value = cg_kop2(k, OP_MUL, cg_kload(k, A, kmad(k, a, W->ld, i)), cg_kload(k, B, kmad(k, b, W->ld, i)));
  return kv(k, acc);
}

/* The score of query qi (of head h) and key from their dot product x
 * (in base-2 units on this kernel's tensor-core path, base e on FMA),
 * -inf past either bound. */
static KExpr *score(Bwd *W, KBlock *blk, KExpr *x, KExpr *h, KExpr *qi, KExpr *key) {
  Kernel *k = W->k;
  AttnScore sc = {W->mask, {W->ms[0], W->ms[1], W->ms[2], W->ms[3]}, W->Sq, W->Sk, W->scale, W->tc ? M_LOG2E : 1,
                  W->causal};
  KExpr *keep = cg_kand(k, W->Sk % W->ktile ? klt(k, key, ki(k, W->Sk)) : NULL,
                        W->Sq % W->qtile ? klt(k, qi, ki(k, W->Sq)) : NULL);
  return cg_attn_score(k, blk, &sc, x, W->bz, h, qi, key, keep);
}

/* The node's tensors as kernel k's buffers (the dq kernel's or the dk/dv
 * kernel's), and W's mask, lse and the scratch of D. */
typedef struct Bufs {
  KBuf *q, *k, *v, *o, *dy, *dq, *dk, *dv;
} Bufs;

static Bufs bind(Bwd *W, bool dq) {
  const Node *n = W->n;
  int64_t rows = W->B * W->H * W->Sq;
  Bufs f = {operand(W, n->in[0], "q"), operand(W, n->in[1], "k"), operand(W, n->in[2], "v"), NULL,
            operand(W, n->in[4], "dy"), NULL, NULL, NULL};
  if (dq) {
    f.o = operand(W, n->in[3], "out");
    f.dq = operand(W, &n->out[0], "dq");
  } else {
    f.dk = operand(W, &n->out[1], "dk");
    f.dv = operand(W, &n->out[2], "dv");
  }
  W->mask = n->n_in > 6 ? operand(W, n->in[6], "mask") : NULL;
  W->lse = operand(W, n->in[5], "lse");
  W->st = cg_kglobal(W->k, "dsum", TY_F32, rows ? rows : 1, W->stats);
  return f;
}

/* A kernel over (tiles, heads, batch) blocks of `threads`, with the
 * thread's row of the block's tile and its part of the row. */
static KBlock *new_kernel(Bwd *W, const char *hint, const char *what, int64_t tiles, int64_t heads, KExpr **tx,
                          KExpr **hy) {
  Ctx *c = cg_build_ctx(W->b);
  const char *how = W->tc ? arena_printf(&c->arena, "mma %s, 64x%" PRId64 " tiles", cg_tc_name(W->kind), W->bn)
                          : arena_printf(&c->arena, "fma f32, %" PRId64 "-row tiles", W->tile);
  Kernel *k = W->k = cg_kernel_new(c, W->n, hint, arena_printf(&c->arena, "%s, %s, d %" PRId64, what, how, W->d));
  KExpr *t;
  KBlock *body = kloop(k, &k->body, "tx", ki(k, tiles), KM_GRID_X, tx);
  body = kloop(k, body, "hy", ki(k, heads), KM_GRID_Y, hy);
  body = kloop(k, body, "bz", ki(k, W->B), KM_GRID_Z, &W->bz);
  body = kloop(k, body, "t", ki(k, W->threads), KM_BLOCK_X, &t);
  W->tid = t;
  if (W->tc) {
    W->lane = ilet(k, body, "lane", kmod(k, t, 32));
    W->warp = ilet(k, body, "warp", kdiv(k, t, 32));
  } else {
    W->row = ilet(k, body, "rw", kmod(k, t, W->tile));
    W->part = ilet(k, body, "pt", kdiv(k, t, W->tile));
  }
  k->grid[0] = (uint32_t)(tiles < INT32_MAX ? tiles : INT32_MAX);
  k->grid[1] = (uint32_t)(heads < 65535 ? heads : 65535);
  k->grid[2] = (uint32_t)(W->B < 65535 ? W->B : 65535);
  k->block[0] = (uint32_t)W->threads;
  return body;
}

/* numel of dt of the launch's shared memory from byte offset *off,
 * which moves past them. */
static KBuf *shared(Bwd *W, const char *stem, DType dt, int64_t numel, uint32_t *off) {
  KBuf *s = cg_kdynshared(W->k, stem, dt, numel, *off);
  *off += (uint32_t)((numel * ir_dtype_size(dt) + 15) / 16 * 16);
  return s;
}

/* acc[0 .. cols) += x(r) * src[r][u0 + u] over the tile's rows r of src
 * (x loaded from xs's row `mine`, column r). */
static void accumulate(Bwd *W, KBlock *blk, KBuf *acc, KBuf *xs, KExpr *mine, KBuf *src, KExpr *u0) {
  Kernel *k = W->k;
  KExpr *r, *u;
  KBlock *rb = kloop(k, blk, "r", ki(k, W->tile), KM_SERIAL, &r);
  KExpr *x = kv(k, cg_klet(k, rb, "x", TY_F32, cg_kload(k, xs, kmad(k, mine, W->sld, r))));
  KBlock *ub = kloop(k, rb, "u", ki(k, W->cols), KM_UNROLL, &u);
  KExpr *y = cg_kop2(k, OP_MUL, x, cg_kload(k, src, kmad(k, r, W->ld, cg_kadd(k, u0, u))));
  cg_kstore(k, ub, acc, u, cg_kop2(k, OP_ADD, cg_kload(k, acc, u), y));
}

/* acc's columns, times w, to row `row` (of S) of dst's head at base. */
static void store_rows(Bwd *W, KBlock *blk, KBuf *acc, double w, KBuf *dst, KExpr *base, int64_t rstride,
                       KExpr *row, int64_t S, KExpr *u0) {
  Kernel *k = W->k;
  KExpr *u;
  if (S % W->tile) blk = &cg_kif(k, blk, klt(k, row, ki(k, S)))->body;
  KBlock *ub = kloop(k, blk, "u", ki(k, W->cols), KM_UNROLL, &u);
  KExpr *col = ilet(k, ub, "col", cg_kadd(k, u0, u));
  if (W->dp != W->d) ub = &cg_kif(k, ub, klt(k, col, ki(k, W->d)))->body;
  KExpr *y = w == 1 ? cg_kload(k, acc, u) : cg_kop2(k, OP_MUL, cg_kload(k, acc, u), kf32(k, (float)w));
  cg_kstore(k, ub, dst, cg_kadd(k, base, kmad(k, row, rstride, col)), cg_kcast(k, y, dst->dtype));
}


/* D = rowsum(dy * out) for the tile's `rows` rows (q0 the first) into
 * shared ds: each warp a share of the rows, its lanes over a row's
 * columns (out read coalesced from memory, dy from the shared tile dos,
 * rows ld apart), the lanes' parts summed by shuffles. */
static void row_dots(Bwd *W, KBlock *blk, KBuf *dos, KBuf *o, KExpr *qbase, KExpr *q0, int64_t rows, KBuf *ds) {
  Kernel *k = W->k;
  int64_t warps = W->threads / 32, per = cg_cdiv(rows, warps);
  KExpr *lane = ilet(k, blk, "dl", kmod(k, W->tid, 32)), *warp = ilet(k, blk, "dw", kdiv(k, W->tid, 32));
  KExpr *i, *c;
  KBlock *rb = kloop(k, blk, "dr", ki(k, per), KM_SERIAL, &i);
  KExpr *r = ilet(k, rb, "r", kmad(k, warp, per, i));
  KExpr *qi = ilet(k, rb, "qi", cg_kadd(k, q0, r));
  KVar *acc = cg_klet(k, rb, "D", TY_F32, kf32(k, 0));
  KBlock *cb = kloop(k, rb, "dc", ki(k, cg_cdiv(W->d, 32)), KM_SERIAL, &c);
  KExpr *col = ilet(k, cb, "col", kmad(k, c, 32, lane));
  KExpr *ok = cg_kand(k, cg_kand(k, W->d % 32 ? klt(k, col, ki(k, W->d)) : NULL, rows % warps ? klt(k, r, ki(k, rows)) : NULL),
                      W->Sq % rows ? klt(k, qi, ki(k, W->Sq)) : NULL);
  KExpr *ov = cg_kcast(k, cg_kload(k, o, cg_kadd(k, qbase, kmad(k, qi, W->rsq, col))), TY_F32);
  KExpr *x = cg_kop2(k, OP_MUL, cg_kcast(k, cg_kload(k, dos, kmad(k, r, W->ld, col)), TY_F32), ov);
  cg_kset(k, cb, acc, cg_kop2(k, OP_ADD, kv(k, acc), ok ? cg_ksel(k, ok, x, kf32(k, 0)) : x));
  KExpr *sum = kv(k, acc);
  for (int sh = 16; sh >= 1; sh /= 2) {
    KExpr *y = kv(k, cg_klet(k, rb, "sh", TY_F32, cg_kshfl_xor(k, sum, sh, 32)));
    sum = kv(k, cg_klet(k, rb, "ds", TY_F32, cg_kop2(k, OP_ADD, sum, y)));
  }
  KExpr *w = cg_kand(k, cg_kcmp(k, KC_EQ, lane, ki(k, 0)), rows % warps ? klt(k, r, ki(k, rows)) : NULL);
  cg_kstore(k, &cg_kif(k, rb, w)->body, ds, r, sum);
}

/* acc[0 .. n) = 0 (registers) */
static void zero_regs(Kernel *k, KBlock *blk, KBuf *acc, int64_t n) {
  KExpr *z;
  KBlock *zb = kloop(k, blk, "z", ki(k, n), KM_UNROLL, &z);
  cg_kstore(k, zb, acc, z, kf32(k, 0));
}

/* ---- dq, and each query row's D ---- */

static void dq_kernel(Bwd *W) {
  W->qtile = W->ktile = W->tile;
  int64_t qt = cg_cdiv(W->Sq, W->tile), kt = cg_cdiv(W->Sk, W->tile);
  KExpr *qx, *hy;
  KBlock *body = new_kernel(W, "attention_grad_dq", "attention backward dq", qt, W->H, &qx, &hy);
  Kernel *k = W->k;
  Bufs f = bind(W, true);
  KBuf *q = f.q, *kb = f.k, *vb = f.v, *o = f.o, *dy = f.dy, *dq = f.dq;
  uint32_t off = 0;
  KBuf *qs = shared(W, "Qs", TY_F32, W->tile * W->ld, &off), *dos = shared(W, "dOs", TY_F32, W->tile * W->ld, &off);
  KBuf *ks = shared(W, "Ks", TY_F32, W->tile * W->ld, &off), *vs = shared(W, "Vs", TY_F32, W->tile * W->ld, &off);
  KBuf *ss = shared(W, "Ss", TY_F32, W->tile * W->sld, &off);
  KBuf *ls = shared(W, "Ls", TY_F32, W->tile, &off), *ds = shared(W, "Ds", TY_F32, W->tile, &off);

  KExpr *q0 = ilet(k, body, "q0", cg_kmul(k, qx, ki(k, W->tile)));
  KExpr *qbase = head_base(W, body, hy, W->H, W->Sq);
  KExpr *kvbase = head_base(W, body, kdiv(k, hy, W->G), W->Hkv, W->Sk);
  KExpr *r = W->row, *qi = ilet(k, body, "qi", cg_kadd(k, q0, r));
  load_tile(W, body, q, qbase, W->rsq, q0, W->Sq, qs);
  load_tile(W, body, dy, qbase, W->rsq, q0, W->Sq, dos);
  cg_kbarrier(k, body);
  row_dots(W, body, dos, o, qbase, q0, W->tile, ds);
  cg_kbarrier(k, body);
  KBlock *own = &cg_kif(k, body, klt(k, W->tid, ki(k, W->tile)))->body; /* the row's first thread */

  /* each row's lse from the forward (+inf past Sq: no P), D to the
   * scratch for the dk/dv kernel */
  KExpr *row = ilet(k, own, "row", kmad(k, kmad(k, W->bz, W->H, hy), W->Sq, qi));
  KExpr *in = W->Sq % W->tile ? klt(k, qi, ki(k, W->Sq)) : NULL;
  KExpr *lv = cg_kload(k, W->lse, row);
  cg_kstore(k, own, ls, r, in ? cg_ksel(k, in, lv, kf32(k, INFINITY)) : lv);
  cg_kstore(k, in ? &cg_kif(k, own, in)->body : own, W->st, row, cg_kload(k, ds, r));
  KExpr *ntile = ki(k, kt);
  if (W->causal) /* the key tiles up to the block's last query row */
    ntile = ilet(k, body, "nt", cg_kidx(k, KI_MIN, cg_kadd(k, kdiv(k, cg_kadd(k, q0, ki(k, W->tile - 1)), W->tile), ki(k, 1)),
                                        ki(k, kt)));
  int64_t per = W->tile / W->tpr; /* keys a thread scores per tile */
  KExpr *c0 = ilet(k, body, "c0", cg_kmul(k, W->part, ki(k, per)));

  /* the walk: dS per tile, dq += dS K */
  KBuf *acc = cg_klocal(k, "dq", TY_F32, W->cols, KSP_REGISTER);
  zero_regs(k, body, acc, W->cols);
  KExpr *u0 = ilet(k, body, "u0", cg_kmul(k, W->part, ki(k, W->cols)));
  KExpr *j, *c;
  KBlock *pb = kloop(k, body, "j", ntile, KM_SERIAL, &j);
  KExpr *k0 = ilet(k, pb, "k0", cg_kmul(k, j, ki(k, W->tile)));
  cg_kbarrier(k, pb);
  load_tile(W, pb, kb, kvbase, W->rskv, k0, W->Sk, ks);
  load_tile(W, pb, vb, kvbase, W->rskv, k0, W->Sk, vs);
  cg_kbarrier(k, pb);
  KExpr *lrow = kv(k, cg_klet(k, pb, "lrow", TY_F32, cg_kload(k, ls, r)));
  KExpr *drow = kv(k, cg_klet(k, pb, "drow", TY_F32, cg_kload(k, ds, r)));
  KBlock *cb = kloop(k, pb, "c", ki(k, per), KM_SERIAL, &c);
  KExpr *key = ilet(k, cb, "kc", cg_kadd(k, c0, c));
  KExpr *s = score(W, cb, dot(W, cb, qs, r, ks, key), hy, qi, cg_kadd(k, k0, key));
  KExpr *p = kv(k, cg_klet(k, cb, "p", TY_F32, cg_kop1(k, OP_EXP, cg_kop2(k, OP_SUB, s, lrow))));
  KExpr *dpv = dot(W, cb, dos, r, vs, key);
  cg_kstore(k, cb, ss, kmad(k, r, W->sld, key), cg_kop2(k, OP_MUL, p, cg_kop2(k, OP_SUB, dpv, drow)));
  cg_kbarrier(k, pb);
  accumulate(W, pb, acc, ss, r, ks, u0);
  store_rows(W, body, acc, W->scale, dq, qbase, W->rsq, qi, W->Sq, u0);
  cg_launch(W->b, k);
}

/* ---- dk and dv ---- */

static void dkdv_kernel(Bwd *W) {
  W->qtile = W->ktile = W->tile;
  int64_t qt = cg_cdiv(W->Sq, W->tile), kt = cg_cdiv(W->Sk, W->tile);
  KExpr *kx, *hy;
  KBlock *body = new_kernel(W, "attention_grad_dkdv", "attention backward dk dv", kt, W->Hkv, &kx, &hy);
  Kernel *k = W->k;
  Bufs f = bind(W, false);
  KBuf *q = f.q, *kb = f.k, *vb = f.v, *dy = f.dy, *dk = f.dk, *dv = f.dv;
  uint32_t off = 0;
  KBuf *ks = shared(W, "Ks", TY_F32, W->tile * W->ld, &off), *vs = shared(W, "Vs", TY_F32, W->tile * W->ld, &off);
  KBuf *qs = shared(W, "Qs", TY_F32, W->tile * W->ld, &off), *dos = shared(W, "dOs", TY_F32, W->tile * W->ld, &off);
  KBuf *ps = shared(W, "Ps", TY_F32, W->tile * W->sld, &off), *dss = shared(W, "dSs", TY_F32, W->tile * W->sld, &off);
  KBuf *ls = shared(W, "Ls", TY_F32, W->tile, &off), *ds = shared(W, "Ds", TY_F32, W->tile, &off);

  KExpr *k0 = ilet(k, body, "k0", cg_kmul(k, kx, ki(k, W->tile)));
  KExpr *kvbase = head_base(W, body, hy, W->Hkv, W->Sk);
  KExpr *c = W->row, *key = ilet(k, body, "key", cg_kadd(k, k0, c));
  load_tile(W, body, kb, kvbase, W->rskv, k0, W->Sk, ks);
  load_tile(W, body, vb, kvbase, W->rskv, k0, W->Sk, vs);
  KBuf *dka = cg_klocal(k, "dka", TY_F32, W->cols, KSP_REGISTER), *dva = cg_klocal(k, "dva", TY_F32, W->cols, KSP_REGISTER);
  zero_regs(k, body, dka, W->cols);
  zero_regs(k, body, dva, W->cols);
  int64_t per = W->tile / W->tpr; /* queries a thread scores per tile */
  KExpr *r0 = ilet(k, body, "r0", cg_kmul(k, W->part, ki(k, per)));
  KExpr *u0 = ilet(k, body, "u0", cg_kmul(k, W->part, ki(k, W->cols)));
  /* under causal, queries from the block's first key on: tiles are square */
  KExpr *i0 = W->causal ? kx : ki(k, 0);
  KExpr *g, *ii, *r;
  KBlock *gb = kloop(k, body, "g", ki(k, W->G), KM_SERIAL, &g);
  KExpr *h = ilet(k, gb, "h", kmad(k, hy, W->G, g));
  KExpr *qbase = head_base(W, gb, h, W->H, W->Sq);
  KBlock *ib = kloop(k, gb, "ii", W->causal ? ilet(k, gb, "ni", cg_kidx(k, KI_MAX, cg_kidx(k, KI_SUB, ki(k, qt), i0), ki(k, 0))) : ki(k, qt),
                     KM_SERIAL, &ii);
  KExpr *q0 = ilet(k, ib, "q0", cg_kmul(k, cg_kadd(k, i0, ii), ki(k, W->tile)));
  cg_kbarrier(k, ib);
  load_tile(W, ib, q, qbase, W->rsq, q0, W->Sq, qs);
  load_tile(W, ib, dy, qbase, W->rsq, q0, W->Sq, dos);
  {
    /* each query row's lse and D (a row past Sq: lse +inf, so P is 0) */
    KBlock *sb = &cg_kif(k, ib, klt(k, W->tid, ki(k, W->tile)))->body;
    KExpr *qr = ilet(k, sb, "qr", cg_kadd(k, q0, W->tid));
    KExpr *in = klt(k, qr, ki(k, W->Sq));
    KExpr *at = ilet(k, sb, "sa", kmad(k, kmad(k, W->bz, W->H, h), W->Sq, qr));
    cg_kstore(k, sb, ls, W->tid, cg_ksel(k, in, cg_kload(k, W->lse, at), kf32(k, INFINITY)));
    cg_kstore(k, sb, ds, W->tid, cg_ksel(k, in, cg_kload(k, W->st, at), kf32(k, 0)));
  }
  cg_kbarrier(k, ib);
  KBlock *rb = kloop(k, ib, "r", ki(k, per), KM_SERIAL, &r);
  KExpr *qrow = ilet(k, rb, "qrow", cg_kadd(k, r0, r));
  KExpr *s = score(W, rb, dot(W, rb, qs, qrow, ks, c), h, cg_kadd(k, q0, qrow), key);
  KExpr *p = kv(k, cg_klet(k, rb, "p", TY_F32, cg_kop1(k, OP_EXP, cg_kop2(k, OP_SUB, s, cg_kload(k, ls, qrow)))));
  KExpr *dpv = dot(W, rb, dos, qrow, vs, c);
  KExpr *at = ilet(k, rb, "pa", kmad(k, c, W->sld, qrow));
  cg_kstore(k, rb, ps, at, p);
  cg_kstore(k, rb, dss, at, cg_kop2(k, OP_MUL, p, cg_kop2(k, OP_SUB, dpv, cg_kload(k, ds, qrow))));
  cg_kbarrier(k, ib);
  accumulate(W, ib, dva, ps, c, dos, u0);
  accumulate(W, ib, dka, dss, c, qs, u0);
  store_rows(W, body, dka, W->scale, dk, kvbase, W->rskv, key, W->Sk, u0);
  store_rows(W, body, dva, 1, dv, kvbase, W->rskv, key, W->Sk, u0);
  cg_launch(W->b, k);
}

/* ---- the tensor cores ---- */

static AttnTiles tiles_of(Bwd *W) {
  return (AttnTiles){W->k, W->dt, W->d, W->dp, W->ld, W->threads, (int)(16 / ir_dtype_size(W->dt)), W->tid};
}

/* rows of a head into shared dst (in dt) from element dst0 (a stage) */
static void load_tc(Bwd *W, KBlock *blk, KBuf *src, KExpr *base, int64_t rstride, KExpr *row0, int64_t rows,
                    int64_t S, KBuf *dst, KExpr *dst0) {
  AttnTiles t = tiles_of(W);
  cg_attn_load(&t, blk, src, base, rstride, row0, rows, S, dst, dst0);
}

/* The walks' two stages: the next tile's loads are issued (into the
 * other stage) right after the barrier that ends every read of it, and
 * committed; at the top of the next iteration they are waited for. */
static void commit(Bwd *W, KBlock *blk) {
  AttnTiles t = tiles_of(W);
  if (cg_attn_async(&t)) cg_kcp_commit(W->k, blk);
}

static void landed(Bwd *W, KBlock *blk) {
  AttnTiles t = tiles_of(W);
  if (cg_attn_async(&t)) cg_kcp_wait(W->k, blk, 0);
  cg_kbarrier(W->k, blk);
}

/* the loads issued so far landed, for every thread */
static void loads_done(Bwd *W, KBlock *blk) {
  commit(W, blk);
  landed(W, blk);
}

/* The m16n8 accumulators of a warp's 16 rows (the first row0): lane
 * (g, t) holds rows row0 + g (h 0) and row0 + g + 8 (h 1); of block c /
 * 2 of 8 columns, columns 2t and 2t + 1 (c % 2), at slot 4 (c / 2) +
 * 2h + c % 2.  rows_of is the loop over h (its body), cols_of the loop
 * over c within it. */
static KBlock *rows_of(Bwd *W, KBlock *blk, KExpr *row0, KExpr **h, KExpr **row) {
  Kernel *k = W->k;
  KBlock *hb = kloop(k, blk, "h", ki(k, 2), KM_UNROLL, h);
  *row = ilet(k, hb, "ar", cg_kadd(k, row0, kmad(k, *h, 8, kdiv(k, W->lane, 4))));
  return hb;
}

static KBlock *cols_of(Bwd *W, KBlock *hb, KExpr *h, int64_t nb, KExpr **slot, KExpr **col) {
  Kernel *k = W->k;
  KExpr *c;
  KBlock *cb = kloop(k, hb, "c", ki(k, nb * 2), KM_UNROLL, &c);
  *slot = ilet(k, cb, "sl", kmad(k, kdiv(k, c, 2), 4, kmad(k, h, 2, kmod(k, c, 2))));
  *col = ilet(k, cb, "ac", kmad(k, kdiv(k, c, 2), 8, kmad(k, kmod(k, W->lane, 4), 2, kmod(k, c, 2))));
  return cb;
}

/* acc (dp / 8 blocks, the warp's rows from row0, S of them) times w to
 * dst's head at base */
static void store_acc(Bwd *W, KBlock *blk, KBuf *acc, double w, KBuf *dst, KExpr *base, int64_t rstride, KExpr *row0,
                      int64_t S) {
  Kernel *k = W->k;
  KExpr *h, *row, *slot, *col;
  KBlock *hb = rows_of(W, blk, row0, &h, &row);
  KBlock *cb = cols_of(W, hb, h, W->dp / 8, &slot, &col);
  KExpr *ok = cg_kand(k, klt(k, row, ki(k, S)), W->dp != W->d ? klt(k, col, ki(k, W->d)) : NULL);
  KBlock *at = &cg_kif(k, cb, ok)->body;
  KExpr *y = cg_kload(k, acc, slot);
  if (w != 1) y = cg_kop2(k, OP_MUL, y, kf32(k, (float)w));
  cg_kstore(k, at, dst, cg_kadd(k, base, kmad(k, row, rstride, col)), cg_kcast(k, y, dst->dtype));
}


/* dq on the tensor cores: warp w owns query rows q0 + 16w .. + 15. */
static void dq_kernel_tc(Bwd *W) {
  /* tf32 at d = 64 with 64-key tiles spills (255 registers: P B's
   * scalar B loads, unrolled over the tile, all in flight) */
  W->bn = W->dp <= 64 && W->kind != KTC_TF32 ? 64 : 32;
  W->qtile = BM, W->ktile = W->bn;
  int64_t qt = cg_cdiv(W->Sq, BM), kt = cg_cdiv(W->Sk, W->bn), nb = W->bn / 8;
  KExpr *qx, *hy;
  KBlock *body = new_kernel(W, "attention_grad_dq", "attention backward dq", qt, W->H, &qx, &hy);
  Kernel *k = W->k;
  Bufs f = bind(W, true);
  KBuf *q = f.q, *kb = f.k, *vb = f.v, *o = f.o, *dy = f.dy, *dq = f.dq;
  uint32_t off = 0;
  KBuf *qs = shared(W, "Qs", W->dt, BM * W->ld, &off), *dos = shared(W, "dOs", W->dt, BM * W->ld, &off);
  /* K and V in two stages */
  KBuf *ks = shared(W, "Ks", W->dt, 2 * W->bn * W->ld, &off), *vs = shared(W, "Vs", W->dt, 2 * W->bn * W->ld, &off);
  KBuf *ds = shared(W, "Ds", TY_F32, BM, &off);

  KExpr *q0 = ilet(k, body, "q0", cg_kmul(k, qx, ki(k, BM)));
  KExpr *qbase = head_base(W, body, hy, W->H, W->Sq);
  KExpr *kvbase = head_base(W, body, kdiv(k, hy, W->G), W->Hkv, W->Sk);
  KExpr *wrow = ilet(k, body, "wr", kmad(k, W->warp, 16, q0)); /* the warp's first query row */
  KExpr *a0 = ilet(k, body, "a0", cg_kmul(k, W->warp, ki(k, 16 * W->ld)));
  load_tc(W, body, q, qbase, W->rsq, q0, BM, W->Sq, qs, ki(k, 0));
  load_tc(W, body, dy, qbase, W->rsq, q0, BM, W->Sq, dos, ki(k, 0));
  loads_done(W, body);
  row_dots(W, body, dos, o, qbase, q0, BM, ds);
  cg_kbarrier(k, body);
  KExpr *ntile = ki(k, kt);
  if (W->causal) /* the key tiles up to the block's last query row */
    ntile = ilet(k, body, "nt", cg_kidx(k, KI_MIN, cg_kadd(k, kdiv(k, cg_kadd(k, q0, ki(k, BM - 1)), W->bn), ki(k, 1)),
                                        ki(k, kt)));
  KBuf *sacc = cg_klocal(k, "sacc", TY_F32, nb * 4, KSP_REGISTER);

  /* the lane's two rows' lse from the forward, in base-2 units (+inf
   * past Sq: no P); D to the scratch for the dk/dv kernel */
  KExpr *j, *h, *row, *slot, *col;
  KBuf *lse = cg_klocal(k, "lse", TY_F32, 2, KSP_REGISTER);
  KBlock *hb = rows_of(W, body, wrow, &h, &row);
  KExpr *in = klt(k, row, ki(k, W->Sq));
  KExpr *at = ilet(k, hb, "sa", kmad(k, kmad(k, W->bz, W->H, hy), W->Sq, row));
  KExpr *l2 = cg_kop2(k, OP_MUL, cg_kload(k, W->lse, at), kf32(k, (float)M_LOG2E));
  cg_kstore(k, hb, lse, h, cg_ksel(k, in, l2, kf32(k, INFINITY)));
  KBlock *wb = &cg_kif(k, hb, cg_kand(k, cg_kcmp(k, KC_EQ, kmod(k, W->lane, 4), ki(k, 0)), in))->body;
  cg_kstore(k, wb, W->st, at, cg_kload(k, ds, cg_kidx(k, KI_SUB, row, q0)));

  /* the walk: S, dP = dy V^T, dS = P (dP - D) in the accumulators,
   * dq += dS K; tile j + 1 of K and V on its way while tile j is
   * computed */
  KBuf *dpacc = cg_klocal(k, "dpacc", TY_F32, nb * 4, KSP_REGISTER);
  KBuf *dqacc = cg_klocal(k, "dqacc", TY_F32, W->dp / 8 * 4, KSP_REGISTER);
  zero_regs(k, body, dqacc, W->dp / 8 * 4);
  int64_t stage = W->bn * W->ld;
  load_tc(W, body, kb, kvbase, W->rskv, ki(k, 0), W->bn, W->Sk, ks, ki(k, 0));
  load_tc(W, body, vb, kvbase, W->rskv, ki(k, 0), W->bn, W->Sk, vs, ki(k, 0));
  commit(W, body);
  KBlock *lb = kloop(k, body, "j", ntile, KM_SERIAL, &j);
  KExpr *k0 = ilet(k, lb, "k0", cg_kmul(k, j, ki(k, W->bn)));
  landed(W, lb);
  KExpr *nj = ilet(k, lb, "jn", cg_kadd(k, j, ki(k, 1)));
  KBlock *pre = &cg_kif(k, lb, klt(k, nj, ntile))->body;
  KExpr *nst = ilet(k, pre, "ns", cg_kmul(k, kmod(k, nj, 2), ki(k, stage)));
  KExpr *nk0 = ilet(k, pre, "nk", cg_kmul(k, nj, ki(k, W->bn)));
  load_tc(W, pre, kb, kvbase, W->rskv, nk0, W->bn, W->Sk, ks, nst);
  load_tc(W, pre, vb, kvbase, W->rskv, nk0, W->bn, W->Sk, vs, nst);
  commit(W, lb);
  KExpr *st = ilet(k, lb, "st", cg_kmul(k, kmod(k, j, 2), ki(k, stage)));
  cg_attn_mma_abt(k, lb, W->kind, W->lane, sacc, nb, qs, a0, W->ld, ks, st, W->ld, W->dp);
  cg_attn_mma_abt(k, lb, W->kind, W->lane, dpacc, nb, dos, a0, W->ld, vs, st, W->ld, W->dp);
  hb = rows_of(W, lb, wrow, &h, &row);
  KExpr *lh = kv(k, cg_klet(k, hb, "lh", TY_F32, cg_kload(k, lse, h)));
  KExpr *dh = kv(k, cg_klet(k, hb, "dh", TY_F32, cg_kload(k, ds, cg_kidx(k, KI_SUB, row, q0))));
  KBlock *cb = cols_of(W, hb, h, nb, &slot, &col);
  KExpr *sv = score(W, cb, cg_kload(k, sacc, slot), hy, row, cg_kadd(k, k0, col));
  KExpr *p = kv(k, cg_klet(k, cb, "p", TY_F32, cg_kexp2(k, cg_kop2(k, OP_SUB, sv, lh))));
  cg_kstore(k, cb, sacc, slot, cg_kop2(k, OP_MUL, p, cg_kop2(k, OP_SUB, cg_kload(k, dpacc, slot), dh)));
  cg_attn_mma_pb(k, lb, W->kind, W->lane, dqacc, W->dp, sacc, W->bn, ks, st, W->ld);
  store_acc(W, body, dqacc, W->scale, dq, qbase, W->rsq, wrow, W->Sq);
  cg_launch(W->b, k);
}

/* Tile t of the dk/dv kernel's walk (query head hy G + t / ni, query
 * rows from (i0 + t % ni) bn) into stage sq: its q and dy rows, and each
 * row's lse (in base-2 units) and D (a row past Sq: lse +inf, so P is
 * 0).  ni is not 0 where t is (callers see to it, t 0 aside). */
static void walk_tile(Bwd *W, KBlock *blk, const Bufs *f, KExpr *hy, KExpr *t, KExpr *ni, KExpr *i0, KExpr *sq,
                      KBuf *qs, KBuf *dos, KBuf *ls, KBuf *ds) {
  Kernel *k = W->k;
  bool first = t->kind == KE_INT && t->i == 0;
  KExpr *qh = first ? ilet(k, blk, "wh", cg_kmul(k, hy, ki(k, W->G)))
                    : ilet(k, blk, "wh", kmad(k, hy, W->G, cg_kidx(k, KI_DIV, t, ni)));
  KExpr *q0 = first ? ilet(k, blk, "wq", cg_kmul(k, i0, ki(k, W->bn)))
                    : ilet(k, blk, "wq", cg_kmul(k, cg_kadd(k, i0, cg_kidx(k, KI_MOD, t, ni)), ki(k, W->bn)));
  KExpr *qbase = head_base(W, blk, qh, W->H, W->Sq);
  KExpr *st = ilet(k, blk, "ws", cg_kmul(k, sq, ki(k, W->bn * W->ld)));
  load_tc(W, blk, f->q, qbase, W->rsq, q0, W->bn, W->Sq, qs, st);
  load_tc(W, blk, f->dy, qbase, W->rsq, q0, W->bn, W->Sq, dos, st);
  KBlock *sb = &cg_kif(k, blk, klt(k, W->tid, ki(k, W->bn)))->body;
  KExpr *qr = ilet(k, sb, "qr", cg_kadd(k, q0, W->tid));
  KExpr *in = klt(k, qr, ki(k, W->Sq));
  KExpr *at = ilet(k, sb, "sa", kmad(k, kmad(k, W->bz, W->H, qh), W->Sq, qr));
  KExpr *l2 = cg_kop2(k, OP_MUL, cg_kload(k, W->lse, at), kf32(k, (float)M_LOG2E));
  KExpr *r = ilet(k, sb, "wr", kmad(k, sq, W->bn, W->tid));
  cg_kstore(k, sb, ls, r, cg_ksel(k, in, l2, kf32(k, INFINITY)));
  cg_kstore(k, sb, ds, r, cg_ksel(k, in, cg_kload(k, W->st, at), kf32(k, 0)));
}

/* dk and dv on the tensor cores: warp w owns key rows k0 + 16w .. + 15;
 * the products transposed (S^T = K Q^T, dP^T = V dy^T), so that P^T and
 * dS^T are the A operands of dv += P^T dy and dk += dS^T q as they lie
 * in the accumulators. */
static void dkdv_kernel_tc(Bwd *W) {
  /* past d = 64, dk's and dv's accumulators are 128 registers a thread:
   * query tiles of 16 keep S^T and dP^T to 16 more */
  W->bn = W->dp <= 64 ? 64 : 16;
  W->qtile = W->bn, W->ktile = BM;
  int64_t qt = cg_cdiv(W->Sq, W->bn), kt = cg_cdiv(W->Sk, BM), nb = W->bn / 8;
  KExpr *kx, *hy;
  KBlock *body = new_kernel(W, "attention_grad_dkdv", "attention backward dk dv", kt, W->Hkv, &kx, &hy);
  Kernel *k = W->k;
  Bufs f = bind(W, false);
  KBuf *kb = f.k, *vb = f.v, *dk = f.dk, *dv = f.dv;
  uint32_t off = 0;
  KBuf *ks = shared(W, "Ks", W->dt, BM * W->ld, &off), *vs = shared(W, "Vs", W->dt, BM * W->ld, &off);
  /* the walked tiles in two stages each */
  KBuf *qs = shared(W, "Qs", W->dt, 2 * W->bn * W->ld, &off), *dos = shared(W, "dOs", W->dt, 2 * W->bn * W->ld, &off);
  KBuf *ls = shared(W, "Ls", TY_F32, 2 * W->bn, &off), *ds = shared(W, "Ds", TY_F32, 2 * W->bn, &off);

  KExpr *k0 = ilet(k, body, "k0", cg_kmul(k, kx, ki(k, BM)));
  KExpr *kvbase = head_base(W, body, hy, W->Hkv, W->Sk);
  KExpr *wrow = ilet(k, body, "wr", kmad(k, W->warp, 16, k0)); /* the warp's first key row */
  KExpr *a0 = ilet(k, body, "a0", cg_kmul(k, W->warp, ki(k, 16 * W->ld)));
  load_tc(W, body, kb, kvbase, W->rskv, k0, BM, W->Sk, ks, ki(k, 0));
  load_tc(W, body, vb, kvbase, W->rskv, k0, BM, W->Sk, vs, ki(k, 0));
  loads_done(W, body);
  KBuf *sacc = cg_klocal(k, "sacc", TY_F32, nb * 4, KSP_REGISTER);
  KBuf *dpacc = cg_klocal(k, "dpacc", TY_F32, nb * 4, KSP_REGISTER);
  KBuf *dka = cg_klocal(k, "dka", TY_F32, W->dp / 8 * 4, KSP_REGISTER);
  KBuf *dva = cg_klocal(k, "dva", TY_F32, W->dp / 8 * 4, KSP_REGISTER);
  zero_regs(k, body, dka, W->dp / 8 * 4);
  zero_regs(k, body, dva, W->dp / 8 * 4);
  /* the query tiles of every query head that reads this key/value head,
   * one walk of G x ni tiles (under causal, each head's from the one
   * holding query k0 on), tile t + 1 on its way while t is computed */
  KExpr *i0 = W->causal ? ilet(k, body, "i0", kdiv(k, k0, W->bn)) : ki(k, 0);
  KExpr *ni = W->causal ? ilet(k, body, "ni", cg_kidx(k, KI_MAX, cg_kidx(k, KI_SUB, ki(k, qt), i0), ki(k, 0))) : ki(k, qt);
  KExpr *total = ilet(k, body, "nt", cg_kmul(k, ni, ki(k, W->G)));
  int64_t stage = W->bn * W->ld;
  walk_tile(W, body, &f, hy, ki(k, 0), ni, i0, ki(k, 0), qs, dos, ls, ds);
  commit(W, body);
  KExpr *t, *h, *row, *slot, *col;
  KBlock *ib = kloop(k, body, "t", total, KM_SERIAL, &t);
  landed(W, ib);
  KExpr *nt = ilet(k, ib, "tn", cg_kadd(k, t, ki(k, 1)));
  KBlock *pre = &cg_kif(k, ib, klt(k, nt, total))->body;
  walk_tile(W, pre, &f, hy, nt, ni, i0, kmod(k, nt, 2), qs, dos, ls, ds);
  commit(W, ib);
  KExpr *qh = ilet(k, ib, "qh", kmad(k, hy, W->G, cg_kidx(k, KI_DIV, t, ni)));
  KExpr *q0 = ilet(k, ib, "q0", cg_kmul(k, cg_kadd(k, i0, cg_kidx(k, KI_MOD, t, ni)), ki(k, W->bn)));
  KExpr *sq = ilet(k, ib, "sq", kmod(k, t, 2));
  KExpr *st = ilet(k, ib, "st", cg_kmul(k, sq, ki(k, stage)));
  KExpr *sr = ilet(k, ib, "sr", cg_kmul(k, sq, ki(k, W->bn)));
  cg_attn_mma_abt(k, ib, W->kind, W->lane, sacc, nb, ks, a0, W->ld, qs, st, W->ld, W->dp);
  cg_attn_mma_abt(k, ib, W->kind, W->lane, dpacc, nb, vs, a0, W->ld, dos, st, W->ld, W->dp);
  KBlock *hb = rows_of(W, ib, wrow, &h, &row);
  KBlock *cb = cols_of(W, hb, h, nb, &slot, &col);
  KExpr *sv = score(W, cb, cg_kload(k, sacc, slot), qh, cg_kadd(k, q0, col), row);
  KExpr *sc = ilet(k, cb, "sc", cg_kadd(k, sr, col));
  KExpr *p = kv(k, cg_klet(k, cb, "p", TY_F32, cg_kexp2(k, cg_kop2(k, OP_SUB, sv, cg_kload(k, ls, sc)))));
  cg_kstore(k, cb, sacc, slot, p);
  cg_kstore(k, cb, dpacc, slot, cg_kop2(k, OP_MUL, p, cg_kop2(k, OP_SUB, cg_kload(k, dpacc, slot), cg_kload(k, ds, sc))));
  cg_attn_mma_pb(k, ib, W->kind, W->lane, dva, W->dp, sacc, W->bn, dos, st, W->ld);
  cg_attn_mma_pb(k, ib, W->kind, W->lane, dka, W->dp, dpacc, W->bn, qs, st, W->ld);
  store_acc(W, body, dka, W->scale, dk, kvbase, W->rskv, wrow, W->Sk);
  store_acc(W, body, dva, 1, dv, kvbase, W->rskv, wrow, W->Sk);
  cg_launch(W->b, k);
}

bool cg_lower_attention_grad(CgBuild *b, const Node *n) {
  Ctx *c = cg_build_ctx(b);
  const TensorType *qt = &n->in[0]->type, *kt = &n->in[1]->type;
  Bwd W0 = {.b = b, .n = n}, *W = &W0;
  W->bshd = strcmp(ir_attr_str(n, "layout"), "bshd") == 0;
  W->causal = ir_attr_int(n, "causal") != 0;
  int hx = W->bshd ? 2 : 1, sx = W->bshd ? 1 : 2;
  W->dt = qt->dtype;
  W->B = qt->dims[0], W->H = qt->dims[hx], W->Sq = qt->dims[sx], W->d = qt->dims[3];
  W->Hkv = kt->dims[hx], W->Sk = kt->dims[sx];
  if (W->dt != TY_F32 && W->dt != TY_F16 && W->dt != TY_BF16) {
    diag_error(c, n->loc, "codegen does not support attention_grad on %s yet", ir_dtype_name(W->dt));
    return false;
  }
  if (W->d > MAX_D) {
    diag_error(c, n->loc, "attention_grad: the fused kernels take head dims up to %d, got %" PRId64, MAX_D, W->d);
    return false;
  }
  if (!W->B || !W->H || !W->d) return true; /* every result empty */
  if (W->H > 65535 || W->B > 65535) { /* the grid's y and z */
    diag_error(c, n->loc, "attention_grad: at most 65535 heads and batch rows, got %" PRId64 " and %" PRId64, W->H,
               W->B);
    return false;
  }
  W->G = W->H / W->Hkv;
  W->rsq = W->bshd ? W->H * W->d : W->d;
  W->rskv = W->bshd ? W->Hkv * W->d : W->d;
  W->scale = ir_attr(n, "scale") ? ir_attr_float(n, "scale") : 1 / sqrt((double)W->d);
  W->dp = (W->d + 15) / 16 * 16;
  /* f32 on the tensor cores under --tf32, as the forward */
  W->tc = W->dp <= MAX_TC_D && !cg_options(b)->no_tensor_cores && cg_tc_kind(W->dt, cg_options(b)->tf32, &W->kind);
  W->ld = W->tc ? W->dp + 16 / ir_dtype_size(W->dt) : W->dp + 1;
  W->tile = W->dp <= 128 ? 64 : 32;
  W->sld = W->tile + 1;
  W->tpr = 2;
  while (W->dp / W->tpr > COLS) W->tpr *= 2;
  W->cols = W->dp / W->tpr;
  W->threads = W->tc ? 4 * 32 : W->tile * W->tpr;
  if (n->n_in > 6) cg_attn_mask_strides(&n->in[6]->type, W->ms);
  int64_t rows = W->B * W->H * W->Sq;
  W->stats = cg_scratch(b, n, (uint64_t)(rows ? rows : 1) * 4);
  if (W->Sq) W->tc ? dq_kernel_tc(W) : dq_kernel(W);
  if (W->Sk) W->tc ? dkdv_kernel_tc(W) : dkdv_kernel(W);
  return true;
}
