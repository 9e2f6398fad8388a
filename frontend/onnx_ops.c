/* ONNX ops onto the op table: elementwise, comparisons, matrix products,
 * convolution and pooling, normalizations, losses and reductions.  Takes
 * one node's operands, returns its results (folded when known). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/onnx_internal.h"

/* ---- elementwise ---- */

typedef struct UnaryMap {
  const char *onnx;
  OpKind op;
} UnaryMap;

static const UnaryMap unary_ops[] = {
    {"Abs", OP_ABS},   {"Neg", OP_NEG},   {"Relu", OP_RELU},       {"Sigmoid", OP_SIGMOID},
    {"Tanh", OP_TANH}, {"Exp", OP_EXP},   {"Log", OP_LOG},         {"Sqrt", OP_SQRT},
    {"Erf", OP_ERF},   {"Sin", OP_SIN},   {"Cos", OP_COS},         {"Reciprocal", OP_RECIPROCAL},
    {"HardSwish", OP_HARDSWISH},
    {"Round", OP_ROUND}, {"Floor", OP_FLOOR}, {"Ceil", OP_CEIL},   {"Sign", OP_SIGN},
    {"Tan", OP_TAN},     {"Asin", OP_ASIN},   {"Acos", OP_ACOS},   {"Atan", OP_ATAN},
    {"Sinh", OP_SINH},   {"Cosh", OP_COSH},   {"Asinh", OP_ASINH}, {"Acosh", OP_ACOSH},
    {"Atanh", OP_ATANH},
};

bool ox_op_unary(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  for (size_t i = 0; i < ARRAY_LEN(unary_ops); i++)
    if (strcmp(im->np->op_type, unary_ops[i].onnx) == 0) return (n->out[0] = ox_op1(im, unary_ops[i].op, x));
  dl_unreachable(im->c);
}

bool ox_op_leaky_relu(Imp *im, ONode *n) {
  double alpha;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_attr_float(im, "alpha", 0.01, &alpha)) return false;
  return (n->out[0] = ox_op1f(im, OP_LEAKY_RELU, x, "alpha", alpha));
}

Val *ox_gelu(Imp *im, Val *x, const char *approximate) {
  if (!x) return NULL;
  Emit e;
  Node *g = ox_begin(im, &e, OP_GELU, 1, &x);
  ir_set_str(im->g, g, "approximate", approximate);
  return ox_emit1(im, &e);
}

bool ox_op_gelu(Imp *im, ONode *n) {
  const char *approx;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_attr_str(im, "approximate", "none", &approx)) return false;
  if (strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0)
    return ox_bad(im, "approximate='%s' is not supported (none or tanh)", approx);
  return (n->out[0] = ox_gelu(im, x, approx));
}

/* alpha * (exp(min(x, 0) / scale) - 1): the negative side of Elu and Celu. */
Val *ox_neg_exp_side(Imp *im, Val *x, double alpha, double scale) {
  Val *m = ox_op2s(im, OP_MINIMUM, x, 0.0);
  if (scale != 1.0) m = ox_op2s(im, OP_DIV, m, scale);
  return ox_op2s(im, OP_MUL, ox_op2s(im, OP_SUB, ox_op1(im, OP_EXP, m), 1.0), alpha);
}

bool ox_op_elu_family(Imp *im, ONode *n) {
  const char *t = im->np->op_type;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_need_float_in(im, x)) return false;
  double alpha, gamma = 1.0;
  bool selu = strcmp(t, "Selu") == 0, celu = strcmp(t, "Celu") == 0;
  if (!ox_attr_float(im, "alpha", selu ? 1.67326319217681884765625 : 1.0, &alpha)) return false;
  if (selu && !ox_attr_float(im, "gamma", 1.05070102214813232421875, &gamma)) return false;
  Val *w = ox_widen(im, x);
  Val *y = ox_op2(im, OP_ADD, ox_op1(im, OP_RELU, w), ox_neg_exp_side(im, w, alpha, celu ? alpha : 1.0));
  if (selu) y = ox_op2s(im, OP_MUL, y, gamma);
  return (n->out[0] = ox_narrow(im, y, x->type.dtype));
}

Val *ox_hardsigmoid_of(Imp *im, Val *x, double alpha, double beta) {
  if (fabs(alpha - 1.0 / 6.0) < 1e-7 && beta == 0.5) return ox_op1(im, OP_HARDSIGMOID, x);
  Val *y = ox_op2s(im, OP_ADD, ox_op2s(im, OP_MUL, x, alpha), beta);
  if (!y) return NULL;
  Emit e;
  Node *c = ox_begin(im, &e, OP_CLIP, 1, &y);
  ir_set_float(im->g, c, "min", 0.0);
  ir_set_float(im->g, c, "max", 1.0);
  return ox_emit1(im, &e);
}

Val *ox_softplus_of(Imp *im, Val *x) {
  return ox_op1(im, OP_LOG, ox_op2s(im, OP_ADD, ox_op1(im, OP_EXP, x), 1.0));
}

Val *ox_softsign_of(Imp *im, Val *x) {
  return ox_op2(im, OP_DIV, x, ox_op2s(im, OP_ADD, ox_op1(im, OP_ABS, x), 1.0));
}

bool ox_op_hardsigmoid(Imp *im, ONode *n) {
  double alpha, beta;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_attr_float(im, "alpha", 0.2, &alpha) || !ox_attr_float(im, "beta", 0.5, &beta)) return false;
  return (n->out[0] = ox_narrow(im, ox_hardsigmoid_of(im, ox_widen(im, x), alpha, beta), x->type.dtype));
}

bool ox_op_softplus(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  return x && (n->out[0] = ox_narrow(im, ox_softplus_of(im, ox_widen(im, x)), x->type.dtype));
}

bool ox_op_softsign(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  return x && (n->out[0] = ox_narrow(im, ox_softsign_of(im, ox_widen(im, x)), x->type.dtype));
}

/* Before opset 7 a binary op broadcasts only with broadcast=1, and then B
 * lines up with A's dims from `axis` on (default: A's last dims): B is
 * given 1s around it so that NumPy broadcasting means the same.  From
 * opset 7 the attributes are gone and NumPy's rules hold. */
static Val *legacy_broadcast(Imp *im, Val *a, Val *b) {
  if (im->opset >= 7) return b;
  int64_t on, axis;
  int ra = a->type.rank, rb = b->type.rank;
  if (!ox_attr_int(im, "broadcast", 0, &on) || !ox_attr_int(im, "axis", ra - rb, &axis)) return NULL;
  if (!on || rb == ra) return b;
  if (axis < 0) axis += ra;
  if (axis < 0 || axis + rb > ra) {
    ox_bad(im, "broadcast axis %" PRId64 " does not fit B's %d dims in A's %d", axis, rb, ra);
    return NULL;
  }
  int64_t dims[DL_MAX_RANK];
  for (int i = 0; i < ra; i++) dims[i] = i >= axis && i < axis + rb ? b->type.dims[i - axis] : 1;
  for (int i = 0; i < rb; i++)
    if (b->type.dims[i] != 1 && b->type.dims[i] != a->type.dims[axis + i]) {
      ox_bad(im, "broadcast axis %" PRId64 ": B's dim %d is %" PRId64 ", A's dim %d is %" PRId64, axis, i,
             b->type.dims[i], (int)axis + i, a->type.dims[axis + i]);
      return NULL;
    }
  return ox_reshape(im, b, ra, dims);
}

bool ox_op_prelu(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *slope = ox_in_req(im, n, 1);
  if (!x || !slope) return false;
  /* PRelu-6's slope is one per channel (dim 1), not NumPy-aligned. */
  int r = x->type.rank;
  if (im->opset < 7 && slope->type.rank == 1 && r >= 2 && slope->type.dims[0] == x->type.dims[1] &&
      slope->type.dims[0] != 1) {
    int64_t dims[DL_MAX_RANK];
    for (int i = 0; i < r - 1; i++) dims[i] = i == 0 ? slope->type.dims[0] : 1;
    slope = ox_reshape(im, slope, r - 1, dims);
  }
  return (n->out[0] = ox_op2(im, OP_ADD, ox_op1(im, OP_RELU, x),
                             ox_op2(im, OP_MUL, slope, ox_op2s(im, OP_MINIMUM, x, 0.0))));
}

/* A bound computed at run time (openWakeWord's min = ReduceMax(x) - 80):
 * min(maximum(x, min), max) with it as an operand, which is also max
 * where min > max. */
static Val *clip_by(Imp *im, Val *x, Val *bound, OpKind op) {
  if (ir_type_numel(&bound->type) != 1) {
    ox_bad(im, "Clip's %s must hold one value", op == OP_MAXIMUM ? "min" : "max");
    return NULL;
  }
  return ox_op2(im, op, x, ox_cast(im, ox_reshape(im, bound, 0, NULL), x->type.dtype));
}

bool ox_op_clip(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  double lo = -INFINITY, hi = INFINITY;
  if (im->opset < 11) {
    if (!ox_attr_float(im, "min", -INFINITY, &lo) || !ox_attr_float(im, "max", INFINITY, &hi)) return false;
  } else {
    Val *vlo = ox_in_opt(n, 1), *vhi = ox_in_opt(n, 2);
    if ((vlo && !vlo->k && !vlo->hint) || (vhi && !vhi->k && !vhi->hint)) {
      Val *y = vlo ? clip_by(im, x, vlo, OP_MAXIMUM) : x;
      return (n->out[0] = y && vhi ? clip_by(im, y, vhi, OP_MINIMUM) : y);
    }
    if (vlo && !ox_const_scalar(im, vlo, "Clip's min", &lo)) return false;
    if (vhi && !ox_const_scalar(im, vhi, "Clip's max", &hi)) return false;
  }
  return (n->out[0] = ox_clip_of(im, x, lo, hi));
}

Val *ox_clip_of(Imp *im, Val *x, double lo, double hi) {
  if (!x) return NULL;
  /* ONNX's Clip is min(max(x, min), max): with min > max, every element is max. */
  if (lo > hi) lo = hi;
  Val *y = x;
  if (isfinite(lo) && isfinite(hi)) {
    Emit e;
    Node *c = ox_begin(im, &e, OP_CLIP, 1, &x);
    ir_set_float(im->g, c, "min", lo);
    ir_set_float(im->g, c, "max", hi);
    y = ox_emit1(im, &e);
  } else {
    if (isfinite(lo)) y = ox_op2s(im, OP_MAXIMUM, y, lo);
    if (isfinite(hi)) y = ox_op2s(im, OP_MINIMUM, y, hi);
  }
  return y;
}

bool ox_op_binary(Imp *im, ONode *n) {
  const char *t = im->np->op_type;
  Val *a = ox_in_req(im, n, 0), *b = ox_in_req(im, n, 1);
  if (!a || !b) return false;
  OpKind op = strcmp(t, "Add") == 0   ? OP_ADD
              : strcmp(t, "Sub") == 0 ? OP_SUB
              : strcmp(t, "Mul") == 0 ? OP_MUL
              : strcmp(t, "Div") == 0 ? OP_DIV
                                      : OP_POW;
  if (!(b = legacy_broadcast(im, a, b))) return false;
  /* Pow alone lets the exponent have its own dtype. */
  if (op == OP_POW) b = ox_cast(im, b, a->type.dtype);
  return (n->out[0] = ox_op2(im, op, a, b));
}

/* fmod=0 is the sign of the divisor (ONNX asks fmod=1 of floats; dlcc
 * gives them Python's % instead of refusing), fmod=1 C's fmod. */
bool ox_op_mod(Imp *im, ONode *n) {
  Val *a = ox_in_req(im, n, 0), *b = ox_in_req(im, n, 1);
  int64_t fmod_attr;
  if (!a || !b || !ox_attr_int(im, "fmod", 0, &fmod_attr)) return false;
  if (fmod_attr != 0 && fmod_attr != 1) return ox_bad(im, "fmod must be 0 or 1, got %" PRId64, fmod_attr);
  Emit e;
  Node *m = ox_begin(im, &e, OP_MOD, 2, (Val *[]){a, b});
  ir_set_int(im->g, m, "fmod", fmod_attr);
  return (n->out[0] = ox_emit1(im, &e));
}

/* Max, Min, Sum, Mean: any number of operands, broadcast together. */
bool ox_op_variadic(Imp *im, ONode *n) {
  const char *t = im->np->op_type;
  OpKind op = strcmp(t, "Max") == 0 ? OP_MAXIMUM : strcmp(t, "Min") == 0 ? OP_MINIMUM : OP_ADD;
  if (n->n_in < 1) return ox_bad(im, "needs at least one input");
  Val *y = ox_in_req(im, n, 0);
  for (int i = 1; y && i < n->n_in; i++) {
    Val *b = ox_in_req(im, n, i);
    y = b ? ox_op2(im, op, y, b) : NULL;
  }
  if (y && strcmp(t, "Mean") == 0 && n->n_in > 1) y = ox_op2s(im, OP_DIV, y, n->n_in);
  return (n->out[0] = y);
}

/* ---- comparisons, logic, where ---- */

typedef struct OpMap {
  const char *onnx;
  OpKind op;
} OpMap;

static const OpMap logic_ops[] = {
    {"Equal", OP_EQUAL},       {"Less", OP_LESS},  {"LessOrEqual", OP_LESS_EQUAL},
    {"Greater", OP_GREATER},   {"GreaterOrEqual", OP_GREATER_EQUAL},
    {"And", OP_LOGICAL_AND},   {"Or", OP_LOGICAL_OR}, {"Xor", OP_LOGICAL_XOR},
    {"Not", OP_LOGICAL_NOT},   {"IsNaN", OP_ISNAN},
    {"BitwiseAnd", OP_BIT_AND}, {"BitwiseOr", OP_BIT_OR}, {"BitwiseXor", OP_BIT_XOR}, {"BitwiseNot", OP_BIT_NOT},
};

bool ox_op_bitcast(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int64_t code;
  DType to;
  if (!x || !ox_attr_int(im, "to", 0, &code)) return false;
  if (!ox_dtype_from_onnx((int32_t)code, &to))
    return ox_bad(im, "bitcast to %s is not supported (%s)", ox_onnx_type_name((int32_t)code), ox_dtypes_we_have);
  Emit e;
  Node *nd = ox_begin(im, &e, OP_BITCAST, 1, &x);
  ir_set_dtype(im->g, nd, "to", to);
  return (n->out[0] = ox_emit1(im, &e));
}

bool ox_op_bit_shift(Imp *im, ONode *n) {
  Val *a = ox_in_req(im, n, 0), *b = ox_in_req(im, n, 1);
  const char *dir;
  if (!a || !b || !ox_attr_str(im, "direction", NULL, &dir)) return false;
  if (strcmp(dir, "LEFT") != 0 && strcmp(dir, "RIGHT") != 0)
    return ox_bad(im, "direction \"%s\" is not LEFT or RIGHT", dir);
  return (n->out[0] = ox_op2(im, dir[0] == 'L' ? OP_SHL : OP_SHR, a, b));
}

bool ox_op_logic(Imp *im, ONode *n) {
  OpKind op = OP_COUNT;
  for (size_t i = 0; i < ARRAY_LEN(logic_ops); i++)
    if (strcmp(im->np->op_type, logic_ops[i].onnx) == 0) op = logic_ops[i].op;
  if (op == OP_COUNT) dl_unreachable(im->c);
  Val *a = ox_in_req(im, n, 0);
  if (!a) return false;
  if (ir_ops[op].min_in == 1) return (n->out[0] = ox_op1(im, op, a));
  Val *b = ox_in_req(im, n, 1);
  return b && (n->out[0] = ox_op2(im, op, a, b));
}

/* A bool tensor of t's shape, every element v. */
static Val *bool_splat(Imp *im, const TensorType *t, bool v) {
  TensorType bt = *t;
  bt.dtype = TY_BOOL;
  Val *r = ox_known_new(im, &bt);
  if (v) memset(r->k->data, 1, ir_tensor_nbytes(&bt));
  return r;
}

bool ox_op_isinf(Imp *im, ONode *n) {
  int64_t neg, pos;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_attr_int(im, "detect_negative", 1, &neg) || !ox_attr_int(im, "detect_positive", 1, &pos))
    return false;
  if (!neg && !pos) return (n->out[0] = bool_splat(im, &x->type, false));
  Val *y = ox_op1(im, OP_ISINF, x);
  if (!neg || !pos) y = ox_op2(im, OP_LOGICAL_AND, y, ox_op2s(im, pos ? OP_GREATER : OP_LESS, x, 0.0));
  return (n->out[0] = y);
}

Val *ox_where(Imp *im, Val *cond, Val *a, Val *b) {
  if (!cond || !a || !b) return NULL;
  Val *in[3] = {cond, a, b};
  Emit e;
  ox_begin(im, &e, OP_WHERE, 3, in);
  return ox_emit1(im, &e);
}

bool ox_op_where(Imp *im, ONode *n) {
  Val *c = ox_in_req(im, n, 0), *a = ox_in_req(im, n, 1), *b = ox_in_req(im, n, 2);
  return c && a && b && (n->out[0] = ox_where(im, c, a, b));
}

/* x where x > alpha, else 0. */
bool ox_op_thresholded_relu(Imp *im, ONode *n) {
  double alpha;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_attr_float(im, "alpha", 1.0, &alpha)) return false;
  return (n->out[0] = ox_where(im, ox_op2s(im, OP_GREATER, x, alpha), x, ox_scalar(im, 0, x->type.dtype)));
}

/* x + bias below -lambd, x - bias above lambd, 0 between. */
bool ox_op_shrink(Imp *im, ONode *n) {
  double lambd, bias;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_attr_float(im, "lambd", 0.5, &lambd) || !ox_attr_float(im, "bias", 0.0, &bias)) return false;
  Val *zero = ox_scalar(im, 0, x->type.dtype);
  Val *above = ox_where(im, ox_op2s(im, OP_GREATER, x, lambd), ox_op2s(im, OP_SUB, x, bias), zero);
  return (n->out[0] = ox_where(im, ox_op2s(im, OP_LESS, x, -lambd), ox_op2s(im, OP_ADD, x, bias), above));
}

/* The upper (j - i >= k) or lower (j - i <= k) triangle of the last two
 * dims: a constant mask of those two dims, broadcast by where. */
bool ox_op_trilu(Imp *im, ONode *n) {
  int64_t upper, k = 0;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_attr_int(im, "upper", 1, &upper)) return false;
  if (x->type.rank < 2) return ox_bad(im, "the input must have at least 2 dims, got rank %d", x->type.rank);
  double kv;
  const int64_t *d = x->type.dims + x->type.rank - 2;
  Val *vk = ox_in_opt(n, 1);
  if (vk && !vk->k && !vk->hint) {
    /* k at run time: j - i, known, compared with it. */
    if (ir_type_numel(&vk->type) != 1) return ox_bad(im, "Trilu's k must hold one value");
    TensorType dt = ir_type_make(TY_I64, 2, d);
    Val *diff = ox_known_new(im, &dt);
    for (int64_t i = 0; i < d[0]; i++)
      for (int64_t j = 0; j < d[1]; j++) ((int64_t *)diff->k->data)[i * d[1] + j] = j - i;
    Val *kk = ox_cast(im, ox_reshape(im, vk, 0, NULL), TY_I64);
    Val *mask = ox_op2(im, upper ? OP_GREATER_EQUAL : OP_LESS_EQUAL, diff, kk);
    return (n->out[0] = ox_where(im, mask, x, ox_scalar(im, 0, x->type.dtype)));
  }
  if (vk) {
    if (!ox_const_scalar(im, vk, "Trilu's k", &kv)) return false;
    k = (int64_t)kv;
  }
  TensorType mt = ir_type_make(TY_BOOL, 2, d);
  Val *mask = ox_known_new(im, &mt);
  uint8_t *m = mask->k->data;
  for (int64_t i = 0; i < d[0]; i++)
    for (int64_t j = 0; j < d[1]; j++) m[i * d[1] + j] = upper ? j - i >= k : j - i <= k;
  return (n->out[0] = ox_where(im, mask, x, ox_scalar(im, 0, x->type.dtype)));
}

bool ox_op_identity(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  return (n->out[0] = x);
}

bool ox_op_dropout(Imp *im, ONode *n) {
  double ratio;
  int64_t seed;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_attr_float(im, "ratio", 0.5, &ratio) || !ox_attr_int(im, "seed", 0, &seed) ||
      !ox_attr_only(im, "is_test", 1, 1))
    return false;
  if (ox_in_opt(n, 2)) {
    double training;
    if (!ox_const_scalar(im, n->in[2], "Dropout's training_mode", &training)) return false;
    /* training with a ratio of 0 drops nothing: the identity again */
    if (ox_in_opt(n, 1) && training != 0 && !ox_const_scalar(im, n->in[1], "Dropout's ratio", &ratio)) return false;
    if (training != 0 && !(ratio >= 0 && ratio <= 1))
      return ox_bad(im, "the ratio %g is not a probability (0 to 1)", ratio);
    if (training != 0 && ratio != 0) return ox_training_dropout(im, n, x, ratio);
  }
  /* inference keeps every element: the mask is all true */
  if (n->n_out > 1 && n->want[1]) {
    if (!(n->out[1] = ox_expand(im, ox_scalar(im, 1, TY_BOOL), x->type.rank, x->type.dims))) return false;
  }
  return (n->out[0] = x);
}

/* Into a narrow type (held wider, ox_held_format): from a float, or a
 * narrow one, through f32 (exact for every source), fp_round, and the
 * holding dtype (exact again).  An integer source would need the bits
 * that do not fit discarded: not supported. */
static Val *cast_to_held(Imp *im, Val *x, int32_t code, bool saturate) {
  DType hold;
  const IrNarrow *f = ox_held_format(code, &hold);
  if (f->kind == IR_NARROW_E8M0) { /* round_mode: "up" (ONNX's default), "down" or "nearest" */
    const char *mode;
    if (!ox_attr_str(im, "round_mode", "up", &mode)) return NULL;
    const char *name = !strcmp(mode, "up") ? "e8m0" : !strcmp(mode, "down") ? "e8m0_down"
                     : !strcmp(mode, "nearest") ? "e8m0_nearest" : NULL;
    if (!name) {
      ox_bad(im, "round_mode \"%s\" is not one of up, down and nearest", mode);
      return NULL;
    }
    f = ir_narrow_find(name);
  }
  if (!ir_dtype_is_float(x->type.dtype) && !x->held) {
    ox_bad(im, "cast from %s to %s is not supported", ir_dtype_name(x->type.dtype), ox_onnx_type_name(code));
    return NULL;
  }
  if (x->type.dtype == TY_F64) {
    ox_bad(im, "cast from f64 to %s is not supported", ox_onnx_type_name(code));
    return NULL;
  }
  Val *f32 = ox_cast(im, x, TY_F32);
  if (!f32) return NULL;
  Emit e;
  Node *d = ox_begin(im, &e, OP_FP_ROUND, 1, &f32);
  ir_set_str(im->g, d, "format", f->name);
  ir_set_int(im->g, d, "saturate", saturate);
  Val *r = ox_cast(im, ox_emit1(im, &e), hold);
  if (r == x || (r && r->held)) r = ox_val_of(im, ox_use(im, r)); /* a Val of its own to tag */
  if (r) r->held = code;
  return r;
}

bool ox_op_cast(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  const char *mode;
  /* Cast-25's round_mode means something for FLOAT8E8M0 alone
   * (cast_to_held reads it there). */
  if (!x || !ox_attr_str(im, "round_mode", "up", &mode)) return false;
  DType to;
  int32_t code;
  int64_t sat = 1;
  if (strcmp(im->np->op_type, "CastLike") == 0) {
    Val *like = ox_in_req(im, n, 1);
    if (!like || !ox_attr_int(im, "saturate", 1, &sat)) return false;
    to = like->type.dtype;
    code = like->held;
  } else {
    int64_t c;
    if (!ox_attr_int(im, "to", 0, &c) || !ox_attr_int(im, "saturate", 1, &sat)) return false;
    code = (int32_t)c;
    if (ox_held_format(code, &to))
      ;
    else if (!ox_dtype_from_onnx(code, &to))
      return ox_bad(im, "cast to %s is not supported (%s)", ox_onnx_type_name(code), ox_dtypes_we_have);
    else
      code = 0;
  }
  if (code) return (n->out[0] = cast_to_held(im, x, code, sat != 0));
  Val *r = ox_cast(im, x, to);
  /* The same dtype as x's holding one: a Val of its own, not narrow */
  if (r && r->held) r = ox_val_of(im, ox_use(im, r));
  return (n->out[0] = r);
}

/* ---- matrix products ---- */

bool ox_op_matmul(Imp *im, ONode *n) {
  Val *a = ox_in_req(im, n, 0), *b = ox_in_req(im, n, 1);
  if (!a || !b) return false;
  return (n->out[0] = ox_op2(im, OP_MATMUL, a, b));
}

bool ox_op_gemm(Imp *im, ONode *n) {
  Val *a = ox_in_req(im, n, 0), *b = ox_in_req(im, n, 1), *c = ox_in_opt(n, 2);
  int64_t ta, tb;
  double alpha, beta;
  if (!a || !b || !ox_attr_int(im, "transA", 0, &ta) || !ox_attr_int(im, "transB", 0, &tb) ||
      !ox_attr_float(im, "alpha", 1.0, &alpha) || !ox_attr_float(im, "beta", 1.0, &beta))
    return false;
  if (a->type.rank != 2 || b->type.rank != 2)
    return ox_bad(im, "A and B must be 2-d, got ranks %d and %d", a->type.rank, b->type.rank);
  if (beta == 0) c = NULL;
  /* Gemm before opset 7: broadcast=1 lets C broadcast, as it always may now. */
  int64_t legacy;
  if (im->opset < 7 && !ox_attr_int(im, "broadcast", 0, &legacy)) return false;
  static const int64_t swap[2] = {1, 0};
  /* PyTorch's nn.Linear exports as Gemm(transB=1): keep it one op. */
  if (!ta && tb && alpha == 1 &&
      (!c || (beta == 1 && c->type.rank == 1 && c->type.dims[0] == b->type.dims[0]))) {
    Val *in[3] = {a, b, c};
    Emit e;
    ox_begin(im, &e, OP_LINEAR, c ? 3 : 2, in);
    return (n->out[0] = ox_emit1(im, &e));
  }
  if (ta) a = ox_transpose(im, a, swap);
  if (tb) b = ox_transpose(im, b, swap);
  Val *y = ox_op2(im, OP_MATMUL, a, b);
  if (alpha != 1) y = ox_op2s(im, OP_MUL, y, alpha);
  if (c) y = ox_op2(im, OP_ADD, y, beta != 1 ? ox_op2s(im, OP_MUL, c, beta) : c);
  return (n->out[0] = y);
}

/* ---- convolution and pooling ---- */

/* kernel_shape, strides, dilations, pads and auto_pad for a window over
 * x's trailing dims (kernel from the weight when kernel_shape is absent),
 * for up to max_spatial dims. */
static bool spatial_window(Imp *im, const Val *x, const int64_t *wkernel, int max_spatial, Window *w) {
  int r = x->type.rank;
  if (r < 3 || r > 2 + max_spatial)
    return ox_bad(im, "%d spatial dims are not supported (%s are)", r - 2 > 0 ? r - 2 : 0,
                  max_spatial == 3 ? "1-d, 2-d and 3-d" : "1-d and 2-d");
  int s = r - 2;
  w->spatial = s;
  int nk, ns, nd, np;
  const int64_t *k, *st, *dl, *pd;
  const char *auto_pad;
  if (!ox_attr_ints(im, "kernel_shape", &nk, &k) || !ox_attr_ints(im, "strides", &ns, &st) ||
      !ox_attr_ints(im, "dilations", &nd, &dl) || !ox_attr_ints(im, "pads", &np, &pd) ||
      !ox_attr_str(im, "auto_pad", "NOTSET", &auto_pad))
    return false;
  if (nk < 0 && !wkernel) return ox_bad(im, "attribute 'kernel_shape' is missing");
  if ((nk >= 0 && nk != s) || (ns >= 0 && ns != s) || (nd >= 0 && nd != s) || (np >= 0 && np != 2 * s))
    return ox_bad(im, "kernel_shape, strides and dilations need %d values and pads %d", s, 2 * s);
  int64_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0}, kk[3], ss[3], dd[3];
  for (int i = 0; i < s; i++) {
    kk[i] = nk >= 0 ? k[i] : wkernel[i];
    if (wkernel && kk[i] != wkernel[i])
      return ox_bad(im, "kernel_shape %" PRId64 " differs from the weight's %" PRId64, kk[i], wkernel[i]);
    ss[i] = ns >= 0 ? st[i] : 1;
    dd[i] = nd >= 0 ? dl[i] : 1;
    if (kk[i] < 1 || ss[i] < 1 || dd[i] < 1)
      return ox_bad(im, "kernel, strides and dilations must be >= 1");
    int64_t in = x->type.dims[2 + i];
    if (strcmp(auto_pad, "NOTSET") == 0) {
      lo[i] = np >= 0 ? pd[i] : 0;
      hi[i] = np >= 0 ? pd[s + i] : 0;
      if (lo[i] < 0 || hi[i] < 0) return ox_bad(im, "negative pads are not supported");
    } else if (strcmp(auto_pad, "SAME_UPPER") == 0 || strcmp(auto_pad, "SAME_LOWER") == 0) {
      int64_t out = (in + ss[i] - 1) / ss[i];
      int64_t total = (out - 1) * ss[i] + (kk[i] - 1) * dd[i] + 1 - in;
      if (total < 0) total = 0;
      bool upper = auto_pad[5] == 'U';
      lo[i] = upper ? total / 2 : total - total / 2;
      hi[i] = total - lo[i];
    } else if (strcmp(auto_pad, "VALID") != 0) {
      return ox_bad(im, "auto_pad='%s' is not supported", auto_pad);
    }
  }
  /* A 1-d window is a 2-d one of height 1: its dims go last, after a
   * leading one of kernel 1 and no padding. */
  int m = s == 1 ? 2 : s, o = m - s;
  w->nsp = m;
  w->kernel[0] = 1, w->stride[0] = 1, w->dil[0] = 1;
  w->pad[0] = w->pad[m] = 0;
  for (int i = 0; i < s; i++) {
    w->kernel[o + i] = kk[i], w->stride[o + i] = ss[i], w->dil[o + i] = dd[i];
    w->pad[o + i] = lo[i], w->pad[m + o + i] = hi[i];
  }
  return true;
}

/* The windows of the int8 convolutions, which stay 2-d. */
bool ox_window_attrs(Imp *im, const Val *x, const int64_t *wkernel, Window *w) {
  return spatial_window(im, x, wkernel, 2, w);
}

/* The window's attributes on an IR conv or pool node. */
static void set_window(Imp *im, Node *node, const Window *win, bool with_kernel) {
  int m = win->nsp;
  if (with_kernel) ir_set_ints(im->g, node, "kernel", m, win->kernel);
  ir_set_ints(im->g, node, "stride", m, win->stride);
  ir_set_ints(im->g, node, "pad", 2 * m, win->pad);
  ir_set_ints(im->g, node, "dilation", m, win->dil);
}

/* [N, C, L] -> [N, C, 1, L] for 1-d windows. */
Val *ox_to_2d(Imp *im, Val *x) {
  if (!x || x->type.rank != 3) return x;
  int64_t d[4] = {x->type.dims[0], x->type.dims[1], 1, x->type.dims[2]};
  return ox_reshape(im, x, 4, d);
}

Val *ox_from_2d(Imp *im, Val *y, int spatial) {
  if (!y || spatial != 1) return y;
  int64_t d[3] = {y->type.dims[0], y->type.dims[1], y->type.dims[3]};
  return ox_reshape(im, y, 3, d);
}

bool ox_op_conv(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *w = ox_in_req(im, n, 1), *b = ox_in_opt(n, 2);
  int64_t group;
  if (!x || !w || !ox_attr_int(im, "group", 1, &group)) return false;
  if (w->type.rank != x->type.rank)
    return ox_bad(im, "weight rank %d differs from input rank %d", w->type.rank, x->type.rank);
  Window win;
  if (!spatial_window(im, x, w->type.dims + 2, 3, &win)) return false;
  Val *in[3] = {ox_to_2d(im, x), ox_to_2d(im, w), b};
  if (!in[0] || !in[1]) return false;
  Emit e;
  Node *c = ox_begin(im, &e, win.nsp == 3 ? OP_CONV3D : OP_CONV2D, b ? 3 : 2, in);
  set_window(im, c, &win, false);
  ir_set_int(im->g, c, "groups", group);
  return (n->out[0] = ox_from_2d(im, ox_emit1(im, &e), win.spatial));
}

/* The window attributes read as Conv's.  SAME auto_pad and output_shape
 * ask for an output size instead: the pads follow from it as ONNX says
 * (the odd unit at the end for SAME_UPPER, else at the start), and an
 * output larger than the full one becomes output padding. */
bool ox_op_conv_transpose(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *w = ox_in_req(im, n, 1), *b = ox_in_opt(n, 2);
  int64_t group;
  const char *auto_pad;
  int nos, nop;
  const int64_t *os, *op;
  if (!x || !w || !ox_attr_int(im, "group", 1, &group) || !ox_attr_str(im, "auto_pad", "NOTSET", &auto_pad) ||
      !ox_attr_ints(im, "output_shape", &nos, &os) || !ox_attr_ints(im, "output_padding", &nop, &op))
    return false;
  bool same = strncmp(auto_pad, "SAME_", 5) == 0;
  if (w->type.rank != x->type.rank)
    return ox_bad(im, "weight rank %d differs from input rank %d", w->type.rank, x->type.rank);
  Window win;
  if (!spatial_window(im, x, w->type.dims + 2, 3, &win)) return false;
  int sp = win.spatial, m = win.nsp, o = m - sp;
  if (nop >= 0 && nop != sp) return ox_bad(im, "output_padding needs %d values", sp);
  if (nos >= 0 && nos != sp) return ox_bad(im, "output_shape needs %d values", sp);
  int64_t opad[3] = {0, 0, 0};
  for (int i = 0; i < nop; i++) opad[o + i] = op[i];
  if (same || nos >= 0) {
    bool upper = strcmp(auto_pad, "SAME_UPPER") == 0;
    for (int i = 0; i < sp; i++) {
      int64_t in = x->type.dims[2 + i], want = nos >= 0 ? os[i] : in * win.stride[o + i];
      int64_t full = win.stride[o + i] * (in - 1) + opad[o + i] +
                     (win.kernel[o + i] - 1) * win.dil[o + i] + 1;
      int64_t total = full - want, lo = 0, hi = 0;
      if (want < 1) return ox_bad(im, "output_shape %" PRId64 " is not positive", want);
      if (total >= 0) {
        lo = upper ? total / 2 : total - total / 2;
        hi = total - lo;
      } else {
        opad[o + i] -= total; /* the shape rule checks it stays below the stride */
      }
      win.pad[o + i] = lo, win.pad[m + o + i] = hi;
    }
  }
  Val *in[3] = {ox_to_2d(im, x), ox_to_2d(im, w), b};
  if (!in[0] || !in[1]) return false;
  Emit e;
  Node *c = ox_begin(im, &e, m == 3 ? OP_CONV_TRANSPOSE3D : OP_CONV_TRANSPOSE2D, b ? 3 : 2, in);
  set_window(im, c, &win, false);
  ir_set_ints(im->g, c, "output_pad", m, opad);
  ir_set_int(im->g, c, "groups", group);
  return (n->out[0] = ox_from_2d(im, ox_emit1(im, &e), win.spatial));
}

/* |x|^p, and its p-th root: LpPool's two ends. */
static Val *abs_pow(Imp *im, Val *x, double p) {
  if (p == 2) return ox_op2(im, OP_MUL, x, x);
  Val *a = ox_op1(im, OP_ABS, x);
  return p == 1 ? a : ox_op2s(im, OP_POW, a, p);
}

static Val *root(Imp *im, Val *x, double p) {
  return p == 1 ? x : p == 2 ? ox_op1(im, OP_SQRT, x) : ox_op2s(im, OP_POW, x, 1 / p);
}

/* The least value of dt: what MaxPool's padding holds. */
static double lowest(DType dt) {
  switch (dt) {
    case TY_I8: return INT8_MIN;
    case TY_I16: return INT16_MIN;
    case TY_I32: return INT32_MIN;
    case TY_I64: return (double)INT64_MIN;
    default: return ir_dtype_is_float(dt) ? -INFINITY : 0;
  }
}

/* x [N, C, spatial...] padded explicitly by win's pads with fill. */
static Val *pad_window(Imp *im, Val *x, const Window *win, double fill) {
  int r = x->type.rank, m = win->nsp;
  int64_t pads[2 * DL_MAX_RANK] = {0};
  for (int i = 0; i < m; i++) pads[2 + i] = win->pad[i], pads[r + 2 + i] = win->pad[m + i];
  Emit e;
  Node *p = ox_begin(im, &e, OP_PAD, 1, &x);
  ir_set_ints(im->g, p, "pads", 2 * r, pads);
  ir_set_float(im->g, p, "value", fill);
  return ox_emit1(im, &e);
}

static Val *pool_node(Imp *im, OpKind op, Val *x, const Window *win, int64_t ceil_mode, int64_t include_pad) {
  Emit e;
  Node *pn = ox_begin(im, &e, op, 1, &x);
  set_window(im, pn, win, true);
  ir_set_int(im->g, pn, "ceil_mode", ceil_mode != 0);
  if (op == OP_AVGPOOL2D || op == OP_AVGPOOL3D) ir_set_int(im->g, pn, "count_include_pad", include_pad != 0);
  return ox_emit1(im, &e);
}

/* A pool whose padding is more than half its kernel (which the IR's
 * pools, by PyTorch's rule, refuse): the padding made explicit, then a
 * pool without.  Max pads with the least value; an average that counts
 * the padding pads with zeros; one that does not divides the window
 * sums of x by those of ones padded the same way (a constant).  With
 * ceil_mode, a last window that starts in the right padding is dropped
 * (onnxruntime and PyTorch), which the pool without padding would keep. */
static Val *wide_pool(Imp *im, OpKind op, Val *x, Window win, int64_t ceil_mode, int64_t include_pad) {
  bool is_max = op == OP_MAXPOOL2D || op == OP_MAXPOOL3D;
  Val *xp = pad_window(im, x, &win, is_max ? lowest(x->type.dtype) : 0);
  Window inner = win;
  memset(inner.pad, 0, sizeof inner.pad);
  Val *y = pool_node(im, op, xp, &inner, ceil_mode, 1);
  if (!is_max && !include_pad && y) {
    TensorType ot = x->type;
    ot.dims[0] = ot.dims[1] = 1;
    Val *ones = ox_known_new(im, &ot);
    for (int64_t i = 0; i < ir_type_numel(&ot); i++) ir_tensor_set(ones->k, i, 1);
    Val *count = pool_node(im, op, pad_window(im, ones, &win, 0), &inner, ceil_mode, 1);
    y = ox_op2(im, OP_DIV, y, count);
  }
  for (int i = 0; i < win.nsp && y && ceil_mode; i++) {
    int64_t o = y->type.dims[2 + i];
    if ((o - 1) * win.stride[i] >= x->type.dims[2 + i] + win.pad[i]) y = ox_slice_axis(im, y, 2 + i, 0, o - 1, 1);
  }
  return y;
}

enum { MAX_INDEX_TAPS = 1024 };

/* MaxPool's Indices: for each output, the flattened position in x
 * (row-major over [N, C, spatial...]; storage_order 1: a plane's
 * positions column-major, h + w H) of the first maximum of its window.
 * Each tap's strided slice of the padded x (lowest in the padding, so
 * never the maximum: every window holds an element) stacked along a last
 * axis, its argmax the tap, the tap's position from the output's. */
static Val *pool_indices(Imp *im, Val *x2, const Window *win, const TensorType *yt, int64_t storage_order) {
  int m = win->nsp, r = 2 + m;
  int64_t taps = 1;
  for (int i = 0; i < m; i++) taps *= win->kernel[i];
  Val *xp = pad_window(im, x2, win, lowest(x2->type.dtype));
  Val **slices = ARENA_ARRAY(&im->c->arena, Val *, taps);
  int64_t ud[DL_MAX_RANK + 1];
  for (int d = 0; d < r; d++) ud[d] = yt->dims[d];
  ud[r] = 1;
  for (int64_t t = 0; t < taps; t++) {
    Val *s = xp;
    for (int i = m - 1, rest = (int)t; i >= 0; rest /= (int)win->kernel[i], i--) {
      int64_t kd = rest % win->kernel[i], start = kd * win->dil[i];
      s = ox_slice_axis(im, s, 2 + i, start, start + (yt->dims[2 + i] - 1) * win->stride[i] + 1, win->stride[i]);
    }
    slices[t] = ox_reshape(im, s, r + 1, ud);
  }
  Val *all = taps > 1 ? ox_concat(im, (int)taps, slices, r) : slices[0];
  if (!all) return NULL;
  Val *tap = ox_argmax(im, all, r, false);
  /* position along each spatial dim, then the flattened index */
  Val *flat = ox_op2(im, OP_ADD, ox_op2s(im, OP_MUL, ox_iota_along(im, r, 0, yt->dims[0]), (double)x2->type.dims[1]),
                     ox_iota_along(im, r, 1, yt->dims[1]));
  Val *pos[3] = {NULL};
  int64_t inner = taps;
  for (int i = 0; i < m; i++) {
    inner /= win->kernel[i];
    Val *kd = ox_op2s(im, OP_MOD, ox_op2s(im, OP_DIV, tap, (double)inner), (double)win->kernel[i]);
    Val *o = ox_op2s(im, OP_SUB, ox_op2s(im, OP_MUL, ox_iota_along(im, r, 2 + i, yt->dims[2 + i]), (double)win->stride[i]),
                     (double)win->pad[i]);
    pos[i] = ox_op2(im, OP_ADD, o, ox_op2s(im, OP_MUL, kd, (double)win->dil[i]));
  }
  int64_t plane = 1;
  for (int i = 0; i < m; i++) plane *= x2->type.dims[2 + i];
  Val *within = pos[0];
  if (storage_order && m == 2)
    within = ox_op2(im, OP_ADD, pos[0], ox_op2s(im, OP_MUL, pos[1], (double)x2->type.dims[2]));
  else
    for (int i = 1; i < m; i++) within = ox_op2(im, OP_ADD, ox_op2s(im, OP_MUL, within, (double)x2->type.dims[2 + i]), pos[i]);
  return ox_op2(im, OP_ADD, ox_op2s(im, OP_MUL, flat, (double)plane), within);
}

/* MaxPool, AveragePool and LpPool (the window sum of |x|^p, an average
 * counting the zero padding times the window's size, to the 1/p). */
bool ox_op_pool(Imp *im, ONode *n) {
  bool is_max = strcmp(im->np->op_type, "MaxPool") == 0, is_lp = strcmp(im->np->op_type, "LpPool") == 0;
  Val *x = ox_in_req(im, n, 0);
  int64_t ceil_mode, include_pad = 0, p = 2, storage_order = 0;
  if (!x || !ox_attr_int(im, "ceil_mode", 0, &ceil_mode)) return false;
  if (is_max && !ox_attr_int(im, "storage_order", 0, &storage_order)) return false;
  if (storage_order != 0 && storage_order != 1)
    return ox_bad(im, "storage_order=%" PRId64 " is not supported (0 or 1)", storage_order);
  bool indices = is_max && n->n_out > 1 && n->want[1];
  if (!is_max && !is_lp && !ox_attr_int(im, "count_include_pad", 0, &include_pad)) return false;
  if (is_lp) {
    if (!ox_attr_int(im, "p", 2, &p) || !ox_need_float_in(im, x)) return false;
    if (p < 1) return ox_bad(im, "p=%" PRId64 " is not supported (1 or more)", p);
    include_pad = 1;
  }
  if (indices && ceil_mode) return ox_bad(im, "the Indices output with ceil_mode=1 is not supported");
  Window win;
  if (!spatial_window(im, x, NULL, 3, &win)) return false;
  int m = win.nsp;
  bool wide = false;
  for (int i = 0; i < 2 * m; i++) {
    /* onnxruntime's rule: every window holds a real element */
    if (win.pad[i] >= win.kernel[i % m])
      return ox_bad(im, "padding %" PRId64 " is not less than the kernel %" PRId64, win.pad[i],
                    win.kernel[i % m]);
    wide = wide || win.pad[i] > win.kernel[i % m] / 2;
  }
  Val *x2 = ox_to_2d(im, is_lp ? abs_pow(im, ox_widen(im, x), (double)p) : x);
  if (!x2) return false;
  OpKind op = is_max ? (m == 3 ? OP_MAXPOOL3D : OP_MAXPOOL2D) : (m == 3 ? OP_AVGPOOL3D : OP_AVGPOOL2D);
  Val *y = wide ? wide_pool(im, op, x2, win, ceil_mode, include_pad)
                : pool_node(im, op, x2, &win, ceil_mode, include_pad);
  if (indices && y) {
    if (win.nsp == 3 && storage_order) return ox_bad(im, "storage_order=1 is supported for 2-d pools only");
    /* a slice of the input per tap: bounded, so a huge window is an
     * error rather than a graph of that many nodes */
    int64_t taps = 1;
    for (int i = 0; i < m; i++) taps *= win.kernel[i];
    if (taps > MAX_INDEX_TAPS)
      return ox_bad(im, "the Indices output of a %" PRId64 "-tap window is not supported (at most %d taps)", taps,
                    MAX_INDEX_TAPS);
    if (!(n->out[1] = ox_from_2d(im, pool_indices(im, x2, &win, &y->type, storage_order), win.spatial))) return false;
  }
  y = ox_from_2d(im, y, win.spatial);
  if (is_lp) {
    double size = 1;
    for (int i = 0; i < m; i++) size *= (double)win.kernel[i];
    y = ox_narrow(im, root(im, ox_op2s(im, OP_MUL, y, size), (double)p), x->type.dtype);
  }
  return (n->out[0] = y);
}

bool ox_op_global_pool(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  if (!x) return false;
  if (x->type.rank < 3) return ox_bad(im, "needs an input [N, C, ...] of rank >= 3");
  bool is_max = strcmp(im->np->op_type, "GlobalMaxPool") == 0;
  if (strcmp(im->np->op_type, "GlobalLpPool") == 0) {
    int64_t p, axes[DL_MAX_RANK];
    if (!ox_attr_int(im, "p", 2, &p) || !ox_need_float_in(im, x)) return false;
    if (p < 1) return ox_bad(im, "p=%" PRId64 " is not supported (1 or more)", p);
    for (int d = 2; d < x->type.rank; d++) axes[d - 2] = d;
    Val *s = ox_reduce(im, OP_REDUCE_SUM, abs_pow(im, ox_widen(im, x), (double)p), x->type.rank - 2, axes, true);
    return (n->out[0] = ox_narrow(im, root(im, s, (double)p), x->type.dtype));
  }
  if (!is_max && x->type.rank == 4) return (n->out[0] = ox_op1(im, OP_GLOBAL_AVGPOOL, x));
  int64_t axes[DL_MAX_RANK];
  int k = 0;
  for (int d = 2; d < x->type.rank; d++) axes[k++] = d;
  return (n->out[0] = ox_reduce(im, is_max ? OP_REDUCE_MAX : OP_REDUCE_MEAN, x, k, axes, true));
}

/* ---- normalizations ---- */

/* Whether a node of graph gp (or of a subgraph inside it) or one of its
 * outputs reads the ONNX value called name. */
static bool graph_reads(const Onnx__GraphProto *gp, const char *name) {
  for (size_t o = 0; o < gp->n_output; o++)
    if (gp->output[o]->name && strcmp(gp->output[o]->name, name) == 0) return true;
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    for (size_t k = 0; k < np->n_input; k++)
      if (np->input[k] && strcmp(np->input[k], name) == 0) return true;
    for (size_t a = 0; a < np->n_attribute; a++) {
      const Onnx__AttributeProto *at = np->attribute[a];
      if (at->g && graph_reads(at->g, name)) return true;
      for (size_t k = 0; k < at->n_graphs; k++)
        if (graph_reads(at->graphs[k], name)) return true;
    }
  }
  return false;
}

/* BatchNormalization: the IR's batchnorm of the running statistics; in
 * training_mode (opset 14 on) of the batch's, computed here (mean and
 * population variance over every axis but 1, as onnx's reference), the
 * op marked batch_stats (not constants: bn-fold leaves it, the gradient
 * rule differentiates them), with the running statistics moved toward
 * them by momentum as outputs 2 and 3. */
bool ox_op_batchnorm(Imp *im, ONode *n) {
  double eps, momentum;
  int64_t training;
  if (!ox_attr_float(im, "epsilon", 1e-5, &eps) || !ox_attr_float(im, "momentum", 0.9, &momentum) ||
      !ox_attr_int(im, "training_mode", 0, &training) || !ox_attr_only(im, "spatial", 1, 1) ||
      !ox_attr_only(im, "is_test", 1, 1))
    return false;
  if (training != 0 && training != 1) return ox_bad(im, "training_mode=%" PRId64 " must be 0 or 1", training);
  for (int i = 1; i < n->n_out && !training; i++)
    if (n->want[i]) return ox_bad(im, "output %d (training statistics) needs training_mode=1", i + 1);
  Val *in[5];
  for (int i = 0; i < 5; i++)
    if (!(in[i] = ox_in_req(im, n, i))) return false;
  Val *x = in[0];
  const char *running[2] = {NULL, NULL};
  if (training) {
    if (!ox_need_float_in(im, x)) return false;
    if (x->type.rank < 2) return ox_bad(im, "needs an input [N, C, ...] of rank >= 2");
    int64_t axes[DL_MAX_RANK];
    int k = 0;
    for (int d = 0; d < x->type.rank; d++)
      if (d != 1) axes[k++] = d;
    Val *w = ox_widen(im, x);
    Val *mean = ox_reduce(im, OP_REDUCE_MEAN, w, k, axes, true);
    Val *dev = ox_op2(im, OP_SUB, w, mean);
    Val *var = ox_reduce(im, OP_REDUCE_MEAN, ox_op2(im, OP_MUL, dev, dev), k, axes, false);
    int64_t c = x->type.dims[1];
    mean = ox_reshape(im, mean, 1, &c);
    Val *stat[2] = {mean, var};
    /* PyTorch's export of BatchNorm in train() drops the running
     * statistics' updates (its in-place mutation): what nothing reads of
     * outputs 2 and 3 a training step does (passes/train_mode.c), on
     * the initializers the node names. */
    bool *read = ARENA_ARRAY(&im->c->arena, bool, 3);
    for (int i = 0; i < 2; i++) {
      read[i] = n->n_out > 1 + i && n->want[1 + i] && graph_reads(im->m->graph, im->np->output[1 + i]);
      if (!read[i] && ox_is_initializer(im, in[3 + i])) {
        running[i] = in[3 + i]->name;
        ox_use(im, in[3 + i]); /* the param that holds its data, for training's update */
      }
    }
    for (int i = 0; i < 2; i++) {
      DType dt = in[3 + i]->type.dtype;
      if (n->n_out > 1 + i && n->want[1 + i]) {
        /* given whether read or not (the importer wants every named
         * output), but computed only for a reader */
        Val *moved = read[i] ? ox_op2(im, OP_ADD, ox_op2s(im, OP_MUL, ox_widen(im, in[3 + i]), momentum),
                                      ox_op2s(im, OP_MUL, stat[i], 1 - momentum))
                             : stat[i];
        if (!(n->out[1 + i] = ox_narrow(im, moved, dt))) return false;
      }
      in[3 + i] = ox_narrow(im, stat[i], dt);
    }
    if (!in[3] || !in[4]) return false;
  }
  Emit e;
  Node *b = ox_begin(im, &e, OP_BATCHNORM, 5, in);
  ir_set_float(im->g, b, "eps", eps);
  if (training) {
    ir_set_int(im->g, b, "batch_stats", 1);
    /* ONNX's momentum keeps that much of the running statistic;
     * PyTorch's (the IR's) moves that much toward the batch's */
    if (running[0] || running[1]) ir_set_float(im->g, b, "momentum", 1 - momentum);
    if (running[0]) ir_set_str(im->g, b, "running_mean", running[0]);
    if (running[1]) ir_set_str(im->g, b, "running_var", running[1]);
  }
  return (n->out[0] = ox_emit1(im, &e));
}

/* mean and 1/sqrt(var + eps) over axes, kept as size-1 dims. */
static void moments(Imp *im, Val *x, int k, const int64_t *axes, double eps, Val **mean, Val **inv) {
  *mean = ox_reduce(im, OP_REDUCE_MEAN, x, k, axes, true);
  Val *d = ox_op2(im, OP_SUB, x, *mean);
  Val *var = ox_reduce(im, OP_REDUCE_MEAN, ox_op2(im, OP_MUL, d, d), k, axes, true);
  *inv = ox_op1(im, OP_RSQRT, ox_op2s(im, OP_ADD, var, eps));
}

Val *ox_layernorm_of(Imp *im, Val *x, int axis, double eps, Val *scale, Val *bias) {
  if (!x) return NULL;
  int r = x->type.rank;
  const int64_t *tail = x->type.dims + axis;
  bool exact_scale = !scale || ox_same_dims(&scale->type, r - axis, tail);
  bool exact_bias = !bias || ox_same_dims(&bias->type, r - axis, tail);
  Val *in[3] = {x, NULL, NULL};
  int k = 1;
  if (exact_scale && exact_bias && scale) in[k++] = scale;
  if (exact_scale && exact_bias && scale && bias) in[k++] = bias;
  Emit e;
  Node *ln = ox_begin(im, &e, OP_LAYERNORM, k, in);
  ir_set_int(im->g, ln, "axis", axis);
  ir_set_float(im->g, ln, "eps", eps);
  Val *y = ox_emit1(im, &e);
  if (scale && !(exact_scale && exact_bias)) y = ox_op2(im, OP_MUL, y, scale);
  if (bias && (!exact_scale || !exact_bias || !scale)) y = ox_op2(im, OP_ADD, y, bias);
  return y;
}

bool ox_op_layernorm(Imp *im, ONode *n) {
  int64_t axis_attr;
  double eps;
  Val *x = ox_in_req(im, n, 0), *scale = ox_in_opt(n, 1), *bias = ox_in_opt(n, 2);
  if (!x || !ox_attr_int(im, "axis", -1, &axis_attr) || !ox_attr_float(im, "epsilon", 1e-5, &eps) ||
      !ox_attr_only(im, "stash_type", 1, 1) || !ox_need_float_in(im, x))
    return false;
  int axis;
  if (!ox_norm_axis(im, axis_attr, x->type.rank, &axis)) return false;
  int r = x->type.rank;
  Val *y = n->out[0] = ox_layernorm_of(im, x, axis, eps, scale, bias);
  if ((n->n_out > 1 && n->want[1]) || (n->n_out > 2 && n->want[2])) {
    int64_t axes[DL_MAX_RANK];
    for (int d = axis; d < r; d++) axes[d - axis] = d;
    moments(im, x, r - axis, axes, eps, &n->out[1], &n->out[2]);
  }
  return y != NULL;
}

Val *ox_rms_norm_of(Imp *im, Val *x, int axis, double eps, Val *scale) {
  if (!x) return NULL;
  bool exact = scale && ox_same_dims(&scale->type, x->type.rank - axis, x->type.dims + axis) &&
               scale->type.dtype == x->type.dtype;
  Val *in[2] = {x, scale};
  Emit e;
  Node *r = ox_begin(im, &e, OP_RMS_NORM, exact ? 2 : 1, in);
  ir_set_int(im->g, r, "axis", axis);
  ir_set_float(im->g, r, "eps", eps);
  Val *y = ox_emit1(im, &e);
  return scale && !exact && y ? ox_op2(im, OP_MUL, y, scale) : y;
}

/* X / sqrt(mean(X^2 over the dims from axis) + epsilon) * scale: one
 * rms_norm (ox_rms_norm_of). */
bool ox_op_rms_norm(Imp *im, ONode *n) {
  int64_t axis_attr;
  double eps;
  Val *x = ox_in_req(im, n, 0), *scale = ox_in_opt(n, 1);
  if (!x || !ox_attr_int(im, "axis", -1, &axis_attr) || !ox_attr_float(im, "epsilon", 1e-5, &eps) ||
      !ox_attr_only(im, "stash_type", 1, 1) || !ox_need_float_in(im, x))
    return false;
  int axis;
  if (!ox_norm_axis(im, axis_attr, x->type.rank, &axis)) return false;
  return (n->out[0] = ox_rms_norm_of(im, x, axis, eps, scale));
}

/* One group_norm; a scale and bias per group (opset 18) become one per
 * channel, each channel taking its group's. */
bool ox_op_group_norm(Imp *im, ONode *n) {
  int64_t groups;
  double eps;
  Val *x = ox_in_req(im, n, 0), *in[3] = {x, ox_in_req(im, n, 1), ox_in_req(im, n, 2)};
  if (!x || !in[1] || !in[2] || !ox_attr_int(im, "num_groups", 0, &groups) ||
      !ox_attr_float(im, "epsilon", 1e-5, &eps) || !ox_attr_only(im, "stash_type", 1, 1) ||
      !ox_need_float_in(im, x))
    return false;
  if (x->type.rank < 2) return ox_bad(im, "needs an input [N, C, ...] of rank >= 2");
  int64_t c = x->type.dims[1];
  if (groups < 1 || c % groups)
    return ox_bad(im, "num_groups %" PRId64 " must be >= 1 and divide the %" PRId64 " channels", groups, c);
  for (int i = 1; i < 3; i++) {
    int64_t count = ir_type_numel(&in[i]->type);
    if (count == groups && groups != c) {
      int64_t *of = arena_alloc(&im->c->arena, sizeof(int64_t) * (size_t)c);
      for (int64_t ch = 0; ch < c; ch++) of[ch] = ch / (c / groups);
      in[i] = ox_gather(im, ox_reshape(im, in[i], 1, &groups), ox_ints_val(im, (int)c, of), 0);
    } else if (count == c) {
      in[i] = ox_reshape(im, in[i], 1, &c);
    } else {
      return ox_bad(im, "%s must have one value per channel (%" PRId64 ") or per group (%" PRId64 "), got %" PRId64,
                    i == 1 ? "scale" : "bias", c, groups, count);
    }
    if (in[i] && in[i]->type.dtype != x->type.dtype) in[i] = ox_cast(im, in[i], x->type.dtype);
    if (!in[i]) return false;
  }
  Emit e;
  Node *g = ox_begin(im, &e, OP_GROUP_NORM, 3, in);
  ir_set_int(im->g, g, "groups", groups);
  ir_set_float(im->g, g, "eps", eps);
  return (n->out[0] = ox_emit1(im, &e));
}

/* x / (bias + alpha / size * sum of x^2 over the size channels around
 * each one)^beta: the window sum is an avgpool2d (which divides by size)
 * over [N, 1, C, H*W...] with a size x 1 kernel, zero-padded. */
bool ox_op_lrn(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  double alpha, beta, bias;
  int64_t size;
  if (!x || !ox_attr_float(im, "alpha", 1e-4, &alpha) || !ox_attr_float(im, "beta", 0.75, &beta) ||
      !ox_attr_float(im, "bias", 1.0, &bias) || !ox_attr_int(im, "size", 0, &size) ||
      !ox_need_float_in(im, x))
    return false;
  int r = x->type.rank;
  if (r < 2) return ox_bad(im, "the input must be [N, C, ...], got rank %d", r);
  /* Past 2C+1 the window only adds padding. */
  if (size < 1 || size > 2 * x->type.dims[1] + 1)
    return ox_bad(im, "size %" PRId64 " must be between 1 and 2C+1 = %" PRId64 " (the attribute is required)",
                  size, 2 * x->type.dims[1] + 1);
  int64_t rest = 1;
  for (int d = 2; d < r; d++) rest *= x->type.dims[d];
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  Val *sq =
      ox_reshape(im, ox_op2(im, OP_MUL, x, x), 4, (int64_t[]){x->type.dims[0], 1, x->type.dims[1], rest});
  if (!sq) return false;
  Emit e;
  Node *p = ox_begin(im, &e, OP_AVGPOOL2D, 1, &sq);
  ir_set_ints(im->g, p, "kernel", 2, (int64_t[]){size, 1});
  ir_set_ints(im->g, p, "stride", 2, (int64_t[]){1, 1});
  ir_set_ints(im->g, p, "pad", 4, (int64_t[]){lo, 0, hi, 0});
  ir_set_int(im->g, p, "count_include_pad", 1);
  Val *avg = ox_reshape(im, ox_emit1(im, &e), r, x->type.dims);
  Val *den = ox_op2s(im, OP_POW, ox_op2s(im, OP_ADD, ox_op2s(im, OP_MUL, avg, alpha), bias), beta);
  return (n->out[0] = ox_op2(im, OP_DIV, x, den));
}

bool ox_op_instancenorm(Imp *im, ONode *n) {
  double eps;
  Val *x = ox_in_req(im, n, 0), *scale = ox_in_req(im, n, 1), *bias = ox_in_req(im, n, 2);
  if (!x || !scale || !bias || !ox_attr_float(im, "epsilon", 1e-5, &eps) || !ox_need_float_in(im, x))
    return false;
  int r = x->type.rank;
  if (r < 3) return ox_bad(im, "needs an input [N, C, ...] of rank >= 3");
  int64_t axes[DL_MAX_RANK], cshape[DL_MAX_RANK];
  for (int d = 2; d < r; d++) axes[d - 2] = d;
  for (int d = 0; d < r; d++) cshape[d] = d == 1 ? x->type.dims[1] : 1;
  Val *mean, *inv;
  moments(im, x, r - 2, axes, eps, &mean, &inv);
  Val *y = ox_op2(im, OP_MUL, ox_op2(im, OP_SUB, x, mean), inv);
  y = ox_op2(im, OP_MUL, y, ox_reshape(im, scale, r, cshape));
  return (n->out[0] = ox_op2(im, OP_ADD, y, ox_reshape(im, bias, r, cshape)));
}

bool ox_op_softmax(Imp *im, ONode *n) {
  bool log_sm = strcmp(im->np->op_type, "LogSoftmax") == 0;
  int64_t axis_attr;
  Val *x = ox_in_req(im, n, 0);
  if (!x || !ox_attr_int(im, "axis", im->opset >= 13 ? -1 : 1, &axis_attr)) return false;
  int r = x->type.rank, axis;
  if (r == 0) return ox_bad(im, "a 0-d input is not supported");
  if (!ox_norm_axis(im, axis_attr, r, &axis)) return false;
  Val *x2 = x;
  /* Before opset 13 the input is seen as 2-d [outer, inner] around axis. */
  if (im->opset < 13 && axis != r - 1) {
    int64_t d[2] = {1, 1};
    for (int i = 0; i < r; i++) d[i >= axis] *= x->type.dims[i];
    x2 = ox_reshape(im, x, 2, d);
    axis = 1;
  }
  if (!x2) return false;
  Emit e;
  Node *s = ox_begin(im, &e, log_sm ? OP_LOG_SOFTMAX : OP_SOFTMAX, 1, &x2);
  ir_set_int(im->g, s, "axis", axis);
  return (n->out[0] = ox_reshape(im, ox_emit1(im, &e), r, x->type.dims));
}

/* ---- losses ---- */

/* NegativeLogLikelihoodLoss of logp [N, C, d...] at target [N, d...]:
 * -logp[n, target, d...] (a gather_elements along C), 0 where the
 * target is ignore_index, times weight[target]; reduction "none", "sum"
 * or "mean" (the sum over the weights' sum when there are weights or an
 * ignore_index, else over the count), as ONNX's reference computes it. */
static Val *nll_loss(Imp *im, Val *logp, Val *target, Val *weight, const char *reduction, bool has_ignore,
                     int64_t ignore) {
  int r = logp->type.rank;
  if (r < 2) {
    ox_bad(im, "the input must be [N, C, ...], got rank %d", r);
    return NULL;
  }
  bool dims_ok = target->type.rank == r - 1;
  for (int d = 0; dims_ok && d < r - 1; d++) dims_ok = target->type.dims[d] == logp->type.dims[d ? d + 1 : 0];
  if (!dims_ok || ir_dtype_is_float(target->type.dtype) || target->type.dtype == TY_BOOL) {
    char ts[IR_TYPE_STR_MAX], xs[IR_TYPE_STR_MAX];
    ox_bad(im, "the target must be integer [N, d...] for an input [N, C, d...]: got %s for %s",
           ir_type_str(&target->type, ts, sizeof ts), ir_type_str(&logp->type, xs, sizeof xs));
    return NULL;
  }
  if (strcmp(reduction, "none") != 0 && strcmp(reduction, "sum") != 0 && strcmp(reduction, "mean") != 0) {
    ox_bad(im, "reduction='%s' is not supported (none, sum, mean)", reduction);
    return NULL;
  }
  DType dt = logp->type.dtype;
  Val *t = ox_cast(im, target, TY_I64), *ignored = NULL;
  if (has_ignore) {
    ignored = ox_op2s(im, OP_EQUAL, t, (double)ignore);
    t = ox_where(im, ignored, ox_scalar(im, 0, TY_I64), t);
  }
  int64_t dims[DL_MAX_RANK];
  for (int d = 0; d < r; d++) dims[d] = d == 1 ? 1 : logp->type.dims[d];
  Emit e;
  Node *g = ox_begin(im, &e, OP_GATHER_ELEMENTS, 2, (Val *[]){logp, ox_reshape(im, t, r, dims)});
  ir_set_int(im->g, g, "axis", 1);
  Val *loss = ox_op1(im, OP_NEG, ox_reshape(im, ox_emit1(im, &e), r - 1, target->type.dims));
  Val *w = NULL;
  if (weight) w = ox_gather(im, weight, t, 0);
  if (ignored) {
    Val *zero = ox_scalar(im, 0, dt);
    loss = ox_where(im, ignored, zero, loss);
    w = ox_where(im, ignored, zero, w ? w : ox_scalar(im, 1, dt));
  }
  if (w) loss = ox_op2(im, OP_MUL, loss, w);
  if (strcmp(reduction, "none") == 0 || !loss) return loss;
  int64_t all[DL_MAX_RANK];
  for (int d = 0; d < r - 1; d++) all[d] = d;
  Val *sum = ox_reduce(im, OP_REDUCE_SUM, loss, r - 1, all, false);
  if (strcmp(reduction, "sum") == 0) return sum;
  if (!w) return ox_reduce(im, OP_REDUCE_MEAN, loss, r - 1, all, false);
  return ox_op2(im, OP_DIV, sum, ox_reduce(im, OP_REDUCE_SUM, w, r - 1, all, false));
}

static bool loss_attrs(Imp *im, const char **reduction, bool *has_ignore, int64_t *ignore) {
  if (!ox_attr_str(im, "reduction", "mean", reduction)) return false;
  *has_ignore = ox_find_attr(im, "ignore_index") != NULL;
  return ox_attr_int(im, "ignore_index", 0, ignore);
}

bool ox_op_nll_loss(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *t = ox_in_req(im, n, 1), *w = ox_in_opt(n, 2);
  const char *red;
  bool has_ignore;
  int64_t ignore;
  if (!x || !t || !loss_attrs(im, &red, &has_ignore, &ignore) || !ox_need_float_in(im, x)) return false;
  return (n->out[0] = nll_loss(im, x, t, w, red, has_ignore, ignore));
}

/* log_softmax over the classes, then NegativeLogLikelihoodLoss; the
 * second output is the log_softmax. */
bool ox_op_softmax_ce_loss(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0), *t = ox_in_req(im, n, 1), *w = ox_in_opt(n, 2);
  const char *red;
  bool has_ignore;
  int64_t ignore;
  if (!x || !t || !loss_attrs(im, &red, &has_ignore, &ignore) || !ox_need_float_in(im, x)) return false;
  if (x->type.rank < 2) return ox_bad(im, "the scores must be [N, C, ...], got rank %d", x->type.rank);
  Emit e;
  Node *sm = ox_begin(im, &e, OP_LOG_SOFTMAX, 1, &x);
  ir_set_int(im->g, sm, "axis", 1);
  Val *logp = ox_emit1(im, &e);
  if (!logp) return false;
  if (n->n_out > 1) n->out[1] = logp;
  return (n->out[0] = nll_loss(im, logp, t, w, red, has_ignore, ignore));
}

/* ---- reductions ---- */

bool ox_op_reduce(Imp *im, ONode *n) {
  const char *t = im->np->op_type + strlen("Reduce");
  Val *x = ox_in_req(im, n, 0);
  int64_t keep, noop;
  if (!x || !ox_attr_int(im, "keepdims", 1, &keep) || !ox_attr_int(im, "noop_with_empty_axes", 0, &noop))
    return false;
  /* Axes moved from an attribute to an input: ReduceSum at 13, the rest at 18. */
  bool from_input = im->opset >= (strcmp(t, "Sum") == 0 ? 13 : 18);
  int64_t given[64];
  int n_given = 0;
  bool have_axes = false;
  if (from_input) {
    if (ox_in_opt(n, 1)) {
      if (!ox_const_ints(im, n->in[1], "the axes", &n_given, given)) return false;
      have_axes = true;
    }
  } else {
    int na;
    const int64_t *a;
    if (!ox_attr_ints(im, "axes", &na, &a)) return false;
    if (na >= 0) {
      if (na > 64) return ox_bad(im, "too many axes");
      memcpy(given, a, sizeof(int64_t) * (size_t)na);
      n_given = na;
      have_axes = true;
    }
  }
  int r = x->type.rank, k = 0;
  int64_t axes[DL_MAX_RANK];
  if (have_axes && n_given > 0) {
    if (!ox_norm_axes(im, n_given, given, r, &k, axes)) return false;
  } else if (!noop) {
    for (int d = 0; d < r; d++) axes[k++] = d;
  }
  Val *y = x;
  bool sumsq = strcmp(t, "SumSquare") == 0, l1 = strcmp(t, "L1") == 0, l2 = strcmp(t, "L2") == 0;
  bool logsum = strcmp(t, "LogSum") == 0, lse = strcmp(t, "LogSumExp") == 0;
  if (sumsq || l2) y = ox_op2(im, OP_MUL, x, x);
  if (l1) y = ox_op1(im, OP_ABS, x);
  OpKind op = strcmp(t, "Mean") == 0   ? OP_REDUCE_MEAN
              : strcmp(t, "Max") == 0  ? OP_REDUCE_MAX
              : strcmp(t, "Min") == 0  ? OP_REDUCE_MIN
              : strcmp(t, "Prod") == 0 ? OP_REDUCE_PROD
                                       : OP_REDUCE_SUM;
  if (k == 0) {
    /* Nothing to reduce: the input (after the elementwise part). */
    if (l2) y = ox_op1(im, OP_SQRT, y);
    if (logsum) y = ox_op1(im, OP_LOG, y);
    return (n->out[0] = y);
  }
  if (lse) {
    /* log(sum(exp(x - max))) + max: no overflow for large x. */
    Val *m = ox_reduce(im, OP_REDUCE_MAX, x, k, axes, true);
    Val *s = ox_reduce(im, OP_REDUCE_SUM, ox_op1(im, OP_EXP, ox_op2(im, OP_SUB, x, m)), k, axes, keep);
    Val *mk = keep ? m : ox_reduce(im, OP_REDUCE_MAX, x, k, axes, false);
    return (n->out[0] = ox_op2(im, OP_ADD, ox_op1(im, OP_LOG, s), mk));
  }
  /* ReduceMax and ReduceMin of bools (opset 20): any and all, in f32
   * (over nothing -inf and +inf: false and true). */
  if (x->type.dtype == TY_BOOL && (op == OP_REDUCE_MAX || op == OP_REDUCE_MIN))
    return (n->out[0] = ox_op2s(im, OP_GREATER, ox_reduce(im, op, ox_cast(im, y, TY_F32), k, axes, keep), 0));
  y = ox_reduce(im, op, y, k, axes, keep);
  if (l2) y = ox_op1(im, OP_SQRT, y);
  if (logsum) y = ox_op1(im, OP_LOG, y);
  return (n->out[0] = y);
}

bool ox_op_argmax(Imp *im, ONode *n) {
  bool is_min = strcmp(im->np->op_type, "ArgMin") == 0;
  int64_t axis_attr, keep;
  Val *x = ox_in_req(im, n, 0);
  int64_t last;
  if (!x || !ox_attr_int(im, "axis", 0, &axis_attr) || !ox_attr_int(im, "keepdims", 1, &keep) ||
      !ox_attr_int(im, "select_last_index", 0, &last))
    return false;
  int axis;
  if (!ox_norm_axis(im, axis_attr, x->type.rank, &axis)) return false;
  Val *src = is_min ? ox_op1(im, OP_NEG, x) : x;
  /* The last maximum is the first one of the reversed axis. */
  if (last) src = ox_reverse_axis(im, src, axis);
  if (!src) return false;
  Emit e;
  Node *a = ox_begin(im, &e, OP_ARGMAX, 1, &src);
  ir_set_int(im->g, a, "axis", axis);
  ir_set_int(im->g, a, "keepdims", keep != 0);
  Val *y = ox_emit1(im, &e);
  if (last && y) y = ox_op2(im, OP_SUB, ox_scalar(im, (double)(x->type.dims[axis] - 1), TY_I64), y);
  return (n->out[0] = y);
}

/* 1 where the row's first maximum is, 0 elsewhere: argmax, then equal
 * to an iota along the axis.  Before opset 13 the input is seen as 2-d
 * around axis (default 1), as Softmax. */
bool ox_op_hardmax(Imp *im, ONode *n) {
  Val *x = ox_in_req(im, n, 0);
  int64_t axis_attr;
  if (!x || !ox_attr_int(im, "axis", im->opset >= 13 ? -1 : 1, &axis_attr)) return false;
  int r = x->type.rank, axis;
  if (r == 0) return ox_bad(im, "a 0-d input is not supported");
  if (!ox_norm_axis(im, axis_attr, r, &axis)) return false;
  Val *x2 = x;
  if (im->opset < 13) {
    int64_t d[2] = {1, 1};
    for (int i = 0; i < r; i++) d[i >= axis] *= x->type.dims[i];
    x2 = ox_reshape(im, x, 2, d);
    axis = 1;
  }
  if (!x2) return false;
  Emit e;
  Node *a = ox_begin(im, &e, OP_ARGMAX, 1, &x2);
  ir_set_int(im->g, a, "axis", axis);
  ir_set_int(im->g, a, "keepdims", 1);
  Val *hot =
      ox_op2(im, OP_EQUAL, ox_emit1(im, &e), ox_iota_along(im, x2->type.rank, axis, x2->type.dims[axis]));
  return (n->out[0] = ox_reshape(im, ox_cast(im, hot, x->type.dtype), r, x->type.dims));
}
