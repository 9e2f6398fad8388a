/* Check suite for int8 codegen: quantize and dequantize (per tensor and
 * per channel, standalone and fused), int8 products (conv2d as im2col +
 * GEMM, implicit GEMM, grouped and depthwise loops; linear; batched
 * matmul; cuBLAS's int8 GEMM and our own kernel where cuBLAS would refuse
 * the shape) and the quantized conv chain fused at -O2 (quantize in the
 * loads, dequantize, bias, relu and requantize in the store).  Every plan
 * runs on emu with random inputs and must equal ir_eval byte for byte;
 * chosen inputs pin saturation, round-half-even ties and NaN; every
 * generated source compiles with NVRTC for sm_80 and sm_90 (when
 * configure found NVRTC). */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "config.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "tests/testutil.h"

#ifdef HAVE_CUDA
#include <nvrtc.h>
#endif

/* ---- inputs ---- */

static uint64_t rng_state;
static double uniform(double lo, double hi) {
  uint64_t z = test_splitmix64(&rng_state);
  return lo + (hi - lo) * (double)(z >> 11) / 9007199254740992.0;
}

/* What an input or param named `name` holds: values (cycled) when
 * given, else uniform in [lo, hi] (integers for integer dtypes). */
typedef struct Fill {
  const char *name;
  double lo, hi;
  const double *values;
  int n_values;
} Fill;

#define RANGE(n, l, h) {.name = (n), .lo = (l), .hi = (h)}
#define VALUES(n, v, count) {.name = (n), .values = (v), .n_values = (count)}
#define END_FILLS {.name = NULL}

enum { MAX_TENSORS = 24 };

typedef struct Data {
  TensorMap inputs, params;
  const char *in_names[MAX_TENSORS], *par_names[MAX_TENSORS];
  Tensor in_t[MAX_TENSORS], par_t[MAX_TENSORS];
} Data;

static void default_range(DType dt, double *lo, double *hi) {
  *lo = dt == TY_I8 ? -127 : dt == TY_I32 ? -100000 : -2;
  *hi = -*lo;
}

static void fill_tensor(Tensor *t, const char *name, const Fill *fills) {
  const Fill *f = NULL;
  for (const Fill *p = fills; p && p->name; p++)
    if (strcmp(p->name, name) == 0) f = p;
  double lo, hi;
  default_range(t->type.dtype, &lo, &hi);
  if (f && !f->values) lo = f->lo, hi = f->hi;
  int64_t count = ir_type_numel(&t->type);
  for (int64_t i = 0; i < count; i++) {
    double v = f && f->values ? f->values[i % f->n_values] : uniform(lo, hi);
    if (!ir_dtype_is_float(t->type.dtype) && !(f && f->values)) v = fmin(floor(v + 0.5), hi);
    ir_tensor_set(t, i, v);
  }
}

static void make_data(Graph *g, uint64_t seed, const Fill *fills, Data *d) {
  memset(d, 0, sizeof *d);
  rng_state = seed * 7919 + 11;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_INPUT && n->op != OP_PARAM) continue;
    bool in = n->op == OP_INPUT;
    int *count = in ? &d->inputs.n : &d->params.n;
    ck_assert_int_lt(*count, MAX_TENSORS);
    Tensor *t = in ? &d->in_t[*count] : &d->par_t[*count];
    ck_assert(ir_tensor_alloc(t, &n->out[0].type));
    const char *name = ir_attr_str(n, "name");
    fill_tensor(t, name, fills);
    (in ? d->in_names : d->par_names)[(*count)++] = name;
  }
  d->inputs.names = d->in_names, d->inputs.tensors = d->in_t;
  d->params.names = d->par_names, d->params.tensors = d->par_t;
}

static void free_data(Data *d) {
  for (int i = 0; i < d->inputs.n; i++) ir_tensor_free(&d->in_t[i]);
  for (int i = 0; i < d->params.n; i++) ir_tensor_free(&d->par_t[i]);
}

static void free_outputs(Tensor *t, int n) {
  for (int i = 0; i < n; i++) ir_tensor_free(&t[i]);
  free(t);
}

/* ---- NVRTC ---- */


static void check_nvrtc(const char *source) {
  test_nvrtc(source, "sm_80");
  test_nvrtc(source, "sm_90");
}

/* ---- one graph: parse, optimize, compile ---- */

typedef struct Job {
  const char *text;
  int level;
  Graph *g;
  CgResult cg;
  bool ok;
} Job;

static int run_job(Ctx *c, void *data) {
  Job *j = data;
  const SrcFile *f = ctx_add_file(c, "test.ir", j->text, strlen(j->text));
  j->g = ir_parse(c, f);
  if (!j->g || !ir_verify(j->g)) return 0;
  PassOptions po = {.opt_level = j->level, .verify_each = true};
  if (!pass_run_pipeline(j->g, &po, NULL) || !ir_verify(j->g)) return 0;
  j->ok = cg_compile(j->g, &j->cg);
  return 0;
}

static Job compile_at(Ctx *c, const char *text, int level) {
  Job j = {.text = text, .level = level};
  int rc = ctx_guard(c, run_job, &j);
  ck_assert_msg(rc == 0 && j.ok, "-O%d: compile failed:\n%s\n%s", level, diag_text(c), text);
  return j;
}

static int count_steps(const RtPlan *p, RtStepKind kind) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) n += p->steps[i].kind == (uint32_t)kind;
  return n;
}

/* A run's GEMM steps of dtype RT_DT_I8 (cuBLAS's int8 path on cuda). */
static int count_i8_gemms(const RtPlan *p) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_steps; i++)
    n += p->steps[i].kind == RT_STEP_GEMM && p->steps[i].gemm.dtype == RT_DT_I8;
  return n;
}

/* Our own int8 GEMM kernel, where cuBLAS would refuse the shape. */
static bool has_i8_gemm_kernel(const CgResult *cg) { return strstr(cg->source, "_gemm_i8_") != NULL; }

/* The first differing element of two outputs, as text (or NULL). */
static const char *first_difference(const Tensor *got, const Tensor *want, char *buf, size_t len) {
  int64_t count = ir_type_numel(&want->type);
  size_t es = (size_t)ir_dtype_size(want->type.dtype);
  for (int64_t i = 0; i < count; i++)
    if (memcmp((const char *)got->data + i * es, (const char *)want->data + i * es, es) != 0) {
      snprintf(buf, len, "element %lld: emu %.9g, ir_eval %.9g", (long long)i, ir_tensor_get(got, i),
               ir_tensor_get(want, i));
      return buf;
    }
  return NULL;
}

/* j's plan on emu against ir_eval of the same graph, byte for byte. */
static void expect_exact(Job *j, uint64_t seed, const Fill *fills) {
  Data d;
  make_data(j->g, seed, fills, &d);
  Tensor *want = calloc((size_t)j->g->n_outputs + 1, sizeof *want);
  char err[512];
  ck_assert_msg(ir_eval(j->g, &d.inputs, &d.params, want, err, sizeof err), "ir_eval: %s", err);
  Tensor *got = test_run_emu(j->cg.plan, &d.params, &d.inputs);
  for (int i = 0; i < j->g->n_outputs; i++) {
    ck_assert(ir_type_eq(&got[i].type, &want[i].type));
    char buf[160];
    const char *diff = first_difference(&got[i], &want[i], buf, sizeof buf);
    ck_assert_msg(!diff, "-O%d output '%s': %s\n%s", j->level, j->g->output_names[i], diff, j->text);
  }
  free_outputs(want, j->g->n_outputs);
  free_outputs(got, j->g->n_outputs);
  free_data(&d);
}

/* text at -O0 and at -O2: exact on emu, compiled by NVRTC.  plans[0] and
 * plans[1] (when given) receive what the two levels made. */
typedef struct Plans {
  int launches[2], gemms[2], i8_gemms[2], init_steps[2];
  bool own_gemm[2];
} Plans;

static void check_both(const char *text, const Fill *fills, Plans *out) {
  for (int l = 0; l < 2; l++) {
    Ctx c;
    ctx_init(&c);
    Job j = compile_at(&c, text, 2 * l);
    check_nvrtc(j.cg.source);
    for (uint64_t seed = 1; seed <= 2; seed++) expect_exact(&j, seed, fills);
    if (out) {
      out->launches[l] = count_steps(j.cg.plan, RT_STEP_LAUNCH);
      out->gemms[l] = count_steps(j.cg.plan, RT_STEP_GEMM);
      out->i8_gemms[l] = count_i8_gemms(j.cg.plan);
      out->init_steps[l] = (int)j.cg.plan->n_init_steps;
      out->own_gemm[l] = has_i8_gemm_kernel(&j.cg);
    }
    ctx_free(&c);
  }
}

/* ---- quantize and dequantize ---- */

START_TEST(quantize_per_tensor) {
  Plans p;
  check_both("graph qt {\n"
             "  %x = input {name=\"x\"} : f32[3, 700]\n"
             "  %q = quantize %x {scale=0.0123} : i8[3, 700]\n"
             "  %r = relu %x : f32[3, 700]\n"
             "  %qr = quantize %r {scale=0.00731} : i8[3, 700]\n"
             "  %h = input {name=\"h\"} : f16[5, 60]\n"
             "  %qh = quantize %h {scale=0.01} : i8[5, 60]\n"
             "  return %q as \"q\", %qr as \"qr\", %qh as \"qh\"\n"
             "}\n",
             (const Fill[]){RANGE("x", -3, 3), RANGE("h", -2, 2), END_FILLS}, &p);
  /* relu and its quantize: one kernel at -O2 */
  ck_assert_int_eq(p.launches[0], 4);
  ck_assert_int_eq(p.launches[1], 3);
}
END_TEST

START_TEST(quantize_per_channel) {
  check_both("graph qc {\n"
             "  %x = input {name=\"x\"} : f32[2, 4, 3, 5]\n"
             "  %s = input {name=\"s\"} : f32[4, 1, 1]\n"
             "  %q = quantize %x, %s : i8[2, 4, 3, 5]\n"
             "  %p = param {name=\"p\"} : f32[5]\n"
             "  %qp = quantize %x, %p : i8[2, 4, 3, 5]\n"
             "  %t = tanh %x : f32[2, 4, 3, 5]\n"
             "  %qt = quantize %t, %s : i8[2, 4, 3, 5]\n"
             "  return %q as \"q\", %qp as \"qp\", %qt as \"qt\"\n"
             "}\n",
             (const Fill[]){RANGE("x", -3, 3), RANGE("s", 0.002, 0.03), RANGE("p", 0.001, 0.02), END_FILLS}, NULL);
}
END_TEST

START_TEST(dequantize_i8_and_i32) {
  Plans p;
  check_both("graph dq {\n"
             "  %a = input {name=\"a\"} : i8[3, 50]\n"
             "  %b = input {name=\"b\"} : i32[3, 50]\n"
             "  %s = input {name=\"s\"} : f32[50]\n"
             "  %da = dequantize %a {scale=0.0123} : f32[3, 50]\n"
             "  %db = dequantize %b {scale=3.1e-05} : f32[3, 50]\n"
             "  %dc = dequantize %b, %s : f32[3, 50]\n"
             "  %dd = dequantize %a, %s : f32[3, 50]\n"
             "  %e = add %dc, %dd : f32[3, 50]\n"
             "  %f = relu %e : f32[3, 50]\n"
             "  return %da as \"da\", %db as \"db\", %f as \"f\"\n"
             "}\n",
             /* the whole int32 range: (float)q rounds */
             (const Fill[]){RANGE("b", -2147483648.0, 2147483647.0), RANGE("s", 1e-6, 1e-3), END_FILLS}, &p);
  ck_assert_int_eq(p.launches[1], 3); /* dequantize, dequantize, add, relu: one kernel */
}
END_TEST

/* scale 0.25: x / s is exact, so these are the ties and bounds
 * themselves; the expected bytes are written out, not just eval's. */
START_TEST(quantize_saturates_rounds_half_even_and_zeroes_nan) {
  static const double x[] = {0.125,  0.375,  0.625,   0.875,  -0.125,  -0.375, -0.625,  31.625,
                             31.875, -31.875, 1000,   -1000,   NAN,     INFINITY, -INFINITY, 0,
                             -0.0,   1e-30,  0.2499, -31.625, 31.7,    -32,     2.5e9,   -NAN};
  static const signed char want[] = {0,   2,    2,   4,   0,    -2,   -2,   126, 127,  -127, 127, -127,
                                     0,   127,  -127, 0,   0,    0,    1,    -126, 127, -127, 127, 0};
  enum { N = sizeof x / sizeof x[0] };
  ck_assert_int_eq(N, (int)sizeof want);
  const char *text = "graph ties {\n"
                     "  %x = input {name=\"x\"} : f32[24]\n"
                     "  %q = quantize %x {scale=0.25} : i8[24]\n"
                     "  %s = input {name=\"s\"} : f32[24]\n"
                     "  %qs = quantize %x, %s : i8[24]\n"
                     "  %r = relu %x : f32[24]\n"
                     "  %qr = quantize %r {scale=0.25} : i8[24]\n"
                     "  %qz = quantize %x {scale=0.25, zero_point=-3} : i8[24]\n"
                     "  return %q as \"q\", %qs as \"qs\", %qr as \"qr\", %qz as \"qz\"\n"
                     "}\n";
  static const double quarter[] = {0.25};
  const Fill fills[] = {VALUES("x", x, N), VALUES("s", quarter, 1), END_FILLS};
  check_both(text, fills, NULL);
  for (int l = 0; l < 2; l++) {
    Ctx c;
    ctx_init(&c);
    Job j = compile_at(&c, text, 2 * l);
    Data d;
    make_data(j.g, 1, fills, &d);
    Tensor *got = test_run_emu(j.cg.plan, &d.params, &d.inputs);
    for (int o = 0; o < 2; o++)
      for (int i = 0; i < N; i++)
        ck_assert_msg(((signed char *)got[o].data)[i] == want[i], "-O%d %s: x = %g gave %d, not %d", 2 * l,
                      j.g->output_names[o], x[i], ((signed char *)got[o].data)[i], want[i]);
    /* relu: NaN stays NaN (-> 0), negatives become 0 */
    for (int i = 0; i < N; i++) {
      int r = ((signed char *)got[2].data)[i];
      ck_assert_int_eq(r, want[i] > 0 ? want[i] : 0);
    }
    /* zero point -3: rounded as before, the range [-128, 127] less 3,
     * NaN -> -3 */
    for (int i = 0; i < N; i++) {
      double r = isnan(x[i]) ? 0 : fmin(fmax(nearbyint(x[i] / 0.25), -125), 130);
      int z = ((signed char *)got[3].data)[i], wz = (int)r - 3;
      ck_assert_msg(z == wz, "-O%d qz: x = %g gave %d, not %d", 2 * l, x[i], z, wz);
    }
    free_outputs(got, j.g->n_outputs);
    free_data(&d);
    ctx_free(&c);
  }
}
END_TEST

/* Asymmetric int8: the zero point is added after rounding, the range
 * is then [-128, 127], NaN gives the zero point, and dequantize takes it
 * off again (exact in int64 for an i32 q). */
START_TEST(zero_points) {
  check_both("graph zp {\n"
             "  %x = input {name=\"x\"} : f32[4, 333]\n"
             "  %q = quantize %x {scale=0.0123, zero_point=-20} : i8[4, 333]\n"
             "  %s = input {name=\"s\"} : f32[333]\n"
             "  %qs = quantize %x, %s {zero_point=7} : i8[4, 333]\n"
             "  %r = relu %x : f32[4, 333]\n"
             "  %qr = quantize %r {scale=0.01, zero_point=-128} : i8[4, 333]\n"
             "  %d = dequantize %q {scale=0.0123, zero_point=-20} : f32[4, 333]\n"
             "  %e = exp %d : f32[4, 333]\n"
             "  %a = input {name=\"a\"} : i32[4, 333]\n"
             "  %da = dequantize %a, %s {zero_point=127} : f32[4, 333]\n"
             "  return %q as \"q\", %qs as \"qs\", %qr as \"qr\", %e as \"e\", %da as \"da\"\n"
             "}\n",
             (const Fill[]){RANGE("x", -3, 3), RANGE("s", 0.002, 0.03), RANGE("a", -2147483648.0, 2147483647.0),
                            END_FILLS},
             NULL);
}
END_TEST

/* ---- int8 products ---- */

START_TEST(conv2d_3x3_pad1_stride2) {
  Plans p;
  check_both("graph c {\n"
             "  %x = input {name=\"x\"} : i8[2, 3, 9, 9]\n"
             "  %w = param {name=\"w\"} : i8[8, 3, 3, 3]\n"
             "  %b = param {name=\"b\"} : i32[8]\n"
             "  %y = conv2d %x, %w, %b {stride=[2, 2], pad=[1, 1, 1, 1]} : i32[2, 8, 5, 5]\n"
             "  %x2 = input {name=\"x2\"} : i8[1, 4, 6, 6]\n"
             "  %w2 = param {name=\"w2\"} : i8[5, 4, 3, 3]\n"
             "  %y2 = conv2d %x2, %w2 {pad=[1, 1, 1, 1]} : i32[1, 5, 6, 6]\n"
             "  return %y as \"y\", %y2 as \"y2\"\n"
             "}\n",
             NULL, &p);
  /* -O0: im2col + GEMM, W [8][27] times the im2col [27][25]: B
   * untransposed, which cuBLAS's int8 GEMM refused on the H200 (only its
   * TN form ran for every shape), so both are our kernel; -O2: one
   * implicit GEMM each. */
  ck_assert(p.own_gemm[0]);
  ck_assert_int_eq(p.i8_gemms[0], 0);
  ck_assert_int_eq(p.gemms[1], 0);
  ck_assert_int_eq(p.launches[1], 2);
}
END_TEST

START_TEST(conv2d_1x1) {
  Plans p;
  check_both("graph c {\n"
             "  %x = input {name=\"x\"} : i8[2, 8, 4, 4]\n"
             "  %w = param {name=\"w\"} : i8[12, 8, 1, 1]\n"
             "  %b = param {name=\"b\"} : i32[12]\n"
             "  %y = conv2d %x, %w, %b : i32[2, 12, 4, 4]\n"
             "  %x2 = input {name=\"x2\"} : i8[1, 8, 8, 8]\n"
             "  %y2 = conv2d %x2, %w {stride=[2, 2]} : i32[1, 12, 4, 4]\n"
             "  return %y as \"y\", %y2 as \"y2\"\n"
             "}\n",
             NULL, &p);
  /* -O0: x itself is the matrix (C = 8, HW = 16), and the strided one
   * goes through im2col: W times x untransposed, so our kernel (cuBLAS
   * takes int8 in its TN form only) */
  ck_assert_int_eq(p.i8_gemms[0], 0);
  ck_assert(p.own_gemm[0]);
}
END_TEST

START_TEST(conv2d_grouped_and_depthwise) {
  check_both("graph c {\n"
             "  %x = input {name=\"x\"} : i8[2, 6, 7, 7]\n"
             "  %w = param {name=\"w\"} : i8[9, 2, 3, 3]\n"
             "  %b = param {name=\"b\"} : i32[9]\n"
             "  %y = conv2d %x, %w, %b {stride=[2, 2], groups=3} : i32[2, 9, 3, 3]\n"
             "  %x2 = input {name=\"x2\"} : i8[1, 8, 6, 6]\n"
             "  %w2 = param {name=\"w2\"} : i8[8, 1, 3, 3]\n"
             "  %b2 = param {name=\"b2\"} : i32[8]\n"
             "  %y2 = conv2d %x2, %w2, %b2 {pad=[1, 1, 1, 1], groups=8} : i32[1, 8, 6, 6]\n"
             "  return %y as \"y\", %y2 as \"y2\"\n"
             "}\n",
             NULL, NULL);
}
END_TEST

/* An int8 conv's padding reads its zero_point: im2col (-O0), the
 * implicit GEMM (-O2) and the grouped loop. */
START_TEST(conv2d_zero_point) {
  check_both("graph c {\n"
             "  %x = input {name=\"x\"} : i8[2, 4, 7, 7]\n"
             "  %w = param {name=\"w\"} : i8[6, 4, 3, 3]\n"
             "  %b = param {name=\"b\"} : i32[6]\n"
             "  %y = conv2d %x, %w, %b {stride=[2, 2], pad=[1, 2, 2, 1], zero_point=-17} : i32[2, 6, 4, 4]\n"
             "  %wg = param {name=\"wg\"} : i8[8, 2, 3, 3]\n"
             "  %yg = conv2d %x, %wg {pad=[1, 1, 1, 1], groups=2, zero_point=5} : i32[2, 8, 7, 7]\n"
             "  return %y as \"y\", %yg as \"yg\"\n"
             "}\n",
             NULL, NULL);
}
END_TEST

START_TEST(linear_int8) {
  Plans p;
  check_both("graph l {\n"
             "  %x = input {name=\"x\"} : i8[5, 32]\n"
             "  %w = param {name=\"w\"} : i8[10, 32]\n"
             "  %b = param {name=\"b\"} : i32[10]\n"
             "  %y = linear %x, %w, %b : i32[5, 10]\n"
             "  %x2 = input {name=\"x2\"} : i8[2, 3, 7]\n"
             "  %w2 = param {name=\"w2\"} : i8[6, 7]\n"
             "  %y2 = linear %x2, %w2 : i32[2, 3, 6]\n"
             "  return %y as \"y\", %y2 as \"y2\"\n"
             "}\n",
             NULL, &p);
  /* 32 features: cuBLAS; 7: our kernel */
  for (int l = 0; l < 2; l++) {
    ck_assert_int_eq(p.i8_gemms[l], 1);
    ck_assert(p.own_gemm[l]);
  }
}
END_TEST

START_TEST(batched_matmul_int8) {
  Plans p;
  check_both("graph m {\n"
             "  %a = input {name=\"a\"} : i8[2, 3, 5, 16]\n"
             "  %b = input {name=\"b\"} : i8[3, 16, 8]\n"
             "  %c = matmul %a, %b : i32[2, 3, 5, 8]\n"
             "  %a2 = input {name=\"a2\"} : i8[4, 5, 6]\n"
             "  %b2 = input {name=\"b2\"} : i8[4, 6, 7]\n"
             "  %c2 = matmul %a2, %b2 : i32[4, 5, 7]\n"
             "  %a3 = input {name=\"a3\"} : i8[4, 8]\n"
             "  %b3 = input {name=\"b3\"} : i8[8]\n"
             "  %c3 = matmul %a3, %b3 : i32[4]\n"
             "  return %c as \"c\", %c2 as \"c2\", %c3 as \"c3\"\n"
             "}\n",
             NULL, &p);
  /* every B untransposed ([k][n]): our kernel, not cuBLAS (which takes
   * int8 in its TN form only) */
  ck_assert_int_eq(p.i8_gemms[0], 0);
  ck_assert(p.own_gemm[0]);
}
END_TEST

/* ---- the quantized chain of passes/quantize.c, fused at -O2 ---- */

/* conv, per-channel weight scales computed at load time (init steps),
 * dequantize, bias, relu, requantize; NAME is the layer. */
#define QCONV(X, NAME, CO, CI, XSCALE, OUT)                                                                 \
  "  %" NAME "w = param {name=\"" NAME ".weight\"} : f32[" #CO ", " #CI ", 3, 3]\n"                         \
  "  %" NAME "b = param {name=\"" NAME ".bias\"} : f32[" #CO "]\n"                                        \
  "  %" NAME "wa = abs %" NAME "w : f32[" #CO ", " #CI ", 3, 3]\n"                                        \
  "  %" NAME "wm = reduce_max %" NAME "wa {axes=[1, 2, 3], keepdims=1} : f32[" #CO ", 1, 1, 1]\n"         \
  "  %" NAME "c = const {value=127} : f32[]\n"                                                              \
  "  %" NAME "wd = div %" NAME "wm, %" NAME "c : f32[" #CO ", 1, 1, 1]\n"                                 \
  "  %" NAME "tiny = const {value=1e-08} : f32[]\n"                                                         \
  "  %" NAME "ws = maximum %" NAME "wd, %" NAME "tiny : f32[" #CO ", 1, 1, 1]\n"                          \
  "  %" NAME "wq = quantize %" NAME "w, %" NAME "ws : i8[" #CO ", " #CI ", 3, 3]\n"                       \
  "  %" NAME "acc = conv2d " X ", %" NAME "wq {pad=[1, 1, 1, 1]} : i32[2, " #CO ", 8, 8]\n"              \
  "  %" NAME "wr = reshape %" NAME "ws {shape=[" #CO ", 1, 1]} : f32[" #CO ", 1, 1]\n"                    \
  "  %" NAME "xs = const {value=" XSCALE "} : f32[]\n"                                                     \
  "  %" NAME "s = mul %" NAME "wr, %" NAME "xs : f32[" #CO ", 1, 1]\n"                                   \
  "  %" NAME "y = dequantize %" NAME "acc, %" NAME "s : f32[2, " #CO ", 8, 8]\n"                          \
  "  %" NAME "br = reshape %" NAME "b {shape=[" #CO ", 1, 1]} : f32[" #CO ", 1, 1]\n"                     \
  "  %" NAME "yb = add %" NAME "y, %" NAME "br : f32[2, " #CO ", 8, 8]\n"                                 \
  "  %" NAME "r = relu %" NAME "yb : f32[2, " #CO ", 8, 8]\n"                                             \
  "  %" OUT " = quantize %" NAME "r {scale=0.02} : i8[2, " #CO ", 8, 8]\n"

static const char chain1[] = "graph chain1 {\n"
                             "  %x = input {name=\"x\"} : f32[2, 3, 8, 8]\n"
                             "  %xq = quantize %x {scale=0.0123} : i8[2, 3, 8, 8]\n" QCONV(
                                 "%xq", "c1", 16, 3, "0.0123", "nq")
                             "  return %nq as \"nq\"\n"
                             "}\n";

static const char chain2[] = "graph chain2 {\n"
                             "  %x = input {name=\"x\"} : f32[2, 3, 8, 8]\n"
                             "  %xq = quantize %x {scale=0.0123} : i8[2, 3, 8, 8]\n" QCONV(
                                 "%xq", "c1", 16, 3, "0.0123", "q1") QCONV("%q1", "c2", 8, 16, "0.02", "q2")
                             "  %y = dequantize %q2 {scale=0.02} : f32[2, 8, 8, 8]\n"
                             "  return %y as \"y\"\n"
                             "}\n";

START_TEST(fused_conv_chain_is_one_kernel) {
  const Fill fills[] = {RANGE("x", -1.5, 1.5), RANGE("c1.weight", -0.3, 0.3), RANGE("c1.bias", -0.2, 0.2), END_FILLS};
  Plans p;
  check_both(chain1, fills, &p);
  /* -O2: quantize in the loads, conv, dequantize, bias, relu, requantize
   * in the store: one launch, no GEMM; the weights' scales and int8
   * weights come from the init steps */
  ck_assert_int_eq(p.launches[1], 1);
  ck_assert_int_eq(p.gemms[1], 0);
  ck_assert_int_gt(p.init_steps[1], 0);
  ck_assert_int_gt(p.launches[0], 1);
}
END_TEST

START_TEST(fused_two_conv_chain) {
  const Fill fills[] = {RANGE("x", -1.5, 1.5),         RANGE("c1.weight", -0.3, 0.3), RANGE("c1.bias", -0.2, 0.2),
                        RANGE("c2.weight", -0.1, 0.1), RANGE("c2.bias", -0.1, 0.1),  END_FILLS};
  Plans p;
  check_both(chain2, fills, &p);
  /* one kernel per conv: the first requantizes into the second's i8 input */
  ck_assert_int_eq(p.launches[1], 2);
  ck_assert_int_eq(p.gemms[1], 0);
}
END_TEST

/* Asymmetric activations: the input's zero point in the quantize fused
 * into the loads and in the conv's padding. */
START_TEST(fused_conv_chain_with_zero_point) {
  const char *text = "graph zc {\n"
                     "  %x = input {name=\"x\"} : f32[2, 3, 8, 8]\n"
                     "  %xr = relu %x : f32[2, 3, 8, 8]\n"
                     "  %xq = quantize %xr {scale=0.006, zero_point=-128} : i8[2, 3, 8, 8]\n"
                     "  %w = param {name=\"c.weight\"} : f32[16, 3, 3, 3]\n"
                     "  %wq = quantize %w {scale=0.004} : i8[16, 3, 3, 3]\n"
                     "  %acc = conv2d %xq, %wq {pad=[1, 1, 1, 1], zero_point=-128} : i32[2, 16, 8, 8]\n"
                     "  %y = dequantize %acc {scale=2.4e-05} : f32[2, 16, 8, 8]\n"
                     "  %q = quantize %y {scale=0.05, zero_point=3} : i8[2, 16, 8, 8]\n"
                     "  return %q as \"q\"\n"
                     "}\n";
  const Fill fills[] = {RANGE("x", -0.5, 1.0), RANGE("c.weight", -0.4, 0.4), END_FILLS};
  Plans p;
  check_both(text, fills, &p);
  ck_assert_int_eq(p.launches[1], 1);
}
END_TEST

START_TEST(fused_linear_chain) {
  const char *text = "graph lc {\n"
                     "  %x = input {name=\"x\"} : f32[4, 32]\n"
                     "  %w = param {name=\"fc.weight\"} : f32[24, 32]\n"
                     "  %b = param {name=\"fc.bias\"} : f32[24]\n"
                     "  %t = tanh %x : f32[4, 32]\n"
                     "  %xq = quantize %t {scale=0.008} : i8[4, 32]\n"
                     "  %wa = abs %w : f32[24, 32]\n"
                     "  %wm = reduce_max %wa {axes=[1], keepdims=1} : f32[24, 1]\n"
                     "  %c = const {value=127} : f32[]\n"
                     "  %ws = div %wm, %c : f32[24, 1]\n"
                     "  %wq = quantize %w, %ws : i8[24, 32]\n"
                     "  %acc = linear %xq, %wq : i32[4, 24]\n"
                     "  %wr = reshape %ws {shape=[24]} : f32[24]\n"
                     "  %xs = const {value=0.008} : f32[]\n"
                     "  %s = mul %wr, %xs : f32[24]\n"
                     "  %y = dequantize %acc, %s : f32[4, 24]\n"
                     "  %yb = add %y, %b : f32[4, 24]\n"
                     "  %r = relu %yb : f32[4, 24]\n"
                     "  %q = quantize %r {scale=0.01} : i8[4, 24]\n"
                     "  %bi = param {name=\"fc2.bias\"} : i32[24]\n"
                     "  %acc2 = linear %xq, %wq, %bi : i32[4, 24]\n"
                     "  %y2 = dequantize %acc2 {scale=0.001} : f32[4, 24]\n"
                     "  return %q as \"q\", %y as \"y\", %y2 as \"y2\"\n"
                     "}\n";
  const Fill fills[] = {RANGE("x", -2, 2), RANGE("fc.weight", -0.2, 0.2), RANGE("fc.bias", -0.3, 0.3), END_FILLS};
  Plans p;
  check_both(text, fills, &p);
  /* -O2: tanh + quantize; the two int8 products as one GEMM of batch 2
   * (cuBLAS: 32 features; codegen/gemm_batch.c: one A, one weight at
   * stride 0); the first's dequantize with the bias, relu and requantize
   * after it, the dequantize (an output) stored beside as a side output;
   * the second's dequantize (which adds its int32 bias where it reads) */
  ck_assert_int_eq(p.i8_gemms[1], 1);
  ck_assert_int_eq(p.launches[1], 3);
}
END_TEST

static Suite *int8_suite(void) {
  Suite *s = suite_create("int8");
  TCase *q = tcase_create("quantize");
  tcase_set_timeout(q, 120);
  tcase_add_test(q, quantize_per_tensor);
  tcase_add_test(q, quantize_per_channel);
  tcase_add_test(q, dequantize_i8_and_i32);
  tcase_add_test(q, quantize_saturates_rounds_half_even_and_zeroes_nan);
  tcase_add_test(q, zero_points);
  suite_add_tcase(s, q);
  TCase *p = tcase_create("products");
  tcase_set_timeout(p, 120);
  tcase_add_test(p, conv2d_3x3_pad1_stride2);
  tcase_add_test(p, conv2d_1x1);
  tcase_add_test(p, conv2d_grouped_and_depthwise);
  tcase_add_test(p, conv2d_zero_point);
  tcase_add_test(p, linear_int8);
  tcase_add_test(p, batched_matmul_int8);
  suite_add_tcase(s, p);
  TCase *f = tcase_create("fused");
  tcase_set_timeout(f, 120);
  tcase_add_test(f, fused_conv_chain_is_one_kernel);
  tcase_add_test(f, fused_two_conv_chain);
  tcase_add_test(f, fused_conv_chain_with_zero_point);
  tcase_add_test(f, fused_linear_chain);
  suite_add_tcase(s, f);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(int8_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
