/* Depthwise convolutions: takes a conv2d whose groups equal its input
 * channels (each output channel reads one input plane, any multiplier
 * Co / C), appends one bandwidth-bound kernel and returns true, or false
 * having done nothing when the shape does not fit it (the caller's direct
 * loop takes those).
 *
 * A block computes a TH x TW tile of one output plane (grid x the tiles,
 * y the output channel, z the image).  Its threads first stage the input
 * tile the outputs reach, halo included, in shared memory once, in the
 * accumulator's type (f32, or i32 for int8), with 16-byte loads where a
 * chunk of a row lies inside the image and is aligned (the tile's columns
 * start at a multiple of a chunk for that), element by element elsewhere
 * (padding reads 0, int8's zero point), and with the fusion group's
 * prologue evaluated on load when x is computed.  Each thread keeps the
 * KH x KW weights of the plane in registers and computes RH outputs down
 * a column; the bias and the group's epilogue run at the store
 * (cg_fused_store), consecutive threads on consecutive columns. */
#include "lower.h"
#include "kshort.h"

enum {
  MAX_THREADS = 128,
  VEC_BYTES = 16,
  MAX_TILE_BYTES = 40 * 1024, /* the staged input tile, within 48 KiB of static shared memory */
  MAX_KK = 64,                /* weights a thread keeps in registers */
};

typedef struct Dw {
  CgBuild *b;
  const Node *n;
  const Value *x, *w, *out;
  int64_t N, C, H, W, Co, mult, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW;
  int64_t TW, TR, RH, TH; /* tile width, thread rows, outputs a thread, tile height */
  int64_t SR, SC, epc;    /* staged rows and columns; elements in a 16-byte chunk (1: none) */
  DType acc_t;
  bool vec;
} Dw;


/* Tiles as wide as the output (8, 16 or 32 columns) and 128 threads or
 * fewer, a whole number of warps: small late-layer planes (7x7) get
 * small blocks rather than idle threads. */
static bool dw_shape(Dw *d) {
  d->TW = d->OW >= 24 ? 32 : d->OW > 8 ? 16 : 8;
  d->RH = d->OH >= 32 ? 4 : d->OH >= 12 ? 2 : 1;
  int64_t rows = cg_cdiv(d->OH, d->RH), per_warp = 32 / d->TW;
  d->TR = cg_cdiv(rows < MAX_THREADS / d->TW ? rows : MAX_THREADS / d->TW, per_warp) * per_warp;
  d->TH = d->TR * d->RH;
  d->SR = (d->TH - 1) * d->sh + (d->KH - 1) * d->dh + 1;
  int64_t span = (d->TW - 1) * d->sw + (d->KW - 1) * d->dw + 1;
  d->SC = d->vec ? cg_cdiv(span + d->epc - 1, d->epc) * d->epc : span;
  return d->SR * d->SC * 4 <= MAX_TILE_BYTES && d->KH * d->KW <= MAX_KK && d->Co <= 65535 && d->N <= 65535;
}

/* x a plain global array the kernel may read 16 bytes at a time. */
static bool x_vectorizable(Dw *d) {
  double c;
  if (cg_is_fused(d->b, d->x) || cg_const_of(d->b, d->x, &c)) return false;
  int es = ir_dtype_size(d->x->type.dtype);
  return cg_ref(d->b, d->x).offset % VEC_BYTES == 0 && es < 8 && d->W >= VEC_BYTES / es;
}

/* One staged element: x at (gr, gc) of the plane, or the padding's fill. */
static void stage_element(Dw *d, Kernel *k, KBlock *blk, KBuf *s, KExpr *at, KExpr *plane, KExpr *gr,
                          KExpr *gc) {
  KExpr *inside = cg_kand(k, cg_kand(k, cg_kcmp(k, KC_GE, gr, ki(k, 0)), klt(k, gr, ki(k, d->H))),
                          cg_kand(k, cg_kcmp(k, KC_GE, gc, ki(k, 0)), klt(k, gc, ki(k, d->W))));
  KExpr *xi = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, plane, ki(k, d->H)), gr), ki(k, d->W)), gc);
  KStmt *g = cg_kif(k, blk, inside);
  cg_kstore(k, &g->body, s, at, cg_kcast(k, cg_operand_load(d->b, k, &g->body, d->x, "x", xi), d->acc_t));
  cg_kstore(k, &g->orelse, s, at, cg_kimm(k, (double)cg_zero_point(d->n), d->acc_t));
}

/* The input tile into shared memory: chunk e of the SR x SC tile is row
 * e / cpr, columns (e % cpr) * epc on, from column c0 of the image. */
static void stage_tile(Dw *d, Kernel *k, KBlock *body, KBuf *s, KExpr *t, int64_t threads, KExpr *plane,
                       KExpr *r0, KExpr *c0) {
  int64_t cpr = d->SC / d->epc, chunks = d->SR * cpr;
  KVar *l = cg_kvar(k, "l", KT_INDEX);
  KBlock *lb = &cg_kloop(k, body, l, ki(k, cg_cdiv(chunks, threads)), KM_SERIAL)->body;
  KExpr *e = ilet(k, lb, "e", cg_kadd(k, t, cg_kmul(k, kv(k, l), ki(k, threads))));
  if (chunks % threads) lb = &cg_kif(k, lb, klt(k, e, ki(k, chunks)))->body;
  KExpr *r = ilet(k, lb, "r", kdiv(k, e, cpr)), *cc = ilet(k, lb, "cc", kmod(k, e, cpr));
  KExpr *gr = ilet(k, lb, "gr", cg_kadd(k, r0, r));
  KExpr *gc = ilet(k, lb, "gc", cg_kadd(k, c0, cg_kmul(k, cc, ki(k, d->epc))));
  KExpr *at = ilet(k, lb, "sa", cg_kadd(k, cg_kmul(k, r, ki(k, d->SC)), cg_kmul(k, cc, ki(k, d->epc))));
  KBlock *slow = lb;
  if (d->vec) {
    /* the whole chunk inside the image and, unless every row starts
     * aligned, at an aligned element */
    KExpr *xi = ilet(k, lb, "xi", cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, plane, ki(k, d->H)), gr), ki(k, d->W)), gc));
    KExpr *ok = cg_kand(k, cg_kand(k, cg_kcmp(k, KC_GE, gr, ki(k, 0)), klt(k, gr, ki(k, d->H))),
                        cg_kand(k, cg_kcmp(k, KC_GE, gc, ki(k, 0)), cg_kcmp(k, KC_LE, gc, ki(k, d->W - d->epc))));
    if (d->W % d->epc) ok = cg_kand(k, ok, cg_kcmp(k, KC_EQ, kmod(k, xi, d->epc), ki(k, 0)));
    KStmt *g = cg_kif(k, lb, ok);
    KBuf *xb = global_of(d->b, k, d->x, "x");
    KVar *v = cg_kvload(k, &g->body, "xv", xb, xi, (int)d->epc);
    for (int j = 0; j < d->epc; j++)
      cg_kstore(k, &g->body, s, cg_kadd(k, at, ki(k, j)), cg_kcast(k, cg_klane(k, v, (int)d->epc, j), d->acc_t));
    slow = &g->orelse;
  }
  KBlock *eb = slow;
  KExpr *dj = ki(k, 0);
  if (d->epc > 1) {
    KVar *j = cg_kvar(k, "j", KT_INDEX);
    eb = &cg_kloop(k, slow, j, ki(k, d->epc), KM_UNROLL)->body;
    dj = kv(k, j);
  }
  stage_element(d, k, eb, s, cg_kadd(k, at, dj), plane, gr, cg_kadd(k, gc, dj));
}

/* Output (oh, ow) of the block's plane: the sum, the bias, the group's
 * epilogue. */
static void store_out(Dw *d, Kernel *k, KBlock *blk, KExpr *img, KExpr *co, KExpr *oh, KExpr *ow, KExpr *acc) {
  KExpr *ok = cg_kand(k, d->OH % d->TH ? klt(k, oh, ki(k, d->OH)) : NULL, d->OW % d->TW ? klt(k, ow, ki(k, d->OW)) : NULL);
  if (ok) blk = &cg_kif(k, blk, ok)->body;
  KExpr *plane = cg_kadd(k, cg_kmul(k, img, ki(k, d->Co)), co);
  KExpr *oi = ilet(k, blk, "o", cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, plane, ki(k, d->OH)), oh), ki(k, d->OW)), ow));
  KExpr *val = acc;
  if (d->n->n_in > 2)
    val = cg_kop2(k, OP_ADD, val, cg_kcast(k, cg_operand_load(d->b, k, blk, d->n->in[2], "bias", co), d->acc_t));
  if (!cg_fused_store(d->b, k, blk, d->out, oi, val)) {
    KBuf *ob = global_of(d->b, k, d->out, "out");
    cg_kstore(k, blk, ob, oi, cg_kcast(k, val, d->out->type.dtype));
  }
}

static void dw_geometry(Dw *d, const Node *n) {
  int cnt;
  const int64_t *stride = ir_attr_ints(n, "stride", &cnt), *pad = ir_attr_ints(n, "pad", &cnt);
  const int64_t *dil = ir_attr_ints(n, "dilation", &cnt);
  const int64_t *xd = d->x->type.dims, *wd = d->w->type.dims, *od = d->out->type.dims;
  d->N = xd[0], d->C = xd[1], d->H = xd[2], d->W = xd[3];
  d->Co = wd[0], d->mult = d->Co / d->C, d->KH = wd[2], d->KW = wd[3];
  d->sh = stride[0], d->sw = stride[1], d->ph = pad[0], d->pw = pad[1], d->dh = dil[0], d->dw = dil[1];
  d->OH = od[2], d->OW = od[3];
  d->acc_t = d->out->type.dtype == TY_I32 ? TY_I32 : TY_F32;
}

bool cg_lower_conv_depthwise(CgBuild *b, const Node *n) {
  Ctx *c = cg_build_ctx(b);
  const Value *x = n->in[0], *w = n->in[1];
  if (x->type.rank != 4 || w->type.dims[1] != 1 || ir_attr_int(n, "groups") != x->type.dims[1]) return false;
  Dw *d = ARENA_NEW(&c->arena, Dw);
  d->b = b, d->n = n, d->x = x, d->w = w, d->out = &n->out[0];
  dw_geometry(d, n);
  d->epc = VEC_BYTES / ir_dtype_size(x->type.dtype);
  d->vec = x_vectorizable(d);
  if (!d->vec) d->epc = 1;
  if (!dw_shape(d)) return false;
  int64_t threads = d->TW * d->TR, tiles_w = cg_cdiv(d->OW, d->TW), tiles = cg_cdiv(d->OH, d->TH) * tiles_w;
  const CgGroup *grp = cg_group(b);
  const char *what = arena_printf(&c->arena, "%sdepthwise %" PRId64 "x%" PRId64 " outputs a block, %" PRId64 " a thread%s",
                                  grp ? arena_printf(&c->arena, "#k%d ", grp->id) : "", d->TH, d->TW, d->RH,
                                  d->vec ? ", 16-byte loads" : "");
  Kernel *k = new_kernel(b, n, "dw", what);
  KBuf *s = cg_klocal(k, "xs", d->acc_t, d->SR * d->SC, KSP_SHARED);
  KBuf *wr = cg_klocal(k, "wr", d->acc_t, d->KH * d->KW, KSP_REGISTER);
  KBuf *acc = cg_klocal(k, "acc", d->acc_t, d->RH, KSP_REGISTER);
  KVar *bt = cg_kvar(k, "bt", KT_INDEX), *co = cg_kvar(k, "co", KT_INDEX), *img = cg_kvar(k, "img", KT_INDEX);
  KVar *t = cg_kvar(k, "t", KT_INDEX);
  KStmt *lx = cg_kloop(k, &k->body, bt, ki(k, tiles), KM_GRID_X);
  KStmt *ly = cg_kloop(k, &lx->body, co, ki(k, d->Co), KM_GRID_Y);
  KStmt *lz = cg_kloop(k, &ly->body, img, ki(k, d->N), KM_GRID_Z);
  KBlock *body = &cg_kloop(k, &lz->body, t, ki(k, threads), KM_BLOCK_X)->body;
  KExpr *oh0 = ilet(k, body, "oh0", cg_kmul(k, kdiv(k, kv(k, bt), tiles_w), ki(k, d->TH)));
  KExpr *ow0 = ilet(k, body, "ow0", cg_kmul(k, kmod(k, kv(k, bt), tiles_w), ki(k, d->TW)));
  KExpr *plane = ilet(k, body, "xp", cg_kadd(k, cg_kmul(k, kv(k, img), ki(k, d->C)), kdiv(k, kv(k, co), d->mult)));
  /* The tile's first input column, aligned down to a chunk (kept
   * non-negative for the division), and where the outputs' column 0
   * reads in it. */
  KExpr *iw0 = ilet(k, body, "iw0", cg_kidx(k, KI_SUB, cg_kmul(k, ow0, ki(k, d->sw)), ki(k, d->pw)));
  int64_t lift = cg_cdiv(d->pw, d->epc) * d->epc;
  KExpr *c0 = ilet(k, body, "c0", cg_kidx(k, KI_SUB, cg_kmul(k, kdiv(k, cg_kadd(k, iw0, ki(k, lift)), d->epc), ki(k, d->epc)), ki(k, lift)));
  KExpr *dc = ilet(k, body, "dc", cg_kidx(k, KI_SUB, iw0, c0));
  KExpr *r0 = ilet(k, body, "ih0", cg_kidx(k, KI_SUB, cg_kmul(k, oh0, ki(k, d->sh)), ki(k, d->ph)));
  KVar *q;
  KBlock *wb = &cg_kloop(k, body, q = cg_kvar(k, "q", KT_INDEX), ki(k, d->KH * d->KW), KM_UNROLL)->body;
  KExpr *wi = cg_kadd(k, cg_kmul(k, kv(k, co), ki(k, d->KH * d->KW)), kv(k, q));
  cg_kstore(k, wb, wr, kv(k, q), cg_kcast(k, cg_operand_load(b, k, wb, w, "w", wi), d->acc_t));
  stage_tile(d, k, body, s, kv(k, t), threads, plane, r0, c0);
  cg_kbarrier(k, body);
  KExpr *tx = ilet(k, body, "tx", kmod(k, kv(k, t), d->TW)), *ty = ilet(k, body, "ty", kdiv(k, kv(k, t), d->TW));
  KExpr *col = ilet(k, body, "sc", cg_kadd(k, dc, cg_kmul(k, tx, ki(k, d->sw))));
  KVar *i, *kh, *kw;
  KBlock *zb = &cg_kloop(k, body, i = cg_kvar(k, "i", KT_INDEX), ki(k, d->RH), KM_UNROLL)->body;
  cg_kstore(k, zb, acc, kv(k, i), cg_kimm(k, 0, d->acc_t));
  KBlock *ib = &cg_kloop(k, body, i = cg_kvar(k, "i", KT_INDEX), ki(k, d->RH), KM_UNROLL)->body;
  KBlock *hb = &cg_kloop(k, ib, kh = cg_kvar(k, "kh", KT_INDEX), ki(k, d->KH), KM_UNROLL)->body;
  KBlock *vb = &cg_kloop(k, hb, kw = cg_kvar(k, "kw", KT_INDEX), ki(k, d->KW), KM_UNROLL)->body;
  KExpr *row = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, ty, ki(k, d->RH)), kv(k, i)), ki(k, d->sh)),
                       cg_kmul(k, kv(k, kh), ki(k, d->dh)));
  KExpr *sat = cg_kadd(k, cg_kmul(k, row, ki(k, d->SC)), cg_kadd(k, col, cg_kmul(k, kv(k, kw), ki(k, d->dw))));
  KExpr *tap = cg_kadd(k, cg_kmul(k, kv(k, kh), ki(k, d->KW)), kv(k, kw));
  KExpr *prod = cg_kop2(k, OP_MUL, cg_kload(k, s, sat), cg_kload(k, wr, tap));
  cg_kstore(k, vb, acc, kv(k, i), cg_kop2(k, OP_ADD, cg_kload(k, acc, kv(k, i)), prod));
  KBlock *sb = &cg_kloop(k, body, i = cg_kvar(k, "i", KT_INDEX), ki(k, d->RH), KM_UNROLL)->body;
  KExpr *oh = ilet(k, sb, "oh", cg_kadd(k, oh0, cg_kadd(k, cg_kmul(k, ty, ki(k, d->RH)), kv(k, i))));
  KExpr *ow = ilet(k, sb, "ow", cg_kadd(k, ow0, tx));
  store_out(d, k, sb, kv(k, img), kv(k, co), oh, ow, cg_kload(k, acc, kv(k, i)));
  k->grid[0] = (uint32_t)(tiles < INT32_MAX ? tiles : INT32_MAX);
  k->grid[1] = (uint32_t)d->Co;
  k->grid[2] = (uint32_t)d->N;
  k->block[0] = (uint32_t)threads;
  cg_launch(b, k);
  return true;
}

/* ---- channels last ----
 *
 * conv2d in layout "nhwc" with groups = C (passes/nhwc.c keeps
 * MobileNet's depthwise convolutions in its channels-last regions): x
 * [N, H, W, C], W [Co, kH, kW, 1], the result [N, OH, OW, Co].  A
 * thread computes V consecutive output channels of one output pixel:
 * where x is a plain aligned array, C a multiple of a 16-byte chunk and
 * the multiplier 1, V is a chunk and each tap is one 16-byte load of V
 * channels (a warp reads 512 consecutive bytes of one pixel row), else
 * V is 1.  Neighbouring pixels' threads reread a tap's input from L1
 * and L2 rather than from a staged tile: the kernel moves each
 * activation byte about once through DRAM, which is what bounds it.
 * A block takes CT groups of V channels (CT the largest divisor of the
 * groups up to 32) of 256 / CT consecutive pixels, so with V > 1 it
 * first copies its channels' weights into shared memory as [kH*kW][CT*V],
 * and a tap's V weights are one 16-byte load too, each serving every
 * pixel of the block; else each is a scalar load. */
enum { NHWC_THREADS = 256, NHWC_MAX_W_BYTES = 32 * 1024 };

bool cg_lower_conv_depthwise_nhwc(CgBuild *b, const Node *n) {
  const Value *x = n->in[0], *w = n->in[1], *out = &n->out[0];
  const int64_t *xd = x->type.dims, *wd = w->type.dims, *od = out->type.dims;
  if (x->type.rank != 4 || wd[3] != 1 || ir_attr_int(n, "groups") != xd[3]) return false;
  int cnt;
  const int64_t *stride = ir_attr_ints(n, "stride", &cnt), *pad = ir_attr_ints(n, "pad", &cnt);
  const int64_t *dil = ir_attr_ints(n, "dilation", &cnt);
  int64_t N = xd[0], H = xd[1], W = xd[2], C = xd[3], Co = wd[0], KH = wd[1], KW = wd[2];
  int64_t OH = od[1], OW = od[2], mult = Co / C, KK = KH * KW;
  DType acc_t = out->type.dtype == TY_I32 ? TY_I32 : TY_F32;
  int64_t V = VEC_BYTES / ir_dtype_size(x->type.dtype);
  double cst;
  if (mult != 1 || C % V || V < 2 || cg_is_fused(b, x) || cg_const_of(b, x, &cst) ||
      cg_ref(b, x).offset % VEC_BYTES)
    V = 1;
  /* A block: CT channel groups (of V) by PIX pixels, CT the largest
   * divisor of the groups up to a warp, so that it stages the weights of
   * its own channels only. */
  int64_t groups_of_v = Co / V, CT = 1;
  for (int64_t d = 1; d <= 32 && d <= groups_of_v; d++)
    if (groups_of_v % d == 0) CT = d;
  int64_t PIX = NHWC_THREADS / CT, threads = CT * PIX, pixels = N * OH * OW, blocks = cg_cdiv(pixels, PIX);
  if (blocks > INT32_MAX || groups_of_v / CT > 65535) return false;
  Ctx *c = cg_build_ctx(b);
  const CgGroup *grp = cg_group(b);
  const char *what = arena_printf(&c->arena, "%sdepthwise, channels last, %" PRId64 " channel%s a thread%s",
                                  grp ? arena_printf(&c->arena, "#k%d ", grp->id) : "", V, V == 1 ? "" : "s",
                                  V > 1 ? ", 16-byte loads" : "");
  Kernel *k = new_kernel(b, n, "dw", what);
  KBuf *acc = cg_klocal(k, "acc", acc_t, V, KSP_REGISTER);
  KVar *bt = cg_kvar(k, "bt", KT_INDEX), *bc = cg_kvar(k, "bc", KT_INDEX), *t = cg_kvar(k, "t", KT_INDEX);
  KStmt *lx = cg_kloop(k, &k->body, bt, ki(k, blocks), KM_GRID_X);
  KStmt *ly = cg_kloop(k, &lx->body, bc, ki(k, groups_of_v / CT), KM_GRID_Y);
  KBlock *body = &cg_kloop(k, &ly->body, t, ki(k, threads), KM_BLOCK_X)->body;
  /* the block's first output channel */
  KExpr *cb = ilet(k, body, "cb", cg_kmul(k, kv(k, bc), ki(k, CT * V)));
  KBuf *ws = NULL;
  DType wt = w->type.dtype;
  int64_t CW = CT * V; /* the block's channels */
  if (V > 1 && CW * KK * ir_dtype_size(wt) <= NHWC_MAX_W_BYTES && VEC_BYTES / ir_dtype_size(wt) == V) {
    /* ws[q * CW + cl] = w[(cb + cl) * KK + q], every thread of the block */
    ws = cg_klocal(k, "ws", wt, CW * KK, KSP_SHARED);
    KVar *l = cg_kvar(k, "l", KT_INDEX);
    KBlock *lb = &cg_kloop(k, body, l, ki(k, cg_cdiv(CW * KK, threads)), KM_SERIAL)->body;
    KExpr *wi = ilet(k, lb, "wi", cg_kadd(k, kv(k, t), cg_kmul(k, kv(k, l), ki(k, threads))));
    if ((CW * KK) % threads) lb = &cg_kif(k, lb, klt(k, wi, ki(k, CW * KK)))->body;
    KExpr *src = cg_kadd(k, cg_kmul(k, cg_kadd(k, cb, kmod(k, wi, CW)), ki(k, KK)), kdiv(k, wi, CW));
    cg_kstore(k, lb, ws, wi, cg_operand_load(b, k, lb, w, "w", src));
    cg_kbarrier(k, body);
  }
  /* thread t: channel group t % CT of the block's, pixel t / CT of its */
  KExpr *pix = ilet(k, body, "pix", cg_kadd(k, cg_kmul(k, kv(k, bt), ki(k, PIX)), kdiv(k, kv(k, t), CT)));
  if (pixels % PIX) body = &cg_kif(k, body, klt(k, pix, ki(k, pixels)))->body;
  KExpr *cl0 = ilet(k, body, "cl0", cg_kmul(k, kmod(k, kv(k, t), CT), ki(k, V)));
  KExpr *co0 = ilet(k, body, "co0", cg_kadd(k, cb, cl0));
  KExpr *ow = ilet(k, body, "ow", kmod(k, pix, OW));
  KExpr *oh = ilet(k, body, "oh", kmod(k, kdiv(k, pix, OW), OH));
  KExpr *img = ilet(k, body, "img", kdiv(k, pix, OW * OH));
  KExpr *ci0 = mult == 1 ? co0 : ilet(k, body, "ci0", kdiv(k, co0, mult));
  KVar *j, *kh, *kw;
  KBlock *zb = &cg_kloop(k, body, j = cg_kvar(k, "j", KT_INDEX), ki(k, V), KM_UNROLL)->body;
  cg_kstore(k, zb, acc, kv(k, j), cg_kimm(k, 0, acc_t));
  KBlock *hb = &cg_kloop(k, body, kh = cg_kvar(k, "kh", KT_INDEX), ki(k, KH), KM_UNROLL)->body;
  KBlock *vb = &cg_kloop(k, hb, kw = cg_kvar(k, "kw", KT_INDEX), ki(k, KW), KM_UNROLL)->body;
  KExpr *ih = ilet(k, vb, "ih", cg_kidx(k, KI_SUB, cg_kadd(k, cg_kmul(k, oh, ki(k, stride[0])), cg_kmul(k, kv(k, kh), ki(k, dil[0]))), ki(k, pad[0])));
  KExpr *iw = ilet(k, vb, "iw", cg_kidx(k, KI_SUB, cg_kadd(k, cg_kmul(k, ow, ki(k, stride[1])), cg_kmul(k, kv(k, kw), ki(k, dil[1]))), ki(k, pad[1])));
  KExpr *inside = cg_kand(k, cg_kand(k, cg_kcmp(k, KC_GE, ih, ki(k, 0)), klt(k, ih, ki(k, H))),
                          cg_kand(k, cg_kcmp(k, KC_GE, iw, ki(k, 0)), klt(k, iw, ki(k, W))));
  KExpr *xi = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, img, ki(k, H)), ih), ki(k, W)), iw), ki(k, C)), ci0);
  KExpr *tap = cg_kadd(k, cg_kmul(k, kv(k, kh), ki(k, KW)), kv(k, kw));
  KStmt *g = cg_kif(k, vb, inside);
  KVar *xv = V > 1 ? cg_kvload(k, &g->body, "xv", global_of(b, k, x, "x"), xi, (int)V) : NULL;
  KVar *wvec = ws ? cg_kvload(k, &g->body, "wv", ws, cg_kadd(k, cg_kmul(k, tap, ki(k, CW)), cl0), (int)V) : NULL;
  int64_t zp = cg_zero_point(n);
  for (int64_t l = 0; l < V; l++) {
    KExpr *co = cg_kadd(k, co0, ki(k, l));
    KExpr *wv = cg_kcast(k, wvec ? cg_klane(k, wvec, (int)V, (int)l)
                                 : cg_operand_load(b, k, &g->body, w, "w", cg_kadd(k, cg_kmul(k, co, ki(k, KK)), tap)),
                         acc_t);
    KExpr *xl = xv ? cg_klane(k, xv, (int)V, (int)l) : cg_operand_load(b, k, &g->body, x, "x", xi);
    KExpr *prod = cg_kop2(k, OP_MUL, cg_kcast(k, xl, acc_t), wv);
    cg_kstore(k, &g->body, acc, ki(k, l), cg_kop2(k, OP_ADD, cg_kload(k, acc, ki(k, l)), prod));
    if (zp) { /* int8's padding reads the zero point (a real 0) */
      KExpr *wp = cg_kcast(k, cg_operand_load(b, k, &g->orelse, w, "w", cg_kadd(k, cg_kmul(k, co, ki(k, KK)), tap)), acc_t);
      KExpr *pp = cg_kop2(k, OP_MUL, cg_kimm(k, (double)zp, acc_t), wp);
      cg_kstore(k, &g->orelse, acc, ki(k, l), cg_kop2(k, OP_ADD, cg_kload(k, acc, ki(k, l)), pp));
    }
  }
  KExpr *o0 = ilet(k, body, "o", cg_kadd(k, cg_kmul(k, pix, ki(k, Co)), co0));
  for (int64_t l = 0; l < V; l++) {
    KExpr *co = cg_kadd(k, co0, ki(k, l)), *val = cg_kload(k, acc, ki(k, l));
    if (n->n_in > 2)
      val = cg_kop2(k, OP_ADD, val, cg_kcast(k, cg_operand_load(b, k, body, n->in[2], "bias", co), acc_t));
    KExpr *oi = cg_kadd(k, o0, ki(k, l));
    if (!cg_fused_store(b, k, body, out, oi, val))
      cg_kstore(k, body, global_of(b, k, out, "out"), oi, cg_kcast(k, val, out->type.dtype));
  }
  k->grid[0] = (uint32_t)blocks;
  k->grid[1] = (uint32_t)(groups_of_v / CT);
  k->block[0] = (uint32_t)threads;
  cg_launch(b, k);
  return true;
}
