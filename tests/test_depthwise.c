/* Depthwise convolutions (codegen/conv_depthwise.c): conv2d with groups
 * equal to its input channels on the tiled kernel, run on emu against
 * ir_eval of the same graph on random inputs, over kernel sizes 3, 5 and
 * 7, strides 1 and 2, dilation, symmetric and asymmetric padding,
 * multipliers 1 and 2, batches 1 and 3, odd image sizes, f32, f16, bf16
 * and int8, the fused prologue and epilogues (bias, batch norm, relu6,
 * a residual add); whether the 16-byte loads are used; what falls back
 * to the direct loop.  And conv_transpose on the tensor cores (strides 1,
 * 2 and 3, output_pad, groups, dilation, 3-d; f16, bf16, int8, tf32) and
 * its direct gather.  Some sources go through NVRTC for sm_90. */
#include "check_quiet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "config.h"
#include "tests/convcheck.h"
#include "tests/irjob.h"
#include "tests/testutil.h"

#define ONES {1, 1, 1}

enum { VEC_ANY = -1, VEC_NO = 0, VEC_YES = 1 };

typedef struct DwCase {
  Conv conv;
  int vec;    /* whether the step must say "16-byte loads" */
  bool nvrtc; /* compile the source for sm_90 too */
} DwCase;

/* n, c, co, groups (= c), in, k, stride, pad [top, left, bottom, right], dilation */
static const DwCase dw_cases[] = {
    {{"f32 3x3 s1, 13x11, bias relu6", "f32", 2, 1, 8, 8, 8, {13, 11}, {3, 3}, ONES, {1, 1, 1, 1}, ONES, .bias = true,
      .relu6 = true},
     VEC_YES, true}, /* W 11: rows start unaligned, checked chunk by chunk */
    {{"f32 3x3 s2, 32x32, bn relu6", "f32", 2, 3, 6, 6, 6, {32, 32}, {3, 3}, {2, 2}, {1, 1, 1, 1}, ONES, .bn = true,
      .relu6 = true},
     VEC_YES, false},
    {{"f32 5x5 s1, 7x7, multiplier 2, residual", "f32", 2, 1, 4, 8, 4, {7, 7}, {5, 5}, ONES, {2, 2, 2, 2}, ONES,
      .bias = true, .residual = true},
     VEC_ANY, false},
    {{"f32 7x7 s2, dilation 2, pad 3,2,1,4, 29x40", "f32", 2, 3, 3, 3, 3, {29, 40}, {7, 7}, {2, 2}, {3, 2, 1, 4},
      {2, 2}, .bias = true},
     VEC_YES, false},
    {{"f32 3x3 dilation 3x1, stride 1x2, no padding", "f32", 2, 1, 5, 10, 5, {17, 23}, {3, 3}, {1, 2}, {0}, {3, 1}, .bias = false},
     VEC_ANY, false},
    {{"f32 relu prologue (x computed)", "f32", 2, 1, 4, 4, 4, {12, 16}, {3, 3}, ONES, {1, 1, 1, 1}, ONES,
      .pro = "relu", .relu6 = true},
     VEC_NO, false},
    {{"f16 3x3 s1, 56x56, bias relu6", "f16", 2, 1, 4, 4, 4, {56, 56}, {3, 3}, ONES, {1, 1, 1, 1}, ONES, .bias = true,
      .relu6 = true},
     VEC_YES, true},
    {{"f16 5x5 s2, 13x11, multiplier 2, bn", "f16", 2, 3, 3, 6, 3, {13, 11}, {5, 5}, {2, 2}, {2, 2, 2, 2}, ONES,
      .bn = true},
     VEC_ANY, false},
    {{"bf16 7x7 s1, 7x7, residual", "bf16", 2, 1, 6, 6, 6, {7, 7}, {7, 7}, ONES, {3, 3, 3, 3}, ONES, .bias = true,
      .residual = true},
     VEC_ANY, true},
    {{"bf16 3x3 s2, dilation 2, 33x48", "bf16", 2, 1, 4, 8, 4, {33, 48}, {3, 3}, {2, 2}, {2, 2, 2, 2}, {2, 2},
      .relu6 = true},
     VEC_YES, false},
    {{"i8 3x3 s1, zero point -3, 16x20", "i8", 2, 1, 4, 4, 4, {16, 20}, {3, 3}, ONES, {1, 1, 1, 1}, ONES,
      .bias = true, .zero_point = -3},
     VEC_ANY, true},
    {{"i8 5x5 s2, multiplier 2, 13x11", "i8", 2, 3, 2, 4, 2, {13, 11}, {5, 5}, {2, 2}, {2, 1, 2, 3}, ONES,
      .zero_point = 5},
     VEC_NO, false},
};

START_TEST(depthwise_against_eval) {
  const DwCase *dc = &dw_cases[_i];
  const Conv *p = &dc->conv;
  char *text = conv_text(p);
  Ctx c;
  ctx_init(&c);
  Job j = compile_opts(&c, text, 2, (CgOptions){0});
  if (dc->nvrtc) test_nvrtc(j.cg.source, "sm_90");
  const char *step = conv_step_with(j.cg.plan, "depthwise");
  ck_assert_msg(step, "%s: no depthwise step", p->what);
  ck_assert_int_eq(j.cg.plan->n_steps, 1);
  if (dc->vec != VEC_ANY)
    ck_assert_msg(!strstr(step, "16-byte loads") == !dc->vec, "%s: %s", p->what, step);
  double e = 0;
  for (uint64_t seed = 1; seed <= 2; seed++) {
    double s = conv_run_against_eval(&j, seed);
    if (s > e) e = s;
  }
  double tol = strcmp(p->dt, "f32") == 0 ? 1e-5 : conv_tolerance(p->dt);
  if (getenv("DLCC_TEST_VERBOSE")) fprintf(stderr, "%-48s %.3g\n", p->what, e);
  ck_assert_msg(e <= tol, "%s: %.3g off ir_eval\n%s", p->what, e, text);
  ctx_free(&c);
  free(text);
}
END_TEST

/* A grouped conv that is not depthwise (2 input channels a group) and a
 * depthwise one whose staged tile would pass the shared memory it may
 * take stay on the direct loop, and still agree. */
START_TEST(direct_fallbacks) {
  Conv grouped = {"f32 groups 4 of 2", "f32", 2, 1, 8, 8, 4, {9, 9}, {3, 3}, ONES, {1, 1, 1, 1}, ONES, .bias = false};
  Conv wide = {"f32 dilation 40", "f32", 2, 1, 2, 2, 2, {90, 90}, {3, 3}, ONES, {40, 40, 40, 40}, {40, 40}, .bias = false};
  const Conv *cs[] = {&grouped, &wide};
  for (int i = 0; i < 2; i++) {
    char *text = conv_text(cs[i]);
    Ctx c;
    ctx_init(&c);
    Job j = compile_opts(&c, text, 2, (CgOptions){0});
    ck_assert_msg(!conv_step_with(j.cg.plan, "depthwise"), "%s", cs[i]->what);
    ck_assert(conv_run_against_eval(&j, 4) <= 1e-5);
    ctx_free(&c);
    free(text);
  }
}
END_TEST

/* ---- conv_transpose on tensor cores ---- */

typedef struct TrCase {
  Conv conv;
  bool tf32;
  bool nvrtc;  /* compile the source for sm_90 too */
  bool phases; /* by stride phase (a stride above 1, prime to the dilation) */
} TrCase;

/* n, c, co, groups, in, k, stride, pad, dilation; output_pad last */
static const TrCase tr_cases[] = {
    {{"f16 3x3 s1, K 24*9, bias relu", "f16", 2, 2, 24, 20, 1, {7, 9}, {3, 3}, ONES, {1, 1, 1, 1}, ONES, .bias = true,
      .relu = true, .transpose = true},
     false, true, false},
    {{"f16 4x4 s2 pad 1, output_pad 1", "f16", 2, 1, 32, 16, 1, {6, 5}, {4, 4}, {2, 2}, {1, 1, 1, 1}, ONES,
      .bias = true, .transpose = true, .opad = {1, 1}},
     false, false, true},
    {{"bf16 3x3 s3, dilation 2, pad 2,1,0,3, output_pad 2,1", "bf16", 2, 3, 16, 24, 1, {5, 4}, {3, 3}, {3, 3},
      {2, 1, 0, 3}, {2, 2}, .bias = false, .transpose = true, .opad = {2, 1}},
     false, false, true},
    {{"bf16 groups 2 of 16, s2", "bf16", 2, 1, 32, 32, 2, {5, 5}, {3, 3}, {2, 2}, {1, 1, 1, 1}, ONES, .bias = true,
      .transpose = true, .opad = {1, 0}},
     false, false, true},
    {{"i8 4x4 s2, bias", "i8", 2, 2, 20, 24, 1, {5, 6}, {4, 4}, {2, 2}, {1, 0, 2, 1}, ONES, .bias = true,
      .transpose = true},
     false, true, true},
    {{"f16 3-d 3x3x3 s2", "f16", 3, 1, 16, 16, 1, {3, 4, 5}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1, 1, 1, 1}, ONES,
      .bias = false, .transpose = true, .opad = {1, 1, 1}},
     false, false, true},
    {{"f32 under --tf32, s2", "f32", 2, 2, 24, 16, 1, {6, 6}, {3, 3}, {2, 2}, {1, 1, 1, 1}, ONES, .bias = true,
      .transpose = true, .opad = {1, 1}},
     true, true, true},
    /* the gather: a dilation that shares a factor with the stride */
    {{"f16 3x3 s2 dilation 2 (gather)", "f16", 2, 1, 16, 16, 1, {5, 6}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {2, 2},
      .bias = true, .transpose = true, .opad = {1, 0}},
     false, true, false},
    {{"f16 3x3 s2 (ragged phases: 2 and 1 taps), odd output, relu", "f16", 2, 2, 16, 16, 1, {5, 6}, {3, 3},
      {2, 2}, {1, 1, 1, 1}, ONES, .bias = true, .relu = true, .transpose = true, .opad = {0, 1}},
     false, true, true},
    {{"bf16 2x2 s3 (a phase with no tap)", "bf16", 2, 1, 16, 16, 1, {4, 5}, {2, 2}, {3, 3}, {0}, ONES,
      .bias = true, .transpose = true, .opad = {2, 1}},
     false, false, true},
    /* by stride phase */
    {{"f16 2x2 s2 phases, bias relu", "f16", 2, 2, 32, 16, 1, {5, 6}, {2, 2}, {2, 2}, {0}, ONES, .bias = true,
      .relu = true, .transpose = true},
     false, true, true},
    {{"bf16 4x4 s2 pad 1 phases, residual", "bf16", 2, 1, 16, 24, 1, {5, 4}, {4, 4}, {2, 2}, {1, 1, 1, 1}, ONES,
      .bias = true, .residual = true, .transpose = true},
     false, false, true},
    {{"i8 4x4 s2 pad 1 phases, bias", "i8", 2, 2, 20, 24, 1, {4, 5}, {4, 4}, {2, 2}, {1, 1, 1, 1}, ONES,
      .bias = true, .transpose = true},
     false, true, true},
    {{"f16 groups 2 of 16, 2x2 s2 phases", "f16", 2, 1, 32, 32, 2, {5, 5}, {2, 2}, {2, 2}, {0}, ONES,
      .bias = true, .transpose = true},
     false, false, true},
    {{"bf16 3-d 2x2x2 s2 phases", "bf16", 3, 1, 16, 16, 1, {3, 4, 3}, {2, 2, 2}, {2, 2, 2}, {0}, ONES,
      .bias = false, .transpose = true},
     false, false, true},
    {{"f16 4x4 s2 dilation 3 pad 3 phases", "f16", 2, 1, 16, 16, 1, {5, 5}, {4, 4}, {2, 2}, {3, 3, 3, 3},
      {3, 3}, .bias = true, .transpose = true},
     false, false, true},
    {{"bf16 3x3 s3 dilation 2 phases (tap order by dilation's inverse)", "bf16", 2, 1, 16, 16, 1, {4, 5}, {3, 3},
      {3, 3}, {1, 1, 1, 1}, {2, 2}, .bias = true, .transpose = true},
     false, false, true},
    {{"f16 4x3 stride 2x1 phases", "f16", 2, 2, 16, 16, 1, {5, 6}, {4, 3}, {2, 1}, {1, 1, 1, 1}, ONES,
      .bias = true, .transpose = true},
     false, false, true},
    {{"f32 under --tf32, 2x2 s2 phases", "f32", 2, 2, 24, 16, 1, {6, 6}, {2, 2}, {2, 2}, {0}, ONES, .bias = true,
      .transpose = true},
     true, false, true},
};

/* Measured on emu as the convolutions' (docs/tensorcores.md). */
enum { TF32_TOLERANCE_X1E4 = 10 };

START_TEST(conv_transpose_on_tensor_cores) {
  const TrCase *tc = &tr_cases[_i];
  const Conv *p = &tc->conv;
  char *text = conv_text(p);
  Ctx c;
  ctx_init(&c);
  Job j = compile_opts(&c, text, 2, (CgOptions){.tf32 = tc->tf32});
  if (tc->nvrtc) test_nvrtc(j.cg.source, "sm_90");
  static const char *const dts[] = {"f16", "bf16", "i8", "f32"};
  static const char *const fn[] = {"dl_mma_f16(&", "dl_mma_bf16(&", "dl_mma_s8(&", "dl_mma_tf32(&"};
  for (size_t i = 0; i < ARRAY_LEN(dts); i++)
    if (strcmp(p->dt, dts[i]) == 0) ck_assert_msg(strstr(j.cg.source, fn[i]), "%s: no %s", p->what, fn[i]);
  ck_assert_msg(conv_step_with(j.cg.plan, tc->phases ? "implicit gemm (stride phases), tensor cores"
                                                    : "implicit gemm (gather), tensor cores"),
                "%s", p->what);
  double e = 0;
  for (uint64_t seed = 1; seed <= 2; seed++) {
    double s = conv_run_against_eval(&j, seed);
    if (s > e) e = s;
  }
  double tol = tc->tf32 ? TF32_TOLERANCE_X1E4 * 1e-4 : conv_tolerance(p->dt);
  if (getenv("DLCC_TEST_VERBOSE")) fprintf(stderr, "%-48s %.3g\n", p->what, e);
  ck_assert_msg(e <= tol, "%s: %.3g off ir_eval\n%s", p->what, e, text);
  ctx_free(&c);
  free(text);
}
END_TEST

/* The same cases off the tensor cores (--no-tensor-cores), every float
 * one on the FMA GEMM (fma_gemm.c) with the same operand callbacks:
 * the phases or the gather, f32 sums rounded once to the result's type. */
START_TEST(conv_transpose_on_fma) {
  const TrCase *tc = &tr_cases[_i];
  const Conv *p = &tc->conv;
  bool i8 = strcmp(p->dt, "i8") == 0; /* the direct gather, exact int32 sums */
  char *text = conv_text(p);
  Ctx c;
  ctx_init(&c);
  Job j = compile_opts(&c, text, 2, (CgOptions){.no_tensor_cores = true});
  ck_assert_msg(!conv_step_with(j.cg.plan, "tensor cores"), "%s", p->what);
  ck_assert_msg(!conv_step_with(j.cg.plan, tc->phases ? "implicit gemm (stride phases), fma"
                                                     : "implicit gemm (gather), fma") == i8,
                "%s", p->what);
  double tol = strcmp(p->dt, "f32") == 0 ? 1e-5 : i8 ? 0 : conv_tolerance(p->dt);
  double e = conv_run_against_eval(&j, 3);
  if (getenv("DLCC_TEST_VERBOSE")) fprintf(stderr, "fma %-44s %.3g\n", p->what, e);
  ck_assert_msg(e <= tol, "%s: %.3g off ir_eval\n%s", p->what, e, text);
  ctx_free(&c);
  free(text);
}
END_TEST

/* The direct gather: groups of fewer than 16 output channels, int8
 * without the tensor cores (exact int32 sums); f32 without --tf32 takes
 * the FMA GEMM. */
START_TEST(conv_transpose_direct) {
  Conv f32 = {"f32 s2", "f32", 2, 1, 16, 16, 1, {5, 5}, {3, 3}, {2, 2}, {1, 1, 1, 1}, ONES, .bias = true,
              .transpose = true, .opad = {1, 1}};
  Conv few = {"f16 groups 4 of 4", "f16", 2, 1, 16, 16, 4, {5, 5}, {3, 3}, {2, 2}, {1, 1, 1, 1}, ONES,
              .bias = false, .transpose = true};
  Conv i8 = {"i8 s2", "i8", 2, 1, 16, 16, 1, {5, 5}, {3, 3}, {2, 2}, {1, 1, 1, 1}, ONES, .bias = true,
             .transpose = true, .opad = {1, 1}};
  const Conv *cs[] = {&f32, &few, &i8};
  for (int i = 0; i < 3; i++) {
    char *text = conv_text(cs[i]);
    Ctx c;
    ctx_init(&c);
    Job j = compile_opts(&c, text, 2, (CgOptions){.no_tensor_cores = i == 2});
    ck_assert_msg(!conv_step_with(j.cg.plan, "tensor cores"), "%s", cs[i]->what);
    double tol = strcmp(cs[i]->dt, "f32") == 0 ? 1e-5 : conv_tolerance(cs[i]->dt);
    ck_assert_msg(conv_run_against_eval(&j, 6) <= tol, "%s", cs[i]->what);
    ctx_free(&c);
    free(text);
  }
}
END_TEST

static Suite *depthwise_suite(void) {
  Suite *s = suite_create("depthwise");
  TCase *t = tcase_create("depthwise");
  tcase_set_timeout(t, 300);
  tcase_add_loop_test(t, depthwise_against_eval, 0, (int)ARRAY_LEN(dw_cases));
  tcase_add_test(t, direct_fallbacks);
  suite_add_tcase(s, t);
  TCase *tr = tcase_create("conv_transpose");
  tcase_set_timeout(tr, 300);
  tcase_add_loop_test(tr, conv_transpose_on_tensor_cores, 0, (int)ARRAY_LEN(tr_cases));
  tcase_add_loop_test(tr, conv_transpose_on_fma, 0, (int)ARRAY_LEN(tr_cases));
  tcase_add_test(tr, conv_transpose_direct);
  suite_add_tcase(s, tr);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(depthwise_suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
