/* The gradient rules (grad.h): for each op of ops.def, the nodes of its
 * vector-Jacobian product, built from existing ops wherever they serve.
 * Formulas are PyTorch's (its derivatives.yaml), ties and edges
 * included: relu passes where its result is positive, maximum splits a
 * tie in half, clip passes at its bounds, amax shares among equal
 * maxima.  Each rule builds only the gradients asked for, and reads the
 * forward values it needs (the result where that is cheaper to keep,
 * as tanh's and softmax's). */
#include "grad.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* ---- builders ---- */

static Value *finish(Graph *g, Node *n) {
  char err[256];
  if (!ir_fill_defaults(g, n, err, sizeof err) || !ir_infer(n, err, sizeof err))
    dl_internal(g->ctx, "a gradient node %s: %s", ir_ops[n->op].name, err);
  ir_append(g, n);
  return &n->out[0];
}

Value *ir_grad_node(Graph *g, Node *n) { return finish(g, n); }

Value *ir_grad_op(Graph *g, SrcLoc loc, OpKind op, int n_in, Value *const *in) {
  return finish(g, ir_node_new(g, op, n_in, in, loc));
}

Value *ir_grad_op2(Graph *g, SrcLoc loc, OpKind op, Value *a, Value *b) {
  Value *in[2] = {a, b};
  return ir_grad_op(g, loc, op, 2, in);
}

Value *ir_grad_scalar(Graph *g, SrcLoc loc, double v, DType dt) { return &ir_const(g, v, dt, loc)->out[0]; }

static Value *ints_op(Graph *g, SrcLoc loc, OpKind op, Value *x, const char *name, int count,
                      const int64_t *v) {
  Node *n = ir_node_new(g, op, 1, &x, loc);
  ir_set_ints(g, n, name, count, v);
  return finish(g, n);
}

Value *ir_grad_reshape(Graph *g, SrcLoc loc, Value *x, int rank, const int64_t *dims) {
  TensorType t = ir_type_make(x->type.dtype, rank, dims);
  if (ir_type_eq(&t, &x->type)) return x;
  return ints_op(g, loc, OP_RESHAPE, x, "shape", rank, dims);
}

static Value *reduce(Graph *g, SrcLoc loc, OpKind op, Value *x, int n_axes, const int64_t *axes,
                     bool keepdims) {
  if (n_axes == 0) return x;
  Node *n = ir_node_new(g, op, 1, &x, loc);
  ir_set_ints(g, n, "axes", n_axes, axes);
  ir_set_int(g, n, "keepdims", keepdims);
  return finish(g, n);
}

Value *ir_grad_sum(Graph *g, SrcLoc loc, Value *x, int n_axes, const int64_t *axes, bool keepdims) {
  return reduce(g, loc, OP_REDUCE_SUM, x, n_axes, axes, keepdims);
}

Value *ir_grad_mean(Graph *g, SrcLoc loc, Value *x, int n_axes, const int64_t *axes, bool keepdims) {
  return reduce(g, loc, OP_REDUCE_MEAN, x, n_axes, axes, keepdims);
}

/* Shorthands over the call's graph and location. */
static Value *op1(GradCall *c, OpKind op, Value *a) { return ir_grad_op(c->g, c->n->loc, op, 1, &a); }
static Value *op2(GradCall *c, OpKind op, Value *a, Value *b) {
  return ir_grad_op2(c->g, c->n->loc, op, a, b);
}
static Value *num(GradCall *c, double v, const Value *like) {
  return ir_grad_scalar(c->g, c->n->loc, v, like->type.dtype);
}
static Value *add(GradCall *c, Value *a, Value *b) { return op2(c, OP_ADD, a, b); }
static Value *sub(GradCall *c, Value *a, Value *b) { return op2(c, OP_SUB, a, b); }
static Value *mul(GradCall *c, Value *a, Value *b) { return op2(c, OP_MUL, a, b); }
static Value *dvd(GradCall *c, Value *a, Value *b) { return op2(c, OP_DIV, a, b); }
static Value *mulk(GradCall *c, Value *a, double v) { return mul(c, a, num(c, v, a)); }
static Value *addk(GradCall *c, Value *a, double v) { return add(c, a, num(c, v, a)); }
/* 1 where the comparison holds, 0 where not, in a's dtype. */
static Value *cmpk(GradCall *c, OpKind op, Value *a, double v) { return op2(c, op, a, num(c, v, a)); }
static Value *reshape(GradCall *c, Value *x, const TensorType *t) {
  return ir_grad_reshape(c->g, c->n->loc, x, t->rank, t->dims);
}
static Value *sum(GradCall *c, Value *x, int n_axes, const int64_t *axes, bool keepdims) {
  return ir_grad_sum(c->g, c->n->loc, x, n_axes, axes, keepdims);
}

static Value *where(GradCall *c, Value *cond, Value *a, Value *b) {
  Value *in[3] = {cond, a, b};
  return ir_grad_op(c->g, c->n->loc, OP_WHERE, 3, in);
}

static Value *transpose(GradCall *c, Value *x, const int64_t *perm) {
  return ints_op(c->g, c->n->loc, OP_TRANSPOSE, x, "perm", x->type.rank, perm);
}

/* dst gets each attribute of src that its own schema has. */
static void copy_attrs(Graph *g, Node *dst, const Node *src) {
  for (int i = 0; i < src->n_attrs; i++) {
    const Attr *a = &src->attrs[i];
    if (!ir_op_attr_spec(dst->op, a->name)) continue;
    switch (a->kind) {
      case AK_INT: ir_set_int(g, dst, a->name, a->i); break;
      case AK_FLOAT: ir_set_float(g, dst, a->name, a->f); break;
      case AK_INTS: ir_set_ints(g, dst, a->name, a->ints.n, a->ints.v); break;
      case AK_STR: ir_set_str(g, dst, a->name, a->s); break;
      case AK_DTYPE: ir_set_dtype(g, dst, a->name, a->dt); break;
    }
  }
}

/* A node of op over in with the forward node's attributes (those op
 * has); the caller sets the rest and finishes it. */
static Node *like(GradCall *c, OpKind op, int n_in, Value *const *in) {
  Node *n = ir_node_new(c->g, op, n_in, in, c->n->loc);
  copy_attrs(c->g, n, c->n);
  return n;
}

/* The gradient of a value broadcast to g's shape: summed over the axes
 * broadcasting added or stretched, in the value's type. */
static Value *unbroadcast(GradCall *c, Value *g, const TensorType *to) {
  int lead = g->type.rank - to->rank, n = 0;
  int64_t axes[DL_MAX_RANK];
  for (int d = 0; d < g->type.rank; d++)
    if (d < lead || (to->dims[d - lead] == 1 && g->type.dims[d] != 1)) axes[n++] = d;
  return reshape(c, sum(c, g, n, axes, true), to);
}

static Value *operand_grad(GradCall *c, int i, Value *g) {
  return unbroadcast(c, g, &c->n->in[i]->type);
}

/* Every axis of t but `keep` (-1: none). */
static int all_axes_but(const TensorType *t, int keep, int64_t *axes) {
  int n = 0;
  for (int d = 0; d < t->rank; d++)
    if (d != keep) axes[n++] = d;
  return n;
}

/* ---- elementwise ---- */

static Value *in0(GradCall *c) { return c->n->in[0]; }
static Value *out0(GradCall *c) { return (Value *)&c->n->out[0]; }

/* dx = dy * f'(x) for the one-operand ops. */
static Value *derivative(GradCall *c) {
  Value *x = in0(c), *y = out0(c);
  switch (c->n->op) {
    case OP_ABS: return op1(c, OP_SIGN, x);
    case OP_RELU: return cmpk(c, OP_GT, y, 0);
    case OP_LEAKY_RELU: {
      double a = ir_attr_float(c->n, "alpha");
      return addk(c, mulk(c, cmpk(c, OP_GT, x, 0), 1 - a), a);
    }
    case OP_CLIP:
      return mul(c, cmpk(c, OP_GE, x, ir_attr_float(c->n, "min")), cmpk(c, OP_LE, x, ir_attr_float(c->n, "max")));
    case OP_SIGMOID: return mul(c, y, sub(c, num(c, 1, y), y));
    case OP_TANH: return sub(c, num(c, 1, y), mul(c, y, y));
    case OP_GELU: {
      if (strcmp(ir_attr_str(c->n, "approximate"), "tanh") == 0) {
        /* PyTorch's GeluBackward for tanh: beta = sqrt(2/pi), kappa = 0.044715. */
        double beta = sqrt(2.0 / M_PI), kappa = 0.044715;
        Value *x2 = mul(c, x, x);
        Value *inner = mulk(c, add(c, x, mulk(c, mul(c, x2, x), kappa)), beta);
        Value *t = op1(c, OP_TANH, inner);
        Value *left = mulk(c, addk(c, t, 1), 0.5);
        Value *sech2 = sub(c, num(c, 1, t), mul(c, t, t));
        Value *right = mul(c, mul(c, mulk(c, x, 0.5), sech2), mulk(c, addk(c, mulk(c, x2, 3 * kappa), 1), beta));
        return add(c, left, right);
      }
      /* Phi(x) + x phi(x) */
      Value *cdf = mulk(c, addk(c, op1(c, OP_ERF, mulk(c, x, M_SQRT1_2)), 1), 0.5);
      Value *pdf = mulk(c, op1(c, OP_EXP, mulk(c, mul(c, x, x), -0.5)), 1 / sqrt(2 * M_PI));
      return add(c, cdf, mul(c, x, pdf));
    }
    case OP_SILU: {
      Value *s = op1(c, OP_SIGMOID, x);
      return mul(c, s, addk(c, mul(c, x, sub(c, num(c, 1, s), s)), 1));
    }
    case OP_HARDSIGMOID: return mulk(c, mul(c, cmpk(c, OP_GT, x, -3), cmpk(c, OP_LT, x, 3)), 1.0 / 6);
    case OP_HARDSWISH: {
      Value *mid = mul(c, cmpk(c, OP_GE, x, -3), cmpk(c, OP_LE, x, 3));
      return add(c, mul(c, mid, addk(c, mulk(c, x, 1.0 / 3), 0.5)), cmpk(c, OP_GT, x, 3));
    }
    case OP_EXP: return y;
    case OP_LOG: return op1(c, OP_RECIPROCAL, x);
    case OP_SQRT: return op1(c, OP_RECIPROCAL, mulk(c, y, 2));
    case OP_RSQRT: return mulk(c, mul(c, mul(c, y, y), y), -0.5);
    case OP_ERF: return mulk(c, op1(c, OP_EXP, mulk(c, mul(c, x, x), -1)), M_2_SQRTPI);
    case OP_RECIPROCAL: return op1(c, OP_NEG, mul(c, y, y));
    case OP_SIN: return op1(c, OP_COS, x);
    case OP_COS: return op1(c, OP_NEG, op1(c, OP_SIN, x));
    case OP_TAN: return addk(c, mul(c, y, y), 1);
    case OP_ASIN: return op1(c, OP_RSQRT, sub(c, num(c, 1, x), mul(c, x, x)));
    case OP_ACOS: return op1(c, OP_NEG, op1(c, OP_RSQRT, sub(c, num(c, 1, x), mul(c, x, x))));
    case OP_ATAN: return op1(c, OP_RECIPROCAL, addk(c, mul(c, x, x), 1));
    case OP_SINH: return op1(c, OP_COSH, x);
    case OP_COSH: return op1(c, OP_SINH, x);
    case OP_ASINH: return op1(c, OP_RSQRT, addk(c, mul(c, x, x), 1));
    case OP_ACOSH: return op1(c, OP_RSQRT, addk(c, mul(c, x, x), -1));
    case OP_ATANH: return op1(c, OP_RECIPROCAL, sub(c, num(c, 1, x), mul(c, x, x)));
    default: dl_internal(c->g->ctx, "no derivative for %s", ir_ops[c->n->op].name);
  }
  return NULL;
}

static void vjp_unary(GradCall *c) { c->dx[0] = mul(c, c->dy[0], derivative(c)); }

static void vjp_neg(GradCall *c) { c->dx[0] = op1(c, OP_NEG, c->dy[0]); }

/* y = (1/K) sum_k x_k with every rank's loss L_j a function of y: rank
 * k's share of the gradient of the ranks' mean loss (K times its part,
 * as every gradient before the optimizer's all-reduce) is the mean over
 * the ranks of dL_j/dy (--sync-bn's backward, docs/parallel.md). */
static void vjp_allreduce_mean(GradCall *c) { c->dx[0] = op1(c, OP_ALLREDUCE_MEAN, c->dy[0]); }
/* Megatron's f and g: each is the other's transpose. */
static void vjp_tp_copy(GradCall *c) { c->dx[0] = op1(c, OP_ALLREDUCE_SUM, c->dy[0]); }
static void vjp_allreduce_sum(GradCall *c) { c->dx[0] = c->dy[0]; }

static void vjp_cast(GradCall *c) {
  Node *n = ir_node_new(c->g, OP_CAST, 1, &c->dy[0], c->n->loc);
  ir_set_dtype(c->g, n, "to", in0(c)->type.dtype);
  c->dx[0] = finish(c->g, n);
}

static void vjp_add(GradCall *c) {
  for (int i = 0; i < 2; i++)
    if (c->need[i])
      c->dx[i] = operand_grad(c, i, i && c->n->op == OP_SUB ? op1(c, OP_NEG, c->dy[0]) : c->dy[0]);
}

static void vjp_mul(GradCall *c) {
  for (int i = 0; i < 2; i++)
    if (c->need[i]) c->dx[i] = operand_grad(c, i, mul(c, c->dy[0], c->n->in[1 - i]));
}

static void vjp_div(GradCall *c) {
  Value *b = c->n->in[1], *dy = c->dy[0];
  if (c->need[0]) c->dx[0] = operand_grad(c, 0, dvd(c, dy, b));
  if (c->need[1]) c->dx[1] = operand_grad(c, 1, op1(c, OP_NEG, dvd(c, mul(c, dy, out0(c)), b)));
}

/* a - q * b with q = floor(a / b), or with fmod trunc(a / b): q is flat
 * almost everywhere, so da = dy and db = -q * dy (PyTorch's remainder
 * and fmod). */
static void vjp_mod(GradCall *c) {
  Value *a = c->n->in[0], *b = c->n->in[1], *dy = c->dy[0];
  if (c->need[0]) c->dx[0] = operand_grad(c, 0, dy);
  if (!c->need[1]) return;
  Value *q = dvd(c, a, b);
  if (ir_attr_int(c->n, "fmod")) q = mul(c, op1(c, OP_SIGN, q), op1(c, OP_FLOOR, op1(c, OP_ABS, q)));
  else q = op1(c, OP_FLOOR, q);
  c->dx[1] = operand_grad(c, 1, op1(c, OP_NEG, mul(c, dy, q)));
}

/* bool: x op v, for where's conditions. */
static Value *test(GradCall *c, OpKind op, Value *x, double v) { return op2(c, op, x, num(c, v, x)); }

static void vjp_pow(GradCall *c) {
  Value *a = c->n->in[0], *b = c->n->in[1], *dy = c->dy[0], *y = out0(c);
  if (c->need[0]) {
    /* b * a^(b - 1), and 0 where b is 0 (no 0 * inf at a = 0). */
    Value *d = mul(c, b, op2(c, OP_POW, a, addk(c, b, -1)));
    Value *dz = mul(c, dy, where(c, test(c, OP_EQUAL, b, 0), num(c, 0, dy), d));
    c->dx[0] = operand_grad(c, 0, dz);
  }
  if (c->need[1]) {
    /* y * log(a), and 0 where a is 0 and b >= 0. */
    Value *edge = op2(c, OP_LOGICAL_AND, test(c, OP_EQUAL, a, 0), test(c, OP_GREATER_EQUAL, b, 0));
    Value *d = where(c, edge, num(c, 0, y), mul(c, y, op1(c, OP_LOG, a)));
    c->dx[1] = operand_grad(c, 1, mul(c, dy, d));
  }
}

/* maximum and minimum: the winner takes dy, a tie splits it in half. */
static void vjp_extremum(GradCall *c) {
  Value *a = c->n->in[0], *b = c->n->in[1];
  OpKind wins = c->n->op == OP_MAXIMUM ? OP_GT : OP_LT;
  Value *half = mulk(c, op2(c, OP_EQ, a, b), 0.5);
  for (int i = 0; i < 2; i++) {
    if (!c->need[i]) continue;
    Value *mask = add(c, op2(c, wins, c->n->in[i], c->n->in[1 - i]), half);
    c->dx[i] = operand_grad(c, i, mul(c, c->dy[0], mask));
  }
}

static void vjp_where(GradCall *c) {
  Value *cond = c->n->in[0], *dy = c->dy[0], *zero = num(c, 0, dy);
  if (c->need[1]) c->dx[1] = operand_grad(c, 1, where(c, cond, dy, zero));
  if (c->need[2]) c->dx[2] = operand_grad(c, 2, where(c, cond, zero, dy));
}

/* ---- reductions and normalizations ---- */

/* v (a reduction's result) with the reduced axes of x as size 1. */
static Value *keep_dims(GradCall *c, Value *v) {
  const Node *n = c->n;
  TensorType t = in0(c)->type;
  int count;
  const int64_t *axes = ir_attr_ints(n, "axes", &count);
  for (int i = 0; i < count; i++) t.dims[axes[i]] = 1;
  t.dtype = v->type.dtype;
  return reshape(c, v, &t);
}

static Value *expand_to(GradCall *c, Value *v, const TensorType *t) {
  if (ir_type_eq(&v->type, t)) return v;
  return ints_op(c->g, c->n->loc, OP_EXPAND, v, "shape", t->rank, t->dims);
}

/* Per element of x, the product of the others in its reduction: with
 * no zero there the product over x, with one zero the product of the
 * rest where the zero is (0 elsewhere), with two or more 0.  No division
 * by a zero, so no 0 * inf (PyTorch's prod_backward does the same). */
static Value *prod_of_others(GradCall *c, Value *x) {
  int n_axes;
  const int64_t *axes = ir_attr_ints(c->n, "axes", &n_axes);
  Value *zero = cmpk(c, OP_EQ, x, 0), *nonzero = add(c, x, zero);
  Value *zeros = sum(c, zero, n_axes, axes, true);
  Node *pn = ir_node_new(c->g, OP_REDUCE_PROD, 1, &nonzero, c->n->loc);
  ir_set_ints(c->g, pn, "axes", n_axes, axes);
  ir_set_int(c->g, pn, "keepdims", 1);
  Value *p = finish(c->g, pn);
  Value *none = mul(c, cmpk(c, OP_EQ, zeros, 0), dvd(c, p, nonzero));
  return add(c, none, mul(c, mul(c, cmpk(c, OP_EQ, zeros, 1), zero), p));
}

static void vjp_reduce(GradCall *c) {
  Value *x = in0(c), *dy = keep_dims(c, c->dy[0]);
  int64_t count = ir_type_numel(&x->type) / ir_type_numel(&out0(c)->type);
  switch (c->n->op) {
    case OP_REDUCE_SUM: c->dx[0] = expand_to(c, dy, &x->type); return;
    case OP_REDUCE_MEAN: c->dx[0] = expand_to(c, mulk(c, dy, 1.0 / (double)count), &x->type); return;
    case OP_REDUCE_PROD: c->dx[0] = mul(c, dy, prod_of_others(c, x)); return;
    default: {
      /* amax/amin: shared among the elements equal to the extremum. */
      int n_axes;
      const int64_t *axes = ir_attr_ints(c->n, "axes", &n_axes);
      Value *mask = op2(c, OP_EQ, x, keep_dims(c, out0(c)));
      Value *ties = sum(c, mask, n_axes, axes, true);
      c->dx[0] = mul(c, mask, dvd(c, dy, ties));
    }
  }
}

static int64_t axis_of(const Node *n, const TensorType *t) {
  int64_t a = ir_attr_int(n, "axis");
  return a < 0 ? a + t->rank : a;
}

static void vjp_softmax(GradCall *c) {
  Value *y = out0(c), *dy = c->dy[0];
  int64_t axis = axis_of(c->n, &y->type);
  if (c->n->op == OP_SOFTMAX)
    c->dx[0] = mul(c, y, sub(c, dy, sum(c, mul(c, dy, y), 1, &axis, true)));
  else
    c->dx[0] = sub(c, dy, mul(c, op1(c, OP_EXP, y), sum(c, dy, 1, &axis, true)));
}

/* softmax_xent: its own gradient op, one row kernel (the targets carry
 * none).  A dy that is one value spread over the rows (a mean's or a
 * sum's gradient) is passed as that value, which the op broadcasts, so
 * the spread is no kernel. */
static void vjp_xent(GradCall *c) {
  Value *dy = c->dy[0];
  while ((dy->def->op == OP_EXPAND || dy->def->op == OP_RESHAPE) && ir_type_numel(&dy->def->in[0]->type) == 1)
    dy = dy->def->in[0];
  Node *n = like(c, OP_XENT_GRAD, 3, (Value *[]){in0(c), c->n->in[1], dy});
  c->dx[0] = finish(c->g, n);
}

/* layernorm over the axes from `axis` on, with x^ = (x - mean) / sqrt(var + eps):
 *   dx = (g - mean(g) - x^ mean(g x^)) / sqrt(var + eps), g = dy * weight,
 *   dweight = sum of dy x^ over the leading axes, dbias = sum of dy. */
/* x normalized over its axes norm: xhat = (x - mean) * inv, or with
 * centred false (rms_norm) x * inv, inv = rsqrt(mean(xc^2) + eps). */
typedef struct Normed {
  Value *xhat, *inv;
} Normed;

static Normed normalize(GradCall *c, Value *x, int n_norm, const int64_t *norm, bool centred) {
  Graph *g = c->g;
  SrcLoc at = c->n->loc;
  Value *xc = centred ? sub(c, x, ir_grad_mean(g, at, x, n_norm, norm, true)) : x;
  Value *var = ir_grad_mean(g, at, mul(c, xc, xc), n_norm, norm, true);
  Value *inv = op1(c, OP_RSQRT, addk(c, var, ir_attr_float(c->n, "eps")));
  return (Normed){mul(c, xc, inv), inv};
}

/* The gradient at x from gr, the gradient at xhat: the mean's and the
 * variance's dependence on every element of the row taken out. */
static Value *normalize_back(GradCall *c, Normed nm, Value *gr, int n_norm, const int64_t *norm, bool centred) {
  Graph *g = c->g;
  SrcLoc at = c->n->loc;
  Value *m2 = ir_grad_mean(g, at, mul(c, gr, nm.xhat), n_norm, norm, true);
  Value *t = sub(c, gr, mul(c, nm.xhat, m2));
  if (centred) t = sub(c, t, ir_grad_mean(g, at, gr, n_norm, norm, true));
  return mul(c, t, nm.inv);
}

/* layernorm and rms_norm: over the axes from axis on, a weight (and for
 * layernorm a bias) per element of that trailing shape. */
static void vjp_layernorm(GradCall *c) {
  Value *x = in0(c), *dy = c->dy[0];
  int rank = x->type.rank;
  int64_t axis = axis_of(c->n, &x->type), norm[DL_MAX_RANK], lead[DL_MAX_RANK];
  int n_norm = 0, n_lead = 0;
  for (int d = 0; d < rank; d++) {
    if (d < axis) lead[n_lead++] = d;
    else norm[n_norm++] = d;
  }
  bool centred = c->n->op == OP_LAYERNORM;
  Normed nm = normalize(c, x, n_norm, norm, centred);
  Value *const *in = c->n->in;
  if (c->need[0]) c->dx[0] = normalize_back(c, nm, c->n->n_in > 1 ? mul(c, dy, in[1]) : dy, n_norm, norm, centred);
  if (c->n->n_in > 1 && c->need[1]) c->dx[1] = reshape(c, sum(c, mul(c, dy, nm.xhat), n_lead, lead, false), &in[1]->type);
  if (c->n->n_in > 2 && c->need[2]) c->dx[2] = reshape(c, sum(c, dy, n_lead, lead, false), &in[2]->type);
}

static void vjp_global_avgpool(GradCall *c) {
  Value *x = in0(c);
  int64_t plane = ir_type_numel(&x->type) / (x->type.dims[0] * x->type.dims[1]);
  c->dx[0] = expand_to(c, mulk(c, c->dy[0], 1.0 / (double)plane), &x->type);
}

/* [C] as [C, 1, ...] against an [N, C, ...] operand. */
static Value *per_channel(GradCall *c, Value *v, const TensorType *like_x) {
  TensorType t = v->type;
  t.rank = like_x->rank - 1;
  t.dims[0] = like_x->dims[1];
  for (int d = 1; d < t.rank; d++) t.dims[d] = 1;
  return reshape(c, v, &t);
}

/* group_norm: x [N, C, ...] normalized as [N, groups, C / groups * rest]
 * over its last axis, then a weight and a bias per channel. */
static void vjp_group_norm(GradCall *c) {
  Value *x = in0(c), *dy = c->dy[0];
  const TensorType *xt = &x->type;
  int64_t groups = ir_attr_int(c->n, "groups"), last = 2;
  TensorType grouped = ir_type_make(xt->dtype, 3, (int64_t[]){xt->dims[0], groups, 1});
  grouped.dims[2] = ir_type_numel(xt) / (xt->dims[0] * groups);
  Normed nm = normalize(c, reshape(c, x, &grouped), 1, &last, true);
  Value *const *in = c->n->in;
  if (c->need[0]) {
    Value *gr = c->n->n_in > 1 ? mul(c, dy, per_channel(c, in[1], xt)) : dy;
    c->dx[0] = reshape(c, normalize_back(c, nm, reshape(c, gr, &grouped), 1, &last, true), xt);
  }
  int64_t axes[DL_MAX_RANK];
  int n_axes = all_axes_but(xt, 1, axes);
  if (c->n->n_in > 1 && c->need[1])
    c->dx[1] = reshape(c, sum(c, mul(c, dy, reshape(c, nm.xhat, xt)), n_axes, axes, false), &in[1]->type);
  if (c->n->n_in > 2 && c->need[2]) c->dx[2] = reshape(c, sum(c, dy, n_axes, axes, false), &in[2]->type);
}

/* batchnorm: with frozen statistics (inference, no batch_stats) a
 * per-channel affine map.  With the batch's (batch_stats K >= 1, K the
 * ranks whose batches they span: training mode writes them, and their
 * operands take no gradient here) the closed form: with xhat = (x - mean)
 * / sd, db = sum(dy) and dw = sum(dy xhat) per channel over M values,
 *   dx = w / sd * (dy - db / M - xhat dw / M),
 * the two sums the weight and bias need anyway being all the
 * reductions, each averaged over the K ranks (allreduce_mean) when K > 1. */
static void vjp_batchnorm(GradCall *c) {
  Value *x = in0(c), *dy = c->dy[0];
  const TensorType *xt = &x->type;
  Value *inv = op1(c, OP_RSQRT, addk(c, c->n->in[4], ir_attr_float(c->n, "eps")));
  int64_t axes[DL_MAX_RANK];
  int n_axes = all_axes_but(xt, 1, axes);
  const Attr *stats = ir_attr(c->n, "batch_stats");
  int64_t ranks = stats ? stats->i : 0;
  Value *xhat = NULL, *dw = NULL, *db = NULL;
  if (c->need[1] || (ranks && c->need[0])) {
    xhat = mul(c, sub(c, x, per_channel(c, c->n->in[3], xt)), per_channel(c, inv, xt));
    dw = sum(c, mul(c, dy, xhat), n_axes, axes, false);
  }
  if (c->need[2] || (ranks && c->need[0])) db = sum(c, dy, n_axes, axes, false);
  if (c->need[1]) c->dx[1] = dw;
  if (c->need[2]) c->dx[2] = db;
  if (!c->need[0]) return;
  Value *scale = per_channel(c, mul(c, c->n->in[1], inv), xt);
  if (!ranks) {
    c->dx[0] = mul(c, dy, scale);
    return;
  }
  /* (an empty x has no elements to take the sums' means over) */
  double m = xt->dims[1] > 0 && ir_type_numel(xt) > 0 ? (double)(ir_type_numel(xt) / xt->dims[1]) : 1;
  Value *mdb = mulk(c, db, 1 / m), *mdw = mulk(c, dw, 1 / m);
  if (ranks > 1) mdb = op1(c, OP_ALLREDUCE_MEAN, mdb), mdw = op1(c, OP_ALLREDUCE_MEAN, mdw);
  Value *t = sub(c, sub(c, dy, per_channel(c, mdb, xt)), mul(c, xhat, per_channel(c, mdw, xt)));
  c->dx[0] = mul(c, t, scale);
}

/* ---- products ---- */

/* a @ b with either read transposed (the GEMM's flags: no transpose
 * kernel between). */
static Value *mm(GradCall *c, Value *a, Value *b, bool ta, bool tb) {
  Node *n = ir_node_new(c->g, OP_MATMUL, 2, (Value *[]){a, b}, c->n->loc);
  if (ta) ir_set_int(c->g, n, "trans_a", 1);
  if (tb) ir_set_int(c->g, n, "trans_b", 1);
  return finish(c->g, n);
}

/* NumPy's matmul of A' = op(A) and B' = op(B) (trans_a, trans_b): a 1-d
 * operand is a row (a) or a column (b) for the product, the batch dims
 * broadcast.  dA' = dY B'^T and dB' = A'^T dY; a transposed operand
 * takes its gradient transposed (dA = B' dY^T, dB = dY^T A'), each
 * summed back to its operand's batch dims: for a 2-d b under a batched
 * a, as one product over all the batches' rows. */
static void vjp_matmul(GradCall *c) {
  Value *a = c->n->in[0], *b = c->n->in[1], *dy = c->dy[0];
  TensorType at = ir_matmul_operand(c->n, 0), bt = ir_matmul_operand(c->n, 1), yt = out0(c)->type;
  bool ta = ir_matmul_trans(c->n, 0), tb = ir_matmul_trans(c->n, 1);
  if (at.rank == 1) at = ir_type_make(at.dtype, 2, (int64_t[]){1, at.dims[0]});
  if (bt.rank == 1) bt = ir_type_make(bt.dtype, 2, (int64_t[]){bt.dims[0], 1});
  /* The product's own shape before 1-d operands lose their axis. */
  int r = at.rank > bt.rank ? at.rank : bt.rank;
  yt.rank = r;
  for (int d = 0; d < r - 2; d++) {
    int ia = d - (r - at.rank), ib = d - (r - bt.rank);
    int64_t da = ia >= 0 ? at.dims[ia] : 1, db = ib >= 0 ? bt.dims[ib] : 1;
    yt.dims[d] = da == 1 ? db : da;
  }
  yt.dims[r - 2] = at.dims[at.rank - 2], yt.dims[r - 1] = bt.dims[bt.rank - 1];
  /* A transposed operand has rank >= 2 (its stored layout is its own). */
  Value *g = reshape(c, dy, &yt), *a2 = ta ? a : reshape(c, a, &at), *b2 = tb ? b : reshape(c, b, &bt);
  if (c->need[0]) {
    Value *d = ta ? mm(c, b2, g, tb, true) : mm(c, g, b2, false, !tb);
    c->dx[0] = reshape(c, unbroadcast(c, d, ta ? &a->type : &at), &a->type);
  }
  if (c->need[1] && !ta && at.rank > 2 && b->type.rank == 2) {
    /* b one matrix for every batch (a linear layer's weight in a matmul):
     * its gradient sums a product per batch, which is one product over
     * the batches' rows laid end to end, with no [batch, K, N] of them
     * to store and sum (both reshapes are free: a and dy are rows) */
    int64_t rows = ir_type_numel(&at) / at.dims[at.rank - 1];
    Value *a_rows = ir_grad_reshape(c->g, c->n->loc, a2, 2, (int64_t[]){rows, at.dims[at.rank - 1]});
    Value *g_rows = ir_grad_reshape(c->g, c->n->loc, g, 2, (int64_t[]){rows, yt.dims[r - 1]});
    c->dx[1] = tb ? mm(c, g_rows, a_rows, true, false) : mm(c, a_rows, g_rows, true, false);
  } else if (c->need[1]) {
    Value *d = tb ? mm(c, g, a2, true, ta) : mm(c, a2, g, !ta, false);
    c->dx[1] = reshape(c, unbroadcast(c, d, tb ? &b->type : &bt), &b->type);
  }
}

/* linear: x [..., in], W [out, in]: dx = dy W, dW = dy^T x over the
 * flattened leading dims, db = the sum of dy over them. */
static void vjp_linear(GradCall *c) {
  Value *x = c->n->in[0], *w = c->n->in[1], *dy = c->dy[0];
  int64_t out = w->type.dims[0], in = w->type.dims[1];
  int64_t rows = ir_type_numel(&x->type) / in;
  if (c->need[0]) c->dx[0] = op2(c, OP_MATMUL, dy, w);
  if (c->need[1]) {
    Value *d2 = ir_grad_reshape(c->g, c->n->loc, dy, 2, (int64_t[]){rows, out});
    Value *x2 = ir_grad_reshape(c->g, c->n->loc, x, 2, (int64_t[]){rows, in});
    c->dx[1] = mm(c, d2, x2, true, false);
  }
  if (c->n->n_in > 2 && c->need[2]) {
    int64_t axes[DL_MAX_RANK];
    int n = all_axes_but(&dy->type, dy->type.rank - 1, axes);
    c->dx[2] = sum(c, dy, n, axes, false);
  }
}

static Value *bias_grad(GradCall *c) {
  int64_t axes[DL_MAX_RANK];
  int n = all_axes_but(&c->dy[0]->type, 1, axes);
  return sum(c, c->dy[0], n, axes, false);
}

/* A convolution's weight gradient: x (the convolution's input) against
 * dy (its result's gradient), the window from n. */
static Value *weight_grad(GradCall *c, Value *x, Value *dy, const TensorType *w) {
  Node *n = like(c, OP_CONV_WEIGHT_GRAD, 2, (Value *[]){x, dy});
  ir_set_ints(c->g, n, "kernel", w->rank - 2, w->dims + 2);
  return finish(c->g, n);
}

/* conv: dx is the transposed convolution of dy by the same W (its
 * output_pad restores the rows a stride dropped), dW conv_weight_grad. */
static void vjp_conv(GradCall *c) {
  Value *x = c->n->in[0], *w = c->n->in[1], *dy = c->dy[0];
  int nsp = x->type.rank - 2, count;
  if (c->need[0]) {
    Node *n = like(c, nsp == 3 ? OP_CONV_TRANSPOSE3D : OP_CONV_TRANSPOSE2D, 2, (Value *[]){dy, w});
    const int64_t *stride = ir_attr_ints(c->n, "stride", &count), *pad = ir_attr_ints(c->n, "pad", &count);
    const int64_t *dil = ir_attr_ints(c->n, "dilation", &count);
    int64_t opad[3];
    for (int d = 0; d < nsp; d++) {
      int64_t full = (dy->type.dims[2 + d] - 1) * stride[d] - pad[d] - pad[nsp + d] +
                     dil[d] * (w->type.dims[2 + d] - 1) + 1;
      opad[d] = x->type.dims[2 + d] - full;
    }
    ir_set_ints(c->g, n, "output_pad", nsp, opad);
    c->dx[0] = finish(c->g, n);
  }
  if (c->need[1]) c->dx[1] = weight_grad(c, x, dy, &w->type);
  if (c->n->n_in > 2 && c->need[2]) c->dx[2] = bias_grad(c);
}

/* conv_transpose: dx is the convolution of dy by the same W; dW swaps
 * the roles (dy is what the window runs over). */
static void vjp_conv_transpose(GradCall *c) {
  Value *x = c->n->in[0], *w = c->n->in[1], *dy = c->dy[0];
  if (c->need[0])
    c->dx[0] = finish(c->g, like(c, x->type.rank == 5 ? OP_CONV3D : OP_CONV2D, 2, (Value *[]){dy, w}));
  if (c->need[1]) c->dx[1] = weight_grad(c, dy, x, &w->type);
  if (c->n->n_in > 2 && c->need[2]) c->dx[2] = bias_grad(c);
}

/* resize: nearest by whole factors s per axis (each input pixel an s_h
 * x s_w block of the output) sums each block of dy, [N, C, H*s_h,
 * W*s_w] viewed as [N, C, H, s_h, W, s_w]; any other, resize_grad. */
static void vjp_resize(GradCall *c) {
  const TensorType *xt = &in0(c)->type, *yt = &out0(c)->type;
  int64_t H = xt->dims[2], W = xt->dims[3];
  bool blocks = strcmp(ir_attr_str(c->n, "mode"), "nearest") == 0 && H && W && yt->dims[2] % H == 0 &&
                yt->dims[3] % W == 0;
  if (!blocks) {
    Node *n = like(c, OP_RESIZE_GRAD, 1, &c->dy[0]);
    ir_set_ints(c->g, n, "size", 2, xt->dims + 2);
    c->dx[0] = finish(c->g, n);
    return;
  }
  TensorType t = ir_type_make(yt->dtype, 6, (int64_t[]){xt->dims[0], xt->dims[1], H, 1, W, 1});
  t.dims[3] = yt->dims[2] / H, t.dims[5] = yt->dims[3] / W;
  c->dx[0] = reshape(c, sum(c, reshape(c, c->dy[0], &t), 2, (int64_t[]){3, 5}, false), xt);
}

static void vjp_maxpool(GradCall *c) {
  c->dx[0] = finish(c->g, like(c, OP_MAXPOOL_GRAD, 2, (Value *[]){c->dy[0], in0(c)}));
}

static void vjp_avgpool(GradCall *c) {
  Node *n = like(c, OP_AVGPOOL_GRAD, 1, &c->dy[0]);
  const TensorType *xt = &in0(c)->type;
  ir_set_ints(c->g, n, "size", xt->rank - 2, xt->dims + 2);
  c->dx[0] = finish(c->g, n);
}

/* ---- data movement ---- */

static void vjp_reshape(GradCall *c) { c->dx[0] = reshape(c, c->dy[0], &in0(c)->type); }

static void vjp_transpose(GradCall *c) {
  int count;
  const int64_t *perm = ir_attr_ints(c->n, "perm", &count);
  int64_t inv[DL_MAX_RANK];
  for (int d = 0; d < count; d++) inv[perm[d]] = d;
  c->dx[0] = transpose(c, c->dy[0], inv);
}

static void vjp_expand(GradCall *c) { c->dx[0] = operand_grad(c, 0, c->dy[0]); }

static Value *slice(GradCall *c, Value *x, const int64_t *starts, const int64_t *ends,
                    const int64_t *steps) {
  Node *n = ir_node_new(c->g, OP_SLICE, 1, &x, c->n->loc);
  int r = x->type.rank;
  ir_set_ints(c->g, n, "starts", r, starts);
  ir_set_ints(c->g, n, "ends", r, ends);
  ir_set_ints(c->g, n, "steps", r, steps);
  return finish(c->g, n);
}

static Value *pad(GradCall *c, Value *x, const int64_t *pads) {
  int64_t zero[2 * DL_MAX_RANK] = {0};
  if (memcmp(pads, zero, sizeof(int64_t) * 2 * (size_t)x->type.rank) == 0) return x;
  return ints_op(c->g, c->n->loc, OP_PAD, x, "pads", 2 * x->type.rank, pads);
}

static void vjp_concat(GradCall *c) {
  const TensorType *yt = &out0(c)->type;
  int64_t axis = axis_of(c->n, yt), starts[DL_MAX_RANK] = {0}, ends[DL_MAX_RANK], steps[DL_MAX_RANK];
  for (int d = 0; d < yt->rank; d++) ends[d] = yt->dims[d], steps[d] = 1;
  for (int i = 0; i < c->n->n_in; i++) {
    ends[axis] = starts[axis] + c->n->in[i]->type.dims[axis];
    if (c->need[i]) c->dx[i] = slice(c, c->dy[0], starts, ends, steps);
    starts[axis] = ends[axis];
  }
}

/* slice: dy padded back into zeros; a strided axis first spreads dy's
 * rows apart (a new axis of size step, padded, folded in). */
static void vjp_slice(GradCall *c) {
  const TensorType *xt = &in0(c)->type;
  int r = xt->rank, count;
  const int64_t *starts = ir_attr_ints(c->n, "starts", &count), *steps = ir_attr_ints(c->n, "steps", &count);
  Value *g = c->dy[0];
  int64_t pads[2 * DL_MAX_RANK] = {0};
  for (int d = 0; d < r; d++) {
    int64_t s = steps[d], len = g->type.dims[d];
    if (s > 1) {
      TensorType t = g->type;
      for (int j = r; j > d + 1; j--) t.dims[j] = t.dims[j - 1];
      t.rank = r + 1;
      t.dims[d + 1] = 1;
      int64_t spread[2 * DL_MAX_RANK] = {0};
      spread[t.rank + d + 1] = s - 1;
      Value *w = pad(c, reshape(c, g, &t), spread);
      TensorType folded = g->type;
      folded.dims[d] = len * s;
      g = reshape(c, w, &folded);
      /* The last row's tail may run past the end of x. */
      int64_t keep = xt->dims[d] - starts[d] < len * s ? xt->dims[d] - starts[d] : len * s;
      if (keep < len * s) {
        int64_t st[DL_MAX_RANK] = {0}, en[DL_MAX_RANK], one[DL_MAX_RANK];
        for (int j = 0; j < r; j++) en[j] = g->type.dims[j], one[j] = 1;
        en[d] = keep;
        g = slice(c, g, st, en, one);
      }
    }
    pads[d] = starts[d];
    pads[r + d] = xt->dims[d] - starts[d] - g->type.dims[d];
  }
  c->dx[0] = pad(c, g, pads);
}

static void vjp_pad(GradCall *c) {
  const TensorType *xt = &in0(c)->type;
  int count;
  const int64_t *pads = ir_attr_ints(c->n, "pads", &count);
  int64_t starts[DL_MAX_RANK], ends[DL_MAX_RANK], steps[DL_MAX_RANK];
  for (int d = 0; d < xt->rank; d++) starts[d] = pads[d], ends[d] = pads[d] + xt->dims[d], steps[d] = 1;
  c->dx[0] = slice(c, c->dy[0], starts, ends, steps);
}

/* gather along axis: embedding_grad over dy with the indices' axes
 * moved to the front, moved back after. */
static void vjp_gather(GradCall *c) {
  Value *data = in0(c), *ids = c->n->in[1], *dy = c->dy[0];
  int64_t axis = axis_of(c->n, &data->type);
  int ri = ids->type.rank, ry = dy->type.rank, rd = data->type.rank;
  int64_t perm[DL_MAX_RANK], back[DL_MAX_RANK];
  int k = 0;
  for (int d = 0; d < ri; d++) perm[k++] = axis + d;
  for (int d = 0; d < ry; d++)
    if (d < axis || d >= axis + ri) perm[k++] = d;
  bool moved = false;
  for (int d = 0; d < ry; d++) moved |= perm[d] != d;
  Value *g = moved ? transpose(c, dy, perm) : dy;
  Node *n = ir_node_new(c->g, OP_EMBEDDING_GRAD, 2, (Value *[]){g, ids}, c->n->loc);
  ir_set_int(c->g, n, "num", data->type.dims[axis]);
  Value *rows = finish(c->g, n);
  if (axis == 0) {
    c->dx[0] = rows;
    return;
  }
  /* rows is [num, data's other axes in order]: num goes back to axis. */
  for (int d = 0; d < rd; d++) back[d] = d == axis ? 0 : d < axis ? d + 1 : d;
  c->dx[0] = transpose(c, rows, back);
}

static Value *zeros_like(GradCall *c, Value *v) {
  Node *n = ir_node_new(c->g, OP_CONST, 0, NULL, c->n->loc);
  ir_set_float(c->g, n, "value", 0);
  ir_declare(n, &v->type);
  ir_append(c->g, n);
  return &n->out[0];
}

static Value *scatter_add(GradCall *c, OpKind op, Value *into, Value *ids, Value *upd) {
  Node *n = ir_node_new(c->g, op, 3, (Value *[]){zeros_like(c, into), ids, upd}, c->n->loc);
  if (op == OP_SCATTER_ELEMENTS) ir_set_int(c->g, n, "axis", ir_attr_int(c->n, "axis"));
  ir_set_str(c->g, n, "reduction", "add");
  return finish(c->g, n);
}

/* With one index per position along axis (ids' extent there 1, the rest
 * of data's shape: cross_entropy's pick of a class, topk with k = 1) no
 * two updates meet, so the scatter-add into zeros is a select:
 * where(iota == ids, upd, 0), an elementwise map that fuses with what
 * reads it (log_softmax's backward) instead of a kernel of its own.  The
 * iota is data's extent along axis only, broadcast, never data's size
 * in memory.  A negative index counts from the end, as the forward. */
static Value *scatter_add_along(GradCall *c, Value *into, Value *ids, Value *upd, int axis) {
  const TensorType *t = &into->type;
  bool one = ids->type.rank == t->rank && ids->type.dims[axis] == 1;
  for (int d = 0; one && d < t->rank; d++) one = d == axis || ids->type.dims[d] == t->dims[d];
  if (!one) return scatter_add(c, OP_SCATTER_ELEMENTS, into, ids, upd);
  int64_t shape[DL_MAX_RANK];
  for (int d = 0; d < t->rank; d++) shape[d] = d == axis ? t->dims[d] : 1;
  Node *n = ir_node_new(c->g, OP_IOTA, 0, NULL, c->n->loc);
  ir_set_ints(c->g, n, "shape", t->rank, shape);
  ir_set_dtype(c->g, n, "dtype", ids->type.dtype);
  ir_set_int(c->g, n, "axis", axis);
  Value *at = where(c, cmpk(c, OP_LESS, ids, 0), addk(c, ids, (double)t->dims[axis]), ids);
  return where(c, op2(c, OP_EQUAL, finish(c->g, n), at), upd, num(c, 0, upd));
}

static void vjp_gather_elements(GradCall *c) {
  int64_t axis = ir_attr_int(c->n, "axis");
  if (axis < 0) axis += in0(c)->type.rank;
  c->dx[0] = scatter_add_along(c, in0(c), c->n->in[1], c->dy[0], (int)axis);
}

/* gather_nd: a scatter-add of dy at the indices; with batch_dims b, the
 * indices gain each element's batch coordinates in front (iotas along
 * the batch axes), so one scatter_nd without batch dims serves. */
static void vjp_gather_nd(GradCall *c) {
  Value *ids = c->n->in[1];
  int b = (int)ir_attr_int(c->n, "batch_dims"), r = ids->type.rank;
  if (b > 0) {
    Value *parts[DL_MAX_RANK + 1];
    int64_t shape[DL_MAX_RANK];
    memcpy(shape, ids->type.dims, sizeof shape);
    shape[r - 1] = 1;
    for (int j = 0; j < b; j++) {
      Node *n = ir_node_new(c->g, OP_IOTA, 0, NULL, c->n->loc);
      ir_set_ints(c->g, n, "shape", r, shape);
      ir_set_dtype(c->g, n, "dtype", ids->type.dtype);
      ir_set_int(c->g, n, "axis", j);
      parts[j] = finish(c->g, n);
    }
    parts[b] = ids;
    Node *cat = ir_node_new(c->g, OP_CONCAT, b + 1, parts, c->n->loc);
    ir_set_int(c->g, cat, "axis", r - 1);
    ids = finish(c->g, cat);
  }
  c->dx[0] = scatter_add(c, OP_SCATTER_ND, in0(c), ids, c->dy[0]);
}

/* scatter_elements and scatter_nd, reduction "none" or "add": each
 * update's gradient is dy where it went (PyTorch's scatter backward, so
 * under "none" an update a later one overwrote gets it too); data's is
 * dy, with zeros where "none" overwrote it. */
static void vjp_scatter(GradCall *c) {
  Value *ids = c->n->in[1], *upd = c->n->in[2], *dy = c->dy[0];
  bool nd = c->n->op == OP_SCATTER_ND;
  if (c->need[0]) {
    if (strcmp(ir_attr_str(c->n, "reduction"), "add") == 0) {
      c->dx[0] = dy;
    } else {
      Node *n = like(c, c->n->op, 3, (Value *[]){dy, ids, zeros_like(c, upd)});
      c->dx[0] = finish(c->g, n);
    }
  }
  if (c->need[2]) {
    Node *n = like(c, nd ? OP_GATHER_ND : OP_GATHER_ELEMENTS, 2, (Value *[]){dy, ids});
    c->dx[2] = finish(c->g, n);
  }
}

/* The rules are written for NCHW (the nhwc pass runs after autodiff). */
static const char *lacks_nhwc(const Node *n) {
  if (!ir_nhwc(n)) return NULL;
  switch (n->op) {
    case OP_CONV2D: return "conv2d in layout \"nhwc\"";
    case OP_CONV3D: return "conv3d in layout \"nhwc\"";
    case OP_CONV_TRANSPOSE2D: return "conv_transpose2d in layout \"nhwc\"";
    case OP_CONV_TRANSPOSE3D: return "conv_transpose3d in layout \"nhwc\"";
    case OP_RESIZE: return "resize in layout \"nhwc\"";
    case OP_GROUP_NORM: return "group_norm in layout \"nhwc\"";
    case OP_GLOBAL_AVGPOOL: return "global_avgpool in layout \"nhwc\"";
    default: return "a pool in layout \"nhwc\"";
  }
}

static const char *lacks_scatter(const Node *n) {
  const char *r = ir_attr_str(n, "reduction");
  if (strcmp(r, "none") == 0 || strcmp(r, "add") == 0) return NULL;
  return n->op == OP_SCATTER_ND ? "scatter_nd with a reduction other than none or add"
                                : "scatter_elements with a reduction other than none or add";
}

/* topk: the values' gradient goes back to where they came from. */
static void vjp_topk(GradCall *c) {
  if (!c->dy[0]) return;
  int64_t axis = ir_attr_int(c->n, "axis");
  if (axis < 0) axis += in0(c)->type.rank;
  c->dx[0] = scatter_add_along(c, in0(c), (Value *)&c->n->out[1], c->dy[0], (int)axis);
}

/* The same mask on the gradient: the same seed, offset and stream. */
static void vjp_dropout(GradCall *c) {
  Value *in[4] = {c->dy[0], c->n->in[1], c->n->in[2], c->n->n_in > 3 ? c->n->in[3] : NULL};
  c->dx[0] = finish(c->g, like(c, OP_DROPOUT, c->n->n_in, in));
}

/* ---- recurrent layers ---- */

/* An lstm or a gru of one layer (passes/train_mode.c splits every other
 * into these).  Per direction d, with y_d its columns of y:
 *   h_{t-1}: y_d one step back in the direction's time (zeros first);
 *   px = x W_ih^T + b_ih and ph = h_{t-1} W_hh^T + b_hh, every step's
 *       gates before their activations as the forward computed them:
 *       two GEMMs rather than [T, N, GH] more kept by the forward;
 *   the walk, the only sequential part: dp = lstm_bptt(px, ph, W_hh,
 *       dy_d, dh_n, dc_n), the gradient of both px and ph (the lstm adds
 *       them), or dpx, dph = gru_bptt(px, ph, W_hh, dy_d, dh_n, h_{t-1})
 *       (the gru's r multiplies ph's n, so the two differ);
 * then dx += dpx W_ih, dW_ih = dpx^T x, dW_hh = dph^T h_{t-1} and the
 * biases' sums of dpx and dph over every step and row, GEMMs and
 * reductions over all T * N rows at once, in either layout. */
/* Result k's gradient (h_n's or c_n's) for direction d as [N, H];
 * zeros where none reaches it. */
static Value *rnn_state(GradCall *c, int k, int d, const TensorType *st) {
  Value *dy = c->dy[k];
  int64_t D = c->n->out[k].type.dims[0], N = st->dims[0], H = st->dims[1];
  if (!dy) return zeros_like(c, &(Value){.type = *st});
  if (D == 1) return ir_grad_reshape(c->g, c->n->loc, dy, 2, st->dims);
  Value *one = slice(c, dy, (int64_t[]){d, 0, 0}, (int64_t[]){d + 1, N, H}, (int64_t[]){1, 1, 1});
  return ir_grad_reshape(c->g, c->n->loc, one, 2, st->dims);
}

static void vjp_recurrent(GradCall *c) {
  const Node *n = c->n;
  bool lstm = n->op == OP_LSTM;
  Value *x = n->in[0];
  const TensorType *yt = &n->out[0].type;
  int ax = ir_attr_int(n, "batch_first") ? 1 : 0; /* time's axis */
  int64_t T = yt->dims[ax], N = yt->dims[1 - ax], H = ir_attr_int(n, "hidden"), F = x->type.dims[2];
  int64_t GH = (lstm ? 4 : 3) * H;
  int dirs = ir_attr_int(n, "bidirectional") ? 2 : 1, per = ir_attr_int(n, "bias") ? 4 : 2;
  TensorType st = ir_type_make(x->type.dtype, 2, (int64_t[]){N, H});
  TensorType seq = ir_type_make(x->type.dtype, 3, (int64_t[]){yt->dims[0], yt->dims[1], H});
  Value *y = (Value *)&n->out[0], *dx = NULL;
  int64_t ones[3] = {1, 1, 1}, rows = T * N;
  for (int d = 0; d < dirs; d++) {
    Value *const *w = n->in + 1 + d * per;
    int widx = 1 + d * per;
    bool want = c->need[0];
    for (int i = 0; i < per; i++) want = want || c->need[widx + i];
    if (!want) continue;
    Value *hprev = zeros_like(c, &(Value){.type = seq});
    if (T > 1) {
      /* forward: y_d[0 .. T-1) moved one step later; reverse: y_d[1 .. T) one earlier */
      int64_t lo[3] = {0, 0, d * H}, hi[3] = {yt->dims[0], yt->dims[1], (d + 1) * H}, pads[6] = {0};
      lo[ax] = d ? 1 : 0, hi[ax] = d ? T : T - 1;
      Value *part = slice(c, y, lo, hi, ones);
      pads[d ? 3 + ax : ax] = 1;
      hprev = pad(c, part, pads);
    }
    Value *xi = ir_grad_op(c->g, n->loc, OP_LINEAR, per == 4 ? 3 : 2, (Value *[]){x, w[0], per == 4 ? w[2] : NULL});
    Value *hh = ir_grad_op(c->g, n->loc, OP_LINEAR, per == 4 ? 3 : 2, (Value *[]){hprev, w[1], per == 4 ? w[3] : NULL});
    Value *dyd = c->dy[0] ? (dirs == 1 ? c->dy[0] : slice(c, c->dy[0], (int64_t[]){0, 0, d * H},
                                                         (int64_t[]){yt->dims[0], yt->dims[1], (d + 1) * H}, ones))
                          : zeros_like(c, &(Value){.type = seq});
    Value *last = lstm ? rnn_state(c, 2, d, &st) : hprev;
    Node *bp = ir_node_new(c->g, lstm ? OP_LSTM_BPTT : OP_GRU_BPTT, 6,
                           (Value *[]){xi, hh, w[1], dyd, rnn_state(c, 1, d, &st), last}, n->loc);
    ir_set_int(c->g, bp, "reverse", d);
    ir_set_int(c->g, bp, "batch_first", ax);
    Value *dpx = finish(c->g, bp), *dph = lstm ? dpx : &bp->out[1];
    Value *dpx2 = ir_grad_reshape(c->g, n->loc, dpx, 2, (int64_t[]){rows, GH});
    Value *dph2 = lstm ? dpx2 : ir_grad_reshape(c->g, n->loc, dph, 2, (int64_t[]){rows, GH});
    if (c->need[0]) {
      Value *dxd = mm(c, dpx, w[0], false, false);
      dx = dx ? add(c, dx, dxd) : dxd;
    }
    if (c->need[widx]) c->dx[widx] = mm(c, dpx2, ir_grad_reshape(c->g, n->loc, x, 2, (int64_t[]){rows, F}), true, false);
    if (c->need[widx + 1])
      c->dx[widx + 1] = mm(c, dph2, ir_grad_reshape(c->g, n->loc, hprev, 2, (int64_t[]){rows, H}), true, false);
    if (per == 4 && c->need[widx + 2]) c->dx[widx + 2] = sum(c, dpx2, 1, (int64_t[]){0}, false);
    if (per == 4 && c->need[widx + 3])
      c->dx[widx + 3] = lstm && c->dx[widx + 2] ? c->dx[widx + 2] : sum(c, dph2, 1, (int64_t[]){0}, false);
  }
  if (c->need[0]) c->dx[0] = dx;
}

/* ---- attention ---- */

/* attention_grad (ops.def) gives all three at once, without the Sq x Sk
 * probabilities ever in memory, from the rows' logsumexp: attention_lse's
 * second result (training mode's forward), or for a plain attention an
 * attention_lse recomputed beside the backward.  The mask gets none
 * (GradRule.stops): a trainable mask keeps attention written out
 * (passes/train_mode.c). */
static void vjp_attention(GradCall *c) {
  const Node *n = c->n;
  Value *lse = n->op == OP_ATTENTION_LSE ? (Value *)&n->out[1] : NULL;
  if (!lse) {
    Node *f = like(c, OP_ATTENTION_LSE, n->n_in, n->in);
    finish(c->g, f);
    lse = &f->out[1];
  }
  Value *in[7] = {n->in[0], n->in[1], n->in[2], (Value *)&n->out[0], c->dy[0], lse, n->n_in > 3 ? n->in[3] : NULL};
  Node *g = like(c, OP_ATTENTION_GRAD, n->n_in > 3 ? 7 : 6, in);
  finish(c->g, g);
  for (int i = 0; i < 3; i++)
    if (c->need[i]) c->dx[i] = &g->out[i];
}

static const char *lacks_layers(const Node *n) {
  return ir_attr_int(n, "layers") != 1 ? "recurrent layer of more than one layer (training mode splits it)" : NULL;
}

/* ---- the table ----
 * One line per op of ops.def, in its order: a new op does not compile
 * until its line says what its gradient is. */

#define VJP(fn) {fn, 0, false, NULL}
#define PARTIAL(fn, lacks) {fn, 0, false, lacks}
#define RULE(fn, stops, zero) {fn, stops, zero, NULL}
#define UNARY VJP(vjp_unary)
#define ZERO {NULL, 0, true, NULL}
#define NONE {NULL, 0, false, NULL}

#define GRAD_INPUT NONE
#define GRAD_PARAM NONE
#define GRAD_CONST NONE
#define GRAD_NEG VJP(vjp_neg)
#define GRAD_ABS UNARY
#define GRAD_RELU UNARY
#define GRAD_LEAKY_RELU UNARY
#define GRAD_CLIP UNARY
#define GRAD_SIGMOID UNARY
#define GRAD_TANH UNARY
#define GRAD_GELU UNARY
#define GRAD_SILU UNARY
#define GRAD_HARDSIGMOID UNARY
#define GRAD_HARDSWISH UNARY
#define GRAD_EXP UNARY
#define GRAD_LOG UNARY
#define GRAD_SQRT UNARY
#define GRAD_RSQRT UNARY
#define GRAD_ERF UNARY
#define GRAD_RECIPROCAL UNARY
#define GRAD_SIN UNARY
#define GRAD_COS UNARY
#define GRAD_ROUND ZERO
#define GRAD_FLOOR ZERO
#define GRAD_CEIL ZERO
#define GRAD_FP_ROUND ZERO
#define GRAD_SIGN ZERO
#define GRAD_TAN UNARY
#define GRAD_ASIN UNARY
#define GRAD_ACOS UNARY
#define GRAD_ATAN UNARY
#define GRAD_SINH UNARY
#define GRAD_COSH UNARY
#define GRAD_ASINH UNARY
#define GRAD_ACOSH UNARY
#define GRAD_ATANH UNARY
#define GRAD_CAST VJP(vjp_cast)
#define GRAD_QUANTIZE NONE /* quantization-aware training (straight-through) is later work */
#define GRAD_DEQUANTIZE NONE
#define GRAD_ADD VJP(vjp_add)
#define GRAD_SUB VJP(vjp_add)
#define GRAD_MUL VJP(vjp_mul)
#define GRAD_DIV VJP(vjp_div)
#define GRAD_POW VJP(vjp_pow)
#define GRAD_MAXIMUM VJP(vjp_extremum)
#define GRAD_MINIMUM VJP(vjp_extremum)
#define GRAD_MOD VJP(vjp_mod)
#define GRAD_EQ ZERO
#define GRAD_NE ZERO
#define GRAD_LT ZERO
#define GRAD_LE ZERO
#define GRAD_GT ZERO
#define GRAD_GE ZERO
#define GRAD_BIT_AND NONE /* integers: nothing to differentiate */
#define GRAD_BIT_OR NONE
#define GRAD_BIT_XOR NONE
#define GRAD_BIT_NOT NONE
#define GRAD_SHL NONE
#define GRAD_SHR NONE
#define GRAD_BITCAST NONE
#define GRAD_EQUAL ZERO
#define GRAD_NOT_EQUAL ZERO
#define GRAD_LESS ZERO
#define GRAD_LESS_EQUAL ZERO
#define GRAD_GREATER ZERO
#define GRAD_GREATER_EQUAL ZERO
#define GRAD_ISNAN ZERO
#define GRAD_ISINF ZERO
#define GRAD_LOGICAL_NOT ZERO
#define GRAD_LOGICAL_AND ZERO
#define GRAD_LOGICAL_OR ZERO
#define GRAD_LOGICAL_XOR ZERO
#define GRAD_WHERE VJP(vjp_where)
#define GRAD_CHECK NONE /* an imported If's guard: not trained through */
#define GRAD_LOOP_BEGIN NONE /* a loop of the plan: not trained through */
#define GRAD_LOOP_END NONE
#define GRAD_REDUCE_SUM VJP(vjp_reduce)
#define GRAD_REDUCE_MEAN VJP(vjp_reduce)
#define GRAD_REDUCE_MAX VJP(vjp_reduce)
#define GRAD_REDUCE_MIN VJP(vjp_reduce)
#define GRAD_REDUCE_PROD VJP(vjp_reduce)
#define GRAD_ARGMAX ZERO
#define GRAD_SOFTMAX VJP(vjp_softmax)
#define GRAD_LOG_SOFTMAX VJP(vjp_softmax)
#define GRAD_LAYERNORM VJP(vjp_layernorm)
#define GRAD_RMS_NORM VJP(vjp_layernorm)
#define GRAD_GROUP_NORM PARTIAL(vjp_group_norm, lacks_nhwc)
#define GRAD_GLOBAL_AVGPOOL PARTIAL(vjp_global_avgpool, lacks_nhwc)
#define GRAD_BATCHNORM RULE(vjp_batchnorm, 1u << 3 | 1u << 4, false)
#define GRAD_MATMUL VJP(vjp_matmul)
#define GRAD_LINEAR VJP(vjp_linear)
#define GRAD_CONV2D PARTIAL(vjp_conv, lacks_nhwc)
#define GRAD_CONV_TRANSPOSE2D PARTIAL(vjp_conv_transpose, lacks_nhwc)
#define GRAD_CONV3D PARTIAL(vjp_conv, lacks_nhwc)
#define GRAD_CONV_TRANSPOSE3D PARTIAL(vjp_conv_transpose, lacks_nhwc)
#define GRAD_MAXPOOL2D PARTIAL(vjp_maxpool, lacks_nhwc)
#define GRAD_AVGPOOL2D PARTIAL(vjp_avgpool, lacks_nhwc)
#define GRAD_MAXPOOL3D PARTIAL(vjp_maxpool, lacks_nhwc)
#define GRAD_AVGPOOL3D PARTIAL(vjp_avgpool, lacks_nhwc)
#define GRAD_RESIZE PARTIAL(vjp_resize, lacks_nhwc)
#define GRAD_GRID_SAMPLE NONE
#define GRAD_RESHAPE VJP(vjp_reshape)
#define GRAD_TRANSPOSE VJP(vjp_transpose)
#define GRAD_EXPAND VJP(vjp_expand)
#define GRAD_CONCAT VJP(vjp_concat)
#define GRAD_SLICE VJP(vjp_slice)
#define GRAD_PAD VJP(vjp_pad)
#define GRAD_GATHER VJP(vjp_gather)
#define GRAD_GATHER_ELEMENTS VJP(vjp_gather_elements)
#define GRAD_GATHER_ND VJP(vjp_gather_nd)
#define GRAD_SCATTER_ELEMENTS PARTIAL(vjp_scatter, lacks_scatter)
#define GRAD_SCATTER_ND PARTIAL(vjp_scatter, lacks_scatter)
#define GRAD_TOPK VJP(vjp_topk)
#define GRAD_IOTA NONE
#define GRAD_RANDOM_UNIFORM NONE /* a draw: nothing flows back to the seed and counters */
#define GRAD_NONZERO NONE /* integer coordinates: nothing flows back */
#define GRAD_SHAPE_OF NONE /* replaced at import */
#define GRAD_WITH_LENGTH NONE /* replaced at import */
#define GRAD_NMS NONE /* indices */
#define GRAD_UNIQUE NONE /* values picked by equality: no gradient rule written */
#define GRAD_LSTM PARTIAL(vjp_recurrent, lacks_layers) /* one layer: passes/train_mode.c splits the rest */
#define GRAD_GRU PARTIAL(vjp_recurrent, lacks_layers)
#define GRAD_LSTM_BPTT NONE /* no second derivatives */
#define GRAD_GRU_BPTT NONE
#define GRAD_ATTENTION RULE(vjp_attention, 1u << 3, false)
#define GRAD_ATTENTION_LSE RULE(vjp_attention, 1u << 3, false) /* lse: only attention_grad reads it */
#define GRAD_ATTENTION_GRAD NONE /* no second derivatives */
#define GRAD_CONV_WEIGHT_GRAD NONE /* no second derivatives */
#define GRAD_MAXPOOL_GRAD NONE
#define GRAD_AVGPOOL_GRAD NONE
#define GRAD_EMBEDDING_GRAD NONE
#define GRAD_XENT VJP(vjp_xent)
#define GRAD_XENT_GRAD NONE /* no second derivatives */
#define GRAD_XENT_BOTH NONE /* made after autodiff (passes/xent.c) */
#define GRAD_DROPOUT VJP(vjp_dropout)
#define GRAD_RESIZE_GRAD NONE
#define GRAD_OPTIM_UPDATE NONE /* the end of a step, after every gradient */
#define GRAD_ALLREDUCE_MEAN VJP(vjp_allreduce_mean)
#define GRAD_TP_COPY VJP(vjp_tp_copy)
#define GRAD_ALLREDUCE_SUM VJP(vjp_allreduce_sum)
#define GRAD_STAGE VJP(vjp_allreduce_sum) /* the identity's: dy */

const GradRule ir_grad_rules[] = {
#define OP(id, ...) GRAD_##id,
#include "ops.def"
#undef OP
};
static_assert(ARRAY_LEN(ir_grad_rules) == OP_COUNT, "one gradient line per op of ops.def");
