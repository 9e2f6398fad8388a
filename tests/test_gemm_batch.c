/* Check suite for codegen/gemm_batch.c: linears that read one input
 * become one strided-batched GEMM (the plan's steps, strides and
 * per-batch bias), in f32, f16, bf16 and int8, unfused (the bias in
 * cuBLASLt's epilogue), fused (the group's kernel adds it) and under an
 * activation epilogue, run on emu against ir_eval on random inputs; the
 * linears that must stay apart; the example blocks' launch counts. */
#include "check_quiet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "frontend/ast.h"
#include "ir/ir.h"
#include "passes/pass.h"
#include "tests/irjob.h"
#include "tests/testutil.h"

static Ctx ctx;

static void setup(void) { ctx_init(&ctx); }
static void teardown(void) { ctx_free(&ctx); }

static double tolerance(DType dt) { return dt == TY_F32 ? 1e-5 : dt == TY_F16 ? 1e-2 : 2e-2; }

static const RtStep *only_gemm(const RtPlan *p, int *count) {
  const RtStep *g = NULL;
  *count = 0;
  for (uint32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind == RT_STEP_GEMM) g = &p->steps[i], ++*count;
  return g;
}

/* q, k, v = three linears of x (with biases or not), y = q * k * v: a
 * product, so that the fused kernel's unrounded f32 intermediates stay
 * within the half types' tolerance of ir_eval's rounded ones. */
static char *qkv_text(const char *dt, bool bias) {
  static char buf[2048];
  char *at = buf;
  at += sprintf(at, "graph qkv {\n  %%x = input {name=\"x\"} : %s[2, 5, 24]\n", dt);
  const char *names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++) {
    at += sprintf(at, "  %%w%s = param {name=\"%s.weight\"} : %s[16, 24]\n", names[i], names[i], dt);
    if (bias) at += sprintf(at, "  %%b%s = param {name=\"%s.bias\"} : %s[16]\n", names[i], names[i], dt);
    at += sprintf(at, "  %%%s = linear %%x, %%w%s%s%s : %s[2, 5, 16]\n", names[i], names[i], bias ? ", %b" : "",
                  bias ? names[i] : "", dt);
  }
  sprintf(at,
          "  %%s = mul %%q, %%k : %s[2, 5, 16]\n"
          "  %%y = mul %%s, %%v : %s[2, 5, 16]\n"
          "  return %%y as \"y\"\n}\n",
          dt, dt);
  return buf;
}

/* One GEMM of batch 3 (A shared, each result 256-byte aligned), on emu
 * as ir_eval; three GEMMs with --no-gemm-batch, the same numbers.  -O0:
 * the biases in the GEMM's epilogue, one per batch; -O2: the fused
 * kernel adds them, the GEMM none. */
START_TEST(qkv_is_one_gemm) {
  static const DType dts[] = {TY_F32, TY_F16, TY_BF16};
  for (size_t d = 0; d < 3; d++)
    for (int level = 0; level <= 2; level += 2)
      for (int bias = 0; bias < 2; bias++) {
        const char *text = qkv_text(ir_dtype_name(dts[d]), bias);
        Job j = compile_at(&ctx, text, level);
        int n;
        const RtStep *s = only_gemm(j.cg.plan, &n);
        ck_assert_int_eq(n, 1);
        const RtGemm *g = &s->gemm;
        ck_assert_int_eq(g->batch, 3);
        ck_assert_int_eq(g->m, 10);
        ck_assert_int_eq(g->n, 16);
        ck_assert_int_eq(g->k, 24);
        ck_assert_int_eq(g->stride_a, 0);
        int64_t es = ir_dtype_size(dts[d]);
        ck_assert_int_eq(g->stride_b * es, 256 * ((384 * es + 255) / 256));
        ck_assert_int_eq(g->stride_c * es, 256 * ((160 * es + 255) / 256));
        ck_assert_uint_eq(g->epilogue, bias && level == 0 ? RT_EPILOGUE_BIAS : RT_EPILOGUE_NONE);
        ck_assert_int_eq(g->stride_bias * es, bias && level == 0 ? 256 : 0);
        ck_assert_str_eq(s->label, bias ? "linear %3 with %6 %9" : "linear %2 with %4 %6");
        test_emu_matches_eval(j.g, j.cg.plan, 5 + d, -1, 1, tolerance(dts[d]));
        Job apart = compile_opts(&ctx, text, level, (CgOptions){.no_gemm_batch = true});
        only_gemm(apart.cg.plan, &n);
        ck_assert_int_eq(n, 3);
        test_emu_matches_eval(apart.g, apart.cg.plan, 5 + d, -1, 1, tolerance(dts[d]));
      }
}
END_TEST

/* q, k and v as an ONNX export writes them, MatMul by a [K, N] weight
 * then Add of a bias vector: simplify makes each a linear (the weight
 * transposed once, with the weights) so that they batch as one GEMM; the
 * plan on emu computes what the graph as written does.  A lone product
 * stays a matmul. */
START_TEST(onnx_style_qkv_is_one_gemm) {
  static const DType dts[] = {TY_F32, TY_F16, TY_BF16};
  for (size_t d = 0; d < 3; d++)
    for (int bias = 0; bias < 2; bias++) {
      const char *dt = ir_dtype_name(dts[d]);
      char text[2048], *at = text;
      at += sprintf(at, "graph qkv {\n  %%x = input {name=\"x\"} : %s[2, 5, 24]\n", dt);
      const char *names[] = {"q", "k", "v"};
      for (int i = 0; i < 3; i++) {
        at += sprintf(at, "  %%w%s = param {name=\"%s.weight\"} : %s[24, 16]\n", names[i], names[i], dt);
        at += sprintf(at, "  %%m%s = matmul %%x, %%w%s : %s[2, 5, 16]\n", names[i], names[i], dt);
        if (bias)
          at += sprintf(at,
                        "  %%b%s = param {name=\"%s.bias\"} : %s[16]\n"
                        "  %%%s = add %%m%s, %%b%s : %s[2, 5, 16]\n",
                        names[i], names[i], dt, names[i], names[i], names[i], dt);
        else
          at += sprintf(at, "  %%%s = relu %%m%s : %s[2, 5, 16]\n", names[i], names[i], dt);
      }
      sprintf(at,
              "  %%s = mul %%q, %%k : %s[2, 5, 16]\n"
              "  %%y = mul %%s, %%v : %s[2, 5, 16]\n"
              "  return %%y as \"y\"\n}\n",
              dt, dt);
      Job j = compile_at(&ctx, text, 2);
      int n;
      const RtStep *s = only_gemm(j.cg.plan, &n);
      ck_assert_int_eq(n, 1);
      ck_assert_int_eq(s->gemm.batch, 3);
      ck_assert_int_eq(s->gemm.trans_b, 1);
      Job as_written = compile_at(&ctx, text, -1);
      test_emu_matches_eval(as_written.g, j.cg.plan, 11 + d, -1, 1, tolerance(dts[d]));
    }
  /* one product by a weight: nothing to batch, no transpose made */
  Job lone = compile_at(&ctx,
                        "graph one {\n  %x = input {name=\"x\"} : f32[3, 8]\n"
                        "  %w = param {name=\"w\"} : f32[8, 4]\n"
                        "  %y = matmul %x, %w : f32[3, 4]\n  return %y as \"y\"\n}\n",
                        2);
  int n;
  only_gemm(lone.cg.plan, &n);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(lone.cg.plan->n_init_steps, 0);
}
END_TEST

/* Two linears each under its relu: one GEMM, cuBLASLt's relu+bias
 * epilogue with one bias per batch, writing both relus side by side for
 * the product after them. */
START_TEST(activation_epilogues_batch) {
  const char *text = "graph two {\n"
                     "  %x = input {name=\"x\"} : f32[6, 40]\n"
                     "  %w1 = param {name=\"a.weight\"} : f32[24, 40]\n"
                     "  %b1 = param {name=\"a.bias\"} : f32[24]\n"
                     "  %w2 = param {name=\"b.weight\"} : f32[24, 40]\n"
                     "  %b2 = param {name=\"b.bias\"} : f32[24]\n"
                     "  %0 = linear %x, %w1, %b1 : f32[6, 24]\n"
                     "  %1 = relu %0 : f32[6, 24]\n"
                     "  %2 = linear %x, %w2, %b2 : f32[6, 24]\n"
                     "  %3 = relu %2 : f32[6, 24]\n"
                     "  %4 = matmul %1, %3 {trans_b=1} : f32[6, 6]\n"
                     "  return %4 as \"y\"\n"
                     "}\n";
  Job j = compile_at(&ctx, text, 2);
  const RtPlan *p = j.cg.plan;
  ck_assert_int_eq(p->n_steps, 2);
  const RtGemm *g = &p->steps[0].gemm;
  ck_assert_int_eq(g->batch, 2);
  ck_assert_uint_eq(g->epilogue, RT_EPILOGUE_RELU_BIAS);
  ck_assert_int_eq(g->stride_bias, 64);
  ck_assert_int_eq(g->stride_c, 192);
  /* the product reads the two relus where the GEMM wrote them */
  ck_assert_int_eq(p->steps[1].gemm.a.offset, g->c.offset);
  ck_assert_int_eq(p->steps[1].gemm.b.offset, g->c.offset + 192 * 4);
  test_emu_matches_eval(j.g, p, 3, -1, 1, 1e-5);
}
END_TEST

/* int8 products batch too (their int32 biases added by kernels after),
 * exact; K = 30 makes them a kernel of ours, not cuBLAS's. */
START_TEST(int8_products_batch) {
  const char *text = "graph q8 {\n"
                     "  %x = input {name=\"x\"} : i8[4, 30]\n"
                     "  %w1 = param {name=\"a.weight\"} : i8[12, 30]\n"
                     "  %b1 = param {name=\"a.bias\"} : i32[12]\n"
                     "  %w2 = param {name=\"b.weight\"} : i8[12, 30]\n"
                     "  %b2 = param {name=\"b.bias\"} : i32[12]\n"
                     "  %0 = linear %x, %w1, %b1 : i32[4, 12]\n"
                     "  %1 = linear %x, %w2, %b2 : i32[4, 12]\n"
                     "  %2 = mul %0, %1 : i32[4, 12]\n"
                     "  return %2 as \"y\"\n"
                     "}\n";
  for (int level = 0; level <= 2; level += 2) {
    Job j = compile_at(&ctx, text, level);
    const RtPlan *p = j.cg.plan;
    int gemms, batched = 0;
    only_gemm(p, &gemms);
    ck_assert_int_eq(gemms, 0);
    for (uint32_t i = 0; i < p->n_steps; i++) batched += strncmp(p->steps[i].label, "linear %5 with %6,", 18) == 0;
    ck_assert_int_eq(batched, 1);
    test_emu_matches_eval(j.g, p, 9, 0, 100, 0);
  }
}
END_TEST

/* What stays apart: a weight computed from an input (it would not be
 * ready before the run), other out features, a linear that is an output
 * of the graph (its bytes are the caller's), a linear beyond a product
 * that reads the others (batched, its result would live from the first
 * member on: --recompute's clones are such linears). */
START_TEST(what_stays_apart) {
  const char *text = "graph apart {\n"
                     "  %x = input {name=\"x\"} : f32[4, 8]\n"
                     "  %u = input {name=\"u\"} : f32[8, 8]\n"
                     "  %w1 = param {name=\"a.weight\"} : f32[8, 8]\n"
                     "  %w2 = param {name=\"b.weight\"} : f32[6, 8]\n"
                     "  %w3 = param {name=\"c.weight\"} : f32[8, 8]\n"
                     "  %w4 = param {name=\"d.weight\"} : f32[8, 8]\n"
                     "  %0 = linear %x, %w1 : f32[4, 8]\n"
                     "  %1 = linear %x, %u : f32[4, 8]\n"
                     "  %2 = linear %x, %w2 : f32[4, 6]\n"
                     "  %3 = linear %x, %w3 : f32[4, 8]\n"
                     "  %4 = add %0, %1 : f32[4, 8]\n"
                     "  %5 = matmul %4, %4 {trans_b=1} : f32[4, 4]\n"
                     "  %6 = linear %x, %w4 : f32[4, 8]\n"
                     "  %7 = matmul %5, %6 : f32[4, 8]\n"
                     "  return %7 as \"y\", %2 as \"z\", %3 as \"o\"\n"
                     "}\n";
  Job j = compile_at(&ctx, text, 0);
  int n;
  only_gemm(j.cg.plan, &n);
  ck_assert_int_eq(n, 7);
  for (uint32_t i = 0; i < j.cg.plan->n_steps; i++)
    if (j.cg.plan->steps[i].kind == RT_STEP_GEMM) ck_assert_int_eq(j.cg.plan->steps[i].gemm.batch, 1);
  test_emu_matches_eval(j.g, j.cg.plan, 4, -1, 1, 1e-5);
}
END_TEST

/* The blocks of examples/: their q, k, v projections (Llama's k and v,
 * and its gate and up) as one GEMM each, the blocks on emu as ir_eval. */
static int example_job(Ctx *c, void *data) {
  Job *j = data;
  j->g = test_lower_example(c, j->text, 0, NULL);
  if (!j->g) return 1;
  PassOptions po = {.opt_level = 2};
  if (!pass_run_pipeline(j->g, &po, NULL)) return 1;
  j->ok = cg_compile_opts(j->g, &j->opts, &j->cg);
  return 0;
}

START_TEST(example_blocks) {
  static const struct {
    const char *file;
    int steps, batched;
  } blocks[] = {{"transformer.dl", 7, 1}, {"bert_layer.dl", 8, 1}, {"llama_block.dl", 23, 2}};
  for (size_t i = 0; i < ARRAY_LEN(blocks); i++) {
    Job j = {.text = blocks[i].file};
    ck_assert_msg(ctx_guard(&ctx, example_job, &j) == 0 && j.ok, "%s: %s", blocks[i].file, diag_text(&ctx));
    int batched = 0;
    for (uint32_t s = 0; s < j.cg.plan->n_steps; s++)
      batched += j.cg.plan->steps[s].kind == RT_STEP_GEMM && j.cg.plan->steps[s].gemm.batch > 1;
    ck_assert_msg((int)j.cg.plan->n_steps <= blocks[i].steps, "%s: %u steps", blocks[i].file, j.cg.plan->n_steps);
    ck_assert_int_eq(batched, blocks[i].batched);
    if (i > 0) test_emu_matches_eval(j.g, j.cg.plan, 21, -1, 1, 1e-5);
  }
}
END_TEST

static Suite *gemm_batch_suite(void) {
  Suite *s = suite_create("gemm_batch");
  TCase *t = tcase_create("batches");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_set_timeout(t, 120);
  tcase_add_test(t, qkv_is_one_gemm);
  tcase_add_test(t, onnx_style_qkv_is_one_gemm);
  tcase_add_test(t, activation_epilogues_batch);
  tcase_add_test(t, int8_products_batch);
  tcase_add_test(t, what_stays_apart);
  tcase_add_test(t, example_blocks);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(gemm_batch_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
