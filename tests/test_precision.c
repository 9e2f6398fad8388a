/* Mixed precision (passes/precision.c and codegen's f16/bf16 kernels):
 * every example at --precision=f16 and bf16 runs its generated kernels on
 * emu and is compared with the f32 reference interpreter (1e-2 relative
 * to the output's scale for f16, 2e-2 for bf16) and with the interpreter
 * on the same low-precision graph (much tighter: that measures the
 * kernels, not the precision lost); no kernel only converts; every
 * kernel compiles with NVRTC for sm_80 and sm_90.  Then single ops in f16
 * and bf16 through codegen, unfused and fused, the language's
 * precision="f32" and the API's option.  DLCC_TEST_VERBOSE=1 prints every
 * figure (the examples' figures are printed always). */
#include "check_quiet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/codegen.h"
#include "config.h"
#include "dlcrt.h"
#include "frontend/ast.h"
#include "include/dlcc.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "tests/testutil.h"
#include "passes/pass.h"

#ifdef HAVE_CUDA
#include <nvrtc.h>
#endif

static const char *srcdir(void) {
  const char *s = getenv("top_srcdir");
  return s ? s : ".";
}

static uint64_t rng_state;
static double uniform(double lo, double hi) {
  uint64_t z = test_splitmix64(&rng_state);
  return lo + (hi - lo) * (double)(z >> 11) / 9007199254740992.0;
}

/* ---- graphs ---- */

typedef struct Example {
  const char *file;
  int n_defines;
  Define defines[5];
} Example;

static const Example examples[] = {
    {"mlp.dl", 1, {{"N", 3}}},
    {"lenet.dl", 1, {{"N", 2}}},
    {"lstm.dl", 5, {{"N", 2}, {"T", 5}, {"V", 300}, {"E", 16}, {"H", 24}}},
    {"transformer.dl", 3, {{"N", 2}, {"S", 7}, {"D", 64}}},
    {"resnet18.dl", 2, {{"N", 1}, {"HW", 32}}},
    {"resnet50.dl", 2, {{"N", 1}, {"HW", 32}}},
    {"mobilenetv2.dl", 2, {{"N", 1}, {"HW", 32}}},
};
enum { N_EXAMPLES = sizeof examples / sizeof examples[0] };

static const DType lows[] = {TY_F16, TY_BF16};

static Graph *optimize(Graph *g, DType precision, int level) {
  PassOptions po = {.opt_level = level, .precision = precision, .verify_each = true};
  ck_assert_msg(pass_run_pipeline(g, &po, NULL), "%s", diag_text(g->ctx));
  ck_assert_msg(ir_verify(g), "%s", diag_text(g->ctx));
  return g;
}

static Graph *lower_example(Ctx *c, const Example *ex, DType precision) {
  char path[512];
  snprintf(path, sizeof path, "%s/examples/%s", srcdir(), ex->file);
  const SrcFile *f = ctx_load_file(c, path);
  ck_assert_msg(f != NULL, "%s", diag_text(c));
  Program *p = fe_parse(c, f);
  ck_assert_msg(p != NULL, "%s", diag_text(c));
  LowerOptions lo = {.n_defines = ex->n_defines, .defines = ex->defines};
  Graph *g = fe_lower(c, p, &lo);
  ck_assert_msg(g && ir_verify(g), "%s", diag_text(c));
  return optimize(g, precision, 2);
}

static Graph *parse_ir(Ctx *c, const char *text) {
  const SrcFile *f = ctx_add_file(c, "test.ir", text, strlen(text));
  Graph *g = ir_parse(c, f);
  ck_assert_msg(g && ir_verify(g), "%s", diag_text(c));
  return g;
}

/* ---- data, the interpreter and emu ---- */

typedef struct Data {
  TensorMap inputs, params;
  const char *names[16];
  Tensor tensors[16];
} Data;

static int64_t index_bound(Graph *g, const Value *v) {
  int64_t bound = ir_index_bound(g, v);
  return bound ? bound : 3;
}

/* Params by ir_init_params (f32 in every graph here: the precision pass
 * keeps them), inputs U(lo, hi). */
static void make_data(Graph *g, uint64_t seed, double lo, double hi, Data *d) {
  memset(d, 0, sizeof *d);
  char err[512];
  ck_assert_msg(ir_init_params(g, seed, IR_INIT_RANDOM, &d->params, err, sizeof err), "%s", err);
  rng_state = seed * 7919 + 3;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_INPUT) continue;
    Tensor *t = &d->tensors[d->inputs.n];
    ck_assert(ir_tensor_alloc(t, &n->out[0].type));
    int64_t count = ir_type_numel(&t->type), bound = index_bound(g, &n->out[0]);
    for (int64_t i = 0; i < count; i++)
      ir_tensor_set(t, i, ir_dtype_is_float(t->type.dtype) ? uniform(lo, hi) : floor(uniform(0, (double)bound)));
    d->names[d->inputs.n++] = ir_attr_str(n, "name");
  }
  d->inputs.names = d->names;
  d->inputs.tensors = d->tensors;
}

static void free_data(Data *d) {
  ir_tensor_map_free(&d->params);
  for (int i = 0; i < d->inputs.n; i++) ir_tensor_free(&d->tensors[i]);
}

static Tensor *eval(Graph *g, const Data *d) {
  Tensor *out = calloc((size_t)g->n_outputs + 1, sizeof *out);
  char err[512];
  ck_assert_msg(ir_eval(g, &d->inputs, &d->params, out, err, sizeof err), "%s: %s", g->name, err);
  return out;
}

static void free_outputs(Tensor *t, int n) {
  for (int i = 0; i < n; i++) ir_tensor_free(&t[i]);
  free(t);
}

/* g's plan run on emu. */
static Tensor *run_emu(const CgResult *cg, const Data *d) {
  return test_run_emu(cg->plan, &d->params, &d->inputs);
}

/* Largest |a - b| over b's largest magnitude (as test_models). */
static double rel_error(const Tensor *a, const Tensor *b) {
  ck_assert(ir_type_eq(&a->type, &b->type));
  int64_t count = ir_type_numel(&a->type);
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < count; i++) {
    double y = ir_tensor_get(b, i);
    if (isfinite(y) && fabs(y) > scale) scale = fabs(y);
  }
  for (int64_t i = 0; i < count; i++) {
    double x = ir_tensor_get(a, i), y = ir_tensor_get(b, i);
    if (x == y || (isnan(x) && isnan(y))) continue;
    double e = fabs(x - y) / fmax(scale, 1e-6);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

static CgResult compile_opts(Graph *g, CgOptions o) {
  CgResult cg;
  ck_assert_msg(cg_compile_opts(g, &o, &cg), "codegen: %s", diag_text(g->ctx));
  return cg;
}

static CgResult compile(Graph *g) { return compile_opts(g, (CgOptions){0}); }

/* ---- NVRTC ---- */


static int gemms_of(const RtPlan *p, DType dt) {
  int n = 0;
  for (uint32_t i = 0; i < p->n_steps; i++) n += p->steps[i].kind == RT_STEP_GEMM && p->steps[i].gemm.dtype == (uint32_t)dt;
  return n;
}

/* ---- every example ---- */

/* Measured (tests/test_precision.log): emu against the f32 reference at
 * most 1.0e-3 in f16 and 7.3e-3 in bf16 (the transformer); against the
 * interpreter on the same low-precision graph at most 9.3e-4 and 6.7e-3.
 * That is not much tighter: the interpreter rounds linear's x W + b once
 * where the kernels round the GEMM's result and then the bias added to
 * it, and sums in double where kernels sum in f32, so a value here and
 * there differs by one unit in the last place, and such a difference
 * travels through the layers as far as the rounding itself does.  The
 * kernels alone are held to 4 units in the last place by the single-op
 * tests below. */
enum { TIGHT_F16_X1E4 = 20, TIGHT_BF16_X1E4 = 100 };

/* _i past the examples' 2 * N_EXAMPLES: the LSTM again with its
 * recurrent layers a step kernel per timestep (--no-persistent-rnn). */
START_TEST(example_in_low_precision_on_emu) {
  bool steps = _i >= 2 * N_EXAMPLES;
  const Example *ex = steps ? &examples[2] : &examples[_i / 2];
  DType low = lows[_i % 2];
  ck_assert(!steps || !strcmp(ex->file, "lstm.dl"));
  Ctx c32, clo;
  ctx_init(&c32);
  ctx_init(&clo);
  Graph *g32 = lower_example(&c32, ex, TY_F32), *glo = lower_example(&clo, ex, low);
  /* The signature does not change. */
  ck_assert_int_eq(glo->n_outputs, g32->n_outputs);
  for (int i = 0; i < g32->n_outputs; i++)
    ck_assert(ir_type_eq(&glo->outputs[i]->type, &g32->outputs[i]->type));
  CastKernels casts;
  pass_count_cast_kernels(glo, &casts);
  ck_assert_msg(casts.standalone == 0, "%s: %d kernels only convert", ex->file, casts.standalone);
  /* Only a GEMM operand that nothing could convert on the way: the MLP's
   * and the transformer's input, the LSTM's sequence for its decoder. */
  bool raw_operand = strstr(ex->file, "mlp") || strstr(ex->file, "transformer") || strstr(ex->file, "lstm");
  ck_assert_int_eq(casts.for_products, raw_operand);
  Data d;
  make_data(g32, 7, -1, 1, &d);
  Tensor *want = eval(g32, &d), *want_lo = eval(glo, &d);
  CgResult cg = compile_opts(glo, (CgOptions){.no_persistent_rnn = steps});
  Tensor *got = run_emu(&cg, &d);
  double loose = low == TY_F16 ? 1e-2 : 2e-2, tight = (low == TY_F16 ? TIGHT_F16_X1E4 : TIGHT_BF16_X1E4) * 1e-4;
  for (int i = 0; i < g32->n_outputs; i++) {
    double e = rel_error(&got[i], &want[i]), k = rel_error(&got[i], &want_lo[i]);
    double lost = rel_error(&want_lo[i], &want[i]);
    printf("%-15s %-4s output %d: emu vs f32 reference %.3g, vs %s reference %.3g (the reference's own "
           "loss %.3g); %d %s GEMMs, %d weight casts at load\n",
           ex->file, ir_dtype_name(low), i, e, ir_dtype_name(low), k, lost, gemms_of(cg.plan, low),
           ir_dtype_name(low), casts.over_weights);
    ck_assert_msg(e <= loose, "%s %s: %.3g off the f32 reference", ex->file, ir_dtype_name(low), e);
    ck_assert_msg(k <= tight, "%s %s: %.3g off the %s reference", ex->file, ir_dtype_name(low), k,
                  ir_dtype_name(low));
  }
  /* Matrix products run in the low type, all but the recurrent layer's
   * own (its state is carried in f32). */
  ck_assert_msg(gemms_of(cg.plan, low) > 0, "%s: no %s GEMM", ex->file, ir_dtype_name(low));
  if (strcmp(ex->file, "lstm.dl") != 0)
    ck_assert_msg(gemms_of(cg.plan, TY_F32) == 0, "%s: %d f32 GEMMs", ex->file, gemms_of(cg.plan, TY_F32));
  free_outputs(want, g32->n_outputs);
  free_outputs(want_lo, glo->n_outputs);
  free_outputs(got, glo->n_outputs);
  free_data(&d);
  ctx_free(&c32);
  ctx_free(&clo);
}
END_TEST

/* The image CNNs take NVRTC a minute and a half for both archs and
 * types (33 kernels in ResNet-50); their kinds of kernel (implicit-GEMM
 * convolutions with epilogues, depthwise convolutions, pools) are
 * compiled below with the single ops and in LeNet, and all of them with
 * DLCC_TEST_NVRTC_ALL=1 (make check-precision-nvrtc). */
static bool nvrtc_all(void) {
  const char *e = getenv("DLCC_TEST_NVRTC_ALL");
  return e && *e && strcmp(e, "0") != 0;
}

START_TEST(example_kernels_compile_for_sm80_and_sm90) {
  const Example *ex = &examples[_i / 2];
  DType low = lows[_i % 2];
  if (!nvrtc_all() && (strstr(ex->file, "resnet") || strstr(ex->file, "mobilenet"))) return;
  Ctx c;
  ctx_init(&c);
  CgResult cg = compile(lower_example(&c, ex, low));
  ck_assert_ptr_nonnull(strstr(cg.source, low == TY_F16 ? "#include <cuda_fp16.h>" : "#include <cuda_bf16.h>"));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  test_nvrtc(cg.source, "sm_80");
  test_nvrtc(cg.source, "sm_90");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (getenv("DLCC_TEST_VERBOSE"))
    fprintf(stderr, "%s %s: NVRTC sm_80 + sm_90 in %.1f s\n", ex->file, ir_dtype_name(low),
            (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  ctx_free(&c);
}
END_TEST

/* ---- single ops in f16 and bf16 through codegen ---- */

/* text with "T" replaced by the dtype's name. */
static char *with_dtype(const char *text, DType dt) {
  const char *name = ir_dtype_name(dt);
  size_t n = 0;
  for (const char *p = text; *p; p++) n += *p == '@' ? strlen(name) : 1;
  char *s = malloc(n + 1), *q = s;
  for (const char *p = text; *p; p++)
    if (*p == '@')
      q = stpcpy(q, name);
    else
      *q++ = *p;
  *q = 0;
  return s;
}

/* The graph (@ = f16, then bf16) unfused (-O0) and fused (-O2) on emu
 * against the interpreter on the same graph: each op rounds once, as
 * eval.c does, so they agree to a few units of the type's last place;
 * NVRTC compiles it for sm_80 and sm_90. */
static void check_ops(const char *text, double lo, double hi) {
  for (int t = 0; t < 2; t++)
    for (int level = 0; level <= 2; level += 2) {
      Ctx c;
      ctx_init(&c);
      char *src = with_dtype(text, lows[t]);
      Graph *g = optimize(parse_ir(&c, src), TY_F32, level);
      Data d;
      make_data(g, 5, lo, hi, &d);
      Tensor *want = eval(g, &d);
      CgResult cg = compile(g);
      test_nvrtc(cg.source, "sm_80");
      test_nvrtc(cg.source, "sm_90");
      Tensor *got = run_emu(&cg, &d);
      /* 4 units in the last place of the value's scale. */
      double tol = lows[t] == TY_F16 ? 4 * 0x1p-11 : 4 * 0x1p-8;
      for (int i = 0; i < g->n_outputs; i++) {
        double e = rel_error(&got[i], &want[i]);
        if (getenv("DLCC_TEST_VERBOSE"))
          fprintf(stderr, "%s -O%d output %s: %.3g\n", ir_dtype_name(lows[t]), level, g->output_names[i], e);
        ck_assert_msg(e <= tol, "%s -O%d: output '%s' is %.3g off the interpreter:\n%s", ir_dtype_name(lows[t]),
                      level, g->output_names[i], e, src);
      }
      free_outputs(want, g->n_outputs);
      free_outputs(got, g->n_outputs);
      free_data(&d);
      free(src);
      ctx_free(&c);
    }
}

START_TEST(elementwise_ops) {
  check_ops("graph ew {\n"
            "  %x = input {name=\"x\"} : @[3, 700]\n"
            "  %y = input {name=\"y\"} : @[700]\n"
            "  %a = add %x, %y : @[3, 700]\n"
            "  %b = mul %a, %x : @[3, 700]\n"
            "  %c = tanh %b : @[3, 700]\n"
            "  %s = sigmoid %x : @[3, 700]\n"
            "  %g = gelu %s {approximate=\"tanh\"} : @[3, 700]\n"
            "  %h = const {value=0.1} : @[]\n"
            "  %i = sub %g, %h : @[3, 700]\n"
            "  %j = maximum %i, %c : @[3, 700]\n"
            "  %k = clip %j {min=-0.25, max=0.5} : @[3, 700]\n"
            "  %e = exp %x : @[3, 700]\n"
            "  %f = cast %k {to=f32} : f32[3, 700]\n"
            "  %m = cast %f {to=@} : @[3, 700]\n"
            "  return %k as \"k\", %e as \"e\", %f as \"f\", %m as \"m\"\n"
            "}\n",
            -2, 2);
}
END_TEST

START_TEST(reductions_and_normalizations) {
  check_ops("graph red {\n"
            "  %x = input {name=\"x\"} : @[4, 6, 33]\n"
            "  %s = reduce_sum %x {axes=[2]} : @[4, 6]\n"
            "  %m = reduce_mean %x {axes=[0, 2], keepdims=1} : @[1, 6, 1]\n"
            "  %mx = reduce_max %x {axes=[1]} : @[4, 33]\n"
            "  %a = argmax %x {axis=2} : i64[4, 6]\n"
            "  %sm = softmax %x {axis=2} : @[4, 6, 33]\n"
            "  %ls = log_softmax %x {axis=1} : @[4, 6, 33]\n"
            "  %w = param {name=\"ln.weight\"} : @[33]\n"
            "  %b = param {name=\"ln.bias\"} : @[33]\n"
            "  %ln = layernorm %x, %w, %b {axis=2} : @[4, 6, 33]\n"
            "  %r = relu %ln : @[4, 6, 33]\n"
            "  return %s as \"s\", %m as \"m\", %mx as \"mx\", %a as \"a\", %sm as \"sm\", %ls as \"ls\", %r as \"r\"\n"
            "}\n",
            -3, 3);
}
END_TEST

static const char matrix_text[] = "graph mm {\n"
                                  "  %a = input {name=\"a\"} : @[2, 3, 5, 16]\n"
                                  "  %b = input {name=\"b\"} : @[3, 16, 7]\n"
                                  "  %c = matmul %a, %b : @[2, 3, 5, 7]\n"
                                  "  %x = input {name=\"x\"} : @[6, 16]\n"
                                  "  %w = param {name=\"fc.weight\"} : @[9, 16]\n"
                                  "  %bb = param {name=\"fc.bias\"} : @[9]\n"
                                  "  %y = linear %x, %w, %bb : @[6, 9]\n"
                                  "  %z = relu %y : @[6, 9]\n"
                                  "  %w2 = param {name=\"fc2.weight\"} : @[9, 16]\n"
                                  "  %b2 = param {name=\"fc2.bias\"} : @[9]\n"
                                  "  %g = linear %x, %w2, %b2 : @[6, 9]\n"
                                  "  %h = gelu %g {approximate=\"tanh\"} : @[6, 9]\n"
                                  "  return %c as \"c\", %z as \"z\", %h as \"h\"\n"
                                  "}\n";

START_TEST(matrix_products) { check_ops(matrix_text, -1, 1); }
END_TEST

/* At -O2 linear + bias + relu, and + gelu(tanh) in the half types, are a
 * GEMM each with cuBLASLt's epilogue (emu's is the one matrix_products
 * measures); no kernel. */
START_TEST(linear_activations_in_the_epilogue) {
  for (int t = 0; t < 2; t++) {
    Ctx c;
    ctx_init(&c);
    char *src = with_dtype(matrix_text, lows[t]);
    CgResult cg = compile(optimize(parse_ir(&c, src), TY_F32, 2));
    uint32_t epilogues = 0;
    for (uint32_t i = 0; i < cg.plan->n_steps; i++) {
      ck_assert_uint_eq(cg.plan->steps[i].kind, RT_STEP_GEMM);
      epilogues |= 1u << cg.plan->steps[i].gemm.epilogue;
    }
    ck_assert_uint_eq(epilogues, 1u << RT_EPILOGUE_NONE | 1u << RT_EPILOGUE_RELU_BIAS | 1u << RT_EPILOGUE_GELU_BIAS);
    free(src);
    ctx_free(&c);
  }
}
END_TEST

/* residual + (linear with or without its bias, or matmul plus a bias):
 * at -O2 one GEMM each that reads the residual as C (beta 1), the sum
 * rounded once, where the interpreter rounds the product and then the
 * add: within check_ops's 4 units in the last place. */
static const char residual_text[] = "graph res {\n"
                                    "  %x = input {name=\"x\"} : @[6, 16]\n"
                                    "  %r = input {name=\"r\"} : @[6, 9]\n"
                                    "  %w = param {name=\"fc.weight\"} : @[9, 16]\n"
                                    "  %b = param {name=\"fc.bias\"} : @[9]\n"
                                    "  %y = linear %x, %w, %b : @[6, 9]\n"
                                    "  %z = add %r, %y : @[6, 9]\n"
                                    "  %w2 = param {name=\"fc2.weight\"} : @[9, 9]\n"
                                    "  %g = linear %z, %w2 : @[6, 9]\n"
                                    "  %h = add %g, %z : @[6, 9]\n"
                                    "  %v = param {name=\"m.weight\"} : @[9, 9]\n"
                                    "  %m = matmul %h, %v : @[6, 9]\n"
                                    "  %mb = add %m, %b : @[6, 9]\n"
                                    "  %o = add %mb, %r : @[6, 9]\n"
                                    "  return %z as \"z\", %h as \"h\", %o as \"o\"\n"
                                    "}\n";

START_TEST(residual_in_the_gemm) {
  check_ops(residual_text, -1, 1);
  for (int t = 0; t < 2; t++) {
    Ctx c;
    ctx_init(&c);
    char *src = with_dtype(residual_text, lows[t]);
    CgResult cg = compile(optimize(parse_ir(&c, src), TY_F32, 2));
    ck_assert_int_eq(gemms_of(cg.plan, lows[t]), 3);
    for (uint32_t i = 0; i < cg.plan->n_steps; i++) ck_assert(cg.plan->steps[i].gemm.beta == 1.0f);
    free(src);
    ctx_free(&c);
  }
}
END_TEST

START_TEST(convolutions_and_pools) {
  check_ops("graph conv {\n"
            "  %x = input {name=\"x\"} : @[2, 3, 11, 11]\n"
            "  %w = param {name=\"c.weight\"} : @[8, 3, 3, 3]\n"
            "  %b = param {name=\"c.bias\"} : @[8]\n"
            "  %c = conv2d %x, %w, %b {stride=[2, 2], pad=[1, 1, 1, 1]} : @[2, 8, 6, 6]\n"
            "  %g = param {name=\"bn.weight\"} : @[8]\n"
            "  %be = param {name=\"bn.bias\"} : @[8]\n"
            "  %mu = param {name=\"bn.running_mean\", init=\"zeros\"} : @[8]\n"
            "  %va = param {name=\"bn.running_var\", init=\"ones\"} : @[8]\n"
            "  %n = batchnorm %c, %g, %be, %mu, %va : @[2, 8, 6, 6]\n"
            "  %r = relu %n : @[2, 8, 6, 6]\n"
            "  %dw = param {name=\"d.weight\"} : @[8, 1, 3, 3]\n"
            "  %d = conv2d %r, %dw {pad=[1, 1, 1, 1], groups=8} : @[2, 8, 6, 6]\n"
            "  %mp = maxpool2d %d {kernel=[2, 2], stride=[2, 2]} : @[2, 8, 3, 3]\n"
            "  %ap = avgpool2d %r {kernel=[3, 3], stride=[2, 2], pad=[1, 1, 1, 1]} : @[2, 8, 3, 3]\n"
            "  %gp = global_avgpool %r : @[2, 8, 1, 1]\n"
            "  return %mp as \"mp\", %ap as \"ap\", %gp as \"gp\"\n"
            "}\n",
            -1, 1);
}
END_TEST

static Node *find_op(Graph *g, OpKind op) {
  for (Node *n = g->first; n; n = n->next)
    if (n->op == op) return n;
  return NULL;
}

static Graph *lower_text(Ctx *c, const char *text) {
  const SrcFile *f = ctx_add_file(c, "m.dl", text, strlen(text));
  Program *p = fe_parse(c, f);
  ck_assert_msg(p != NULL, "%s", diag_text(c));
  Graph *g = fe_lower(c, p, &(LowerOptions){0});
  ck_assert_msg(g && ir_verify(g), "%s", diag_text(c));
  return g;
}

/* The source of the kernel named name: from its __global__ line to the
 * emu wrapper after it. */
static char *kernel_text(const char *source, const char *name) {
  char head[256];
  snprintf(head, sizeof head, "__global__ void %s(", name);
  const char *p = strstr(source, head);
  ck_assert_msg(p != NULL, "no kernel %s", name);
  const char *end = strstr(p, "#ifdef DLCC_EMU");
  return strndup(p, end ? (size_t)(end - p) : strlen(p));
}

/* -O2 folds a batch norm into its convolution before precision runs:
 * the f16 convolution's kernel neither divides nor takes a square root
 * on every output (once, in a run after precision, it normalized each one
 * in f32: a division, the CALL.REL slow path in SASS); W' and b' are
 * computed in f32 by the init steps, then cast.  Still the f32 model's
 * numbers at the type's tolerance, and the same graph's on the interpreter
 * to a few units in the last place. */
START_TEST(bn_folds_before_precision) {
  static const char *text = "model cb(x: f32[2, 8, 9, 9]) -> f32[2, 16, 9, 9] {\n"
                            "  return relu(batchnorm(conv2d(x, 16, kernel=3, pad=1) as conv) as bn)\n"
                            "}\n";
  for (int t = 0; t < 2; t++) {
    Ctx c32, clo;
    ctx_init(&c32);
    ctx_init(&clo);
    Graph *g32 = optimize(lower_text(&c32, text), TY_F32, 2), *glo = optimize(lower_text(&clo, text), lows[t], 2);
    ck_assert_ptr_null(find_op(glo, OP_BATCHNORM));
    CgResult cg = compile(glo);
    ck_assert_uint_gt(cg.plan->n_init_steps, 0);
    int convs = 0;
    for (uint32_t i = 0; i < cg.plan->n_steps; i++) {
      const RtStep *st = &cg.plan->steps[i];
      if (st->kind != RT_STEP_LAUNCH) continue;
      const char *name = cg.plan->kernels[st->launch.kernel].name;
      char *body = kernel_text(cg.source, name);
      ck_assert_msg(!strstr(body, "sqrtf") && !strstr(body, "rsqrt"), "%s normalizes in a run:\n%s", name, body);
      if (strstr(name, "conv2d")) {
        convs++;
        ck_assert_msg(strstr(body, t == 0 ? "__half" : "__nv_bfloat16"), "%s is not in the low type", name);
      }
      free(body);
    }
    ck_assert_int_eq(convs, 1);
    Data d;
    make_data(g32, 11, -1, 1, &d);
    Tensor *want = eval(g32, &d), *want_lo = eval(glo, &d), *got = run_emu(&cg, &d);
    double e = rel_error(&got[0], &want[0]), k = rel_error(&got[0], &want_lo[0]);
    ck_assert_msg(e <= (t == 0 ? 1e-2 : 2e-2), "%s: %.3g off the f32 reference", ir_dtype_name(lows[t]), e);
    ck_assert_msg(k <= (t == 0 ? 4 * 0x1p-11 : 4 * 0x1p-8), "%s: %.3g off its own graph", ir_dtype_name(lows[t]), k);
    free_outputs(want, 1);
    free_outputs(want_lo, 1);
    free_outputs(got, 1);
    free_data(&d);
    ctx_free(&c32);
    ctx_free(&clo);
  }
}
END_TEST

START_TEST(data_movement) {
  check_ops("graph mv {\n"
            "  %x = input {name=\"x\"} : @[2, 3, 4]\n"
            "  %t = transpose %x {perm=[2, 0, 1]} : @[4, 2, 3]\n"
            "  %s = slice %x {starts=[0, 1, 0], ends=[2, 3, 4], steps=[1, 1, 2]} : @[2, 2, 2]\n"
            "  %p = pad %x {pads=[0, 1, 0, 0, 0, 2], value=0.5} : @[2, 4, 6]\n"
            "  %c = concat %x, %x {axis=1} : @[2, 6, 4]\n"
            "  %e = expand %s {shape=[3, 2, 2, 2]} : @[3, 2, 2, 2]\n"
            "  %r = reshape %t {shape=[8, 3]} : @[8, 3]\n"
            "  %i = input {name=\"i\"} : i64[5]\n"
            "  %w = param {name=\"emb.weight\"} : @[3, 4]\n"
            "  %g = gather %w, %i : @[5, 4]\n"
            "  return %t as \"t\", %s as \"s\", %p as \"p\", %c as \"c\", %e as \"e\", %r as \"r\", %g as \"g\"\n"
            "}\n",
            -2, 2);
}
END_TEST

/* A long contiguous map: eight 16-bit lanes per 16-byte load and store. */
START_TEST(half_maps_are_vectorized) {
  for (int t = 0; t < 2; t++) {
    Ctx c;
    ctx_init(&c);
    char *src = with_dtype("graph v {\n"
                           "  %x = input {name=\"x\"} : @[4099]\n"
                           "  %y = input {name=\"y\"} : @[4099]\n"
                           "  %a = add %x, %y : @[4099]\n"
                           "  %r = relu %a : @[4099]\n"
                           "  return %r as \"r\"\n"
                           "}\n",
                           lows[t]);
    Graph *g = optimize(parse_ir(&c, src), TY_F32, 2);
    CgResult cg = compile(g);
    ck_assert_ptr_nonnull(strstr(cg.source, "uint4 v"));
    ck_assert_ptr_nonnull(strstr(cg.source, "*(uint4 *)&out["));
    ck_assert_ptr_nonnull(strstr(cg.source, lows[t] == TY_F16 ? "dl_h_pack(" : "dl_b_pack("));
    test_nvrtc(cg.source, "sm_80");
    Data d;
    make_data(g, 3, -4, 4, &d);
    Tensor *want = eval(g, &d), *got = run_emu(&cg, &d);
    ck_assert_double_eq(rel_error(&got[0], &want[0]), 0); /* add then relu, each rounded once: exact */
    free_outputs(want, 1);
    free_outputs(got, 1);
    free_data(&d);
    free(src);
    ctx_free(&c);
  }
}
END_TEST

/* ---- the pass itself ---- */

START_TEST(precision_f32_override_in_the_language) {
  Ctx c;
  ctx_init(&c);
  Graph *g = lower_text(&c, "model m(x: f32[4, 8]) -> f32[4, 16] {\n"
                            "  h = linear(tanh(x), 16, precision=\"f32\") as fc\n"
                            "  return linear(h, 16) as out + sigmoid(h, precision=\"f32\")\n"
                            "}\n");
  ck_assert(find_op(g, OP_LINEAR)->keep_f32);
  ck_assert(!find_op(g, OP_TANH)->keep_f32); /* the argument is not the call */
  ck_assert(find_op(g, OP_SIGMOID)->keep_f32);
  optimize(g, TY_F16, 0);
  Node *fc = find_op(g, OP_LINEAR), *sg = find_op(g, OP_SIGMOID), *th = find_op(g, OP_TANH);
  ck_assert_int_eq(fc->out[0].type.dtype, TY_F32);
  ck_assert_int_eq(fc->in[1]->def->op, OP_PARAM); /* no cast: the weight is used in f32 */
  ck_assert_int_eq(sg->out[0].type.dtype, TY_F32);
  ck_assert_int_eq(th->out[0].type.dtype, TY_F16);
  ck_assert_int_eq(g->outputs[0]->type.dtype, TY_F32);
  /* The mark prints as #f32 and reads back. */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ir_print(f, g);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(text, "#f32"));
  Ctx c2;
  ctx_init(&c2);
  Graph *back = parse_ir(&c2, text);
  ck_assert(find_op(back, OP_SIGMOID)->keep_f32);
  free(text);
  ctx_free(&c2);
  ctx_free(&c);
}
END_TEST

/* A data-parallel all-reduce (a gradient's, or --sync-bn's statistics)
 * runs in f32 whatever the precision: the communicators take f32. */
START_TEST(allreduce_mean_stays_f32) {
  Ctx c;
  ctx_init(&c);
  Graph *g = parse_ir(&c, "graph s {\n  %0 = input {name=\"x\"} : f32[4, 8]\n"
                          "  %1 = tanh %0 : f32[4, 8]\n  %2 = allreduce_mean %1 {bucket=0} : f32[4, 8]\n"
                          "  %3 = tanh %2 : f32[4, 8]\n  return %3 as \"y\"\n}\n");
  optimize(g, TY_F16, 0);
  ck_assert_int_eq(find_op(g, OP_ALLREDUCE_MEAN)->out[0].type.dtype, TY_F32);
  ck_assert_int_eq(find_op(g, OP_TANH)->out[0].type.dtype, TY_F16);
  CgResult cg = compile(g);
  ck_assert(cg.plan != NULL);
  ctx_free(&c);
}
END_TEST

START_TEST(precision_override_rejects_other_values) {
  Ctx c;
  ctx_init(&c);
  const char *text = "model m(x: f32[4]) -> f32[4] {\n  return relu(x, precision=\"f16\")\n}\n";
  const SrcFile *f = ctx_add_file(&c, "m.dl", text, strlen(text));
  Program *p = fe_parse(&c, f);
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_null(fe_lower(&c, p, &(LowerOptions){0}));
  ck_assert_msg(strstr(diag_text(&c), "relu: precision must be \"f32\""), "%s", diag_text(&c));
  ctx_free(&c);
}
END_TEST

START_TEST(api_precision_option) {
  const char *text = "model m(x: f32[2, 300]) -> f32[2, 300] {\n  return softmax(gelu(x) * 3.0, axis=-1)\n}\n";
  const char *names[] = {"f16", "bf16", "f32", NULL};
  float x[600];
  for (int i = 0; i < 600; i++) x[i] = (float)sin(i * 0.37);
  const float *ref = NULL;
  float want[600];
  for (int k = 3; k >= 0; k--) {
    dlc_options opt = {.backend = k == 3 ? "ref" : "emu", .precision = k == 3 ? NULL : names[k]};
    dlc_model *m = NULL;
    ck_assert_msg(dlc_compile_string("m.dl", text, &opt, &m) == DLC_OK, "%s", dlc_error(m));
    ck_assert_int_eq(dlc_set_input(m, "x", x, sizeof x), DLC_OK);
    ck_assert_msg(dlc_run(m) == DLC_OK, "%s", dlc_error(m));
    const void *y;
    size_t n;
    ck_assert_int_eq(dlc_get_output(m, 0, &y, &n), DLC_OK);
    ck_assert_uint_eq(n, sizeof want);
    if (k == 3) {
      memcpy(want, y, sizeof want);
      ref = want;
    } else {
      double worst = 0, scale = 0;
      for (int i = 0; i < 600; i++) scale = fmax(scale, fabs(ref[i]));
      for (int i = 0; i < 600; i++) worst = fmax(worst, fabs(((const float *)y)[i] - ref[i]) / scale);
      ck_assert_msg(worst <= (k == 1 ? 2e-2 : k == 0 ? 1e-2 : 1e-5), "%s: %g", names[k] ? names[k] : "f32", worst);
    }
    dlc_free(m);
  }
  dlc_options bad = {.precision = "f8", .backend = "ref"};
  dlc_model *m = NULL;
  ck_assert_int_eq(dlc_compile_string("m.dl", text, &bad, &m), DLC_ERR_COMPILE);
  ck_assert_ptr_nonnull(strstr(dlc_error(m), "unknown precision 'f8' (expected f32, f16 or bf16)"));
  dlc_free(m);
}
END_TEST

static Suite *precision_suite(void) {
  Suite *s = suite_create("precision");
  TCase *tc = tcase_create("examples");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, example_in_low_precision_on_emu, 0, 2 * N_EXAMPLES + 2);
  tcase_add_loop_test(tc, example_kernels_compile_for_sm80_and_sm90, 0, 2 * N_EXAMPLES);
  suite_add_tcase(s, tc);
  tc = tcase_create("ops");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, elementwise_ops);
  tcase_add_test(tc, reductions_and_normalizations);
  tcase_add_test(tc, matrix_products);
  tcase_add_test(tc, linear_activations_in_the_epilogue);
  tcase_add_test(tc, residual_in_the_gemm);
  tcase_add_test(tc, convolutions_and_pools);
  tcase_add_test(tc, bn_folds_before_precision);
  tcase_add_test(tc, data_movement);
  tcase_add_test(tc, half_maps_are_vectorized);
  suite_add_tcase(s, tc);
  tc = tcase_create("pass");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, precision_f32_override_in_the_language);
  tcase_add_test(tc, allreduce_mean_stays_f32);
  tcase_add_test(tc, precision_override_rejects_other_values);
  tcase_add_test(tc, api_precision_option);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(precision_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
