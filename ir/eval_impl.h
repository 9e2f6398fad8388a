/* What the reference interpreter's files share (ir/eval*.c, not the rest
 * of the compiler): element access by dtype, the index helpers, the
 * interpreter's state with its located failure, and the op functions
 * that eval.c's dispatch calls.  Takes nothing, returns nothing: the
 * helpers are static inline so that each file keeps them to itself. */
#ifndef DLCC_EVAL_IMPL_H
#define DLCC_EVAL_IMPL_H

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"

/* ---- elements ---- */

/* An int64 as a double rounded to odd: exact up to 2^53, and otherwise
 * close enough that rounding it once more to a narrower float gives the
 * correctly rounded result (no double-rounding error). */
static inline double int_to_double(int64_t v) {
  uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  int s = 0;
  while ((m >> s) >= ((uint64_t)1 << 53)) s++;
  uint64_t top = m >> s;
  if (s && (m & (((uint64_t)1 << s) - 1))) top |= 1;
  double d = ldexp((double)top, s);
  return v < 0 ? -d : d;
}

/* A uint64 as a double rounded to odd, as int_to_double. */
static inline double u64_to_double(uint64_t m) {
  int s = 0;
  while ((m >> s) >= ((uint64_t)1 << 53)) s++;
  uint64_t top = m >> s;
  if (s && (m & (((uint64_t)1 << s) - 1))) top |= 1;
  return ldexp((double)top, s);
}

/* Float -> u64: truncate toward zero, saturate to [0, 2^64 - 1], NaN -> 0. */
static inline uint64_t sat_u64(double x) {
  double t = trunc(x);
  if (isnan(t) || t <= 0) return 0;
  if (t >= 18446744073709551616.0) return UINT64_MAX;
  return (uint64_t)t;
}

/* Float -> int: truncate toward zero, saturate, NaN -> 0. */
static inline int64_t sat_int(double x, DType dt) {
  if (isnan(x)) return 0;
  if (dt == TY_U64) return (int64_t)sat_u64(x);
  int64_t lo, hi;
  ir_int_range(dt, &lo, &hi);
  double t = trunc(x);
  if (t <= (double)lo) return lo;
  if (t >= (double)hi) return hi; /* (double)INT64_MAX is 2^63 */
  return (int64_t)t;
}

/* Float -> u8 as onnxruntime's Cast does it (and NumPy's astype on x86):
 * truncated toward zero through int32, then modulo 256; NaN, the
 * infinities and |x| >= 2^31 give 0 (what that int32 step gives). */
static inline uint8_t wrap_u8(double x) {
  if (!(fabs(x) < 2147483648.0)) return 0;
  return (uint8_t)((uint64_t)(int64_t)trunc(x) & 0xffu);
}

static inline int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t wsub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static inline int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

/* Integer view: exact for integer dtypes, a saturating cast for floats. */
static inline int64_t get_i(const Tensor *t, int64_t i) {
  switch (t->type.dtype) {
    case TY_I8: return ((const int8_t *)t->data)[i];
    case TY_I32: return ((const int32_t *)t->data)[i];
    case TY_I64: return ((const int64_t *)t->data)[i];
    case TY_U8: return ((const uint8_t *)t->data)[i];
    case TY_I16: return ((const int16_t *)t->data)[i];
    case TY_U16: return ((const uint16_t *)t->data)[i];
    case TY_U32: return ((const uint32_t *)t->data)[i];
    case TY_U64: return (int64_t)((const uint64_t *)t->data)[i]; /* its bits: see is_u64 */
    default: return sat_int(ir_tensor_get(t, i), TY_I64);
  }
}

/* Integers wrap to the result width; into a float they round once. */
static inline void set_i(Tensor *t, int64_t i, int64_t v) {
  switch (t->type.dtype) {
    case TY_I8: ((int8_t *)t->data)[i] = (int8_t)(uint8_t)((uint64_t)v & 0xff); return;
    case TY_I32: ((int32_t *)t->data)[i] = (int32_t)(uint32_t)((uint64_t)v & 0xffffffffu); return;
    case TY_I64: ((int64_t *)t->data)[i] = v; return;
    case TY_U8: ((uint8_t *)t->data)[i] = (uint8_t)((uint64_t)v & 0xffu); return;
    case TY_F64: ((double *)t->data)[i] = (double)v; return; /* rounded once, to nearest */
    case TY_I16: ((int16_t *)t->data)[i] = (int16_t)(uint16_t)((uint64_t)v & 0xffffu); return;
    case TY_U16: ((uint16_t *)t->data)[i] = (uint16_t)((uint64_t)v & 0xffffu); return;
    case TY_U32: ((uint32_t *)t->data)[i] = (uint32_t)((uint64_t)v & 0xffffffffu); return;
    case TY_U64: ((uint64_t *)t->data)[i] = (uint64_t)v; return;
    default: ir_tensor_set(t, i, int_to_double(v)); return;
  }
}

/* u64 values travel through get_i/set_i as their bits in an int64: the
 * ops where that differs from the unsigned value (division, remainder,
 * order, conversion to a float) look at this. */
static inline bool is_u64(const Tensor *t) { return t->type.dtype == TY_U64; }

/* An int value v of x's dtype (get_i) into a float tensor out at i. */
static inline void set_int_as_float(Tensor *out, int64_t i, const Tensor *x, int64_t v) {
  if (!is_u64(x)) {
    set_i(out, i, v);
    return;
  }
  if (out->type.dtype == TY_F64)
    ((double *)out->data)[i] = (double)(uint64_t)v; /* rounded once, to nearest */
  else
    ir_tensor_set(out, i, u64_to_double((uint64_t)v));
}

/* a < b in x's dtype (get_i values). */
static inline bool int_less(const Tensor *x, int64_t a, int64_t b) {
  return is_u64(x) ? (uint64_t)a < (uint64_t)b : a < b;
}

static inline bool is_int(const Tensor *t) { return !ir_dtype_is_float(t->type.dtype); }

static inline int64_t numel(const TensorType *t) { return ir_type_numel(t); }

/* ---- indexing ---- */

static inline void strides_of(const TensorType *t, int64_t *st) { ir_type_strides(t, st); }

static inline void unravel(int64_t lin, const TensorType *t, int64_t *idx) {
  for (int i = t->rank - 1; i >= 0; i--) {
    int64_t d = t->dims[i];
    idx[i] = d ? lin % d : 0;
    lin = d ? lin / d : 0;
  }
}

static inline void bcast_strides(const TensorType *in, const TensorType *out, int64_t *st) {
  ir_type_bcast_strides(in, out, st);
}

static inline int64_t dot_idx(const int64_t *idx, const int64_t *st, int rank) {
  int64_t o = 0;
  for (int i = 0; i < rank; i++) o += idx[i] * st[i];
  return o;
}

static inline void copy_elem(Tensor *dst, int64_t di, const Tensor *src, int64_t si) {
  size_t es = (size_t)ir_dtype_size(src->type.dtype);
  memcpy((char *)dst->data + (size_t)di * es, (const char *)src->data + (size_t)si * es, es);
}

static inline int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* ---- the interpreter's state ---- */

typedef struct Eval {
  const Node *node; /* the node being evaluated, for messages */
  char *err;
  size_t errlen;
  const IrEvalComm *comm; /* allreduce_mean and allreduce_sum over ranks, or NULL: one rank */
} Eval;

static inline bool fail(Eval *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline bool fail(Eval *e, const char *fmt, ...) {
  size_t used = 0;
  const Node *n = e->node;
  if (n && n->loc.file && n->loc.line > 0)
    used = (size_t)snprintf(e->err, e->errlen, "%s:%d:%d: ", n->loc.file->name, n->loc.line,
                            n->loc.col);
  else if (n && n->loc.file) /* a name, not a place (diag.h) */
    used = (size_t)snprintf(e->err, e->errlen, "%s: ", n->loc.file->name);
  if (n && used < e->errlen)
    used += (size_t)snprintf(e->err + used, e->errlen - used, "%s: ", ir_op_origin(n));
  if (used < e->errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err + used, e->errlen - used, fmt, ap);
    va_end(ap);
  }
  return false;
}

/* ---- shared by the op files ---- */

static inline double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static inline int zero_point(const Node *n) {
  const Attr *z = ir_attr(n, "zero_point");
  return z ? (int)z->i : 0;
}

static inline double binary_f(OpKind op, double a, double b) {
  switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return a / b;
    case OP_POW: return pow(a, b);
    case OP_MAXIMUM: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case OP_MINIMUM: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    case OP_EQ: return a == b;
    case OP_NE: return a != b;
    case OP_LT: return a < b;
    case OP_LE: return a <= b;
    case OP_GT: return a > b;
    case OP_GE: return a >= b;
    default: return 0;
  }
}

/* Splits x's dims around axis: outer * len * inner. */
static inline void split_axis(const TensorType *t, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= t->dims[i];
  *len = t->dims[axis];
  for (int i = axis + 1; i < t->rank; i++) *inner *= t->dims[i];
}

/* ---- the op functions (each file's header comment says which) ---- */

/* eval_elem.c */
bool eval_unary(Eval *e, const Node *n, const Tensor *x, Tensor *out);
bool eval_quant(const Node *n, const Tensor *x, const Tensor *scale, Tensor *out);
bool eval_binary(Eval *e, const Node *n, const Tensor *a, const Tensor *b, Tensor *out);
bool eval_bool_binary(const Node *n, const Tensor *a, const Tensor *b, Tensor *out);
bool eval_bool_unary(const Node *n, const Tensor *x, Tensor *out);
bool eval_where(const Tensor *cond, const Tensor *a, const Tensor *b, Tensor *out);
/* eval_reduce.c */
bool eval_reduce(Eval *e, const Node *n, const Tensor *x, Tensor *out);
bool eval_argmax(Eval *e, const Node *n, const Tensor *x, Tensor *out);
bool eval_softmax(Eval *e, const Node *n, const Tensor *x, Tensor *out);
bool eval_norm(Eval *e, const Node *n, const Tensor *x, const Tensor *w, const Tensor *b,
               Tensor *out);
bool eval_attention(const Node *n, Tensor *const *in, Tensor *out);
bool eval_attention_grad(const Node *n, Tensor *const *in, Tensor *out);
bool eval_global_avgpool(Eval *e, const Node *n, const Tensor *x, Tensor *out);
bool eval_batchnorm(Eval *e, const Node *n, Tensor *const *in, Tensor *out);
/* eval_conv.c */
bool eval_matmul(Eval *e, const Node *n, const Tensor *a, const Tensor *b, Tensor *out);
bool eval_linear(Eval *e, const Tensor *x, const Tensor *w, const Tensor *b, Tensor *out);
bool eval_conv(Eval *e, const Node *n, const Tensor *x, const Tensor *w, const Tensor *b,
               Tensor *out);
bool eval_conv_transpose(Eval *e, const Node *n, const Tensor *x, const Tensor *w,
                         const Tensor *b, Tensor *out);
bool eval_resize(Eval *e, const Node *n, const Tensor *x, Tensor *out);
bool eval_grid_sample(const Node *n, const Tensor *x, const Tensor *grid, Tensor *out);
bool eval_pool(Eval *e, const Node *n, const Tensor *x, Tensor *out);
bool eval_rnn(Eval *e, const Node *n, int n_in, Tensor *const *in, Tensor *outs);
bool eval_lstm_bptt(Eval *e, const Node *n, Tensor *const *in, Tensor *out);
bool eval_gru_bptt(Eval *e, const Node *n, Tensor *const *in, Tensor *out);
/* eval_data.c */
bool eval_transpose(Eval *e, const Node *n, const Tensor *x, Tensor *out);
bool eval_expand(Eval *e, const Tensor *x, Tensor *out);
bool eval_concat(Eval *e, const Node *n, int n_in, Tensor *const *in, Tensor *out);
bool eval_slice(Eval *e, const Node *n, const Tensor *x, Tensor *out);
bool eval_pad(Eval *e, const Node *n, const Tensor *x, Tensor *out);
bool eval_gather(Eval *e, const Node *n, const Tensor *data, const Tensor *ind, Tensor *out);
bool eval_gather_elements(Eval *e, const Node *n, const Tensor *data, const Tensor *ind, Tensor *out);
bool eval_gather_nd(Eval *e, const Node *n, const Tensor *data, const Tensor *ind, Tensor *out);
bool eval_scatter_elements(Eval *e, const Node *n, Tensor *const *in, Tensor *out);
bool eval_scatter_nd(Eval *e, const Node *n, Tensor *const *in, Tensor *out);
bool eval_topk(Eval *e, const Node *n, const Tensor *x, Tensor *outs);
void eval_nonzero(const Tensor *x, Tensor *outs);
void eval_nms(const Node *n, Tensor *const *in, Tensor *outs);
bool eval_unique(Eval *e, const Node *n, const Tensor *x, Tensor *outs);

#endif
