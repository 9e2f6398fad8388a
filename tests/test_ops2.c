/* Check suite for the second batch of ops (ONNX's math, indexing and
 * top-k): round, floor, ceil, sign, the trigonometric and hyperbolic
 * functions, mod, integer div/pow in codegen, reduce_prod,
 * gather_elements, gather_nd, scatter_elements, scatter_nd and topk.
 * What ir_eval says they mean (half to even, the signs of mod, domain
 * NaNs, negative and out-of-range indices), their shape errors, the
 * generated kernels on emu against ir_eval at -O0 and -O2 (exact where
 * the op is exact, 1e-5 relative for libm's functions), NVRTC for sm_80
 * and sm_90, a fused chain, out-of-range indices on emu, and the
 * language's builtins with their errors. */
#include "check_quiet.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "dlcrt.h"
#include "frontend/ast.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "tests/irjob.h"
#include "tests/testutil.h"

/* Byte for byte when rtol is 0; else floats within rtol of the value
 * (NaN matches NaN, an infinity itself). */
static void expect_close(const Tensor *got, const Tensor *want, double rtol, const char *what) {
  ck_assert(ir_type_eq(&got->type, &want->type));
  size_t es = (size_t)ir_dtype_size(want->type.dtype);
  for (int64_t i = 0, count = ir_type_numel(&want->type); i < count; i++) {
    double g = ir_tensor_get(got, i), w = ir_tensor_get(want, i);
    bool ok;
    if (rtol == 0 || !ir_dtype_is_float(want->type.dtype))
      ok = memcmp((const char *)got->data + i * es, (const char *)want->data + i * es, es) == 0;
    else
      ok = (isnan(g) && isnan(w)) || g == w || fabs(g - w) <= rtol * fabs(w) + 1e-30;
    ck_assert_msg(ok, "%s: element %lld: emu %.9g, ir_eval %.9g", what, (long long)i, g, w);
  }
}

static int launches(const RtPlan *p) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) n += p->steps[i].kind == RT_STEP_LAUNCH;
  return n;
}

/* text at -O0 and -O2: NVRTC compiles it for sm_80 and sm_90, emu
 * matches ir_eval (rtol as expect_close) for two input shifts.
 * n_launches (when given) gets each level's count. */
static void check_both(const char *text, const Fill *fills, double rtol, int *n_launches) {
  for (int l = 0; l < 2; l++) {
    Ctx c;
    ctx_init(&c);
    Job j = compile_at(&c, text, 2 * l);
    test_nvrtc(j.cg.source, "sm_80");
    test_nvrtc(j.cg.source, "sm_90");
    for (int shift = 0; shift < 2; shift++) {
      Data d;
      make_inputs(j.g, fills, shift, &d);
      Tensor *want = eval_all(j.g, &d.inputs);
      Tensor *got = test_run_emu(j.cg.plan, NULL, &d.inputs);
      for (int i = 0; i < j.g->n_outputs; i++) {
        char what[96];
        snprintf(what, sizeof what, "-O%d shift %d output '%s'", 2 * l, shift, j.g->output_names[i]);
        expect_close(&got[i], &want[i], rtol, what);
      }
      free_outputs(want, j.g->n_outputs);
      free_outputs(got, j.g->n_outputs);
      free_inputs(&d);
    }
    if (n_launches) n_launches[l] = launches(j.cg.plan);
    ctx_free(&c);
  }
}

/* ir_eval of text (parsed, not optimized) on the given inputs; NULL
 * with the message in err when ir_eval refuses. */
static Tensor *try_eval_text(Ctx *c, const char *text, const Fill *fills, Graph **g, char *err, size_t len) {
  Job j = compile_at(c, text, -1);
  Data d;
  make_inputs(j.g, fills, 0, &d);
  Tensor *out = calloc((size_t)j.g->n_outputs + 1, sizeof *out);
  bool ok = ir_eval(j.g, &d.inputs, NULL, out, err, len);
  free_inputs(&d);
  *g = j.g;
  if (!ok) {
    free(out);
    return NULL;
  }
  return out;
}

static Tensor *eval_text(Ctx *c, const char *text, const Fill *fills, Graph **g) {
  char err[512];
  Tensor *r = try_eval_text(c, text, fills, g, err, sizeof err);
  ck_assert_msg(r != NULL, "ir_eval: %s", err);
  return r;
}

/* Exact values; NaN matches NaN and a zero's sign must match too. */
static void expect_values(const Tensor *t, const double *want, int n, const char *what) {
  ck_assert_int_eq(ir_type_numel(&t->type), n);
  for (int i = 0; i < n; i++) {
    double v = ir_tensor_get(t, i);
    bool same = (isnan(want[i]) && isnan(v)) || (v == want[i] && signbit(v) == signbit(want[i]));
    ck_assert_msg(same, "%s[%d] is %.17g, expected %.17g", what, i, v, want[i]);
  }
}

/* The error ir_eval reports for text. */
static void expect_eval_error(const char *text, const Fill *fills, const char *want) {
  Ctx c;
  ctx_init(&c);
  Graph *g;
  char err[512];
  Tensor *r = try_eval_text(&c, text, fills, &g, err, sizeof err);
  ck_assert_msg(r == NULL, "ir_eval accepted:\n%s", text);
  ck_assert_msg(strstr(err, want), "wanted: %s\ngot: %s", want, err);
  ctx_free(&c);
}

/* ---- what the ops mean ---- */

START_TEST(eval_rounding_and_sign) {
  static const char text[] = "graph r {\n"
                             "  %x = input {name=\"x\"} : f32[10]\n"
                             "  %i = input {name=\"i\"} : i32[4]\n"
                             "  %r = round %x : f32[10]\n"
                             "  %f = floor %x : f32[10]\n"
                             "  %c = ceil %x : f32[10]\n"
                             "  %s = sign %x : f32[10]\n"
                             "  %si = sign %i : i32[4]\n"
                             "  return %r as \"r\", %f as \"f\", %c as \"c\", %s as \"s\", %si as \"si\"\n"
                             "}\n";
  const Fill fills[] = {FILL("x", 0.5, 1.5, 2.5, -0.5, -1.5, -2.7, -0.0, NAN, INFINITY, 3.25),
                        FILL("i", -7, 0, 5, -2147483648.0), {NULL, NULL, 0}};
  Ctx c;
  ctx_init(&c);
  Graph *g;
  Tensor *r = eval_text(&c, text, fills, &g);
  /* Round is half to even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> -0. */
  static const double round_[] = {0, 2, 2, -0.0, -2, -3, -0.0, NAN, INFINITY, 3};
  static const double floor_[] = {0, 1, 2, -1, -2, -3, -0.0, NAN, INFINITY, 3};
  static const double ceil_[] = {1, 2, 3, -0.0, -1, -2, -0.0, NAN, INFINITY, 4};
  static const double sign_[] = {1, 1, 1, -1, -1, -1, -0.0, NAN, 1, 1};
  static const double sign_i[] = {-1, 0, 1, -1};
  expect_values(&r[0], round_, 10, "round");
  expect_values(&r[1], floor_, 10, "floor");
  expect_values(&r[2], ceil_, 10, "ceil");
  expect_values(&r[3], sign_, 10, "sign");
  expect_values(&r[4], sign_i, 4, "sign i32");
  free_outputs(r, g->n_outputs);
  ctx_free(&c);
}
END_TEST

START_TEST(eval_mod_signs) {
  static const char text[] = "graph m {\n"
                             "  %a = input {name=\"a\"} : i64[6]\n"
                             "  %b = input {name=\"b\"} : i64[6]\n"
                             "  %x = input {name=\"x\"} : f32[6]\n"
                             "  %y = input {name=\"y\"} : f32[6]\n"
                             "  %p = mod %a, %b : i64[6]\n"
                             "  %c = mod %a, %b {fmod=1} : i64[6]\n"
                             "  %fp = mod %x, %y : f32[6]\n"
                             "  %fc = mod %x, %y {fmod=1} : f32[6]\n"
                             "  return %p as \"p\", %c as \"c\", %fp as \"fp\", %fc as \"fc\"\n"
                             "}\n";
  const Fill fills[] = {FILL("a", 7, -7, 7, -7, 6, -9223372036854775808.0), FILL("b", 3, 3, -3, -3, -3, -1),
                        FILL("x", 5.5, -5.5, 5.5, -5.5, 3, -3), FILL("y", 2, 2, -2, -2, 3, 3), {NULL, NULL, 0}};
  Ctx c;
  ctx_init(&c);
  Graph *g;
  Tensor *r = eval_text(&c, text, fills, &g);
  /* Python's % takes the divisor's sign, C's the dividend's; INT64_MIN
   * % -1 is 0, not a trap; a zero takes the divisor's sign (floats). */
  static const double p[] = {1, 2, -2, -1, 0, 0}, cc[] = {1, -1, 1, -1, 0, 0};
  static const double fp[] = {1.5, 0.5, -0.5, -1.5, 0, 0}, fc[] = {1.5, -1.5, 1.5, -1.5, 0, -0.0};
  expect_values(&r[0], p, 6, "mod");
  expect_values(&r[1], cc, 6, "mod fmod=1");
  expect_values(&r[2], fp, 6, "float mod");
  expect_values(&r[3], fc, 6, "float mod fmod=1");
  free_outputs(r, g->n_outputs);
  ctx_free(&c);
  expect_eval_error("graph z {\n  %a = input {name=\"a\"} : i32[2]\n  %b = input {name=\"b\"} : i32[2]\n"
                    "  %m = mod %a, %b : i32[2]\n  return %m as \"m\"\n}\n",
                    (const Fill[]){FILL("a", 1, 2), FILL("b", 1, 0), {NULL, NULL, 0}},
                    "mod: integer division by zero (a remainder of division by 0)");
}
END_TEST

START_TEST(eval_trig_domains) {
  static const char text[] = "graph t {\n"
                             "  %x = input {name=\"x\"} : f32[5]\n"
                             "  %tan = tan %x : f32[5]\n"
                             "  %asin = asin %x : f32[5]\n"
                             "  %acos = acos %x : f32[5]\n"
                             "  %atan = atan %x : f32[5]\n"
                             "  %sinh = sinh %x : f32[5]\n"
                             "  %cosh = cosh %x : f32[5]\n"
                             "  %asinh = asinh %x : f32[5]\n"
                             "  %acosh = acosh %x : f32[5]\n"
                             "  %atanh = atanh %x : f32[5]\n"
                             "  return %tan as \"tan\", %asin as \"asin\", %acos as \"acos\", %atan as \"atan\", "
                             "%sinh as \"sinh\", %cosh as \"cosh\", %asinh as \"asinh\", %acosh as \"acosh\", "
                             "%atanh as \"atanh\"\n"
                             "}\n";
  const double xs[] = {0.5, -1, 1, 2, -0.0};
  const Fill fills[] = {FILL("x", 0.5, -1, 1, 2, -0.0), {NULL, NULL, 0}};
  double (*const fn[])(double) = {tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh};
  Ctx c;
  ctx_init(&c);
  Graph *g;
  Tensor *r = eval_text(&c, text, fills, &g);
  for (int k = 0; k < 9; k++) {
    double want[5];
    for (int i = 0; i < 5; i++) want[i] = (float)fn[k](xs[i]);
    expect_values(&r[k], want, 5, g->output_names[k]);
  }
  /* Outside the domains: NaN; at the poles of atanh: infinities. */
  ck_assert(isnan(ir_tensor_get(&r[1], 3)) && isnan(ir_tensor_get(&r[2], 3)));
  ck_assert(isnan(ir_tensor_get(&r[7], 0)) && isnan(ir_tensor_get(&r[7], 1)));
  ck_assert(isnan(ir_tensor_get(&r[8], 3)));
  ck_assert(ir_tensor_get(&r[8], 1) == -INFINITY && ir_tensor_get(&r[8], 2) == INFINITY);
  free_outputs(r, g->n_outputs);
  ctx_free(&c);
}
END_TEST

START_TEST(eval_integer_pow_and_prod) {
  static const char text[] = "graph p {\n"
                             "  %a = input {name=\"a\"} : i32[6]\n"
                             "  %b = input {name=\"b\"} : i32[6]\n"
                             "  %p = pow %a, %b : i32[6]\n"
                             "  %x = input {name=\"x\"} : f32[2, 3]\n"
                             "  %px = reduce_prod %x {axes=[1]} : f32[2]\n"
                             "  %pa = reduce_prod %p {axes=[0], keepdims=1} : i32[1]\n"
                             "  return %p as \"p\", %px as \"px\", %pa as \"pa\"\n"
                             "}\n";
  const Fill fills[] = {FILL("a", 3, -2, 2, -1, 5, 7), FILL("b", 4, 3, 31, -3, 0, -1),
                        FILL("x", 1.5, -2, 4, 0.5, 3, -1), {NULL, NULL, 0}};
  Ctx c;
  ctx_init(&c);
  Graph *g;
  Tensor *r = eval_text(&c, text, fills, &g);
  /* 2^31 wraps to INT32_MIN; (-1)^-3 = -1; 7^-1 truncates to 0. */
  static const double p[] = {81, -8, -2147483648.0, -1, 1, 0};
  static const double px[] = {-12, -1.5}, pa[] = {0};
  expect_values(&r[0], p, 6, "pow");
  expect_values(&r[1], px, 2, "reduce_prod");
  expect_values(&r[2], pa, 1, "reduce_prod i32");
  free_outputs(r, g->n_outputs);
  ctx_free(&c);
  expect_eval_error("graph z {\n  %a = input {name=\"a\"} : i64[2]\n  %b = input {name=\"b\"} : i64[2]\n"
                    "  %m = pow %a, %b : i64[2]\n  return %m as \"m\"\n}\n",
                    (const Fill[]){FILL("a", 0), FILL("b", -1), {NULL, NULL, 0}},
                    "pow: integer division by zero (0 to a negative power)");
}
END_TEST

/* data [3, 4] = 0 .. 11 row by row. */
#define DATA34 FILL("d", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)

START_TEST(eval_gathers) {
  static const char text[] = "graph g {\n"
                             "  %d = input {name=\"d\"} : f32[3, 4]\n"
                             "  %i = input {name=\"i\"} : i64[2, 4]\n"
                             "  %ge = gather_elements %d, %i : f32[2, 4]\n"
                             "  %j = input {name=\"j\"} : i32[3, 2]\n"
                             "  %ge1 = gather_elements %d, %j {axis=1} : f32[3, 2]\n"
                             "  %n = input {name=\"n\"} : i64[2, 2]\n"
                             "  %gn = gather_nd %d, %n : f32[2]\n"
                             "  %m = input {name=\"m\"} : i64[2, 1]\n"
                             "  %gr = gather_nd %d, %m : f32[2, 4]\n"
                             "  %b = input {name=\"b\"} : i64[3, 1]\n"
                             "  %gb = gather_nd %d, %b {batch_dims=1} : f32[3]\n"
                             "  return %ge as \"ge\", %ge1 as \"ge1\", %gn as \"gn\", %gr as \"gr\", %gb as \"gb\"\n"
                             "}\n";
  const Fill fills[] = {DATA34,
                        FILL("i", 2, 0, -1, 1, 0, -3, 2, 2),
                        FILL("j", 3, -4, 1, 1, -1, 0),
                        FILL("n", 2, -1, 0, 1),
                        FILL("m", -1, 0),
                        FILL("b", 3, -1, 0),
                        {NULL, NULL, 0}};
  Ctx c;
  ctx_init(&c);
  Graph *g;
  Tensor *r = eval_text(&c, text, fills, &g);
  static const double ge[] = {8, 1, 10, 7, 0, 1, 10, 11}, ge1[] = {3, 0, 5, 5, 11, 8};
  static const double gn[] = {11, 1}, gr[] = {8, 9, 10, 11, 0, 1, 2, 3}, gb[] = {3, 7, 8};
  expect_values(&r[0], ge, 8, "gather_elements axis 0");
  expect_values(&r[1], ge1, 6, "gather_elements axis 1");
  expect_values(&r[2], gn, 2, "gather_nd");
  expect_values(&r[3], gr, 8, "gather_nd rows");
  expect_values(&r[4], gb, 3, "gather_nd batch_dims=1");
  free_outputs(r, g->n_outputs);
  ctx_free(&c);
  expect_eval_error("graph e {\n  %d = input {name=\"d\"} : f32[3, 4]\n  %i = input {name=\"i\"} : i64[1, 4]\n"
                    "  %g = gather_elements %d, %i : f32[1, 4]\n  return %g as \"g\"\n}\n",
                    (const Fill[]){DATA34, FILL("i", 0, 1, 3, 2), {NULL, NULL, 0}},
                    "gather_elements: index 3 is out of range for axis 0 of size 3");
  expect_eval_error("graph e {\n  %d = input {name=\"d\"} : f32[3, 4]\n  %i = input {name=\"i\"} : i64[1, 2]\n"
                    "  %g = gather_nd %d, %i : f32[1]\n  return %g as \"g\"\n}\n",
                    (const Fill[]){DATA34, FILL("i", 0, -5), {NULL, NULL, 0}},
                    "gather_nd: index -5 is out of range for axis 1 of size 4");
}
END_TEST

START_TEST(eval_scatters) {
  static const char text[] = "graph s {\n"
                             "  %d = input {name=\"d\"} : f32[3, 4]\n"
                             "  %i = input {name=\"i\"} : i64[2, 3]\n"
                             "  %u = input {name=\"u\"} : f32[2, 3]\n"
                             "  %none = scatter_elements %d, %i, %u {axis=1} : f32[3, 4]\n"
                             "  %add = scatter_elements %d, %i, %u {axis=1, reduction=\"add\"} : f32[3, 4]\n"
                             "  %mul = scatter_elements %d, %i, %u {axis=1, reduction=\"mul\"} : f32[3, 4]\n"
                             "  %max = scatter_elements %d, %i, %u {axis=1, reduction=\"max\"} : f32[3, 4]\n"
                             "  %n = input {name=\"n\"} : i64[3, 1]\n"
                             "  %v = input {name=\"v\"} : f32[3, 4]\n"
                             "  %nd = scatter_nd %d, %n, %v : f32[3, 4]\n"
                             "  %ndmin = scatter_nd %d, %n, %v {reduction=\"min\"} : f32[3, 4]\n"
                             "  return %none as \"none\", %add as \"add\", %mul as \"mul\", %max as \"max\", "
                             "%nd as \"nd\", %ndmin as \"ndmin\"\n"
                             "}\n";
  /* Row 0 gets updates at columns 1, 1 (a duplicate) and -1; row 1 at
   * 0, 2, 0.  Rows 2 and 0 of the nd scatter: row 2 twice. */
  const Fill fills[] = {DATA34,
                        FILL("i", 1, 1, -1, 0, 2, 0),
                        FILL("u", 10, 20, 30, 40, 50, 60),
                        FILL("n", 2, 0, -1),
                        FILL("v", -1, -2, -3, -4, 100, 101, 102, 103, 5, 6, 7, 8),
                        {NULL, NULL, 0}};
  Ctx c;
  ctx_init(&c);
  Graph *g;
  Tensor *r = eval_text(&c, text, fills, &g);
  static const double none[] = {0, 20, 2, 30, 60, 5, 50, 7, 8, 9, 10, 11};
  static const double add[] = {0, 31, 2, 33, 104, 5, 56, 7, 8, 9, 10, 11};
  static const double mul[] = {0, 200, 2, 90, 9600, 5, 300, 7, 8, 9, 10, 11};
  static const double max[] = {0, 20, 2, 30, 60, 5, 50, 7, 8, 9, 10, 11};
  static const double nd[] = {100, 101, 102, 103, 4, 5, 6, 7, 5, 6, 7, 8};
  static const double ndmin[] = {0, 1, 2, 3, 4, 5, 6, 7, -1, -2, -3, -4};
  const double *want[] = {none, add, mul, max, nd, ndmin};
  for (int k = 0; k < 6; k++) expect_values(&r[k], want[k], 12, g->output_names[k]);
  free_outputs(r, g->n_outputs);
  ctx_free(&c);
  expect_eval_error("graph e {\n  %d = input {name=\"d\"} : f32[3, 4]\n  %i = input {name=\"i\"} : i64[1, 1]\n"
                    "  %u = input {name=\"u\"} : f32[1, 1]\n"
                    "  %s = scatter_elements %d, %i, %u {axis=1} : f32[3, 4]\n  return %s as \"s\"\n}\n",
                    (const Fill[]){DATA34, FILL("i", 4), FILL("u", 1), {NULL, NULL, 0}},
                    "scatter_elements: index 4 is out of range for axis 1 of size 4");
  expect_eval_error("graph e {\n  %d = input {name=\"d\"} : f32[3, 4]\n  %i = input {name=\"i\"} : i64[1, 1]\n"
                    "  %u = input {name=\"u\"} : f32[1, 4]\n"
                    "  %s = scatter_nd %d, %i, %u : f32[3, 4]\n  return %s as \"s\"\n}\n",
                    (const Fill[]){DATA34, FILL("i", -4), FILL("u", 1), {NULL, NULL, 0}},
                    "scatter_nd: index -4 is out of range for axis 0 of size 3");
}
END_TEST

START_TEST(eval_topk_order) {
  static const char text[] = "graph k {\n"
                             "  %x = input {name=\"x\"} : f32[2, 5]\n"
                             "  %v, %i = topk %x {k=3, axis=1} : f32[2, 3], i64[2, 3]\n"
                             "  %sv, %si = topk %x {k=2, axis=0, largest=0} : f32[2, 5], i64[2, 5]\n"
                             "  %n = input {name=\"n\"} : i32[6]\n"
                             "  %nv, %ni = topk %n {k=4, axis=0, largest=0} : i32[4], i64[4]\n"
                             "  return %v as \"v\", %i as \"i\", %sv as \"sv\", %si as \"si\", %nv as \"nv\", %ni as \"ni\"\n"
                             "}\n";
  /* A NaN counts as the largest value; equal values keep their order. */
  const Fill fills[] = {FILL("x", 3, NAN, 3, -1, 5, 2, 2, 7, 2, -INFINITY), FILL("n", 4, -2, 4, 0, -2, 9),
                        {NULL, NULL, 0}};
  Ctx c;
  ctx_init(&c);
  Graph *g;
  Tensor *r = eval_text(&c, text, fills, &g);
  static const double v[] = {NAN, 5, 3, 7, 2, 2}, i[] = {1, 4, 0, 2, 0, 1};
  static const double sv[] = {2, 2, 3, -1, -INFINITY, 3, NAN, 7, 2, 5}, si[] = {1, 1, 0, 0, 1, 0, 0, 1, 1, 0};
  static const double nv[] = {-2, -2, 0, 4}, ni[] = {1, 4, 3, 0};
  const double *want[] = {v, i, sv, si, nv, ni};
  const int n[] = {6, 6, 10, 10, 4, 4};
  for (int k = 0; k < 6; k++) expect_values(&r[k], want[k], n[k], g->output_names[k]);
  ck_assert_int_eq(r[1].type.dtype, TY_I64);
  free_outputs(r, g->n_outputs);
  ctx_free(&c);
}
END_TEST

/* ---- the text format and the shape rules ---- */

/* The error the IR parser reports for one node line. */
/* ir_index_bound: what a host may draw for each index input (dlcc run's
 * random inputs, dlc_input_info, a model.so's bounds). */
START_TEST(index_bounds) {
  static const char text[] = "graph g {\n"
                             "  %d = input {name=\"d\"} : f32[3, 4]\n"
                             "  %i = input {name=\"i\"} : i64[8]\n"
                             "  %ir = reshape %i {shape=[2, 4]} : i64[2, 4]\n"
                             "  %ge = gather_elements %d, %ir {axis=1} : f32[2, 4]\n"
                             "  %n = input {name=\"n\"} : i64[2, 2]\n"
                             "  %gn = gather_nd %d, %n : f32[2]\n"
                             "  %e = input {name=\"e\"} : i32[2]\n"
                             "  %g = gather %d, %e : f32[2, 4]\n"
                             "  %ge2 = gather_elements %d, %ir {axis=0} : f32[2, 4]\n"
                             "  %u = input {name=\"u\"} : i64[2]\n"
                             "  return %ge as \"ge\", %gn as \"gn\", %g as \"g\", %ge2 as \"ge2\"\n"
                             "}\n";
  Ctx c;
  ctx_init(&c);
  Job j = compile_at(&c, text, -1);
  const char *names[] = {"d", "i", "n", "e", "u"};
  /* i: read along axis 1 (4) and axis 0 (3) through a reshape; n: rows of
   * two coordinates into [3, 4]; e: gather's axis 0. */
  const int64_t want[] = {0, 3, 3, 3, 0};
  for (int k = 0; k < 5; k++)
    for (Node *n = j.g->first; n; n = n->next)
      if (n->op == OP_INPUT && strcmp(ir_attr_str(n, "name"), names[k]) == 0)
        ck_assert_msg(ir_index_bound(j.g, &n->out[0]) == want[k], "%s: %lld", names[k],
                      (long long)ir_index_bound(j.g, &n->out[0]));
  ctx_free(&c);
}
END_TEST

static void expect_node_error(const char *line, const char *want) {
  char text[1024];
  snprintf(text, sizeof text,
           "graph e {\n  %%x = input {name=\"x\"} : f32[3, 4]\n  %%i = input {name=\"i\"} : i64[3, 4]\n"
           "  %%n = input {name=\"n\"} : i64[2, 3]\n  %%k = input {name=\"k\"} : i32[4]\n%s\n"
           "  return %%r as \"r\"\n}\n",
           line);
  Ctx c;
  ctx_init(&c);
  Job j = {.text = text, .level = -1};
  ctx_guard(&c, run_job, &j);
  ck_assert_msg(!j.ok, "accepted: %s", line);
  ck_assert_msg(strstr(diag_text(&c), want), "for %s\nwanted: %s\ngot:\n%s", line, want, diag_text(&c));
  ctx_free(&c);
}

START_TEST(shape_errors) {
  expect_node_error("  %r = round %k : i32[4]", "round needs a floating-point input, got i32[4]");
  expect_node_error("  %r = atanh %i : i64[3, 4]", "atanh needs a floating-point input, got i64[3, 4]");
  expect_node_error("  %r = mod %x, %i : f32[3, 4]", "mod: dtype mismatch f32 vs i64");
  expect_node_error("  %r = mod %i, %i {fmod=2} : i64[3, 4]", "mod: fmod must be 0 or 1, got 2");
  expect_node_error("  %r = gather_elements %x, %x : f32[3, 4]", "gather_elements needs i32 or i64 indices, got f32[3, 4]");
  expect_node_error("  %r = gather_elements %x, %k : f32[4]", "gather_elements: indices i32[4] must have the rank of data f32[3, 4]");
  expect_node_error("  %r = gather_elements %x, %n {axis=2} : f32[2, 3]",
                    "gather_elements: axis 2 is out of range for f32[3, 4] (rank 2)");
  expect_node_error("  %r = gather_elements %n, %i {axis=1} : i64[3, 4]",
                    "gather_elements: indices i64[3, 4] are larger than data i64[2, 3] in dim 0 (only axis 1 may be)");
  expect_node_error("  %r = scatter_elements %x, %i, %n {axis=1} : f32[3, 4]",
                    "scatter_elements: updates must be f32[3, 4] (the indices' shape, data's dtype), got i64[2, 3]");
  expect_node_error("  %r = scatter_elements %x, %i, %x {reduction=\"sub\"} : f32[3, 4]",
                    "scatter_elements: reduction must be \"none\", \"add\", \"mul\", \"max\" or \"min\", got \"sub\"");
  expect_node_error("  %r = gather_nd %x, %n : f32[2]", "gather_nd: index rows of 3 values do not fit data f32[3, 4] after 0 batch dims");
  expect_node_error("  %r = gather_nd %x, %i {batch_dims=1} : f32[3]", "gather_nd: index rows of 4 values do not fit data f32[3, 4] after 1 batch dims");
  expect_node_error("  %r = scatter_nd %x, %i, %x : f32[3, 4]", "scatter_nd: index rows of 4 values do not fit data");
  expect_node_error("  %v, %r = topk %x {k=5, axis=1} : f32[3, 5], i64[3, 5]",
                    "topk: k=5 is more than the 4 elements of axis 1 of f32[3, 4]");
  expect_node_error("  %v, %r = topk %x {k=2, axis=1} : f32[3, 2], i32[3, 2]",
                    "declared i32[3, 2] but topk of these operands gives i64[3, 2]");
}
END_TEST

START_TEST(text_round_trip) {
  static const char text[] = "; dlcc IR\n"
                             "graph ops2 {\n"
                             "  %0 = input {name=\"x\"} : f32[3, 4]\n"
                             "  %1 = input {name=\"i\"} : i64[3, 4]\n"
                             "  %2 = input {name=\"j\"} : i64[3, 1]\n"
                             "  %3 = mod %0, %0 {fmod=1} : f32[3, 4]\n"
                             "  %4 = scatter_elements %3, %1, %0 {axis=1, reduction=\"max\"} : f32[3, 4]\n"
                             "  %5, %6 = topk %4 {k=2, axis=0, largest=0} : f32[2, 4], i64[2, 4]\n"
                             "  %7 = gather_nd %4, %2 {batch_dims=1} : f32[3]\n"
                             "  %8 = reduce_prod %5 {axes=[0, 1], keepdims=0} : f32[]\n"
                             "  %9 = scatter_nd %4, %2, %0 {reduction=\"mul\"} : f32[3, 4]\n"
                             "  return %6 as \"k\", %7 as \"g\", %8 as \"p\", %9 as \"s\"\n"
                             "}\n";
  Ctx c;
  ctx_init(&c);
  Job j = compile_at(&c, text, -1);
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  ir_print(f, j.g);
  fclose(f);
  ck_assert_str_eq(out, text);
  free(out);
  ctx_free(&c);
}
END_TEST

/* ---- codegen: emu against ir_eval, NVRTC ---- */

START_TEST(emu_float_math) {
  static const char text[] = "graph math {\n"
                             "  %x = input {name=\"x\"} : f32[4, 7]\n"
                             "  %y = input {name=\"y\"} : f32[7]\n"
                             "  %r = round %x : f32[4, 7]\n"
                             "  %f = floor %x : f32[4, 7]\n"
                             "  %c = ceil %x : f32[4, 7]\n"
                             "  %s = sign %x : f32[4, 7]\n"
                             "  %m0 = mod %x, %y : f32[4, 7]\n"
                             "  %m1 = mod %x, %y {fmod=1} : f32[4, 7]\n"
                             "  return %r as \"r\", %f as \"f\", %c as \"c\", %s as \"s\", %m0 as \"m0\", %m1 as \"m1\"\n"
                             "}\n";
  const Fill fills[] = {FILL("x", 0.5, 1.5, 2.5, -0.5, -1.5, -2.7, -0.0, NAN, INFINITY, 3.25, 1e30, -7.75, 8.5),
                        FILL("y", 2, -2, 0.75, -3, 0.0, 1e-3, 5), {NULL, NULL, 0}};
  check_both(text, fills, 0, NULL);
}
END_TEST

/* libm's float functions against eval.c's double ones rounded once. */
START_TEST(emu_trig) {
  static const char text[] = "graph trig {\n"
                             "  %x = input {name=\"x\"} : f32[3, 9]\n"
                             "  %tan = tan %x : f32[3, 9]\n"
                             "  %asin = asin %x : f32[3, 9]\n"
                             "  %acos = acos %x : f32[3, 9]\n"
                             "  %atan = atan %x : f32[3, 9]\n"
                             "  %sinh = sinh %x : f32[3, 9]\n"
                             "  %cosh = cosh %x : f32[3, 9]\n"
                             "  %asinh = asinh %x : f32[3, 9]\n"
                             "  %acosh = acosh %x : f32[3, 9]\n"
                             "  %atanh = atanh %x : f32[3, 9]\n"
                             "  return %tan as \"tan\", %asin as \"asin\", %acos as \"acos\", %atan as \"atan\", "
                             "%sinh as \"sinh\", %cosh as \"cosh\", %asinh as \"asinh\", %acosh as \"acosh\", "
                             "%atanh as \"atanh\"\n"
                             "}\n";
  const Fill fills[] = {FILL("x", 0.5, -0.25, 0.999, -1, 1, 1.5, -2, 3.75, NAN, -0.0, 10, 0.125), {NULL, NULL, 0}};
  check_both(text, fills, 1e-5, NULL);
}
END_TEST

/* The integer ops codegen now takes: div, mod, pow (by squaring,
 * wrapping), sign, on i32 and i64, unfused. */
START_TEST(emu_integer_ops) {
  static const char ints[] = "graph ints {\n"
                             "  %a = input {name=\"a\"} : i64[2, 5]\n"
                             "  %b = input {name=\"b\"} : i64[5]\n"
                             "  %p = pow %a, %b : i64[2, 5]\n"
                             "  %m0 = mod %a, %b : i64[2, 5]\n"
                             "  %m1 = mod %a, %b {fmod=1} : i64[2, 5]\n"
                             "  %d = div %a, %b : i64[2, 5]\n"
                             "  %s = sign %a : i64[2, 5]\n"
                             "  %a32 = cast %a {to=i32} : i32[2, 5]\n"
                             "  %b32 = cast %b {to=i32} : i32[5]\n"
                             "  %p32 = pow %a32, %b32 : i32[2, 5]\n"
                             "  %m32 = mod %a32, %b32 : i32[2, 5]\n"
                             "  %d32 = div %a32, %b32 : i32[2, 5]\n"
                             "  %s32 = sign %a32 : i32[2, 5]\n"
                             "  return %p as \"p\", %m0 as \"m0\", %m1 as \"m1\", %d as \"d\", %s as \"s\", %p32 as \"p32\", "
                             "%m32 as \"m32\", %d32 as \"d32\", %s32 as \"s32\"\n"
                             "}\n";
  /* 3037000500^2 overflows i64 and wraps; b has no 0 (an error in
   * eval.c) and negative exponents meet no 0 base. */
  const Fill fills[] = {FILL("a", -3, 7, 3037000500.0, -1, 1, 5, -8, 0, 9, -123456789),
                        FILL("b", 3, -2, 5, -1, 2), {NULL, NULL, 0}};
  check_both(ints, fills, 0, NULL);
}
END_TEST

START_TEST(emu_halves) {
  static const char text[] = "graph halves {\n"
                             "  %x = input {name=\"x\"} : f16[3, 5]\n"
                             "  %y = input {name=\"y\"} : f16[5]\n"
                             "  %r = round %x : f16[3, 5]\n"
                             "  %s = sign %x : f16[3, 5]\n"
                             "  %m = mod %x, %y : f16[3, 5]\n"
                             "  %t = atan %x : f16[3, 5]\n"
                             "  %b = input {name=\"b\"} : bf16[3, 5]\n"
                             "  %bf = floor %b : bf16[3, 5]\n"
                             "  %bc = cosh %b : bf16[3, 5]\n"
                             "  return %r as \"r\", %s as \"s\", %m as \"m\", %t as \"t\", %bf as \"bf\", %bc as \"bc\"\n"
                             "}\n";
  const Fill fills[] = {FILL("x", 0.5, 2.5, -1.5, 3.3, -0.0, NAN, 7), FILL("y", 2, -3, 0.5, 1.25),
                        FILL("b", -2.5, 1.75, 0.3, -7), {NULL, NULL, 0}};
  check_both(text, fills, 1e-2, NULL);
}
END_TEST

START_TEST(emu_indexing) {
  static const char text[] = "graph idx {\n"
                             "  %d = input {name=\"d\"} : f32[3, 4]\n"
                             "  %i = input {name=\"i\"} : i64[2, 3]\n"
                             "  %j = input {name=\"j\"} : i32[3, 4]\n"
                             "  %u = input {name=\"u\"} : f32[2, 3]\n"
                             "  %ge = gather_elements %d, %i {axis=1} : f32[2, 3]\n"
                             "  %ge0 = gather_elements %d, %j : f32[3, 4]\n"
                             "  %none = scatter_elements %d, %i, %u {axis=1} : f32[3, 4]\n"
                             "  %add = scatter_elements %d, %i, %u {axis=1, reduction=\"add\"} : f32[3, 4]\n"
                             "  %mul = scatter_elements %d, %i, %u {axis=1, reduction=\"mul\"} : f32[3, 4]\n"
                             "  %max = scatter_elements %d, %i, %u {axis=1, reduction=\"max\"} : f32[3, 4]\n"
                             "  %min = scatter_elements %d, %j, %d {reduction=\"min\"} : f32[3, 4]\n"
                             "  %n = input {name=\"n\"} : i64[2, 2]\n"
                             "  %gn = gather_nd %d, %n : f32[2]\n"
                             "  %v = input {name=\"v\"} : f32[2]\n"
                             "  %sn = scatter_nd %d, %n, %v {reduction=\"add\"} : f32[3, 4]\n"
                             "  %r = input {name=\"r\"} : i64[4, 1]\n"
                             "  %w = input {name=\"w\"} : f32[4, 4]\n"
                             "  %sr = scatter_nd %d, %r, %w : f32[3, 4]\n"
                             "  %d3 = input {name=\"d3\"} : i32[2, 3, 4]\n"
                             "  %b = input {name=\"b\"} : i64[2, 2, 1]\n"
                             "  %gb = gather_nd %d3, %b {batch_dims=1} : i32[2, 2, 4]\n"
                             "  return %ge as \"ge\", %ge0 as \"ge0\", %none as \"none\", %add as \"add\", %mul as \"mul\", "
                             "%max as \"max\", %min as \"min\", %gn as \"gn\", %sn as \"sn\", %sr as \"sr\", %gb as \"gb\"\n"
                             "}\n";
  const Fill fills[] = {FILL("d", 0.5, -1, 2, NAN, 3.25, 0, -7, 1e3, 9, -0.0, 4, 5, 6),
                        FILL("i", 1, 1, -1, 0, 2, -4, 3),
                        FILL("j", 2, -1, 0, 1, -3, 2, 1),
                        FILL("u", 10, -20, 30, 0.5, 50),
                        FILL("n", 2, -1, 0, 1, -3, -2),
                        FILL("v", 100, -1),
                        FILL("r", 1, -1, 1, 0),
                        FILL("w", 1, 2, 3, 4, 5, 6, 7),
                        FILL("d3", 1, 2, 3, 4, 5, 6, 7, 8, 9),
                        FILL("b", 2, -1, 0, 1, 1),
                        {NULL, NULL, 0}};
  check_both(text, fills, 0, NULL);
}
END_TEST

START_TEST(emu_topk_and_prod) {
  static const char text[] = "graph tk {\n"
                             "  %x = input {name=\"x\"} : f32[3, 6, 2]\n"
                             "  %v, %i = topk %x {k=4, axis=1} : f32[3, 4, 2], i64[3, 4, 2]\n"
                             "  %sv, %si = topk %x {k=2, axis=2, largest=0} : f32[3, 6, 2], i64[3, 6, 2]\n"
                             "  %h = cast %x {to=f16} : f16[3, 6, 2]\n"
                             "  %hv, %hi = topk %h {k=3, axis=0} : f16[3, 6, 2], i64[3, 6, 2]\n"
                             "  %n = input {name=\"n\"} : i64[5, 3]\n"
                             "  %nv, %ni = topk %n {k=5, axis=0, largest=0} : i64[5, 3], i64[5, 3]\n"
                             "  %p = reduce_prod %x {axes=[0, 2]} : f32[6]\n"
                             "  return %v as \"v\", %i as \"i\", %sv as \"sv\", %si as \"si\", %hv as \"hv\", %hi as \"hi\", "
                             "%nv as \"nv\", %ni as \"ni\", %p as \"p\"\n"
                             "}\n";
  const Fill fills[] = {FILL("x", 3, NAN, 3, -1, 5, 2, 2, 7, 2, -INFINITY, 0.5, -0.0, 1.25),
                        FILL("n", 4, -2, 4, 0, -2, 9, 9223372036854775807.0), {NULL, NULL, 0}};
  check_both(text, fills, 1e-6, NULL);
}
END_TEST

/* floor, sign, mod, atan of a chain: one kernel at -O2. */
START_TEST(fused_chain_is_one_kernel) {
  static const char text[] = "graph chain {\n"
                             "  %x = input {name=\"x\"} : f32[4, 300]\n"
                             "  %y = input {name=\"y\"} : f32[300]\n"
                             "  %f = floor %x : f32[4, 300]\n"
                             "  %s = sign %y : f32[300]\n"
                             "  %m = mod %x, %y : f32[4, 300]\n"
                             "  %p = mul %f, %s : f32[4, 300]\n"
                             "  %a = add %p, %m : f32[4, 300]\n"
                             "  %t = atan %a : f32[4, 300]\n"
                             "  return %t as \"t\"\n"
                             "}\n";
  const Fill fills[] = {FILL("x", -1.5, 0.0, 2.25, NAN, -0.0, 3.5, -9), FILL("y", 2, -0.5, 3, -4), {NULL, NULL, 0}};
  int n[2];
  check_both(text, fills, 1e-5, n);
  ck_assert_int_eq(n[0], 6);
  ck_assert_int_eq(n[1], 1);
}
END_TEST

/* Indices out of range on emu: the run fails with ir_eval's message
 * (the first bad index of the first op that has one); nothing is read or
 * written out of bounds meanwhile (emu's buffers are exact, and ASan
 * watches them in CI).  test_bounds checks each op on its own. */
START_TEST(emu_out_of_range_indices) {
  static const char text[] = "graph oob {\n"
                             "  %d = input {name=\"d\"} : f32[2, 3]\n"
                             "  %i = input {name=\"i\"} : i64[2, 3]\n"
                             "  %g = gather_elements %d, %i {axis=1} : f32[2, 3]\n"
                             "  %s = scatter_elements %d, %i, %d {axis=1} : f32[2, 3]\n"
                             "  %n = input {name=\"n\"} : i64[3, 2]\n"
                             "  %gn = gather_nd %d, %n : f32[3]\n"
                             "  %v = input {name=\"v\"} : f32[3]\n"
                             "  %sn = scatter_nd %d, %n, %v : f32[2, 3]\n"
                             "  return %g as \"g\", %s as \"s\", %gn as \"gn\", %sn as \"sn\"\n"
                             "}\n";
  Ctx c;
  ctx_init(&c);
  Job j = compile_at(&c, text, 2);
  const Fill fills[] = {FILL("d", 0, 1, 2, 3, 4, 5), FILL("i", 7, -9, 1, 3, 0, -4),
                        FILL("n", 1, 5, -3, 0, 1, 1), FILL("v", 10, 20, 30), {NULL, NULL, 0}};
  Data d;
  make_inputs(j.g, fills, 0, &d);
  char want[512], got[512];
  Tensor *r = calloc(4, sizeof *r);
  ck_assert(!ir_eval(j.g, &d.inputs, NULL, r, want, sizeof want));
  free(r);
  ck_assert_int_eq(test_run_emu_status(j.cg.plan, NULL, &d.inputs, &r, got, sizeof got), DLRT_E_INDEX);
  ck_assert_str_eq(got, want);
  ck_assert_str_eq(got, "gather_elements: index 7 is out of range for axis 1 of size 3");
  free_inputs(&d);
  ctx_free(&c);
}
END_TEST

/* ---- the language ---- */

typedef struct Lowered {
  const char *text;
  Graph *g;
} Lowered;

static int lower_job(Ctx *c, void *data) {
  Lowered *l = data;
  const SrcFile *f = ctx_add_file(c, "t.dl", l->text, strlen(l->text));
  Program *p = fe_parse(c, f);
  l->g = p ? fe_lower(c, p, NULL) : NULL;
  if (l->g && !ir_verify(l->g)) l->g = NULL;
  return 0;
}

static Graph *lower_dl(Ctx *c, const char *text) {
  Lowered l = {.text = text};
  ck_assert_int_ne(ctx_guard(c, lower_job, &l), -1);
  return l.g;
}

static int count_op(const Graph *g, OpKind op) {
  int n = 0;
  for (Node *x = g->first; x; x = x->next) n += x->op == op;
  return n;
}

START_TEST(language_builtins) {
  static const char text[] =
      "model m(x: f32[2, 4], y: f32[2, 4], i: i64[2, 2]) -> (a: f32[2, 4], b: f32[2, 4], c: f32[2, 4], g: f32[2, 2]) {\n"
      "  a = round(x) + floor(x) + ceil(x) + sign(x)\n"
      "  t = tan(x) + asin(x * 0.1) + acos(x * 0.1) + atan(x) + sinh(x) + cosh(x)\n"
      "  b = t + asinh(x) + acosh(abs(x) + 1) + atanh(x * 0.1)\n"
      "  c = x % y + mod(x, y, fmod=true)\n"
      "  return a, b, c, gather_elements(x, i, axis=-1)\n"
      "}\n";
  Ctx c;
  ctx_init(&c);
  Graph *g = lower_dl(&c, text);
  ck_assert_msg(g != NULL, "%s", diag_text(&c));
  static const OpKind once[] = {OP_ROUND, OP_FLOOR, OP_CEIL, OP_SIGN, OP_TAN, OP_ASIN, OP_ACOS, OP_ATAN,
                                OP_SINH, OP_COSH, OP_ASINH, OP_ACOSH, OP_ATANH, OP_GATHER_ELEMENTS};
  for (size_t k = 0; k < ARRAY_LEN(once); k++) ck_assert_int_eq(count_op(g, once[k]), 1);
  ck_assert_int_eq(count_op(g, OP_MOD), 2);
  int fmods = 0;
  for (Node *n = g->first; n; n = n->next)
    if (n->op == OP_MOD) fmods += (int)ir_attr_int(n, "fmod");
  ck_assert_int_eq(fmods, 1);
  /* x = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.5], y = 2 or -2 */
  TensorType t = ir_type_make(TY_F32, 2, (int64_t[]){2, 4}), ti = ir_type_make(TY_I64, 2, (int64_t[]){2, 2});
  Tensor in[3];
  ck_assert(ir_tensor_alloc(&in[0], &t) && ir_tensor_alloc(&in[1], &t) && ir_tensor_alloc(&in[2], &ti));
  const double xs[] = {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.5}, is[] = {3, -4, 0, 2};
  for (int i = 0; i < 8; i++) ir_tensor_set(&in[0], i, xs[i]), ir_tensor_set(&in[1], i, i % 2 ? -2 : 2);
  for (int i = 0; i < 4; i++) ir_tensor_set(&in[2], i, is[i]);
  TensorMap inputs = {3, (const char *[]){"x", "y", "i"}, in};
  Tensor out[4];
  char err[256];
  ck_assert_msg(ir_eval(g, &inputs, NULL, out, err, sizeof err), "%s", err);
  /* round half even + floor + ceil + sign */
  static const double a[] = {-2 - 3 - 2 - 1, -2 - 2 - 1 - 1, -0.0 - 1 - 0.0 - 1, 0 + 0 + 1 + 1,
                             2 + 1 + 2 + 1, 2 + 2 + 3 + 1, 4 + 3 + 4 + 1, -4 - 4 - 3 - 1};
  /* Python's % plus C's fmod */
  static const double cm[] = {1.5 - 0.5, -1.5 - 1.5, 1.5 - 0.5, -1.5 + 0.5,
                              1.5 + 1.5, -1.5 + 0.5, 1.5 + 1.5, -1.5 - 1.5};
  static const double gv[] = {0.5, -2.5, 1.5, 3.5};
  expect_values(&out[0], a, 8, "a");
  expect_values(&out[2], cm, 8, "c");
  expect_values(&out[3], gv, 4, "gather_elements");
  for (int i = 0; i < 4; i++) ir_tensor_free(&out[i]);
  for (int i = 0; i < 3; i++) ir_tensor_free(&in[i]);
  ctx_free(&c);
}
END_TEST

/* Each snippet's first error, located. */
static void expect_dl_error(const char *body, const char *want) {
  char text[1024];
  snprintf(text, sizeof text, "model m(x: f32[8], i: i64[8], j: i32[2, 4]) -> f32[8] {\n%s\n}\n", body);
  Ctx c;
  ctx_init(&c);
  Graph *g = lower_dl(&c, text);
  ck_assert_msg(g == NULL, "accepted:\n%s", text);
  ck_assert_msg(strstr(diag_text(&c), want), "for\n%s\nwanted: %s\ngot:\n%s", body, want, diag_text(&c));
  ctx_free(&c);
}

START_TEST(language_errors) {
  expect_dl_error("  return cast(round(i), f32)", "t.dl:2:15: error: round needs a floating-point input, got i64[8]");
  expect_dl_error("  return acosh(i)", "t.dl:2:10: error: acosh needs a floating-point input, got i64[8]");
  expect_dl_error("  return x % i", "t.dl:2:12: error: mod: dtype mismatch f32 vs i64");
  expect_dl_error("  return mod(x, 2, fmod=\"yes\")", "t.dl:2:20: error: mod: 'fmod' must be true or false, got a string");
  expect_dl_error("  return gather_elements(x, x)", "t.dl:2:10: error: gather_elements needs i32 or i64 indices, got f32[8]");
  expect_dl_error("  return gather_elements(x, j)",
                  "t.dl:2:10: error: gather_elements: indices i32[2, 4] must have the rank of data f32[8]");
  expect_dl_error("  return gather_elements(x, i, axis=1)",
                  "t.dl:2:32: error: gather_elements: axis 1 is out of range for a tensor of rank 1");
}
END_TEST

static Suite *ops2_suite(void) {
  Suite *s = suite_create("ops2");
  TCase *e = tcase_create("meaning");
  tcase_add_test(e, eval_rounding_and_sign);
  tcase_add_test(e, eval_mod_signs);
  tcase_add_test(e, eval_trig_domains);
  tcase_add_test(e, eval_integer_pow_and_prod);
  tcase_add_test(e, eval_gathers);
  tcase_add_test(e, eval_scatters);
  tcase_add_test(e, eval_topk_order);
  tcase_add_test(e, index_bounds);
  tcase_add_test(e, shape_errors);
  tcase_add_test(e, text_round_trip);
  suite_add_tcase(s, e);
  TCase *l = tcase_create("language");
  tcase_add_test(l, language_builtins);
  tcase_add_test(l, language_errors);
  suite_add_tcase(s, l);
  TCase *g = tcase_create("codegen");
  tcase_set_timeout(g, 180);
  tcase_add_test(g, emu_float_math);
  tcase_add_test(g, emu_trig);
  tcase_add_test(g, emu_integer_ops);
  tcase_add_test(g, emu_halves);
  tcase_add_test(g, emu_indexing);
  tcase_add_test(g, emu_topk_and_prod);
  tcase_add_test(g, fused_chain_is_one_kernel);
  tcase_add_test(g, emu_out_of_range_indices);
  suite_add_tcase(s, g);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(ops2_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
