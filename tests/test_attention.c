/* Check suite for the attention op and its FlashAttention-style kernel
 * (codegen/attention.c): on emu against ir_eval in f32 (1e-5), f16
 * (1e-2) and bf16 (2e-2) for every mask (none, causal, additive, bool,
 * key padding, rows with every key masked), Sq != Sk, Sk = 1, lengths
 * that are no multiple of a tile, fewer key/value heads than query
 * heads, d = 64, 128 and 256; NVRTC compiles each for sm_90; the f16 and
 * bf16 kernels use mma.sync and ldmatrix; the cost report's FLOPs; the
 * shape rule's messages. */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/kernel.h"
#include "ir/ir.h"
#include "tests/testutil.h"

typedef struct Job {
  const char *text;
  Graph *g;
  CgResult r;
  bool ok;
} Job;

static Ctx ctx;
static void setup(void) { ctx_init(&ctx); }
static void teardown(void) { ctx_free(&ctx); }

static int run_job(Ctx *c, void *data) {
  Job *j = data;
  j->g = ir_parse(c, ctx_add_file(c, "test.ir", j->text, strlen(j->text)));
  if (!j->g || !ir_verify(j->g)) return 0;
  j->ok = cg_compile(j->g, &j->r);
  return 0;
}

static double tolerance(DType dt) { return dt == TY_F32 ? 1e-5 : dt == TY_F16 ? 1e-2 : 2e-2; }

/* One attention of q [B, H, Sq, d], k and v [B, Hkv, Sk, d] in dt, with
 * attrs and, when mask_type is not NULL, a mask input of that type
 * (%1$s in it is dt's name). */
static Job compile_attention(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t d,
                             const char *attrs, const char *mask_type) {
  const char *t = ir_dtype_name(dt);
  char mask[128] = "", mask_in[160] = "";
  if (mask_type) {
    snprintf(mask, sizeof mask, mask_type, t);
    snprintf(mask_in, sizeof mask_in, "  %%m = input {name=\"m\"} : %s\n", mask);
  }
  char *s = arena_printf(&ctx.arena,
                         "graph attn {\n"
                         "  %%q = input {name=\"q\"} : %s[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]\n"
                         "  %%k = input {name=\"k\"} : %s[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]\n"
                         "  %%v = input {name=\"v\"} : %s[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]\n"
                         "%s"
                         "  %%0 = attention %%q, %%k, %%v%s %s : %s[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]\n"
                         "  return %%0 as \"o\"\n"
                         "}\n",
                         t, B, H, Sq, d, t, B, Hkv, Sk, d, t, B, Hkv, Sk, d, mask_in, mask_type ? ", %m" : "",
                         attrs, t, B, H, Sq, d);
  Job j = {.text = s};
  int rc = ctx_guard(&ctx, run_job, &j);
  ck_assert_msg(rc == 0 && j.ok, "compile failed:\n%s\n%s", s, diag_text(&ctx));
  return j;
}

/* Compiled (NVRTC for sm_90 too) and run on emu against the interpreter,
 * inputs in [-2, 2) (a bool mask half true). */
static Job check(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t d, const char *attrs,
                 const char *mask_type) {
  Job j = compile_attention(dt, B, H, Hkv, Sq, Sk, d, attrs, mask_type);
  test_nvrtc(j.r.source, "sm_90");
  ck_assert(test_emu_matches_eval(j.g, j.r.plan, 29, -2, 2, tolerance(dt)));
  return j;
}

static const DType dtypes[] = {TY_F32, TY_F16, TY_BF16};

/* Masks: causal (over three blocks of query rows), bool and additive
 * per query and key, and both with causal, in each dtype.  One key/value
 * head for two query heads (multi-query). */
START_TEST(masks) {
  DType dt = dtypes[_i];
  check(dt, 1, 2, 1, 130, 130, 64, "{causal=1}", NULL);
  check(dt, 1, 2, 1, 70, 70, 64, "", "bool[1, 2, 70, 70]");
  check(dt, 1, 2, 1, 70, 70, 64, "{causal=1}", "%s[70, 70]");
}
END_TEST

/* PyTorch's key_padding_mask as a bool [B, 1, 1, Sk] (true: attend), two
 * batches; rows whose every key is masked (a bool [Sq, 1]) give zeros. */
START_TEST(padding) {
  DType dt = dtypes[_i];
  check(dt, 2, 2, 2, 33, 70, 64, "", "bool[2, 1, 1, 70]");
  check(dt, 1, 2, 2, 40, 70, 64, "{causal=1}", "bool[40, 1]");
}
END_TEST

/* Sq != Sk both ways, Sk = 1, lengths no multiple of a tile, grouped
 * query heads (4 over 2), a scale of its own. */
START_TEST(lengths) {
  DType dt = dtypes[_i];
  check(dt, 1, 4, 2, 5, 70, 64, "{scale=0.3}", NULL);
  check(dt, 1, 2, 1, 70, 1, 64, "", NULL);
  check(dt, 1, 2, 1, 70, 3, 64, "{causal=1}", NULL);
}
END_TEST

/* Head dims: 128, 256 (the largest), and 40 and 20 (no whole K step;
 * 20: no whole 16-byte chunk, element loads). */
START_TEST(head_dims) {
  DType dt = dtypes[_i];
  check(dt, 1, 2, 1, 70, 70, 128, "{causal=1}", NULL);
  check(dt, 1, 1, 1, 66, 66, 256, "", "%s[1, 1, 66, 66]");
  check(dt, 1, 2, 2, 17, 70, 40, "", NULL);
  check(dt, 1, 2, 2, 17, 20, 20, "{causal=1}", NULL);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("attention");
  TCase *tc = tcase_create("emu");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, masks, 0, 3);
  tcase_add_loop_test(tc, padding, 0, 3);
  tcase_add_loop_test(tc, lengths, 0, 3);
  tcase_add_loop_test(tc, head_dims, 0, 3);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
