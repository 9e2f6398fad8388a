/* ONNX ops of the newer opsets that the IR holds by decomposition: Mish,
 * Swish, SwiGLU, MeanVarianceNormalization, LpNormalization, RotaryEmbedding,
 * CumSum and CumProd, CenterCropPad, CausalConvWithState, Det, and the
 * window functions (constants).  Takes one node's operands, returns
 * its results; a float op of several IR ops computes f16/bf16 in f32 and
 * rounds once. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* x * tanh(softplus(x)) */
bool ox_op_mish(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_need_float_in(im, x)) return false;
  Val *w = ox_widen(im, x);
  return (n->out[0] = ox_narrow(im, ox_op2(im, OP_MUL, w, ox_op1(im, OP_TANH, ox_softplus_of(im, w))),
                                x->type.dtype));
}

/* x * sigmoid(alpha * x) (opset 24); alpha 1 is the IR's silu. */
bool ox_op_swish(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  double alpha;
  if (!x || !ox_attr_float(im, "alpha", 1.0, &alpha) || !ox_need_float_in(im, x)) return false;
  if (alpha == 1) return (n->out[0] = ox_op1(im, OP_SILU, x));
  Val *w = ox_widen(im, x);
  return (n->out[0] = ox_narrow(im, ox_op2(im, OP_MUL, w, ox_op1(im, OP_SIGMOID, ox_op2s(im, OP_MUL, w, alpha))),
                                x->type.dtype));
}

/* SwiGLU (opset 28): Swish_alpha(a) * b, a and b of one shape. */
bool ox_op_swiglu(Imp *im, ONode *n) {
  Val *a = ox_in_req(im, n, 0), *b = ox_in_req(im, n, 1);
  double alpha;
  if (!a || !b || !ox_attr_float(im, "alpha", 1.0, &alpha) || !ox_need_float_in(im, a)) return false;
  if (b->type.dtype != a->type.dtype || !ox_same_dims(&b->type, a->type.rank, a->type.dims))
    return ox_bad(im, "A and B must have one dtype and one shape (SwiGLU does not broadcast)");
  Val *wa = ox_widen(im, a);
  Val *gate = alpha == 1 ? ox_op1(im, OP_SILU, wa)
                         : ox_op2(im, OP_MUL, wa, ox_op1(im, OP_SIGMOID, ox_op2s(im, OP_MUL, wa, alpha)));
  return (n->out[0] = ox_narrow(im, ox_op2(im, OP_MUL, gate, ox_widen(im, b)), a->type.dtype));
}

/* Mean and variance over axes (kept as dims of 1). */
static void mean_var(Imp *im, Val *x, int k, const int64_t *axes, Val **mean, Val **var) {
  *mean = ox_reduce(im, OP_REDUCE_MEAN, x, k, axes, true);
  Val *d = ox_op2(im, OP_SUB, x, *mean);
  *var = ox_reduce(im, OP_REDUCE_MEAN, ox_op2(im, OP_MUL, d, d), k, axes, true);
}

/* (x - E[x]) / (sqrt(E[(x - E[x])^2]) + 1e-9), the 1e-9 of ONNX's
 * function body; over axes (default [0, 2, 3]). */
bool ox_op_mvn(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int na;
  const int64_t *a;
  if (!x || !ox_attr_ints(im, "axes", &na, &a) || !ox_need_float_in(im, x)) return false;
  static const int64_t def[3] = {0, 2, 3};
  int64_t axes[DL_MAX_RANK];
  int k;
  if (!ox_norm_axes(im, na >= 0 ? na : 3, na >= 0 ? a : def, x->type.rank, &k, axes)) return false;
  Val *w = ox_widen(im, x), *mean, *var;
  mean_var(im, w, k, axes, &mean, &var);
  Val *y = ox_op2(im, OP_DIV, ox_op2(im, OP_SUB, w, mean), ox_op2s(im, OP_ADD, ox_op1(im, OP_SQRT, var), 1e-9));
  return (n->out[0] = ox_narrow(im, y, x->type.dtype));
}

/* x / its L1 or L2 norm along axis; 0 where the norm is 0. */
bool ox_op_lp_norm(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int64_t axis_attr, p;
  int axis;
  if (!x || !ox_attr_int(im, "axis", -1, &axis_attr) || !ox_attr_int(im, "p", 2, &p) || !ox_need_float_in(im, x) ||
      !ox_norm_axis(im, axis_attr, x->type.rank, &axis))
    return false;
  if (p != 1 && p != 2) return ox_bad(im, "p=%" PRId64 " is not supported (1 or 2)", p);
  Val *w = ox_widen(im, x);
  int64_t ax = axis;
  Val *norm = p == 1 ? ox_reduce(im, OP_REDUCE_SUM, ox_op1(im, OP_ABS, w), 1, &ax, true)
                     : ox_op1(im, OP_SQRT, ox_reduce(im, OP_REDUCE_SUM, ox_op2(im, OP_MUL, w, w), 1, &ax, true));
  Val *zero = ox_op2s(im, OP_EQUAL, norm, 0);
  Val *y = ox_where(im, zero, ox_scalar(im, 0, TY_F32), ox_op2(im, OP_DIV, w, ox_where(im, zero, ox_scalar(im, 1, TY_F32), norm)));
  return (n->out[0] = ox_narrow(im, ox_cast(im, y, w->type.dtype), x->type.dtype));
}

/* x shifted by s along axis, the first s places `fill`. */
static Val *shift(Imp *im, Val *x, int axis, int64_t s, double fill) {
  if (!x) return NULL;
  int r = x->type.rank;
  int64_t pads[2 * DL_MAX_RANK] = {0};
  pads[axis] = s;
  Emit e;
  Node *p = ox_begin(im, &e, OP_PAD, 1, &x);
  ir_set_ints(im->g, p, "pads", 2 * r, pads);
  ir_set_float(im->g, p, "value", fill);
  return ox_slice_axis(im, ox_emit1(im, &e), axis, 0, x->type.dims[axis], 1);
}

/* CumSum and CumProd (any number type): log2(n) steps, each adding (or
 * multiplying) the running result shifted by 1, 2, 4, ... along axis;
 * exclusive shifts once more, reverse runs on the axis reversed. */
Val *ox_cumulative(Imp *im, Val *x, int axis, bool prod, bool exclusive, bool reverse) {
  OpKind op = prod ? OP_MUL : OP_ADD;
  double unit = prod ? 1 : 0;
  int64_t len = x->type.dims[axis];
  Val *y = reverse ? ox_reverse_axis(im, x, axis) : x;
  for (int64_t s = 1; s < len && y; s *= 2) y = ox_op2(im, op, y, shift(im, y, axis, s, unit));
  if (exclusive && len) y = shift(im, y, axis, 1, unit);
  return reverse && y ? ox_reverse_axis(im, y, axis) : y;
}

bool ox_op_cumulative(Imp *im, ONode *n) {
  bool prod = strcmp(im->np->op_type, "CumProd") == 0;
  Val *x = ox_in_req(im, n, 0), *va = ox_in_req(im, n, 1);
  int64_t exclusive, reverse;
  double ad;
  int axis;
  if (!x || !va || !ox_attr_int(im, "exclusive", 0, &exclusive) || !ox_attr_int(im, "reverse", 0, &reverse) ||
      !ox_const_scalar(im, va, "the axis", &ad) || !ox_norm_axis(im, (int64_t)ad, x->type.rank, &axis))
    return false;
  if (x->type.dtype == TY_BOOL) return ox_bad(im, "bool input is not supported");
  return (n->out[0] = ox_cumulative(im, x, axis, prod, exclusive != 0, reverse != 0));
}

/* Each axis cropped around its centre (the start rounded down) or padded
 * with zeros (the odd one after). */
bool ox_op_center_crop_pad(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *vs = ox_in_req(im, n, 1);
  int na, k;
  const int64_t *a;
  int64_t shape[64];
  if (!x || !vs || !ox_attr_ints(im, "axes", &na, &a) || !ox_const_ints(im, vs, "the shape", &k, shape)) return false;
  int r = x->type.rank;
  if (k != (na >= 0 ? na : r)) return ox_bad(im, "%d target sizes for %d axes", k, na >= 0 ? na : r);
  Val *y = x;
  int64_t pads[2 * DL_MAX_RANK] = {0};
  bool any = false;
  for (int i = 0; i < k && y; i++) {
    int d;
    if (!ox_norm_axis(im, na >= 0 ? a[i] : i, r, &d)) return false;
    int64_t in = x->type.dims[d], want = shape[i];
    if (want < 0) return ox_bad(im, "target size %" PRId64 " is negative", want);
    if (in > want) {
      int64_t start = (in - want) / 2;
      y = ox_slice_axis(im, y, d, start, start + want, 1);
    } else if (in < want) {
      pads[d] = (want - in) / 2;
      pads[r + d] = want - in - pads[d];
      any = true;
    }
  }
  if (any && y) {
    Emit e;
    Node *p = ox_begin(im, &e, OP_PAD, 1, &y);
    ir_set_ints(im->g, p, "pads", 2 * r, pads);
    ir_set_float(im->g, p, "value", 0);
    y = ox_emit1(im, &e);
  }
  return (n->out[0] = y);
}

/* HannWindow, HammingWindow, BlackmanWindow: a constant of `size` values
 * (size must be known: it is the result's shape), a0 - a1 cos(2 pi n / N)
 * + a2 cos(4 pi n / N) with N = size (periodic) or size - 1, computed in
 * double as ONNX's reference and rounded once to output_datatype. */
bool ox_op_window(Imp *im, ONode *n) {
  Val *s = ox_in_req(im, n, 0);
  int64_t periodic, code;
  double size;
  DType dt;
  if (!s || !ox_attr_int(im, "periodic", 1, &periodic) || !ox_attr_int(im, "output_datatype", 1, &code) ||
      !ox_const_scalar(im, s, "size", &size))
    return false;
  if (!ox_dtype_from_onnx((int32_t)code, &dt))
    return ox_bad(im, "output_datatype %s is not supported", ox_onnx_type_name((int32_t)code));
  if (!(size >= 0 && size <= 1 << 24 && size == floor(size)))
    return ox_bad(im, "size %g is not a whole number of at most 2^24", size);
  const char *t = im->np->op_type;
  double a0 = 0.5, a1 = 0.5, a2 = 0; /* Hann */
  if (strcmp(t, "HammingWindow") == 0) a0 = 25.0 / 46.0, a1 = 1 - a0;
  if (strcmp(t, "BlackmanWindow") == 0) a0 = 0.42, a1 = 0.5, a2 = 0.08;
  int64_t len = (int64_t)size;
  double N = periodic ? size : size - 1;
  TensorType tt = ir_type_make(dt, 1, &len);
  Val *w = ox_known_new(im, &tt);
  for (int64_t i = 0; i < len; i++)
    ir_tensor_set(w->k, i, a0 - a1 * cos(2 * M_PI * (double)i / N) + a2 * cos(4 * M_PI * (double)i / N));
  return (n->out[0] = w);
}

/* AffineGrid (opset 20): theta [N, 2, 3] (or [N, 3, 4]) applied to the
 * homogeneous positions (x, y[, z], 1) of an H x W (D x H x W) grid
 * spread over [-1, 1] (pixel centres at the ends with align_corners,
 * else pixel edges), as torch.nn.functional.affine_grid: the positions
 * are a constant [P, k + 1], the grid their product by theta^T,
 * [N, H, W, k].  size must be known at import (it is the output's
 * shape). */
bool ox_op_affine_grid(Imp *im, ONode *n) {
  Val *theta = ox_in_req(im, n, 0), *sv = ox_in_req(im, n, 1);
  int64_t align, size[8];
  int k;
  if (!theta || !sv || !ox_attr_int(im, "align_corners", 0, &align) || !ox_need_float_in(im, theta) ||
      !ox_const_ints(im, sv, "the size", &k, size))
    return false;
  if (k != 4 && k != 5) return ox_bad(im, "size must be [N, C, H, W] or [N, C, D, H, W], not %d values", k);
  int sp = k - 2; /* spatial dims: 2 or 3 */
  const TensorType *tt = &theta->type;
  if (tt->rank != 3 || tt->dims[0] != size[0] || tt->dims[1] != sp || tt->dims[2] != sp + 1)
    return ox_bad(im, "theta must be [%" PRId64 ", %d, %d] for a size of %d values", size[0], sp, sp + 1, k);
  int64_t P = 1;
  for (int d = 0; d < sp; d++) {
    if (size[2 + d] < 1) return ox_bad(im, "size %" PRId64 " must be at least 1", size[2 + d]);
    P *= size[2 + d];
    if (P > im->fold_max) return ox_bad(im, "a grid of more than %" PRId64 " positions is not supported", im->fold_max);
  }
  Val *w = ox_widen(im, theta);
  int64_t pd[2] = {P, sp + 1};
  TensorType bt = ir_type_make(w->type.dtype, 2, pd);
  Val *base = ox_known_new(im, &bt);
  for (int64_t p = 0; p < P; p++) {
    int64_t rest = p;
    /* the position's coordinates, x (the last dim) first */
    for (int d = sp - 1; d >= 0; d--) {
      int64_t len = size[2 + d], i = rest % len;
      rest /= len;
      double c = align ? (len > 1 ? -1 + 2.0 * (double)i / (double)(len - 1) : -1)
                       : -1 + (2.0 * (double)i + 1) / (double)len;
      ir_tensor_set(base->k, p * (sp + 1) + (sp - 1 - d), c);
    }
    ir_tensor_set(base->k, p * (sp + 1) + sp, 1);
  }
  static const int64_t swap[3] = {0, 2, 1};
  Val *g = ox_op2(im, OP_MATMUL, base, ox_transpose(im, w, swap));
  int64_t od[5] = {size[0]};
  for (int d = 0; d < sp; d++) od[1 + d] = size[2 + d];
  od[1 + sp] = sp;
  return (n->out[0] = ox_narrow(im, ox_reshape(im, g, sp + 2, od), theta->type.dtype));
}

/* RotaryEmbedding (opset 23), as onnx's reference computes it: X as
 * [B, S, H, D] (a 4-d [B, H, S, D] transposed, a 3-d [B, S, H D] split
 * by num_heads), its first rotary_embedding_dim (default D) values of
 * each head rotated by the caches' angles (at position_ids when given,
 * else the caches are [B, S, dim/2]): halves, or even and odd elements
 * when interleaved, x1 cos - x2 sin and x1 sin + x2 cos; the rest as
 * they are.  The slices, products and concats are ops the fuser joins
 * into one kernel. */
bool ox_op_rotary(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *cos_c = ox_in_req(im, n, 1), *sin_c = ox_in_req(im, n, 2), *pos = ox_in_opt(n, 3);
  int64_t interleaved, rdim, heads;
  if (!x || !cos_c || !sin_c || !ox_attr_int(im, "interleaved", 0, &interleaved) ||
      !ox_attr_int(im, "rotary_embedding_dim", 0, &rdim) || !ox_attr_int(im, "num_heads", 0, &heads) ||
      !ox_need_float_in(im, x))
    return false;
  const TensorType *xt = &x->type;
  int r = xt->rank;
  if (r != 3 && r != 4) return ox_bad(im, "X must be 3-d [batch, seq, hidden] or 4-d [batch, heads, seq, head]");
  static const int64_t swap_hs[4] = {0, 2, 1, 3};
  Val *h = x;
  if (r == 4) {
    h = ox_transpose(im, x, swap_hs);
  } else {
    if (heads <= 0 || xt->dims[2] % heads)
      return ox_bad(im, "num_heads=%" PRId64 " must be given for a 3-d X and divide its hidden size %" PRId64, heads,
                    xt->dims[2]);
    int64_t d4[4] = {xt->dims[0], xt->dims[1], heads, xt->dims[2] / heads};
    h = ox_reshape(im, x, 4, d4);
  }
  if (!h) return false;
  int64_t B = h->type.dims[0], S = h->type.dims[1], D = h->type.dims[3];
  if (rdim == 0) rdim = D;
  if (rdim < 0 || rdim > D || rdim % 2)
    return ox_bad(im, "rotary_embedding_dim=%" PRId64 " must be even and at most the head size %" PRId64, rdim, D);
  int64_t half = rdim / 2;
  Val *cs[2] = {cos_c, sin_c};
  for (int i = 0; i < 2; i++) {
    if (pos) {
      if (ir_dtype_is_float(pos->type.dtype) || cs[i]->type.rank != 2)
        return ox_bad(im, "with position_ids, the caches must be 2-d [positions, dim/2] and the ids integers");
      cs[i] = ox_gather(im, cs[i], pos, 0);
      if (!cs[i]) return false;
    }
    const TensorType *ct = &cs[i]->type;
    if (ct->rank != 3 || ct->dims[0] != B || ct->dims[1] != S || ct->dims[2] != half)
      return ox_bad(im, "the %s cache gives %d-d values per position where [%" PRId64 ", %" PRId64 ", %" PRId64
                    "] (batch, sequence, rotary_embedding_dim / 2) are needed",
                    i ? "sin" : "cos", ct->rank, B, S, half);
  }
  Val *y = ox_rotate(im, h, cs[0], cs[1], rdim, interleaved != 0);
  if (!y) return false;
  return (n->out[0] = r == 4 ? ox_transpose(im, y, swap_hs) : ox_reshape(im, y, 3, xt->dims));
}

Val *ox_rotate(Imp *im, Val *h, Val *cos_bs, Val *sin_bs, int64_t rdim, bool interleaved) {
  if (!h || !cos_bs || !sin_bs) return NULL;
  int64_t B = h->type.dims[0], S = h->type.dims[1], H = h->type.dims[2], D = h->type.dims[3], half = rdim / 2;
  Val *cs[2] = {cos_bs, sin_bs};
  int64_t d4[4] = {B, S, 1, half};
  for (int i = 0; i < 2; i++) cs[i] = ox_widen(im, ox_reshape(im, cs[i], 4, d4));
  Val *w = ox_widen(im, h);
  Val *xr = ox_slice_axis(im, w, 3, 0, rdim, 1);
  Val *x1 = interleaved ? ox_slice_axis(im, xr, 3, 0, rdim, 2) : ox_slice_axis(im, xr, 3, 0, half, 1);
  Val *x2 = interleaved ? ox_slice_axis(im, xr, 3, 1, rdim, 2) : ox_slice_axis(im, xr, 3, half, rdim, 1);
  Val *parts[2] = {ox_op2(im, OP_SUB, ox_op2(im, OP_MUL, cs[0], x1), ox_op2(im, OP_MUL, cs[1], x2)),
                   ox_op2(im, OP_ADD, ox_op2(im, OP_MUL, cs[1], x1), ox_op2(im, OP_MUL, cs[0], x2))};
  Val *rot;
  if (interleaved) {
    /* real and imaginary parts side by side per pair: [.., dim/2, 2] */
    int64_t d5[5] = {B, S, H, half, 1}, dr[4] = {B, S, H, rdim};
    for (int i = 0; i < 2; i++) parts[i] = ox_reshape(im, parts[i], 5, d5);
    rot = ox_reshape(im, ox_concat(im, 2, parts, 4), 4, dr);
  } else {
    rot = ox_concat(im, 2, parts, 3);
  }
  if (rdim < D) {
    Val *all[2] = {rot, ox_slice_axis(im, w, 3, rdim, D, 1)};
    rot = ox_concat(im, 2, all, 3);
  }
  return ox_narrow(im, rot, h->type.dtype);
}

/* CausalConvWithState: a depthwise 1-d convolution over [B, C, L] whose
 * k - 1 left taps read past_state [B, C, k - 1] (zeros without one),
 * then silu (or swish, the same) or nothing; present_state is the last
 * k - 1 positions of past_state joined with the input.  The convolution
 * is the IR's conv2d over [B, C, 1, k - 1 + L], groups C. */
bool ox_op_causal_conv(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *w = ox_in_req(im, n, 1), *b = ox_in_opt(n, 2), *past = ox_in_opt(n, 3);
  const char *act;
  if (!x || !w || !ox_attr_str(im, "activation", "none", &act) || !ox_need_float_in(im, x)) return false;
  bool silu = strcmp(act, "silu") == 0 || strcmp(act, "swish") == 0;
  if (!silu && strcmp(act, "none") != 0)
    return ox_bad(im, "activation '%s' is not supported (none, silu, swish)", act);
  char xs[IR_TYPE_STR_MAX], ws[IR_TYPE_STR_MAX];
  const TensorType *xt = &x->type, *wt = &w->type;
  if (xt->rank != 3 || wt->rank != 3 || wt->dims[0] != xt->dims[1] || wt->dims[1] != 1 || wt->dims[2] < 1 ||
      wt->dtype != xt->dtype)
    return ox_bad(im, "input %s and weight %s must be [B, C, L] and [C, 1, k] of one dtype",
                  ir_type_str(xt, xs, sizeof xs), ir_type_str(wt, ws, sizeof ws));
  int64_t B = xt->dims[0], C = xt->dims[1], L = xt->dims[2], k = wt->dims[2];
  if (b && (b->type.rank != 1 || b->type.dims[0] != C || b->type.dtype != xt->dtype))
    return ox_bad(im, "bias %s must be [%" PRId64 "] of the input's dtype", ir_type_str(&b->type, ws, sizeof ws), C);
  int64_t sd[3] = {B, C, k - 1};
  if (past && (past->type.dtype != xt->dtype || !ox_same_dims(&past->type, 3, sd)))
    return ox_bad(im, "past_state %s must be [%" PRId64 ", %" PRId64 ", %" PRId64 "] of the input's dtype",
                  ir_type_str(&past->type, ws, sizeof ws), B, C, k - 1);
  Val *padded = x;
  if (k > 1) {
    if (!past) {
      TensorType zt = ir_type_make(xt->dtype, 3, sd);
      past = ox_known_new(im, &zt); /* zeros */
    }
    Val *parts[2] = {past, x};
    padded = ox_concat(im, 2, parts, 2);
  }
  int64_t wd[4] = {C, 1, 1, k};
  Val *in[3] = {ox_to_2d(im, padded), ox_reshape(im, w, 4, wd), b};
  if (!in[0] || !in[1]) return false;
  Emit e;
  Node *c = ox_begin(im, &e, OP_CONV2D, b ? 3 : 2, in);
  ir_set_ints(im->g, c, "stride", 2, (const int64_t[]){1, 1});
  ir_set_ints(im->g, c, "pad", 4, (const int64_t[]){0, 0, 0, 0});
  ir_set_ints(im->g, c, "dilation", 2, (const int64_t[]){1, 1});
  ir_set_int(im->g, c, "groups", C);
  Val *y = ox_from_2d(im, ox_emit1(im, &e), 1);
  if (y && silu) y = ox_op1(im, OP_SILU, y);
  n->out[0] = y;
  n->out[1] = ox_slice_axis(im, padded, 2, L, L + k - 1, 1);
  return y && n->out[1];
}

enum { DET_MAX = 4 };

/* Det of [..., n, n] for n <= 4 by Leibniz's formula (at most 24
 * products of n entries, in f32 for half types): exact enough at these
 * sizes, where an unrolled LU would need its pivots chosen at run time. */
bool ox_op_det(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_need_float_in(im, x)) return false;
  const TensorType *t = &x->type;
  char ts[IR_TYPE_STR_MAX];
  if (t->rank < 2 || t->dims[t->rank - 1] != t->dims[t->rank - 2])
    return ox_bad(im, "X %s is not a batch of square matrices", ir_type_str(t, ts, sizeof ts));
  int r = t->rank, m = (int)t->dims[r - 1];
  if (m > DET_MAX) return ox_bad(im, "Det of %dx%d matrices is not supported (at most %dx%d)", m, m, DET_MAX, DET_MAX);
  Val *w = ox_widen(im, x), *sum = NULL;
  int64_t out[DL_MAX_RANK], flat[DL_MAX_RANK];
  for (int d = 0; d < r - 2; d++) out[d] = flat[d] = t->dims[d];
  flat[r - 2] = (int64_t)m * m;
  /* the entries as [..., 1] columns of [..., m * m] */
  Val *cells = m ? ox_reshape(im, w, r - 1, flat) : NULL;
  int perm[DET_MAX] = {0, 1, 2, 3};
  if (m == 0) return (n->out[0] = ox_narrow(im, ox_expand(im, ox_scalar(im, 1, TY_F32), r - 2, out), t->dtype));
  /* every permutation, in lexicographic order, with its sign */
  for (;;) {
    int inversions = 0;
    for (int i = 0; i < m; i++)
      for (int j = i + 1; j < m; j++) inversions += perm[i] > perm[j];
    Val *term = NULL;
    for (int i = 0; i < m; i++) {
      Val *e = ox_slice_axis(im, cells, r - 2, (int64_t)i * m + perm[i], (int64_t)i * m + perm[i] + 1, 1);
      term = term ? ox_op2(im, OP_MUL, term, e) : e;
    }
    sum = !sum ? (inversions % 2 ? ox_op1(im, OP_NEG, term) : term)
               : ox_op2(im, inversions % 2 ? OP_SUB : OP_ADD, sum, term);
    int i = m - 2;
    while (i >= 0 && perm[i] > perm[i + 1]) i--;
    if (i < 0) break;
    int j = m - 1;
    while (perm[j] < perm[i]) j--;
    int s = perm[i];
    perm[i] = perm[j], perm[j] = s;
    for (int a = i + 1, b = m - 1; a < b; a++, b--) s = perm[a], perm[a] = perm[b], perm[b] = s;
  }
  return (n->out[0] = ox_narrow(im, ox_reshape(im, sum, r - 2, out), t->dtype));
}
