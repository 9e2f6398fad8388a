/* Lowering of the training ops (ops.def's last rows: conv_weight_grad,
 * the pools' gradients, embedding_grad, dropout, resize_grad, and
 * optim_update, whose nodes share kernels): takes one such node,
 * appends its kernels to the plan being built.  Each is a gather with one
 * thread per result element, so nothing needs atomics and every sum runs
 * in the order ir/train_ops.c gives it; f32 sums, as the other kernels.
 * Also the CUDA text of dropout's generator (cg_cuda_philox). */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "codegen.h"
#include "ir/eval.h"
#include "kernel.h"

static int64_t numel(const TensorType *t) { return ir_type_numel(t); }

static KBuf *buf_of(CgBuild *b, Kernel *k, const Value *v, const char *name) {
  return cg_kglobal(k, name, v->type.dtype, numel(&v->type), cg_ref(b, v));
}

static KExpr *load_f32(CgBuild *b, Kernel *k, const Value *v, const char *name, KExpr *at) {
  return cg_kcast(k, cg_kload(k, buf_of(b, k, v, name), at), TY_F32);
}

/* out[at], or the fusion group's epilogue there when out is its anchor
 * (a pool's gradient, then a relu's). */
static void store(CgBuild *b, Kernel *k, KBlock *blk, const Value *out, KExpr *at, KExpr *value) {
  value = cg_kcast(k, value, out->type.dtype);
  if (cg_fused_store(b, k, blk, out, at, value)) return;
  cg_kstore(k, blk, buf_of(b, k, out, "out"), at, value);
}

static KExpr *iv(Kernel *k, int64_t v) { return cg_kint(k, v); }
static KExpr *idx(Kernel *k, KIdxOp op, KExpr *a, int64_t v) { return cg_kidx(k, op, a, iv(k, v)); }

/* One thread per element of a space of `total`: the grid-stride loop's
 * body, and the element's index in *i. */
static KBlock *each(Kernel *k, int64_t total, KExpr **i) {
  KVar *n = cg_kparam(k, "n", KT_INDEX, total, 0);
  KVar *v = cg_kvar(k, "i", KT_INDEX);
  KStmt *loop = cg_kloop(k, &k->body, v, cg_kv(k, n), KM_GRID_STRIDE);
  cg_kernel_grid_1d(k, total);
  *i = cg_kv(k, v);
  return &loop->body;
}

static KBlock *serial(Kernel *k, KBlock *in, const char *stem, int64_t trips, KExpr **var) {
  KVar *v = cg_kvar(k, stem, KT_INDEX);
  *var = cg_kv(k, v);
  return &cg_kloop(k, in, v, iv(k, trips), KM_SERIAL)->body;
}

static KVar *let(Kernel *k, KBlock *in, const char *stem, KExpr *v) {
  return cg_klet(k, in, stem, v->dtype, v);
}

static void add_to(Kernel *k, KBlock *in, KVar *acc, KExpr *v) {
  cg_kset(k, in, acc, cg_kop2(k, OP_ADD, cg_kv(k, acc), v));
}

/* A window's geometry: the pool's or convolution's attributes over the
 * spatial dims of x (its input) and y (its result). */
typedef struct Geo {
  int nsp;
  int64_t in[3], out[3], k[3], stride[3], lo[3], hi[3], dil[3];
  int64_t in_size, out_size, k_size;
} Geo;

static Geo geo_of(const Node *n, const TensorType *x, const TensorType *y) {
  Geo g = {.nsp = x->rank - 2, .in_size = 1, .out_size = 1, .k_size = 1};
  int c;
  const int64_t *kern = ir_attr_ints(n, "kernel", &c), *stride = ir_attr_ints(n, "stride", &c);
  const int64_t *pad = ir_attr_ints(n, "pad", &c), *dil = ir_attr_ints(n, "dilation", &c);
  for (int d = 0; d < g.nsp; d++) {
    g.in[d] = x->dims[2 + d], g.out[d] = y->dims[2 + d], g.k[d] = kern[d];
    g.stride[d] = stride[d], g.lo[d] = pad[d], g.hi[d] = pad[g.nsp + d], g.dil[d] = dil[d];
    g.in_size *= g.in[d], g.out_size *= g.out[d], g.k_size *= g.k[d];
  }
  return g;
}

/* Coordinate d of linear position p over dims[0..nsp). */
static KExpr *coord(Kernel *k, KExpr *p, const int64_t *dims, int nsp, int d) {
  int64_t inner = 1;
  for (int j = d + 1; j < nsp; j++) inner *= dims[j];
  KExpr *c = idx(k, KI_DIV, p, inner);
  return d ? idx(k, KI_MOD, c, dims[d]) : c;
}

/* Input positions of tap t of output position o, per dim (lets into
 * blk), and whether all lie inside x (NULL: always). */
static KExpr *tap_pos(Kernel *k, KBlock *blk, const Geo *g, KExpr *o, KExpr *t, KVar **pos) {
  KExpr *inside = NULL;
  for (int d = 0; d < g->nsp; d++) {
    KExpr *p = cg_kadd(k, idx(k, KI_MUL, coord(k, o, g->out, g->nsp, d), g->stride[d]),
                       idx(k, KI_MUL, coord(k, t, g->k, g->nsp, d), g->dil[d]));
    pos[d] = let(k, blk, "p", idx(k, KI_SUB, p, g->lo[d]));
    inside = cg_kand(k, inside, cg_kcmp(k, KC_GE, cg_kv(k, pos[d]), iv(k, 0)));
    inside = cg_kand(k, inside, cg_kcmp(k, KC_LT, cg_kv(k, pos[d]), iv(k, g->in[d])));
  }
  return inside;
}

static KExpr *linear(Kernel *k, KVar *const *pos, const int64_t *dims, int nsp) {
  KExpr *at = iv(k, 0);
  for (int d = 0; d < nsp; d++) at = cg_kadd(k, idx(k, KI_MUL, at, dims[d]), cg_kv(k, pos[d]));
  return at;
}

/* ---- the weight gradient as a GEMM ----
 * dW[z cog + m][ci][tap] = sum over k = (img, o) of dy[img][z cog + m][o]
 * x[img][z Cg + ci][pos(o, tap)]: per group z a product of M = cog rows
 * of dy by N = Cg * taps rows of the im2col, over K = batch * output
 * positions, both K-contiguous within an image.  On the tensor cores in
 * f16 and bf16 (tc_gemm.c), else on the FMA GEMM (fma_gemm.c); both cut
 * the long K into slices when the tiles are fewer than the SMs. */
typedef struct WGrad {
  CgBuild *b;
  const Node *n;
  const Value *x, *dy, *out;
  Geo g;
  int64_t C, Co, Cg, cog;
} WGrad;

typedef struct WRow {
  KExpr *xc;       /* x's channel */
  KExpr *tap[3];   /* the tap's coordinate per spatial dim */
} WRow;

static void *wg_dy_row(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row) {
  WGrad *w = ctx;
  return cg_kv(k, let(k, blk, "co", cg_kadd(k, idx(k, KI_MUL, z, w->cog), row)));
}

static KExpr *wg_dy(void *ctx, void *row, Kernel *k, KBlock *blk, KExpr *z, KExpr *kk) {
  WGrad *w = ctx;
  (void)z;
  KVar *img = let(k, blk, "img", idx(k, KI_DIV, kk, w->g.out_size));
  KExpr *o = idx(k, KI_MOD, kk, w->g.out_size);
  KExpr *at = cg_kadd(k, idx(k, KI_MUL, cg_kadd(k, idx(k, KI_MUL, cg_kv(k, img), w->Co), row), w->g.out_size), o);
  return cg_kload(k, buf_of(w->b, k, w->dy, "dy"), at);
}

static void *wg_x_row(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *row) {
  WGrad *w = ctx;
  WRow *r = ARENA_NEW(&k->ctx->arena, WRow);
  KVar *t = let(k, blk, "tap", idx(k, KI_MOD, row, w->g.k_size));
  r->xc = cg_kv(k, let(k, blk, "xc", cg_kadd(k, idx(k, KI_MUL, z, w->Cg), idx(k, KI_DIV, row, w->g.k_size))));
  for (int d = 0; d < w->g.nsp; d++)
    r->tap[d] = cg_kv(k, let(k, blk, "td", coord(k, cg_kv(k, t), w->g.k, w->g.nsp, d)));
  return r;
}

static KExpr *wg_x(void *ctx, void *row, Kernel *k, KBlock *blk, KExpr *z, KExpr *kk) {
  WGrad *w = ctx;
  WRow *r = row;
  (void)z;
  KVar *img = let(k, blk, "img", idx(k, KI_DIV, kk, w->g.out_size));
  KVar *o = let(k, blk, "o", idx(k, KI_MOD, kk, w->g.out_size));
  KVar *pos[3] = {NULL};
  KExpr *inside = NULL;
  for (int d = 0; d < w->g.nsp; d++) {
    KExpr *p = cg_kadd(k, idx(k, KI_MUL, coord(k, cg_kv(k, o), w->g.out, w->g.nsp, d), w->g.stride[d]),
                       idx(k, KI_MUL, r->tap[d], w->g.dil[d]));
    pos[d] = let(k, blk, "p", idx(k, KI_SUB, p, w->g.lo[d]));
    inside = cg_kand(k, inside, cg_kcmp(k, KC_GE, cg_kv(k, pos[d]), iv(k, 0)));
    inside = cg_kand(k, inside, cg_kcmp(k, KC_LT, cg_kv(k, pos[d]), iv(k, w->g.in[d])));
  }
  KExpr *at = cg_kadd(k, idx(k, KI_MUL, cg_kadd(k, idx(k, KI_MUL, cg_kv(k, img), w->C), r->xc), w->g.in_size),
                      linear(k, pos, w->g.in, w->g.nsp));
  if (!inside) return cg_kload(k, buf_of(w->b, k, w->x, "x"), at);
  return cg_operand_load_or(w->b, k, blk, w->x, "x", at, inside, 0);
}

static void wg_store(void *ctx, Kernel *k, KBlock *blk, KExpr *z, KExpr *m, KExpr *n, KExpr *acc) {
  WGrad *w = ctx;
  KExpr *at = cg_kadd(k, idx(k, KI_MUL, cg_kadd(k, idx(k, KI_MUL, z, w->cog), m), w->Cg * w->g.k_size), n);
  store(w->b, k, blk, w->out, cg_kv(k, let(k, blk, "wi", at)), acc);
}

/* conv_weight_grad as the GEMM above; false, having done nothing, for
 * operands of two dtypes or an empty product (the direct loop takes
 * them). */
static bool conv_weight_grad_gemm(CgBuild *b, const Node *n) {
  const Value *x = n->in[0], *dy = n->in[1], *out = &n->out[0];
  if (x->type.dtype != dy->type.dtype || ir_dtype_is_float(x->type.dtype) == false) return false;
  Ctx *c = cg_build_ctx(b);
  WGrad *w = ARENA_NEW(&c->arena, WGrad);
  *w = (WGrad){.b = b, .n = n, .x = x, .dy = dy, .out = out, .g = geo_of(n, &x->type, &dy->type)};
  int64_t groups = ir_attr_int(n, "groups");
  w->C = x->type.dims[1], w->Co = out->type.dims[0], w->Cg = out->type.dims[1], w->cog = w->Co / groups;
  int64_t K = x->type.dims[0] * w->g.out_size;
  if (K == 0 || numel(&out->type) == 0) return false;
  const CgOptions *o = cg_options(b);
  KTcKind tc = KTC_F16;
  bool on_tc = !o->no_tensor_cores && cg_tc_kind(x->type.dtype, o->tf32, &tc);
  const CgGroup *grp = cg_group(b);
  CgTcGemm g = {
      .node = n,
      .hint = grp && grp->anchor == n && grp->n > 1 ? cg_group_hint(c, grp) : ir_ops[n->op].name,
      .what = "weight gradient as a gemm",
      .tc = tc,
      .m = w->cog,
      .n = w->Cg * w->g.k_size,
      .k = K,
      .batch = groups,
      .a = {.rows = w->cog, .k_major = true, .row_begin = wg_dy_row, .element = wg_dy},
      .b = {.rows = w->Cg * w->g.k_size, .k_major = true, .row_begin = wg_x_row, .element = wg_x},
      .ctx = w,
      .store = wg_store,
  };
  if (on_tc)
    cg_tc_gemm(b, &g);
  else
    cg_fma_gemm(b, &g);
  return true;
}

/* dW[co, ci, t]: over the batch, then the output positions, one thread
 * per weight (what conv_weight_grad_gemm leaves). */
static void lower_conv_weight_grad(CgBuild *b, const Node *n) {
  if (conv_weight_grad_gemm(b, n)) return;
  const Value *x = n->in[0], *dy = n->in[1], *out = &n->out[0];
  Geo g = geo_of(n, &x->type, &dy->type);
  int64_t N = x->type.dims[0], C = x->type.dims[1], Co = out->type.dims[0], Cg = out->type.dims[1];
  int64_t cog = Co / ir_attr_int(n, "groups");
  Kernel *k = cg_kernel_new(cg_build_ctx(b), n, ir_ops[n->op].name, NULL);
  KExpr *i, *nb, *o;
  KBlock *body = each(k, numel(&out->type), &i);
  KVar *t = let(k, body, "t", idx(k, KI_MOD, i, g.k_size));
  KVar *row = let(k, body, "row", idx(k, KI_DIV, i, g.k_size));
  KVar *co = let(k, body, "co", idx(k, KI_DIV, cg_kv(k, row), Cg));
  KExpr *xc = cg_kadd(k, idx(k, KI_MUL, idx(k, KI_DIV, cg_kv(k, co), cog), Cg),
                      idx(k, KI_MOD, cg_kv(k, row), Cg));
  KVar *xch = let(k, body, "xc", xc);
  KVar *acc = cg_klet(k, body, "acc", TY_F32, cg_kimm(k, 0, TY_F32));
  KBlock *per_b = serial(k, body, "b", N, &nb);
  KBlock *per_o = serial(k, per_b, "o", g.out_size, &o);
  KVar *pos[3];
  KExpr *inside = tap_pos(k, per_o, &g, o, cg_kv(k, t), pos);
  KBlock *hit = inside ? &cg_kif(k, per_o, inside)->body : per_o;
  KExpr *dyi = cg_kadd(k, idx(k, KI_MUL, cg_kadd(k, idx(k, KI_MUL, nb, Co), cg_kv(k, co)), g.out_size), o);
  KExpr *xi = cg_kadd(k, idx(k, KI_MUL, cg_kadd(k, idx(k, KI_MUL, nb, C), cg_kv(k, xch)), g.in_size),
                      linear(k, pos, g.in, g.nsp));
  add_to(k, hit, acc, cg_kop2(k, OP_MUL, load_f32(b, k, dy, "dy", dyi), load_f32(b, k, x, "x", xi)));
  store(b, k, body, out, i, cg_kv(k, acc));
  cg_launch(b, k);
}

/* The product of the per-dim counts of window o's taps inside x (or,
 * with pad, inside the padded input): the avgpool's divisor. */
static KExpr *window_count(Kernel *k, KBlock *blk, const Geo *g, KVar *const *opos, bool pad) {
  KExpr *count = iv(k, 1);
  for (int d = 0; d < g->nsp; d++) {
    KVar *c = cg_klet(k, blk, "cnt", KT_INDEX, iv(k, 0));
    KExpr *kv;
    KBlock *loop = serial(k, blk, "kk", g->k[d], &kv);
    KExpr *p = cg_kadd(k, idx(k, KI_MUL, cg_kv(k, opos[d]), g->stride[d]), idx(k, KI_MUL, kv, g->dil[d]));
    KVar *pv = let(k, loop, "q", idx(k, KI_SUB, p, g->lo[d]));
    int64_t lo = pad ? -g->lo[d] : 0, hi = pad ? g->in[d] + g->hi[d] : g->in[d];
    KExpr *in = cg_kand(k, cg_kcmp(k, KC_GE, cg_kv(k, pv), iv(k, lo)), cg_kcmp(k, KC_LT, cg_kv(k, pv), iv(k, hi)));
    add_to(k, &cg_kif(k, loop, in)->body, c, iv(k, 1));
    count = cg_kmul(k, count, cg_kv(k, c));
  }
  return count;
}

/* The first maximum of window o (linear over the output plane) in plane
 * base of x, as eval.c's maxpool picks it: an index into the plane. */
static KVar *window_argmax(CgBuild *b, Kernel *k, KBlock *blk, const Geo *g, const Value *x, KExpr *base,
                           KExpr *o) {
  KVar *m = cg_klet(k, blk, "m", TY_F32, cg_kimm(k, -INFINITY, TY_F32));
  KVar *arg = cg_klet(k, blk, "arg", KT_INDEX, iv(k, -1));
  KExpr *t;
  KBlock *taps = serial(k, blk, "t", g->k_size, &t);
  KVar *pos[3];
  KExpr *inside = tap_pos(k, taps, g, o, t, pos);
  KBlock *in = inside ? &cg_kif(k, taps, inside)->body : taps;
  KVar *at = let(k, in, "at", linear(k, pos, g->in, g->nsp));
  KVar *v = let(k, in, "v", load_f32(b, k, x, "x", cg_kadd(k, base, cg_kv(k, at))));
  KExpr *vnan = cg_kcmp(k, KC_NE, cg_kv(k, v), cg_kv(k, v));
  KExpr *mnum = cg_kcmp(k, KC_EQ, cg_kv(k, m), cg_kv(k, m));
  KExpr *better = cg_kand(k, cg_kor(k, vnan, cg_kcmp(k, KC_GT, cg_kv(k, v), cg_kv(k, m))), mnum);
  KStmt *take = cg_kif(k, in, cg_kor(k, cg_kcmp(k, KC_LT, cg_kv(k, arg), iv(k, 0)), better));
  cg_kset(k, &take->body, m, cg_kv(k, v));
  cg_kset(k, &take->body, arg, cg_kv(k, at));
  return arg;
}

/* dx[c, p]: every window that has p as a tap, in increasing order (taps
 * in decreasing order), adds its share. */
static void lower_pool_grad(CgBuild *b, const Node *n) {
  bool avg = n->op == OP_AVGPOOL_GRAD;
  const Value *dy = n->in[0], *x = avg ? NULL : n->in[1], *out = &n->out[0];
  Geo g = geo_of(n, &out->type, &dy->type);
  Kernel *k = cg_kernel_new(cg_build_ctx(b), n, ir_ops[n->op].name, NULL);
  KExpr *i, *t;
  KBlock *body = each(k, numel(&out->type), &i);
  KVar *plane = let(k, body, "plane", idx(k, KI_DIV, i, g.in_size));
  KVar *p = let(k, body, "pos", idx(k, KI_MOD, i, g.in_size));
  KVar *acc = cg_klet(k, body, "acc", TY_F32, cg_kimm(k, 0, TY_F32));
  KBlock *taps = serial(k, body, "t", g.k_size, &t);
  KVar *tr = let(k, taps, "tr", cg_kidx(k, KI_SUB, iv(k, g.k_size - 1), t));
  /* Window o has p at tap tr when o * stride = p + lo - tr * dil per dim. */
  KVar *opos[3];
  KExpr *hit = NULL;
  for (int d = 0; d < g.nsp; d++) {
    KExpr *num = cg_kidx(k, KI_SUB, idx(k, KI_ADD, coord(k, cg_kv(k, p), g.in, g.nsp, d), g.lo[d]),
                         idx(k, KI_MUL, coord(k, cg_kv(k, tr), g.k, g.nsp, d), g.dil[d]));
    KVar *nv = let(k, taps, "num", num);
    opos[d] = let(k, taps, "op", idx(k, KI_DIV, cg_kv(k, nv), g.stride[d]));
    hit = cg_kand(k, hit, cg_kcmp(k, KC_GE, cg_kv(k, nv), iv(k, 0)));
    hit = cg_kand(k, hit, cg_kcmp(k, KC_EQ, idx(k, KI_MOD, cg_kv(k, nv), g.stride[d]), iv(k, 0)));
    hit = cg_kand(k, hit, cg_kcmp(k, KC_LT, cg_kv(k, opos[d]), iv(k, g.out[d])));
  }
  KBlock *win = &cg_kif(k, taps, hit)->body;
  KVar *o = let(k, win, "o", linear(k, opos, g.out, g.nsp));
  KExpr *d = load_f32(b, k, dy, "dy", cg_kadd(k, idx(k, KI_MUL, cg_kv(k, plane), g.out_size), cg_kv(k, o)));
  if (avg) {
    KExpr *div = window_count(k, win, &g, opos, ir_attr_int(n, "count_include_pad") != 0);
    add_to(k, win, acc, cg_kop2(k, OP_DIV, d, cg_kcast(k, div, TY_F32)));
  } else {
    KVar *arg = window_argmax(b, k, win, &g, x, idx(k, KI_MUL, cg_kv(k, plane), g.in_size), cg_kv(k, o));
    add_to(k, &cg_kif(k, win, cg_kcmp(k, KC_EQ, cg_kv(k, arg), cg_kv(k, p)))->body, acc, d);
  }
  store(b, k, body, out, i, cg_kv(k, acc));
  cg_launch(b, k);
}

/* A fill of zeros, then one thread per column adds the rows of dy into
 * the rows their ids name, in order: deterministic without atomics, and
 * the work is the size of dy.  An id out of range is reported (as
 * eval.c's error) and adds nothing. */
static void lower_embedding_grad(CgBuild *b, const Node *n) {
  const Value *dy = n->in[0], *ids = n->in[1], *out = &n->out[0];
  int64_t num = out->type.dims[0], rows = numel(&ids->type), width = numel(&out->type) / num;
  cg_fill(b, n, "zero", cg_ref(b, out), TY_F32, numel(&out->type), 0);
  Kernel *k = cg_kernel_new(cg_build_ctx(b), n, ir_ops[n->op].name, NULL);
  KExpr *j, *r;
  KBlock *body = each(k, width, &j);
  KBlock *per_row = serial(k, body, "r", rows, &r);
  KExpr *raw = cg_kload(k, buf_of(b, k, ids, "ids"), r);
  KVar *at = let(k, per_row, "at", cg_kcast(k, cg_index_reported(b, k, per_row, r, raw, 0, num), KT_INDEX));
  KExpr *ok = cg_kand(k, cg_kcmp(k, KC_GE, cg_kv(k, at), iv(k, 0)), cg_kcmp(k, KC_LT, cg_kv(k, at), iv(k, num)));
  KBlock *hit = &cg_kif(k, per_row, ok)->body;
  KBuf *o = buf_of(b, k, out, "out");
  KExpr *oi = cg_kadd(k, idx(k, KI_MUL, cg_kv(k, at), width), j);
  KExpr *sum = cg_kop2(k, OP_ADD, cg_kload(k, o, oi), load_f32(b, k, dy, "dy", cg_kadd(k, idx(k, KI_MUL, r, width), j)));
  cg_kstore(k, hit, o, oi, sum);
  cg_launch(b, k);
}

/* As ir_dropout_bits, for the kernels (integer arithmetic only, so the
 * mask is the interpreter's bit for bit). */
/* clang-format off */
static const char philox_text[] =
    "/* Dropout's draw (ir/train_ops.c): the top 24 bits of word i % 4 of\n"
    " * Philox4x32-10 under the seed at counter (i / 4, stream, offset). */\n"
    "__device__ __forceinline__ long long dl_dropout_bits(long long seed, long long offset, long long i,\n"
    "                                                     unsigned stream) {\n"
    "  unsigned long long blk = (unsigned long long)i >> 2;\n"
    "  unsigned c0 = (unsigned)blk, c1 = (unsigned)(blk >> 32), c2 = stream, c3 = (unsigned)offset;\n"
    "  unsigned k0 = (unsigned)seed, k1 = (unsigned)((unsigned long long)seed >> 32);\n"
    "  for (int r = 0; r < 10; r++) {\n"
    "    if (r) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;\n"
    "    unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;\n"
    "    c0 = (unsigned)(p1 >> 32) ^ c1 ^ k0;\n"
    "    c1 = (unsigned)p1;\n"
    "    c2 = (unsigned)(p0 >> 32) ^ c3 ^ k1;\n"
    "    c3 = (unsigned)p0;\n"
    "  }\n"
    "  unsigned w = (i & 3) == 0 ? c0 : (i & 3) == 1 ? c1 : (i & 3) == 2 ? c2 : c3;\n"
    "  return (long long)(w >> 8);\n"
    "}\n";
/* clang-format on */

const char *cg_cuda_philox(void) { return philox_text; }

/* The 24 bits element i of a draw of type t takes (ir_dropout_bits):
 * operands seed, offset [, first] from at, with n's stream and batch. */
static KExpr *draw_bits(CgBuild *b, Kernel *k, const Node *n, int at, const TensorType *t, KExpr *i) {
  KExpr *seed = cg_kload(k, buf_of(b, k, n->in[at], "seed"), iv(k, 0));
  KExpr *bits = cg_kop2(k, OP_DROPOUT, seed, cg_kload(k, buf_of(b, k, n->in[at + 1], "offset"), iv(k, 0)));
  DrawPart part = ir_draw_part(n, t);
  bits->a[2] = cg_kcast(k, i, TY_I64);
  if (part.skip || part.at) {
    /* this block's place in the whole tensor (kdiv on the index, which
     * fits its type; the product in i64, which the whole needs) */
    KExpr *skip = cg_kop2(k, OP_MUL, cg_kcast(k, idx(k, KI_DIV, i, part.block), TY_I64), cg_kimm(k, (double)part.skip, TY_I64));
    bits->a[2] = cg_kop2(k, OP_ADD, bits->a[2], cg_kop2(k, OP_ADD, skip, cg_kimm(k, (double)part.at, TY_I64)));
  }
  if (n->n_in > at + 2) {
    /* ir_dropout_base, with first read at run time */
    int64_t per = ir_dropout_base(&part.whole, ir_attr_int(n, "batch"), 1);
    KExpr *first = cg_kload(k, buf_of(b, k, n->in[at + 2], "first"), iv(k, 0));
    bits->a[2] = cg_kop2(k, OP_ADD, bits->a[2], cg_kop2(k, OP_MUL, first, cg_kimm(k, (double)per, TY_I64)));
  }
  bits->i = ir_attr_int(n, "stream");
  bits->dtype = TY_I64;
  return bits;
}

static void lower_dropout(CgBuild *b, const Node *n) {
  const Value *x = n->in[0], *out = &n->out[0];
  double p = ir_attr_float(n, "p");
  Kernel *k = cg_kernel_new(cg_build_ctx(b), n, ir_ops[n->op].name, NULL);
  KExpr *i;
  KBlock *body = each(k, numel(&out->type), &i);
  KExpr *bits = draw_bits(b, k, n, 1, &x->type, i);
  KExpr *keep = cg_kcmp(k, KC_GE, bits, cg_kimm(k, ir_dropout_threshold(p), TY_I64));
  KExpr *scaled = cg_kop2(k, OP_MUL, load_f32(b, k, x, "x", i), cg_kimm(k, ir_dropout_scale(p, TY_F32), TY_F32));
  store(b, k, body, out, i, cg_ksel(k, keep, scaled, cg_kimm(k, 0, TY_F32)));
  cg_launch(b, k);
}

/* bits / 2^24: exact in f32, as the interpreter's. */
static void lower_random_uniform(CgBuild *b, const Node *n) {
  const Value *out = &n->out[0];
  Kernel *k = cg_kernel_new(cg_build_ctx(b), n, ir_ops[n->op].name, NULL);
  KExpr *i;
  KBlock *body = each(k, numel(&out->type), &i);
  KExpr *u = cg_kop2(k, OP_MUL, cg_kcast(k, draw_bits(b, k, n, 0, &out->type, i), TY_F32),
                     cg_kimm(k, 1.0 / 16777216.0, TY_F32));
  store(b, k, body, out, i, u);
  cg_launch(b, k);
}

/* resize along one axis in exact integers, as lower_window.c's resize:
 * output d reads lo = num / den and lo + 1 (at most in - 1) with weight
 * (num % den) / den; nearest reads d * in / out. */
typedef struct ResizeAxis {
  bool linear, align;
  int64_t in, out, num_mul, num_add, den;
} ResizeAxis;

static ResizeAxis resize_axis_of(bool linear, bool align, int64_t in, int64_t out) {
  ResizeAxis a = {linear, align, in, out, in, 0, out};
  if (linear && align) a.num_mul = out > 1 ? in - 1 : 0, a.den = out > 1 ? out - 1 : 1;
  if (linear && !align) a.num_mul = 2 * in, a.num_add = in - out, a.den = 2 * out; /* (2d + 1) in - out */
  return a;
}

static int64_t axis_num(const ResizeAxis *a, int64_t d) {
  int64_t num = d * a->num_mul + a->num_add;
  return num < 0 ? 0 : num;
}

/* The first output that can read input p: lo(d) >= p - 1 (p for
 * nearest), where num is not clamped, so the bound is exact or low. */
static int64_t first_reader(const ResizeAxis *a, int64_t p) {
  int64_t t = a->linear ? p - 1 : p;
  if (t <= 0 || a->num_mul == 0) return 0;
  int64_t f = (t * a->den - a->num_add + a->num_mul - 1) / a->num_mul;
  return f > 0 ? f : 0;
}

static KExpr *first_reader_k(Kernel *k, const ResizeAxis *a, KExpr *p) {
  if (a->num_mul == 0) return iv(k, 0);
  KExpr *t = a->linear ? idx(k, KI_SUB, p, 1) : p;
  KExpr *f = idx(k, KI_DIV, idx(k, KI_ADD, idx(k, KI_MUL, t, a->den), a->num_mul - 1 - a->num_add), a->num_mul);
  return cg_ksel(k, cg_kcmp(k, KC_GT, t, iv(k, 0)), cg_kidx(k, KI_MAX, f, iv(k, 0)), iv(k, 0));
}

/* How many outputs from first_reader(p) on cover every reader of any p. */
static int64_t reader_span(const ResizeAxis *a) {
  int64_t span = 1;
  for (int64_t d = 0; d < a->out; d++) {
    int64_t lo = axis_num(a, d) / a->den, hi = a->linear && lo < a->in - 1 ? lo + 1 : lo;
    for (int64_t p = lo; p <= hi; p++) {
      int64_t s = d - first_reader(a, p) + 1;
      span = s > span ? s : span;
    }
  }
  return span;
}

/* Output d's weight on input p (lets into blk). */
static KExpr *reader_weight(Kernel *k, KBlock *blk, const ResizeAxis *a, KExpr *d, KExpr *p) {
  KExpr *num = cg_kadd(k, idx(k, KI_MUL, d, a->num_mul), iv(k, a->num_add));
  KVar *nv = let(k, blk, "num", cg_kidx(k, KI_MAX, num, iv(k, 0)));
  KVar *lo = let(k, blk, "lo", idx(k, KI_DIV, cg_kv(k, nv), a->den));
  KExpr *zero = cg_kimm(k, 0, TY_F32), *one = cg_kimm(k, 1, TY_F32);
  if (!a->linear) return cg_ksel(k, cg_kcmp(k, KC_EQ, cg_kv(k, lo), p), one, zero);
  KVar *f = let(k, blk, "f", cg_kop2(k, OP_DIV, cg_kcast(k, idx(k, KI_MOD, cg_kv(k, nv), a->den), TY_F32),
                                    cg_kimm(k, (double)a->den, TY_F32)));
  KExpr *hi = cg_kidx(k, KI_MIN, idx(k, KI_ADD, cg_kv(k, lo), 1), iv(k, a->in - 1));
  KExpr *w_lo = cg_ksel(k, cg_kcmp(k, KC_EQ, cg_kv(k, lo), p), cg_kop2(k, OP_SUB, one, cg_kv(k, f)), zero);
  return cg_kop2(k, OP_ADD, w_lo, cg_ksel(k, cg_kcmp(k, KC_EQ, hi, p), cg_kv(k, f), zero));
}

/* dx[plane, h, w]: the outputs that can read row h and column w, in
 * order, each dy times its two weights. */
static void lower_resize_grad(CgBuild *b, const Node *n) {
  const Value *dy = n->in[0], *out = &n->out[0];
  bool linear = strcmp(ir_attr_str(n, "mode"), "bilinear") == 0, align = ir_attr_int(n, "align_corners") != 0;
  int64_t OH = dy->type.dims[2], OW = dy->type.dims[3], H = out->type.dims[2], W = out->type.dims[3];
  ResizeAxis ah = resize_axis_of(linear, align, H, OH), aw = resize_axis_of(linear, align, W, OW);
  Kernel *k = cg_kernel_new(cg_build_ctx(b), n, ir_ops[n->op].name, NULL);
  KExpr *i, *th, *tw;
  KBlock *body = each(k, numel(&out->type), &i);
  KVar *plane = let(k, body, "plane", idx(k, KI_DIV, i, H * W));
  KVar *h = let(k, body, "h", idx(k, KI_MOD, idx(k, KI_DIV, i, W), H));
  KVar *w = let(k, body, "w", idx(k, KI_MOD, i, W));
  KVar *oh0 = let(k, body, "oh0", first_reader_k(k, &ah, cg_kv(k, h)));
  KVar *ow0 = let(k, body, "ow0", first_reader_k(k, &aw, cg_kv(k, w)));
  KVar *acc = cg_klet(k, body, "acc", TY_F32, cg_kimm(k, 0, TY_F32));
  KBlock *rows = serial(k, body, "th", reader_span(&ah), &th);
  KVar *oh = let(k, rows, "oh", cg_kadd(k, cg_kv(k, oh0), th));
  KBlock *row = &cg_kif(k, rows, cg_kcmp(k, KC_LT, cg_kv(k, oh), iv(k, OH)))->body;
  KVar *wh = let(k, row, "wh", reader_weight(k, row, &ah, cg_kv(k, oh), cg_kv(k, h)));
  KBlock *cols = serial(k, row, "tw", reader_span(&aw), &tw);
  KVar *ow = let(k, cols, "ow", cg_kadd(k, cg_kv(k, ow0), tw));
  KBlock *col = &cg_kif(k, cols, cg_kcmp(k, KC_LT, cg_kv(k, ow), iv(k, OW)))->body;
  KExpr *ww = reader_weight(k, col, &aw, cg_kv(k, ow), cg_kv(k, w));
  KExpr *at = cg_kadd(k, idx(k, KI_MUL, cg_kadd(k, idx(k, KI_MUL, cg_kv(k, plane), OH), cg_kv(k, oh)), OW),
                      cg_kv(k, ow));
  add_to(k, col, acc, cg_kop2(k, OP_MUL, cg_kop2(k, OP_MUL, cg_kv(k, wh), ww), load_f32(b, k, dy, "dy", at)));
  store(b, k, body, out, i, cg_kv(k, acc));
  cg_launch(b, k);
}

/* ---- optim_update: a step's updates in few kernels ---- */

/* Parameters of one kernel stay under 4 KiB (CUDA's limit before 12.1):
 * six pointers a segment. */
enum { OPTIM_SEGMENTS = 48 };

static bool same_update(const Node *a, const Node *n) {
  if (a->n_in != n->n_in || a->n_attrs != n->n_attrs || ir_optim_first_state(a) != ir_optim_first_state(n))
    return false;
  for (int i = 2; i < ir_optim_first_state(n); i++)
    if (a->in[i] != n->in[i]) return false;
  for (int i = 0; i < n->n_attrs; i++) {
    const Attr *x = &a->attrs[i], *y = &n->attrs[i];
    if (strcmp(x->name, y->name) != 0 || x->kind != y->kind) return false;
    if (x->kind == AK_STR ? strcmp(x->s, y->s) != 0 : x->kind == AK_FLOAT ? x->f != y->f : x->i != y->i)
      return false;
  }
  return true;
}

/* The updates n's kernel computes (n among them), in graph order: those
 * like n (the same scalars and attributes) whose results only leave the
 * step as outputs, so that computing them all at the last one's place
 * moves no read or write past another; n alone when its results feed a
 * node.  A kernel takes OPTIM_SEGMENTS of them. */
static int optim_batch(CgBuild *b, const Node *n, const Node **batch) {
  const Graph *g = cg_build_graph(b);
  int count = 0, mine = -1;
  bool *feeds = ARENA_ARRAY(&cg_build_ctx(b)->arena, bool, g->n_nodes + 1);
  for (const Node *u = g->first; u; u = u->next)
    for (int i = 0; i < u->n_in; i++)
      if (u->in[i]->def->op == OP_OPTIM_UPDATE) feeds[u->in[i]->def->id] = true;
  if (feeds[n->id]) return batch[0] = n, 1;
  for (const Node *u = g->first; u; u = u->next) {
    if (u->op != OP_OPTIM_UPDATE || feeds[u->id] || !same_update(u, n)) continue;
    if (u == n) mine = count;
    batch[count++] = u;
  }
  int first = mine / OPTIM_SEGMENTS * OPTIM_SEGMENTS;
  int end = first + OPTIM_SEGMENTS < count ? first + OPTIM_SEGMENTS : count;
  memmove(batch, batch + first, sizeof *batch * (size_t)(end - first));
  return end - first;
}

/* The per-step factors (ir_optim_scalars; for Adam and AdamW the bias
 * corrections), the same for every element: each thread computes them
 * once, before its grid-stride loop, in double where PyTorch does, each
 * rounded to f32 (the root of the second correction: Adam's and
 * RAdam's).  RAdam's c1 is its 1 - beta1^t. */
typedef struct Scalars {
  KExpr *bc1, *bc2, *sqrt_bc2, *rect, *c1, *c2, *rectify;
} Scalars;

typedef struct Optim {
  CgBuild *b;
  Kernel *k;
  const Node *const *batch;
  const int64_t *offset; /* segment j's first element; offset[n] the total */
  KExpr *lr, *t, *scale;
  KExpr *momentum;   /* momentum_input: this step's momentum or beta1; NULL: the attributes' */
  KExpr *mu_product; /* NAdam's operand; else NULL */
  KExpr *finite;   /* skip_nonfinite: whether the scale is finite; NULL: no skipping */
  Scalars s;
} Optim;

static KExpr *scalar_of(CgBuild *b, Kernel *k, const Value *v, const char *name) {
  double c;
  if (cg_const_of(b, v, &c)) return cg_kimm(k, c, TY_F32);
  return cg_kload(k, buf_of(b, k, v, name), iv(k, 0));
}

static KExpr *f32(Kernel *k, double v) { return cg_kimm(k, v, TY_F32); }
static KExpr *fop(Kernel *k, OpKind op, KExpr *a, KExpr *b) { return cg_kop2(k, op, a, b); }

/* Stores value at ix of out, or under skip_nonfinite with a scale that
 * is not finite (GradScaler's skipped step) what operand `old` holds. */
static void put(Optim *o, KBlock *blk, KBuf *out, const Value *old, const char *stem, KExpr *ix, KExpr *value) {
  if (o->finite) value = cg_ksel(o->k, o->finite, value, cg_kload(o->k, buf_of(o->b, o->k, old, stem), ix));
  cg_kstore(o->k, blk, out, ix, value);
}

/* State k of segment j (n its update): its value at ix, and where
 * its new value goes. */
static KExpr *state_at(Optim *o, int j, int k, KExpr *ix) {
  const Node *n = o->batch[j];
  return cg_kload(o->k,
                  buf_of(o->b, o->k, n->in[ir_optim_first_state(n) + k],
                         arena_printf(&cg_build_ctx(o->b)->arena, "s%d_%d", j, k)),
                  ix);
}

static void put_state(Optim *o, KBlock *blk, int j, int k, KExpr *ix, KExpr *value) {
  const Node *n = o->batch[j];
  Arena *a = &cg_build_ctx(o->b)->arena;
  put(o, blk, buf_of(o->b, o->k, &n->out[1 + k], arena_printf(a, "s%d_%d_new", j, k)),
      n->in[ir_optim_first_state(n) + k], arena_printf(a, "s%d_%d", j, k), ix, value);
}

/* 1 - beta^t, as ir_bias_correction computes it (ir_bias_correction_f
 * for a beta of run time, log_beta its logf). */
static KExpr *bias_correction(Optim *o, KBlock *blk, double beta, KExpr *log_beta) {
  Kernel *k = o->k;
  if (!log_beta && beta == 0) return f32(k, 1);
  KVar *y = let(k, blk, "y", fop(k, OP_MUL, o->t, log_beta ? log_beta : f32(k, (float)log(beta))));
  KVar *u = let(k, blk, "u", cg_kop1(k, OP_EXP, cg_kv(k, y)));
  KVar *um1 = let(k, blk, "um1", fop(k, OP_SUB, cg_kv(k, u), f32(k, 1)));
  KExpr *kahan = cg_kop1(k, OP_NEG, fop(k, OP_DIV, fop(k, OP_MUL, cg_kv(k, um1), cg_kv(k, y)),
                                        cg_kop1(k, OP_LOG, cg_kv(k, u))));
  kahan = cg_ksel(k, cg_kcmp(k, KC_EQ, cg_kv(k, um1), f32(k, -1)), f32(k, 1), kahan);
  return cg_ksel(k, cg_kcmp(k, KC_EQ, cg_kv(k, u), f32(k, 1)), cg_kop1(k, OP_NEG, cg_kv(k, y)), kahan);
}

static KExpr *f64(Kernel *k, double v) { return cg_kimm(k, v, TY_F64); }

/* torch.lerp(a, b, w), as ir/train_ops.c's lerp: w an f32 value, known
 * here or (momentum_input) of run time. */
static KExpr *lerp(Optim *o, KBlock *blk, KExpr *a, KExpr *b, KExpr *w) {
  Kernel *k = o->k;
  KVar *av = let(k, blk, "la", a), *bv = let(k, blk, "lb", b), *wv = let(k, blk, "lw", w);
  KExpr *d = fop(k, OP_SUB, cg_kv(k, bv), cg_kv(k, av));
  KExpr *low = fop(k, OP_ADD, cg_kv(k, av), fop(k, OP_MUL, cg_kv(k, wv), d));
  KExpr *high = fop(k, OP_SUB, cg_kv(k, bv), fop(k, OP_MUL, d, fop(k, OP_SUB, f32(k, 1), cg_kv(k, wv))));
  if (w->kind == KE_FLOAT) return fabs(w->f) < 0.5 ? low : high;
  return cg_ksel(k, cg_kcmp(k, KC_LT, cg_kop1(k, OP_ABS, cg_kv(k, wv)), f32(k, 0.5)), low, high);
}

static KExpr *to_f32(Kernel *k, KExpr *x) { return cg_kcast(k, x, TY_F32); }

/* NAdam's momentum at step t (f64): beta1 (1 - 0.96^(t momentum_decay) / 2). */
static KExpr *nadam_mu(Kernel *k, KVar *beta1, KExpr *t, double md) {
  return fop(k, OP_MUL, cg_kv(k, beta1),
             fop(k, OP_SUB, f64(k, 1),
                 fop(k, OP_MUL, f64(k, 0.5), fop(k, OP_POW, f64(k, 0.96), fop(k, OP_MUL, t, f64(k, md))))));
}

/* Only the ones kind reads (Adam, AdamW: bc1, the root of bc2;
 * Adamax: c1; RAdam: bc1 in c1, the root of bc2, rect; NAdam: bc2, c1,
 * c2), each a variable of blk. */
static void step_scalars(Optim *o, KBlock *blk, const Node *n, Scalars *s) {
  Kernel *k = o->k;
  const char *kind = ir_attr_str(n, "kind");
  *s = (Scalars){.rect = f32(k, 1)};
  if (strcmp(kind, "adam") == 0 || strcmp(kind, "adamw") == 0) {
    s->bc1 = cg_kv(k, let(k, blk, "bc1", bias_correction(o, blk, ir_attr_float(n, "beta1"),
                                                         o->momentum ? cg_kop1(k, OP_LOG, o->momentum) : NULL)));
    s->sqrt_bc2 = cg_kv(k, let(k, blk, "sqrt_bc2",
                               cg_kop1(k, OP_SQRT, bias_correction(o, blk, ir_attr_float(n, "beta2"), NULL))));
    return;
  }
  if (strcmp(kind, "adamax") != 0 && strcmp(kind, "radam") != 0 && strcmp(kind, "nadam") != 0) return;
  double beta2 = ir_attr_float(n, "beta2"), md = ir_attr_float(n, "momentum_decay");
  KVar *td = let(k, blk, "td", cg_kcast(k, o->t, TY_F64)), *lr = let(k, blk, "lrd", cg_kcast(k, o->lr, TY_F64));
  KExpr *b1 = o->momentum ? cg_kcast(k, o->momentum, TY_F64) : f64(k, ir_attr_float(n, "beta1"));
  KVar *beta1 = let(k, blk, "beta1", b1);
  if (strcmp(kind, "adamax") == 0 || strcmp(kind, "radam") == 0) {
    KExpr *bc1 = fop(k, OP_SUB, f64(k, 1), fop(k, OP_POW, cg_kv(k, beta1), cg_kv(k, td)));
    s->c1 = cg_kv(k, let(k, blk, "c1",
                         to_f32(k, strcmp(kind, "radam") == 0 ? bc1
                                                              : fop(k, OP_DIV, cg_kop1(k, OP_NEG, cg_kv(k, lr)), bc1))));
  }
  if (strcmp(kind, "adamax") == 0) return;
  KVar *bc2 = let(k, blk, "bc2", fop(k, OP_SUB, f64(k, 1), fop(k, OP_POW, f64(k, beta2), cg_kv(k, td))));
  if (strcmp(kind, "radam") == 0) {
    s->sqrt_bc2 = cg_kv(k, let(k, blk, "sqrt_bc2", to_f32(k, cg_kop1(k, OP_SQRT, cg_kv(k, bc2)))));
    double rho_inf = 2 / (1 - beta2) - 1;
    KVar *rho = let(k, blk, "rho_t",
                    fop(k, OP_SUB, f64(k, rho_inf),
                        fop(k, OP_DIV,
                            fop(k, OP_MUL, fop(k, OP_MUL, f64(k, 2), cg_kv(k, td)),
                                fop(k, OP_POW, f64(k, beta2), cg_kv(k, td))),
                            cg_kv(k, bc2))));
    KExpr *r = cg_kv(k, rho);
    KExpr *num =
        fop(k, OP_MUL, fop(k, OP_MUL, fop(k, OP_SUB, r, f64(k, 4)), fop(k, OP_SUB, r, f64(k, 2))), f64(k, rho_inf));
    KExpr *den = fop(k, OP_MUL, f64(k, (rho_inf - 4) * (rho_inf - 2)), r);
    s->rectify = cg_kcmp(k, KC_GT, r, f64(k, 5));
    /* the root of a negative number is never taken: rect is used only where rho_t > 5 */
    s->rect = cg_kv(k, let(k, blk, "rect", to_f32(k, cg_kop1(k, OP_SQRT, cg_kop2(k, OP_MAXIMUM,
                                                                                  fop(k, OP_DIV, num, den), f64(k, 0))))));
  }
  if (strcmp(kind, "nadam") == 0) {
    s->bc2 = cg_kv(k, let(k, blk, "bc2f", to_f32(k, cg_kv(k, bc2))));
    KExpr *mu = nadam_mu(k, beta1, cg_kv(k, td), md);
    KVar *mu_next = let(k, blk, "mu_next", nadam_mu(k, beta1, fop(k, OP_ADD, cg_kv(k, td), f64(k, 1)), md));
    KVar *mp = let(k, blk, "mp", cg_kcast(k, o->mu_product, TY_F64));
    KExpr *neg_lr = cg_kop1(k, OP_NEG, cg_kv(k, lr));
    s->c1 = cg_kv(k, let(k, blk, "c1", to_f32(k, fop(k, OP_DIV, fop(k, OP_MUL, neg_lr, fop(k, OP_SUB, f64(k, 1), mu)),
                                                     fop(k, OP_SUB, f64(k, 1), cg_kv(k, mp))))));
    s->c2 = cg_kv(k, let(k, blk, "c2",
                         to_f32(k, fop(k, OP_DIV, fop(k, OP_MUL, neg_lr, cg_kv(k, mu_next)),
                                       fop(k, OP_SUB, f64(k, 1), fop(k, OP_MUL, cg_kv(k, mp), cg_kv(k, mu_next)))))));
  }
}

/* Adamax, Adadelta, RAdam and NAdam at segment j's element: the amount
 * p' = p - delta takes off (an exact negation of PyTorch's addition). */
static KExpr *optim_newer(Optim *o, KBlock *blk, int j, KExpr *ix, KVar *p, KVar *g) {
  Kernel *k = o->k;
  const Node *n = o->batch[j];
  const char *kind = ir_attr_str(n, "kind");
  double eps = ir_attr_float(n, "eps"), b1 = ir_attr_float(n, "beta1"), b2 = ir_attr_float(n, "beta2");
  KExpr *gv = cg_kv(k, g);
  if (strcmp(kind, "adadelta") == 0) {
    double rho = ir_attr_float(n, "rho");
    KVar *sq = let(k, blk, "sq", fop(k, OP_ADD, fop(k, OP_MUL, state_at(o, j, 0, ix), f32(k, rho)),
                                     fop(k, OP_MUL, fop(k, OP_MUL, f32(k, 1 - rho), gv), gv)));
    KVar *acc = let(k, blk, "acc", state_at(o, j, 1, ix));
    KVar *d = let(k, blk, "d",
                  fop(k, OP_MUL,
                      fop(k, OP_DIV, cg_kop1(k, OP_SQRT, fop(k, OP_ADD, cg_kv(k, acc), f32(k, eps))),
                          cg_kop1(k, OP_SQRT, fop(k, OP_ADD, cg_kv(k, sq), f32(k, eps)))),
                      gv));
    put_state(o, blk, j, 0, ix, cg_kv(k, sq));
    put_state(o, blk, j, 1, ix,
              fop(k, OP_ADD, fop(k, OP_MUL, cg_kv(k, acc), f32(k, rho)),
                  fop(k, OP_MUL, fop(k, OP_MUL, f32(k, 1 - rho), cg_kv(k, d)), cg_kv(k, d))));
    return fop(k, OP_MUL, o->lr, cg_kv(k, d));
  }
  const Scalars s = o->s;
  KExpr *w = o->momentum ? fop(k, OP_SUB, f32(k, 1), o->momentum) : f32(k, (float)(1 - b1));
  KVar *m = let(k, blk, "m", lerp(o, blk, state_at(o, j, 0, ix), gv, w));
  put_state(o, blk, j, 0, ix, cg_kv(k, m));
  if (strcmp(kind, "adamax") == 0) {
    KVar *u = let(k, blk, "u",
                  cg_kop2(k, OP_MAXIMUM, fop(k, OP_MUL, state_at(o, j, 1, ix), f32(k, b2)),
                          fop(k, OP_ADD, cg_kop1(k, OP_ABS, gv), f32(k, eps))));
    put_state(o, blk, j, 1, ix, cg_kv(k, u));
    return cg_kop1(k, OP_NEG, fop(k, OP_MUL, s.c1, fop(k, OP_DIV, cg_kv(k, m), cg_kv(k, u))));
  }
  KVar *v = let(k, blk, "v", fop(k, OP_ADD, fop(k, OP_MUL, state_at(o, j, 1, ix), f32(k, b2)),
                                 fop(k, OP_MUL, fop(k, OP_MUL, f32(k, 1 - b2), gv), gv)));
  put_state(o, blk, j, 1, ix, cg_kv(k, v));
  if (strcmp(kind, "nadam") == 0) {
    KVar *denom = let(k, blk, "denom",
                      fop(k, OP_ADD, cg_kop1(k, OP_SQRT, fop(k, OP_DIV, cg_kv(k, v), s.bc2)), f32(k, eps)));
    cg_kset(k, blk, p, fop(k, OP_ADD, cg_kv(k, p), fop(k, OP_MUL, s.c1, fop(k, OP_DIV, gv, cg_kv(k, denom)))));
    return cg_kop1(k, OP_NEG, fop(k, OP_MUL, s.c2, fop(k, OP_DIV, cg_kv(k, m), cg_kv(k, denom))));
  }
  /* radam: s.c1 holds 1 - beta1^t */
  KVar *step = let(k, blk, "step", fop(k, OP_MUL, fop(k, OP_DIV, cg_kv(k, m), s.c1), o->lr));
  KExpr *adaptive = fop(k, OP_DIV, s.sqrt_bc2, fop(k, OP_ADD, cg_kop1(k, OP_SQRT, cg_kv(k, v)), f32(k, eps)));
  return cg_ksel(k, s.rectify, fop(k, OP_MUL, fop(k, OP_MUL, cg_kv(k, step), adaptive), s.rect), cg_kv(k, step));
}

/* Segment j's element at ix: ops.def's rule for optim_update, operation
 * by operation as ir/train_ops.c computes it. */
static void optim_segment(Optim *o, KBlock *blk, int j, KExpr *ix) {
  CgBuild *b = o->b;
  Kernel *k = o->k;
  const Node *n = o->batch[j];
  Arena *a = &cg_build_ctx(b)->arena;
  /* Buffers are named wJ (the param), gJ, sJ_K (its states) and
   * *_new: a merged launch prefixes its parts' own names with pN_, which
   * a param's pJ_out would meet. */
  KVar *p = let(k, blk, "p", cg_kload(k, buf_of(b, k, n->in[0], arena_printf(a, "w%d", j)), ix));
  KExpr *g0 = fop(k, OP_MUL, cg_kload(k, buf_of(b, k, n->in[1], arena_printf(a, "g%d", j)), ix), o->scale);
  double clipv = ir_attr_float(n, "clip_value");
  if (clipv > 0) g0 = fop(k, OP_MAXIMUM, fop(k, OP_MINIMUM, g0, f32(k, clipv)), f32(k, -clipv));
  if (ir_attr_int(n, "maximize")) g0 = cg_kop1(k, OP_NEG, g0);
  KVar *g = let(k, blk, "g", g0);
  const char *kind = ir_attr_str(n, "kind"), *keys[IR_OPTIM_MAX_STATES];
  int n_states = ir_optim_node_states(n, keys);
  double wd = ir_attr_float(n, "weight_decay"), mom = ir_attr_float(n, "momentum"), eps = ir_attr_float(n, "eps");
  /* the momentum (or beta1) this step multiplies by */
  KExpr *momk = o->momentum ? o->momentum : f32(k, mom);
  bool adamw = strcmp(kind, "adamw") == 0, decoupled = adamw || ir_attr_int(n, "decoupled");
  if (wd != 0 && !decoupled) cg_kset(k, blk, g, fop(k, OP_ADD, cg_kv(k, g), fop(k, OP_MUL, f32(k, wd), cg_kv(k, p))));
  if (wd != 0 && decoupled && !adamw) /* p * (1 - lr wd), the factor in double as PyTorch's */
    cg_kset(k, blk, p,
            fop(k, OP_MUL, cg_kv(k, p),
                to_f32(k, fop(k, OP_SUB, f64(k, 1), fop(k, OP_MUL, cg_kcast(k, o->lr, TY_F64), f64(k, wd))))));
  KExpr *gg = fop(k, OP_MUL, cg_kv(k, g), cg_kv(k, g)), *delta; /* p' = p - delta */
  bool newer = strcmp(kind, "adamax") == 0 || strcmp(kind, "adadelta") == 0 || strcmp(kind, "radam") == 0 ||
               strcmp(kind, "nadam") == 0;
  if (newer) {
    delta = optim_newer(o, blk, j, ix, p, g);
  } else if (strcmp(kind, "sgd") == 0) {
    if (n_states) {
      KExpr *later = fop(k, OP_ADD, fop(k, OP_MUL, state_at(o, j, 0, ix), momk),
                         fop(k, OP_MUL, cg_kv(k, g), f32(k, 1 - ir_attr_float(n, "dampening"))));
      KVar *buf = let(k, blk, "buf", cg_ksel(k, cg_kcmp(k, KC_LE, o->t, f32(k, 1)), cg_kv(k, g), later));
      put_state(o, blk, j, 0, ix, cg_kv(k, buf));
      KExpr *d = ir_attr_int(n, "nesterov") ? fop(k, OP_ADD, cg_kv(k, g), fop(k, OP_MUL, cg_kv(k, buf), momk))
                                            : cg_kv(k, buf);
      cg_kset(k, blk, g, d);
    }
    delta = fop(k, OP_MUL, cg_kv(k, g), o->lr);
  } else if (strcmp(kind, "rmsprop") == 0) {
    double al = ir_attr_float(n, "alpha");
    KVar *sq = let(k, blk, "sq",
                   fop(k, OP_ADD, fop(k, OP_MUL, state_at(o, j, 0, ix), f32(k, al)),
                       fop(k, OP_MUL, gg, f32(k, 1 - al))));
    put_state(o, blk, j, 0, ix, cg_kv(k, sq));
    KExpr *var = cg_kv(k, sq);
    if (ir_attr_int(n, "centered")) {
      int c = n_states - 1;
      KVar *avg = let(k, blk, "avg",
                      fop(k, OP_ADD, fop(k, OP_MUL, state_at(o, j, c, ix), f32(k, al)),
                          fop(k, OP_MUL, cg_kv(k, g), f32(k, 1 - al))));
      put_state(o, blk, j, c, ix, cg_kv(k, avg));
      var = fop(k, OP_SUB, var, fop(k, OP_MUL, cg_kv(k, avg), cg_kv(k, avg)));
    }
    KVar *d = let(k, blk, "d", fop(k, OP_ADD, cg_kop1(k, OP_SQRT, var), f32(k, eps)));
    if (mom > 0) {
      KVar *buf = let(k, blk, "buf",
                      fop(k, OP_ADD, fop(k, OP_MUL, state_at(o, j, 1, ix), momk),
                          fop(k, OP_DIV, cg_kv(k, g), cg_kv(k, d))));
      put_state(o, blk, j, 1, ix, cg_kv(k, buf));
      delta = fop(k, OP_MUL, cg_kv(k, buf), o->lr);
    } else {
      delta = fop(k, OP_MUL, fop(k, OP_DIV, cg_kv(k, g), cg_kv(k, d)), o->lr);
    }
  } else if (strcmp(kind, "adagrad") == 0) {
    KVar *sum = let(k, blk, "sum", fop(k, OP_ADD, state_at(o, j, 0, ix), gg));
    put_state(o, blk, j, 0, ix, cg_kv(k, sum));
    KExpr *decayed = fop(k, OP_ADD, f32(k, 1), fop(k, OP_MUL, fop(k, OP_SUB, o->t, f32(k, 1)),
                                                   f32(k, ir_attr_float(n, "lr_decay"))));
    KExpr *d = fop(k, OP_ADD, cg_kop1(k, OP_SQRT, cg_kv(k, sum)), f32(k, eps));
    delta = fop(k, OP_MUL, fop(k, OP_DIV, cg_kv(k, g), d), fop(k, OP_DIV, o->lr, decayed));
  } else {
    if (wd != 0 && adamw)
      cg_kset(k, blk, p, fop(k, OP_MUL, cg_kv(k, p), fop(k, OP_SUB, f32(k, 1), fop(k, OP_MUL, o->lr, f32(k, wd)))));
    double b1 = ir_attr_float(n, "beta1"), b2 = ir_attr_float(n, "beta2");
    KExpr *b1k = o->momentum ? o->momentum : f32(k, b1);
    KExpr *one_b1 = o->momentum ? fop(k, OP_SUB, f32(k, 1), o->momentum) : f32(k, 1 - b1);
    KVar *mv = let(k, blk, "m",
                   fop(k, OP_ADD, fop(k, OP_MUL, state_at(o, j, 0, ix), b1k), fop(k, OP_MUL, cg_kv(k, g), one_b1)));
    KVar *vv = let(k, blk, "v",
                   fop(k, OP_ADD, fop(k, OP_MUL, state_at(o, j, 1, ix), f32(k, b2)),
                       fop(k, OP_MUL, gg, f32(k, 1 - b2))));
    put_state(o, blk, j, 0, ix, cg_kv(k, mv));
    put_state(o, blk, j, 1, ix, cg_kv(k, vv));
    if (ir_attr_int(n, "amsgrad")) {
      cg_kset(k, blk, vv, cg_kop2(k, OP_MAXIMUM, state_at(o, j, 2, ix), cg_kv(k, vv)));
      put_state(o, blk, j, 2, ix, cg_kv(k, vv));
    }
    KExpr *denom = fop(k, OP_ADD, fop(k, OP_DIV, cg_kop1(k, OP_SQRT, cg_kv(k, vv)), o->s.sqrt_bc2), f32(k, eps));
    delta = fop(k, OP_MUL, fop(k, OP_DIV, cg_kv(k, mv), denom), fop(k, OP_DIV, o->lr, o->s.bc1));
  }
  put(o, blk, buf_of(b, k, &n->out[0], arena_printf(a, "w%d_new", j)), n->in[0], arena_printf(a, "w%d", j), ix,
      fop(k, OP_SUB, cg_kv(k, p), delta));
}

/* The kernel's buffer at ref, if it has one. */
static KBuf *kernel_buf(Kernel *k, RtRef ref) {
  for (int i = 0; i < k->n_params; i++)
    if (k->params[i].buf && cg_same_ref(k->params[i].arg.ref, ref)) return k->params[i].buf;
  return NULL;
}

/* Each of segment j's results may take its state's bytes (the update in
 * place): its element ix is read at ix alone, before ix is stored. */
static void optim_overwrites(Optim *o, int j) {
  const Node *n = o->batch[j];
  /* the param, then each state */
  for (int q = 0; q <= IR_OPTIM_MAX_STATES; q++) {
    int in = q ? ir_optim_first_state(n) + q - 1 : 0, out = q;
    if (in >= n->n_in || out >= n->n_out) continue;
    KBuf *from = kernel_buf(o->k, cg_ref(o->b, n->in[in])), *to = kernel_buf(o->k, cg_ref(o->b, &n->out[out]));
    if (from && to && to->written && from->read && !from->written) to->overwrites = from;
  }
}

/* Segments [lo, hi) under a binary search on the element's index i. */
static void optim_segments(Optim *o, KBlock *blk, KExpr *i, int lo, int hi) {
  if (hi - lo == 1) {
    optim_segment(o, blk, lo, idx(o->k, KI_SUB, i, o->offset[lo]));
    return;
  }
  int mid = (lo + hi) / 2;
  KStmt *s = cg_kif(o->k, blk, cg_kcmp(o->k, KC_LT, i, iv(o->k, o->offset[mid])));
  optim_segments(o, &s->body, i, lo, mid);
  optim_segments(o, &s->orelse, i, mid, hi);
}

/* One kernel for n's batch, at its last update; nothing at the others. */
static void lower_optim_update(CgBuild *b, const Node *n) {
  Arena *a = &cg_build_ctx(b)->arena;
  const Node **batch = ARENA_ARRAY(a, const Node *, cg_build_graph(b)->n_nodes + 1);
  int count = optim_batch(b, n, batch);
  if (batch[count - 1] != n) return;
  int64_t *offset = ARENA_ARRAY(a, int64_t, count + 1);
  for (int j = 0; j < count; j++) offset[j + 1] = offset[j] + numel(&batch[j]->in[0]->type);
  Kernel *k = cg_kernel_new(cg_build_ctx(b), n, ir_ops[n->op].name,
                            arena_printf(a, "%d %s updates", count, ir_attr_str(n, "kind")));
  Optim o = {.b = b, .k = k, .batch = batch, .offset = offset};
  o.lr = scalar_of(b, k, n->in[2], "lr");
  o.t = scalar_of(b, k, n->in[3], "t");
  o.scale = scalar_of(b, k, n->in[4], "scale");
  int mu = ir_optim_mu_product_operand(n);
  if (ir_attr_int(n, "momentum_input")) o.momentum = scalar_of(b, k, n->in[5], "momentum");
  if (mu >= 0) o.mu_product = scalar_of(b, k, n->in[mu], "mu_product");
  /* scale - scale is 0 for a finite scale, NaN for inf or NaN */
  if (ir_attr_int(n, "skip_nonfinite"))
    o.finite = cg_kcmp(k, KC_EQ, fop(k, OP_SUB, o.scale, o.scale), f32(k, 0));
  /* before the element loop: every segment has n's attributes and scalars */
  step_scalars(&o, &k->body, n, &o.s);
  KExpr *i;
  KBlock *body = each(k, offset[count], &i);
  if (offset[count]) optim_segments(&o, body, i, 0, count);
  for (int j = 0; j < count; j++) optim_overwrites(&o, j);
  cg_launch(b, k);
}

bool cg_lower_train(CgBuild *b, const Node *n) {
  /* The gathers load f16 and bf16 as f32, sum in f32 and round once at
   * the store.  embedding_grad sums in place in its result and
   * optim_update writes f32 master weights: the precision pass keeps
   * both in f32. */
  bool in_place = n->op == OP_EMBEDDING_GRAD || n->op == OP_OPTIM_UPDATE;
  for (int i = 0; in_place && i < n->n_in + n->n_out; i++) {
    DType dt = i < n->n_in ? n->in[i]->type.dtype : n->out[i - n->n_in].type.dtype;
    if (dt == TY_F16 || dt == TY_BF16) {
      diag_error(cg_build_ctx(b), n->loc, "codegen does not support %s on %s yet", ir_ops[n->op].name,
                 ir_dtype_name(dt));
      return false;
    }
  }
  switch (n->op) {
    case OP_CONV_WEIGHT_GRAD: lower_conv_weight_grad(b, n); return true;
    case OP_MAXPOOL_GRAD:
    case OP_AVGPOOL_GRAD: lower_pool_grad(b, n); return true;
    case OP_EMBEDDING_GRAD: lower_embedding_grad(b, n); return true;
    case OP_DROPOUT: lower_dropout(b, n); return true;
    case OP_RANDOM_UNIFORM: lower_random_uniform(b, n); return true;
    case OP_RESIZE_GRAD: lower_resize_grad(b, n); return true;
    case OP_OPTIM_UPDATE: lower_optim_update(b, n); return true;
    default: dl_internal(cg_build_ctx(b), "%s is not a training op", ir_ops[n->op].name);
  }
  return false;
}
