/* Check suite for the reference interpreter (ir/eval.c) and parameter
 * initialization (ir/init.c): each op against hand-computed values or an
 * independent formula computed here. */
#include "check_quiet.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/eval.h"
#include "ir/ir.h"

/* ---- a tiny graph builder ---- */

static Ctx ctx;
static Graph *g;
enum { MAX_INPUTS = 32 };
static const char *in_names[MAX_INPUTS];
static Tensor in_tensors[MAX_INPUTS];
static TensorMap inputs;
static char err[1024];
static const SrcLoc noloc = {0};

static void setup(void) {
  ctx_init(&ctx);
  g = ir_graph_new(&ctx, "t");
  inputs = (TensorMap){0, in_names, in_tensors};
  err[0] = 0;
}

static void teardown(void) {
  for (int i = 0; i < inputs.n; i++) ir_tensor_free(&in_tensors[i]);
  inputs.n = 0;
  ctx_free(&ctx);
}

static TensorType ty(DType dt, int rank, ...) {
  TensorType t = {.dtype = dt, .rank = rank};
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) t.dims[i] = va_arg(ap, int);
  va_end(ap);
  return t;
}

/* An input named "x<k>" holding vals (NULL: random in [-1, 1)). */
static Value *input_vals(TensorType t, const double *vals) {
  ck_assert_int_lt(inputs.n, MAX_INPUTS);
  char *name = arena_printf(&ctx.arena, "x%d", inputs.n);
  Node *n = ir_source(g, OP_INPUT, &t, name, noloc);
  Tensor *x = &in_tensors[inputs.n];
  ck_assert(ir_tensor_alloc(x, &t));
  int64_t count = ir_type_numel(&t);
  for (int64_t i = 0; i < count; i++)
    ir_tensor_set(x, i, vals ? vals[i] : (double)rand() / RAND_MAX * 2 - 1);
  in_names[inputs.n++] = name;
  return &n->out[0];
}

static Value *input_rand(TensorType t) { return input_vals(t, NULL); }

static const Tensor *input_tensor(const Value *v) {
  return ir_tensor_map_find(&inputs, ir_attr_str(v->def, "name"));
}

static Node *mk(OpKind op, int n_in, ...) {
  Value *in[32];
  va_list ap;
  va_start(ap, n_in);
  for (int i = 0; i < n_in; i++) in[i] = va_arg(ap, Value *);
  va_end(ap);
  return ir_node_new(g, op, n_in, in, noloc);
}

static Value *fin(Node *n) {
  char msg[256];
  ck_assert_msg(ir_fill_defaults(g, n, msg, sizeof msg), "%s", msg);
  ck_assert_msg(ir_infer(n, msg, sizeof msg), "%s", msg);
  ir_append(g, n);
  return &n->out[0];
}

static Value *un(OpKind op, Value *x) { return fin(mk(op, 1, x)); }
static Value *bin(OpKind op, Value *a, Value *b) { return fin(mk(op, 2, a, b)); }

static void set_ints(Node *n, const char *name, int count, ...) {
  int64_t v[16];
  va_list ap;
  va_start(ap, count);
  for (int i = 0; i < count; i++) v[i] = va_arg(ap, int);
  va_end(ap);
  ir_set_ints(g, n, name, count, v);
}

/* Evaluates the graph with outputs vs; each result must be freed. */
static bool try_run(int n, Value **vs, Tensor *out) {
  const char *names[8] = {"o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7"};
  ir_set_outputs(g, n, vs, names);
  return ir_eval(g, &inputs, NULL, out, err, sizeof err);
}

static Tensor run1(Value *v) {
  Tensor t;
  ck_assert_msg(try_run(1, &v, &t), "%s", err);
  ck_assert(ir_type_eq(&t.type, &v->type));
  return t;
}

static double at(const Tensor *t, int64_t i) { return ir_tensor_get(t, i); }

/* The first n elements of t. */
static void expect_vals(const Tensor *t, int n, const double *want, double tol) {
  ck_assert_int_ge(ir_type_numel(&t->type), n);
  for (int i = 0; i < n; i++)
    ck_assert_msg(fabs(at(t, i) - want[i]) <= tol * (1 + fabs(want[i])) ||
                      (isnan(want[i]) && isnan(at(t, i))),
                  "element %d: got %.9g, want %.9g", i, at(t, i), want[i]);
}

static void check_run(Value *v, int n, const double *want, double tol) {
  Tensor t = run1(v);
  ck_assert_int_eq(ir_type_numel(&t.type), n);
  expect_vals(&t, n, want, tol);
  ir_tensor_free(&t);
}

/* ---- 16-bit floats ---- */

START_TEST(test_f16_known_bits) {
  ck_assert_uint_eq(ir_f16_from_double(1.0), 0x3C00);
  ck_assert_uint_eq(ir_f16_from_double(-2.0), 0xC000);
  ck_assert_uint_eq(ir_f16_from_double(65504.0), 0x7BFF);
  ck_assert_uint_eq(ir_f16_from_double(65519.0), 0x7BFF);
  ck_assert_uint_eq(ir_f16_from_double(65520.0), 0x7C00); /* tie rounds to even: overflow */
  ck_assert_uint_eq(ir_f16_from_double(1e9), 0x7C00);
  ck_assert_uint_eq(ir_f16_from_double(-INFINITY), 0xFC00);
  ck_assert_uint_eq(ir_f16_from_double(-0.0), 0x8000);
  ck_assert_uint_eq(ir_f16_from_double(NAN) & 0x7FFF, 0x7E00);
  ck_assert_uint_eq(ir_f16_from_double(ldexp(1, -24)), 0x0001); /* smallest subnormal */
  ck_assert_uint_eq(ir_f16_from_double(ldexp(1, -25)), 0x0000); /* tie to even: zero */
  ck_assert_uint_eq(ir_f16_from_double(ldexp(1.5, -25)), 0x0001);
  ck_assert_uint_eq(ir_f16_from_double(ldexp(3, -25)), 0x0002); /* tie to even: 2 */
  ck_assert_uint_eq(ir_f16_from_double(ldexp(1, -14) - ldexp(1, -25)), 0x0400); /* to normal */
  ck_assert_uint_eq(ir_f16_from_double(1 + ldexp(1, -11)), 0x3C00);     /* tie: even */
  ck_assert_uint_eq(ir_f16_from_double(1 + ldexp(3, -11)), 0x3C02);     /* tie: even */
  ck_assert_uint_eq(ir_f16_from_double(1 + ldexp(1, -11) + 1e-12), 0x3C01);
  ck_assert_uint_eq(ir_f16_from_double(1e-30), 0x0000);
  ck_assert(ir_f16_to_double(0x0001) == ldexp(1, -24));
  ck_assert(ir_f16_to_double(0x7BFF) == 65504.0);
  ck_assert(ir_f16_to_double(0x3555) == 0x1.554p-2);
  ck_assert(isinf(ir_f16_to_double(0xFC00)) && ir_f16_to_double(0xFC00) < 0);
  ck_assert(isnan(ir_f16_to_double(0x7C01)));
  ck_assert(signbit(ir_f16_to_double(0x8000)));
}
END_TEST

START_TEST(test_bf16_known_bits) {
  ck_assert_uint_eq(ir_bf16_from_double(1.0), 0x3F80);
  ck_assert_uint_eq(ir_bf16_from_double(1 + ldexp(1, -8)), 0x3F80); /* tie: even */
  ck_assert_uint_eq(ir_bf16_from_double(1 + ldexp(3, -8)), 0x3F82); /* tie: even */
  ck_assert_uint_eq(ir_bf16_from_double(3.140625), 0x4049);
  ck_assert_uint_eq(ir_bf16_from_double(3.4028234663852886e38), 0x7F80); /* FLT_MAX rounds up */
  ck_assert_uint_eq(ir_bf16_from_double(ldexp(1, -133)), 0x0001);
  ck_assert_uint_eq(ir_bf16_from_double(-ldexp(1, -134)), 0x8000);
  ck_assert_uint_eq(ir_bf16_from_double(NAN) & 0x7FFF, 0x7FC0);
  ck_assert(ir_bf16_to_double(0x7F7F) == 0x1.FEp127);
  ck_assert(isnan(ir_bf16_to_double(0x7FC1)));
}
END_TEST

/* Every finite pattern survives a round trip; NaNs stay NaN. */
START_TEST(test_half_roundtrip_all) {
  for (unsigned h = 0; h < 65536; h++) {
    double f = ir_f16_to_double((uint16_t)h), b = ir_bf16_to_double((uint16_t)h);
    if (isnan(f))
      ck_assert(isnan(ir_f16_to_double(ir_f16_from_double(f))));
    else
      ck_assert_uint_eq(ir_f16_from_double(f), h);
    if (isnan(b))
      ck_assert(isnan(ir_bf16_to_double(ir_bf16_from_double(b))));
    else
      ck_assert_uint_eq(ir_bf16_from_double(b), h);
  }
}
END_TEST

/* Midpoints between neighbours are the hard cases: each must go to the
 * neighbour with the even mantissa, and a hair off it to the nearer. */
START_TEST(test_half_midpoints) {
  for (unsigned h = 0; h < 0x7BFF; h++) {
    double lo = ir_f16_to_double((uint16_t)h), hi = ir_f16_to_double((uint16_t)(h + 1));
    double mid = (lo + hi) / 2;
    ck_assert_uint_eq(ir_f16_from_double(mid), (h & 1) ? h + 1 : h);
    ck_assert_uint_eq(ir_f16_from_double(nextafter(mid, 0)), h);
    ck_assert_uint_eq(ir_f16_from_double(nextafter(mid, INFINITY)), h + 1);
    ck_assert_uint_eq(ir_f16_from_double(-mid), 0x8000 | ((h & 1) ? h + 1 : h));
  }
  for (unsigned h = 0; h < 0x7F7F; h++) {
    double lo = ir_bf16_to_double((uint16_t)h), hi = ir_bf16_to_double((uint16_t)(h + 1));
    double mid = (lo + hi) / 2;
    ck_assert_uint_eq(ir_bf16_from_double(mid), (h & 1) ? h + 1 : h);
    ck_assert_uint_eq(ir_bf16_from_double(nextafter(mid, 0)), h);
    ck_assert_uint_eq(ir_bf16_from_double(nextafter(mid, INFINITY)), h + 1);
  }
}
END_TEST

#ifdef __FLT16_MAX__
/* Against the compiler's own _Float16 conversion, on random doubles. */
START_TEST(test_f16_vs_compiler) {
  srand(7);
  for (int i = 0; i < 200000; i++) {
    double x = ldexp((double)rand() / RAND_MAX - 0.5, rand() % 40 - 28);
    _Float16 h = (_Float16)x;
    uint16_t bits;
    memcpy(&bits, &h, 2);
    ck_assert_uint_eq(ir_f16_from_double(x), bits);
    ck_assert(ir_f16_to_double(bits) == (double)h);
  }
}
END_TEST
#endif

/* ---- elements, casts ---- */

START_TEST(test_cast_float_to_int) {
  double v[] = {300.7, -300, -1.9, 1.9, NAN, INFINITY, -INFINITY, 3e9, -0.5};
  Value *x = input_vals(ty(TY_F32, 1, 9), v);
  Node *n = mk(OP_CAST, 1, x);
  ir_set_dtype(g, n, "to", TY_I8);
  double want8[] = {127, -128, -1, 1, 0, 127, -128, 127, 0};
  check_run(fin(n), 9, want8, 0);
  n = mk(OP_CAST, 1, x);
  ir_set_dtype(g, n, "to", TY_I32);
  Tensor t = run1(fin(n));
  int32_t *p = t.data;
  int32_t want32[] = {300, -300, -1, 1, 0, INT32_MAX, INT32_MIN, INT32_MAX, 0};
  for (int i = 0; i < 9; i++) ck_assert_int_eq(p[i], want32[i]);
  ir_tensor_free(&t);
}
END_TEST

START_TEST(test_cast_int) {
  double v[] = {300, -129, 127, -1};
  Value *x = input_vals(ty(TY_I32, 1, 4), v);
  Node *n = mk(OP_CAST, 1, x);
  ir_set_dtype(g, n, "to", TY_I8);
  double want[] = {44, 127, 127, -1}; /* int -> int wraps */
  check_run(fin(n), 4, want, 0);
  /* i64 -> f32 rounds once: 2^60 + 2^36 + 1 is just above a midpoint. */
  TensorType t64 = ty(TY_I64, 1, 2);
  Value *y = input_vals(t64, NULL);
  int64_t *raw = in_tensors[inputs.n - 1].data;
  raw[0] = ((int64_t)1 << 60) + ((int64_t)1 << 36) + 1;
  raw[1] = ((int64_t)1 << 24) + 1;
  n = mk(OP_CAST, 1, y);
  ir_set_dtype(g, n, "to", TY_F32);
  Tensor r = run1(fin(n));
  float *f = r.data;
  ck_assert(f[0] == ldexpf(1, 60) + ldexpf(1, 37));
  ck_assert(f[1] == ldexpf(1, 24));
  ir_tensor_free(&r);
}
END_TEST

START_TEST(test_cast_f32_to_f16_bits) {
  double v[] = {1.0, 65520.0, 1 + ldexp(1, -11), 0.1};
  Value *x = input_vals(ty(TY_F32, 1, 4), v);
  Node *n = mk(OP_CAST, 1, x);
  ir_set_dtype(g, n, "to", TY_F16);
  Tensor t = run1(fin(n));
  uint16_t *h = t.data;
  ck_assert_uint_eq(h[0], 0x3C00);
  ck_assert_uint_eq(h[1], 0x7C00);
  ck_assert_uint_eq(h[2], 0x3C00);
  ck_assert_uint_eq(h[3], 0x2E66);
  ir_tensor_free(&t);
}
END_TEST

/* ---- elementwise ---- */

START_TEST(test_unary_values) {
  double v[] = {-2, -0.5, 0, 1, 3};
  struct {
    OpKind op;
    double want[5];
  } cases[] = {
      {OP_NEG, {2, 0.5, 0, -1, -3}},
      {OP_ABS, {2, 0.5, 0, 1, 3}},
      {OP_RELU, {0, 0, 0, 1, 3}},
      {OP_SIGMOID, {0.11920292202211755, 0.3775406687981454, 0.5, 0.7310585786300049, 0.9525741268224334}},
      {OP_TANH, {-0.9640275800758169, -0.46211715726000974, 0, 0.7615941559557649, 0.9950547536867305}},
      {OP_SILU, {-0.2384058440442351, -0.1887703343990727, 0, 0.7310585786300049, 2.8577223804673}},
      {OP_HARDSIGMOID, {1.0 / 6, 5.0 / 12, 0.5, 2.0 / 3, 1}},
      {OP_HARDSWISH, {-1.0 / 3, -5.0 / 24, 0, 2.0 / 3, 3}},
      {OP_ERF, {-0.9953222650189527, -0.5204998778130465, 0, 0.8427007929497149, 0.9999779095030014}},
      {OP_SIN, {sin(-2), sin(-0.5), 0, sin(1), sin(3)}},
      {OP_COS, {cos(-2), cos(-0.5), 1, cos(1), cos(3)}},
      {OP_EXP, {0.1353352832366127, 0.6065306597126334, 1, 2.718281828459045, 20.085536923187668}},
  };
  Value *x = input_vals(ty(TY_F32, 1, 5), v);
  for (size_t k = 0; k < ARRAY_LEN(cases); k++) check_run(un(cases[k].op, x), 5, cases[k].want, 1e-6);
}
END_TEST

START_TEST(test_unary_positive_domain) {
  double v[] = {0.25, 1, 4, 0};
  Value *x = input_vals(ty(TY_F32, 1, 4), v);
  double lg[] = {log(0.25), 0, log(4), -INFINITY}, sq[] = {0.5, 1, 2, 0};
  double rs[] = {2, 1, 0.5, INFINITY}, rc[] = {4, 1, 0.25, INFINITY};
  Tensor t = run1(un(OP_LOG, x));
  expect_vals(&t, 3, lg, 1e-6);
  ck_assert(isinf(at(&t, 3)) && at(&t, 3) < 0);
  ir_tensor_free(&t);
  check_run(un(OP_SQRT, x), 4, sq, 1e-7);
  t = run1(un(OP_RSQRT, x));
  expect_vals(&t, 3, rs, 1e-7);
  ck_assert(isinf(at(&t, 3)));
  ir_tensor_free(&t);
  t = run1(un(OP_RECIPROCAL, x));
  expect_vals(&t, 3, rc, 1e-7);
  ir_tensor_free(&t);
}
END_TEST

START_TEST(test_gelu_leaky_clip) {
  double v[] = {-1, 0, 1, 2.5};
  Value *x = input_vals(ty(TY_F32, 1, 4), v);
  double exact[] = {-0.15865525393145707, 0, 0.8413447460685429, 2.4844758366855597},
         approx[] = {-0.15880800939172324, 0, 0.8411919906082768, 2.484915733910001};
  check_run(un(OP_GELU, x), 4, exact, 1e-6);
  Node *n = mk(OP_GELU, 1, x);
  ir_set_str(g, n, "approximate", "tanh");
  check_run(fin(n), 4, approx, 1e-6);
  n = mk(OP_LEAKY_RELU, 1, x);
  ir_set_float(g, n, "alpha", 0.1);
  double lk[] = {-0.1, 0, 1, 2.5};
  check_run(fin(n), 4, lk, 1e-7);
  double dl[] = {-0.01, 0, 1, 2.5};
  check_run(un(OP_LEAKY_RELU, x), 4, dl, 1e-7); /* default alpha 0.01 */
  n = mk(OP_CLIP, 1, x);
  ir_set_float(g, n, "min", -0.5);
  ir_set_float(g, n, "max", 2);
  double cl[] = {-0.5, 0, 1, 2};
  check_run(fin(n), 4, cl, 0);
}
END_TEST

START_TEST(test_unary_int) {
  double v[] = {-128, -3, 0, 5, 127};
  Value *x = input_vals(ty(TY_I8, 1, 5), v);
  double neg[] = {-128, 3, 0, -5, -127}; /* -(-128) wraps in i8 */
  double relu[] = {0, 0, 0, 5, 127};
  check_run(un(OP_NEG, x), 5, neg, 0);
  check_run(un(OP_RELU, x), 5, relu, 0);
  Node *n = mk(OP_CLIP, 1, x);
  ir_set_float(g, n, "min", -2.5);
  ir_set_float(g, n, "max", 6.5);
  double cl[] = {-2, -2, 0, 5, 6};
  check_run(fin(n), 5, cl, 0);
}
END_TEST

START_TEST(test_binary_broadcast) {
  double a[] = {1, 2, 3, 4, 5, 6}, b[] = {10, 20, 30}, c[] = {1, 2};
  Value *x = input_vals(ty(TY_F32, 2, 2, 3), a), *y = input_vals(ty(TY_F32, 1, 3), b);
  Value *z = input_vals(ty(TY_F32, 2, 2, 1), c);
  double add[] = {11, 22, 33, 14, 25, 36};
  check_run(bin(OP_ADD, x, y), 6, add, 0);
  double sub[] = {-9, -18, -27, -6, -15, -24};
  check_run(bin(OP_SUB, x, y), 6, sub, 0);
  double mul[] = {1, 2, 3, 8, 10, 12};
  check_run(bin(OP_MUL, x, z), 6, mul, 0);
  /* [2, 1] against [3]: both sides broadcast to [2, 3]. */
  double zy[] = {10, 20, 30, 20, 40, 60};
  Value *p = bin(OP_MUL, z, y);
  ck_assert_int_eq(p->type.rank, 2);
  check_run(p, 6, zy, 0);
  double dv[] = {0.1, 0.1, 0.1, 0.4, 0.25, 0.2};
  check_run(bin(OP_DIV, x, y), 6, dv, 1e-7);
  double pw[] = {1, 2, 3, 16, 25, 36};
  check_run(bin(OP_POW, x, z), 6, pw, 0);
}
END_TEST

START_TEST(test_binary_scalar_and_minmax) {
  double a[] = {1, NAN, -3, 4};
  Value *x = input_vals(ty(TY_F32, 1, 4), a);
  Node *c = ir_const(g, 2, TY_F32, noloc);
  double mx[] = {2, NAN, 2, 4}, mn[] = {1, NAN, -3, 2};
  check_run(bin(OP_MAXIMUM, x, &c->out[0]), 4, mx, 0);
  check_run(bin(OP_MINIMUM, &c->out[0], x), 4, mn, 0);
}
END_TEST

/* Comparisons give 1/0 in the operands' dtype; NaN is unequal to all. */
START_TEST(test_comparisons) {
  double a[] = {1, 2, NAN, -1}, b[] = {2, 2, NAN, -3};
  Value *x = input_vals(ty(TY_F32, 1, 4), a), *y = input_vals(ty(TY_F32, 1, 4), b);
  double eq[] = {0, 1, 0, 0}, ne[] = {1, 0, 1, 1}, lt[] = {1, 0, 0, 0}, le[] = {1, 1, 0, 0},
         gt[] = {0, 0, 0, 1}, ge[] = {0, 1, 0, 1};
  check_run(bin(OP_EQ, x, y), 4, eq, 0);
  check_run(bin(OP_NE, x, y), 4, ne, 0);
  check_run(bin(OP_LT, x, y), 4, lt, 0);
  check_run(bin(OP_LE, x, y), 4, le, 0);
  check_run(bin(OP_GT, x, y), 4, gt, 0);
  check_run(bin(OP_GE, x, y), 4, ge, 0);
  /* Integers exactly, broadcast [2, 1] against [3]. */
  double ci[] = {5, -7}, ri[] = {-7, 5, 6};
  Value *c = input_vals(ty(TY_I64, 2, 2, 1), ci), *r = input_vals(ty(TY_I64, 1, 3), ri);
  Value *m = bin(OP_GE, c, r);
  ck_assert_int_eq(m->type.dtype, TY_I64);
  double gei[] = {1, 1, 0, 1, 0, 0};
  check_run(m, 6, gei, 0);
}
END_TEST

START_TEST(test_binary_int) {
  double a[] = {-7, 7, 100, 2, -1, 0}, b[] = {2, -2, 100, 10, -3, 5};
  Value *x = input_vals(ty(TY_I8, 1, 6), a), *y = input_vals(ty(TY_I8, 1, 6), b);
  double dv[] = {-3, -3, 1, 0, 0, 0};
  check_run(bin(OP_DIV, x, y), 6, dv, 0);
  double ad[] = {-5, 5, -56, 12, -4, 5}; /* 100 + 100 wraps */
  check_run(bin(OP_ADD, x, y), 6, ad, 0);
  double a32[] = {2, 2, -1, 0, 3}, b32[] = {10, -1, -3, 0, 2};
  Value *p = input_vals(ty(TY_I32, 1, 5), a32), *q = input_vals(ty(TY_I32, 1, 5), b32);
  double pw[] = {1024, 0, -1, 1, 9};
  check_run(bin(OP_POW, p, q), 5, pw, 0);
}
END_TEST

START_TEST(test_int_div_by_zero) {
  double a[] = {1, 2}, b[] = {1, 0};
  Value *x = input_vals(ty(TY_I32, 1, 2), a), *y = input_vals(ty(TY_I32, 1, 2), b);
  Value *d = bin(OP_DIV, x, y);
  Tensor t;
  ck_assert(!try_run(1, &d, &t));
  ck_assert_str_eq(err, "div: integer division by zero");
  ck_assert_ptr_null(t.data);
}
END_TEST

START_TEST(test_i64_exact) {
  Value *x = input_vals(ty(TY_I64, 1, 2), NULL), *y = input_vals(ty(TY_I64, 1, 2), NULL);
  int64_t *a = in_tensors[0].data, *b = in_tensors[1].data;
  a[0] = ((int64_t)1 << 62) + 1, b[0] = 2;
  a[1] = INT64_MAX, b[1] = 1;
  Tensor t = run1(bin(OP_ADD, x, y));
  int64_t *r = t.data;
  ck_assert(r[0] == ((int64_t)1 << 62) + 3);
  ck_assert(r[1] == INT64_MIN); /* wraps */
  ir_tensor_free(&t);
}
END_TEST

/* f16 arithmetic: computed exactly, rounded once into the result. */
START_TEST(test_f16_add_rounds_once) {
  double a[] = {1, 2048}, b[] = {ldexp(1, -11), 1};
  Value *x = input_vals(ty(TY_F16, 1, 2), a), *y = input_vals(ty(TY_F16, 1, 2), b);
  Tensor t = run1(bin(OP_ADD, x, y));
  uint16_t *h = t.data;
  ck_assert_uint_eq(h[0], 0x3C00); /* 1 + 2^-11: tie to even */
  ck_assert_uint_eq(h[1], 0x6800); /* 2049: tie to even 2048 */
  ir_tensor_free(&t);
}
END_TEST

/* ---- reductions ---- */

static Value *reduce(OpKind op, Value *x, int keep, int n_axes, ...) {
  Node *n = mk(op, 1, x);
  int64_t axes[8];
  va_list ap;
  va_start(ap, n_axes);
  for (int i = 0; i < n_axes; i++) axes[i] = va_arg(ap, int);
  va_end(ap);
  ir_set_ints(g, n, "axes", n_axes, axes);
  ir_set_int(g, n, "keepdims", keep);
  return fin(n);
}

START_TEST(test_reduce) {
  double v[24];
  for (int i = 0; i < 24; i++) v[i] = i;
  Value *x = input_vals(ty(TY_F32, 3, 2, 3, 4), v);
  /* Over axes 0 and 2: out[j] = sum_i sum_k (12 i + 4 j + k). */
  double sum[] = {6 + 54, 22 + 70, 38 + 86};
  Value *s = reduce(OP_REDUCE_SUM, x, 0, 2, 0, 2);
  ck_assert_int_eq(s->type.rank, 1);
  check_run(s, 3, sum, 0);
  Value *sk = reduce(OP_REDUCE_SUM, x, 1, 2, 0, 2);
  ck_assert_int_eq(sk->type.rank, 3);
  check_run(sk, 3, sum, 0);
  double mean[] = {60.0 / 8, 92.0 / 8, 124.0 / 8};
  check_run(reduce(OP_REDUCE_MEAN, x, 0, 2, 0, 2), 3, mean, 1e-7);
  double mx[] = {3, 7, 11, 15, 19, 23}, mn[] = {0, 4, 8, 12, 16, 20};
  check_run(reduce(OP_REDUCE_MAX, x, 0, 1, 2), 6, mx, 0);
  check_run(reduce(OP_REDUCE_MIN, x, 1, 1, 2), 6, mn, 0);
  double all[] = {276};
  check_run(reduce(OP_REDUCE_SUM, x, 0, 3, 0, 1, 2), 1, all, 0);
}
END_TEST

START_TEST(test_reduce_nan_and_int) {
  double v[] = {1, NAN, 3, 4, -2, 0};
  Value *x = input_vals(ty(TY_F32, 2, 2, 3), v);
  double mx[] = {NAN, 4};
  check_run(reduce(OP_REDUCE_MAX, x, 0, 1, 1), 2, mx, 0);
  double iv[] = {-7, 2, 2, 100, 100, 100};
  Value *y = input_vals(ty(TY_I8, 2, 2, 3), iv);
  double im[] = {-1, 100}; /* (-3) / 3 truncates toward zero: -1 */
  check_run(reduce(OP_REDUCE_MEAN, y, 0, 1, 1), 2, im, 0);
  double is[] = {-3, 44}; /* 300 wraps in i8 */
  check_run(reduce(OP_REDUCE_SUM, y, 0, 1, 1), 2, is, 0);
}
END_TEST

START_TEST(test_argmax) {
  double v[] = {1, 5, 5, 2, 9, 0, 9, 9};
  Value *x = input_vals(ty(TY_F32, 2, 2, 4), v);
  Node *n = mk(OP_ARGMAX, 1, x);
  ir_set_int(g, n, "axis", 1);
  Value *a = fin(n);
  ck_assert_int_eq(a->type.dtype, TY_I64);
  double want[] = {1, 0}; /* first of the ties */
  check_run(a, 2, want, 0);
  n = mk(OP_ARGMAX, 1, x);
  ir_set_int(g, n, "axis", 0);
  ir_set_int(g, n, "keepdims", 1);
  double w0[] = {1, 0, 1, 1};
  check_run(fin(n), 4, w0, 0);
  double nv[] = {1, NAN, 7};
  Value *y = input_vals(ty(TY_F32, 1, 3), nv);
  n = mk(OP_ARGMAX, 1, y);
  ir_set_int(g, n, "axis", 0);
  double wn[] = {1};
  check_run(fin(n), 1, wn, 0);
}
END_TEST

START_TEST(test_softmax) {
  double v[] = {1, 2, 3, 1000, 1001, 1002, -5, 0, 5};
  Value *x = input_vals(ty(TY_F32, 2, 3, 3), v);
  Node *n = mk(OP_SOFTMAX, 1, x);
  ir_set_int(g, n, "axis", 1);
  Tensor t = run1(fin(n));
  double e1 = exp(1), e2 = exp(2), e3 = exp(3), s = e1 + e2 + e3;
  double want[] = {e1 / s, e2 / s, e3 / s, e1 / s, e2 / s, e3 / s};
  for (int i = 0; i < 6; i++) ck_assert_double_eq_tol(at(&t, i), want[i], 1e-7);
  for (int r = 0; r < 3; r++)
    ck_assert_double_eq_tol(at(&t, 3 * r) + at(&t, 3 * r + 1) + at(&t, 3 * r + 2), 1, 1e-6);
  ir_tensor_free(&t);
  /* Over axis 0: columns sum to 1. */
  n = mk(OP_SOFTMAX, 1, x);
  ir_set_int(g, n, "axis", 0);
  t = run1(fin(n));
  for (int c = 0; c < 3; c++) ck_assert_double_eq_tol(at(&t, c) + at(&t, 3 + c) + at(&t, 6 + c), 1, 1e-6);
  ir_tensor_free(&t);
  n = mk(OP_LOG_SOFTMAX, 1, x);
  ir_set_int(g, n, "axis", 1);
  t = run1(fin(n));
  for (int i = 0; i < 6; i++) ck_assert_double_eq_tol(at(&t, i), log(want[i]), 1e-6);
  ck_assert_double_eq_tol(at(&t, 6), -10 - log(exp(-10) + exp(-5) + 1), 1e-6);
  ir_tensor_free(&t);
}
END_TEST

START_TEST(test_layernorm) {
  Value *x = input_rand(ty(TY_F32, 3, 2, 3, 4));
  Value *w = input_rand(ty(TY_F32, 2, 3, 4)), *b = input_rand(ty(TY_F32, 2, 3, 4));
  Node *n = mk(OP_LAYERNORM, 3, x, w, b);
  ir_set_int(g, n, "axis", 1);
  Tensor t = run1(fin(n));
  const Tensor *X = input_tensor(x), *W = input_tensor(w), *B = input_tensor(b);
  for (int r = 0; r < 2; r++) {
    double m = 0, v = 0;
    for (int k = 0; k < 12; k++) m += at(X, r * 12 + k) / 12;
    for (int k = 0; k < 12; k++) v += (at(X, r * 12 + k) - m) * (at(X, r * 12 + k) - m) / 12;
    for (int k = 0; k < 12; k++) {
      double want = (at(X, r * 12 + k) - m) / sqrt(v + 1e-5) * at(W, k) + at(B, k);
      ck_assert_double_eq_tol(at(&t, r * 12 + k), want, 1e-6);
    }
  }
  ir_tensor_free(&t);
  /* Without weight and bias: mean 0, biased variance 1 (up to eps). */
  n = mk(OP_LAYERNORM, 1, x);
  ir_set_int(g, n, "axis", 2);
  ir_set_float(g, n, "eps", 0);
  t = run1(fin(n));
  for (int r = 0; r < 6; r++) {
    double m = 0, v = 0;
    for (int k = 0; k < 4; k++) m += at(&t, r * 4 + k) / 4;
    for (int k = 0; k < 4; k++) v += at(&t, r * 4 + k) * at(&t, r * 4 + k) / 4;
    ck_assert_double_eq_tol(m, 0, 1e-6);
    ck_assert_double_eq_tol(v, 1, 1e-5);
  }
  ir_tensor_free(&t);
}
END_TEST

START_TEST(test_batchnorm) {
  Value *x = input_rand(ty(TY_F32, 4, 2, 3, 2, 2));
  Value *w = input_rand(ty(TY_F32, 1, 3)), *b = input_rand(ty(TY_F32, 1, 3));
  Value *m = input_rand(ty(TY_F32, 1, 3));
  double vv[] = {0.5, 1, 2};
  Value *v = input_vals(ty(TY_F32, 1, 3), vv);
  Node *n = mk(OP_BATCHNORM, 5, x, w, b, m, v);
  ir_set_float(g, n, "eps", 1e-3);
  Tensor t = run1(fin(n));
  const Tensor *X = input_tensor(x), *W = input_tensor(w), *B = input_tensor(b), *M = input_tensor(m);
  for (int i = 0; i < 24; i++) {
    int c = (i / 4) % 3;
    double want = (at(X, i) - at(M, c)) / sqrt(vv[c] + 1e-3) * at(W, c) + at(B, c);
    ck_assert_double_eq_tol(at(&t, i), want, 1e-6);
  }
  ir_tensor_free(&t);
}
END_TEST

START_TEST(test_global_avgpool) {
  double v[18];
  for (int i = 0; i < 18; i++) v[i] = i;
  Value *x = input_vals(ty(TY_F32, 4, 1, 2, 3, 3), v);
  Value *p = un(OP_GLOBAL_AVGPOOL, x);
  ck_assert_int_eq(p->type.dims[2], 1);
  double want[] = {4, 13};
  check_run(p, 2, want, 1e-7);
}
END_TEST

/* ---- matrix products ---- */

START_TEST(test_matmul_2d) {
  double a[] = {1, 2, 3, 4, 5, 6}, b[] = {7, 8, 9, 10, 11, 12};
  Value *x = input_vals(ty(TY_F32, 2, 2, 3), a), *y = input_vals(ty(TY_F32, 2, 3, 2), b);
  double want[] = {58, 64, 139, 154};
  check_run(bin(OP_MATMUL, x, y), 4, want, 0);
}
END_TEST

START_TEST(test_matmul_vectors) {
  double a[] = {1, 2, 3}, b[] = {7, 8, 9, 10, 11, 12}, c[] = {1, 0, -1};
  Value *v = input_vals(ty(TY_F32, 1, 3), a), *m = input_vals(ty(TY_F32, 2, 3, 2), b);
  Value *u = input_vals(ty(TY_F32, 1, 3), c);
  Value *vm = bin(OP_MATMUL, v, m);
  ck_assert_int_eq(vm->type.rank, 1);
  double w1[] = {58, 64};
  check_run(vm, 2, w1, 0);
  Value *vv = bin(OP_MATMUL, v, u);
  ck_assert_int_eq(vv->type.rank, 0);
  double w2[] = {-2};
  check_run(vv, 1, w2, 0);
  double mt[] = {1, 2, 3, 4, 5, 6};
  Value *mm = input_vals(ty(TY_F32, 2, 2, 3), mt);
  double w3[] = {-2, -2};
  check_run(bin(OP_MATMUL, mm, u), 2, w3, 0);
}
END_TEST

START_TEST(test_matmul_batch_broadcast) {
  Value *a = input_rand(ty(TY_F32, 4, 2, 1, 2, 3)), *b = input_rand(ty(TY_F32, 3, 4, 3, 5));
  Value *c = bin(OP_MATMUL, a, b);
  ck_assert_int_eq(c->type.rank, 4);
  ck_assert_int_eq(c->type.dims[1], 4);
  Tensor t = run1(c);
  const Tensor *A = input_tensor(a), *B = input_tensor(b);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      for (int m = 0; m < 2; m++)
        for (int n = 0; n < 5; n++) {
          double s = 0;
          for (int k = 0; k < 3; k++) s += at(A, (i * 2 + m) * 3 + k) * at(B, (j * 3 + k) * 5 + n);
          ck_assert_double_eq_tol(at(&t, ((i * 4 + j) * 2 + m) * 5 + n), s, 1e-6);
        }
  ir_tensor_free(&t);
}
END_TEST

START_TEST(test_linear) {
  Value *x = input_rand(ty(TY_F32, 3, 2, 3, 4)), *w = input_rand(ty(TY_F32, 2, 5, 4));
  Value *b = input_rand(ty(TY_F32, 1, 5));
  Tensor t = run1(fin(mk(OP_LINEAR, 3, x, w, b)));
  Tensor u = run1(fin(mk(OP_LINEAR, 2, x, w)));
  const Tensor *X = input_tensor(x), *W = input_tensor(w), *B = input_tensor(b);
  for (int r = 0; r < 6; r++)
    for (int o = 0; o < 5; o++) {
      double s = 0;
      for (int k = 0; k < 4; k++) s += at(X, r * 4 + k) * at(W, o * 4 + k);
      ck_assert_double_eq_tol(at(&u, r * 5 + o), s, 1e-6);
      ck_assert_double_eq_tol(at(&t, r * 5 + o), s + at(B, o), 1e-6);
    }
  ir_tensor_free(&t);
  ir_tensor_free(&u);
}
END_TEST

START_TEST(test_linear_int) {
  double x[] = {100, 100, -1}, w[] = {1, 1, 2};
  Value *a = input_vals(ty(TY_I8, 2, 1, 3), x), *b = input_vals(ty(TY_I8, 2, 1, 3), w);
  double want[] = {198}; /* int8 products accumulate in i32 */
  check_run(fin(mk(OP_LINEAR, 2, a, b)), 1, want, 0);
}
END_TEST

/* quantize then dequantize gives back every value a code stands for,
 * exactly (x = (float)(q - zp) * s), for scales that are not powers of
 * two; beyond the range it saturates at +-127 (symmetric) or at -128 and
 * 127 (with a zero point). */
static void quant_round_trip(double scale, int zp) {
  teardown();
  setup();
  float s = (float)scale;
  int lo = zp ? -128 : -127;
  int n = 127 - lo + 1 + 4;
  double *x = calloc((size_t)n, sizeof *x);
  for (int q = lo; q <= 127; q++) x[q - lo] = (float)(q - zp) * s;
  x[n - 4] = (float)(400 - zp) * s, x[n - 3] = (float)(-400 - zp) * s;
  x[n - 2] = INFINITY, x[n - 1] = NAN;
  Value *in = input_vals(ty(TY_F32, 1, n), x);
  Node *qn = mk(OP_QUANTIZE, 1, in);
  ir_set_float(g, qn, "scale", scale);
  if (zp) ir_set_int(g, qn, "zero_point", zp);
  Value *qv = fin(qn);
  Node *dn = mk(OP_DEQUANTIZE, 1, qv);
  ir_set_float(g, dn, "scale", scale);
  if (zp) ir_set_int(g, dn, "zero_point", zp);
  Value *vs[2] = {qv, fin(dn)};
  Tensor out[2];
  ck_assert_msg(try_run(2, vs, out), "%s", err);
  for (int q = lo; q <= 127; q++) {
    ck_assert_int_eq((int)at(&out[0], q - lo), q);
    ck_assert_msg(((float *)out[1].data)[q - lo] == (float)x[q - lo], "scale %g zp %d: code %d", scale, zp, q);
  }
  ck_assert_int_eq((int)at(&out[0], n - 4), 127);
  ck_assert_int_eq((int)at(&out[0], n - 3), lo);
  ck_assert_int_eq((int)at(&out[0], n - 2), 127);
  ck_assert_int_eq((int)at(&out[0], n - 1), zp);
  ir_tensor_free(&out[0]);
  ir_tensor_free(&out[1]);
  free(x);
}

START_TEST(test_quantize_round_trip) {
  static const double scales[] = {0.0123, 1.0 / 3.0, 0.25, 7.5e-5, 3.0};
  for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
    quant_round_trip(scales[i], 0);
    quant_round_trip(scales[i], -128);
    quant_round_trip(scales[i], -100);
  }
}
END_TEST

/* conv2d against im2col + matmul written out here. */
static void conv_case(int N, int C, int H, int W, int Co, int KH, int KW, int sh, int sw, int pt,
                      int pl, int pb, int pr, int dh, int dw, int groups, bool bias) {
  teardown();
  setup();
  Value *x = input_rand(ty(TY_F32, 4, N, C, H, W));
  Value *w = input_rand(ty(TY_F32, 4, Co, C / groups, KH, KW));
  Value *b = bias ? input_rand(ty(TY_F32, 1, Co)) : NULL;
  Node *n = bias ? mk(OP_CONV2D, 3, x, w, b) : mk(OP_CONV2D, 2, x, w);
  set_ints(n, "stride", 2, sh, sw);
  set_ints(n, "pad", 4, pt, pl, pb, pr);
  set_ints(n, "dilation", 2, dh, dw);
  ir_set_int(g, n, "groups", groups);
  Value *y = fin(n);
  int OH = (H + pt + pb - dh * (KH - 1) - 1) / sh + 1, OW = (W + pl + pr - dw * (KW - 1) - 1) / sw + 1;
  ck_assert_int_eq(y->type.dims[2], OH);
  ck_assert_int_eq(y->type.dims[3], OW);
  Tensor t = run1(y);
  const Tensor *X = input_tensor(x), *Wt = input_tensor(w), *B = bias ? input_tensor(b) : NULL;
  int Cg = C / groups, Cog = Co / groups, K = Cg * KH * KW, P = OH * OW;
  double *col = calloc((size_t)K * P, sizeof(double));
  for (int nb = 0; nb < N; nb++)
    for (int gi = 0; gi < groups; gi++) {
      /* col[k][p]: the input under kernel tap k at output position p. */
      for (int c = 0; c < Cg; c++)
        for (int kh = 0; kh < KH; kh++)
          for (int kw = 0; kw < KW; kw++)
            for (int oh = 0; oh < OH; oh++)
              for (int ow = 0; ow < OW; ow++) {
                int ih = oh * sh - pt + kh * dh, iw = ow * sw - pl + kw * dw;
                int k = (c * KH + kh) * KW + kw, p = oh * OW + ow;
                bool in = ih >= 0 && ih < H && iw >= 0 && iw < W;
                col[k * P + p] = in ? at(X, ((nb * C + gi * Cg + c) * H + ih) * W + iw) : 0;
              }
      for (int co = 0; co < Cog; co++)
        for (int p = 0; p < P; p++) {
          int oc = gi * Cog + co;
          double s = B ? at(B, oc) : 0;
          for (int k = 0; k < K; k++) s += at(Wt, oc * K + k) * col[k * P + p];
          ck_assert_double_eq_tol(at(&t, (nb * Co + oc) * P + p), s, 1e-5);
        }
    }
  free(col);
  ir_tensor_free(&t);
}

START_TEST(test_conv2d_im2col) {
  conv_case(1, 1, 3, 3, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1, 1, 1, false);
  conv_case(2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true);   /* same padding, odd sizes */
  conv_case(1, 2, 9, 8, 3, 3, 2, 2, 3, 1, 0, 2, 1, 1, 1, 1, true);   /* strides, asymmetric pad */
  conv_case(1, 2, 9, 9, 2, 3, 3, 1, 2, 2, 2, 2, 2, 2, 3, 1, false);  /* dilation */
  conv_case(2, 4, 6, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, true);   /* groups */
  conv_case(1, 5, 5, 7, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 5, true);   /* depthwise */
  conv_case(1, 3, 4, 4, 8, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, true);   /* 1x1 */
  conv_case(1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, true);   /* one element */
  conv_case(1, 2, 1, 5, 2, 1, 3, 1, 1, 0, 1, 0, 1, 1, 1, 1, false);  /* 1-row image */
}
END_TEST

START_TEST(test_conv2d_by_hand) {
  double x[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[] = {1, 0, 0, -1};
  Value *a = input_vals(ty(TY_F32, 4, 1, 1, 3, 3), x), *b = input_vals(ty(TY_F32, 4, 1, 1, 2, 2), w);
  Node *n = mk(OP_CONV2D, 2, a, b);
  set_ints(n, "pad", 4, 1, 1, 0, 0);
  /* Padded top and left: out[i][j] = x[i-1][j-1] - x[i][j]. */
  double want[] = {-1, -2, -3, -4, -4, -4, -7, -4, -4};
  check_run(fin(n), 9, want, 0);
}
END_TEST

/* conv_transpose2d is conv2d's adjoint with the same weight:
 * <conv2d(x), u> == <x, conv_transpose2d(u)>, output_pad restoring the
 * rows a strided conv2d drops. */
static void conv_t_case(int N, int C, int H, int W, int Co, int KH, int KW, int sh, int sw, int pt,
                        int pl, int pb, int pr, int dh, int dw, int groups) {
  teardown();
  setup();
  Value *x = input_rand(ty(TY_F32, 4, N, C, H, W));
  Value *w = input_rand(ty(TY_F32, 4, Co, C / groups, KH, KW));
  Node *n = mk(OP_CONV2D, 2, x, w);
  set_ints(n, "stride", 2, sh, sw);
  set_ints(n, "pad", 4, pt, pl, pb, pr);
  set_ints(n, "dilation", 2, dh, dw);
  ir_set_int(g, n, "groups", groups);
  Value *y = fin(n);
  Value *u = input_rand(y->type);
  Node *t = mk(OP_CONV_TRANSPOSE2D, 2, u, w);
  set_ints(t, "stride", 2, sh, sw);
  set_ints(t, "pad", 4, pt, pl, pb, pr);
  set_ints(t, "output_pad", 2, (H + pt + pb - dh * (KH - 1) - 1) % sh,
           (W + pl + pr - dw * (KW - 1) - 1) % sw);
  set_ints(t, "dilation", 2, dh, dw);
  ir_set_int(g, t, "groups", groups);
  Value *z = fin(t);
  ck_assert(ir_type_eq(&z->type, &x->type));
  Value *vs[2] = {y, z};
  Tensor out[2];
  ck_assert_msg(try_run(2, vs, out), "%s", err);
  const Tensor *X = input_tensor(x), *U = input_tensor(u);
  double lhs = 0, rhs = 0, scale = 0;
  for (int64_t i = 0; i < ir_type_numel(&y->type); i++) {
    lhs += at(&out[0], i) * at(U, i);
    scale += fabs(at(&out[0], i) * at(U, i));
  }
  for (int64_t i = 0; i < ir_type_numel(&x->type); i++) rhs += at(X, i) * at(&out[1], i);
  ck_assert_msg(fabs(lhs - rhs) <= 1e-5 * (1 + scale), "<conv x, u> = %.9g, <x, convT u> = %.9g",
                lhs, rhs);
  ir_tensor_free(&out[0]);
  ir_tensor_free(&out[1]);
}

START_TEST(test_conv_transpose2d_adjoint) {
  conv_t_case(1, 1, 3, 3, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1, 1, 1);
  conv_t_case(2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1);
  conv_t_case(1, 2, 9, 8, 3, 3, 2, 2, 3, 1, 0, 2, 1, 1, 1, 1);  /* strides, asymmetric pad */
  conv_t_case(1, 2, 10, 9, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1); /* output_pad 1 */
  conv_t_case(1, 2, 9, 9, 2, 3, 3, 1, 2, 2, 2, 2, 2, 2, 3, 1);  /* dilation */
  conv_t_case(2, 4, 6, 6, 6, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 2);  /* groups */
  conv_t_case(1, 3, 5, 7, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3);  /* depthwise */
}
END_TEST

START_TEST(test_conv_transpose2d_by_hand) {
  double x[] = {1, 2, 3, 4}, w[] = {1, 10, 100, 1000}, bias[] = {0.5};
  Value *a = input_vals(ty(TY_F32, 4, 1, 1, 2, 2), x), *b = input_vals(ty(TY_F32, 4, 1, 1, 2, 2), w);
  /* Stride 1: each input scatters the kernel times itself. */
  double full[] = {1, 12, 20, 103, 1234, 2040, 300, 3400, 4000};
  check_run(fin(mk(OP_CONV_TRANSPOSE2D, 2, a, b)), 9, full, 0);
  /* Stride 2 tiles the 4x4 of x[i][j] * w; output_pad adds a zero row and
   * column, pad 1 cuts one from each side: the middle 3x3, plus bias. */
  Value *c = input_vals(ty(TY_F32, 1, 1), bias);
  Node *n = mk(OP_CONV_TRANSPOSE2D, 3, a, b, c);
  set_ints(n, "stride", 2, 2, 2);
  set_ints(n, "pad", 4, 1, 1, 1, 1);
  set_ints(n, "output_pad", 2, 1, 1);
  double strided[] = {1000.5, 200.5, 2000.5, 30.5, 4.5, 40.5, 3000.5, 400.5, 4000.5};
  check_run(fin(n), 9, strided, 0);
}
END_TEST

START_TEST(test_conv_transpose2d_rejects) {
  Value *a = input_rand(ty(TY_F32, 4, 1, 2, 3, 3)), *b = input_rand(ty(TY_F32, 4, 2, 1, 2, 2));
  char msg[256];
  Node *n = mk(OP_CONV_TRANSPOSE2D, 2, a, b);
  ck_assert(ir_fill_defaults(g, n, msg, sizeof msg));
  set_ints(n, "output_pad", 2, 1, 0);
  ck_assert(!ir_infer(n, msg, sizeof msg));
  ck_assert_msg(strstr(msg, "output_pad height 1 must be smaller than the stride"), "%s", msg);
  Value *w3 = input_rand(ty(TY_F32, 4, 3, 1, 2, 2));
  Node *m = mk(OP_CONV_TRANSPOSE2D, 2, a, w3);
  ck_assert(ir_fill_defaults(g, m, msg, sizeof msg));
  ck_assert(!ir_infer(m, msg, sizeof msg));
  ck_assert_msg(strstr(msg, "expects 3 input channels"), "%s", msg);
}
END_TEST

/* ---- resize ---- */

static Node *resize(Value *x, int oh, int ow, const char *mode, int align) {
  Node *n = mk(OP_RESIZE, 1, x);
  set_ints(n, "size", 2, oh, ow);
  ir_set_str(g, n, "mode", mode);
  ir_set_int(g, n, "align_corners", align);
  return n;
}

START_TEST(test_resize_nearest_integer_scale) {
  /* An integer scale repeats each pixel s times: out[i][j] = x[i / s][j / s]. */
  Value *x = input_rand(ty(TY_F32, 4, 2, 3, 4, 5));
  Tensor t = run1(fin(resize(x, 8, 15, "nearest", 0)));
  const Tensor *X = input_tensor(x);
  for (int c = 0; c < 6; c++)
    for (int i = 0; i < 8; i++)
      for (int j = 0; j < 15; j++)
        ck_assert_double_eq(at(&t, (c * 8 + i) * 15 + j), at(X, (c * 4 + i / 2) * 5 + j / 3));
  ir_tensor_free(&t);
}
END_TEST

START_TEST(test_resize_bilinear_by_hand) {
  /* PyTorch: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=...). */
  double x[] = {1, 2, 3, 4};
  Value *a = input_vals(ty(TY_F32, 4, 1, 1, 2, 2), x);
  double half[] = {1,   1.25, 1.75, 2,   1.5, 1.75, 2.25, 2.5,
                   2.5, 2.75, 3.25, 3.5, 3,   3.25, 3.75, 4};
  check_run(fin(resize(a, 4, 4, "bilinear", 0)), 16, half, 1e-7);
  double t = 1.0 / 3, u = 2.0 / 3;
  double corners[] = {1,     1 + t, 1 + u, 2,     1 + u, 2,     2 + t, 2 + u,
                      2 + t, 2 + u, 3,     3 + t, 3,     3 + t, 3 + u, 4};
  check_run(fin(resize(a, 4, 4, "bilinear", 1)), 16, corners, 1e-7);
}
END_TEST

/* Bilinear interpolation reproduces a plane a*h + b*w + c exactly at the
 * source coordinate, clamped to the image: up and down, both modes. */
static void plane_case(int H, int W, int OH, int OW, int align) {
  teardown();
  setup();
  double *v = calloc((size_t)(H * W), sizeof(double));
  for (int h = 0; h < H; h++)
    for (int w = 0; w < W; w++) v[h * W + w] = 0.75 * h - 0.5 * w + 2;
  Value *x = input_vals(ty(TY_F32, 4, 1, 1, H, W), v);
  free(v);
  Tensor t = run1(fin(resize(x, OH, OW, "bilinear", align)));
  for (int i = 0; i < OH; i++)
    for (int j = 0; j < OW; j++) {
      double sh = align ? (OH > 1 ? i * (H - 1.0) / (OH - 1) : 0) : (i + 0.5) * H / OH - 0.5;
      double sw = align ? (OW > 1 ? j * (W - 1.0) / (OW - 1) : 0) : (j + 0.5) * W / OW - 0.5;
      sh = fmin(fmax(sh, 0), H - 1), sw = fmin(fmax(sw, 0), W - 1);
      ck_assert_double_eq_tol(at(&t, i * OW + j), 0.75 * sh - 0.5 * sw + 2, 1e-5);
    }
  ir_tensor_free(&t);
}

START_TEST(test_resize_bilinear_plane) {
  for (int align = 0; align < 2; align++) {
    plane_case(3, 4, 7, 9, align);
    plane_case(8, 9, 3, 5, align); /* downsampling */
    plane_case(5, 1, 5, 4, align); /* one column */
    plane_case(4, 4, 1, 1, align); /* one output pixel */
  }
}
END_TEST

START_TEST(test_resize_rejects) {
  Value *x = input_rand(ty(TY_F32, 4, 1, 1, 2, 2));
  char msg[256];
  Node *n = resize(x, 4, 4, "bicubic", 0);
  ck_assert(!ir_infer(n, msg, sizeof msg));
  ck_assert_msg(strstr(msg, "mode must be \"nearest\" or \"bilinear\""), "%s", msg);
  Node *m = resize(x, 4, 4, "nearest", 1);
  ck_assert(!ir_infer(m, msg, sizeof msg));
  ck_assert_msg(strstr(msg, "align_corners applies only"), "%s", msg);
}
END_TEST

/* ---- pooling ---- */

static Node *pool(OpKind op, Value *x, int k, int s, int p, int ceil_mode) {
  Node *n = mk(op, 1, x);
  set_ints(n, "kernel", 2, k, k);
  set_ints(n, "stride", 2, s, s);
  set_ints(n, "pad", 4, p, p, p, p);
  ir_set_int(g, n, "ceil_mode", ceil_mode);
  return n;
}

START_TEST(test_maxpool) {
  double v[25];
  for (int i = 0; i < 25; i++) v[i] = i % 7 - 3 * (i % 3);
  Value *x = input_vals(ty(TY_F32, 4, 1, 1, 5, 5), v);
  Value *y = fin(pool(OP_MAXPOOL2D, x, 2, 2, 0, 0));
  ck_assert_int_eq(y->type.dims[2], 2);
  double w0[4];
  for (int oh = 0; oh < 2; oh++)
    for (int ow = 0; ow < 2; ow++) {
      double m = -INFINITY;
      for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) m = fmax(m, v[(2 * oh + a) * 5 + 2 * ow + b]);
      w0[oh * 2 + ow] = m;
    }
  check_run(y, 4, w0, 0);
  /* ceil_mode: a third, clipped window in each direction. */
  y = fin(pool(OP_MAXPOOL2D, x, 2, 2, 0, 1));
  ck_assert_int_eq(y->type.dims[2], 3);
  Tensor t = run1(y);
  ck_assert_double_eq(at(&t, 8), v[24]);
  ck_assert_double_eq(at(&t, 2), fmax(v[4], v[9]));
  ir_tensor_free(&t);
  /* Padding is -inf, so all-negative inputs stay negative at the border. */
  double neg[] = {-1, -2, -3, -4};
  Value *z = input_vals(ty(TY_F32, 4, 1, 1, 2, 2), neg);
  double wz[] = {-1, -1, -2, -1, -1, -2, -3, -3, -4};
  check_run(fin(pool(OP_MAXPOOL2D, z, 2, 1, 1, 0)), 9, wz, 0);
}
END_TEST

START_TEST(test_maxpool_dilation) {
  double v[16];
  for (int i = 0; i < 16; i++) v[i] = (i * 5) % 16;
  Value *x = input_vals(ty(TY_F32, 4, 1, 1, 4, 4), v);
  Node *n = pool(OP_MAXPOOL2D, x, 2, 1, 0, 0);
  set_ints(n, "dilation", 2, 2, 2);
  Value *y = fin(n);
  ck_assert_int_eq(y->type.dims[2], 2);
  double want[4];
  for (int oh = 0; oh < 2; oh++)
    for (int ow = 0; ow < 2; ow++)
      want[oh * 2 + ow] = fmax(fmax(v[oh * 4 + ow], v[oh * 4 + ow + 2]),
                               fmax(v[(oh + 2) * 4 + ow], v[(oh + 2) * 4 + ow + 2]));
  check_run(y, 4, want, 0);
}
END_TEST

START_TEST(test_avgpool_pad) {
  double ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  Value *x = input_vals(ty(TY_F32, 4, 1, 1, 3, 3), ones);
  double inc[] = {0.25, 0.5, 0.5, 1};
  check_run(fin(pool(OP_AVGPOOL2D, x, 2, 2, 1, 0)), 4, inc, 0);
  Node *n = pool(OP_AVGPOOL2D, x, 2, 2, 1, 0);
  ir_set_int(g, n, "count_include_pad", 0);
  double exc[] = {1, 1, 1, 1};
  check_run(fin(n), 4, exc, 0);
}
END_TEST

/* PyTorch: avg_pool2d(arange(25).view(1,1,5,5), 2, 2, ceil_mode=True). */
START_TEST(test_avgpool_ceil_mode) {
  double v[25];
  for (int i = 0; i < 25; i++) v[i] = i;
  Value *x = input_vals(ty(TY_F32, 4, 1, 1, 5, 5), v);
  double want[] = {3, 5, 6.5, 13, 15, 16.5, 20.5, 22.5, 24};
  check_run(fin(pool(OP_AVGPOOL2D, x, 2, 2, 0, 1)), 9, want, 0);
  /* With padding the divisor counts the padded extent only:
   * avg_pool2d(ones(1,1,4,4), 3, 2, 1, ceil_mode=True). */
  double ones[16];
  for (int i = 0; i < 16; i++) ones[i] = 1;
  Value *y = input_vals(ty(TY_F32, 4, 1, 1, 4, 4), ones);
  Value *p = fin(pool(OP_AVGPOOL2D, y, 3, 2, 1, 1));
  ck_assert_int_eq(p->type.dims[2], 3);
  double w2[] = {4.0 / 9, 6.0 / 9, 2.0 / 6, 6.0 / 9, 1, 3.0 / 6, 2.0 / 6, 3.0 / 6, 0.25};
  check_run(p, 9, w2, 1e-7);
}
END_TEST

/* ---- data movement ---- */

START_TEST(test_reshape_transpose) {
  double v[24];
  for (int i = 0; i < 24; i++) v[i] = i;
  Value *x = input_vals(ty(TY_F32, 3, 2, 3, 4), v);
  Node *n = mk(OP_TRANSPOSE, 1, x);
  set_ints(n, "perm", 3, 2, 0, 1);
  Value *t = fin(n);
  ck_assert_int_eq(t->type.dims[0], 4);
  ck_assert_int_eq(t->type.dims[1], 2);
  Tensor r = run1(t);
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 3; c++) ck_assert_double_eq(at(&r, (a * 2 + b) * 3 + c), v[(b * 3 + c) * 4 + a]);
  ir_tensor_free(&r);
  n = mk(OP_RESHAPE, 1, x);
  set_ints(n, "shape", 2, 6, 4);
  check_run(fin(n), 24, v, 0);
}
END_TEST

START_TEST(test_expand_concat) {
  double v[] = {1, 2, 3};
  Value *x = input_vals(ty(TY_I32, 2, 3, 1), v);
  Node *n = mk(OP_EXPAND, 1, x);
  set_ints(n, "shape", 3, 2, 3, 2);
  double e[] = {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3};
  check_run(fin(n), 12, e, 0);
  double a[] = {1, 2, 3, 4}, b[] = {5, 6}, c[] = {7, 8, 9, 10, 11, 12};
  Value *p = input_vals(ty(TY_F32, 2, 2, 2), a), *q = input_vals(ty(TY_F32, 2, 2, 1), b);
  Value *r = input_vals(ty(TY_F32, 2, 2, 3), c);
  n = mk(OP_CONCAT, 3, p, q, r);
  ir_set_int(g, n, "axis", 1);
  double w[] = {1, 2, 5, 7, 8, 9, 3, 4, 6, 10, 11, 12};
  check_run(fin(n), 12, w, 0);
  n = mk(OP_CONCAT, 2, p, p);
  ir_set_int(g, n, "axis", 0);
  double w0[] = {1, 2, 3, 4, 1, 2, 3, 4};
  check_run(fin(n), 8, w0, 0);
}
END_TEST

START_TEST(test_slice_pad) {
  double v[20];
  for (int i = 0; i < 20; i++) v[i] = i;
  Value *x = input_vals(ty(TY_F32, 2, 4, 5), v);
  Node *n = mk(OP_SLICE, 1, x);
  set_ints(n, "starts", 2, 1, 0);
  set_ints(n, "ends", 2, 4, 5);
  set_ints(n, "steps", 2, 2, 3);
  double want[] = {5, 8, 15, 18};
  check_run(fin(n), 4, want, 0);
  double s[] = {1, 2, 3, 4};
  Value *y = input_vals(ty(TY_F32, 2, 2, 2), s);
  n = mk(OP_PAD, 1, y);
  set_ints(n, "pads", 4, 1, 0, 0, 2);
  ir_set_float(g, n, "value", -1);
  double p[] = {-1, -1, -1, -1, 1, 2, -1, -1, 3, 4, -1, -1};
  check_run(fin(n), 12, p, 0);
}
END_TEST

START_TEST(test_gather) {
  double v[] = {10, 11, 12, 20, 21, 22, 30, 31, 32};
  Value *x = input_vals(ty(TY_F32, 2, 3, 3), v);
  double iv[] = {2, -3, 1, 1};
  Value *i = input_vals(ty(TY_I64, 2, 2, 2), iv);
  Node *n = mk(OP_GATHER, 2, x, i);
  Value *r = fin(n); /* axis 0: [2, 2, 3] */
  ck_assert_int_eq(r->type.rank, 3);
  double w[] = {30, 31, 32, 10, 11, 12, 20, 21, 22, 20, 21, 22};
  check_run(r, 12, w, 0);
  double jv[] = {0, 2};
  Value *j = input_vals(ty(TY_I32, 1, 2), jv);
  n = mk(OP_GATHER, 2, x, j);
  ir_set_int(g, n, "axis", 1);
  double w1[] = {10, 12, 20, 22, 30, 32};
  check_run(fin(n), 6, w1, 0);
}
END_TEST

START_TEST(test_gather_out_of_range) {
  double v[] = {1, 2, 3}, iv[] = {0, 3};
  Value *x = input_vals(ty(TY_F32, 1, 3), v), *i = input_vals(ty(TY_I32, 1, 2), iv);
  Value *r = fin(mk(OP_GATHER, 2, x, i));
  Tensor t;
  ck_assert(!try_run(1, &r, &t));
  ck_assert_str_eq(err, "gather: index 3 is out of range for axis 0 of size 3");
}
END_TEST

START_TEST(test_const_splat) {
  Node *c = ir_const(g, 2.5, TY_F32, noloc);
  double want[] = {2.5};
  check_run(&c->out[0], 1, want, 0);
  double v[] = {1, 2};
  Value *x = input_vals(ty(TY_I32, 1, 2), v);
  Node *k = ir_const(g, 3.9, TY_I32, noloc);
  double w[] = {4, 5}; /* 3.9 truncates to 3 */
  check_run(bin(OP_ADD, x, &k->out[0]), 2, w, 0);
}
END_TEST

/* ---- recurrent layers ---- */

static double sg(double x) { return 1 / (1 + exp(-x)); }

/* One step, one unit, by hand: h' = o tanh(f c + i g) with c = 0. */
START_TEST(test_lstm_one_step) {
  double xv[] = {0.5}, wih[] = {0.1, 0.2, 0.3, 0.4}, whh[] = {1, 1, 1, 1};
  double bih[] = {0.01, 0.02, 0.03, 0.04}, bhh[] = {-0.1, 0.1, -0.2, 0.2};
  Value *x = input_vals(ty(TY_F32, 3, 1, 1, 1), xv);
  Value *a = input_vals(ty(TY_F32, 2, 4, 1), wih), *b = input_vals(ty(TY_F32, 2, 4, 1), whh);
  Value *c = input_vals(ty(TY_F32, 1, 4), bih), *d = input_vals(ty(TY_F32, 1, 4), bhh);
  Node *n = mk(OP_LSTM, 5, x, a, b, c, d);
  ir_set_int(g, n, "hidden", 1);
  fin(n);
  double pre[4];
  for (int k = 0; k < 4; k++) pre[k] = wih[k] * 0.5 + bih[k] + bhh[k];
  double cc = sg(pre[1]) * 0 + sg(pre[0]) * tanh(pre[2]);
  double hh = sg(pre[3]) * tanh(cc);
  Value *outs[3] = {&n->out[0], &n->out[1], &n->out[2]};
  Tensor t[3];
  ck_assert_msg(try_run(3, outs, t), "%s", err);
  ck_assert_double_eq_tol(at(&t[0], 0), hh, 1e-7);
  ck_assert_double_eq_tol(at(&t[1], 0), hh, 1e-7);
  ck_assert_double_eq_tol(at(&t[2], 0), cc, 1e-7);
  for (int i = 0; i < 3; i++) ir_tensor_free(&t[i]);
}
END_TEST

/* Two steps, two units, no bias, written out in full. */
START_TEST(test_lstm_two_steps) {
  enum { H = 2 };
  Value *x = input_rand(ty(TY_F32, 3, 1, 2, 3));
  Value *a = input_rand(ty(TY_F32, 2, 4 * H, 3)), *b = input_rand(ty(TY_F32, 2, 4 * H, H));
  Node *n = mk(OP_LSTM, 3, x, a, b);
  ir_set_int(g, n, "hidden", H);
  ir_set_int(g, n, "bias", 0);
  fin(n);
  const Tensor *X = input_tensor(x), *A = input_tensor(a), *B = input_tensor(b);
  double h[H] = {0}, c[H] = {0}, ys[2][H];
  for (int t = 0; t < 2; t++) {
    double gate[4 * H];
    for (int r = 0; r < 4 * H; r++) {
      gate[r] = 0;
      for (int k = 0; k < 3; k++) gate[r] += at(A, r * 3 + k) * at(X, t * 3 + k);
      for (int k = 0; k < H; k++) gate[r] += at(B, r * H + k) * h[k];
    }
    for (int j = 0; j < H; j++) {
      c[j] = sg(gate[H + j]) * c[j] + sg(gate[j]) * tanh(gate[2 * H + j]);
      ys[t][j] = sg(gate[3 * H + j]) * tanh(c[j]);
    }
    for (int j = 0; j < H; j++) h[j] = ys[t][j];
  }
  Value *outs[3] = {&n->out[0], &n->out[1], &n->out[2]};
  Tensor t[3];
  ck_assert_msg(try_run(3, outs, t), "%s", err);
  for (int s = 0; s < 2; s++)
    for (int j = 0; j < H; j++) ck_assert_double_eq_tol(at(&t[0], s * H + j), ys[s][j], 1e-6);
  for (int j = 0; j < H; j++) {
    ck_assert_double_eq_tol(at(&t[1], j), h[j], 1e-6);
    ck_assert_double_eq_tol(at(&t[2], j), c[j], 1e-6);
  }
  for (int i = 0; i < 3; i++) ir_tensor_free(&t[i]);
}
END_TEST

static Node *rnn(OpKind op, int layers, int bidir, int batch_first, Value **in, int n_in, int H) {
  Node *n = ir_node_new(g, op, n_in, in, noloc);
  ir_set_int(g, n, "hidden", H);
  ir_set_int(g, n, "layers", layers);
  ir_set_int(g, n, "bidirectional", bidir);
  ir_set_int(g, n, "batch_first", batch_first);
  fin(n);
  return n;
}

/* The reverse direction is the forward recurrence on the reversed
 * sequence; the forward half of a bidirectional layer is a plain one. */
START_TEST(test_lstm_bidirectional) {
  enum { N = 2, T = 3, I = 2, H = 3 };
  double xv[N * T * I], xr[N * T * I];
  for (int i = 0; i < N * T * I; i++) xv[i] = sin(i + 1.0);
  for (int b = 0; b < N; b++)
    for (int t = 0; t < T; t++)
      for (int f = 0; f < I; f++) xr[(b * T + t) * I + f] = xv[(b * T + (T - 1 - t)) * I + f];
  Value *x = input_vals(ty(TY_F32, 3, N, T, I), xv), *x2 = input_vals(ty(TY_F32, 3, N, T, I), xr);
  Value *w[8];
  for (int d = 0; d < 2; d++) {
    w[4 * d] = input_rand(ty(TY_F32, 2, 4 * H, I));
    w[4 * d + 1] = input_rand(ty(TY_F32, 2, 4 * H, H));
    w[4 * d + 2] = input_rand(ty(TY_F32, 1, 4 * H));
    w[4 * d + 3] = input_rand(ty(TY_F32, 1, 4 * H));
  }
  Value *bi_in[9] = {x, w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]};
  Node *bi = rnn(OP_LSTM, 1, 1, 1, bi_in, 9, H);
  ck_assert_int_eq(bi->out[0].type.dims[2], 2 * H);
  ck_assert_int_eq(bi->out[1].type.dims[0], 2);
  Value *f_in[5] = {x, w[0], w[1], w[2], w[3]}, *r_in[5] = {x2, w[4], w[5], w[6], w[7]};
  Node *fw = rnn(OP_LSTM, 1, 0, 1, f_in, 5, H), *rv = rnn(OP_LSTM, 1, 0, 1, r_in, 5, H);
  Value *outs[6] = {&bi->out[0], &bi->out[1], &fw->out[0], &fw->out[1], &rv->out[0], &rv->out[1]};
  Tensor t[6];
  ck_assert_msg(try_run(6, outs, t), "%s", err);
  for (int b = 0; b < N; b++)
    for (int s = 0; s < T; s++)
      for (int j = 0; j < H; j++) {
        double y_f = at(&t[0], (b * T + s) * 2 * H + j), y_r = at(&t[0], (b * T + s) * 2 * H + H + j);
        ck_assert_double_eq_tol(y_f, at(&t[2], (b * T + s) * H + j), 1e-6);
        ck_assert_double_eq_tol(y_r, at(&t[4], (b * T + (T - 1 - s)) * H + j), 1e-6);
      }
  for (int b = 0; b < N; b++)
    for (int j = 0; j < H; j++) {
      ck_assert_double_eq_tol(at(&t[1], b * H + j), at(&t[3], b * H + j), 1e-6);
      ck_assert_double_eq_tol(at(&t[1], (N + b) * H + j), at(&t[5], b * H + j), 1e-6);
    }
  for (int i = 0; i < 6; i++) ir_tensor_free(&t[i]);
}
END_TEST

/* Two layers equal two one-layer LSTMs chained; batch_first=0 is the
 * transposed layout. */
START_TEST(test_lstm_layers_and_layout) {
  enum { N = 2, T = 4, I = 3, H = 2 };
  double xv[N * T * I], xt[N * T * I];
  for (int i = 0; i < N * T * I; i++) xv[i] = cos(0.7 * i);
  for (int b = 0; b < N; b++)
    for (int t = 0; t < T; t++)
      for (int f = 0; f < I; f++) xt[(t * N + b) * I + f] = xv[(b * T + t) * I + f];
  Value *x = input_vals(ty(TY_F32, 3, N, T, I), xv), *x2 = input_vals(ty(TY_F32, 3, T, N, I), xt);
  Value *w0[4] = {input_rand(ty(TY_F32, 2, 4 * H, I)), input_rand(ty(TY_F32, 2, 4 * H, H)),
                  input_rand(ty(TY_F32, 1, 4 * H)), input_rand(ty(TY_F32, 1, 4 * H))};
  Value *w1[4] = {input_rand(ty(TY_F32, 2, 4 * H, H)), input_rand(ty(TY_F32, 2, 4 * H, H)),
                  input_rand(ty(TY_F32, 1, 4 * H)), input_rand(ty(TY_F32, 1, 4 * H))};
  Value *two_in[9] = {x, w0[0], w0[1], w0[2], w0[3], w1[0], w1[1], w1[2], w1[3]};
  Node *two = rnn(OP_LSTM, 2, 0, 1, two_in, 9, H);
  Value *l0_in[5] = {x, w0[0], w0[1], w0[2], w0[3]};
  Node *l0 = rnn(OP_LSTM, 1, 0, 1, l0_in, 5, H);
  Value *l1_in[5] = {&l0->out[0], w1[0], w1[1], w1[2], w1[3]};
  Node *l1 = rnn(OP_LSTM, 1, 0, 1, l1_in, 5, H);
  Value *tr_in[9] = {x2, w0[0], w0[1], w0[2], w0[3], w1[0], w1[1], w1[2], w1[3]};
  Node *tr = rnn(OP_LSTM, 2, 0, 0, tr_in, 9, H);
  Value *outs[6] = {&two->out[0], &two->out[2], &l1->out[0], &l0->out[2], &l1->out[2], &tr->out[0]};
  Tensor t[6];
  ck_assert_msg(try_run(6, outs, t), "%s", err);
  for (int i = 0; i < N * T * H; i++) ck_assert_double_eq_tol(at(&t[0], i), at(&t[2], i), 1e-6);
  for (int b = 0; b < N; b++)
    for (int s = 0; s < T; s++)
      for (int j = 0; j < H; j++)
        ck_assert_double_eq_tol(at(&t[5], (s * N + b) * H + j), at(&t[0], (b * T + s) * H + j), 1e-6);
  for (int i = 0; i < N * H; i++) {
    ck_assert_double_eq_tol(at(&t[1], i), at(&t[3], i), 1e-6);         /* c_n[0] = layer 0's */
    ck_assert_double_eq_tol(at(&t[1], N * H + i), at(&t[4], i), 1e-6); /* c_n[1] = layer 1's */
  }
  for (int i = 0; i < 6; i++) ir_tensor_free(&t[i]);
}
END_TEST

START_TEST(test_gru_one_step) {
  double xv[] = {0.5, -1}, wih[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, whh[] = {0.7, -0.8, 0.9};
  double bih[] = {0.01, 0.02, 0.03}, bhh[] = {-0.1, 0.1, -0.2};
  /* One unit, T = 2 so the second step sees h != 0. */
  Value *x = input_vals(ty(TY_F32, 3, 1, 2, 1), xv);
  Value *a = input_vals(ty(TY_F32, 2, 3, 1), wih), *b = input_vals(ty(TY_F32, 2, 3, 1), whh);
  Value *c = input_vals(ty(TY_F32, 1, 3), bih), *d = input_vals(ty(TY_F32, 1, 3), bhh);
  Node *n = mk(OP_GRU, 5, x, a, b, c, d);
  ir_set_int(g, n, "hidden", 1);
  fin(n);
  double h = 0, ys[2];
  for (int t = 0; t < 2; t++) {
    double r = sg(wih[0] * xv[t] + bih[0] + whh[0] * h + bhh[0]);
    double z = sg(wih[1] * xv[t] + bih[1] + whh[1] * h + bhh[1]);
    double nn = tanh(wih[2] * xv[t] + bih[2] + r * (whh[2] * h + bhh[2]));
    h = (1 - z) * nn + z * h;
    ys[t] = h;
  }
  Value *outs[2] = {&n->out[0], &n->out[1]};
  Tensor t[2];
  ck_assert_msg(try_run(2, outs, t), "%s", err);
  ck_assert_double_eq_tol(at(&t[0], 0), ys[0], 1e-7);
  ck_assert_double_eq_tol(at(&t[0], 1), ys[1], 1e-7);
  ck_assert_double_eq_tol(at(&t[1], 0), ys[1], 1e-7);
  for (int i = 0; i < 2; i++) ir_tensor_free(&t[i]);
}
END_TEST

/* ---- the graph ---- */

START_TEST(test_missing_and_mistyped_input) {
  TensorType t = ty(TY_F32, 2, 2, 3);
  Node *p = ir_source(g, OP_PARAM, &t, "fc.weight", noloc);
  Value *r = un(OP_RELU, &p->out[0]);
  Tensor out;
  ck_assert(!try_run(1, &r, &out));
  ck_assert_str_eq(err, "param: no param named 'fc.weight' (f32[2, 3]) was given");
  Tensor w;
  TensorType wrong = ty(TY_F32, 2, 3, 2);
  ck_assert(ir_tensor_alloc(&w, &wrong));
  const char *names[] = {"fc.weight"};
  TensorMap params = {1, names, &w};
  ck_assert(!ir_eval(g, NULL, &params, &out, err, sizeof err));
  ck_assert_str_eq(err, "param: param 'fc.weight' is f32[3, 2], the graph expects f32[2, 3]");
  ir_tensor_free(&w);
}
END_TEST

START_TEST(test_params_and_reuse) {
  /* x used three times, an output also used later, a dead branch. */
  double v[] = {1, -2, 3};
  Value *x = input_vals(ty(TY_F32, 1, 3), v);
  TensorType t = ty(TY_F32, 1, 3);
  Node *p = ir_source(g, OP_PARAM, &t, "b", noloc);
  Value *s = bin(OP_ADD, x, &p->out[0]);
  Value *m = bin(OP_MUL, s, x);
  un(OP_EXP, m); /* unused */
  Value *r = bin(OP_SUB, m, x);
  TensorMap params;
  ck_assert(ir_init_params(g, 1, IR_INIT_RANDOM, &params, err, sizeof err));
  const char *names[] = {"o0", "o1"};
  Value *outs[2] = {s, r};
  ir_set_outputs(g, 2, outs, names);
  Tensor o[2];
  ck_assert_msg(ir_eval(g, &inputs, &params, o, err, sizeof err), "%s", err);
  for (int i = 0; i < 3; i++) {
    double b = at(&params.tensors[0], i);
    ck_assert_double_eq_tol(at(&o[0], i), v[i] + b, 1e-6);
    ck_assert_double_eq_tol(at(&o[1], i), (v[i] + b) * v[i] - v[i], 1e-5);
  }
  ir_tensor_free(&o[0]);
  ir_tensor_free(&o[1]);
  ir_tensor_map_free(&params);
}
END_TEST

START_TEST(test_shape_rule_mismatch) {
  double v[] = {1, 2};
  Value *x = input_vals(ty(TY_F32, 1, 2), v);
  Value *r = un(OP_RELU, x);
  r->type.dims[0] = 3; /* a broken pass */
  Tensor out;
  ck_assert(!try_run(1, &r, &out));
  ck_assert_str_eq(err, "relu: result 0 is f32[3], its shape rule says f32[2]");
}
END_TEST

/* ---- parameter initialization ---- */

static Node *param(const char *name, TensorType t, const char *init) {
  Node *n = ir_source(g, OP_PARAM, &t, name, noloc);
  if (init) ir_set_str(g, n, "init", init);
  return n;
}

START_TEST(test_init_ranges) {
  param("w", ty(TY_F32, 2, 64, 100), NULL);
  param("u", ty(TY_F32, 1, 1000), "uniform(0.5)");
  param("n", ty(TY_F32, 1, 4000), "normal(2)");
  param("one", ty(TY_F32, 1, 100), "ones");
  param("zero", ty(TY_F32, 1, 100), "zeros");
  param("f", ty(TY_F16, 1, 10), "fill(0.1)");
  param("i", ty(TY_I32, 1, 200), NULL);
  TensorMap m;
  ck_assert_msg(ir_init_params(g, 42, IR_INIT_RANDOM, &m, err, sizeof err), "%s", err);
  ck_assert_int_eq(m.n, 7);
  struct {
    const char *name;
    double lo, hi;
  } r[] = {{"w", -0.1, 0.1}, {"u", -0.5, 0.5}, {"one", 0.75, 1.25}, {"zero", -0.1, 0.1}, {"i", -4, 4}};
  for (size_t k = 0; k < ARRAY_LEN(r); k++) {
    const Tensor *t = ir_tensor_map_find(&m, r[k].name);
    ck_assert_ptr_nonnull(t);
    double mn = INFINITY, mx = -INFINITY;
    for (int64_t i = 0; i < ir_type_numel(&t->type); i++) mn = fmin(mn, at(t, i)), mx = fmax(mx, at(t, i));
    ck_assert_msg(mn >= r[k].lo && mx <= r[k].hi, "%s: [%g, %g]", r[k].name, mn, mx);
    /* Spread over most of the range, not a constant. */
    ck_assert_msg(mx - mn > 0.8 * (r[k].hi - r[k].lo), "%s: [%g, %g]", r[k].name, mn, mx);
  }
  const Tensor *n = ir_tensor_map_find(&m, "n");
  double s = 0, s2 = 0;
  for (int i = 0; i < 4000; i++) s += at(n, i), s2 += at(n, i) * at(n, i);
  ck_assert_double_eq_tol(s / 4000, 0, 0.15);
  ck_assert_double_eq_tol(sqrt(s2 / 4000), 2, 0.15);
  const Tensor *f = ir_tensor_map_find(&m, "f");
  for (int i = 0; i < 10; i++) ck_assert_uint_eq(((uint16_t *)f->data)[i], ir_f16_from_double(0.1));
  const Tensor *i32 = ir_tensor_map_find(&m, "i");
  for (int i = 0; i < 200; i++) ck_assert(at(i32, i) == floor(at(i32, i)));
  ir_tensor_map_free(&m);
}
END_TEST

/* A model of many params binds in n log n: a sum of 200,000 params, each
 * found by name once by ir_init_params (shared-name check) and once by
 * ir_eval.  Scanning the map per param took 5.3 s at 40,000 and grows
 * with the square (about 2 minutes here); the tcase's timeout is the
 * bound.  Two nodes share a name: one weight, read twice. */
START_TEST(test_many_params_bind_in_n_log_n) {
  enum { N = 200000 };
  TensorType t = ty(TY_F32, 1, 1);
  Value *acc = &param("p0", t, "fill(1)")->out[0];
  char name[32];
  for (int i = 1; i < N; i++) {
    snprintf(name, sizeof name, "p%d", i % (N - 1)); /* p0 twice */
    acc = bin(OP_ADD, acc, &param(name, t, "fill(1)")->out[0]);
  }
  TensorMap m;
  ck_assert_msg(ir_init_params(g, 1, IR_INIT_RANDOM, &m, err, sizeof err), "%s", err);
  ck_assert_int_eq(m.n, N - 1);
  ir_set_outputs(g, 1, &acc, (const char *[]){"sum"});
  Tensor out;
  ck_assert_msg(ir_eval(g, NULL, &m, &out, err, sizeof err), "%s", err);
  ck_assert_double_eq(((float *)out.data)[0], N);
  ir_tensor_free(&out);
  ir_tensor_map_free(&m);
}
END_TEST

START_TEST(test_init_deterministic_and_order_free) {
  param("a", ty(TY_F32, 1, 16), NULL);
  param("b", ty(TY_F32, 1, 16), "normal(1)");
  TensorMap m1, m2, m3;
  ck_assert(ir_init_params(g, 7, IR_INIT_RANDOM, &m1, err, sizeof err));
  ck_assert(ir_init_params(g, 8, IR_INIT_RANDOM, &m3, err, sizeof err));
  Graph *g1 = g;
  g = ir_graph_new(&ctx, "other");
  param("c", ty(TY_F32, 1, 5), NULL);
  param("b", ty(TY_F32, 1, 16), "normal(1)");
  param("a", ty(TY_F32, 1, 16), NULL);
  ck_assert(ir_init_params(g, 7, IR_INIT_RANDOM, &m2, err, sizeof err));
  (void)g1;
  const char *names[] = {"a", "b"};
  for (int k = 0; k < 2; k++) {
    const Tensor *x = ir_tensor_map_find(&m1, names[k]), *y = ir_tensor_map_find(&m2, names[k]);
    const Tensor *z = ir_tensor_map_find(&m3, names[k]);
    ck_assert_mem_eq(x->data, y->data, 64);
    ck_assert(memcmp(x->data, z->data, 64) != 0); /* another seed, other values */
  }
  ck_assert(memcmp(ir_tensor_map_find(&m1, "a")->data, ir_tensor_map_find(&m1, "b")->data, 64) != 0);
  ir_tensor_map_free(&m1);
  ir_tensor_map_free(&m2);
  ir_tensor_map_free(&m3);
}
END_TEST

START_TEST(test_init_exact_mode_and_errors) {
  param("bn.weight", ty(TY_F32, 1, 4), "ones");
  param("bn.bias", ty(TY_F32, 1, 4), "zeros");
  TensorMap m;
  ck_assert(ir_init_params(g, 1, IR_INIT_EXACT, &m, err, sizeof err));
  for (int i = 0; i < 4; i++) {
    ck_assert_double_eq(at(&m.tensors[0], i), 1);
    ck_assert_double_eq(at(&m.tensors[1], i), 0);
  }
  ir_tensor_map_free(&m);
  param("bad", ty(TY_F32, 1, 4), "xavier");
  ck_assert(!ir_init_params(g, 1, IR_INIT_RANDOM, &m, err, sizeof err));
  ck_assert_str_eq(err, "param 'bad': unknown init \"xavier\" (expected uniform(b), normal(s), "
                        "ones, zeros or fill(v))");
  ck_assert_int_eq(m.n, 0);
}
END_TEST

static Suite *eval_suite(void) {
  Suite *s = suite_create("eval");
  TCase *t = tcase_create("half");
  tcase_add_test(t, test_f16_known_bits);
  tcase_add_test(t, test_bf16_known_bits);
  tcase_add_test(t, test_half_roundtrip_all);
  tcase_add_test(t, test_half_midpoints);
#ifdef __FLT16_MAX__
  tcase_add_test(t, test_f16_vs_compiler);
#endif
  suite_add_tcase(s, t);
  t = tcase_create("ops");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 60);
  tcase_add_test(t, test_cast_float_to_int);
  tcase_add_test(t, test_cast_int);
  tcase_add_test(t, test_cast_f32_to_f16_bits);
  tcase_add_test(t, test_unary_values);
  tcase_add_test(t, test_unary_positive_domain);
  tcase_add_test(t, test_gelu_leaky_clip);
  tcase_add_test(t, test_unary_int);
  tcase_add_test(t, test_binary_broadcast);
  tcase_add_test(t, test_binary_scalar_and_minmax);
  tcase_add_test(t, test_binary_int);
  tcase_add_test(t, test_int_div_by_zero);
  tcase_add_test(t, test_i64_exact);
  tcase_add_test(t, test_f16_add_rounds_once);
  tcase_add_test(t, test_reduce);
  tcase_add_test(t, test_reduce_nan_and_int);
  tcase_add_test(t, test_argmax);
  tcase_add_test(t, test_softmax);
  tcase_add_test(t, test_layernorm);
  tcase_add_test(t, test_batchnorm);
  tcase_add_test(t, test_global_avgpool);
  tcase_add_test(t, test_matmul_2d);
  tcase_add_test(t, test_matmul_vectors);
  tcase_add_test(t, test_matmul_batch_broadcast);
  tcase_add_test(t, test_linear);
  tcase_add_test(t, test_linear_int);
  tcase_add_test(t, test_quantize_round_trip);
  tcase_add_test(t, test_conv2d_im2col);
  tcase_add_test(t, test_conv2d_by_hand);
  tcase_add_test(t, test_conv_transpose2d_adjoint);
  tcase_add_test(t, test_conv_transpose2d_by_hand);
  tcase_add_test(t, test_conv_transpose2d_rejects);
  tcase_add_test(t, test_comparisons);
  tcase_add_test(t, test_resize_nearest_integer_scale);
  tcase_add_test(t, test_resize_bilinear_by_hand);
  tcase_add_test(t, test_resize_bilinear_plane);
  tcase_add_test(t, test_resize_rejects);
  tcase_add_test(t, test_maxpool);
  tcase_add_test(t, test_maxpool_dilation);
  tcase_add_test(t, test_avgpool_pad);
  tcase_add_test(t, test_avgpool_ceil_mode);
  tcase_add_test(t, test_reshape_transpose);
  tcase_add_test(t, test_expand_concat);
  tcase_add_test(t, test_slice_pad);
  tcase_add_test(t, test_gather);
  tcase_add_test(t, test_gather_out_of_range);
  tcase_add_test(t, test_const_splat);
  tcase_add_test(t, test_lstm_one_step);
  tcase_add_test(t, test_lstm_two_steps);
  tcase_add_test(t, test_lstm_bidirectional);
  tcase_add_test(t, test_lstm_layers_and_layout);
  tcase_add_test(t, test_gru_one_step);
  tcase_add_test(t, test_missing_and_mistyped_input);
  tcase_add_test(t, test_params_and_reuse);
  tcase_add_test(t, test_shape_rule_mismatch);
  suite_add_tcase(s, t);
  t = tcase_create("init");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, test_init_ranges);
  tcase_add_test(t, test_init_deterministic_and_order_free);
  tcase_add_test(t, test_init_exact_mode_and_errors);
  suite_add_tcase(s, t);
  t = tcase_create("many");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 60);
  tcase_add_test(t, test_many_params_bind_in_n_log_n);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(eval_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
