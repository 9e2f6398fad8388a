/* The tensor-core GEMM kernels (codegen/tc_gemm.c, docs/tensorcores.md):
 * convolutions in fusion groups on mma.sync, run on emu (whose mma,
 * ldmatrix and cp.async come from the PTX ISA, not from the generator)
 * against ir_eval of the same graph on random inputs: f16 and bf16 to a
 * few units in their last place, int8 exactly, tf32 within the measured
 * bound, over tile edges (sizes that are no multiple of a tile, K no
 * multiple of a chunk), split-K on and off, stride, dilation, asymmetric
 * padding, 3-d, grouped, prologue and epilogue members; which operand
 * arrives by cp.async; what falls back to the FMA and direct kernels;
 * the int8 GEMM kernel; the tile heuristic; and every source through
 * NVRTC for sm_90. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/kernel.h"
#include "config.h"
#include "ir/eval.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "tests/irjob.h"
#include "tests/testutil.h"

/* ---- graphs ---- */

typedef struct Conv {
  const char *what;
  const char *dt; /* the operands' type: f16, bf16, i8, f32 */
  int nsp;
  int64_t n, c, co, groups, in[3], k[3], stride[3], pad[6], dil[3];
  bool bias;
  const char *pro; /* an elementwise op on x inside the group, or NULL */
  bool w_cast;     /* w an f32 input cast inside the group: computed on load */
  bool relu;       /* a relu after the conv */
  int zero_point;  /* int8 */
} Conv;

static int64_t out_dim(const Conv *p, int d) {
  return (p->in[d] + p->pad[d] + p->pad[p->nsp + d] - p->dil[d] * (p->k[d] - 1) - 1) / p->stride[d] + 1;
}

static char *dims(char *buf, const char *dt, int64_t a, int64_t b, int nsp, const int64_t *sp) {
  char *s = buf + sprintf(buf, "%s[%" PRId64 ", %" PRId64, dt, a, b);
  for (int d = 0; d < nsp; d++) s += sprintf(s, ", %" PRId64, sp[d]);
  sprintf(s, "]");
  return buf;
}

static char *ints(char *buf, const int64_t *v, int n) {
  char *s = buf + sprintf(buf, "[");
  for (int i = 0; i < n; i++) s += sprintf(s, "%s%" PRId64, i ? ", " : "", v[i]);
  sprintf(s, "]");
  return buf;
}

static char *conv_text(const Conv *p) {
  bool i8 = strcmp(p->dt, "i8") == 0;
  const char *ot = i8 ? "i32" : p->dt;
  char xs[96], ws[96], wf[96], ys[96], st[48], pd[64], dl[48];
  int64_t od[3];
  for (int d = 0; d < p->nsp; d++) od[d] = out_dim(p, d);
  dims(xs, p->dt, p->n, p->c, p->nsp, p->in);
  dims(ws, p->dt, p->co, p->c / p->groups, p->nsp, p->k);
  dims(wf, "f32", p->co, p->c / p->groups, p->nsp, p->k);
  dims(ys, ot, p->n, p->co, p->nsp, od);
  char *text = malloc(4096);
  int len = sprintf(text, "graph conv {\n  %%x = input {name=\"x\"} : %s\n", xs);
  if (p->w_cast)
    len += sprintf(text + len, "  %%wf = input {name=\"w\"} : %s\n  %%w = cast %%wf {to=%s} : %s\n", wf, p->dt, ws);
  else
    len += sprintf(text + len, "  %%w = input {name=\"w\"} : %s\n", ws);
  if (p->bias) len += sprintf(text + len, "  %%b = input {name=\"b\"} : %s[%" PRId64 "]\n", ot, p->co);
  if (p->pro) len += sprintf(text + len, "  %%xp = %s %%x : %s\n", p->pro, xs);
  char zp[32] = "";
  if (p->zero_point) snprintf(zp, sizeof zp, ", zero_point=%d", p->zero_point);
  len += sprintf(text + len, "  %%y = conv%dd %%%s, %%w%s {stride=%s, pad=%s, dilation=%s, groups=%" PRId64 "%s} : %s\n",
                 p->nsp, p->pro ? "xp" : "x", p->bias ? ", %b" : "", ints(st, p->stride, p->nsp),
                 ints(pd, p->pad, 2 * p->nsp), ints(dl, p->dil, p->nsp), p->groups, zp, ys);
  if (p->relu) len += sprintf(text + len, "  %%r = relu %%y : %s\n", ys);
  sprintf(text + len, "  return %%%s as \"y\"\n}\n", p->relu ? "r" : "y");
  return text;
}

/* ---- run ---- */

typedef struct Feeds {
  TensorMap inputs;
  const char *names[8];
  Tensor t[8];
} Feeds;

/* Floats U(-1, 1) (rounded to their type), i8 and i32 uniform over
 * [-100, 100]: int8 sums stay far from wrapping. */
static void random_inputs(Graph *g, uint64_t seed, Feeds *d) {
  memset(d, 0, sizeof *d);
  uint64_t s = seed;
  for (Node *n = g->first; n; n = n->next) {
    if (n->op != OP_INPUT) continue;
    Tensor *t = &d->t[d->inputs.n];
    ck_assert(ir_tensor_alloc(t, &n->out[0].type));
    bool fl = ir_dtype_is_float(t->type.dtype);
    for (int64_t i = 0, count = ir_type_numel(&t->type); i < count; i++) {
      double u = (double)(test_splitmix64(&s) >> 11) / 9007199254740992.0;
      ir_tensor_set(t, i, fl ? 2 * u - 1 : floor(201 * u) - 100);
    }
    d->names[d->inputs.n++] = ir_attr_str(n, "name");
  }
  d->inputs.names = d->names;
  d->inputs.tensors = d->t;
}


/* Largest |got - want| over want's largest magnitude. */
static double rel_error(const Tensor *got, const Tensor *want) {
  int64_t count = ir_type_numel(&want->type);
  double scale = 1e-30, worst = 0;
  for (int64_t i = 0; i < count; i++) scale = fmax(scale, fabs(ir_tensor_get(want, i)));
  for (int64_t i = 0; i < count; i++) {
    double e = fabs(ir_tensor_get(got, i) - ir_tensor_get(want, i)) / scale;
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

/* The first step whose label has s, or NULL. */
static const char *step_with(const RtPlan *p, const char *s) {
  for (uint32_t i = 0; i < p->n_steps; i++)
    if (strstr(p->steps[i].label, s)) return p->steps[i].label;
  return NULL;
}

/* emu against ir_eval: the largest error over the output's scale (int8:
 * 0 when every byte agrees, else 1). */
static double run_against_eval(Job *j, uint64_t seed) {
  Feeds d;
  random_inputs(j->g, seed, &d);
  Tensor *want = calloc(2, sizeof *want);
  char err[512];
  ck_assert_msg(ir_eval(j->g, &d.inputs, NULL, want, err, sizeof err), "ir_eval: %s", err);
  Tensor *got = test_run_emu(j->cg.plan, NULL, &d.inputs);
  ck_assert(ir_type_eq(&got[0].type, &want[0].type));
  double e = ir_dtype_is_float(want[0].type.dtype)
                 ? rel_error(&got[0], &want[0])
                 : memcmp(got[0].data, want[0].data, (size_t)ir_type_numel(&want->type) * ir_dtype_size(want->type.dtype)) != 0;
  free_outputs(want, 1);
  free_outputs(got, 1);
  for (int i = 0; i < d.inputs.n; i++) ir_tensor_free(&d.t[i]);
  return e;
}

/* Four units in the last place of the output's scale: each side rounds
 * the f32 (emu) or exact (eval) sum to the type once. */
static double tolerance(const char *dt) {
  return strcmp(dt, "f16") == 0 ? 4 * 0x1p-11 : strcmp(dt, "bf16") == 0 ? 4 * 0x1p-8 : 0;
}

enum { SPLIT_ANY = -1, SPLIT_NO = 0, SPLIT_YES = 1 };
enum { ASYNC_ANY = -1, ASYNC_NO = 0, ASYNC_YES = 1 };

/* p on tensor cores, compiled by NVRTC and checked on emu; split and
 * async say what the plan must show. */
static void check_conv(const Conv *p, int split, int async) {
  char *text = conv_text(p);
  Ctx c;
  ctx_init(&c);
  Job j = compile_opts(&c, text, 2, (CgOptions){0});
  test_nvrtc(j.cg.source, "sm_90");
  static const char *const mma[] = {"f16", "bf16", "i8", "f32"};
  /* calls, not the prelude's definitions */
  static const char *const fn[] = {"dl_mma_f16(&", "dl_mma_bf16(&", "dl_mma_s8(&", "dl_mma_tf32(&"};
  for (size_t i = 0; i < ARRAY_LEN(mma); i++)
    if (strcmp(p->dt, mma[i]) == 0) ck_assert_msg(strstr(j.cg.source, fn[i]), "%s: no %s", p->what, fn[i]);
  ck_assert_msg(step_with(j.cg.plan, "tensor cores"), "%s: no tensor-core step", p->what);
  if (split != SPLIT_ANY)
    ck_assert_msg(!step_with(j.cg.plan, "split-K") == !split, "%s: split-K %s expected", p->what, split ? "" : "not");
  if (async != ASYNC_ANY)
    ck_assert_msg(!strstr(j.cg.source, "dl_cp_async16(&") == !async, "%s: cp.async %s expected", p->what,
                  async ? "" : "not");
  /* a fixed order: nothing is added by atomics */
  ck_assert(!strstr(j.cg.source, "atomic"));
  double e = run_against_eval(&j, 11);
  if (getenv("DLCC_TEST_VERBOSE")) fprintf(stderr, "%-40s %.3g\n", p->what, e);
  ck_assert_msg(e <= tolerance(p->dt), "%s: %.3g off ir_eval\n%s", p->what, e, text);
  ctx_free(&c);
  free(text);
}

/* ---- convolutions ---- */

#define ONES3 {1, 1, 1}

typedef struct ConvCase {
  Conv conv;
  int split, async;
} ConvCase;

static const ConvCase conv_cases[] = {
    /* M 20, N 2*9*11, K 13*9 = 117: no multiple of a tile, of a chunk (8)
     * or of a stage (32): the weights are staged element by element */
    {{"f16 3x3, K 117", "f16", 2, 2, 13, 20, 1, {9, 11}, {3, 3}, ONES3, {1, 1, 1, 1}, ONES3, .bias = true,
      .relu = true},
     SPLIT_NO, ASYNC_NO},
    {{"f16 1x1, relu prologue", "f16", 2, 1, 64, 48, 1, {6, 7}, {1, 1}, ONES3, {0}, ONES3, .pro = "relu"},
     SPLIT_NO, ASYNC_YES},
    {{"bf16 stride 2, dilation 2, pad 1,2,2,1", "bf16", 2, 2, 16, 24, 1, {11, 10}, {3, 3}, {2, 2}, {1, 2, 2, 1},
      {2, 2}, .bias = true},
     SPLIT_NO, ASYNC_YES},
    {{"bf16, cast of w in the group", "bf16", 2, 1, 16, 32, 1, {6, 6}, {3, 3}, ONES3, {1, 1, 1, 1}, ONES3,
      .w_cast = true, .relu = true},
     SPLIT_ANY, ASYNC_NO},
    /* 64 x 9 outputs over K = 4608: one tile, so K is cut into slices
     * added by a second kernel */
    {{"f16 split-K", "f16", 2, 1, 512, 64, 1, {3, 3}, {3, 3}, ONES3, {1, 1, 1, 1}, ONES3, .bias = true,
      .relu = true},
     SPLIT_YES, ASYNC_YES},
    {{"f16 3-d", "f16", 3, 1, 8, 24, 1, {5, 6, 7}, {3, 3, 3}, ONES3, {1, 1, 1, 1, 1, 1}, ONES3, .relu = true},
     SPLIT_ANY, ASYNC_YES},
    /* 4 groups of 16 output channels over K = 16*9 each: one GEMM per group */
    {{"f16 groups 4", "f16", 2, 2, 64, 64, 4, {6, 6}, {3, 3}, ONES3, {1, 1, 1, 1}, ONES3, .bias = true},
     SPLIT_ANY, ASYNC_YES},
    /* K 5*9 = 45 (no multiple of 16: staged), padding reads the zero point */
    {{"i8 K 45, zero point -3", "i8", 2, 2, 5, 16, 1, {7, 7}, {3, 3}, {2, 2}, {1, 2, 2, 1}, ONES3, .bias = true,
      .zero_point = -3},
     SPLIT_NO, ASYNC_NO},
    {{"i8 split-K", "i8", 2, 1, 1024, 32, 1, {3, 3}, {3, 3}, ONES3, {1, 1, 1, 1}, ONES3, .bias = false},
     SPLIT_YES, ASYNC_YES},
};

START_TEST(conv_on_tensor_cores) {
  const ConvCase *c = &conv_cases[_i];
  check_conv(&c->conv, c->split, c->async);
}
END_TEST

/* text at -O2, through NVRTC, with its products on s8 tensor cores. */
static Job compile_s8(Ctx *c, const char *text) {
  Job j = compile_opts(c, text, 2, (CgOptions){0});
  test_nvrtc(j.cg.source, "sm_90");
  ck_assert_ptr_nonnull(strstr(j.cg.source, "dl_mma_s8(&"));
  return j;
}

/* A quantize before and a requantize after the int8 conv are the one
 * kernel's prologue and epilogue (as a QDQ model has them), exact. */
START_TEST(i8_fused_requantize_chain) {
  const char *text = "graph q {\n"
                     "  %x = input {name=\"x\"} : f32[2, 24, 6, 6]\n"
                     "  %xq = quantize %x {scale=0.01, zero_point=-2} : i8[2, 24, 6, 6]\n"
                     "  %w = input {name=\"w\"} : i8[40, 24, 3, 3]\n"
                     "  %acc = conv2d %xq, %w {pad=[1, 1, 1, 1], zero_point=-2} : i32[2, 40, 6, 6]\n"
                     "  %y = dequantize %acc {scale=1e-4} : f32[2, 40, 6, 6]\n"
                     "  %r = relu %y : f32[2, 40, 6, 6]\n"
                     "  %q = quantize %r {scale=0.02, zero_point=1} : i8[2, 40, 6, 6]\n"
                     "  return %q as \"q\"\n"
                     "}\n";
  Ctx c;
  ctx_init(&c);
  Job j = compile_s8(&c, text);
  ck_assert_int_eq(j.cg.plan->n_steps, 1);
  for (uint64_t seed = 1; seed <= 2; seed++) ck_assert(run_against_eval(&j, seed) == 0);
  ctx_free(&c);
}
END_TEST

/* tf32 only when asked; then within TF32_TOLERANCE of ir_eval (measured
 * on emu: see docs/tensorcores.md), while the default stays exact. */
enum { TF32_TOLERANCE_X1E4 = 10 };

START_TEST(f32_exact_unless_tf32) {
  Conv p = {"f32", "f32", 2, 2, 24, 40, 1, {9, 9}, {3, 3}, ONES3, {1, 1, 1, 1}, ONES3, .bias = true, .relu = true};
  char *text = conv_text(&p);
  for (int tf32 = 0; tf32 < 2; tf32++) {
    Ctx c;
    ctx_init(&c);
    Job j = compile_opts(&c, text, 2, (CgOptions){.tf32 = tf32});
    ck_assert(!strstr(j.cg.source, "dl_mma_tf32(&") == !tf32);
    if (tf32) test_nvrtc(j.cg.source, "sm_90");
    double worst = 0;
    for (uint64_t seed = 1; seed <= 3; seed++) worst = fmax(worst, run_against_eval(&j, seed));
    if (getenv("DLCC_TEST_VERBOSE")) fprintf(stderr, "f32%s: %.3g\n", tf32 ? " tf32" : "", worst);
    ck_assert_msg(worst <= (tf32 ? TF32_TOLERANCE_X1E4 * 1e-4 : 1e-5), "tf32 %d: %.3g", tf32, worst);
    ctx_free(&c);
  }
  free(text);
}
END_TEST

/* What stays off the tensor cores: a group with few channels (the
 * direct loop), and everything under --no-tensor-cores. */
START_TEST(fallbacks) {
  Conv few = {"f16 groups 8 of 4", "f16", 2, 1, 32, 32, 8, {6, 6}, {3, 3}, ONES3, {1, 1, 1, 1}, ONES3, .bias = false};
  Conv plain = {"f16", "f16", 2, 1, 16, 16, 1, {6, 6}, {3, 3}, ONES3, {1, 1, 1, 1}, ONES3, .bias = false};
  const Conv *cs[] = {&few, &plain};
  for (int i = 0; i < 2; i++)
    for (int off = 0; off < 2; off++) {
      if (i == 0 && off) continue;
      char *text = conv_text(cs[i]);
      Ctx c;
      ctx_init(&c);
      Job j = compile_opts(&c, text, 2, (CgOptions){.no_tensor_cores = off});
      bool tc = strstr(j.cg.source, "dl_mma_f16(&") != NULL;
      ck_assert_msg(tc == (i == 1 && !off), "%s, --no-tensor-cores %d: tensor cores %d", cs[i]->what, off, tc);
      ck_assert(run_against_eval(&j, 3) <= tolerance("f16"));
      ctx_free(&c);
      free(text);
    }
}
END_TEST

/* An int8 product cuBLAS refuses (odd leading dimensions) is our kernel,
 * on tensor cores, batched and transposed B included. */
START_TEST(i8_gemm_kernel) {
  const char *text = "graph mm {\n"
                     "  %a = input {name=\"a\"} : i8[3, 5, 37]\n"
                     "  %b = input {name=\"b\"} : i8[3, 37, 9]\n"
                     "  %c = matmul %a, %b : i32[3, 5, 9]\n"
                     "  return %c as \"c\"\n"
                     "}\n";
  Ctx c;
  ctx_init(&c);
  Job j = compile_s8(&c, text);
  ck_assert_ptr_nonnull(strstr(j.cg.source, "_gemm_i8_tc_"));
  ck_assert(run_against_eval(&j, 5) == 0);
  ctx_free(&c);
}
END_TEST

/* ---- the tile heuristic ---- */

static int64_t blocks_of(CgTcTile t, int64_t m, int64_t n, int64_t batch) {
  return (m + t.bm - 1) / t.bm * ((n + t.bn - 1) / t.bn) * batch * t.split;
}

START_TEST(tile_choice) {
  /* ResNet-50 at batch 64: large tiles, no split */
  CgTcTile t = cg_tc_choose(256, 64 * 56 * 56, 64, 1, KTC_F16);
  ck_assert_int_eq(t.split, 1);
  ck_assert_int_ge(t.bm * t.bn, 64 * 128);
  t = cg_tc_choose(512, 64 * 7 * 7, 4608, 1, KTC_F16);
  ck_assert_int_eq(t.split, 1);
  ck_assert_int_ge(blocks_of(t, 512, 64 * 49, 1), CG_TC_TARGET_SMS);
  /* at batch 1 layer 4 has 49 columns: narrow tiles, K split until the
   * SMs have a block each, and each slice keeps 4 stages or more */
  t = cg_tc_choose(512, 49, 4608, 1, KTC_F16);
  ck_assert_int_le(t.bn, 32);
  ck_assert_int_gt(t.split, 1);
  ck_assert_int_ge(blocks_of(t, 512, 49, 1), CG_TC_TARGET_SMS / 2);
  ck_assert_int_le(blocks_of(t, 512, 49, 1), CG_TC_TARGET_SMS);
  ck_assert_int_ge(4608 / 32 / t.split, 4);
  /* a short K is never split; stages follow it */
  t = cg_tc_choose(64, 16, 64, 1, KTC_F16);
  ck_assert_int_eq(t.split, 1);
  ck_assert_int_eq(t.stages, 3);
  /* int8 stages hold 64 elements of K */
  t = cg_tc_choose(64, 16, 128, 1, KTC_S8);
  ck_assert_int_eq(t.stages, 3);
}
END_TEST

static Suite *tcgemm_suite(void) {
  Suite *s = suite_create("tcgemm");
  TCase *t = tcase_create("conv");
  tcase_set_timeout(t, 300);
  tcase_add_loop_test(t, conv_on_tensor_cores, 0, (int)ARRAY_LEN(conv_cases));
  tcase_add_test(t, i8_fused_requantize_chain);
  tcase_add_test(t, f32_exact_unless_tf32);
  tcase_add_test(t, fallbacks);
  tcase_add_test(t, i8_gemm_kernel);
  suite_add_tcase(s, t);
  TCase *h = tcase_create("heuristic");
  tcase_add_test(h, tile_choice);
  suite_add_tcase(s, h);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(tcgemm_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
