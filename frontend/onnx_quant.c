/* Quantized ONNX models: takes QuantizeLinear/DequantizeLinear, the
 * QOperator ops (ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul)
 * and Conv/MatMul/Gemm over DequantizeLinear's results (QDQ), returns
 * the IR's quantize/dequantize and int8 products with their corrections
 * and requantization. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* ---- quantized models: QDQ and QOperator ---- */

/* ONNX's two int8 formats (docs/quantization.md, "Importing quantized
 * ONNX models"):
 *  - QuantizeLinear and DequantizeLinear are the IR's quantize (to=u8 for
 *    UINT8) and dequantize, per tensor or per axis;
 *  - ConvInteger, MatMulInteger, QLinearConv and QLinearMatMul are int8
 *    products.  A u8 operand with zero point z is the i8 operand c - 128
 *    with zero point z - 128, which leaves every difference c - z as it
 *    was; zero points that do not vanish are corrected with sums of the
 *    operands; QLinear* requantize the i32 accumulator as onnxruntime
 *    does, sat(rint(acc * m) + z_y) with m = s_a * s_b / s_y in f32;
 *  - Conv, MatMul and Gemm whose operands come from DequantizeLinear (the
 *    QDQ format) are the same int8 products, and a QuantizeLinear of such
 *    a product's result requantizes the accumulator directly: what
 *    onnxruntime runs for DQ -> Conv -> Q (its QLinearConv). */

/* A tensor's quantization: the codes q (i8 or u8; for a product's
 * result, its i32 accumulator), one scale and zero point per tensor
 * (axis -1) or per slice of q along axis. */
typedef struct Quant {
  Val *q;
  bool acc; /* q is an int8 product's accumulator */
  int axis;
  int64_t n;
  float *scale;
  int32_t *zp;
} Quant;

static bool zp_uniform(const Quant *p) {
  for (int64_t c = 1; c < p->n; c++)
    if (p->zp[c] != p->zp[0]) return false;
  return true;
}

static bool zp_zero(const Quant *p) { return zp_uniform(p) && p->zp[0] == 0; }

/* n values as a known tensor of dtype dt that broadcasts along axis of a
 * rank-r tensor ([n, 1, ..., 1]); a scalar when n is 1. */
static Val *along_axis(Imp *im, DType dt, int64_t n, const double *v, int axis, int r) {
  int64_t dims[DL_MAX_RANK] = {0};
  int rank = n == 1 ? 0 : r - axis;
  for (int d = 0; d < rank; d++) dims[d] = d == 0 ? n : 1;
  TensorType tt = ir_type_make(dt, rank, dims);
  Val *t = ox_known_new(im, &tt);
  for (int64_t i = 0; i < n; i++) ir_tensor_set(t->k, i, v[i]);
  return t;
}

static Val *scales_along(Imp *im, const Quant *p, int r) {
  double *v = ARENA_ARRAY(&im->c->arena, double, p->n);
  for (int64_t i = 0; i < p->n; i++) v[i] = p->scale[i];
  return along_axis(im, TY_F32, p->n, v, p->axis, r);
}

static Val *zps_along(Imp *im, const Quant *p, int r) {
  double *v = ARENA_ARRAY(&im->c->arena, double, p->n);
  for (int64_t i = 0; i < p->n; i++) v[i] = p->zp[i];
  return along_axis(im, TY_I32, p->n, v, p->axis, r);
}

/* The scale and zero point operands of a quantized tensor x of a
 * (De)QuantizeLinear or a QLinear op: known, one value, or one per slice
 * of x along axis (axis -1: one value only).  scale NULL: all 1 (the
 * Integer ops); zp NULL: 0.  *zdt: the zero point's dtype (TY_COUNT when
 * there is none). */
static bool quant_params(Imp *im, const TensorType *x, Val *scale, Val *zp, int64_t axis,
                         const char *what, Quant *out, DType *zdt) {
  const Tensor *s = scale ? ox_need_const(im, scale, arena_printf(&im->c->arena, "%s's scale", what)) : NULL;
  const Tensor *z = zp ? ox_need_const(im, zp, arena_printf(&im->c->arena, "%s's zero point", what)) : NULL;
  if ((scale && !s) || (zp && !z)) return false;
  const Tensor *shape = s ? s : z;
  int64_t n = shape ? ir_type_numel(&shape->type) : 1;
  *out = (Quant){.axis = -1, .n = n};
  if (n > 1 || (shape && shape->type.rank > 1)) {
    char ts[IR_TYPE_STR_MAX];
    if (axis < 0 || shape->type.rank != 1)
      return ox_bad(im, "%s: a %s scale or zero point is not supported (one value%s)", what,
                    ir_type_str(&shape->type, ts, sizeof ts),
                    axis < 0 ? "" : ", or one per slice along an axis");
    int a;
    if (!ox_norm_axis(im, axis, x->rank, &a)) return false;
    if (x->dims[a] != n)
      return ox_bad(im, "%s: %" PRId64 " scales or zero points, but %" PRId64 " slices along axis %d", what,
                    n, x->dims[a], a);
    out->axis = a;
  }
  if (s && z && ir_type_numel(&z->type) != n)
    return ox_bad(im, "%s: %" PRId64 " scales but %" PRId64 " zero points", what, n, ir_type_numel(&z->type));
  if (s && !ir_dtype_is_float(s->type.dtype)) return ox_bad(im, "%s: the scale must be a float", what);
  /* before its values are read as integers: a float there is no zero point */
  if (z && z->type.dtype != TY_I8 && z->type.dtype != TY_U8 && z->type.dtype != TY_I32 &&
      z->type.dtype != TY_I16 && z->type.dtype != TY_U16)
    return ox_bad(im, "%s: a zero point of dtype %s is not supported (INT8, UINT8, INT16, UINT16, INT32)", what,
                  ir_dtype_name(z->type.dtype));
  out->scale = ARENA_ARRAY(&im->c->arena, float, n);
  out->zp = ARENA_ARRAY(&im->c->arena, int32_t, n);
  for (int64_t i = 0; i < n; i++) {
    out->scale[i] = s ? (float)ir_tensor_get(s, i) : 1.0f;
    if (!(out->scale[i] > 0) || isinf(out->scale[i]))
      return ox_bad(im, "%s: scale %g is not a positive finite f32", what, (double)out->scale[i]);
    out->zp[i] = z ? (int32_t)ir_tensor_get(z, i) : 0;
  }
  *zdt = z ? z->type.dtype : TY_COUNT;
  return true;
}

/* quantize x by p's scales and zero points into dtype `to`.  The zero
 * point is always given, so that the codes saturate to the dtype's whole
 * range as ONNX says (the IR's quantize without one stays symmetric).
 * Zero points that differ along the axis: one quantize per slice. */
static Val *emit_quantize(Imp *im, Val *x, const Quant *p, DType to) {
  if (!zp_uniform(p)) {
    Val **parts = ARENA_ARRAY(&im->c->arena, Val *, p->n);
    for (int64_t c = 0; c < p->n; c++) {
      Quant one = {.axis = -1, .n = 1, .scale = &p->scale[c], .zp = &p->zp[c]};
      parts[c] = emit_quantize(im, ox_slice_axis(im, x, p->axis, c, c + 1, 1), &one, to);
    }
    return ox_concat(im, (int)p->n, parts, p->axis);
  }
  Val *in[2] = {x, p->axis >= 0 ? scales_along(im, p, x->type.rank) : NULL};
  Emit e;
  Node *n = ox_begin(im, &e, OP_QUANTIZE, in[1] ? 2 : 1, in);
  if (!in[1]) ir_set_float(im->g, n, "scale", p->scale[0]);
  ir_set_int(im->g, n, "zero_point", p->zp[0]);
  if (to == TY_U8) ir_set_dtype(im->g, n, "to", TY_U8);
  return ox_emit1(im, &e);
}

/* (q - zp) * scale in f32.  Zero points that differ along the axis are
 * subtracted in i32 first, which is exact. */
static Val *emit_dequantize(Imp *im, Val *q, const Quant *p) {
  int32_t zp = p->zp[0];
  if (!zp_uniform(p)) {
    q = ox_op2(im, OP_SUB, ox_cast(im, q, TY_I32), zps_along(im, p, q->type.rank));
    zp = 0;
  }
  if (!q) return NULL;
  Val *in[2] = {q, p->axis >= 0 ? scales_along(im, p, q->type.rank) : NULL};
  Emit e;
  Node *n = ox_begin(im, &e, OP_DEQUANTIZE, in[1] ? 2 : 1, in);
  if (!in[1]) ir_set_float(im->g, n, "scale", p->scale[0]);
  if (zp) ir_set_int(im->g, n, "zero_point", zp);
  return ox_emit1(im, &e);
}

/* sat(rint(acc * m) + zy) into `to`: onnxruntime's requantization of an
 * int8 product, as one f32 product (dequantize by m) and a quantize by 1,
 * which is exact.  m: one value or one per slice of acc along an axis. */
static Val *requantize(Imp *im, Val *acc, const Quant *m, int32_t zy, DType to) {
  Quant mq = *m;
  mq.zp = ARENA_ARRAY(&im->c->arena, int32_t, m->n); /* zeros */
  float one = 1.0f;
  Quant out = {.axis = -1, .n = 1, .scale = &one, .zp = &zy};
  return emit_quantize(im, emit_dequantize(im, acc, &mq), &out, to);
}

/* ---- int8 products ---- */

/* An operand of an integer product in i8, with its zero points in i8's
 * terms (one, or one per slice along axis); `zero`: all of them 0, so
 * the product needs no correction for them. */
static bool known(const Val *v) { return !v || v->k || v->hint; }

typedef struct Int8 {
  Val *v;
  int axis;
  int64_t n;
  int32_t *zp;
  bool zero;
  /* A zero point computed at run time (DynamicQuantizeLinear's), as an
   * i32 of the i8 codes shaped to broadcast over the product (a: [] or
   * [M, 1]; b: [] or [N]), in place of zp; or NULL. */
  Val *zrt;
} Int8;

/* A u8 code c as the i8 code c - 128: dequantize by 1 around 128, then
 * quantize by 1 (both exact), so that it fuses with its neighbours. */
static Val *u8_to_i8(Imp *im, Val *q) {
  float one = 1.0f;
  int32_t mid = 128, zero = 0;
  Quant around = {.axis = -1, .n = 1, .scale = &one, .zp = &mid};
  Quant id = {.axis = -1, .n = 1, .scale = &one, .zp = &zero};
  Val *f = emit_dequantize(im, q, &around);
  return f ? emit_quantize(im, f, &id, TY_I8) : NULL;
}

/* Which slice along axis element i of t falls in. */
static int64_t slice_of(const TensorType *t, int axis, int64_t i) {
  if (axis < 0) return 0;
  int64_t inner = 1;
  for (int d = axis + 1; d < t->rank; d++) inner *= t->dims[d];
  return (i / inner) % t->dims[axis];
}

/* A known q whose every q - zp fits i8, as those differences. */
static Val *known_differences(Imp *im, const Val *q, const Quant *p) {
  int64_t count = ir_type_numel(&q->type);
  for (int64_t i = 0; i < count; i++) {
    double d = ir_tensor_get(q->k, i) - p->zp[slice_of(&q->type, p->axis, i)];
    if (d < -128 || d > 127) return NULL;
  }
  TensorType t = q->type;
  t.dtype = TY_I8;
  Val *v = ox_known_new(im, &t);
  for (int64_t i = 0; i < count; i++)
    ((int8_t *)v->k->data)[i] = (int8_t)(ir_tensor_get(q->k, i) - p->zp[slice_of(&q->type, p->axis, i)]);
  return v;
}

static bool to_int8(Imp *im, Val *q, const Quant *p, const char *what, Int8 *out) {
  DType dt = q->type.dtype;
  if (dt != TY_I8 && dt != TY_U8)
    return ox_bad(im, "%s of dtype %s is not supported (INT8 or UINT8)", what, ir_dtype_name(dt));
  *out = (Int8){.v = q, .axis = p->axis, .n = p->n, .zp = ARENA_ARRAY(&im->c->arena, int32_t, p->n)};
  if (q->k && !(dt == TY_I8 && zp_zero(p)) && (out->v = known_differences(im, q, p))) {
    out->zero = true;
    return true;
  }
  out->v = dt == TY_U8 ? u8_to_i8(im, q) : q;
  bool zero = true;
  for (int64_t c = 0; c < p->n; c++) {
    out->zp[c] = p->zp[c] - (dt == TY_U8 ? 128 : 0);
    zero &= out->zp[c] == 0;
  }
  out->zero = zero;
  return out->v != NULL;
}

static Val *zp8_along(Imp *im, const Int8 *x, int axis, int r) {
  double *v = ARENA_ARRAY(&im->c->arena, double, x->n);
  for (int64_t i = 0; i < x->n; i++) v[i] = x->zp[i];
  return along_axis(im, TY_I32, x->n, v, axis, r);
}

/* Sums of i8 codes in i32, as int8 products with ones (which codegen
 * runs as its int8 GEMMs): each row of v [..., K] as [..., 1], each
 * column of v [..., K, N] as [..., 1, N]. */
static Val *ones_i8(Imp *im, int64_t rows, int64_t cols) {
  int64_t dims[2] = {rows, cols};
  TensorType t = ir_type_make(TY_I8, 2, dims);
  Val *v = ox_known_new(im, &t);
  memset(v->k->data, 1, (size_t)(rows * cols));
  return v;
}

static Val *row_sums(Imp *im, Val *v) {
  return v ? ox_op2(im, OP_MATMUL, v, ones_i8(im, v->type.dims[v->type.rank - 1], 1)) : NULL;
}

static Val *col_sums(Imp *im, Val *v) {
  return v ? ox_op2(im, OP_MATMUL, ones_i8(im, 1, v->type.dims[v->type.rank - 2]), v) : NULL;
}

/* Each output channel's sum of w [C, ...] as [C]. */
static Val *channel_sums(Imp *im, Val *w) {
  int64_t c = w->type.dims[0], flat[2] = {c, ir_type_numel(&w->type) / c};
  return ox_reshape(im, row_sums(im, ox_reshape(im, w, 2, flat)), 1, &c);
}

/* a - b * c, with c a scalar or an axis-shaped tensor. */
static Val *minus_product(Imp *im, Val *a, Val *b, Val *c) {
  return ox_op2(im, OP_SUB, a, ox_op2(im, OP_MUL, b, c));
}

static Val *conv_node(Imp *im, Val *x, Val *w, Val *b, const Window *win, int64_t group, int32_t zp) {
  if (!x || !w) return NULL;
  Val *in[3] = {x, w, b};
  Emit e;
  Node *c = ox_begin(im, &e, OP_CONV2D, b ? 3 : 2, in);
  ir_set_ints(im->g, c, "stride", 2, win->stride);
  ir_set_ints(im->g, c, "pad", 4, win->pad);
  ir_set_ints(im->g, c, "dilation", 2, win->dil);
  ir_set_int(im->g, c, "groups", group);
  if (zp) ir_set_int(im->g, c, "zero_point", zp);
  return ox_emit1(im, &e);
}

/* sum (x - zx)(w - zw) of a 2-d convolution, in i32.  The conv2d of the
 * i8 codes reads zx where it pads, so padding adds nothing; then
 *   sum (x - zx)(w - zw) = sum x w - zx sum w - zw sum x + K zx zw
 * over each window's K taps: the zx terms are per output channel and go
 * into the i32 bias, the zw term needs the windows' sums of x (a conv2d
 * with ones) and is there only when a weight zero point is not 0. */
/* The same with zx computed at run time (DynamicQuantizeLinear's): the
 * padding cannot read it, so the conv2d pads with 0 and every term is
 * summed over each window's taps inside the image (valid), which the
 * convolutions of ones give:
 *   sum_valid (x - zx)(w - zw) = conv(x, w) - zx conv(1, w)
 *                                - zw conv(x, 1) + zx zw conv(1, 1)
 * conv(1, w) and conv(1, 1) are known at import (an image of ones). */
static Val *int_conv_runtime_zp(Imp *im, const Int8 *x, const Int8 *w, Val *bias, const Window *win,
                                int64_t group) {
  const TensorType *wt = &w->v->type, *xt = &x->v->type;
  TensorType one_x = *xt;
  one_x.dims[0] = 1;
  Val *ones = ox_known_new(im, &one_x);
  memset(ones->k->data, 1, (size_t)ir_type_numel(&one_x));
  Val *acc = conv_node(im, x->v, w->v, bias, win, group, 0);
  acc = minus_product(im, acc, conv_node(im, ones, w->v, NULL, win, group, 0), x->zrt);
  if (w->zero || !acc) return acc;
  Val *ones_w = ox_known_new(im, wt);
  memset(ones_w->k->data, 1, (size_t)ir_type_numel(wt));
  Val *zw = zp8_along(im, w, 0, 3);
  acc = minus_product(im, acc, conv_node(im, x->v, ones_w, NULL, win, group, 0), zw);
  Val *taps = conv_node(im, ones, ones_w, NULL, win, group, 0);
  return ox_op2(im, OP_ADD, acc, ox_op2(im, OP_MUL, taps, ox_op2(im, OP_MUL, zw, x->zrt)));
}

static Val *int_conv(Imp *im, const Int8 *x, const Int8 *w, Val *bias, const Window *win, int64_t group) {
  if (x->zrt) return int_conv_runtime_zp(im, x, w, bias, win, group);
  const TensorType *wt = &w->v->type;
  int64_t K = wt->dims[1] * wt->dims[2] * wt->dims[3];
  int32_t zx = x->zp[0];
  Val *b = bias;
  if (zx) {
    Val *t = ox_op2s(im, OP_MUL, channel_sums(im, w->v), -zx);
    if (!w->zero) t = ox_op2(im, OP_ADD, t, ox_op2s(im, OP_MUL, zp8_along(im, w, 0, 1), (double)K * zx));
    b = b ? ox_op2(im, OP_ADD, b, t) : t;
  }
  Val *acc = conv_node(im, x->v, w->v, b, win, group, zx);
  if (w->zero || !acc) return acc;
  Val *ones = ox_known_new(im, wt);
  for (int64_t i = 0; i < ir_type_numel(wt); i++) ((int8_t *)ones->k->data)[i] = 1;
  Val *sums = conv_node(im, x->v, ones, NULL, win, group, zx);
  return minus_product(im, acc, sums, zp8_along(im, w, 0, 3));
}

/* sum_k (a - za)(b - zb) of a matmul, in i32: the matmul of the i8 codes,
 * less za times b's column sums and zb times a's row sums, plus K za zb.
 * za: one, or one per row of a; zb: one, or one per column of b. */
static Val *int_matmul(Imp *im, const Int8 *a, const Int8 *b) {
  int64_t K = a->v->type.dims[a->v->type.rank - 1];
  Val *acc = ox_op2(im, OP_MATMUL, a->v, b->v);
  Val *za = a->zrt ? a->zrt : a->zero ? NULL : zp8_along(im, a, 0, 2);
  Val *zb = b->zrt ? b->zrt : b->zero ? NULL : zp8_along(im, b, 0, 1);
  if (za) acc = minus_product(im, acc, col_sums(im, b->v), za);
  if (zb) acc = minus_product(im, acc, row_sums(im, a->v), zb);
  if (za && zb) acc = ox_op2(im, OP_ADD, acc, ox_op2s(im, OP_MUL, ox_op2(im, OP_MUL, za, zb), (double)K));
  return acc;
}

/* The same for x [..., K] times a known w [N, K] as a linear layer: the
 * za term folds into the i32 bias, so that it costs nothing at run time.
 * x's zero point is one value. */
static Val *int_linear(Imp *im, const Int8 *x, const Int8 *w, Val *bias) {
  int64_t K = w->v->type.dims[1];
  int32_t zx = x->zp[0];
  Val *b = bias;
  if (zx) {
    Val *t = ox_op2s(im, OP_MUL, channel_sums(im, w->v), -zx);
    if (!w->zero) t = ox_op2(im, OP_ADD, t, ox_op2s(im, OP_MUL, zp8_along(im, w, 0, 1), (double)K * zx));
    b = b ? ox_op2(im, OP_ADD, b, t) : t;
  }
  Val *in[3] = {x->v, w->v, b};
  Emit e;
  ox_begin(im, &e, OP_LINEAR, b ? 3 : 2, in);
  Val *acc = ox_emit1(im, &e);
  if (w->zero || !acc) return acc;
  return minus_product(im, acc, row_sums(im, x->v), zp8_along(im, w, 0, 1));
}

/* b [K, N] per column as w [N, K] per row. */
static Int8 transposed(Imp *im, Int8 b) {
  static const int64_t swap[2] = {1, 0};
  b.v = ox_transpose(im, b.v, swap);
  if (b.axis >= 0) b.axis = 1 - b.axis;
  return b;
}

/* a @ b: the linear form when b is a known matrix and a's zero point one
 * value (weights), else the matmul form. */
static Val *int_product(Imp *im, const Int8 *a, const Int8 *b) {
  if (b->v->k && b->v->type.rank == 2 && a->n == 1 && (b->axis < 0 || b->axis == 1) && !a->zrt && !b->zrt) {
    Int8 w = transposed(im, *b);
    return int_linear(im, a, &w, NULL);
  }
  return int_matmul(im, a, b);
}

/* The scales of a product of per-tensor a and b (per output channel),
 * s_a * s_b in f32, as onnxruntime computes them; divided by s_y when
 * given (> 0). */
static Quant product_scales(Imp *im, const Quant *a, const Quant *b, int axis, float sy) {
  Quant s = {.axis = b->n > 1 ? axis : -1, .n = b->n};
  s.scale = ARENA_ARRAY(&im->c->arena, float, b->n);
  s.zp = ARENA_ARRAY(&im->c->arena, int32_t, b->n);
  for (int64_t c = 0; c < b->n; c++) {
    float p = a->scale[0] * b->scale[c]; /* rounded to f32 before the division */
    s.scale[c] = sy > 0 ? p / sy : p;
  }
  return s;
}

static DType quantized_dtype_of(DType zdt) { return zdt == TY_I8 ? TY_I8 : TY_U8; }

/* ---- narrow types (held wider: ox_held_format) ---- */

/* A float8 or float4 zero point must be all zeros: the scale alone. */
static bool zero_float_zp(Imp *im, Val *z, const char *what) {
  if (!z) return true;
  const Tensor *t = ox_need_const(im, z, arena_printf(&im->c->arena, "%s's zero point", what));
  if (!t) return false;
  for (int64_t i = 0, n = ir_type_numel(&t->type); i < n; i++)
    if (ir_tensor_get(t, i) != 0)
      return ox_bad(im, "%s: a nonzero %s zero point is not supported", what, ox_onnx_type_name(z->held));
  return true;
}

/* x times or over the scales (one, or one per slice along p's axis). */
static Val *by_scales(Imp *im, OpKind op, Val *x, const Quant *p) {
  return p->axis >= 0 ? ox_op2(im, op, x, scales_along(im, p, x->type.rank)) : ox_op2s(im, op, x, p->scale[0]);
}

/* Into a float8/float4 type: x / scale in f32, rounded into the format
 * (saturating as asked), held in f16.  Into int4/int2: int8's codes
 * clipped to the narrow range (saturating twice is saturating once). */
static Val *quantize_held(Imp *im, Val *x, Val *s, Val *z, int64_t axis, int32_t code, bool saturate) {
  DType hold;
  const IrNarrow *f = ox_held_format(code, &hold);
  Quant p;
  DType zdt;
  if (!ox_need_float_in(im, x)) return NULL;
  Val *r;
  if (f->kind != IR_NARROW_INT) {
    if (!zero_float_zp(im, z, "y") || !quant_params(im, &x->type, s, NULL, axis, "y", &p, &zdt)) return NULL;
    Val *q = by_scales(im, OP_DIV, ox_cast(im, x, TY_F32), &p);
    if (!q) return NULL;
    Emit e;
    Node *n = ox_begin(im, &e, OP_FP_ROUND, 1, &q);
    ir_set_str(im->g, n, "format", f->name);
    ir_set_int(im->g, n, "saturate", saturate);
    r = ox_cast(im, ox_emit1(im, &e), hold);
  } else {
    if (!quant_params(im, &x->type, s, z, axis, "y", &p, &zdt)) return NULL;
    Val *q = emit_quantize(im, x, &p, hold);
    if (!q) return NULL;
    Emit e;
    Node *n = ox_begin(im, &e, OP_CLIP, 1, &q);
    ir_set_float(im->g, n, "min", f->emin);
    ir_set_float(im->g, n, "max", f->max);
    r = ox_emit1(im, &e);
  }
  if (r) r->held = code;
  return r;
}

/* From a narrow type: int4/int2 codes as int8's; float8/float4 values
 * (exact in f32) times the scale. */
static Val *dequantize_held(Imp *im, Val *x, Val *s, Val *z, int64_t axis) {
  DType hold;
  const IrNarrow *f = ox_held_format(x->held, &hold);
  Quant *p = ARENA_NEW(&im->c->arena, Quant);
  DType zdt;
  if (z && z->held != x->held)
    return ox_bad(im, "x is %s but x_zero_point is not", ox_onnx_type_name(x->held)), NULL;
  if (f->kind != IR_NARROW_INT) {
    if (!zero_float_zp(im, z, "x") || !quant_params(im, &x->type, s, NULL, axis, "x", p, &zdt)) return NULL;
    return by_scales(im, OP_MUL, ox_cast(im, x, TY_F32), p);
  }
  if (!quant_params(im, &x->type, s, z, axis, "x", p, &zdt)) return NULL;
  return emit_dequantize(im, x, p);
}

/* 16-bit codes (opset 21's INT16 and UINT16), which the IR's quantize
 * (8-bit) does not hold: rint(x / scale) + zp saturated to the type, in
 * f32 (exact: |codes| < 2^24), and back: (q - zp) * scale. */
static Val *quantize16(Imp *im, Val *x, const Quant *p, DType to) {
  int r = x->type.rank;
  Val *q = ox_op1(im, OP_ROUND, by_scales(im, OP_DIV, ox_cast(im, x, TY_F32), p));
  q = ox_op2(im, OP_ADD, q, ox_cast(im, zps_along(im, p, r), TY_F32));
  if (!q) return NULL;
  Emit e;
  Node *c = ox_begin(im, &e, OP_CLIP, 1, &q);
  ir_set_float(im->g, c, "min", to == TY_I16 ? -32768 : 0);
  ir_set_float(im->g, c, "max", to == TY_I16 ? 32767 : 65535);
  return ox_cast(im, ox_emit1(im, &e), to);
}

static Val *dequantize16(Imp *im, Val *q, const Quant *p) {
  Val *d = ox_op2(im, OP_SUB, ox_cast(im, q, TY_F32), ox_cast(im, zps_along(im, p, q->type.rank), TY_F32));
  return d ? by_scales(im, OP_MUL, d, p) : NULL;
}

/* Blocked quantization (opset 21): the scale (and zero point) has x's
 * shape but for axis, where each of its values serves block_size
 * consecutive elements of x.  Each operand gathered along axis to x's
 * shape (element i reads i / block_size), then the codes computed
 * elementwise in f32 (exact for 8- and 16-bit codes) and saturated to
 * the type. */
static Val *blocked(Imp *im, Val *v, const TensorType *x, int axis, int64_t block) {
  const TensorType *t = &v->type;
  bool ok = t->rank == x->rank;
  for (int d = 0; ok && d < x->rank; d++)
    ok = d == axis ? t->dims[d] == (x->dims[d] + block - 1) / block : t->dims[d] == x->dims[d];
  if (!ok) {
    char ts[96], xs[96];
    ox_bad(im, "a blocked scale or zero point %s does not fit x %s in blocks of %" PRId64 " along axis %d",
           ir_type_str(t, ts, sizeof ts), ir_type_str(x, xs, sizeof xs), block, axis);
    return NULL;
  }
  int64_t len = x->dims[axis];
  TensorType it = ir_type_make(TY_I64, 1, &len);
  Val *idx = ox_known_new(im, &it);
  for (int64_t i = 0; i < len; i++) ((int64_t *)idx->k->data)[i] = i / block;
  return ox_gather(im, v, idx, axis);
}

static bool code_range(DType to, double *lo, double *hi) {
  switch (to) {
    case TY_I8: *lo = -128, *hi = 127; return true;
    case TY_U8: *lo = 0, *hi = 255; return true;
    case TY_I16: *lo = -32768, *hi = 32767; return true;
    case TY_U16: *lo = 0, *hi = 65535; return true;
    default: return false;
  }
}

/* rint(x / s) + z saturated to `to`, computed in f32 (exact for 8- and
 * 16-bit codes), s and z (or NULL) broadcasting against x. */
static Val *quantize_elementwise(Imp *im, Val *x, Val *s, Val *z, DType to) {
  double lo, hi;
  if (!code_range(to, &lo, &hi)) {
    ox_bad(im, "quantizing to %s is not supported here (INT8, UINT8, INT16, UINT16)", ir_dtype_name(to));
    return NULL;
  }
  Val *q = ox_op1(im, OP_ROUND, ox_op2(im, OP_DIV, ox_cast(im, x, TY_F32), ox_cast(im, s, TY_F32)));
  if (z) q = ox_op2(im, OP_ADD, q, ox_cast(im, z, TY_F32));
  if (!q) return NULL;
  Emit e;
  Node *c = ox_begin(im, &e, OP_CLIP, 1, &q);
  ir_set_float(im->g, c, "min", lo);
  ir_set_float(im->g, c, "max", hi);
  return ox_cast(im, ox_emit1(im, &e), to);
}

/* (x - z) s in f32, in the scale's dtype. */
static Val *dequantize_elementwise(Imp *im, Val *x, Val *s, Val *z) {
  Val *d = ox_cast(im, x, TY_F32);
  if (z) d = ox_op2(im, OP_SUB, d, ox_cast(im, z, TY_F32));
  Val *y = d ? ox_op2(im, OP_MUL, d, ox_cast(im, s, TY_F32)) : NULL;
  return y && s->type.dtype != TY_F32 ? ox_cast(im, y, s->type.dtype) : y;
}

/* A scale or zero point computed at run time (DynamicQuantizeLinear's,
 * or its expanded form's), shaped to broadcast against x: one value, or
 * one per slice along axis. */
static Val *runtime_param(Imp *im, Val *v, const TensorType *x, int64_t axis_attr, const char *what) {
  char ts[IR_TYPE_STR_MAX];
  if (ir_type_numel(&v->type) == 1) return ox_reshape(im, v, 0, NULL);
  int axis;
  bool rank1 = v->type.rank == 1;
  if (rank1 && !ox_norm_axis(im, axis_attr, x->rank, &axis)) return NULL;
  if (!rank1 || x->dims[axis] != v->type.dims[0]) {
    ox_bad(im, "%s %s computed at run time must be one value or one per slice along axis %" PRId64, what,
           ir_type_str(&v->type, ts, sizeof ts), axis_attr);
    return NULL;
  }
  int64_t dims[DL_MAX_RANK];
  for (int d = 0; d < x->rank; d++) dims[d] = d == axis ? v->type.dims[0] : 1;
  return ox_reshape(im, v, x->rank, dims);
}

/* v (a scale or zero point) shaped to broadcast against x: blocked
 * along axis_attr (block > 0), else computed at run time (one value, or
 * one per slice along the axis); NULL for no v or after reporting. */
static Val *param_shaped(Imp *im, Val *v, const TensorType *x, int64_t axis_attr, int64_t block, const char *what) {
  if (!v) return NULL;
  if (!block) return runtime_param(im, v, x, axis_attr, what);
  int axis;
  return ox_norm_axis(im, axis_attr, x->rank, &axis) ? blocked(im, v, x, axis, block) : NULL;
}

/* QuantizeLinear as elementwise ops: blocked (block > 0), or with a
 * scale or zero point computed at run time. */
static bool quantize_by_ops(Imp *im, ONode *n, Val *x, Val *s, Val *z, int64_t axis_attr, int64_t block,
                            int64_t out_dt) {
  DType to = z ? z->type.dtype : TY_U8;
  if (!z && out_dt && !ox_dtype_from_onnx((int32_t)out_dt, &to))
    return ox_bad(im, "output_dtype %s is not supported", ox_onnx_type_name((int32_t)out_dt));
  double lo, hi;
  if (x->held || (z && z->held) || !code_range(to, &lo, &hi))
    return ox_bad(im, "%s to %s is not supported (INT8, UINT8, INT16, UINT16)",
                  block ? "blocked quantization" : "quantization by a scale computed at run time",
                  z && z->held ? ox_onnx_type_name(z->held) : ir_dtype_name(to));
  if (!ox_need_float_in(im, x) || (!block && !ox_need_float_in(im, s))) return false;
  Val *sb = param_shaped(im, s, &x->type, axis_attr, block, "y's scale");
  Val *zb = param_shaped(im, z, &x->type, axis_attr, block, "y's zero point");
  return sb && (!z || zb) && (n->out[0] = quantize_elementwise(im, x, sb, zb, to));
}

/* DequantizeLinear the same way. */
static bool dequantize_by_ops(Imp *im, ONode *n, Val *x, Val *s, Val *z, int64_t axis_attr, int64_t block) {
  double lo, hi;
  if (x->held || !code_range(x->type.dtype, &lo, &hi))
    return ox_bad(im, "%s of %s is not supported (INT8, UINT8, INT16, UINT16)",
                  block ? "blocked quantization" : "dequantization by a scale computed at run time",
                  x->held ? ox_onnx_type_name(x->held) : ir_dtype_name(x->type.dtype));
  if (z && z->type.dtype != x->type.dtype)
    return ox_bad(im, "x_zero_point is %s but x is %s", ir_dtype_name(z->type.dtype), ir_dtype_name(x->type.dtype));
  if (!ox_need_float_in(im, s)) return false;
  Val *sb = param_shaped(im, s, &x->type, axis_attr, block, "x's scale");
  Val *zb = param_shaped(im, z, &x->type, axis_attr, block, "x's zero point");
  return sb && (!z || zb) && (n->out[0] = dequantize_elementwise(im, x, sb, zb));
}

/* An int8 product's result (d its accumulator and scales) quantized by
 * p's one scale and zero point into `to`: its accumulator requantized,
 * as onnxruntime's QLinear products do. */
static Val *requantize_product(Imp *im, const Quant *d, const Quant *p, DType to) {
  Quant m = *d;
  m.scale = ARENA_ARRAY(&im->c->arena, float, d->n);
  for (int64_t c = 0; c < d->n; c++) m.scale[c] = d->scale[c] / p->scale[0];
  return requantize(im, d->q, &m, p->zp[0], to);
}

/* ---- the ops ---- */

bool ox_op_quantize_linear(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *s = ox_in_req(im, n, 1), *z = ox_in_opt(n, 2);
  int64_t axis, sat, block, out_dt;
  if (!x || !s || !ox_attr_int(im, "axis", 1, &axis) || !ox_attr_int(im, "saturate", 1, &sat) ||
      !ox_attr_int(im, "block_size", 0, &block) || !ox_attr_int(im, "output_dtype", 0, &out_dt))
    return false;
  if (block < 0) return ox_bad(im, "block_size %" PRId64 " is negative", block);
  if (block || !known(s) || !known(z)) return quantize_by_ops(im, n, x, s, z, axis, block, out_dt);
  DType held_dt;
  int32_t held = z ? z->held : out_dt && ox_held_format((int32_t)out_dt, &held_dt) ? (int32_t)out_dt : 0;
  if (held) return (n->out[0] = quantize_held(im, x, s, z, axis, held, sat != 0));
  Quant p;
  DType zdt, to = TY_U8;
  if (!quant_params(im, &x->type, s, z, axis, "y", &p, &zdt)) return false;
  if (zdt != TY_COUNT) {
    to = zdt;
  } else if (out_dt && !ox_dtype_from_onnx((int32_t)out_dt, &to)) {
    return ox_bad(im, "output_dtype %s is not supported", ox_onnx_type_name((int32_t)out_dt));
  }
  if (to == TY_I16 || to == TY_U16) {
    if (x->type.dtype == TY_I32) x = ox_cast(im, x, TY_F32);
    if (!ox_need_float_in(im, x)) return false;
    return (n->out[0] = quantize16(im, x, &p, to));
  }
  if (to != TY_U8 && to != TY_I8)
    return ox_bad(im, "quantizing to %s is not supported (INT8, UINT8, INT16 or UINT16)", ir_dtype_name(to));
  /* The result of an int8 product: requantize its accumulator. */
  const Quant *d = x->dq;
  if (d && d->acc && p.axis < 0) return (n->out[0] = requantize_product(im, d, &p, to));
  if (x->type.dtype == TY_I32) x = ox_cast(im, x, TY_F32);
  if (!ox_need_float_in(im, x)) return false;
  return (n->out[0] = emit_quantize(im, x, &p, to));
}

/* x's codes in UINT8 over [min(x, 0), max(x, 0)], scale and zero point
 * computed at run time, as onnxruntime and the ONNX reference do: scale
 * = (max - min) / 255 (1 / 255 when max = min), zero point = rint of
 * -min / scale saturated, y = rint(x / scale) + zero point saturated. */
bool ox_op_dynamic_quantize_linear(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  if (x->type.dtype != TY_F32) return ox_bad(im, "x must be FLOAT, got %s", ir_dtype_name(x->type.dtype));
  if (ir_type_numel(&x->type) == 0) return ox_bad(im, "x is empty: its range has no value");
  int64_t axes[DL_MAX_RANK];
  for (int d = 0; d < x->type.rank; d++) axes[d] = d;
  Val *zero = ox_scalar(im, 0, TY_F32);
  Val *hi = ox_op2(im, OP_MAXIMUM, ox_reduce(im, OP_REDUCE_MAX, x, x->type.rank, axes, false), zero);
  Val *lo = ox_op2(im, OP_MINIMUM, ox_reduce(im, OP_REDUCE_MIN, x, x->type.rank, axes, false), zero);
  Val *same = ox_op2(im, OP_EQUAL, hi, lo);
  Val *scale = ox_op2s(im, OP_DIV, ox_where(im, same, ox_scalar(im, 1, TY_F32), ox_op2(im, OP_SUB, hi, lo)), 255);
  /* qmin - min / scale, saturated, then rounded */
  Val *zf = ox_op2(im, OP_SUB, zero, ox_op2(im, OP_DIV, lo, scale));
  if (!zf) return false;
  Emit e;
  Node *c = ox_begin(im, &e, OP_CLIP, 1, &zf);
  ir_set_float(im->g, c, "min", 0);
  ir_set_float(im->g, c, "max", 255);
  Val *zp = ox_op1(im, OP_ROUND, ox_emit1(im, &e));
  Val *y = quantize_elementwise(im, x, scale, zp, TY_U8);
  if (!y) return false;
  n->out[0] = y;
  n->out[1] = scale;
  n->out[2] = ox_cast(im, zp, TY_U8);
  return n->out[2] != NULL;
}

bool ox_op_dequantize_linear(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *s = ox_in_req(im, n, 1), *z = ox_in_opt(n, 2);
  int64_t axis, block;
  if (!x || !s || !ox_attr_int(im, "axis", 1, &axis) || !ox_attr_int(im, "block_size", 0, &block))
    return false;
  if (block < 0) return ox_bad(im, "block_size %" PRId64 " is negative", block);
  if (block || !known(s) || !known(z)) return dequantize_by_ops(im, n, x, s, z, axis, block);
  DType qt = x->type.dtype, zdt;
  Val *y = NULL;
  if (x->held) {
    if (!(y = dequantize_held(im, x, s, z, axis))) return false;
    DType sdt = s->k ? s->k->type.dtype : s->hint ? s->hint->type.dtype : TY_F32;
    return (n->out[0] = sdt == TY_F32 ? y : ox_cast(im, y, sdt));
  }
  bool wide = qt == TY_I16 || qt == TY_U16;
  if (qt != TY_I8 && qt != TY_U8 && qt != TY_I32 && !wide)
    return ox_bad(im, "x of dtype %s is not supported (INT8, UINT8, INT16, UINT16 or INT32)", ir_dtype_name(qt));
  Quant *p = ARENA_NEW(&im->c->arena, Quant);
  if (!quant_params(im, &x->type, s, z, axis, "x", p, &zdt)) return false;
  if (zdt != TY_COUNT && zdt != qt)
    return ox_bad(im, "x_zero_point is %s but x is %s", ir_dtype_name(zdt), ir_dtype_name(qt));
  p->q = x;
  if (wide) {
    if (!(y = dequantize16(im, x, p))) return false;
    DType sdt = s->k ? s->k->type.dtype : s->hint ? s->hint->type.dtype : TY_F32;
    return (n->out[0] = sdt == TY_F32 ? y : ox_cast(im, y, sdt));
  }
  y = emit_dequantize(im, x, p);
  if (!y) return false;
  y->dq = p;
  DType sdt = s->k ? s->k->type.dtype : s->hint ? s->hint->type.dtype : TY_F32;
  return (n->out[0] = sdt == TY_F32 ? y : ox_cast(im, y, sdt)); /* opset 19: y has the scale's dtype */
}

/* q's zero point z computed at run time as an i32 of q's i8 codes (a u8
 * code c is c - 128 there: to_int8 left that offset in its zp): one
 * value, or one per slice along axis (a's rows: [M, 1]; b's columns:
 * [N]). */
typedef enum { ZP_ONE, ZP_ROWS, ZP_COLUMNS } ZpShape;

static Val *runtime_zp(Imp *im, Val *z, const Int8 *codes, Val *q, int axis, ZpShape kind) {
  static const char *const per[] = {"", " or one per row of A", " or one per column of B"};
  char ts[IR_TYPE_STR_MAX];
  bool rows = kind == ZP_ROWS;
  if (z->type.dtype != q->type.dtype) {
    ox_bad(im, "the zero point is %s but its operand is %s", ir_dtype_name(z->type.dtype), ir_dtype_name(q->type.dtype));
    return NULL;
  }
  int64_t n = ir_type_numel(&z->type), dims[2] = {n, 1};
  Val *shaped;
  if (n == 1)
    shaped = ox_reshape(im, z, 0, NULL);
  else if (kind != ZP_ONE && z->type.rank == 1 && n == q->type.dims[axis])
    shaped = ox_reshape(im, z, rows ? 2 : 1, dims);
  else {
    ox_bad(im, "a zero point %s computed at run time must be one value%s", ir_type_str(&z->type, ts, sizeof ts),
           per[kind]);
    return NULL;
  }
  return ox_op2s(im, OP_ADD, ox_cast(im, shaped, TY_I32), codes->zp[0]);
}

/* x, w and their zero points (ConvInteger) or all of QLinearConv's. */
static bool conv_operands(Imp *im, ONode *n, bool qlinear, Int8 *xi, Int8 *wi, Quant *xq, Quant *wq,
                          Window *win, int64_t *group) {
  Val *x = ox_in_req(im, n, 0), *w = ox_in_req(im, n, qlinear ? 3 : 1);
  if (!x || !w || !ox_attr_int(im, "group", 1, group)) return false;
  if (w->type.rank != x->type.rank)
    return ox_bad(im, "weight rank %d differs from input rank %d", w->type.rank, x->type.rank);
  if (!ox_window_attrs(im, x, w->type.dims + 2, win)) return false;
  DType zdt;
  Val *xs = qlinear ? ox_in_req(im, n, 1) : NULL, *ws = qlinear ? ox_in_req(im, n, 4) : NULL;
  if (qlinear && (!xs || !ws)) return false;
  /* ConvInteger's x zero point may be computed at run time */
  Val *xz = ox_in_opt(n, 2), *x_rt = !qlinear && !known(xz) ? xz : NULL;
  if (!quant_params(im, &x->type, xs, x_rt ? NULL : xz, -1, "x", xq, &zdt) ||
      !quant_params(im, &w->type, ws, ox_in_opt(n, qlinear ? 5 : 3), 0, "w", wq, &zdt))
    return false;
  if (x_rt && x->k) return ox_bad(im, "a zero point computed at run time for a constant operand is not supported");
  if (!to_int8(im, ox_to_2d(im, x), xq, "x", xi) || !to_int8(im, ox_to_2d(im, w), wq, "w", wi)) return false;
  return !x_rt || (xi->zrt = runtime_zp(im, x_rt, xi, x, 0, ZP_ONE));
}

bool ox_op_conv_integer(Imp *im, ONode *n) {
  Int8 x, w;
  Quant xq, wq;
  Window win;
  int64_t group;
  if (!conv_operands(im, n, false, &x, &w, &xq, &wq, &win, &group)) return false;
  return (n->out[0] = ox_from_2d(im, int_conv(im, &x, &w, NULL, &win, group), win.spatial));
}

/* An i32 bias [C]: QLinearConv's B, or a QDQ bias whose scale is the
 * product's (so its codes add to the accumulator as they are). */
static Val *i32_bias(Imp *im, Val *b, int64_t channels) {
  if (!b) return NULL;
  if (b->type.dtype != TY_I32 || b->type.rank != 1 || b->type.dims[0] != channels) {
    ox_bad(im, "the bias must be INT32 [%" PRId64 "]", channels);
    return NULL;
  }
  return b;
}

bool ox_op_qlinear_conv(Imp *im, ONode *n) {
  Int8 x, w;
  Quant xq, wq, yq;
  Window win;
  int64_t group;
  DType zdt;
  Val *ys = ox_in_req(im, n, 6), *b = ox_in_opt(n, 8);
  if (!ys || !conv_operands(im, n, true, &x, &w, &xq, &wq, &win, &group) ||
      !quant_params(im, &x.v->type, ys, ox_in_opt(n, 7), -1, "y", &yq, &zdt))
    return false;
  int64_t cout = w.v->type.dims[0];
  if (b && !(b = i32_bias(im, b, cout))) return false;
  Val *acc = int_conv(im, &x, &w, b, &win, group);
  Quant m = product_scales(im, &xq, &wq, 1, yq.scale[0]);
  DType to = quantized_dtype_of(zdt != TY_COUNT ? zdt : ox_in_req(im, n, 0)->type.dtype);
  return (n->out[0] = ox_from_2d(im, acc ? requantize(im, acc, &m, yq.zp[0], to) : NULL, win.spatial));
}

/* a, b and their zero points (MatMulInteger: per row of a, per column
 * of b) or all of QLinearMatMul's (a per tensor, b per column). */
static bool matmul_operands(Imp *im, ONode *n, bool qlinear, Int8 *ai, Int8 *bi, Quant *aq, Quant *bq) {
  Val *a = ox_in_req(im, n, 0), *b = ox_in_req(im, n, qlinear ? 3 : 1);
  if (!a || !b) return false;
  if (a->type.rank < 2 || b->type.rank < 2)
    return ox_bad(im, "A and B must have at least 2 dims, got ranks %d and %d", a->type.rank, b->type.rank);
  Val *as = qlinear ? ox_in_req(im, n, 1) : NULL, *bs = qlinear ? ox_in_req(im, n, 4) : NULL;
  if (qlinear && (!as || !bs)) return false;
  DType zdt;
  /* MatMulInteger's zero points may be computed at run time */
  Val *az = ox_in_opt(n, 2), *bz = ox_in_opt(n, qlinear ? 5 : 3);
  Val *a_rt = !qlinear && !known(az) ? az : NULL, *b_rt = !qlinear && !known(bz) ? bz : NULL;
  if (!quant_params(im, &a->type, as, a_rt ? NULL : az, qlinear ? -1 : a->type.rank - 2, "a", aq, &zdt) ||
      !quant_params(im, &b->type, bs, b_rt ? NULL : bz, b->type.rank - 1, "b", bq, &zdt))
    return false;
  if ((a_rt && a->k) || (b_rt && b->k))
    return ox_bad(im, "a zero point computed at run time for a constant operand is not supported");
  if (!to_int8(im, a, aq, "A", ai) || !to_int8(im, b, bq, "B", bi)) return false;
  return (!a_rt || (ai->zrt = runtime_zp(im, a_rt, ai, a, a->type.rank - 2, ZP_ROWS))) &&
         (!b_rt || (bi->zrt = runtime_zp(im, b_rt, bi, b, b->type.rank - 1, ZP_COLUMNS)));
}

bool ox_op_matmul_integer(Imp *im, ONode *n) {
  Int8 a, b;
  Quant aq, bq;
  if (!matmul_operands(im, n, false, &a, &b, &aq, &bq)) return false;
  return (n->out[0] = int_product(im, &a, &b));
}

bool ox_op_qlinear_matmul(Imp *im, ONode *n) {
  Int8 a, b;
  Quant aq, bq, yq;
  DType zdt;
  Val *ys = ox_in_req(im, n, 6);
  if (!ys || !matmul_operands(im, n, true, &a, &b, &aq, &bq)) return false;
  Val *acc = int_product(im, &a, &b);
  if (!acc || !quant_params(im, &acc->type, ys, ox_in_opt(n, 7), -1, "y", &yq, &zdt)) return false;
  Quant m = product_scales(im, &aq, &bq, acc->type.rank - 1, yq.scale[0]);
  DType to = quantized_dtype_of(zdt != TY_COUNT ? zdt : a.v->type.dtype);
  return (n->out[0] = requantize(im, acc, &m, yq.zp[0], to));
}

/* ---- QDQ: products of dequantized operands ---- */

/* x's quantization when it is DequantizeLinear's result of i8 or u8
 * codes, one value per tensor (per slice along `axis` allowed when axis
 * >= 0). */
static const Quant *dq_of(const Val *x, int axis) {
  const Quant *d = x ? x->dq : NULL;
  if (!d || d->acc || (d->q->type.dtype != TY_I8 && d->q->type.dtype != TY_U8)) return NULL;
  if (d->axis >= 0 && (axis < 0 || d->axis != axis)) return NULL;
  return d;
}

/* A QDQ bias: INT32 codes dequantized by exactly the product's scales
 * with zero point 0, as onnxruntime's quantizer writes it. */
static Val *qdq_bias(Val *b, const Quant *s) {
  const Quant *d = b ? b->dq : NULL;
  if (!d || d->q->type.dtype != TY_I32 || !zp_zero(d) || d->q->type.rank != 1) return NULL;
  int64_t c = d->q->type.dims[0];
  if (c != s->n && !(s->n == 1 && d->n == 1)) return NULL;
  for (int64_t i = 0; i < c; i++)
    if (d->scale[d->n == 1 ? 0 : i] != s->scale[s->n == 1 ? 0 : i]) return NULL;
  return d->q;
}

/* y = dequantize(acc) by the product's scales (+ a float bias), noting
 * acc so that a following QuantizeLinear requantizes it. */
static Val *qdq_result(Imp *im, Val *acc, const Quant *s, Val *float_bias, int64_t bias_axis_rank) {
  Quant *p = ARENA_NEW(&im->c->arena, Quant);
  *p = *s;
  p->q = acc;
  p->acc = true;
  Val *y = acc ? emit_dequantize(im, acc, p) : NULL;
  if (!y) return NULL;
  if (!float_bias) {
    y->dq = p;
    return y;
  }
  int64_t dims[DL_MAX_RANK];
  for (int d = 0; d < bias_axis_rank; d++) dims[d] = d == 0 ? float_bias->type.dims[0] : 1;
  return ox_op2(im, OP_ADD, y, ox_reshape(im, float_bias, (int)bias_axis_rank, dims));
}

/* Conv of DequantizeLinear's x (per tensor) and w (per tensor or per
 * output channel): an int8 conv2d, else Conv as it is. */
bool ox_op_conv_qdq(Imp *im, ONode *n) {
  Val *x = ox_in_opt(n, 0), *w = ox_in_opt(n, 1), *b = ox_in_opt(n, 2);
  const Quant *xq = dq_of(x, -1), *wq = dq_of(w, 0);
  /* int8 convolutions are 2-d: a 3-d one computes in f32 on the dequantized operands */
  if (!xq || !wq || x->type.rank != w->type.rank || x->type.rank > 4) return ox_op_conv(im, n);
  int64_t group;
  Window win;
  Int8 xi, wi;
  if (!ox_attr_int(im, "group", 1, &group) || !ox_window_attrs(im, x, w->type.dims + 2, &win) ||
      !to_int8(im, ox_to_2d(im, xq->q), xq, "x", &xi) || !to_int8(im, ox_to_2d(im, wq->q), wq, "w", &wi))
    return false;
  Quant s = product_scales(im, xq, wq, 1, 0);
  Val *bq = qdq_bias(b, &s);
  Val *acc = int_conv(im, &xi, &wi, bq, &win, group);
  return (n->out[0] = ox_from_2d(im, qdq_result(im, acc, &s, bq ? NULL : b, 3), win.spatial));
}

/* MatMul of DequantizeLinear's a (per tensor) and b (per tensor or per
 * column). */
bool ox_op_matmul_qdq(Imp *im, ONode *n) {
  Val *a = ox_in_opt(n, 0), *b = ox_in_opt(n, 1);
  const Quant *aq = dq_of(a, -1), *bq = b ? dq_of(b, b->type.rank - 1) : NULL;
  if (!aq || !bq || a->type.rank < 2 || b->type.rank < 2) return ox_op_matmul(im, n);
  Int8 ai, bi;
  if (!to_int8(im, aq->q, aq, "A", &ai) || !to_int8(im, bq->q, bq, "B", &bi)) return false;
  Val *acc = int_product(im, &ai, &bi);
  if (!acc) return false;
  Quant s = product_scales(im, aq, bq, acc->type.rank - 1, 0);
  return (n->out[0] = qdq_result(im, acc, &s, NULL, 1));
}

/* Gemm (transA 0, alpha and beta 1) of DequantizeLinear's A and B: an
 * int8 linear layer with the bias C in i32 when it is the QDQ bias. */
bool ox_op_gemm_qdq(Imp *im, ONode *n) {
  Val *a = ox_in_opt(n, 0), *b = ox_in_opt(n, 1), *c = ox_in_opt(n, 2);
  int64_t ta, tb;
  double alpha, beta;
  if (!ox_attr_int(im, "transA", 0, &ta) || !ox_attr_int(im, "transB", 0, &tb) ||
      !ox_attr_float(im, "alpha", 1.0, &alpha) || !ox_attr_float(im, "beta", 1.0, &beta))
    return false;
  const Quant *aq = dq_of(a, -1), *bq = b ? dq_of(b, tb ? 0 : 1) : NULL;
  if (!aq || !bq || ta || alpha != 1 || beta != 1 || a->type.rank != 2 || b->type.rank != 2 ||
      (c && (c->type.rank != 1 || c->type.dims[0] != b->type.dims[tb ? 0 : 1])) || im->opset < 7)
    return ox_op_gemm(im, n);
  Int8 ai, bi;
  if (!to_int8(im, aq->q, aq, "A", &ai) || !to_int8(im, bq->q, bq, "B", &bi)) return false;
  if (!tb) bi = transposed(im, bi);
  Quant s = product_scales(im, aq, bq, 1, 0);
  Val *cq = qdq_bias(c, &s);
  return (n->out[0] = qdq_result(im, int_linear(im, &ai, &bi, cq), &s, cq ? NULL : c, 1));
}

/* ---- onnxruntime's QOperator contrib ops (domain com.microsoft) ----
 * What onnxruntime's quantizer writes in its QOperator format besides
 * QLinearConv and QLinearMatMul (the ONNX model zoo's int8 models):
 * each is the DequantizeLinear of its operands (one scale and zero
 * point each), the float op, and the QuantizeLinear of its result by
 * the y scale and zero point, as onnxruntime defines them.  Its kernels
 * compute some in f32 and some by lookup tables built in f32 from the
 * same formula, so a code may differ by one where a value falls within
 * rounding of a half. */

/* x's codes (i8 or u8) dequantized by scale s and zero point z (one
 * each, or one per slice along axis when it is not -1), noted as
 * DequantizeLinear's results are. */
static Val *ms_dequantize_along(Imp *im, Val *x, Val *s, Val *z, int64_t axis, const char *what) {
  if (!x || !s) return NULL;
  DType qt = x->type.dtype, zdt;
  if (qt != TY_I8 && qt != TY_U8) {
    ox_bad(im, "%s of dtype %s is not supported (INT8 or UINT8)", what, ir_dtype_name(qt));
    return NULL;
  }
  Quant *p = ARENA_NEW(&im->c->arena, Quant);
  if (!quant_params(im, &x->type, s, z, axis, what, p, &zdt)) return NULL;
  if (zdt != TY_COUNT && zdt != qt) {
    ox_bad(im, "%s's zero point is %s but %s is %s", what, ir_dtype_name(zdt), what, ir_dtype_name(qt));
    return NULL;
  }
  p->q = x;
  Val *y = emit_dequantize(im, x, p);
  if (y) y->dq = p;
  return y;
}

static Val *ms_dequantize(Imp *im, Val *x, Val *s, Val *z, const char *what) {
  return ms_dequantize_along(im, x, s, z, -1, what);
}

/* y (f32) quantized by scale s and zero point z into z's dtype (like's
 * without one); an int8 product's result by requantizing its
 * accumulator, as QuantizeLinear does. */
static Val *ms_quantize(Imp *im, Val *y, Val *s, Val *z, DType like) {
  Quant p;
  DType zdt;
  if (!y || !s || !quant_params(im, &y->type, s, z, -1, "y", &p, &zdt)) return NULL;
  DType to = zdt != TY_COUNT ? zdt : like;
  if (to != TY_U8 && to != TY_I8) {
    ox_bad(im, "y of dtype %s is not supported (INT8 or UINT8)", ir_dtype_name(to));
    return NULL;
  }
  return y->dq && y->dq->acc ? requantize_product(im, y->dq, &p, to) : emit_quantize(im, y, &p, to);
}

/* QGemm: (A, a_scale, a_zp, B, b_scale, b_zp (per tensor or per output
 * column), C (an INT32 bias of scale a_scale b_scale, zero point 0),
 * y_scale, y_zp), alpha, transA, transB: y quantized, or f32 without
 * y_scale.  Gemm over the dequantized operands, which the QDQ rule makes
 * an int8 product. */
bool ox_op_qgemm(Imp *im, ONode *n) {
  int64_t tb;
  if (!ox_attr_int(im, "transB", 0, &tb)) return false;
  Val *b0 = ox_in_req(im, n, 3);
  if (!b0) return false;
  if (b0->type.rank != 2) return ox_bad(im, "B must be a matrix, got rank %d", b0->type.rank);
  Val *a = ms_dequantize(im, ox_in_req(im, n, 0), ox_in_req(im, n, 1), ox_in_opt(n, 2), "A");
  Val *b = a ? ms_dequantize_along(im, b0, ox_in_req(im, n, 4), ox_in_opt(n, 5), tb ? 0 : 1, "B") : NULL;
  if (!b) return false;
  Val *c = ox_in_opt(n, 6);
  if (c) {
    if (c->type.dtype != TY_I32) return ox_bad(im, "C must be INT32, got %s", ir_dtype_name(c->type.dtype));
    const Quant *bq = b->dq;
    if (bq->n > 1 && (c->type.rank != 1 || c->type.dims[0] != bq->n))
      return ox_bad(im, "C must be [%" PRId64 "] with per-column scales of B", bq->n);
    /* the product's scales (zero points 0), which the QDQ rule then
     * finds equal and takes C as the product's i32 bias */
    Quant *p = ARENA_NEW(&im->c->arena, Quant);
    *p = product_scales(im, a->dq, bq, 0, 0);
    p->q = c;
    Val *cf = emit_dequantize(im, c, p);
    if (!cf) return false;
    cf->dq = p;
    c = cf;
  }
  Val *in[3] = {a, b, c}, *out[1] = {NULL};
  bool want[1] = {true};
  ONode g = {.n_in = c ? 3 : 2, .in = in, .n_out = 1, .out = out, .want = want};
  if (!ox_op_gemm_qdq(im, &g)) return false;
  Val *ys = ox_in_opt(n, 7);
  return (n->out[0] = ys ? ms_quantize(im, out[0], ys, ox_in_opt(n, 8), n->in[0]->type.dtype) : out[0]);
}

/* QLinearAdd, QLinearMul: (A, A_scale, A_zp, B, B_scale, B_zp, C_scale,
 * C_zp), broadcasting as Add and Mul. */
bool ox_op_qlinear_binary(Imp *im, ONode *n) {
  OpKind op = strcmp(im->np->op_type, "QLinearMul") == 0 ? OP_MUL : OP_ADD;
  Val *a = ms_dequantize(im, ox_in_req(im, n, 0), ox_in_req(im, n, 1), ox_in_opt(n, 2), "A");
  Val *b = a ? ms_dequantize(im, ox_in_req(im, n, 3), ox_in_req(im, n, 4), ox_in_opt(n, 5), "B") : NULL;
  Val *y = b ? ox_op2(im, op, a, b) : NULL;
  return y && (n->out[0] = ms_quantize(im, y, ox_in_req(im, n, 6), ox_in_opt(n, 7), n->in[0]->type.dtype));
}

/* QLinearSigmoid, QLinearLeakyRelu (alpha), QLinearGlobalAveragePool
 * and QLinearAveragePool (channels_last 0 only; AveragePool's
 * attributes): (X, X_scale, X_zp, Y_scale, Y_zp). */
bool ox_op_qlinear_unary(Imp *im, ONode *n) {
  const char *t = im->np->op_type;
  int64_t channels_last;
  if (!ox_attr_int(im, "channels_last", 0, &channels_last)) return false;
  if (channels_last) return ox_bad(im, "channels_last=%" PRId64 " is not supported (0)", channels_last);
  Val *x = ms_dequantize(im, ox_in_req(im, n, 0), ox_in_req(im, n, 1), ox_in_opt(n, 2), "X");
  if (!x) return false;
  Val *y = NULL;
  double alpha;
  if (strcmp(t, "QLinearSigmoid") == 0) {
    y = ox_op1(im, OP_SIGMOID, x);
  } else if (strcmp(t, "QLinearLeakyRelu") == 0) {
    if (!ox_attr_float(im, "alpha", 0.01, &alpha)) return false;
    y = ox_op1f(im, OP_LEAKY_RELU, x, "alpha", alpha);
  } else {
    /* the pools' own importers, on the dequantized image */
    Val *in[1] = {x}, *out[1] = {NULL};
    bool want[1] = {true};
    ONode f = {.n_in = 1, .in = in, .n_out = 1, .out = out, .want = want};
    if (!(strcmp(t, "QLinearGlobalAveragePool") == 0 ? ox_op_global_pool(im, &f) : ox_op_pool(im, &f))) return false;
    y = out[0];
  }
  return y && (n->out[0] = ms_quantize(im, y, ox_in_req(im, n, 3), ox_in_opt(n, 4), n->in[0]->type.dtype));
}

/* QLinearConcat: (Y_scale, Y_zp, then X, X_scale, X_zp for each
 * operand), axis. */
bool ox_op_qlinear_concat(Imp *im, ONode *n) {
  int64_t axis;
  if (!ox_attr_int(im, "axis", 0, &axis)) return false;
  if (n->n_in < 5 || (n->n_in - 2) % 3) return ox_bad(im, "%d inputs: Y_scale, Y_zero_point, then triples", n->n_in);
  int k = (n->n_in - 2) / 3;
  Val **parts = ARENA_ARRAY(&im->c->arena, Val *, k);
  for (int i = 0; i < k; i++)
    if (!(parts[i] = ms_dequantize(im, ox_in_req(im, n, 2 + 3 * i), ox_in_req(im, n, 3 + 3 * i),
                                   ox_in_opt(n, 4 + 3 * i), "X")))
      return false;
  int a;
  if (!ox_norm_axis(im, axis, parts[0]->type.rank, &a)) return false;
  Val *y = ox_concat(im, k, parts, a);
  return y && (n->out[0] = ms_quantize(im, y, ox_in_req(im, n, 0), ox_in_opt(n, 1), n->in[2]->type.dtype));
}

/* ---- onnxruntime's dynamic int8 products, fused ----
 * What its graph optimizer makes of quantize_dynamic's
 * DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add), and
 * saves: the same steps, so the same bits. */

/* acc (an int32 product) in f32 times a_scale b_scale, plus bias. */
static Val *scaled_product(Imp *im, Val *acc, Val *a_scale, Val *b_scale, Val *bias) {
  if (!acc || !a_scale || !b_scale) return NULL;
  if (!ox_need_float_in(im, b_scale) || (bias && !ox_need_float_in(im, bias))) return NULL;
  Val *y = ox_op2(im, OP_MUL, ox_cast(im, acc, TY_F32), ox_op2(im, OP_MUL, a_scale, b_scale));
  return bias ? ox_op2(im, OP_ADD, y, bias) : y;
}

/* MatMulInteger of a, b and their zero points (NULL: none). */
static Val *integer_product(Imp *im, Val *a, Val *b, Val *a_zp, Val *b_zp) {
  Val *in[4] = {a, b, a_zp, b_zp}, *out = NULL;
  ONode mi = {.n_in = 4, .in = in, .n_out = 1, .out = &out, .want = (const bool[]){true}};
  return a && b && ox_op_matmul_integer(im, &mi) ? out : NULL;
}

/* DynamicQuantizeMatMul: A (f32) quantized as DynamicQuantizeLinear
 * does, times B (int8 or uint8 codes with b_scale and b_zero_point, per
 * tensor or per column), plus bias. */
bool ox_op_dynamic_quantize_matmul(Imp *im, ONode *n) {
  Val *a = ox_in_req(im, n, 0), *b = ox_in_req(im, n, 1), *b_scale = ox_in_req(im, n, 2);
  if (!a || !b || !b_scale) return false;
  Val *q[3] = {NULL};
  ONode dq = {.n_in = 1, .in = &a, .n_out = 3, .out = q, .want = (const bool[]){true, true, true}};
  if (!ox_op_dynamic_quantize_linear(im, &dq)) return false;
  Val *acc = integer_product(im, q[0], b, q[2], ox_in_opt(n, 3));
  return (n->out[0] = scaled_product(im, acc, q[1], b_scale, ox_in_opt(n, 4))) != NULL;
}

/* MatMulIntegerToFloat: A and B codes with their scales and zero
 * points, the product in f32, plus bias. */
bool ox_op_matmul_integer_to_float(Imp *im, ONode *n) {
  Val *a_scale = ox_in_req(im, n, 2), *b_scale = ox_in_req(im, n, 3);
  if (!a_scale || !b_scale || !ox_need_float_in(im, a_scale)) return false;
  Val *acc = integer_product(im, ox_in_req(im, n, 0), ox_in_req(im, n, 1), ox_in_opt(n, 4), ox_in_opt(n, 5));
  return (n->out[0] = scaled_product(im, acc, a_scale, b_scale, ox_in_opt(n, 6))) != NULL;
}

/* ---- what quantize_dynamic makes of onnxruntime's fused BERT ops ---- */

/* QAttention: com.microsoft Attention whose input projection is the
 * int8 product of the input's codes (DynamicQuantizeLinear's) and the
 * weight's, scaled to f32 as DynamicQuantizeMatMul does, plus the bias. */
bool ox_op_qattention(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *w = ox_in_req(im, n, 1), *bias = ox_in_req(im, n, 2),
      *x_scale = ox_in_req(im, n, 3), *w_scale = ox_in_req(im, n, 4);
  if (!x || !w || !bias || !x_scale || !w_scale || !ox_need_float_in(im, x_scale)) return false;
  if (x->type.rank != 3 || w->type.rank != 2 || w->type.dims[0] != x->type.dims[2])
    return ox_bad(im, "input must be [B, S, in] and weight [in, q + k + v]");
  Val *acc = integer_product(im, x, w, ox_in_opt(n, 6), ox_in_opt(n, 7));
  return ox_ms_attention_of(im, n, scaled_product(im, acc, x_scale, w_scale, bias), ox_in_opt(n, 5), ox_in_opt(n, 8),
                            NULL);
}

/* codes (int8 or uint8) as f32: (q - zero point) times scale. */
static Val *codes_f32(Imp *im, Val *q, Val *scale, Val *zp) {
  if (!q) return NULL;
  if (q->type.dtype != TY_U8 && q->type.dtype != TY_I8)
    return ox_bad(im, "quantized tables must be UINT8 or INT8, got %s", ir_dtype_name(q->type.dtype)), NULL;
  if (!scale) return NULL;
  if (scale->type.dtype != TY_F32)
    return ox_bad(im, "quantized tables' scales must be FLOAT, got %s", ir_dtype_name(scale->type.dtype)), NULL;
  return dequantize_elementwise(im, q, scale, zp);
}

/* QEmbedLayerNormalization: EmbedLayerNormalization of its tables'
 * codes dequantized. */
bool ox_op_qembed_layer_norm(Imp *im, ONode *n) {
  Val *in[8] = {ox_in_req(im, n, 0), ox_in_opt(n, 1), NULL, NULL, NULL, NULL, NULL, ox_in_opt(n, 7)};
  static const int code[5] = {2, 3, 4, 5, 6}, scale[5] = {8, 9, 10, 11, 12}, zp[5] = {13, 14, 15, 16, 17};
  for (int t = 0; t < 5; t++) {
    Val *q = t == 2 ? ox_in_opt(n, code[t]) : ox_in_req(im, n, code[t]);
    if (!q) {
      if (t != 2) return false;
      continue;
    }
    if (!(in[code[t]] = codes_f32(im, q, ox_in_req(im, n, scale[t]), ox_in_opt(n, zp[t])))) return false;
  }
  ONode e = {.n_in = 8, .in = in, .n_out = n->n_out < 2 ? n->n_out : 2, .out = n->out, .want = n->want};
  return ox_op_embed_layer_norm(im, &e);
}
