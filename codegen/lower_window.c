/* Lowering of the windowed ops: takes a conv2d/3d (im2col and a GEMM, or
 * direct), conv_transpose, resize, grid_sample or pool node, appends its
 * kernels to the plan. */
#include "lower.h"

static KExpr *window_pos(Kernel *k, KExpr *o, int64_t stride, int64_t pad, KExpr *kk, int64_t dil) {
  return cg_kadd(k, cg_kidx(k, KI_SUB, cg_kmul(k, o, cg_kint(k, stride)), cg_kint(k, pad)),
                 cg_kmul(k, kk, cg_kint(k, dil)));
}

/* lo <= p < hi, leaving out a bound the window can never cross. */
static KExpr *in_range(Kernel *k, KExpr *p, int64_t lo, int64_t hi, int64_t pmin, int64_t pmax) {
  KExpr *c = NULL;
  if (pmin < lo) c = cg_kcmp(k, KC_GE, p, cg_kint(k, lo));
  if (pmax >= hi) c = cg_kand(k, c, cg_kcmp(k, KC_LT, p, cg_kint(k, hi)));
  return c;
}

/* Convolutions and windows over 2 or 3 spatial dims (the 3-d ops are the
 * 2-d ones with a depth): positions and taps along each spatial dim are
 * named for it, the last dims last. */
enum { MAX_SPATIAL = 3 };

static const char *spatial_name(const char *const names[MAX_SPATIAL], int nsp, int d) {
  return names[MAX_SPATIAL - nsp + d];
}

static const char *const pos_names[MAX_SPATIAL] = {"id", "ih", "iw"};
static const char *const tap_names[MAX_SPATIAL] = {"kd", "kh", "kw"};

static int64_t product(const int64_t *v, int count) {
  int64_t p = 1;
  for (int i = 0; i < count; i++) p *= v[i];
  return p;
}

/* The extreme input positions a window touches along each dim, so that
 * bound checks it can never fail are left out. */
static void window_extent(int nsp, const int64_t *out, const int64_t *kern, const int64_t *stride,
                          const int64_t *pad, const int64_t *dil, int64_t *pmin, int64_t *pmax) {
  for (int d = 0; d < nsp; d++) {
    pmin[d] = -pad[d];
    pmax[d] = (out[d] - 1) * stride[d] - pad[d] + (kern[d] - 1) * dil[d];
  }
}

/* ((plane * in[0] + pos[0]) * in[1] + pos[1]) ...: a position's index. */
static KExpr *window_index(Kernel *k, KExpr *plane, int nsp, const int64_t *in, KVar *const *pos) {
  KExpr *e = plane;
  for (int d = 0; d < nsp; d++) e = cg_kadd(k, cg_kmul(k, e, cg_kint(k, in[d])), cg_kv(k, pos[d]));
  return e;
}

/* Every position inside [lo[d], hi[d]) along its dim, or NULL when no
 * window can leave that box. */
static KExpr *window_inside(Kernel *k, int nsp, KVar *const *pos, const int64_t *lo,
                            const int64_t *hi, const int64_t *pmin, const int64_t *pmax) {
  KExpr *c = NULL;
  for (int d = 0; d < nsp; d++) c = cg_kand(k, c, in_range(k, cg_kv(k, pos[d]), lo[d], hi[d], pmin[d], pmax[d]));
  return c;
}

/* A convolution's geometry, read once from the node: nsp spatial dims of
 * the input (in), the kernel and the output (od), the attributes, and the
 * extreme input positions a window reaches. */
typedef struct ConvGeo {
  int nsp;
  const int64_t *stride, *pad, *dil, *in, *kern, *od;
  int64_t pmin[MAX_SPATIAL], pmax[MAX_SPATIAL];
} ConvGeo;

static ConvGeo conv_geo(const Node *n) {
  int cnt;
  ConvGeo g = {.nsp = n->in[0]->type.rank - 2,
               .stride = ir_attr_ints(n, "stride", &cnt),
               .pad = ir_attr_ints(n, "pad", &cnt),
               .dil = ir_attr_ints(n, "dilation", &cnt),
               .in = n->in[0]->type.dims + 2,
               .kern = n->in[1]->type.dims + 2,
               .od = n->out[0].type.dims + 2};
  window_extent(g.nsp, g.od, g.kern, g.stride, g.pad, g.dil, g.pmin, g.pmax);
  return g;
}

static const int64_t no_lo[MAX_SPATIAL] = {0, 0, 0};

/* cols[n][(c*KH + kh)*KW + kw][oh*OW + ow] = x[n][c][ih][iw], or int8's
 * zero point (a real 0) in the padding; likewise with a depth. */
static void conv_im2col(CgBuild *b, const Node *n, const ConvGeo *cg, RtRef cols) {
  const Value *x = n->in[0];
  int nsp = cg->nsp;
  int64_t N = x->type.dims[0], C = x->type.dims[1];
  DType dt = x->type.dtype;
  Kernel *k = new_kernel(b, n, "im2col", "im2col");
  TensorType space = {.dtype = dt, .rank = 2 + 2 * nsp, .dims = {N, C}};
  for (int d = 0; d < nsp; d++) space.dims[2 + d] = cg->kern[d], space.dims[2 + nsp + d] = cg->od[d];
  Map m;
  map_begin(&m, k, &space);
  KVar *pos[MAX_SPATIAL] = {NULL};
  for (int d = 0; d < nsp; d++)
    pos[d] = cg_klet(k, &m.main, spatial_name(pos_names, nsp, d), KT_INDEX,
                     window_pos(k, map_coord(&m, 2 + nsp + d), cg->stride[d], cg->pad[d], map_coord(&m, 2 + d),
                                cg->dil[d]));
  KExpr *cond = window_inside(k, nsp, pos, no_lo, cg->in, cg->pmin, cg->pmax);
  KExpr *plane = cg_kadd(k, cg_kmul(k, map_coord(&m, 0), cg_kint(k, C)), map_coord(&m, 1));
  KExpr *v = load_of(b, k, x, "x", window_index(k, plane, nsp, cg->in, pos));
  if (cond) v = cg_ksel(k, cond, v, cg_kimm(k, (double)cg_zero_point(n), dt));
  cg_kstore(k, &m.main, cg_kglobal(k, "cols", dt, numel(&space), cols), m.i, v);
  map_end(&m);
  cg_launch(b, k);
}

/* groups 1 outside a fusion group: im2col (unless x already is the
 * column matrix), one GEMM per image, the bias. */
static void conv_gemm(CgBuild *b, const Node *n, const ConvGeo *cg) {
  const Value *x = n->in[0], *w = n->in[1], *out = &n->out[0];
  int nsp = cg->nsp;
  int64_t N = x->type.dims[0], C = x->type.dims[1], Co = w->type.dims[0];
  int64_t OHW = product(cg->od, nsp), CKK = C * product(cg->kern, nsp);
  RtRef rc = cg_ref(b, out);
  DType dt = x->type.dtype; /* the columns' type: i8 for an int32 result */
  RtGemm g = gemm_of(dt, Co, OHW, CKK);
  g.a = cg_ref(b, w), g.c = rc;
  g.batch = N, g.stride_a = 0, g.stride_b = CKK * OHW, g.stride_c = Co * OHW;
  bool direct = product(cg->kern, nsp) == 1;
  for (int d = 0; d < nsp; d++) direct = direct && cg->stride[d] == 1 && cg->pad[d] == 0 && cg->pad[nsp + d] == 0;
  if (direct) {
    g.b = cg_ref(b, x); /* x[n] is already the [C, H*W] matrix */
  } else {
    g.b = cg_scratch(b, n, (uint64_t)(N * CKK * OHW) * (uint64_t)ir_dtype_size(dt));
    conv_im2col(b, n, cg, g.b);
  }
  if (N == 1) g.batch = 1;
  emit_gemm(b, n, "gemm", &g);
  if (n->n_in > 2) bias_add(b, n, rc, numel(&out->type), OHW, Co, n->in[2]);
}

/* Grouped (and depthwise ones the tiled kernel does not take): a direct
 * loop per output element, summing in f32, or exactly in int32 for int8. */
static void conv_direct(CgBuild *b, const Node *n, const ConvGeo *cg) {
  const Value *x = n->in[0], *w = n->in[1], *out = &n->out[0];
  int nsp = cg->nsp;
  int64_t C = x->type.dims[1], Co = w->type.dims[0], Cg = w->type.dims[1];
  int64_t cog = Co / ir_attr_int(n, "groups");
  DType at_t = out->type.dtype == TY_I32 ? TY_I32 : TY_F32;
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  KExpr *co = map_coord(&m, 1);
  KVar *cin0 = cg_klet(k, &m.main, "cin", KT_INDEX,
                       cg_kmul(k, cg_kidx(k, KI_DIV, co, cg_kint(k, cog)), cg_kint(k, Cg)));
  KVar *acc = cg_klet(k, &m.main, "acc", at_t, cg_kimm(k, 0, at_t));
  KVar *ci = cg_kvar(k, "ci", KT_INDEX), *tap[MAX_SPATIAL], *pos[MAX_SPATIAL] = {NULL};
  for (int d = 0; d < nsp; d++) tap[d] = cg_kvar(k, spatial_name(tap_names, nsp, d), KT_INDEX);
  KBlock *at = &cg_kloop(k, &m.main, ci, cg_kint(k, Cg), KM_SERIAL)->body;
  for (int d = 0; d < nsp; d++) {
    at = &cg_kloop(k, at, tap[d], cg_kint(k, cg->kern[d]), KM_SERIAL)->body;
    pos[d] = cg_klet(k, at, spatial_name(pos_names, nsp, d), KT_INDEX,
                     window_pos(k, map_coord(&m, 2 + d), cg->stride[d], cg->pad[d], cg_kv(k, tap[d]), cg->dil[d]));
  }
  KExpr *cond = window_inside(k, nsp, pos, no_lo, cg->in, cg->pmin, cg->pmax);
  KExpr *plane = cg_kadd(k, cg_kmul(k, map_coord(&m, 0), cg_kint(k, C)),
                         cg_kadd(k, cg_kv(k, cin0), cg_kv(k, ci)));
  KExpr *xi = window_index(k, plane, nsp, cg->in, pos);
  KExpr *wi = cg_kadd(k, cg_kmul(k, co, cg_kint(k, Cg)), cg_kv(k, ci));
  for (int d = 0; d < nsp; d++) wi = cg_kadd(k, cg_kmul(k, wi, cg_kint(k, cg->kern[d])), cg_kv(k, tap[d]));
  int64_t zp = cg_zero_point(n);
  KStmt *guard = cond ? cg_kif(k, at, cond) : NULL;
  if (guard) at = &guard->body;
  KExpr *prod = cg_kop2(k, OP_MUL, cg_kcast(k, load_in(b, k, at, x, "x", xi), at_t),
                        cg_kcast(k, load_in(b, k, at, w, "w", wi), at_t));
  cg_kset(k, at, acc, cg_kop2(k, OP_ADD, cg_kv(k, acc), prod));
  if (guard && zp) {
    /* int8 padding reads the zero point (a real 0) */
    KExpr *pad_prod = cg_kop2(k, OP_MUL, cg_kimm(k, (double)zp, at_t),
                              cg_kcast(k, load_in(b, k, &guard->orelse, w, "w", wi), at_t));
    cg_kset(k, &guard->orelse, acc, cg_kop2(k, OP_ADD, cg_kv(k, acc), pad_prod));
  }
  KExpr *res = cg_kv(k, acc);
  if (n->n_in > 2)
    res = cg_kop2(k, OP_ADD, res, cg_kcast(k, load_in(b, k, NULL, n->in[2], "bias", co), at_t));
  map_store(b, &m, out, res);
  map_end(&m);
  cg_launch(b, k);
}

/* conv2d and conv3d: an implicit GEMM in a fusion group (grouped ones
 * when the tensor cores take them), else im2col and a GEMM (groups 1),
 * the depthwise kernel (conv_depthwise.c) or a direct loop (other
 * grouped ones). */
bool lower_conv(CgBuild *b, const Node *n) {
  if (!product_dtypes(b, n)) return false;
  if (numel(&n->out[0].type) == 0) return true;
  int64_t groups = ir_attr_int(n, "groups");
  /* channels last: the implicit GEMM (groups 1, or a group's channels
   * in whole chunks: passes/nhwc.c) or the depthwise kernel */
  if (ir_conv_nhwc(n) && groups > 1 && !ir_conv_depthwise(n)) return cg_lower_conv_igemm(b, n);
  if (ir_conv_nhwc(n) && groups > 1) {
    if (cg_lower_conv_depthwise_nhwc(b, n)) return true;
    diag_error(cg_build_ctx(b), n->loc, "conv2d: a channels-last depthwise convolution past 2^31 blocks of threads");
    return false;
  }
  if ((n->group >= 0 || ir_conv_nhwc(n)) && (groups == 1 || cg_conv_on_tc(b, n))) return cg_lower_conv_igemm(b, n);
  ConvGeo cg = conv_geo(n);
  if (groups == 1)
    conv_gemm(b, n, &cg);
  else if (!cg_lower_conv_depthwise(b, n))
    conv_direct(b, n, &cg);
  return true;
}

/* A direct gather per output element: input row ih reaches output row
 * oh through tap kh when oh + pad - kh * dil == ih * stride.  The offset
 * (a multiple of the stride) keeps the dividend non-negative, so the
 * divisibility test and the quotient never depend on how division
 * rounds negative numbers. */
static KExpr *transposed_pos(Kernel *k, KExpr *o, int64_t pad, KExpr *kk, int64_t dil,
                             int64_t off) {
  return cg_kidx(k, KI_SUB, cg_kadd(k, o, cg_kint(k, pad + off)), cg_kmul(k, kk, cg_kint(k, dil)));
}

static KExpr *transposed_hit(Kernel *k, KExpr *t, int64_t stride, int64_t off, int64_t len) {
  KExpr *c = NULL;
  if (stride > 1)
    c = cg_kcmp(k, KC_EQ, cg_kidx(k, KI_MOD, t, cg_kint(k, stride)), cg_kint(k, 0));
  c = cg_kand(k, c, cg_kcmp(k, KC_GE, t, cg_kint(k, off)));
  return cg_kand(k, c, cg_kcmp(k, KC_LT, t, cg_kint(k, off + len * stride)));
}

static const char *const hit_names[MAX_SPATIAL] = {"td", "th", "tw"};

/* conv_transpose2d and conv_transpose3d: an implicit GEMM on the tensor
 * cores where they take it (conv_igemm.c), else a direct gather per
 * output element, nested per spatial dim so that a tap that misses skips
 * the dims inside it, summing in f32, or exactly in int32 for int8. */
bool lower_conv_transpose(CgBuild *b, const Node *n) {
  if (!product_dtypes(b, n)) return false;
  /* channels last (passes/nhwc.c): the implicit GEMM, on the CUDA cores
   * where the tensor cores do not take it */
  if (numel(&n->out[0].type) > 0 && (cg_conv_on_tc(b, n) || ir_conv_nhwc(n))) return cg_lower_conv_igemm(b, n);
  if (cg_lower_conv_transpose_fma(b, n)) return true;
  int cnt;
  const int64_t *stride = ir_attr_ints(n, "stride", &cnt), *pad = ir_attr_ints(n, "pad", &cnt);
  const int64_t *dil = ir_attr_ints(n, "dilation", &cnt);
  int64_t groups = ir_attr_int(n, "groups");
  const Value *x = n->in[0], *w = n->in[1], *out = &n->out[0];
  int nsp = x->type.rank - 2;
  const int64_t *xd = x->type.dims, *wd = w->type.dims;
  const int64_t *in = xd + 2, *kern = wd + 2;
  int64_t C = xd[1], Cog = wd[1], cig = C / groups;
  if (numel(&out->type) == 0) return true;
  int64_t off[MAX_SPATIAL];
  for (int d = 0; d < nsp; d++) off[d] = stride[d] * (((kern[d] - 1) * dil[d] + stride[d] - 1) / stride[d]);
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  KExpr *co = map_coord(&m, 1);
  KVar *cin0 = cg_klet(k, &m.main, "cin", KT_INDEX,
                       cg_kmul(k, cg_kidx(k, KI_DIV, co, cg_kint(k, Cog)), cg_kint(k, cig)));
  KVar *cw = cg_klet(k, &m.main, "cw", KT_INDEX, cg_kidx(k, KI_MOD, co, cg_kint(k, Cog)));
  DType at_t = out->type.dtype == TY_I32 ? TY_I32 : TY_F32;
  KVar *acc = cg_klet(k, &m.main, "acc", at_t, cg_kimm(k, 0, at_t));
  KVar *ci = cg_kvar(k, "ci", KT_INDEX), *tap[MAX_SPATIAL], *pos[MAX_SPATIAL] = {NULL};
  for (int d = 0; d < nsp; d++) tap[d] = cg_kvar(k, spatial_name(tap_names, nsp, d), KT_INDEX);
  KBlock *at = &cg_kloop(k, &m.main, ci, cg_kint(k, cig), KM_SERIAL)->body;
  for (int d = 0; d < nsp; d++) {
    KBlock *body = &cg_kloop(k, at, tap[d], cg_kint(k, kern[d]), KM_SERIAL)->body;
    KVar *t = cg_klet(k, body, spatial_name(hit_names, nsp, d), KT_INDEX,
                      transposed_pos(k, map_coord(&m, 2 + d), pad[d], cg_kv(k, tap[d]), dil[d], off[d]));
    at = &cg_kif(k, body, transposed_hit(k, cg_kv(k, t), stride[d], off[d], in[d]))->body;
    pos[d] = cg_klet(k, at, spatial_name(pos_names, nsp, d), KT_INDEX,
                     cg_kidx(k, KI_SUB, cg_kidx(k, KI_DIV, cg_kv(k, t), cg_kint(k, stride[d])),
                             cg_kint(k, off[d] / stride[d])));
  }
  KExpr *plane = cg_kadd(k, cg_kmul(k, map_coord(&m, 0), cg_kint(k, C)),
                         cg_kadd(k, cg_kv(k, cin0), cg_kv(k, ci)));
  KExpr *xi = window_index(k, plane, nsp, in, pos);
  KExpr *wi = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kv(k, cin0), cg_kv(k, ci)), cg_kint(k, Cog)),
                      cg_kv(k, cw));
  for (int d = 0; d < nsp; d++) wi = cg_kadd(k, cg_kmul(k, wi, cg_kint(k, kern[d])), cg_kv(k, tap[d]));
  KExpr *prod = cg_kop2(k, OP_MUL, cg_kcast(k, load_in(b, k, at, x, "x", xi), at_t),
                        cg_kcast(k, load_in(b, k, at, w, "w", wi), at_t));
  cg_kset(k, at, acc, cg_kop2(k, OP_ADD, cg_kv(k, acc), prod));
  KExpr *res = cg_kv(k, acc);
  if (n->n_in > 2) res = cg_kop2(k, OP_ADD, res, cg_kcast(k, load_in(b, k, NULL, n->in[2], "bias", co), at_t));
  map_store(b, &m, out, res);
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* The source coordinates of resize in exact integer arithmetic: src =
 * num / den with num = (2 * dst + 1) * in - out, den = 2 * out (half
 * pixel, clamped at 0) or num = dst * (in - 1), den = out - 1 (corners).
 * Sets *lo to the lower neighbour and returns the f32 weight of the upper. */
static KExpr *resize_axis(Kernel *k, KBlock *at, KExpr *d, int64_t in, int64_t out, bool align,
                          KVar **lo) {
  KExpr *num;
  int64_t den;
  if (align) {
    den = out > 1 ? out - 1 : 1;
    num = cg_kmul(k, d, cg_kint(k, out > 1 ? in - 1 : 0));
  } else {
    den = 2 * out;
    num = cg_kidx(k, KI_MAX,
                  cg_kidx(k, KI_SUB, cg_kmul(k, cg_kadd(k, cg_kmul(k, d, cg_kint(k, 2)), cg_kint(k, 1)),
                                             cg_kint(k, in)),
                          cg_kint(k, out)),
                  cg_kint(k, 0));
  }
  KVar *nv = cg_klet(k, at, "num", KT_INDEX, num);
  *lo = cg_klet(k, at, "lo", KT_INDEX, cg_kidx(k, KI_DIV, cg_kv(k, nv), cg_kint(k, den)));
  KExpr *rem = cg_kidx(k, KI_MOD, cg_kv(k, nv), cg_kint(k, den));
  return cg_kop2(k, OP_DIV, cg_kcast(k, rem, TY_F32), cg_kimm(k, (double)den, TY_F32));
}

bool lower_resize(CgBuild *b, const Node *n) {
  bool linear = strcmp(ir_attr_str(n, "mode"), "bilinear") == 0;
  if (!check_dtypes(b, n, !linear)) return false;
  bool align = ir_attr_int(n, "align_corners") != 0;
  const Value *x = n->in[0], *out = &n->out[0];
  /* NCHW, or layout "nhwc" (the nhwc pass's): neighbouring threads take
   * neighbouring channels of one pixel */
  bool nhwc = ir_nhwc(n);
  int sx = nhwc ? 1 : 2, cx = nhwc ? 3 : 1;
  int64_t C = x->type.dims[cx], H = x->type.dims[sx], W = x->type.dims[sx + 1];
  int64_t OH = out->type.dims[sx], OW = out->type.dims[sx + 1];
  int64_t hs = nhwc ? W * C : W, ws = nhwc ? C : 1;
  if (numel(&out->type) == 0) return true;
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  /* the image's element 0 (NCHW: its plane's) */
  KExpr *base_at = nhwc ? cg_kadd(k, cg_kmul(k, map_coord(&m, 0), cg_kint(k, H * W * C)), map_coord(&m, cx))
                        : cg_kmul(k, cg_kadd(k, cg_kmul(k, map_coord(&m, 0), cg_kint(k, C)), map_coord(&m, cx)),
                                  cg_kint(k, H * W));
  KVar *base = cg_klet(k, &m.main, "base", KT_INDEX, base_at);
  if (!linear) {
    KExpr *ih = cg_kidx(k, KI_DIV, cg_kmul(k, map_coord(&m, sx), cg_kint(k, H)), cg_kint(k, OH));
    KExpr *iw = cg_kidx(k, KI_DIV, cg_kmul(k, map_coord(&m, sx + 1), cg_kint(k, W)), cg_kint(k, OW));
    KExpr *xi = cg_kadd(k, cg_kv(k, base), cg_kadd(k, cg_kmul(k, ih, cg_kint(k, hs)), cg_kmul(k, iw, cg_kint(k, ws))));
    map_store(b, &m, out, load_of(b, k, x, "x", xi));
    map_end(&m);
    cg_launch(b, k);
    return true;
  }
  KVar *h0, *w0;
  KVar *lh = cg_klet(k, &m.main, "lh", TY_F32,
                     resize_axis(k, &m.main, map_coord(&m, sx), H, OH, align, &h0));
  KVar *lw = cg_klet(k, &m.main, "lw", TY_F32,
                     resize_axis(k, &m.main, map_coord(&m, sx + 1), W, OW, align, &w0));
  KExpr *h1 = cg_kidx(k, KI_MIN, cg_kadd(k, cg_kv(k, h0), cg_kint(k, 1)), cg_kint(k, H - 1));
  KExpr *w1 = cg_kidx(k, KI_MIN, cg_kadd(k, cg_kv(k, w0), cg_kint(k, 1)), cg_kint(k, W - 1));
  KExpr *rows[2] = {cg_kmul(k, cg_kv(k, h0), cg_kint(k, hs)), cg_kmul(k, h1, cg_kint(k, hs))};
  KExpr *cols[2] = {cg_kmul(k, cg_kv(k, w0), cg_kint(k, ws)), cg_kmul(k, w1, cg_kint(k, ws))};
  KExpr *one = cg_kimm(k, 1, TY_F32);
  KExpr *wh[2] = {cg_kop2(k, OP_SUB, one, cg_kv(k, lh)), cg_kv(k, lh)};
  KExpr *ww[2] = {cg_kop2(k, OP_SUB, one, cg_kv(k, lw)), cg_kv(k, lw)};
  KExpr *v = NULL;
  for (int r = 0; r < 2; r++) {
    KExpr *row = NULL;
    for (int c = 0; c < 2; c++) {
      KExpr *xi = cg_kadd(k, cg_kv(k, base), cg_kadd(k, rows[r], cols[c]));
      KExpr *t = cg_kop2(k, OP_MUL, ww[c], load_f32(b, k, &m.main, x, "x", xi));
      row = row ? cg_kop2(k, OP_ADD, row, t) : t;
    }
    KExpr *t = cg_kop2(k, OP_MUL, wh[r], row);
    v = v ? cg_kop2(k, OP_ADD, v, t) : t;
  }
  map_store(b, &m, out, v);
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* ---- grid_sample: eval.c's gs_* step by step, one thread per output ---- */

typedef struct Sampler {
  Kernel *k;
  KBlock *at;
  KExpr *plane; /* the first element of x[n, c] */
  int64_t D, H, W; /* D 1 in 2-d */
  bool align, border, reflection;
} Sampler;

static KExpr *f32(Kernel *k, double v) { return cg_kimm(k, v, TY_F32); }

static KExpr *fop(Kernel *k, OpKind op, KExpr *a, KExpr *b) { return cg_kop2(k, op, a, b); }

static KExpr *flet(Sampler *s, const char *stem, KExpr *v) {
  return cg_kv(s->k, cg_klet(s->k, s->at, stem, TY_F32, v));
}

static void gs_borders(const Sampler *s, int64_t len, double *lo, double *hi) {
  *lo = s->align ? 0 : -0.5;
  *hi = s->align ? (double)len - 1 : (double)len - 0.5;
}

/* v inside [0, len - 1]; a NaN stays one. */
static KExpr *gs_clamp(Sampler *s, KExpr *v, int64_t len) {
  Kernel *k = s->k;
  KExpr *top = f32(k, (double)len - 1);
  return cg_ksel(k, cg_kcmp(k, KC_LT, v, f32(k, 0)), f32(k, 0),
                 cg_ksel(k, cg_kcmp(k, KC_GT, v, top), top, v));
}

static KExpr *gs_reflect(Sampler *s, KExpr *v, double lo, double hi) {
  Kernel *k = s->k;
  double range = hi - lo;
  if (!(range > 0)) return f32(k, lo);
  KExpr *below = cg_kcmp(k, KC_LT, v, f32(k, lo)), *above = cg_kcmp(k, KC_GT, v, f32(k, hi));
  KExpr *dx = flet(s, "dx", cg_ksel(k, below, fop(k, OP_SUB, f32(k, lo), v), fop(k, OP_SUB, v, f32(k, hi))));
  KExpr *flips = flet(s, "flips", cg_kop1(k, OP_FLOOR, fop(k, OP_DIV, dx, f32(k, range))));
  KExpr *r = flet(s, "r", fop(k, OP_SUB, dx, fop(k, OP_MUL, flips, f32(k, range))));
  KExpr *half = cg_kop1(k, OP_FLOOR, fop(k, OP_DIV, flips, f32(k, 2)));
  KExpr *even = cg_kcmp(k, KC_EQ, fop(k, OP_SUB, flips, fop(k, OP_MUL, half, f32(k, 2))), f32(k, 0));
  KExpr *up = fop(k, OP_ADD, f32(k, lo), r), *down = fop(k, OP_SUB, f32(k, hi), r);
  KExpr *folded = cg_ksel(k, below, cg_ksel(k, even, up, down), cg_ksel(k, even, down, up));
  return cg_ksel(k, cg_kor(k, below, above), folded, v);
}

/* The point grid coordinate g names along an axis of len pixels (only
 * the taps go through padding_mode). */
static KExpr *gs_source(Sampler *s, KExpr *g, int64_t len, bool nearest) {
  Kernel *k = s->k;
  KExpr *g1 = fop(k, OP_ADD, g, f32(k, 1));
  KExpr *v = s->align ? fop(k, OP_MUL, fop(k, OP_DIV, g1, f32(k, 2)), f32(k, (double)len - 1))
                      : fop(k, OP_DIV, fop(k, OP_SUB, fop(k, OP_MUL, g1, f32(k, (double)len)), f32(k, 1)),
                            f32(k, 2));
  return flet(s, "src", nearest ? cg_kop1(k, OP_ROUND, v) : v);
}

/* A tap's whole-number coordinate through padding_mode: the index to read
 * (clamped, so that nothing outside is read) and whether it is inside. */
static KExpr *gs_tap(Sampler *s, KExpr *i, int64_t len, KExpr **inside) {
  Kernel *k = s->k;
  double lo, hi;
  gs_borders(s, len, &lo, &hi);
  i = flet(s, "tap", i);
  if (s->border) i = gs_clamp(s, i, len);
  if (s->reflection) i = gs_reflect(s, i, lo, hi);
  KExpr *v = flet(s, "tap", i);
  *inside = cg_kand(k, cg_kcmp(k, KC_GE, v, f32(k, 0)), cg_kcmp(k, KC_LT, v, f32(k, (double)len)));
  KExpr *at = cg_kop2(k, OP_MINIMUM, cg_kop2(k, OP_MAXIMUM, cg_kcast(k, v, TY_I64), cg_kimm(k, 0, TY_I64)),
                      cg_kimm(k, (double)len - 1, TY_I64));
  return cg_kv(k, cg_klet(k, s->at, "at", KT_INDEX, cg_kcast(k, at, KT_INDEX)));
}

/* Keys' weights (a = -0.75) of the taps at -1, 0, 1, 2 for a point t
 * past tap 0: ((a x - 5a) x + 8a) x - 4a for the outer two (x in [1, 2]),
 * ((a + 2) x - (a + 3)) x x + 1 for the inner two (x in [0, 1]). */
static void gs_cubic(Sampler *s, KExpr *t, KExpr **c) {
  Kernel *k = s->k;
  const double A = -0.75;
  KExpr *d[4] = {fop(k, OP_ADD, t, f32(k, 1)), t, fop(k, OP_SUB, f32(k, 1), t),
                 fop(k, OP_SUB, f32(k, 2), t)};
  for (int i = 0; i < 4; i++) {
    KExpr *x = flet(s, "d", d[i]), *v;
    if (i == 0 || i == 3) {
      v = fop(k, OP_SUB, fop(k, OP_MUL, f32(k, A), x), f32(k, 5 * A));
      v = fop(k, OP_ADD, fop(k, OP_MUL, v, x), f32(k, 8 * A));
      v = fop(k, OP_SUB, fop(k, OP_MUL, v, x), f32(k, 4 * A));
    } else {
      v = fop(k, OP_SUB, fop(k, OP_MUL, f32(k, A + 2), x), f32(k, A + 3));
      v = fop(k, OP_ADD, fop(k, OP_MUL, fop(k, OP_MUL, v, x), x), f32(k, 1));
    }
    c[i] = flet(s, "c", v);
  }
}

bool lower_grid_sample(CgBuild *b, const Node *n) {
  if (!check_dtypes(b, n, false)) return false;
  const Value *x = n->in[0], *grid = n->in[1], *out = &n->out[0];
  const char *mode = ir_attr_str(n, "mode"), *pad = ir_attr_str(n, "padding_mode");
  bool nearest = strcmp(mode, "nearest") == 0, cubic = strcmp(mode, "bicubic") == 0;
  /* [N, C, H, W], or a volume [N, C, D, H, W] with grid [..., 3] (x, y, z) */
  int sp = x->type.rank - 2;
  bool volume = sp == 3;
  int64_t C = x->type.dims[1];
  if (numel(&out->type) == 0) return true;
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  Sampler s = {.k = k, .at = &m.main, .D = volume ? x->type.dims[2] : 1, .H = x->type.dims[sp], .W = x->type.dims[sp + 1],
               .align = ir_attr_int(n, "align_corners") != 0,
               .border = strcmp(pad, "border") == 0, .reflection = strcmp(pad, "reflection") == 0};
  KExpr *nb = map_coord(&m, 0);
  s.plane = cg_kv(k, cg_klet(k, &m.main, "plane", KT_INDEX,
                             cg_kmul(k, cg_kadd(k, cg_kmul(k, nb, cg_kint(k, C)), map_coord(&m, 1)),
                                     cg_kint(k, s.D * s.H * s.W))));
  KExpr *point = nb;
  for (int d = 0; d < sp; d++)
    point = cg_kadd(k, cg_kmul(k, point, cg_kint(k, out->type.dims[2 + d])), map_coord(&m, 2 + d));
  KVar *g = cg_klet(k, &m.main, "g", KT_INDEX, cg_kmul(k, point, cg_kint(k, sp)));
  KExpr *gx = load_f32(b, k, &m.main, grid, "grid", cg_kv(k, g));
  KExpr *gy = load_f32(b, k, &m.main, grid, "grid", cg_kadd(k, cg_kv(k, g), cg_kint(k, 1)));
  KExpr *sx = gs_source(&s, gx, s.W, nearest), *sy = gs_source(&s, gy, s.H, nearest), *sz = NULL;
  if (volume) sz = gs_source(&s, load_f32(b, k, &m.main, grid, "grid", cg_kadd(k, cg_kv(k, g), cg_kint(k, 2))), s.D,
                             nearest);
  int taps = nearest ? 1 : cubic ? 4 : 2, first = cubic ? -1 : 0, dtaps = volume && !nearest ? 2 : 1;
  KExpr *x0 = nearest ? sx : flet(&s, "x0", cg_kop1(k, OP_FLOOR, sx));
  KExpr *y0 = nearest ? sy : flet(&s, "y0", cg_kop1(k, OP_FLOOR, sy));
  KExpr *z0 = !volume ? NULL : nearest ? sz : flet(&s, "z0", cg_kop1(k, OP_FLOOR, sz));
  KExpr *wx[4] = {f32(k, 1)}, *wy[4] = {f32(k, 1)}, *wz[2] = {f32(k, 1)};
  if (!nearest) {
    KExpr *tx = flet(&s, "tx", fop(k, OP_SUB, sx, x0)), *ty = flet(&s, "ty", fop(k, OP_SUB, sy, y0));
    if (cubic) {
      gs_cubic(&s, tx, wx);
      gs_cubic(&s, ty, wy);
    } else {
      wx[0] = fop(k, OP_SUB, f32(k, 1), tx), wx[1] = tx;
      wy[0] = fop(k, OP_SUB, f32(k, 1), ty), wy[1] = ty;
    }
    if (volume) {
      KExpr *tz = flet(&s, "tz", fop(k, OP_SUB, sz, z0));
      wz[0] = fop(k, OP_SUB, f32(k, 1), tz), wz[1] = tz;
    }
  }
  KExpr *row_at[4], *row_in[4], *col_at[4], *col_in[4], *dep_at[2] = {cg_kint(k, 0)}, *dep_in[2] = {NULL};
  for (int i = 0; i < taps; i++) {
    row_at[i] = gs_tap(&s, fop(k, OP_ADD, y0, f32(k, first + i)), s.H, &row_in[i]);
    col_at[i] = gs_tap(&s, fop(k, OP_ADD, x0, f32(k, first + i)), s.W, &col_in[i]);
  }
  for (int d = 0; volume && d < dtaps; d++) dep_at[d] = gs_tap(&s, fop(k, OP_ADD, z0, f32(k, d)), s.D, &dep_in[d]);
  /* Along each row first, then down the rows, then across the depth
   * taps, as eval.c. */
  KExpr *v = f32(k, 0);
  for (int d = 0; d < dtaps; d++) {
    KExpr *plane = f32(k, 0);
    for (int i = 0; i < taps; i++) {
      KExpr *row = f32(k, 0);
      for (int j = 0; j < taps; j++) {
        KExpr *at = cg_kadd(k, cg_kmul(k, cg_kadd(k, cg_kmul(k, dep_at[d], cg_kint(k, s.H)), row_at[i]), cg_kint(k, s.W)),
                            col_at[j]);
        KExpr *xi = cg_kadd(k, s.plane, at);
        KExpr *in = cg_kand(k, dep_in[d], cg_kand(k, row_in[i], col_in[j]));
        KExpr *p = cg_ksel(k, in, load_f32(b, k, &m.main, x, "x", xi), f32(k, 0));
        row = flet(&s, "row", fop(k, OP_ADD, row, fop(k, OP_MUL, wx[j], p)));
      }
      plane = flet(&s, "plane_v", fop(k, OP_ADD, plane, fop(k, OP_MUL, wy[i], row)));
    }
    v = volume ? flet(&s, "acc", fop(k, OP_ADD, v, fop(k, OP_MUL, wz[d], plane))) : plane;
  }
  map_store(b, &m, out, v);
  map_end(&m);
  cg_launch(b, k);
  return true;
}

/* ---- windows ---- */

/* maxpool2d/3d and avgpool2d/3d: a thread per output element, a loop
 * per spatial dim over its window. */
bool lower_pool(CgBuild *b, const Node *n) {
  bool is_max = n->op == OP_MAXPOOL2D || n->op == OP_MAXPOOL3D;
  /* A max of integers is exact in an i64 (eval.c's too); averages are
   * of floats only. */
  if (!check_dtypes(b, n, is_max)) return false;
  DType dt = n->in[0]->type.dtype, at = ir_dtype_is_float(dt) ? TY_F32 : dt == TY_U64 ? TY_U64 : TY_I64;
  double lowest = at == TY_F32 ? -INFINITY : at == TY_U64 ? 0.0 : (double)INT64_MIN;
  int cnt;
  const int64_t *kern = ir_attr_ints(n, "kernel", &cnt), *stride = ir_attr_ints(n, "stride", &cnt);
  const int64_t *pad = ir_attr_ints(n, "pad", &cnt), *dil = ir_attr_ints(n, "dilation", &cnt);
  bool include_pad = !is_max && ir_attr_int(n, "count_include_pad");
  const Value *x = n->in[0], *out = &n->out[0];
  int nsp = x->type.rank - 2;
  /* channels last: spatial dims from axis 1, the channel last; a
   * thread's neighbours take the next channels, contiguous in x */
  bool nhwc = ir_nhwc(n);
  int sx = nhwc ? 1 : 2;
  const int64_t *in = x->type.dims + sx, *od = out->type.dims + sx;
  if (numel(&out->type) == 0) return true;
  int64_t pmin[MAX_SPATIAL], pmax[MAX_SPATIAL], zeros[MAX_SPATIAL] = {0, 0, 0};
  int64_t lo[MAX_SPATIAL], hi[MAX_SPATIAL];
  window_extent(nsp, od, kern, stride, pad, dil, pmin, pmax);
  for (int d = 0; d < nsp; d++) lo[d] = -pad[d], hi[d] = in[d] + pad[nsp + d];
  Kernel *k = new_kernel(b, n, NULL, NULL);
  Map m;
  map_begin(&m, k, &out->type);
  /* The (n, c) plane: every output plane has OH*OW elements (nhwc: the
   * image, its channel apart). */
  KVar *plane = cg_klet(k, &m.main, "plane", KT_INDEX,
                        nhwc ? map_coord(&m, 0) : cg_kidx(k, KI_DIV, m.i, cg_kint(k, product(od, nsp))));
  KVar *acc = cg_klet(k, &m.main, "acc", at, cg_kimm(k, is_max ? lowest : 0.0, at));
  KVar *count = is_max ? NULL : cg_klet(k, &m.main, "count", KT_INDEX, cg_kint(k, 0));
  KVar *tap[MAX_SPATIAL], *pos[MAX_SPATIAL] = {NULL};
  for (int d = 0; d < nsp; d++) tap[d] = cg_kvar(k, spatial_name(tap_names, nsp, d), KT_INDEX);
  KBlock *body = &m.main;
  for (int d = 0; d < nsp; d++) {
    body = &cg_kloop(k, body, tap[d], cg_kint(k, kern[d]), KM_SERIAL)->body;
    pos[d] = cg_klet(k, body, spatial_name(pos_names, nsp, d), KT_INDEX,
                     window_pos(k, map_coord(&m, sx + d), stride[d], pad[d], cg_kv(k, tap[d]), dil[d]));
  }
  KExpr *inc = count ? cg_kadd(k, cg_kv(k, count), cg_kint(k, 1)) : NULL;
  if (include_pad) {
    /* Positions past the padded border (ceil_mode) do not count. */
    KExpr *padded = window_inside(k, nsp, pos, lo, hi, pmin, pmax);
    if (padded)
      cg_kset(k, &cg_kif(k, body, padded)->body, count, inc);
    else
      cg_kset(k, body, count, inc);
  }
  KExpr *inside = window_inside(k, nsp, pos, zeros, in, pmin, pmax);
  KBlock *in_x = inside ? &cg_kif(k, body, inside)->body : body;
  KExpr *xi = window_index(k, cg_kv(k, plane), nsp, in, pos);
  if (nhwc) xi = cg_kadd(k, cg_kmul(k, xi, cg_kint(k, x->type.dims[1 + nsp])), map_coord(&m, 1 + nsp));
  KExpr *v = cg_kcast(k, load_in(b, k, in_x, x, "x", xi), at);
  cg_kset(k, in_x, acc, cg_kop2(k, is_max ? OP_MAXIMUM : OP_ADD, cg_kv(k, acc), v));
  if (count && !include_pad) cg_kset(k, in_x, count, inc);
  KExpr *res = cg_kv(k, acc);
  if (!is_max)
    res = cg_ksel(k, cg_kcmp(k, KC_NE, cg_kv(k, count), cg_kint(k, 0)),
                  cg_kop2(k, OP_DIV, res, cg_kcast(k, cg_kv(k, count), TY_F32)),
                  cg_kimm(k, 0, TY_F32));
  map_store(b, &m, out, res);
  map_end(&m);
  cg_launch(b, k);
  return true;
}
