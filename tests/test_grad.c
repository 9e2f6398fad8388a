/* Check suite for the gradient rules (ir/grad.c) and reverse-mode
 * autodiff (passes/autodiff.c) on the reference interpreter: every rule
 * against central finite differences in f64 on random shapes (size-1
 * axes and broadcasting included), training-mode batchnorm and dropout,
 * gradients summed over several uses, the located errors (an op with no
 * rule, a parameter that reaches the loss only through ops with no
 * gradient, a loss that is not one value), the f64 dtype and the state
 * updates in the IR text. */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/ast.h"
#include "ir/eval.h"
#include "ir/grad.h"
#include "ir/ir.h"
#include "passes/autodiff.h"
#include "tests/testutil.h"

static uint64_t seed = 1;
static double urand(void) { return (double)(test_splitmix64(&seed) >> 11) * 0x1p-53; }
static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)(urand() * (double)(hi - lo + 1)); }

/* ---- building graphs ---- */

static Value *source(Graph *g, OpKind op, const char *name, DType dt, int rank, const int64_t *dims) {
  TensorType t = ir_type_make(dt, rank, dims);
  return &ir_source(g, op, &t, name, (SrcLoc){0})->out[0];
}

static Value *param(Graph *g, const char *name, int rank, const int64_t *dims) {
  return source(g, OP_PARAM, name, TY_F64, rank, dims);
}

static Node *node(Graph *g, OpKind op, int n_in, Value *const *in) {
  return ir_node_new(g, op, n_in, in, (SrcLoc){0});
}

static Value *fin(Graph *g, Node *n) {
  char err[256];
  ck_assert_msg(ir_fill_defaults(g, n, err, sizeof err) && ir_infer(n, err, sizeof err), "%s: %s",
                ir_ops[n->op].name, err);
  ir_append(g, n);
  return &n->out[0];
}

static Value *op1(Graph *g, OpKind op, Value *x) { return fin(g, node(g, op, 1, &x)); }
static Value *op2(Graph *g, OpKind op, Value *a, Value *b) { return fin(g, node(g, op, 2, (Value *[]){a, b})); }

static void ints(Graph *g, Node *n, const char *name, int count, const int64_t *v) {
  ir_set_ints(g, n, name, count, v);
}

/* op over x with one list attribute. */
static Value *op_ints(Graph *g, OpKind op, Value *x, const char *name, int count, const int64_t *v) {
  Node *n = node(g, op, 1, &x);
  ints(g, n, name, count, v);
  return fin(g, n);
}

static Graph *new_graph(Ctx *c) { return ir_graph_new(c, "t"); }

/* A fresh context and an empty graph in it. */
static Graph *begin(Ctx *c) {
  ctx_init(c);
  return new_graph(c);
}

static void output(Graph *g, Value *y) {
  const char *name = "y";
  ir_set_outputs(g, 1, &y, &name);
}

/* Random dims: rank 0..max_rank, each 1..4 (size-1 axes are common). */
static int rand_shape(int lo_rank, int max_rank, int64_t *dims) {
  int r = (int)irand(lo_rank, max_rank);
  for (int d = 0; d < r; d++) dims[d] = irand(1, 4);
  return r;
}

/* A shape that broadcasts against a (trailing dims of a, some 1). */
static int partner(int ra, const int64_t *a, int64_t *b) {
  int rb = (int)irand(0, ra);
  for (int d = 0; d < rb; d++) b[d] = urand() < 0.3 ? 1 : a[ra - rb + d];
  return rb;
}

/* ---- the check ---- */

/* How a float param is drawn: |v| in [lo, hi], either sign when signed. */
typedef struct Range {
  double lo, hi;
  bool positive;
} Range;

static const Range ANY = {0.2, 1.5, false};

/* Integer inputs and params are drawn in [0, int_hi), as many ops take
 * them as indices; int_lo < 0 allows negative ones (from the end). */
typedef struct Spec {
  Range range;
  int64_t int_lo, int_hi;
  int zero_every; /* > 0: every so many float elements of params exactly 0 */
  AutodiffOptions ad;
  const char *frozen[2]; /* float params that get no gradient (buffers) */
} Spec;

static void fill(Tensor *t, const Spec *s, bool is_param) {
  for (int64_t i = 0, n = ir_type_numel(&t->type); i < n; i++) {
    if (!ir_dtype_is_float(t->type.dtype)) {
      ir_tensor_set(t, i, (double)irand(s->int_lo, s->int_hi - 1));
      continue;
    }
    double v = s->range.lo + (s->range.hi - s->range.lo) * urand();
    if (is_param && s->zero_every && i % s->zero_every == 0) v = 0;
    ir_tensor_set(t, i, s->range.positive || urand() < 0.5 ? v : -v);
  }
}

typedef struct Maps {
  TensorMap params, inputs;
  const char *names[2][32];
  Tensor t[2][32];
} Maps;

static void draw(Graph *g, const Spec *s, Maps *m) {
  memset(m, 0, sizeof *m);
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_PARAM && n->op != OP_INPUT) continue;
    int k = n->op == OP_INPUT;
    TensorMap *map = k ? &m->inputs : &m->params;
    ck_assert_int_lt(map->n, 32);
    Tensor *t = &m->t[k][map->n];
    ck_assert(ir_tensor_alloc(t, &n->out[0].type));
    fill(t, s, !k);
    m->names[k][map->n++] = ir_attr_str(n, "name");
  }
  m->params.names = m->names[0], m->params.tensors = m->t[0];
  m->inputs.names = m->names[1], m->inputs.tensors = m->t[1];
}

static void release(Maps *m) {
  for (int i = 0; i < m->params.n; i++) ir_tensor_free(&m->t[0][i]);
  for (int i = 0; i < m->inputs.n; i++) ir_tensor_free(&m->t[1][i]);
}

static double loss_of(Graph *g, const Maps *m) {
  Tensor *out = calloc((size_t)g->n_outputs, sizeof *out);
  char err[512];
  ck_assert_msg(ir_eval(g, &m->inputs, &m->params, out, err, sizeof err), "ir_eval: %s", err);
  double l = ir_tensor_get(&out[0], 0);
  for (int i = 0; i < g->n_outputs; i++) ir_tensor_free(&out[i]);
  free(out);
  return l;
}

/* g's output 0, y, becomes the loss sum(y * r) for a random input r (so
 * the check sees the whole Jacobian projected on r); after autodiff each
 * NAME.grad is compared with (L(p + h) - L(p - h)) / 2h on up to 16
 * elements of NAME, in f64. */
static void check_fd(Graph *g, const char *what, const Spec *s) {
  Value *y = g->outputs[0];
  Value *r = source(g, OP_INPUT, "r", y->type.dtype, y->type.rank, y->type.dims);
  int64_t axes[DL_MAX_RANK];
  for (int d = 0; d < y->type.rank; d++) axes[d] = d;
  Value *loss = ir_grad_sum(g, (SrcLoc){0}, op2(g, OP_MUL, y, r), y->type.rank, axes, false);
  output(g, loss);
  ck_assert(ir_verify(g));
  ck_assert_msg(pass_autodiff(g, &s->ad) && ir_verify(g), "%s: autodiff: %s", what, diag_text(g->ctx));
  Maps m;
  draw(g, s, &m);
  Tensor *out = calloc((size_t)g->n_outputs, sizeof *out);
  char err[512];
  ck_assert_msg(ir_eval(g, &m.inputs, &m.params, out, err, sizeof err), "%s: ir_eval: %s", what, err);
  int grads = 0;
  for (int p = 0; p < m.params.n; p++) {
    Tensor *pt = &m.params.tensors[p];
    if (!ir_dtype_is_float(pt->type.dtype)) continue;
    char name[128];
    snprintf(name, sizeof name, "%s.grad", m.params.names[p]);
    int o = 1;
    while (o < g->n_outputs && strcmp(g->output_names[o], name) != 0) o++;
    bool frozen = false;
    for (int f = 0; f < 2; f++) frozen |= s->frozen[f] && strcmp(s->frozen[f], m.params.names[p]) == 0;
    if (frozen) {
      ck_assert_msg(o == g->n_outputs, "%s: frozen %s has a gradient", what, m.params.names[p]);
      continue;
    }
    ck_assert_msg(o < g->n_outputs, "%s: no output %s", what, name);
    grads++;
    const Tensor *an = &out[o];
    ck_assert(ir_type_eq(&an->type, &pt->type));
    int64_t count = ir_type_numel(&pt->type);
    double scale = 1;
    for (int64_t j = 0; j < count; j++) scale = fmax(scale, fabs(ir_tensor_get(an, j)));
    for (int k = 0; k < 16 && k < count; k++) {
      int64_t j = count <= 16 ? k : irand(0, count - 1);
      double v = ir_tensor_get(pt, j), h = 1e-6;
      ir_tensor_set(pt, j, v + h);
      double up = loss_of(g, &m);
      ir_tensor_set(pt, j, v - h);
      double down = loss_of(g, &m);
      ir_tensor_set(pt, j, v);
      double fd = (up - down) / (2 * h), got = ir_tensor_get(an, j);
      ck_assert_msg(fabs(fd - got) <= 1e-6 * scale, "%s: d loss / d %s[%lld]: autodiff %.12g, finite differences %.12g",
                    what, m.params.names[p], (long long)j, got, fd);
    }
  }
  ck_assert_int_gt(grads, 0);
  for (int i = 0; i < g->n_outputs; i++) ir_tensor_free(&out[i]);
  free(out);
  release(&m);
}

static Spec spec(Range r) { return (Spec){.range = r, .int_hi = 2}; }

/* check_fd, then the context goes. */
static void check_with(Ctx *c, Graph *g, const char *what, const Spec *s) {
  check_fd(g, what, s);
  ctx_free(c);
}

static void check_any(Ctx *c, Graph *g, const char *what) {
  Spec s = spec(ANY);
  check_with(c, g, what, &s);
}

/* ---- elementwise ---- */

typedef struct Unary {
  OpKind op;
  Range range;
} Unary;

START_TEST(test_unary) {
  static const Unary ops[] = {
      {OP_NEG, ANY}, {OP_ABS, ANY}, {OP_RELU, ANY}, {OP_LEAKY_RELU, ANY}, {OP_CLIP, ANY},
      {OP_SIGMOID, ANY}, {OP_TANH, ANY}, {OP_GELU, ANY}, {OP_SILU, ANY},
      {OP_HARDSIGMOID, {0.2, 4, false}}, {OP_HARDSWISH, {0.2, 4, false}}, {OP_EXP, ANY},
      {OP_LOG, {0.2, 2, true}}, {OP_SQRT, {0.2, 2, true}}, {OP_RSQRT, {0.2, 2, true}}, {OP_ERF, ANY},
      {OP_RECIPROCAL, ANY}, {OP_SIN, ANY}, {OP_COS, ANY}, {OP_TAN, {0.1, 1.2, false}},
      {OP_ASIN, {0.05, 0.9, false}}, {OP_ACOS, {0.05, 0.9, false}}, {OP_ATAN, ANY}, {OP_SINH, ANY},
      {OP_COSH, ANY}, {OP_ASINH, ANY}, {OP_ACOSH, {1.1, 3, true}}, {OP_ATANH, {0.05, 0.9, false}},
  };
  for (size_t i = 0; i < ARRAY_LEN(ops); i++)
    for (int trial = 0; trial < 3; trial++) {
      Ctx c;
      Graph *g = begin(&c);
      int64_t dims[DL_MAX_RANK];
      int r = rand_shape(0, 3, dims);
      Node *n = node(g, ops[i].op, 1, (Value *[]){param(g, "x", r, dims)});
      if (ops[i].op == OP_CLIP) ir_set_float(g, n, "min", -0.7), ir_set_float(g, n, "max", 0.9);
      if (ops[i].op == OP_GELU && trial == 1) ir_set_str(g, n, "approximate", "tanh");
      output(g, fin(g, n));
      Spec s = spec(ops[i].range);
      check_with(&c, g, ir_ops[ops[i].op].name, &s);
    }
}
END_TEST

START_TEST(test_binary) {
  static const Unary ops[] = {{OP_ADD, ANY}, {OP_SUB, ANY}, {OP_MUL, ANY}, {OP_DIV, ANY},
                              {OP_POW, {0.3, 2, true}}, {OP_MAXIMUM, ANY}, {OP_MINIMUM, ANY},
                              {OP_MOD, {0.2, 3, false}}};
  for (size_t i = 0; i < ARRAY_LEN(ops); i++)
    for (int trial = 0; trial < 4; trial++) {
      Ctx c;
      Graph *g = begin(&c);
      int64_t a[DL_MAX_RANK], b[DL_MAX_RANK];
      int ra = rand_shape(0, 4, a), rb = partner(ra, a, b);
      Value *pa = param(g, "a", ra, a), *pb = param(g, "b", rb, b);
      Node *n = node(g, ops[i].op, 2, trial & 1 ? (Value *[]){pb, pa} : (Value *[]){pa, pb});
      if (ops[i].op == OP_MOD) ir_set_int(g, n, "fmod", trial >> 1); /* Python's remainder, then C's fmod */
      output(g, fin(g, n));
      Spec s = spec(ops[i].range);
      check_with(&c, g, ir_ops[ops[i].op].name, &s);
    }
}
END_TEST

/* where's condition comes from a comparison of an input (no gradient),
 * its branches broadcast. */
START_TEST(test_where) {
  for (int trial = 0; trial < 4; trial++) {
    Ctx c;
    Graph *g = begin(&c);
    int64_t a[DL_MAX_RANK], b[DL_MAX_RANK];
    int ra = rand_shape(1, 3, a), rb = partner(ra, a, b);
    Value *cx = source(g, OP_INPUT, "cx", TY_F64, ra, a);
    Value *cond = op2(g, OP_GREATER, cx, ir_grad_scalar(g, (SrcLoc){0}, 0, TY_F64));
    Value *pa = param(g, "a", rb, b), *pb = param(g, "b", trial & 1 ? ra : 0, a);
    output(g, fin(g, node(g, OP_WHERE, 3, (Value *[]){cond, pa, pb})));
    check_any(&c, g, "where");
  }
}
END_TEST

/* x * x + exp(x): the gradients of x's three uses add up. */
START_TEST(test_several_uses) {
  Ctx c;
  Graph *g = begin(&c);
  Value *x = param(g, "x", 2, (int64_t[]){2, 3});
  output(g, op2(g, OP_ADD, op2(g, OP_MUL, x, x), op1(g, OP_EXP, x)));
  check_any(&c, g, "x*x + exp(x)");
}
END_TEST

/* ---- reductions and normalizations ---- */

START_TEST(test_reduce) {
  static const OpKind ops[] = {OP_REDUCE_SUM, OP_REDUCE_MEAN, OP_REDUCE_MAX, OP_REDUCE_MIN, OP_REDUCE_PROD};
  for (size_t i = 0; i < ARRAY_LEN(ops); i++)
    for (int trial = 0; trial < 4; trial++) {
      Ctx c;
      Graph *g = begin(&c);
      int64_t dims[DL_MAX_RANK], axes[DL_MAX_RANK];
      int r = rand_shape(1, 4, dims), n = 0;
      for (int d = 0; d < r; d++)
        if (urand() < 0.5) axes[n++] = d;
      if (!n) axes[n++] = r - 1;
      Node *nd = node(g, ops[i], 1, (Value *[]){param(g, "x", r, dims)});
      ints(g, nd, "axes", n, axes);
      ir_set_int(g, nd, "keepdims", trial & 1);
      output(g, fin(g, nd));
      check_any(&c, g, ir_ops[ops[i]].name);
    }
}
END_TEST

/* reduce_prod over rows with two zeros, one, none: the product of the
 * others, never 0 * inf (the loss is linear in each element, so the
 * finite differences at an exact 0 are exact too). */
START_TEST(test_reduce_prod_zeros) {
  static const int64_t shapes[][2] = {{3, 4}, {4, 3}};
  for (int i = 0; i < 2; i++) {
    Ctx c;
    Graph *g = begin(&c);
    Node *n = node(g, OP_REDUCE_PROD, 1, (Value *[]){param(g, "x", 2, shapes[i])});
    ints(g, n, "axes", 1, (int64_t[]){1});
    output(g, fin(g, n));
    Spec s = spec(ANY);
    s.zero_every = i ? 4 : 3; /* rows {0,3}, {6}, {9}; then {0}, {4}, {8}, none */
    check_with(&c, g, "reduce_prod with zeros", &s);
  }
}
END_TEST

START_TEST(test_softmax) {
  for (int i = 0; i < 6; i++) {
    Ctx c;
    Graph *g = begin(&c);
    int64_t dims[DL_MAX_RANK];
    int r = rand_shape(1, 3, dims);
    Node *n = node(g, i & 1 ? OP_LOG_SOFTMAX : OP_SOFTMAX, 1, (Value *[]){param(g, "x", r, dims)});
    ir_set_int(g, n, "axis", irand(0, r - 1));
    output(g, fin(g, n));
    check_any(&c, g, ir_ops[n->op].name);
  }
}
END_TEST

/* layernorm with no weight, a weight, both; rms_norm with and without
 * its weight. */
START_TEST(test_layernorm) {
  for (int i = 0; i < 10; i++) {
    Ctx c;
    Graph *g = begin(&c);
    int64_t dims[DL_MAX_RANK];
    int r = rand_shape(1, 3, dims), axis = (int)irand(0, r - 1);
    if (dims[r - 1] == 1) dims[r - 1] = 3; /* a row of one is 0 over eps */
    Value *in[3] = {param(g, "x", r, dims), param(g, "w", r - axis, dims + axis),
                    param(g, "b", r - axis, dims + axis)};
    bool rms = i >= 6;
    Node *n = node(g, rms ? OP_RMS_NORM : OP_LAYERNORM, rms ? i % 2 + 1 : i % 3 + 1, in);
    ir_set_int(g, n, "axis", axis);
    output(g, fin(g, n));
    check_any(&c, g, ir_ops[n->op].name);
  }
}
END_TEST

/* group_norm over [N, C, ...] of rank 2 to 4, one group to one a
 * channel, with and without its weight and bias. */
START_TEST(test_group_norm) {
  for (int i = 0; i < 6; i++) {
    Ctx c;
    Graph *g = begin(&c);
    int64_t groups = irand(1, 3), dims[DL_MAX_RANK] = {irand(1, 2), groups * irand(1, 2)};
    int r = (int)irand(2, 4);
    int64_t group = dims[1] / groups;
    for (int d = 2; d < r; d++) group *= dims[d] = irand(1, 3);
    if (group == 1) { /* a group of one is 0 over eps */
      if (r == 2) dims[1] = groups * 2;
      else dims[r - 1] = 2;
    }
    Value *in[3] = {param(g, "x", r, dims), param(g, "w", 1, dims + 1), param(g, "b", 1, dims + 1)};
    Node *n = node(g, OP_GROUP_NORM, i % 3 == 1 ? 1 : 3, in);
    ir_set_int(g, n, "groups", groups);
    output(g, fin(g, n));
    check_any(&c, g, "group_norm");
  }
}
END_TEST

START_TEST(test_global_avgpool) {
  Ctx c;
  Graph *g = begin(&c);
  output(g, op1(g, OP_GLOBAL_AVGPOOL, param(g, "x", 4, (int64_t[]){2, 3, 3, 2})));
  check_any(&c, g, "global_avgpool");
}
END_TEST

/* batchnorm, in training mode (batch statistics) and frozen (inference
 * mode: the running statistics are buffers, with no gradient). */
static Graph *batchnorm_graph(Ctx *c, int rank, const int64_t *dims) {
  Graph *g = begin(c);
  int64_t ch = dims[1];
  Value *in[5] = {param(g, "x", rank, dims)};
  static const char *const names[] = {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"};
  for (int k = 0; k < 4; k++) in[k + 1] = param(g, names[k], 1, &ch);
  output(g, fin(g, node(g, OP_BATCHNORM, 5, in)));
  return g;
}

START_TEST(test_batchnorm) {
  static const int64_t shapes[][4] = {{3, 2}, {2, 3, 4}, {2, 2, 3, 2}, {1, 2, 1, 3}};
  static const int ranks[] = {2, 3, 4, 4};
  for (int i = 0; i < 10; i++) {
    Ctx c;
    Graph *g = batchnorm_graph(&c, ranks[i % 4], shapes[i % 4]);
    Spec s = spec((Range){0.3, 1.5, i >= 4 && i < 8});
    s.ad.inference = i >= 4 && i < 8;
    /* --sync-bn, the all-reduces the identity in one process: the rule
     * of allreduce_mean carries the statistics' gradients */
    s.ad.sync_bn = i >= 8 ? 3 : 0;
    s.frozen[0] = "bn.running_mean", s.frozen[1] = "bn.running_var";
    check_with(&c, g, i >= 8 ? "batchnorm (sync)" : i >= 4 ? "batchnorm (frozen)" : "batchnorm (training)", &s);
  }
}
END_TEST

/* --sync-bn over K ranks: the mean and the variance each pass through an
 * allreduce_mean, and the running variance is unbiased over the K * m
 * values of the global batch, not the m of this rank's. */
START_TEST(test_sync_batchnorm_running_var) {
  static const int64_t dims[] = {2, 3, 2, 2};
  const double m = 2 * 2 * 2, K = 3, momentum = 0.1;
  Ctx c[2];
  Graph *g[2];
  Tensor out[2][2];
  Maps maps;
  for (int k = 0; k < 2; k++) {
    g[k] = batchnorm_graph(&c[k], 4, dims);
    ck_assert(pass_train_mode(g[k], &(AutodiffOptions){.sync_bn = k ? (int)K : 0}) && ir_verify(g[k]));
    int reduces = 0;
    for (Node *n = g[k]->first; n; n = n->next) reduces += n->op == OP_ALLREDUCE_MEAN;
    ck_assert_int_eq(reduces, k ? 2 : 0);
    ck_assert_int_eq(g[k]->n_outputs, 3);
    ck_assert_str_eq(ir_output_update(g[k], 2), "bn.running_var");
    Spec s = spec((Range){0.3, 1.5, true});
    if (!k) draw(g[0], &s, &maps);
    char err[256];
    Tensor all[3];
    ck_assert_msg(ir_eval(g[k], &maps.inputs, &maps.params, all, err, sizeof err), "%s", err);
    out[k][0] = all[2];
    ir_tensor_free(&all[0]);
    ir_tensor_free(&all[1]);
  }
  const Tensor *running = &maps.params.tensors[4];
  ck_assert_str_eq(maps.params.names[4], "bn.running_var");
  for (int64_t j = 0; j < dims[1]; j++) {
    double old = (1 - momentum) * ir_tensor_get(running, j);
    double var_one = (ir_tensor_get(&out[0][0], j) - old) / momentum * (m - 1) / m;
    double var_sync = (ir_tensor_get(&out[1][0], j) - old) / momentum * (K * m - 1) / (K * m);
    ck_assert_double_eq_tol(var_sync, var_one, 1e-12);
  }
  for (int k = 0; k < 2; k++) ir_tensor_free(&out[k][0]), ctx_free(&c[k]);
  release(&maps);
}
END_TEST

/* A per-channel weight's gradient is its reduction itself, not a reshape
 * of a keepdims one. */
START_TEST(test_channel_grads_unreshaped) {
  Ctx c;
  Graph *g = begin(&c);
  int64_t ch = 3;
  Value *in[5] = {param(g, "x", 4, (int64_t[]){2, 3, 2, 2})};
  static const char *const names[] = {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"};
  for (int k = 0; k < 4; k++) in[k + 1] = param(g, names[k], 1, &ch);
  Value *y = fin(g, node(g, OP_BATCHNORM, 5, in));
  output(g, ir_grad_sum(g, (SrcLoc){0}, op2(g, OP_MUL, y, y), 4, (int64_t[]){0, 1, 2, 3}, false));
  ck_assert_msg(pass_autodiff(g, NULL), "%s", diag_text(&c));
  int found = 0;
  for (int i = 0; i < g->n_outputs; i++)
    if (strcmp(g->output_names[i], "bn.weight.grad") == 0 || strcmp(g->output_names[i], "bn.bias.grad") == 0) {
      ck_assert_msg(g->outputs[i]->def->op == OP_REDUCE_SUM, "%s comes from %s", g->output_names[i],
                    ir_ops[g->outputs[i]->def->op].name);
      found++;
    }
  ck_assert_int_eq(found, 2);
  ctx_free(&c);
}
END_TEST

/* ---- products ---- */

/* NumPy's matmul with 1-d operands and broadcast batch dims; from trial
 * 10 on, operands of rank >= 2 read transposed (trans_a, trans_b) as the
 * gradients' own products are; from trial 16 on, a batched a times one
 * matrix b (read transposed or not), whose gradient is one product over
 * the batches' rows. */
START_TEST(test_matmul) {
  for (int trial = 0; trial < 20; trial++) {
    Ctx c;
    Graph *g = begin(&c);
    int ra = (int)irand(1, 4), rb = (int)irand(1, 4);
    if (trial < 3) ra = trial == 0 ? 1 : 2, rb = trial == 1 ? 1 : 3;
    /* Batch dims aligned from the right, each side's sometimes 1. */
    int nba = ra > 2 ? ra - 2 : 0, nbb = rb > 2 ? rb - 2 : 0, nb = nba > nbb ? nba : nbb;
    int64_t batch[DL_MAX_RANK], ad[DL_MAX_RANK], bd[DL_MAX_RANK];
    for (int d = 0; d < nb; d++) batch[d] = irand(1, 3);
    for (int d = 0; d < nba; d++) ad[d] = urand() < 0.3 ? 1 : batch[nb - nba + d];
    for (int d = 0; d < nbb; d++) bd[d] = urand() < 0.3 ? 1 : batch[nb - nbb + d];
    int64_t m = irand(1, 3), k = irand(1, 4), n = irand(1, 3);
    if (ra == 1) ad[0] = k;
    else ad[ra - 2] = m, ad[ra - 1] = k;
    if (rb == 1) bd[0] = k;
    else bd[rb - 2] = k, bd[rb - 1] = n;
    bool ta = trial >= 10 && ra >= 2 && (trial & 1), tb = trial >= 10 && rb >= 2 && (trial & 2);
    if (trial >= 16) {
      ra = trial & 2 ? 4 : 3, rb = 2, ta = false, tb = trial & 1;
      nba = ra - 2, nbb = 0;
      for (int d = 0; d < nba; d++) ad[d] = irand(1, 3);
      ad[ra - 2] = m, ad[ra - 1] = k;
      bd[0] = tb ? n : k, bd[1] = tb ? k : n;
    }
    if (ta) ad[ra - 2] = k, ad[ra - 1] = m;
    if (tb) bd[rb - 2] = n, bd[rb - 1] = k;
    Node *mn = node(g, OP_MATMUL, 2, (Value *[]){param(g, "a", ra, ad), param(g, "b", rb, bd)});
    if (ta) ir_set_int(g, mn, "trans_a", 1);
    if (tb) ir_set_int(g, mn, "trans_b", 1);
    output(g, fin(g, mn));
    check_any(&c, g, ta || tb ? "matmul (transposed)" : "matmul");
  }
}
END_TEST

START_TEST(test_linear) {
  for (int trial = 0; trial < 6; trial++) {
    Ctx c;
    Graph *g = begin(&c);
    int64_t in = irand(1, 4), out = irand(1, 4), x[DL_MAX_RANK];
    int r = (int)irand(1, 3);
    for (int d = 0; d < r - 1; d++) x[d] = irand(1, 3);
    x[r - 1] = in;
    Value *ops[3] = {param(g, "x", r, x), param(g, "fc.weight", 2, (int64_t[]){out, in}),
                     param(g, "fc.bias", 1, &out)};
    output(g, fin(g, node(g, OP_LINEAR, 2 + (trial & 1), ops)));
    check_any(&c, g, "linear");
  }
}
END_TEST

/* A window op over x with these attributes (NULL: the default). */
typedef struct Window {
  int nsp;
  int64_t x[5], k[3];
  int64_t cout, groups;
  int64_t stride[3], pad[6], dilation[3], output_pad[3];
  int ceil_mode, include_pad;
} Window;

static void window_attrs(Graph *g, Node *n, const Window *w, bool pool) {
  int s = w->nsp;
  static const int64_t ones[3] = {1, 1, 1};
  ints(g, n, "stride", s, w->stride[0] ? w->stride : ones);
  ints(g, n, "pad", 2 * s, w->pad);
  ints(g, n, "dilation", s, w->dilation[0] ? w->dilation : ones);
  if (pool) {
    ints(g, n, "kernel", s, w->k);
    ir_set_int(g, n, "ceil_mode", w->ceil_mode);
  } else {
    ir_set_int(g, n, "groups", w->groups ? w->groups : 1);
  }
}

static const Window convs[] = {
    {2, {2, 3, 5, 4}, {3, 2}, 4, 1, {0}, {0}, {0}, {0}, 0, 0},
    {2, {1, 4, 7, 6}, {3, 3}, 6, 2, {2, 1}, {1, 0, 2, 1}, {1, 2}, {0}, 0, 0},
    {2, {2, 4, 6, 6}, {2, 2}, 4, 4, {2, 2}, {1, 1, 0, 0}, {0}, {0}, 0, 0},
    {2, {1, 2, 1, 5}, {1, 3}, 3, 1, {1, 2}, {0, 1, 0, 1}, {0}, {0}, 0, 0},
    {3, {1, 2, 4, 3, 3}, {2, 2, 2}, 2, 1, {2, 1, 1}, {1, 0, 1, 0, 1, 0}, {0}, {0}, 0, 0},
};

START_TEST(test_conv) {
  for (size_t i = 0; i < ARRAY_LEN(convs); i++) {
    const Window *w = &convs[i];
    Ctx c;
    Graph *g = begin(&c);
    int64_t wd[5] = {w->cout, w->x[1] / (w->groups ? w->groups : 1)};
    memcpy(wd + 2, w->k, sizeof(int64_t) * (size_t)w->nsp);
    Value *in[3] = {param(g, "x", 2 + w->nsp, w->x), param(g, "conv.weight", 2 + w->nsp, wd),
                    param(g, "conv.bias", 1, &w->cout)};
    Node *n = node(g, w->nsp == 3 ? OP_CONV3D : OP_CONV2D, 2 + (i & 1), in);
    window_attrs(g, n, w, false);
    output(g, fin(g, n));
    check_any(&c, g, ir_ops[n->op].name);
  }
}
END_TEST

START_TEST(test_conv_transpose) {
  static const Window cts[] = {
      {2, {2, 3, 3, 2}, {2, 3}, 2, 1, {2, 1}, {0, 1, 1, 0}, {0}, {1, 0}, 0, 0},
      {2, {1, 4, 2, 3}, {3, 2}, 6, 2, {1, 2}, {1, 0, 0, 0}, {2, 1}, {0, 1}, 0, 0},
      {3, {1, 2, 2, 2, 2}, {2, 1, 2}, 2, 1, {2, 1, 1}, {0, 0, 1, 0, 0, 0}, {0}, {1, 0, 0}, 0, 0},
  };
  for (size_t i = 0; i < ARRAY_LEN(cts); i++) {
    const Window *w = &cts[i];
    Ctx c;
    Graph *g = begin(&c);
    int64_t wd[5] = {w->x[1], w->cout / (w->groups ? w->groups : 1)};
    memcpy(wd + 2, w->k, sizeof(int64_t) * (size_t)w->nsp);
    Value *in[3] = {param(g, "x", 2 + w->nsp, w->x), param(g, "up.weight", 2 + w->nsp, wd),
                    param(g, "up.bias", 1, &w->cout)};
    Node *n = node(g, w->nsp == 3 ? OP_CONV_TRANSPOSE3D : OP_CONV_TRANSPOSE2D, 3 - (int)(i & 1), in);
    window_attrs(g, n, w, false);
    ints(g, n, "output_pad", w->nsp, w->output_pad);
    output(g, fin(g, n));
    check_any(&c, g, ir_ops[n->op].name);
  }
}
END_TEST

START_TEST(test_pool) {
  static const Window pools[] = {
      {2, {2, 2, 5, 4}, {2, 2}, 0, 0, {2, 2}, {0}, {0}, {0}, 0, 1},
      {2, {1, 3, 7, 6}, {3, 2}, 0, 0, {2, 2}, {1, 0, 1, 1}, {0}, {0}, 1, 0},
      {2, {1, 2, 6, 5}, {3, 3}, 0, 0, {1, 2}, {1, 1, 1, 1}, {0}, {0}, 0, 1},
      {2, {1, 1, 7, 7}, {2, 3}, 0, 0, {2, 1}, {0, 1, 1, 0}, {2, 2}, {0}, 1, 0},
      {3, {1, 2, 4, 3, 5}, {2, 2, 3}, 0, 0, {2, 1, 2}, {1, 0, 1, 0, 0, 1}, {0}, {0}, 1, 0},
  };
  for (size_t i = 0; i < 2 * ARRAY_LEN(pools); i++) {
    const Window *w = &pools[i / 2];
    bool avg = i & 1;
    if (avg && w->dilation[0] > 1) continue; /* avgpool has no dilation in PyTorch; ours is 1 */
    Ctx c;
    Graph *g = begin(&c);
    OpKind op = w->nsp == 3 ? (avg ? OP_AVGPOOL3D : OP_MAXPOOL3D) : avg ? OP_AVGPOOL2D : OP_MAXPOOL2D;
    Node *n = node(g, op, 1, (Value *[]){param(g, "x", 2 + w->nsp, w->x)});
    window_attrs(g, n, w, true);
    if (avg) ir_set_int(g, n, "count_include_pad", w->include_pad);
    output(g, fin(g, n));
    check_any(&c, g, ir_ops[op].name);
  }
}
END_TEST

/* Nearest resize by whole factors (1 to 3 per axis, size-1 axes: block
 * sums), then any sizes up or down, nearest and bilinear with and
 * without align_corners (resize_grad). */
START_TEST(test_resize) {
  static const char *const modes[] = {"nearest", "nearest", "bilinear", "bilinear"};
  for (int trial = 0; trial < 12; trial++) {
    Ctx c;
    Graph *g = begin(&c);
    int64_t d[4] = {irand(1, 2), irand(1, 2), irand(1, 4), irand(1, 4)};
    Node *n = node(g, OP_RESIZE, 1, (Value *[]){param(g, "x", 4, d)});
    if (trial < 4)
      ints(g, n, "size", 2, (int64_t[]){d[2] * irand(1, 3), d[3] * irand(1, 3)});
    else
      ints(g, n, "size", 2, (int64_t[]){irand(1, 7), irand(1, 7)});
    ir_set_str(g, n, "mode", modes[trial % 4]);
    if (trial % 4 == 3) ir_set_int(g, n, "align_corners", 1);
    output(g, fin(g, n));
    char what[64];
    snprintf(what, sizeof what, "resize (%s%s)", modes[trial % 4], trial % 4 == 3 ? ", align_corners" : "");
    check_any(&c, g, what);
  }
}
END_TEST

/* ---- data movement ---- */

START_TEST(test_movement) {
  for (int trial = 0; trial < 6; trial++) {
    Ctx c;
    Graph *g = begin(&c);
    int64_t d[DL_MAX_RANK] = {irand(1, 3), irand(2, 4), irand(1, 3)};
    Value *x = param(g, "x", 3, d);
    /* transpose, reshape, expand, slice (strided) and pad in a chain */
    Value *t = op_ints(g, OP_TRANSPOSE, x, "perm", 3, (int64_t[]){2, 0, 1});
    Value *r = op_ints(g, OP_RESHAPE, t, "shape", 2, (int64_t[]){d[2] * d[0], d[1]});
    Value *e = op_ints(g, OP_EXPAND, r, "shape", 3, (int64_t[]){2, d[2] * d[0], d[1]});
    int64_t step = irand(1, 3), start = irand(0, 1);
    Node *sn = node(g, OP_SLICE, 1, &e);
    ints(g, sn, "starts", 3, (int64_t[]){0, 0, start});
    ints(g, sn, "ends", 3, (int64_t[]){2, d[2] * d[0], d[1]});
    ints(g, sn, "steps", 3, (int64_t[]){1 + (trial & 1), 1, step});
    Node *pn = node(g, OP_PAD, 1, (Value *[]){fin(g, sn)});
    ints(g, pn, "pads", 6, (int64_t[]){0, 1, 2, 1, 0, 1});
    ir_set_float(g, pn, "value", 0.5);
    Value *p = fin(g, pn);
    output(g, p);
    check_any(&c, g, "transpose/reshape/expand/slice/pad");
  }
}
END_TEST

START_TEST(test_concat) {
  for (int trial = 0; trial < 4; trial++) {
    Ctx c;
    Graph *g = begin(&c);
    int64_t dims[DL_MAX_RANK];
    int r = rand_shape(1, 3, dims), axis = (int)irand(0, r - 1);
    Value *in[3];
    for (int i = 0; i < 3; i++) {
      int64_t di[DL_MAX_RANK];
      memcpy(di, dims, sizeof di);
      di[axis] = irand(1, 3);
      in[i] = param(g, i == 0 ? "a" : i == 1 ? "b" : "c", r, di);
    }
    Node *n = node(g, OP_CONCAT, 3, in);
    ir_set_int(g, n, "axis", axis);
    output(g, fin(g, n));
    check_any(&c, g, "concat");
  }
}
END_TEST

/* gather along axis 0 (an embedding) and along a middle axis with 2-d
 * indices, negative ones and repeats; gather_elements, gather_nd and topk. */
START_TEST(test_gather) {
  for (int axis = 0; axis < 2; axis++) {
    Ctx c;
    Graph *g = begin(&c);
    int64_t dd[3] = {4, 5, 2};
    Value *data = param(g, "emb.weight", axis ? 3 : 2, dd);
    Value *ids = source(g, OP_INPUT, "ids", TY_I64, 2, (int64_t[]){3, 4});
    Node *n = node(g, OP_GATHER, 2, (Value *[]){data, ids});
    ir_set_int(g, n, "axis", axis);
    output(g, fin(g, n));
    Spec s = spec(ANY);
    s.int_lo = -4, s.int_hi = 4;
    check_with(&c, g, "gather", &s);
  }
  Ctx c;
  Graph *g = begin(&c);
  Value *data = param(g, "x", 2, (int64_t[]){3, 4});
  Node *n = node(g, OP_GATHER_ELEMENTS, 2, (Value *[]){data, source(g, OP_INPUT, "i", TY_I64, 2, (int64_t[]){3, 5})});
  ir_set_int(g, n, "axis", 1);
  Value *ge = fin(g, n);
  Value *nd = op2(g, OP_GATHER_ND, param(g, "z", 3, (int64_t[]){3, 2, 2}),
                  source(g, OP_INPUT, "j", TY_I64, 3, (int64_t[]){3, 5, 2}));
  Value *nds = ir_grad_sum(g, (SrcLoc){0}, nd, 1, (int64_t[]){2}, false);
  Node *tk = node(g, OP_TOPK, 1, (Value *[]){param(g, "t", 2, (int64_t[]){3, 6})});
  ir_set_int(g, tk, "k", 5);
  ir_set_int(g, tk, "axis", 1);
  Value *y = op2(g, OP_ADD, op2(g, OP_ADD, ge, nds), fin(g, tk));
  output(g, y);
  Spec s = spec(ANY);
  s.int_hi = 2;
  check_with(&c, g, "gather_elements/gather_nd/topk", &s);
}
END_TEST

/* One index per position along the axis (cross_entropy's pick, topk
 * with k = 1): the backward is a select, not a scatter; negative
 * indices count from the end. */
START_TEST(test_gather_one_per_position) {
  Ctx c;
  Graph *g = begin(&c);
  Value *x = param(g, "x", 2, (int64_t[]){4, 4}), *y = NULL;
  for (int axis = 0; axis < 2; axis++) {
    int64_t id[2] = {axis ? 4 : 1, axis ? 1 : 4};
    char name[8];
    snprintf(name, sizeof name, "i%d", axis);
    Node *n = node(g, OP_GATHER_ELEMENTS, 2, (Value *[]){x, source(g, OP_INPUT, name, TY_I64, 2, id)});
    ir_set_int(g, n, "axis", axis);
    Value *picked = ir_grad_sum(g, (SrcLoc){0}, fin(g, n), 2, (int64_t[]){0, 1}, false);
    y = y ? op2(g, OP_ADD, y, picked) : picked;
  }
  Node *tk = node(g, OP_TOPK, 1, (Value *[]){param(g, "t", 2, (int64_t[]){3, 6})});
  ir_set_int(g, tk, "k", 1);
  ir_set_int(g, tk, "axis", 0);
  output(g, op2(g, OP_ADD, y, ir_grad_sum(g, (SrcLoc){0}, fin(g, tk), 2, (int64_t[]){0, 1}, false)));
  Spec s = spec(ANY);
  s.int_lo = -4, s.int_hi = 4;
  check_fd(g, "gather_elements/topk one per position", &s);
  /* the backward (autodiff ran on g) selects; it has no scatter */
  for (Node *n = g->first; n; n = n->next) ck_assert_int_ne(n->op, OP_SCATTER_ELEMENTS);
  ctx_free(&c);
}
END_TEST

/* gather_nd with batch dims (1 and 2): the scatter-add at the indices
 * with each element's batch coordinates in front. */
START_TEST(test_gather_nd_batch) {
  for (int b = 1; b <= 2; b++) {
    Ctx c;
    Graph *g = begin(&c);
    Value *data = param(g, "z", 3, (int64_t[]){2, 3, 4});
    Value *ids = source(g, OP_INPUT, "j", TY_I64, 3, b == 1 ? (int64_t[]){2, 5, 1} : (int64_t[]){2, 3, 1});
    Node *n = node(g, OP_GATHER_ND, 2, (Value *[]){data, ids});
    ir_set_int(g, n, "batch_dims", b);
    output(g, fin(g, n));
    Spec s = spec(ANY);
    s.int_lo = -3, s.int_hi = 3;
    check_with(&c, g, b == 1 ? "gather_nd (batch_dims 1)" : "gather_nd (batch_dims 2)", &s);
  }
}
END_TEST

/* scatter_elements and scatter_nd: "add" with repeated indices, "none"
 * with one update per place (an overwritten update's gradient is
 * PyTorch's dy, not the finite differences' 0). */
START_TEST(test_scatter) {
  for (int add = 0; add < 2; add++) {
    Ctx c;
    Graph *g = begin(&c);
    Value *in[3] = {param(g, "x", 2, (int64_t[]){3, 4}), source(g, OP_INPUT, "i", TY_I64, 2, (int64_t[]){3, add ? 3 : 1}),
                    param(g, "u", 2, (int64_t[]){3, add ? 3 : 1})};
    Node *se = node(g, OP_SCATTER_ELEMENTS, 3, in);
    ir_set_int(g, se, "axis", 1);
    ir_set_str(g, se, "reduction", add ? "add" : "none");
    Value *nin[3] = {fin(g, se), source(g, OP_INPUT, "j", TY_I64, 2, (int64_t[]){add ? 4 : 1, 1}),
                     param(g, "v", 2, (int64_t[]){add ? 4 : 1, 4})};
    Node *sn = node(g, OP_SCATTER_ND, 3, nin);
    ir_set_str(g, sn, "reduction", add ? "add" : "none");
    output(g, fin(g, sn));
    Spec s = spec(ANY);
    s.int_lo = -3, s.int_hi = 3;
    check_with(&c, g, add ? "scatter (add)" : "scatter (none)", &s);
  }
}
END_TEST

/* The same mask in the backward: the gradient is the mask times the
 * scale, whatever the seed. */
START_TEST(test_dropout) {
  Ctx c;
  Graph *g = begin(&c);
  Value *in[3] = {param(g, "x", 2, (int64_t[]){5, 7}), source(g, OP_PARAM, "dlcc.seed", TY_I64, 0, NULL),
                  source(g, OP_PARAM, "dlcc.step", TY_I64, 0, NULL)};
  Node *n = node(g, OP_DROPOUT, 3, in);
  ir_set_float(g, n, "p", 0.4);
  output(g, op1(g, OP_TANH, fin(g, n)));
  Spec s = spec(ANY);
  s.int_hi = 1000;
  check_with(&c, g, "dropout", &s);
}
END_TEST

static void same_values(Graph *g, Graph *u, const Spec *s);

/* Training mode's unrolled layer (or written-out attention), and its
 * lstm split into layers, computes what the op computes. */
static void same_as_unrolled(Graph *g, const Spec *s) {
  for (int unroll = 0; unroll < 2; unroll++) {
    Graph *u = ir_copy(g, "unrolled");
    ck_assert(u && pass_train_mode(u, &(AutodiffOptions){.unroll_rnn = unroll}) && ir_verify(u));
    /* without unroll_rnn an lstm or gru stays, as one per layer */
    for (Node *n = u->first; n; n = n->next) {
      bool rnn = n->op == OP_LSTM || n->op == OP_GRU;
      ck_assert(!rnn || !unroll);
      if (rnn) ck_assert(ir_attr_int(n, "layers") == 1);
    }
    same_values(g, u, s);
  }
}

static void same_values(Graph *g, Graph *u, const Spec *s) {
  Maps m;
  draw(g, s, &m);
  Tensor a, b;
  char err[256];
  ck_assert_msg(ir_eval(g, &m.inputs, &m.params, &a, err, sizeof err), "%s", err);
  ck_assert_msg(ir_eval(u, &m.inputs, &m.params, &b, err, sizeof err), "%s", err);
  for (int64_t i = 0, count = ir_type_numel(&a.type); i < count; i++)
    ck_assert_double_eq_tol(ir_tensor_get(&b, i), ir_tensor_get(&a, i), 1e-12);
  ir_tensor_free(&a);
  ir_tensor_free(&b);
  release(&m);
}

/* lstm and gru through time: their sequence and last states flattened
 * into one output, every weight and the input checked.  Layers,
 * directions, layouts and biases vary. */
START_TEST(test_recurrent) {
  static const struct {
    OpKind op;
    int layers, bidirectional, batch_first, bias;
  } cases[] = {{OP_LSTM, 2, 1, 1, 1}, {OP_GRU, 1, 0, 0, 0}, {OP_LSTM, 1, 0, 0, 0}, {OP_GRU, 2, 1, 1, 1}};
  for (size_t k = 0; k < ARRAY_LEN(cases); k++) {
    Ctx c;
    Graph *g = begin(&c);
    int64_t N = 2, T = 3, I = 3, H = 2, G = cases[k].op == OP_LSTM ? 4 : 3;
    int dirs = cases[k].bidirectional ? 2 : 1, n_in = 1;
    Value *in[1 + 2 * 2 * 4];
    in[0] = param(g, "x", 3, cases[k].batch_first ? (int64_t[]){N, T, I} : (int64_t[]){T, N, I});
    for (int l = 0; l < cases[k].layers; l++)
      for (int d = 0; d < dirs; d++) {
        char name[32];
        int64_t width = l ? dirs * H : I;
        snprintf(name, sizeof name, "w_ih%d%d", l, d);
        in[n_in++] = param(g, arena_strdup(&c.arena, name), 2, (int64_t[]){G * H, width});
        snprintf(name, sizeof name, "w_hh%d%d", l, d);
        in[n_in++] = param(g, arena_strdup(&c.arena, name), 2, (int64_t[]){G * H, H});
        if (!cases[k].bias) continue;
        snprintf(name, sizeof name, "b_ih%d%d", l, d);
        in[n_in++] = param(g, arena_strdup(&c.arena, name), 1, (int64_t[]){G * H});
        snprintf(name, sizeof name, "b_hh%d%d", l, d);
        in[n_in++] = param(g, arena_strdup(&c.arena, name), 1, (int64_t[]){G * H});
      }
    Node *n = node(g, cases[k].op, n_in, in);
    ir_set_int(g, n, "hidden", H);
    ir_set_int(g, n, "layers", cases[k].layers);
    ir_set_int(g, n, "bidirectional", cases[k].bidirectional);
    ir_set_int(g, n, "batch_first", cases[k].batch_first);
    ir_set_int(g, n, "bias", cases[k].bias);
    fin(g, n);
    Value *flat[3];
    for (int r = 0; r < n->n_out; r++) {
      int64_t count = ir_type_numel(&n->out[r].type);
      flat[r] = op_ints(g, OP_RESHAPE, &n->out[r], "shape", 1, &count);
    }
    Node *cat = node(g, OP_CONCAT, n->n_out, flat);
    ir_set_int(g, cat, "axis", 0);
    output(g, fin(g, cat));
    Spec s = spec(ANY);
    same_as_unrolled(g, &s);
    check_with(&c, g, ir_ops[cases[k].op].name, &s);
  }
}
END_TEST

/* softmax(q k^T / 2) v: attention as the frontend writes it. */
START_TEST(test_attention) {
  Ctx c;
  Graph *g = begin(&c);
  Value *q = param(g, "q", 3, (int64_t[]){2, 3, 4}), *k = param(g, "k", 3, (int64_t[]){2, 5, 4});
  Value *v = param(g, "v", 3, (int64_t[]){2, 5, 2});
  Node *kt = node(g, OP_TRANSPOSE, 1, &k);
  ints(g, kt, "perm", 3, (int64_t[]){0, 2, 1});
  Value *scores = op2(g, OP_MUL, op2(g, OP_MATMUL, q, fin(g, kt)), ir_grad_scalar(g, (SrcLoc){0}, 0.5, TY_F64));
  Node *sm = node(g, OP_SOFTMAX, 1, &scores);
  ir_set_int(g, sm, "axis", 2);
  output(g, op2(g, OP_MATMUL, fin(g, sm), v));
  check_any(&c, g, "attention");
}
END_TEST

/* The attention op: its gradients (attention_lse and attention_grad, or
 * written out as matmuls and a softmax where its additive mask is a
 * param that trains: the same values as the op first), then the plain
 * op's (its rule recomputes the lse), with grouped K/V heads, both
 * layouts, a boolean mask (rows with no key left give zeros and no NaN
 * in the gradient), an additive one, a learned one, causal. */
START_TEST(test_attention_op) {
  static const struct {
    const char *layout;
    int64_t hq, hkv;
    int mask; /* 0 none, 1 bool [B, 1, Sq, Sk], 2 additive [Sq, Sk], 3 a param [1, H, Sq, Sk] */
    int causal;
  } cases[] = {{"bhsd", 2, 1, 0, 0}, {"bshd", 2, 2, 1, 1}, {"bhsd", 4, 2, 2, 0}, {"bshd", 2, 1, 1, 0},
               {"bhsd", 2, 1, 3, 1}, {"bshd", 4, 1, 0, 1}};
  for (size_t k = 0; k < ARRAY_LEN(cases); k++) {
    Ctx c;
    Graph *g = begin(&c);
    bool bshd = cases[k].layout[1] == 's';
    int64_t B = 2, Sq = 3, Sk = 2, d = 4, hq = cases[k].hq, hkv = cases[k].hkv;
    Value *in[4];
    in[0] = param(g, "q", 4, bshd ? (int64_t[]){B, Sq, hq, d} : (int64_t[]){B, hq, Sq, d});
    in[1] = param(g, "k", 4, bshd ? (int64_t[]){B, Sk, hkv, d} : (int64_t[]){B, hkv, Sk, d});
    in[2] = param(g, "v", 4, bshd ? (int64_t[]){B, Sk, hkv, d} : (int64_t[]){B, hkv, Sk, d});
    if (cases[k].mask == 1) in[3] = source(g, OP_INPUT, "mask", TY_BOOL, 4, (int64_t[]){B, 1, Sq, Sk});
    if (cases[k].mask == 2) in[3] = source(g, OP_INPUT, "mask", TY_F64, 2, (int64_t[]){Sq, Sk});
    if (cases[k].mask == 3) in[3] = param(g, "bias", 4, (int64_t[]){1, hq, Sq, Sk});
    Node *n = node(g, OP_ATTENTION, cases[k].mask ? 4 : 3, in);
    ir_set_str(g, n, "layout", cases[k].layout);
    ir_set_int(g, n, "causal", cases[k].causal);
    if (k == 2) ir_set_float(g, n, "scale", 0.3);
    output(g, fin(g, n));
    Spec s = spec(ANY);
    same_as_unrolled(g, &s);
    Graph *u = ir_copy(g, "trained");
    ck_assert(u && pass_train_mode(u, &(AutodiffOptions){0}));
    int ops = 0;
    for (Node *x = u->first; x; x = x->next) ops += x->op == OP_ATTENTION_LSE;
    ck_assert_int_eq(ops, cases[k].mask != 3);
    check_fd(u, "attention op", &s);
    if (cases[k].mask != 3) check_fd(g, "attention op, its lse recomputed", &s);
    ctx_free(&c);
  }
}
END_TEST

/* ---- errors, through the language, located ---- */

static const char *grad_error(const char *src) {
  static char text[4096];
  Ctx c;
  ctx_init(&c);
  const SrcFile *f = ctx_add_file(&c, "m.dl", src, strlen(src));
  Program *p = fe_parse(&c, f);
  ck_assert_msg(p != NULL, "%s", diag_text(&c));
  LowerOptions lo = {.training = true};
  Graph *g = fe_lower(&c, p, &lo);
  ck_assert_msg(g && ir_verify(g), "%s", diag_text(&c));
  ck_assert(!pass_autodiff(g, NULL));
  snprintf(text, sizeof text, "%s", diag_text(&c));
  ctx_free(&c);
  return text;
}

static void expect_first_line(const char *text, const char *want) {
  size_t n = strcspn(text, "\n");
  ck_assert_msg(strlen(want) == n && strncmp(text, want, n) == 0, "got:\n%s\nwant:\n%s", text, want);
}

START_TEST(test_no_rule) {
  expect_first_line(grad_error("model m(x: f32[1, 2, 4, 4], g: f32[1, 3, 3, 2]) -> f32[] {\n"
                               "  y = conv2d(x, 3, kernel=1) as conv\n"
                               "  return sum(grid_sample(y, g))\n"
                               "}\n"),
                    "m.dl:3:14: error: grid_sample has no gradient rule yet, and its operand 1 depends on the "
                    "trainable parameter 'conv.weight'");
}
END_TEST

START_TEST(test_only_through_no_gradient) {
  expect_first_line(grad_error("model m(x: f32[2, 3]) -> f32[] {\n"
                               "  i = argmax(linear(x, 4) as fc, axis=1)\n"
                               "  return sum(embedding(i, 4, 3) as emb)\n"
                               "}\n"),
                    "m.dl:3:14: error: the parameter 'fc.weight' reaches the loss only through gather's "
                    "operand 2, which has no gradient: it would never train");
  expect_first_line(grad_error("model m(x: f32[2, 3]) -> f32[] {\n"
                               "  return sum(round(linear(x, 4) as fc))\n"
                               "}\n"),
                    "m.dl:2:14: error: the parameter 'fc.weight' reaches the loss only through round's "
                    "operand 1, which has no gradient: it would never train");
}
END_TEST

/* A rule that covers only some of an op's attributes names what it
 * lacks, at the node's location. */
static const char *ir_text_grad_error(const char *src) {
  static char text[4096];
  Ctx c;
  ctx_init(&c);
  Graph *g = ir_parse(&c, ctx_add_file(&c, "g.ir", src, strlen(src)));
  ck_assert_msg(g && ir_verify(g), "%s", diag_text(&c));
  ck_assert(!pass_autodiff(g, NULL));
  snprintf(text, sizeof text, "%s", diag_text(&c));
  ctx_free(&c);
  return text;
}

static const char *ir_grad_error(const char *op_line, const char *axes) {
  char src[1024];
  snprintf(src, sizeof src,
           "graph g {\n  %%0 = param {name=\"w\"} : f32[2, 3]\n  %%1 = input {name=\"i\"} : i64[2, 1]\n"
           "  %%2 = input {name=\"u\"} : f32[2, 1]\n  %s    ; m.dl:3:9\n"
           "  %%4 = reduce_sum %%3 {axes=%s} : f32[]\n  return %%4 as \"loss\"\n}\n",
           op_line, axes);
  return ir_text_grad_error(src);
}

START_TEST(test_partial_rule) {
  expect_first_line(ir_grad_error("%3 = scatter_nd %0, %1, %0 {reduction=\"mul\"} : f32[2, 3]", "[0, 1]"),
                    "m.dl:3:9: error: scatter_nd with a reduction other than none or add has no gradient rule yet, "
                    "and its operand 1 depends on the trainable parameter 'w'");
  expect_first_line(ir_grad_error("%3 = scatter_elements %0, %1, %2 {axis=1, reduction=\"max\"} : f32[2, 3]", "[0, 1]"),
                    "m.dl:3:9: error: scatter_elements with a reduction other than none or add has no gradient rule "
                    "yet, and its operand 1 depends on the trainable parameter 'w'");
  /* the conv rules are NCHW's (the nhwc pass runs after autodiff) */
  const char *src = "graph g {\n  %0 = param {name=\"w\"} : f32[1, 2, 2, 1]\n  %1 = input {name=\"x\"} : f32[1, 3, 3, 1]\n"
                    "  %2 = conv_transpose2d %1, %0 {layout=\"nhwc\"} : f32[1, 4, 4, 1]    ; m.dl:3:9\n"
                    "  %3 = reduce_sum %2 {axes=[0, 1, 2, 3]} : f32[]\n  return %3 as \"loss\"\n}\n";
  expect_first_line(ir_text_grad_error(src), "m.dl:3:9: error: conv_transpose2d in layout \"nhwc\" has no gradient "
                                             "rule yet, and its operand 2 depends on the trainable parameter 'w'");
}
END_TEST

START_TEST(test_loss_not_scalar) {
  expect_first_line(grad_error("model m(x: f32[2, 3]) -> f32[2, 4] {\n"
                               "  return linear(x, 4) as fc\n"
                               "}\n"),
                    "m.dl:2:10: error: the loss must be one float value to differentiate, but output "
                    "'output' is f32[2, 4] (reduce it, e.g. with a mean)");
  expect_first_line(grad_error("model m(x: f32[1, 3]) -> f32[] {\n"
                               "  return sum(batchnorm(x))\n"
                               "}\n"),
                    "m.dl:2:14: error: batchnorm in training mode needs more than one value per "
                    "channel; input f32[1, 3] has one");
  /* no channel at all (IR text allows empty dims): an error, not a
   * division by zero */
  static const char src[] = "graph g {\n  %x = param {name=\"x\"} : f32[2, 0, 3]\n"
                            "  %w = param {name=\"bn.weight\"} : f32[0]\n"
                            "  %y = batchnorm %x, %w, %w, %w, %w : f32[2, 0, 3]    ; m.dl:4:5\n"
                            "  %s = reduce_sum %y {axes=[0, 1, 2], keepdims=0} : f32[]\n  return %s as \"loss\"\n}\n";
  Ctx c;
  ctx_init(&c);
  Graph *g = ir_parse(&c, ctx_add_file(&c, "g.ir", src, strlen(src)));
  ck_assert_msg(g && ir_verify(g), "%s", diag_text(&c));
  ck_assert(!pass_autodiff(g, NULL));
  expect_first_line(diag_text(&c), "m.dl:4:5: error: batchnorm in training mode needs more than one value per "
                                   "channel; input f32[2, 0, 3] has none");
  ctx_free(&c);
}
END_TEST

START_TEST(test_bad_momentum) {
  static const char src[] = "model m(x: f32[3, 2]) -> f32[] {\n  return sum(batchnorm(x, momentum=2))\n}\n";
  Ctx c;
  ctx_init(&c);
  Program *p = fe_parse(&c, ctx_add_file(&c, "m.dl", src, strlen(src)));
  ck_assert(p != NULL);
  LowerOptions lo = {.training = true};
  ck_assert_ptr_null(fe_lower(&c, p, &lo));
  expect_first_line(diag_text(&c), "m.dl:2:27: error: batchnorm: 'momentum' must be a momentum between 0 and 1, got 2");
  ctx_free(&c);
}
END_TEST

/* A where whose condition depends on the parameter still trains through
 * its branch: only a parameter with no path at all is an error. */
START_TEST(test_stopped_but_trains) {
  Ctx c;
  Graph *g = begin(&c);
  Value *x = param(g, "x", 1, (int64_t[]){6});
  Value *cond = op2(g, OP_GREATER, x, ir_grad_scalar(g, (SrcLoc){0}, 0, TY_F64));
  output(g, fin(g, node(g, OP_WHERE, 3, (Value *[]){cond, x, op1(g, OP_SIN, x)})));
  check_any(&c, g, "where(x > 0, x, sin x)");
}
END_TEST

/* ---- the IR text of a step, f64, state updates ---- */

static const char step_text[] =
    "graph s {\n"
    "  %0 = input {name=\"x\"} : f64[2, 3]\n"
    "  %1 = param {name=\"w\"} : f64[2, 3]\n"
    "  %2 = mul %0, %1 : f64[2, 3]\n"
    "  return %2 as \"y\", %2 as \"w2\" updates \"w\"\n"
    "}\n";

START_TEST(test_updates_text) {
  Ctx c;
  ctx_init(&c);
  Graph *g = ir_parse(&c, ctx_add_file(&c, "s.ir", step_text, strlen(step_text)));
  ck_assert_msg(g && ir_verify(g), "%s", diag_text(&c));
  ck_assert_ptr_null(ir_output_update(g, 0));
  ck_assert_str_eq(ir_output_update(g, 1), "w");
  char *buf;
  size_t len;
  FILE *f = open_memstream(&buf, &len);
  ir_print(f, g);
  fclose(f);
  ck_assert_msg(strstr(buf, "return %2 as \"y\", %2 as \"w2\" updates \"w\"\n") != NULL, "%s", buf);
  free(buf);
  /* The interpreter's step writes w * x back into w. */
  double xv[6] = {1, 2, 3, 4, 5, 6}, wv[6] = {2, 2, 2, 0.5, 0.5, 0.5};
  TensorType t = ir_type_make(TY_F64, 2, (int64_t[]){2, 3});
  Tensor x = {t, xv}, w = {t, wv};
  const char *xn = "x", *wn = "w";
  TensorMap in = {1, &xn, &x}, params = {1, &wn, &w};
  Tensor out[2];
  char err[256];
  ck_assert_msg(ir_eval(g, &in, &params, out, err, sizeof err), "%s", err);
  ck_assert(ir_apply_updates(g, out, &params, err, sizeof err));
  ck_assert(wv[0] == 2 && wv[5] == 3);
  ir_tensor_free(&out[0]);
  ir_tensor_free(&out[1]);
  /* codegen takes an f64 step's elementwise ops (in double: tests/test_dtypes) */
  CgResult cg;
  ck_assert_msg(cg_compile(g, &cg), "%s", diag_text(&c));
  ctx_free(&c);
}
END_TEST

static void expect_verify_error(const char *ret, const char *want) {
  char text[1024];
  snprintf(text, sizeof text,
           "graph s {\n  %%0 = param {name=\"w\"} : f32[2]\n  %%1 = neg %%0 : f32[2]\n"
           "  %%2 = param {name=\"v\"} : f32[3]\n  return %s\n}\n",
           ret);
  Ctx c;
  ctx_init(&c);
  Graph *g = ir_parse(&c, ctx_add_file(&c, "s.ir", text, strlen(text)));
  ck_assert_msg(g != NULL, "%s", diag_text(&c));
  ck_assert(!ir_verify(g));
  ck_assert_msg(strstr(diag_text(&c), want), "got:\n%s\nwant: %s", diag_text(&c), want);
  ctx_free(&c);
}

START_TEST(test_updates_checked) {
  expect_verify_error("%1 as \"a\" updates \"u\"", "output 0 updates param \"u\", which the graph does not have");
  expect_verify_error("%1 as \"a\" updates \"v\"", "output 0 is f32[2] but updates param \"v\" of type f32[3]");
  expect_verify_error("%1 as \"a\" updates \"w\", %0 as \"b\" updates \"w\"", "outputs 0 and 1 both update param \"w\"");
}
END_TEST

/* Philox4x32-10's known answers (Random123's kat_vectors). */
START_TEST(test_philox) {
  static const struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t i = 0; i < ARRAY_LEN(kat); i++) {
    uint32_t out[4];
    ir_philox4x32_10(kat[i].ctr, kat[i].key, out);
    for (int w = 0; w < 4; w++) ck_assert_uint_eq(out[w], kat[i].out[w]);
  }
  /* dropout keeps about 1 - p, drops about p */
  int kept = 0;
  for (uint64_t i = 0; i < 100000; i++) kept += ir_dropout_bits(7, 3, i, 1) >= ir_dropout_threshold(0.3);
  ck_assert_int_gt(kept, 69500);
  ck_assert_int_lt(kept, 70500);
  ck_assert_uint_eq(ir_dropout_threshold(0), 0);
  ck_assert_uint_eq(ir_dropout_threshold(1), 1u << 24);
  ck_assert(ir_dropout_scale(0.5, TY_F32) == 2.0 && ir_dropout_scale(1, TY_F32) == 0);
}
END_TEST

static Suite *grad_suite(void) {
  Suite *s = suite_create("grad");
  TCase *rules = tcase_create("rules");
  tcase_set_timeout(rules, 120);
  tcase_add_test(rules, test_unary);
  tcase_add_test(rules, test_binary);
  tcase_add_test(rules, test_where);
  tcase_add_test(rules, test_several_uses);
  tcase_add_test(rules, test_reduce);
  tcase_add_test(rules, test_softmax);
  tcase_add_test(rules, test_reduce_prod_zeros);
  tcase_add_test(rules, test_layernorm);
  tcase_add_test(rules, test_group_norm);
  tcase_add_test(rules, test_global_avgpool);
  tcase_add_test(rules, test_batchnorm);
  tcase_add_test(rules, test_sync_batchnorm_running_var);
  tcase_add_test(rules, test_channel_grads_unreshaped);
  tcase_add_test(rules, test_matmul);
  tcase_add_test(rules, test_linear);
  tcase_add_test(rules, test_conv);
  tcase_add_test(rules, test_conv_transpose);
  tcase_add_test(rules, test_pool);
  tcase_add_test(rules, test_resize);
  tcase_add_test(rules, test_movement);
  tcase_add_test(rules, test_concat);
  tcase_add_test(rules, test_gather);
  tcase_add_test(rules, test_gather_one_per_position);
  tcase_add_test(rules, test_gather_nd_batch);
  tcase_add_test(rules, test_scatter);
  tcase_add_test(rules, test_dropout);
  tcase_add_test(rules, test_attention);
  tcase_add_test(rules, test_attention_op);
  tcase_add_test(rules, test_recurrent);
  tcase_add_test(rules, test_stopped_but_trains);
  suite_add_tcase(s, rules);
  TCase *errors = tcase_create("errors");
  tcase_add_test(errors, test_no_rule);
  tcase_add_test(errors, test_only_through_no_gradient);
  tcase_add_test(errors, test_partial_rule);
  tcase_add_test(errors, test_loss_not_scalar);
  tcase_add_test(errors, test_bad_momentum);
  suite_add_tcase(s, errors);
  TCase *ir = tcase_create("ir");
  tcase_add_test(ir, test_updates_text);
  tcase_add_test(ir, test_updates_checked);
  tcase_add_test(ir, test_philox);
  suite_add_tcase(s, ir);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(grad_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
