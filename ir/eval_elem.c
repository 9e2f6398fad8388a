/* The reference interpreter's elementwise ops: takes a node and its
 * operand tensors, returns its result.  Unary math and casts, quantize,
 * arithmetic and integer binaries with broadcasting, comparisons and
 * logic with bool results, where. */
#include "eval_impl.h"

/* ---- elementwise ---- */

static double hardsigmoid(double x) { return fmin(fmax(x / 6.0 + 0.5, 0.0), 1.0); }

static double unary_f(const Node *n, double x) {
  switch (n->op) {
    case OP_NEG: return -x;
    case OP_ABS: return fabs(x);
    case OP_RELU: return x > 0 ? x : (isnan(x) ? x : 0.0);
    case OP_LEAKY_RELU: return x >= 0 ? x : x * ir_attr_float(n, "alpha");
    case OP_CLIP: {
      if (isnan(x)) return x;
      double lo = ir_attr_float(n, "min"), hi = ir_attr_float(n, "max");
      return x < lo ? lo : x > hi ? hi : x;
    }
    case OP_SIGMOID: return sigmoid(x);
    case OP_TANH: return tanh(x);
    case OP_GELU:
      if (strcmp(ir_attr_str(n, "approximate"), "tanh") == 0)
        return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
      return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case OP_SILU: return x * sigmoid(x);
    case OP_HARDSIGMOID: return hardsigmoid(x);
    case OP_HARDSWISH: return x * hardsigmoid(x);
    case OP_EXP: return exp(x);
    case OP_LOG: return log(x);
    case OP_SQRT: return sqrt(x);
    case OP_RSQRT: return 1.0 / sqrt(x);
    case OP_ERF: return erf(x);
    case OP_RECIPROCAL: return 1.0 / x;
    case OP_SIN: return sin(x);
    case OP_COS: return cos(x);
    case OP_ROUND: return nearbyint(x); /* the default rounding mode: half to even */
    case OP_FLOOR: return floor(x);
    case OP_CEIL: return ceil(x);
    case OP_FP_ROUND: return ir_narrow_round(ir_narrow_find(ir_attr_str(n, "format")), x, ir_attr_int(n, "saturate"));
    case OP_SIGN: return x > 0 ? 1.0 : x < 0 ? -1.0 : x;
    case OP_TAN: return tan(x);
    case OP_ASIN: return asin(x);
    case OP_ACOS: return acos(x);
    case OP_ATAN: return atan(x);
    case OP_SINH: return sinh(x);
    case OP_COSH: return cosh(x);
    case OP_ASINH: return asinh(x);
    case OP_ACOSH: return acosh(x);
    case OP_ATANH: return atanh(x);
    default: return x; /* OP_CAST */
  }
}

bool eval_unary(Eval *e, const Node *n, const Tensor *x, Tensor *out) {
  int64_t count = numel(&out->type);
  bool ints = is_int(x) && is_int(out);
  if (n->op == OP_CAST) {
    for (int64_t i = 0; i < count; i++) {
      if (is_int(x) && !is_int(out))
        set_int_as_float(out, i, x, get_i(x, i));
      else if (is_int(x))
        set_i(out, i, get_i(x, i));
      else
        ir_tensor_set(out, i, ir_tensor_get(x, i)); /* f32 -> f16 etc. round once */
    }
    return true;
  }
  if (ints && (n->op == OP_NEG || n->op == OP_ABS || n->op == OP_RELU || n->op == OP_CLIP ||
               n->op == OP_SIGN)) {
    /* Clip keeps the integers inside [min, max]. */
    double lo = 0, hi = 0;
    if (n->op == OP_CLIP) lo = ceil(ir_attr_float(n, "min")), hi = floor(ir_attr_float(n, "max"));
    bool u = is_u64(x);
    for (int64_t i = 0; i < count; i++) {
      int64_t v = get_i(x, i), r = v;
      bool neg = !u && v < 0;
      if (n->op == OP_NEG) r = wsub(0, v);
      if (n->op == OP_ABS) r = neg ? wsub(0, v) : v;
      if (n->op == OP_RELU) r = neg ? 0 : v;
      if (n->op == OP_SIGN) r = neg ? -1 : v != 0;
      if (n->op == OP_CLIP) {
        double dv = u ? (double)(uint64_t)v : (double)v;
        if (dv < lo) r = sat_int(lo, x->type.dtype);
        if (dv > hi) r = sat_int(hi, x->type.dtype);
      }
      set_i(out, i, r);
    }
    return true;
  }
  for (int64_t i = 0; i < count; i++) ir_tensor_set(out, i, unary_f(n, ir_tensor_get(x, i)));
  return true;
}

/* The scale of element i of the result: the attribute, or the scale
 * operand broadcast into the result's shape (st: its strides there). */
static float quant_scale(const Node *n, const Tensor *scale, const int64_t *st, const TensorType *t,
                         int64_t i) {
  if (!scale) return (float)ir_attr_float(n, "scale");
  int64_t idx[DL_MAX_RANK];
  unravel(i, t, idx);
  return ((const float *)scale->data)[dot_idx(idx, st, t->rank)];
}

/* In f32 throughout, as the kernels compute it: one rounding for the
 * division, then to nearest even, so that both agree bit for bit.  The
 * code is saturated to [lo, hi] (ir_quant_range). */
static int quantize_one(float x, float s, int zp, int lo, int hi) {
  float q = x / s;
  if (isnan(q)) return zp;
  /* Clamped before the zero point is added, so no float is ever
   * converted out of int's range. */
  q = nearbyintf(q);
  float l = (float)(lo - zp), h = (float)(hi - zp);
  return (int)(q < l ? l : q > h ? h : q) + zp;
}

bool eval_quant(const Node *n, const Tensor *x, const Tensor *scale, Tensor *out) {
  int64_t count = numel(&out->type), st[DL_MAX_RANK] = {0};
  if (scale) bcast_strides(&scale->type, &out->type, st);
  int zp = zero_point(n), lo = 0, hi = 0;
  if (n->op == OP_QUANTIZE) ir_quant_range(n, &lo, &hi);
  for (int64_t i = 0; i < count; i++) {
    float s = quant_scale(n, scale, st, &out->type, i);
    if (n->op == OP_QUANTIZE)
      set_i(out, i, quantize_one((float)ir_tensor_get(x, i), s, zp, lo, hi));
    else
      ((float *)out->data)[i] = (float)(get_i(x, i) - zp) * s;
  }
  return true;
}

/* Python's float %: fmod, moved into b's sign (a zero takes b's sign). */
static double float_mod(double a, double b, bool c_fmod) {
  double r = fmod(a, b);
  if (c_fmod) return r;
  if (r != 0) return (r < 0) != (b < 0) ? r + b : r;
  return copysign(0.0, b);
}

/* The integer remainder, b != 0: a's sign (C's %) or b's (Python's). */
static int64_t int_mod(int64_t a, int64_t b, bool c_fmod) {
  int64_t r = b == -1 ? 0 : a % b; /* INT64_MIN % -1 overflows in C */
  if (!c_fmod && r != 0 && (r < 0) != (b < 0)) r += b;
  return r;
}

/* Integer a ** b: exact modulo 2^64 for b >= 0; b < 0 is 1 / a^-b. */
static bool ipow(int64_t a, int64_t b, int64_t *r) {
  if (b < 0) {
    if (a == 0) return false;
    *r = a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    return true;
  }
  int64_t acc = 1;
  while (b) {
    if (b & 1) acc = wmul(acc, a);
    a = wmul(a, a);
    b >>= 1;
  }
  *r = acc;
  return true;
}

bool eval_binary(Eval *e, const Node *n, const Tensor *a, const Tensor *b, Tensor *out) {
  const TensorType *ot = &out->type;
  int64_t sa[DL_MAX_RANK], sb[DL_MAX_RANK], idx[DL_MAX_RANK];
  bcast_strides(&a->type, ot, sa);
  bcast_strides(&b->type, ot, sb);
  int64_t count = numel(ot);
  bool ints = is_int(a) && is_int(b) && is_int(out);
  bool c_fmod = n->op == OP_MOD && ir_attr_int(n, "fmod");
  for (int64_t i = 0; i < count; i++) {
    unravel(i, ot, idx);
    int64_t ia = dot_idx(idx, sa, ot->rank), ib = dot_idx(idx, sb, ot->rank);
    if (!ints) {
      double x = ir_tensor_get(a, ia), y = ir_tensor_get(b, ib);
      ir_tensor_set(out, i, n->op == OP_MOD ? float_mod(x, y, c_fmod) : binary_f(n->op, x, y));
      continue;
    }
    int64_t x = get_i(a, ia), y = get_i(b, ib), r = 0;
    if (is_u64(out)) {
      uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
      bool by_zero = (n->op == OP_DIV || n->op == OP_MOD) && uy == 0;
      if (by_zero) return fail(e, "integer division by zero");
      if (n->op == OP_DIV) r = (int64_t)(ux / uy);
      else if (n->op == OP_MOD) r = (int64_t)(ux % uy);
      else if (n->op == OP_MAXIMUM) r = ux > uy ? x : y;
      else if (n->op == OP_MINIMUM) r = ux < uy ? x : y;
      else if (n->op == OP_LT || n->op == OP_LE || n->op == OP_GT || n->op == OP_GE)
        r = n->op == OP_LT ? ux < uy : n->op == OP_LE ? ux <= uy : n->op == OP_GT ? ux > uy : ux >= uy;
      else if (n->op == OP_POW && (int64_t)uy < 0)
        return fail(e, "u64 exponent %" PRIu64 " is not supported", uy);
      else if ((n->op == OP_SHL || n->op == OP_SHR) && uy >= 64)
        r = 0;
      else
        goto signed_op;
      set_i(out, i, r);
      continue;
    }
  signed_op:
    switch (n->op) {
      case OP_BIT_AND: r = x & y; break;
      case OP_BIT_OR: r = x | y; break;
      case OP_BIT_XOR: r = x ^ y; break;
      case OP_SHL:
      case OP_SHR: { /* x: the value of a signed a, the bits of an unsigned one */
        int64_t bits = ir_dtype_size(out->type.dtype) * 8;
        bool sgn = out->type.dtype == TY_I8 || out->type.dtype == TY_I16 || out->type.dtype == TY_I32 ||
                   out->type.dtype == TY_I64;
        uint64_t ux = (uint64_t)x;
        if (!sgn && bits < 64) ux &= ((uint64_t)1 << bits) - 1;
        if (y < 0 || y >= bits)
          r = n->op == OP_SHR && sgn && x < 0 ? -1 : 0;
        else if (n->op == OP_SHL)
          r = (int64_t)(ux << y); /* set_i wraps it to the width */
        else
          r = sgn ? (x < 0 ? ~(~x >> y) : x >> y) : (int64_t)(ux >> y);
        break;
      }
      case OP_ADD: r = wadd(x, y); break;
      case OP_SUB: r = wsub(x, y); break;
      case OP_MUL: r = wmul(x, y); break;
      case OP_DIV:
        if (y == 0) return fail(e, "integer division by zero");
        r = (y == -1) ? wsub(0, x) : x / y; /* INT64_MIN / -1 wraps */
        break;
      case OP_POW:
        if (!ipow(x, y, &r)) return fail(e, "integer division by zero (0 to a negative power)");
        break;
      case OP_MOD:
        if (y == 0) return fail(e, "integer division by zero (a remainder of division by 0)");
        r = int_mod(x, y, c_fmod);
        break;
      case OP_MAXIMUM: r = x > y ? x : y; break;
      case OP_MINIMUM: r = x < y ? x : y; break;
      case OP_EQ: r = x == y; break;
      case OP_NE: r = x != y; break;
      case OP_LT: r = x < y; break;
      case OP_LE: r = x <= y; break;
      case OP_GT: r = x > y; break;
      case OP_GE: r = x >= y; break;
      default: break;
    }
    set_i(out, i, r);
  }
  return true;
}

/* ---- bool results ---- */

/* In double for floats (exact for every float dtype), in int64 for the
 * integers and bools: IEEE's rules, so a NaN is unequal to everything. */
static bool compare(OpKind op, const Tensor *a, int64_t ia, const Tensor *b, int64_t ib) {
  if (!is_int(a)) {
    double x = ir_tensor_get(a, ia), y = ir_tensor_get(b, ib);
    switch (op) {
      case OP_EQUAL: return x == y;
      case OP_NOT_EQUAL: return x != y;
      case OP_LESS: return x < y;
      case OP_LESS_EQUAL: return x <= y;
      case OP_GREATER: return x > y;
      default: return x >= y;
    }
  }
  int64_t x = get_i(a, ia), y = get_i(b, ib);
  switch (op) {
    case OP_EQUAL: return x == y;
    case OP_NOT_EQUAL: return x != y;
    case OP_LESS: return int_less(a, x, y);
    case OP_LESS_EQUAL: return !int_less(a, y, x);
    case OP_GREATER: return int_less(a, y, x);
    default: return !int_less(a, x, y);
  }
}

static bool logic(OpKind op, bool x, bool y) {
  switch (op) {
    case OP_LOGICAL_AND: return x && y;
    case OP_LOGICAL_OR: return x || y;
    default: return x != y; /* OP_LOGICAL_XOR */
  }
}

/* The comparisons and binary logic, operands broadcast into out. */
bool eval_bool_binary(const Node *n, const Tensor *a, const Tensor *b, Tensor *out) {
  const TensorType *ot = &out->type;
  int64_t sa[DL_MAX_RANK], sb[DL_MAX_RANK], idx[DL_MAX_RANK];
  bcast_strides(&a->type, ot, sa);
  bcast_strides(&b->type, ot, sb);
  bool logical = n->op == OP_LOGICAL_AND || n->op == OP_LOGICAL_OR || n->op == OP_LOGICAL_XOR;
  uint8_t *r = out->data;
  for (int64_t i = 0, count = numel(ot); i < count; i++) {
    unravel(i, ot, idx);
    int64_t ia = dot_idx(idx, sa, ot->rank), ib = dot_idx(idx, sb, ot->rank);
    r[i] = logical ? logic(n->op, get_i(a, ia) != 0, get_i(b, ib) != 0) : compare(n->op, a, ia, b, ib);
  }
  return true;
}

/* logical_not, isnan, isinf: one operand of out's shape. */
bool eval_bool_unary(const Node *n, const Tensor *x, Tensor *out) {
  uint8_t *r = out->data;
  for (int64_t i = 0, count = numel(&out->type); i < count; i++) {
    double v = ir_tensor_get(x, i);
    r[i] = n->op == OP_LOGICAL_NOT ? v == 0 : n->op == OP_ISNAN ? isnan(v) != 0 : isinf(v) != 0;
  }
  return true;
}

/* Each element copied from a or b as cond says, all three broadcast. */
bool eval_where(const Tensor *cond, const Tensor *a, const Tensor *b, Tensor *out) {
  const TensorType *ot = &out->type;
  int64_t sc[DL_MAX_RANK], sa[DL_MAX_RANK], sb[DL_MAX_RANK], idx[DL_MAX_RANK];
  bcast_strides(&cond->type, ot, sc);
  bcast_strides(&a->type, ot, sa);
  bcast_strides(&b->type, ot, sb);
  for (int64_t i = 0, count = numel(ot); i < count; i++) {
    unravel(i, ot, idx);
    bool pick_a = ((const uint8_t *)cond->data)[dot_idx(idx, sc, ot->rank)] != 0;
    if (pick_a)
      copy_elem(out, i, a, dot_idx(idx, sa, ot->rank));
    else
      copy_elem(out, i, b, dot_idx(idx, sb, ot->rank));
  }
  return true;
}
