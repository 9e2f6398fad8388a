/* Convolutions as implicit GEMMs: takes a conv2d or conv3d of a fusion
 * group (the anchor, or the group alone), or a conv_transpose the tensor
 * cores take (a gather per element of B), appends one kernel that
 * computes C[Co][N*OHW] = W[Co][C*KK] x cols without storing cols (the
 * im2col indexing sits in the loads, where the group's prologue members
 * are evaluated) and runs the group's epilogue in its stores
 * (cg_fused_store).  f16, bf16 and int8 (and f32 under --tf32) go to the
 * tensor-core GEMM (tc_gemm.c), grouped ones too when a group has
 * channels enough; f32 stays on the exact FMA kernel below. */
#include <inttypes.h>
#include <string.h>

#include "codegen.h"
#include "kernel.h"

/* ---- convolution as an implicit GEMM ----
 * C[Co][N*OH*OW] = W[Co][C*KH*KW] x cols, where cols is never stored (a
 * conv3d's the same with OD*OH*OW columns and C*KD*KH*KW rows): a
 * block computes a 64x64 tile of C with 256 threads of 4x4 results each,
 * staging 16-deep slices of W and of the im2col matrix in shared memory;
 * the im2col indexing sits in the loads and the bias and the group's
 * epilogue in the stores. */
enum { TM = 64, TN = 64, TK = 16, RT = 4, THREADS = 256 };

static KExpr *kv(Kernel *k, KVar *v) { return cg_kv(k, v); }
static KExpr *ki(Kernel *k, int64_t v) { return cg_kint(k, v); }
static KExpr *kdiv(Kernel *k, KExpr *a, int64_t d) { return cg_kidx(k, KI_DIV, a, ki(k, d)); }
static KExpr *kmod(Kernel *k, KExpr *a, int64_t d) { return cg_kidx(k, KI_MOD, a, ki(k, d)); }
static KExpr *klt(Kernel *k, KExpr *a, int64_t v) { return cg_kcmp(k, KC_LT, a, ki(k, v)); }

/* dst[at] = cond ? load : fill, as an if so that a fused load's lets
 * stay inside the guard. */
static void guarded_fill(CgBuild *b, Kernel *k, KBlock *in, KExpr *cond, KBuf *dst, KExpr *at,
                         const Value *v, const char *name, KExpr *index, int64_t fill) {
  KStmt *s = cg_kif(k, in, cond);
  cg_kstore(k, &s->body, dst, at, cg_operand_load(b, k, &s->body, v, name, index));
  cg_kstore(k, &s->orelse, dst, at, cg_kimm(k, (double)fill, dst->dtype));
}

/* Where element (kk, col) of a TK x width tile lives: row after row, or
 * (packed, for int8) with four consecutive kk of one col in one 32-bit
 * word, [TK/4][width][4], so that __dp4a reads them at once. */
static KExpr *tile_at(Kernel *k, KExpr *kk, KExpr *col, int64_t width, bool packed) {
  if (!packed) return cg_kadd(k, cg_kmul(k, kk, ki(k, width)), col);
  KExpr *word = cg_kadd(k, cg_kmul(k, kdiv(k, kk, 4), ki(k, width)), col);
  return cg_kadd(k, cg_kmul(k, word, ki(k, 4)), kmod(k, kk, 4));
}

/* Coordinate d of a position p (linear over dims[0 .. count)): p
 * divided by the dims inside d, modulo dims[d] but for the outermost. */
static KExpr *coord_of(Kernel *k, KExpr *p, const int64_t *dims, int count, int d) {
  int64_t inner = 1;
  for (int j = d + 1; j < count; j++) inner *= dims[j];
  KExpr *e = kdiv(k, p, inner);
  return d > 0 ? kmod(k, e, dims[d]) : e;
}

/* Slices of K for the FMA kernel: when its tiles are fewer than the SMs
 * (a batch of 1 past the first layers: ResNet-50 in f32 at 64x64 had
 * grids of 2 to 32 blocks, each summing K up to 4608 alone, and took
 * 4.5 ms a run on the H200), enough slices of at least 8 K tiles to
 * fill them, 16 at most. */
enum { FMA_SMS = CG_TC_TARGET_SMS, FMA_MIN_SLICE = 8, FMA_MAX_SPLIT = 16 };
static int64_t fma_split(int64_t tiles, int64_t kt_n) {
  int64_t s = (FMA_SMS + tiles - 1) / tiles;
  if (s > FMA_MAX_SPLIT) s = FMA_MAX_SPLIT;
  if (s > kt_n / FMA_MIN_SLICE) s = kt_n / FMA_MIN_SLICE;
  return s > 1 ? s : 1;
}

/* The FMA kernel's split-K sums: part[s][m][oc] added in slice order
 * (the same sums on every run), then the bias and the group's epilogue,
 * one thread per element of the output. */
static void fma_reduce(CgBuild *b, const Node *n, Kernel *k0, RtRef part, int64_t split, int64_t Co, int64_t NC,
                       int64_t OHW, bool nhwc, DType at_t) {
  Ctx *c = cg_build_ctx(b);
  const Value *out = &n->out[0];
  Kernel *k = cg_kernel_new(c, n, arena_printf(&c->arena, "%s_splitk", k0->hint),
                            arena_printf(&c->arena, "%s, the %" PRId64 " slices added", k0->what, split));
  int64_t total = Co * NC;
  KBuf *pb = cg_kglobal(k, "part", at_t, split * total, part);
  KVar *nv = cg_kparam(k, "n", KT_INDEX, total, 0);
  KVar *i = cg_kvar(k, "i", KT_INDEX);
  KStmt *loop = cg_kloop(k, &k->body, i, kv(k, nv), KM_GRID_STRIDE);
  cg_kernel_grid_1d(k, total);
  KBlock *blk = &loop->body;
  KVar *acc = cg_kvar(k, "acc", at_t), *sv = cg_kvar(k, "s", KT_INDEX);
  KStmt *red = cg_kreduce(k, blk, acc, cg_kimm(k, 0, at_t), OP_ADD, sv, ki(k, split));
  red->value = cg_kload(k, pb, cg_kadd(k, cg_kmul(k, kv(k, sv), ki(k, total)), kv(k, i)));
  KVar *m = cg_klet(k, blk, "m", KT_INDEX, kdiv(k, kv(k, i), NC));
  KVar *oc = cg_klet(k, blk, "oc", KT_INDEX, kmod(k, kv(k, i), NC));
  KExpr *oidx = nhwc ? cg_kadd(k, cg_kmul(k, kv(k, oc), ki(k, Co)), kv(k, m))
                     : cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, kdiv(k, kv(k, oc), OHW), ki(k, Co)), kv(k, m)), ki(k, OHW)),
                               kmod(k, kv(k, oc), OHW));
  KVar *oi = cg_klet(k, blk, "o", KT_INDEX, oidx);
  KExpr *val = kv(k, acc);
  if (n->n_in > 2) val = cg_kop2(k, OP_ADD, val, cg_kcast(k, cg_operand_load(b, k, blk, n->in[2], "bias", kv(k, m)), at_t));
  if (!cg_fused_store(b, k, blk, out, kv(k, oi), val)) {
    KBuf *o = cg_kglobal(k, "out", out->type.dtype, ir_type_numel(&out->type), cg_ref(b, out));
    cg_kstore(k, blk, o, kv(k, oi), cg_kcast(k, val, out->type.dtype));
  }
  cg_launch(b, k);
}

static bool conv_fma(CgBuild *b, const Node *n) {
  Ctx *c = cg_build_ctx(b);
  int cnt;
  const int64_t *stride = ir_attr_ints(n, "stride", &cnt), *pad = ir_attr_ints(n, "pad", &cnt);
  const int64_t *dil = ir_attr_ints(n, "dilation", &cnt);
  const Value *x = n->in[0], *w = n->in[1], *out = &n->out[0];
  /* 2 or 3 spatial dims: in, kern and od hold them, outermost first;
   * channels last (nhwc) has them from axis 1 and K ordered (tap, ci) */
  int nsp = x->type.rank - 2;
  bool nhwc = ir_conv_nhwc(n);
  int sx = nhwc ? 1 : 2;
  const int64_t *xd = x->type.dims, *wd = w->type.dims;
  const int64_t *in = xd + sx, *kern = wd + sx, *od = out->type.dims + sx;
  int64_t N = xd[0], C = xd[nhwc ? 1 + nsp : 1], Co = wd[0], OHW = 1, KK = 1;
  for (int d = 0; d < nsp; d++) OHW *= od[d], KK *= kern[d];
  int64_t K = C * KK, NC = N * OHW;
  if (ir_type_numel(&out->type) == 0) return true;
  const CgGroup *grp = cg_group(b);
  const char *hint = grp && grp->n > 1 ? cg_group_hint(c, grp) : ir_ops[n->op].name;
  int64_t mt = (Co + TM - 1) / TM, nt = (NC + TN - 1) / TN, kt_n = (K + TK - 1) / TK;
  int64_t split = cg_options(b)->no_split_k ? 1 : fma_split(mt * nt, kt_n), per = (kt_n + split - 1) / split;
  split = (kt_n + per - 1) / per; /* no slice without a tile */
  const char *what = arena_printf(&c->arena, "%simplicit gemm%s", grp ? arena_printf(&c->arena, "#k%d ", grp->id) : "",
                                  split > 1 ? arena_printf(&c->arena, ", split-K %" PRId64, split) : "");
  Kernel *k = cg_kernel_new(c, n, arena_printf(&c->arena, "%s_igemm", hint), what);
  /* Tiles in the operands' type when both are one half type (half the
   * shared memory), else f32; products accumulate in f32 either way.  An
   * int8 product keeps i8 tiles and sums exactly in int32. */
  DType tile = x->type.dtype == w->type.dtype ? x->type.dtype : TY_F32;
  DType at_t = out->type.dtype == TY_I32 ? TY_I32 : TY_F32;
  bool packed = at_t == TY_I32; /* tiles laid out for __dp4a (tile_at) */
  KBuf *As = cg_klocal(k, "As", tile, TK * TM, KSP_SHARED);
  KBuf *Bs = cg_klocal(k, "Bs", tile, TK * TN, KSP_SHARED);
  KBuf *acc = cg_klocal(k, "acc", at_t, RT * RT, KSP_REGISTER);
  KVar *bn = cg_kvar(k, "bn", KT_INDEX), *bm = cg_kvar(k, "bm", KT_INDEX), *t = cg_kvar(k, "t", KT_INDEX);
  KStmt *lx = cg_kloop(k, &k->body, bn, ki(k, nt), KM_GRID_X);
  KStmt *ly = cg_kloop(k, &lx->body, bm, ki(k, mt), KM_GRID_Y);
  KVar *bz = cg_kvar(k, "bz", KT_INDEX);
  KStmt *lsz = split > 1 ? cg_kloop(k, &ly->body, bz, ki(k, split), KM_GRID_Z) : ly;
  KStmt *lt = cg_kloop(k, &lsz->body, t, ki(k, THREADS), KM_BLOCK_X);
  KBlock *body = &lt->body;
  KVar *tx = cg_klet(k, body, "tx", KT_INDEX, kmod(k, kv(k, t), TN / RT));
  KVar *ty = cg_klet(k, body, "ty", KT_INDEX, kdiv(k, kv(k, t), TN / RT));
  KVar *z = cg_kvar(k, "z", KT_INDEX);
  KStmt *lz = cg_kloop(k, body, z, ki(k, RT * RT), KM_UNROLL);
  cg_kstore(k, &lz->body, acc, kv(k, z), cg_kimm(k, 0, at_t));

  /* slice bz sums K tiles [bz per, bz per + per); the last one's tiles
   * past K read zeros (the guards on K below) */
  KVar *kl = cg_kvar(k, "kt", KT_INDEX);
  KStmt *lk = cg_kloop(k, body, kl, ki(k, per), KM_SERIAL);
  KExpr *kt_at = split > 1 ? cg_kadd(k, cg_kmul(k, kv(k, bz), ki(k, per)), kv(k, kl)) : kv(k, kl);
  bool k_ragged = K % TK || per * split != kt_n;
  /* W tile: consecutive threads read consecutive k of one row. */
  KVar *la = cg_kvar(k, "l", KT_INDEX);
  KStmt *lla = cg_kloop(k, &lk->body, la, ki(k, TM * TK / THREADS), KM_UNROLL);
  KVar *ea = cg_klet(k, &lla->body, "e", KT_INDEX, cg_kadd(k, kv(k, t), cg_kmul(k, kv(k, la), ki(k, THREADS))));
  KVar *am = cg_klet(k, &lla->body, "am", KT_INDEX,
                     cg_kadd(k, cg_kmul(k, kv(k, bm), ki(k, TM)), kdiv(k, kv(k, ea), TK)));
  KVar *ak = cg_klet(k, &lla->body, "ak", KT_INDEX,
                     cg_kadd(k, cg_kmul(k, kt_at, ki(k, TK)), kmod(k, kv(k, ea), TK)));
  KExpr *a_at = tile_at(k, kmod(k, kv(k, ea), TK), kdiv(k, kv(k, ea), TK), TM, packed);
  KExpr *a_ok = cg_kand(k, Co % TM ? klt(k, kv(k, am), Co) : NULL, k_ragged ? klt(k, kv(k, ak), K) : NULL);
  KExpr *w_at = cg_kadd(k, cg_kmul(k, kv(k, am), ki(k, K)), kv(k, ak));
  if (a_ok)
    guarded_fill(b, k, &lla->body, a_ok, As, a_at, w, "w", w_at, 0);
  else
    cg_kstore(k, &lla->body, As, a_at, cg_operand_load(b, k, &lla->body, w, "w", w_at));
  /* im2col tile: consecutive threads read consecutive output pixels. */
  KVar *lb = cg_kvar(k, "l", KT_INDEX);
  KStmt *llb = cg_kloop(k, &lk->body, lb, ki(k, TN * TK / THREADS), KM_UNROLL);
  KBlock *bb = &llb->body;
  KVar *eb = cg_klet(k, bb, "e", KT_INDEX, cg_kadd(k, kv(k, t), cg_kmul(k, kv(k, lb), ki(k, THREADS))));
  KVar *col = cg_klet(k, bb, "col", KT_INDEX,
                      cg_kadd(k, cg_kmul(k, kv(k, bn), ki(k, TN)), kmod(k, kv(k, eb), TN)));
  KVar *bk = cg_klet(k, bb, "bk", KT_INDEX,
                     cg_kadd(k, cg_kmul(k, kt_at, ki(k, TK)), kdiv(k, kv(k, eb), TN)));
  KVar *img = cg_klet(k, bb, "img", KT_INDEX, kdiv(k, kv(k, col), OHW));
  KVar *p = cg_klet(k, bb, "p", KT_INDEX, kmod(k, kv(k, col), OHW));
  KVar *ci = cg_klet(k, bb, "ci", KT_INDEX, nhwc ? kmod(k, kv(k, bk), C) : kdiv(k, kv(k, bk), KK));
  KVar *r = cg_klet(k, bb, "r", KT_INDEX, nhwc ? kdiv(k, kv(k, bk), C) : kmod(k, kv(k, bk), KK));
  /* The input position of output pixel p at tap r, per spatial dim. */
  static const char *const pos_names[] = {"id", "ih", "iw"};
  KVar *pos[3] = {NULL};
  bool padded = false;
  for (int d = 0; d < nsp; d++) {
    KExpr *e = cg_kadd(k, cg_kidx(k, KI_SUB, cg_kmul(k, coord_of(k, kv(k, p), od, nsp, d), ki(k, stride[d])), ki(k, pad[d])),
                       cg_kmul(k, coord_of(k, kv(k, r), kern, nsp, d), ki(k, dil[d])));
    pos[d] = cg_klet(k, bb, pos_names[3 - nsp + d], KT_INDEX, e);
    padded = padded || pad[d] || pad[nsp + d] || (od[d] - 1) * stride[d] + (kern[d] - 1) * dil[d] >= in[d];
  }
  KExpr *b_ok = cg_kand(k, NC % TN ? klt(k, kv(k, col), NC) : NULL, k_ragged ? klt(k, kv(k, bk), K) : NULL);
  for (int d = 0; d < nsp && padded; d++) {
    b_ok = cg_kand(k, b_ok, cg_kcmp(k, KC_GE, kv(k, pos[d]), ki(k, 0)));
    b_ok = cg_kand(k, b_ok, klt(k, kv(k, pos[d]), in[d]));
  }
  KExpr *x_at = nhwc ? kv(k, img) : cg_kadd(k, cg_kmul(k, kv(k, img), ki(k, C)), kv(k, ci));
  for (int d = 0; d < nsp; d++) x_at = cg_kadd(k, cg_kmul(k, x_at, ki(k, in[d])), kv(k, pos[d]));
  if (nhwc) x_at = cg_kadd(k, cg_kmul(k, x_at, ki(k, C)), kv(k, ci));
  KExpr *b_at = tile_at(k, kdiv(k, kv(k, eb), TN), kmod(k, kv(k, eb), TN), TN, packed);
  /* int8 padding reads the zero point (a real 0); past K or NC the fill
   * meets a zero of W or is never stored, so it may be the same. */
  if (b_ok)
    guarded_fill(b, k, bb, b_ok, Bs, b_at, x, "x", x_at, cg_zero_point(n));
  else
    cg_kstore(k, bb, Bs, b_at, cg_operand_load(b, k, bb, x, "x", x_at));
  cg_kbarrier(k, &lk->body);
  /* The 4x4 register tile. */
  KVar *kk = cg_kvar(k, "kk", KT_INDEX), *i = cg_kvar(k, "i", KT_INDEX), *j = cg_kvar(k, "j", KT_INDEX);
  /* int8: four k at a time, one __dp4a each */
  KStmt *lkk = cg_kloop(k, &lk->body, kk, ki(k, packed ? TK / 4 : TK), KM_UNROLL);
  KStmt *li = cg_kloop(k, &lkk->body, i, ki(k, RT), KM_UNROLL);
  KExpr *a_in = cg_kadd(k, cg_kmul(k, kv(k, kk), ki(k, TM)), cg_kadd(k, cg_kmul(k, kv(k, ty), ki(k, RT)), kv(k, i)));
  KVar *av = cg_klet(k, &li->body, "a", at_t,
                     packed ? cg_kpack4(k, As, cg_kmul(k, a_in, ki(k, 4))) : cg_kload(k, As, a_in));
  KStmt *lj = cg_kloop(k, &li->body, j, ki(k, RT), KM_UNROLL);
  KExpr *b_in = cg_kadd(k, cg_kmul(k, kv(k, kk), ki(k, TN)), cg_kadd(k, cg_kmul(k, kv(k, tx), ki(k, RT)), kv(k, j)));
  KExpr *slot = cg_kadd(k, cg_kmul(k, kv(k, i), ki(k, RT)), kv(k, j));
  KExpr *sum;
  if (packed)
    sum = cg_kdp4a(k, kv(k, av), cg_kpack4(k, Bs, cg_kmul(k, b_in, ki(k, 4))), cg_kload(k, acc, slot));
  else
    sum = cg_kop2(k, OP_ADD, cg_kload(k, acc, slot),
                  cg_kop2(k, OP_MUL, kv(k, av), cg_kcast(k, cg_kload(k, Bs, b_in), at_t)));
  cg_kstore(k, &lj->body, acc, slot, sum);
  cg_kbarrier(k, &lk->body);
  /* Stores, with the bias and the epilogue. */
  KVar *i2 = cg_kvar(k, "i", KT_INDEX), *j2 = cg_kvar(k, "j", KT_INDEX);
  KStmt *si = cg_kloop(k, body, i2, ki(k, RT), KM_UNROLL);
  KStmt *sj = cg_kloop(k, &si->body, j2, ki(k, RT), KM_UNROLL);
  KBlock *sb = &sj->body;
  KVar *m = cg_klet(k, sb, "m", KT_INDEX,
                    cg_kadd(k, cg_kmul(k, kv(k, bm), ki(k, TM)), cg_kadd(k, cg_kmul(k, kv(k, ty), ki(k, RT)), kv(k, i2))));
  KVar *oc = cg_klet(k, sb, "oc", KT_INDEX,
                     cg_kadd(k, cg_kmul(k, kv(k, bn), ki(k, TN)), cg_kadd(k, cg_kmul(k, kv(k, tx), ki(k, RT)), kv(k, j2))));
  KExpr *ok = cg_kand(k, Co % TM ? klt(k, kv(k, m), Co) : NULL, NC % TN ? klt(k, kv(k, oc), NC) : NULL);
  if (ok) sb = &cg_kif(k, sb, ok)->body;
  if (split > 1) {
    /* this slice's partial sums; fma_reduce adds them and stores */
    RtRef part = cg_scratch(b, n, (uint64_t)(split * Co * NC) * 4);
    KBuf *pb = cg_kglobal(k, "part", at_t, split * Co * NC, part);
    KExpr *at = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, kv(k, bz), ki(k, Co)), kv(k, m)), ki(k, NC)), kv(k, oc));
    cg_kstore(k, sb, pb, at, cg_kload(k, acc, cg_kadd(k, cg_kmul(k, kv(k, i2), ki(k, RT)), kv(k, j2))));
    k->grid[0] = (uint32_t)(nt < 65535 ? nt : 65535);
    k->grid[1] = (uint32_t)(mt < 65535 ? mt : 65535);
    k->grid[2] = (uint32_t)split;
    k->block[0] = THREADS;
    cg_launch(b, k);
    fma_reduce(b, n, k, part, split, Co, NC, OHW, nhwc, at_t);
    return true;
  }
  KExpr *oidx = nhwc ? cg_kadd(k, cg_kmul(k, kv(k, oc), ki(k, Co)), kv(k, m))
                     : cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, kdiv(k, kv(k, oc), OHW), ki(k, Co)), kv(k, m)), ki(k, OHW)),
                               kmod(k, kv(k, oc), OHW));
  KVar *oi = cg_klet(k, sb, "o", KT_INDEX, oidx);
  KExpr *val = cg_kload(k, acc, cg_kadd(k, cg_kmul(k, kv(k, i2), ki(k, RT)), kv(k, j2)));
  if (n->n_in > 2)
    val = cg_kop2(k, OP_ADD, val, cg_kcast(k, cg_operand_load(b, k, sb, n->in[2], "bias", kv(k, m)), at_t));
  if (!cg_fused_store(b, k, sb, out, kv(k, oi), val)) {
    KBuf *o = cg_kglobal(k, "out", out->type.dtype, ir_type_numel(&out->type), cg_ref(b, out));
    cg_kstore(k, sb, o, kv(k, oi), cg_kcast(k, val, out->type.dtype));
  }
  k->grid[0] = (uint32_t)(nt < 65535 ? nt : 65535);
  k->grid[1] = (uint32_t)(mt < 65535 ? mt : 65535);
  k->block[0] = THREADS;
  cg_launch(b, k);
  return true;
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
  bool nhwc; /* conv2d in layout nhwc: k = (tap, ci) */
  /* conv_transpose: W is [C][Cog][taps], and tap r of output o reads
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
 * condition that the tap is inside the kernel. */
static KExpr *w_index(ConvTc *cv, Kernel *k, KExpr *z, KExpr *row, KExpr *kk, KExpr **valid) {
  *valid = NULL;
  if (cv->phased) {
    /* kk = (ci, q...): tap r = r0 + s q of W[g Cg + ci][row][taps] */
    KExpr *ci = cg_kadd(k, cg_kmul(k, kdiv(k, z, cv->P), ki(k, cv->Cg)), kdiv(k, kk, cv->TQ));
    KExpr *q = kmod(k, kk, cv->TQ), *at = cg_kadd(k, cg_kmul(k, ci, ki(k, cv->Cog)), row);
    for (int d = 0; d < cv->nsp; d++)
      at = cg_kadd(k, cg_kmul(k, at, ki(k, cv->kern[d])), phase_tap(cv, k, z, q, d, valid));
    return at;
  }
  if (cv->transpose) {
    KExpr *ci = cg_kadd(k, cg_kmul(k, z, ki(k, cv->Cg)), kdiv(k, kk, cv->KK));
    return cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, ci, ki(k, cv->Cog)), row), ki(k, cv->KK)), kmod(k, kk, cv->KK));
  }
  return cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, z, ki(k, cv->Cog)), row), ki(k, cv->Kg)), kk);
}

static KBuf *w_async(void *ctx, Kernel *k) {
  ConvTc *cv = ctx;
  double c;
  /* conv_transpose's K runs across W's rows: not contiguous */
  if (cv->transpose || cg_is_fused(cv->b, cv->w) || cg_const_of(cv->b, cv->w, &c)) return NULL;
  RtRef r = cg_ref(cv->b, cv->w);
  if (r.offset % 16) return NULL;
  return cg_kglobal(k, "w", cv->w->type.dtype, ir_type_numel(&cv->w->type), r);
}

static KExpr *w_chunk(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row, KExpr *kk, KExpr **ok) {
  (void)blk;
  return w_index(ctx, k, z, row, kk, ok); /* not for conv_transpose (w_async): ok stays NULL */
}

static void *w_row(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row) {
  (void)ctx, (void)k, (void)blk, (void)z;
  return row;
}

/* v = 0, then v = load(at) where valid: a guarded read. */
static KExpr *load_or_zero(ConvTc *cv, Kernel *k, KBlock *blk, const Value *x, const char *name, KExpr *at,
                           KExpr *valid, double zero) {
  DType dt = x->type.dtype;
  KVar *v = cg_klet(k, blk, name[0] == 'w' ? "wv" : "xv", dt, cg_kimm(k, zero, dt));
  KStmt *s = cg_kif(k, blk, valid);
  cg_kset(k, &s->body, v, cg_operand_load(cv->b, k, &s->body, x, name, at));
  return kv(k, v);
}

static KExpr *w_element(void *ctx, void *row, Kernel *k, KBlock *blk, KExpr *z, KExpr *kk) {
  ConvTc *cv = ctx;
  KExpr *valid, *at = w_index(cv, k, z, row, kk, &valid);
  if (!valid) return cg_operand_load(cv->b, k, blk, cv->w, "w", at);
  return load_or_zero(cv, k, blk, cv->w, "w", at, valid, 0); /* with x at its zero point: no term */
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

/* nhwc (groups 1): the index of x at element kk = (tap, ci) of the row's
 * pixel, and in *inside (NULL: always) whether it lies in the image. */
static KExpr *nhwc_at(ConvTc *cv, ConvRow *r, Kernel *k, KBlock *blk, KExpr *kk, KExpr **inside) {
  KExpr *tap = let_index(k, blk, "tap", kdiv(k, kk, cv->C)), *at = r->img;
  *inside = NULL;
  for (int d = 0; d < cv->nsp; d++) {
    KExpr *td = coord_of(k, tap, cv->kern, cv->nsp, d);
    KExpr *pos = let_index(k, blk, "ip", cg_kadd(k, r->base[d], cg_kmul(k, td, ki(k, cv->dil[d]))));
    if (cv->padded) *inside = cg_kand(k, *inside, cg_kand(k, cg_kcmp(k, KC_GE, pos, ki(k, 0)), klt(k, pos, cv->in[d])));
    at = cg_kadd(k, cg_kmul(k, at, ki(k, cv->in[d])), pos);
  }
  return cg_kadd(k, cg_kmul(k, at, ki(k, cv->C)), kmod(k, kk, cv->C));
}

static KExpr *x_nhwc(ConvTc *cv, ConvRow *r, Kernel *k, KBlock *blk, KExpr *kk) {
  KExpr *inside, *at = nhwc_at(cv, r, k, blk, kk, &inside);
  if (!inside) return cg_operand_load(cv->b, k, blk, cv->x, "x", at);
  return load_or_zero(cv, k, blk, cv->x, "x", at, inside, (double)cg_zero_point(cv->n));
}

/* nhwc's B by cp.async: x a plain aligned array whose channels fill
 * whole 16-byte chunks (a chunk never straddles two taps), and its
 * padding a real 0 (a zero point would need other bytes than the
 * zero-fill). */
static KBuf *x_async(void *ctx, Kernel *k) {
  ConvTc *cv = ctx;
  double c;
  int64_t per_chunk = 16 / ir_dtype_size(cv->x->type.dtype);
  if (!cv->nhwc || cv->C % per_chunk || cg_is_fused(cv->b, cv->x) || cg_const_of(cv->b, cv->x, &c)) return NULL;
  if (cv->padded && cg_zero_point(cv->n) != 0) return NULL;
  RtRef ref = cg_ref(cv->b, cv->x);
  if (ref.offset % 16) return NULL;
  return cg_kglobal(k, "x", cv->x->type.dtype, ir_type_numel(&cv->x->type), ref);
}

static void *x_row(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row);

static KExpr *x_chunk(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row, KExpr *kk, KExpr **ok) {
  ConvTc *cv = ctx;
  return nhwc_at(cv, x_row(ctx, k, blk, z, row), k, blk, kk, ok);
}

/* x at tap kk of the row's pixel, the zero point (int8's real 0) in the
 * padding. */
static KExpr *x_element(void *ctx, void *row, Kernel *k, KBlock *blk, KExpr *z, KExpr *kk) {
  ConvTc *cv = ctx;
  ConvRow *r = row;
  if (cv->nhwc) return x_nhwc(cv, r, k, blk, kk);
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
  return load_or_zero(cv, k, blk, cv->x, "x", at, inside, (double)cg_zero_point(cv->n));
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
  KExpr *o = cv->nhwc ? cg_kadd(k, cg_kmul(k, n, ki(k, cv->Co)), co)
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
  KTcKind tc;
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
            .async_buf = cv->nhwc ? x_async : NULL, .chunk_at = x_chunk, .row_begin = x_row, .element = x_element},
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
  if (cg_conv_on_tc(b, n)) {
    conv_gemm(b, n, false);
    return true;
  }
  return conv_fma(b, n);
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
