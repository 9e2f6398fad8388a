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
#include "check_quiet.h"
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
#include "tests/convcheck.h"
#include "tests/irjob.h"
#include "tests/testutil.h"

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
  /* the wgmma side where the plan says so, and sm_90a compiles it */
  bool wg = conv_step_with(j.cg.plan, "wgmma");
  ck_assert_msg(!strstr(j.cg.source, "dl_wgmma_fence();") == !wg, "%s: wgmma calls %sexpected", p->what,
                wg ? "" : "not ");
  if (wg) test_nvrtc(j.cg.source, "sm_90a");
  if (getenv("DLCC_TEST_VERBOSE")) fprintf(stderr, "%-40s %s\n", p->what, wg ? "wgmma" : "mma.sync");
  static const char *const mma[] = {"f16", "bf16", "i8", "f32"};
  /* calls, not the prelude's definitions */
  static const char *const fn[] = {"dl_mma_f16(&", "dl_mma_bf16(&", "dl_mma_s8(&", "dl_mma_tf32(&"};
  for (size_t i = 0; i < ARRAY_LEN(mma); i++)
    if (strcmp(p->dt, mma[i]) == 0) ck_assert_msg(strstr(j.cg.source, fn[i]), "%s: no %s", p->what, fn[i]);
  ck_assert_msg(conv_step_with(j.cg.plan, "tensor cores"), "%s: no tensor-core step", p->what);
  if (split != SPLIT_ANY)
    ck_assert_msg(!conv_step_with(j.cg.plan, "split-K") == !split, "%s: split-K %s expected", p->what, split ? "" : "not");
  if (async != ASYNC_ANY)
    ck_assert_msg(!strstr(j.cg.source, "dl_cp_async16(&") == !async, "%s: cp.async %s expected", p->what,
                  async ? "" : "not");
  /* a fixed order: nothing is added by atomics */
  ck_assert(conv_no_atomic_sums(j.cg.source));
  ck_assert_msg(!strstr(j.cg.source, "dl_last_arrival(&") == !conv_step_with(j.cg.plan, "split-K"),
                "%s: the slices' counter iff split", p->what);
  double e = conv_run_against_eval(&j, 11);
  if (getenv("DLCC_TEST_VERBOSE")) fprintf(stderr, "%-40s %.3g\n", p->what, e);
  ck_assert_msg(e <= conv_tolerance(p->dt), "%s: %.3g off ir_eval\n%s", p->what, e, text);
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
    /* 128 x 32768 outputs: more 128x128 tiles than SMs, so 128x256 ones
     * (two warpgroups of m64n256; warp tiles of 64x64 on mma.sync) */
    {{"f16 128x256 tiles", "f16", 2, 8, 16, 128, 1, {64, 64}, {3, 3}, ONES3, {1, 1, 1, 1}, ONES3, .bias = true},
     SPLIT_NO, ASYNC_ANY},
};

START_TEST(conv_on_tensor_cores) {
  const ConvCase *c = &conv_cases[_i];
  check_conv(&c->conv, c->split, c->async);
}
END_TEST

/* The same on the emu built as every GPU but sm_90a runs the kernels:
 * their mma.sync side (DLCC_NO_WGMMA=1, as for the cuda device's NVRTC;
 * the emu takes wgmma's by default, as the H200 does). */
START_TEST(conv_on_mma_sync) {
  setenv("DLCC_NO_WGMMA", "1", 1);
  const ConvCase *c = &conv_cases[_i];
  check_conv(&c->conv, c->split, c->async);
}
END_TEST

/* Which tiles take wgmma: warpgroups of whole m64 blocks (BM 64 or
 * 128), N a power of two from 16, f16, bf16 and s8 (tf32 stays on
 * mma.sync), and none under --no-wgmma. */
START_TEST(wgmma_where_it_fits) {
  static const struct {
    const char *dt;
    int co, n_img, hw;
    bool tf32, no_wgmma, want;
    const char *label; /* what the plan must say, or NULL */
  } cases[] = {
      {"f16", 128, 8, 16, false, false, true, NULL}, /* 128 x N tiles */
      {"bf16", 64, 8, 16, false, false, true, NULL},
      {"i8", 128, 8, 16, false, false, true, NULL},
      {"f32", 128, 8, 16, true, false, false, NULL}, /* tf32 */
      {"f16", 128, 8, 16, false, true, false, NULL}, /* --no-wgmma */
      {"f16", 24, 64, 16, false, false, false, NULL}, /* 24 channels, many pixels: 32 x 128 tiles */
      {"f16", 128, 8, 64, false, false, true, "128x256x32, 4 stages, wgmma 64x256 on sm_90a"},
  };
  for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
    Conv p = {"wgmma?", cases[i].dt, 2, cases[i].n_img, 64, cases[i].co, 1, {cases[i].hw, cases[i].hw}, {3, 3},
              ONES3, {1, 1, 1, 1}, ONES3, .bias = true};
    char *text = conv_text(&p);
    Ctx c;
    ctx_init(&c);
    Job j = compile_opts(&c, text, 2, (CgOptions){.tf32 = cases[i].tf32, .no_wgmma = cases[i].no_wgmma});
    ck_assert_msg(conv_step_with(j.cg.plan, "tensor cores"), "case %zu: no tensor-core step", i);
    ck_assert_msg(!conv_step_with(j.cg.plan, "wgmma") == !cases[i].want, "case %zu (%s): wgmma %sexpected", i,
                  cases[i].dt, cases[i].want ? "" : "not ");
    if (cases[i].label) ck_assert_msg(conv_step_with(j.cg.plan, cases[i].label), "case %zu: no '%s'", i, cases[i].label);
    ctx_free(&c);
    free(text);
  }
}
END_TEST

/* The FMA kernel's split-K (f32, and int8 off the tensor cores): one
 * 64x64 tile of outputs over K = 512 * 9, so 16 slices, which the last
 * to finish adds in order before the bias and the group's epilogue, in
 * the one launch; --no-split-k keeps one block on all of K.  Against
 * ir_eval on emu. */
START_TEST(fma_split_k) {
  static const Conv convs[] = {
      {"f32 FMA split-K, bias, bn, residual", "f32", 2, 1, 512, 64, 1, {3, 3}, {3, 3}, ONES3, {1, 1, 1, 1}, ONES3,
       .bias = true, .bn = true, .residual = true},
      {"i8 FMA split-K", "i8", 2, 1, 1024, 32, 1, {3, 3}, {3, 3}, ONES3, {1, 1, 1, 1}, ONES3, .bias = true},
  };
  const Conv *p = &convs[_i / 2];
  bool off = _i % 2;
  char *text = conv_text(p);
  Ctx c;
  ctx_init(&c);
  Job j = compile_opts(&c, text, 2, (CgOptions){.no_tensor_cores = true, .no_split_k = off});
  ck_assert_msg(!conv_step_with(j.cg.plan, "tensor cores"), "%s: a tensor-core step", p->what);
  ck_assert_msg(!conv_step_with(j.cg.plan, "split-K 16") == off, "%s: split-K 16 %sexpected", p->what, off ? "not " : "");
  ck_assert_msg(j.cg.plan->n_steps == 1, "%s: %u steps", p->what, j.cg.plan->n_steps);
  ck_assert_msg(!strstr(j.cg.source, "dl_last_arrival(&") == off, "%s: the slices' counter", p->what);
  ck_assert_msg(j.cg.plan->sync_bytes == (off ? 0 : 4), "%s: %llu bytes of counters", p->what,
                (unsigned long long)j.cg.plan->sync_bytes);
  ck_assert(conv_no_atomic_sums(j.cg.source));
  double e = conv_run_against_eval(&j, 5);
  /* f32: the slices' sums regroup the terms */
  ck_assert_msg(e <= (p->dt[0] == 'i' ? 0 : 1e-5), "%s: %.3g off ir_eval", p->what, e);
  ctx_free(&c);
  free(text);
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
  for (uint64_t seed = 1; seed <= 2; seed++) ck_assert(conv_run_against_eval(&j, seed) == 0);
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
    for (uint64_t seed = 1; seed <= 3; seed++) worst = fmax(worst, conv_run_against_eval(&j, seed));
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
      ck_assert(conv_run_against_eval(&j, 3) <= conv_tolerance("f16"));
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
  ck_assert(conv_run_against_eval(&j, 5) == 0);
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
  tcase_add_loop_test(t, conv_on_mma_sync, 0, (int)ARRAY_LEN(conv_cases));
  tcase_add_test(t, wgmma_where_it_fits);
  tcase_add_loop_test(t, fma_split_k, 0, 4);
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
